"""The hardened model's files: the model at the output path, a state_dict and its model card beside it.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.errors import PrivgateError
from privgate.io.atomic import write_together
from privgate.io.guards import Named, same_file

if TYPE_CHECKING:
    from torch import nn


def default_output(model_path: str | Path) -> Path:
    """``model.pt`` → ``model.hardened.pt`` next to the input; ``model.pt2`` → ``model.hardened.pt2``."""
    p = Path(model_path)
    return p.with_name(f"{p.stem}.hardened{'.pt2' if p.suffix.lower() == '.pt2' else '.pt'}")


def state_dict_path(output: str | Path) -> Path:
    """Where the state_dict goes for a TorchScript output path: ``x.pt`` → ``x.state_dict.pt``."""
    p = Path(output)
    return p.with_name(f"{p.stem}.state_dict{'.pt' if p.suffix.lower() in ('', '.pt2') else p.suffix}")


def files_named(output: str | Path) -> dict[Path, str]:
    """Every file of a hardened model at ``output``, with what it is (for messages and output guards)."""
    from privgate.dp.card import card_path

    fallback = {Path(output).with_suffix(".pt"): "hardened model as TorchScript (it cannot export)"}
    return {
        Path(output): "hardened model",
        **(fallback if Path(output).suffix.lower() == ".pt2" else {}),
        state_dict_path(output): "hardened model's state_dict",
        card_path(output): "hardened model's card (DP statement)",
    }


def recipe_is_module(model: Any) -> bool:
    """Whether hardening ``model`` imports its recipe (``module:attr``); a language model's recipe is a YAML file."""
    from privgate.inputs.targets import is_huggingface

    return not is_huggingface(model)


@dataclass(frozen=True)
class HardenedOutputs:
    """Where a hardened model goes, planned before any work.

    Attributes:
        planned: the paths it is written to, with what each is.
        inputs: files beyond the audit's inputs the outputs must not overwrite (a language model's recipe file).
    """

    planned: list[Named]
    inputs: list[Named]


def folder_beside(model_dir: str | Path) -> Path:
    """``runs/model`` → ``runs/model.hardened`` (a new folder beside the input)."""
    p = Path(str(model_dir).rstrip("/\\"))
    return p.with_name(f"{p.name}.hardened")


def refuse_existing_folder(out: Path) -> None:
    """A hardened model is never written over anything: the folder must not exist yet."""
    if out.exists() or out.is_symlink():
        raise PrivgateError(
            f"{out}: the hardened model's folder already exists; privgate never writes over a model, so choose "
            "another --output-model or remove it."
        )


def planned_folder(out: Path, default: bool) -> Named:
    """The hardened folder as a planned output (refused at once when it exists)."""
    refuse_existing_folder(out)
    how = "the default, beside the model" if default else "--output-model"
    return Named(out, f"the hardened model's folder ({how})", folder=True)


def skops_output(model_path: str | Path) -> Path:
    """``rf.joblib`` → ``rf.hardened.skops`` next to the input (a scikit-learn model is handed back without pickle)."""
    p = Path(model_path)
    return p.with_name(f"{p.stem}.hardened.skops")


def not_skops(out: Path) -> str:
    """The sentence refusing a hardened scikit-learn model's output path that is not a ``.skops`` file."""
    return f"{out}: a hardened scikit-learn model is written with skops (no pickle); name the --output-model *.skops."


def hardened_outputs(model: Any, output_model: str | None, recipe: str | None) -> HardenedOutputs:
    """Where the hardened model of ``model`` goes (``output_model``, else the default beside it), by its kind."""
    from privgate.dp.task import kind_of

    # a .skops file and its card (privgate.dp.capacity_task); a pickle may hold a torch model too: an output
    # named otherwise is planned as one, and the capacity task refuses it once the pickle shows what it holds
    pickled = isinstance(model, (str, Path)) and Path(model).suffix.lower() != ".skops"
    named_skops = output_model is None or Path(output_model).suffix.lower() == ".skops"
    if kind_of(model, recipe) == "sklearn" and (named_skops or not pickled):
        from privgate.dp.card import card_path

        out = Path(output_model) if output_model else skops_output(model)
        if out.suffix.lower() != ".skops":
            raise PrivgateError(not_skops(out))
        how = "the default, beside the model" if output_model is None else "--output-model"
        named = {out: "hardened model (skops)", card_path(out): "hardened model's card (no DP guarantee)"}
        return HardenedOutputs([Named(path, f"the {what} ({how})") for path, what in named.items()], [])
    if not recipe_is_module(model):  # a save_pretrained folder; the recipe a YAML file to protect
        out = Path(output_model) if output_model else folder_beside(model)
        recipe_file = [Named(Path(recipe), "the recipe")] if recipe else []
        return HardenedOutputs([planned_folder(out, output_model is None)], recipe_file)
    out = Path(output_model) if output_model else default_output(model)
    how = "the default, beside the model" if output_model is None else "--output-model"
    return HardenedOutputs([Named(path, f"the {what} ({how})") for path, what in files_named(out).items()], [])


def hardened_files(
    model: nn.Module, output: str | Path, example: np.ndarray, card: str | None = None
) -> tuple[dict[Path, bytes], dict[str, Any]]:
    """The bytes of ``model`` (at ``output``, as the module says) and its state_dict (beside it), not yet written.

    ``card``: the model card's Markdown (:func:`privgate.dp.card.model_card`), written beside them.

    A ``.pt2`` or TorchScript loads without the recipe (``torch.export`` on ``example``; ``torch.jit.script``,
    or ``torch.jit.trace`` on ``example`` when scripting fails). The state_dict needs the recipe's
    architecture *after* Opacus' fixes (the report lists them).

    Returns:
        ``({path: bytes}, description)``, the description with both paths (``model``, ``state_dict``), its
        ``format``, their SHA-256, how a TorchScript was made and why the model did not export, as the report
        records it.
    """
    import torch

    ts_path = Path(output)
    model = model.eval()
    described: dict[str, Any] = {}
    if ts_path.suffix.lower() == ".pt2":
        exported, why = exported_bytes(model, example)
        if exported is not None:
            described = {"model": str(ts_path), "format": "torch.export"}
            return _with_state(model, {ts_path: exported}, output, card, described)
        ts_path, described = ts_path.with_suffix(".pt"), {"export_refused": why}
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # torch.jit is deprecated in recent PyTorch, but is the portable format privgate loads
        try:
            scripted = torch.jit.script(model)
            how = "script"
        except Exception:
            scripted = torch.jit.trace(model, torch.as_tensor(np.asarray(example[:2]), dtype=torch.float32))
            how = "trace"
        buf = io.BytesIO()
        torch.jit.save(scripted, buf)
    ts_bytes = buf.getvalue()
    described.update(torchscript=str(ts_path), torchscript_sha256=hashlib.sha256(ts_bytes).hexdigest())
    described.update(torchscript_mode=how, model=str(ts_path), format="torchscript")
    return _with_state(model, {ts_path: ts_bytes}, output, card, described)


def exported_bytes(model: nn.Module, example: np.ndarray) -> tuple[bytes | None, str]:
    """``model`` as a ``torch.export`` program with a dynamic batch dimension, or ``None`` and why it cannot export."""
    import torch

    x = torch.as_tensor(np.asarray(example[:4]), dtype=torch.float32)
    try:
        program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
        buf = io.BytesIO()
        torch.export.save(program, buf)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for models it cannot trace
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return None, f"torch.export cannot export the model ({exc.__class__.__name__}: {first})"
    return buf.getvalue(), ""


def _with_state(
    model: nn.Module, files: dict[Path, bytes], output: str | Path, card: str | None, described: dict[str, Any]
) -> tuple[dict[Path, bytes], dict[str, Any]]:
    """``files`` with the model's state_dict (and ``card``) beside ``output``, and their description."""
    import torch

    data, sd_path = next(iter(files.values())), state_dict_path(output)
    buf = io.BytesIO()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, buf)
    sd_bytes = buf.getvalue()
    described.update(model_sha256=hashlib.sha256(data).hexdigest(), state_dict=str(sd_path))
    described.update(state_dict_sha256=hashlib.sha256(sd_bytes).hexdigest())
    files = {**files, sd_path: sd_bytes}
    if card is not None:
        from privgate.dp.card import card_path

        data = card.encode("utf-8")
        files[card_path(output)] = data
        described.update(model_card=str(card_path(output)), model_card_sha256=hashlib.sha256(data).hexdigest())
    return files, described


def save_hardened(
    model: nn.Module, output: str | Path, example: np.ndarray, protect: list[str | Path] = (), card: str | None = None
) -> dict[str, Any]:
    """Write ``model`` as TorchScript at ``output``, a state_dict (and ``card``) beside it: all files, or none.

    Raises:
        PrivgateError: an output path is one of the ``protect`` paths (the inputs).
    """
    files, described = hardened_files(model, output, example, card)
    for p in files:
        if any(same_file(p, Path(q)) for q in protect if q):
            raise PrivgateError(f"{p}: the hardened model would overwrite an input; choose another --output-model.")
    write_together(files)
    return described


__all__ = [
    "HardenedOutputs",
    "default_output",
    "exported_bytes",
    "files_named",
    "folder_beside",
    "hardened_files",
    "hardened_outputs",
    "not_skops",
    "planned_folder",
    "recipe_is_module",
    "refuse_existing_folder",
    "save_hardened",
    "skops_output",
    "state_dict_path",
]
