"""Loading a Hugging Face model directory: ``save_pretrained`` output or a PEFT adapter on its base.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privgate.errors import TargetError, clip, shown
from privgate.inputs.targets.hf_folder import check_counts, read_folder, safetensors_files
from privgate.inputs.targets.hf_libout import library_output_cleaned
from privgate.inputs.targets.hf_regexes import backtracking_problem, peft_patterns, tokenizer_patterns

CAUSAL = "causal_lm"
CLASSIFIER = "sequence_classifier"
_PICKLES = ("pytorch_model.bin", "adapter_model.bin")


def is_model_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory privgate should read as a Hugging Face model (or adapter)."""
    p = Path(path)
    return p.is_dir() and ((p / "config.json").is_file() or (p / "adapter_config.json").is_file())


def kind_of(config: dict[str, Any], where: Path) -> str:
    """``causal_lm`` or ``sequence_classifier`` from ``config.json``'s ``architectures``."""
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not archs:
        raise TargetError(
            f"{where}: config.json names no architecture ('architectures'), so privgate cannot tell a causal "
            "language model from a classifier."
        )
    arch = str(archs[0])
    if arch.endswith(("ForCausalLM", "LMHeadModel")):
        return CAUSAL
    if arch.endswith("ForSequenceClassification"):
        return CLASSIFIER
    raise TargetError(
        f"{where}: unknown architecture '{arch}' in config.json (privgate audits …ForCausalLM and "
        "…ForSequenceClassification models)."
    )


def directory_sha256(path: Path) -> str:
    """A content hash of the model's files: names and bytes of every file in the directory, in name order."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.iterdir() if p.is_file()):
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _weights_allowed(path: Path, trust: bool) -> None:
    has_safe = any(path.glob("*.safetensors"))
    pickles = [name for name in _PICKLES if (path / name).is_file()]
    if not has_safe and not pickles:
        raise TargetError(f"{path}: holds no weights (model.safetensors).")
    if not has_safe and pickles and not trust:
        raise TargetError(
            f"{path}: the weights are a pickle ({pickles[0]}), and loading it would run code from the file; save "
            "them with save_pretrained(safe_serialization=True), or pass --trust-checkpoint if you trust its origin."
        )


@dataclass
class LoadedLM:
    """A loaded Hugging Face model and its tokenizer.

    Attributes:
        model: the ``transformers`` model (a PEFT model's adapter merged into its base), in eval mode.
        tokenizer: its tokenizer (a pad token set when it had none).
        kind: ``causal_lm`` or ``sequence_classifier``.
        source: the directory given.
        sha256: :func:`directory_sha256` of the directory (the adapter's for an adapter).
        context: the most tokens one record may have (longer records are truncated).
        extra: facts for the report (architecture, base model of an adapter).
    """

    model: Any
    tokenizer: Any
    kind: str
    source: str
    sha256: str
    context: int
    extra: dict[str, Any]


def _first_line(exc: BaseException) -> str:
    return clip((str(exc).strip().splitlines() or [""])[0], 200)


def _tokenizer(path: Path, fallback: Path | None) -> Any:
    from transformers import AutoTokenizer

    errors = []
    for where in (path, fallback):
        if where is None:
            continue
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(where), local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError …
            errors.append(f"{exc.__class__.__name__}: {_first_line(exc)}" if not errors else exc.__class__.__name__)
            continue
        _refuse_backtracking(tokenizer, where)
        return tokenizer
    raise TargetError(f"{path}: no tokenizer could be loaded from the directory ({'; '.join(errors)}).")


def _refuse_backtracking(tokenizer: Any, where: Path) -> None:
    """One sentence when a regular expression of the tokenizer can backtrack catastrophically (:mod:`~.regexes`)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    for part in ("normalizer", "pre_tokenizer", "decoder"):
        component = getattr(backend, part, None) if backend is not None else None
        if component is None:
            continue
        for pattern in tokenizer_patterns(json.loads(component.__getstate__())):
            problem = backtracking_problem(pattern, oniguruma=True)
            if problem:
                raise TargetError(
                    f"{where / 'tokenizer.json'}: the {part.replace('_', '-')}'s regular expression "
                    f"{shown(pattern, 80)} can backtrack catastrophically: {problem}; privgate refuses the tokenizer "
                    "before it tokenises any text."
                )


def _check_tokenizer(model: Any, tokenizer: Any, where: Path) -> None:
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise TargetError(
            f"{where}: the tokenizer does not match the model: it has {len(tokenizer)} tokens, the model's "
            f"embedding only {rows}."
        )


def _context(model: Any, tokenizer: Any) -> int:
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    usable = [int(v) for v in limits if isinstance(v, int) and 0 < v < 10**7]
    return min(usable) if usable else 1024


#: Values a model may have beyond those its weights hold (buffers such as rotary frequencies, a new head): 4 Mi.
SLACK = 1 << 22


def _fits(cls: Any, config: Any, values: int, path: Path) -> None:
    """The model ``config`` describes, built on torch's ``meta`` device (no memory), is no larger than its weights."""
    import torch

    with torch.device("meta"):
        skeleton = cls.from_config(config, trust_remote_code=False)
    needed = sum(t.numel() for t in skeleton.parameters()) + sum(t.numel() for t in skeleton.buffers())
    if needed > values + max(values // 100, SLACK):
        raise TargetError(
            f"{path / 'config.json'}: describes a model of {needed:,} values but its weights hold {values:,}, so it "
            "does not describe these weights; privgate refuses it before allocating any memory."
        )


def _load_model(path: Path, kind: str, trust: bool, values: int) -> Any:
    """The model of ``path``; ``values``: what its safetensors weights hold (0: pickled weights, trusted)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # privgate's console shows its own progress; no bars on stderr

    cls = AutoModelForCausalLM if kind == CAUSAL else AutoModelForSequenceClassification
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for damaged or foreign files
        raise TargetError(
            f"{path}: transformers cannot read config.json ({exc.__class__.__name__}: {_first_line(exc)})."
        ) from None
    if values:
        try:
            _fits(cls, config, values, path)
        except TargetError:
            raise
        except Exception as exc:  # noqa: BLE001 - the config's own inconsistencies
            raise TargetError(
                f"{path}: transformers cannot build the model config.json describes ({exc.__class__.__name__}: "
                f"{_first_line(exc)})."
            ) from None
    try:
        return cls.from_pretrained(
            str(path), config=config, local_files_only=True, trust_remote_code=False, use_safetensors=not trust or None
        )
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for damaged or foreign files
        raise TargetError(
            f"{path}: transformers cannot load the model ({exc.__class__.__name__}: {_first_line(exc)})."
        ) from None


def load_model_dir(
    path: str | Path, *, base_model: str | Path | None = None, trust_checkpoint: bool = False
) -> LoadedLM:
    """Load a ``save_pretrained`` directory or a PEFT adapter directory on its base (module docstring).

    Raises:
        TargetError: one sentence naming the directory, for every kind of bad input.
    """
    p = Path(path)
    if not p.is_dir():
        raise TargetError(f"{p}: model directory not found.")
    if (p / "adapter_config.json").is_file():
        return _load_adapter(p, base_model, trust_checkpoint)
    if not (p / "config.json").is_file():
        raise TargetError(f"{p}: is a directory without config.json, not a Hugging Face model directory.")
    config, kind = _base(p, trust_checkpoint)
    with library_output_cleaned():
        model = _load_model(p, kind, trust_checkpoint, check_counts(p / "config.json", config, safetensors_files(p)))
        tokenizer = _tokenizer(p, None)
    return _finish(model, tokenizer, kind, p, directory_sha256(p), {"architecture": config["architectures"][0]})


def _base(p: Path, trust: bool) -> tuple[dict[str, Any], str]:
    """(``config.json``, kind) of the model folder ``p``, after the checks of :func:`.hf_folder.read_folder`."""
    config = read_folder(p)["config.json"]
    kind = kind_of(config, p)
    _weights_allowed(p, trust)
    return config, kind


def _load_adapter(p: Path, base_model: str | Path | None, trust: bool) -> LoadedLM:
    adapter = read_folder(p)["adapter_config.json"]
    named = adapter.get("base_model_name_or_path")
    base = Path(base_model) if base_model is not None else Path(str(named)) if named else None
    if base is None:
        raise TargetError(f"{p}: the adapter names no base model; pass --base-model DIR.")
    if not is_model_dir(base) or not (base / "config.json").is_file():
        given = "--base-model" if base_model is not None else "adapter_config.json's base_model_name_or_path"
        raise TargetError(
            f"{p}: the adapter's base model '{base}' ({given}) is not a local model directory with config.json; "
            "pass --base-model DIR."
        )
    if not any(p.glob("adapter_model.safetensors")) and (p / "adapter_model.bin").is_file() and not trust:
        raise TargetError(
            f"{p}: the adapter weights are a pickle (adapter_model.bin), and loading them would run code from the "
            "file; pass --trust-checkpoint if you trust its origin."
        )
    for field, pattern in peft_patterns(adapter):
        problem = backtracking_problem(pattern, oniguruma=False)
        if problem:
            raise TargetError(
                f"{p / 'adapter_config.json'}: '{field}' {shown(pattern, 80)} is a regular expression that can "
                f"backtrack catastrophically: {problem}; privgate refuses it before matching module names."
            )
    check_counts(p / "adapter_config.json", adapter, safetensors_files(p, True), layers=False)
    config, kind = _base(base, trust)
    with library_output_cleaned():
        model = _load_model(base, kind, trust, check_counts(base / "config.json", config, safetensors_files(base)))
        model = _with_adapter(model, p, base)
        has_tok = any((p / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
        tokenizer = _tokenizer(p if has_tok else base, base if has_tok else None)
    extra = {"architecture": config["architectures"][0], "adapter": str(p), "base_model": str(base)}
    return _finish(model, tokenizer, kind, p, directory_sha256(p), extra)


def _with_adapter(model: Any, p: Path, base: Path) -> Any:
    """``model`` with the adapter of ``p`` merged; its weights created empty (``meta``) and filled from the file."""
    try:
        from peft import PeftModel

        return PeftModel.from_pretrained(
            model, str(p), local_files_only=True, low_cpu_mem_usage=True
        ).merge_and_unload()
    except Exception as exc:  # noqa: BLE001 - peft raises many types for adapters that do not fit
        raise TargetError(
            f"{p}: the adapter cannot be loaded on '{base}' ({exc.__class__.__name__}: {_first_line(exc)})."
        ) from None


def _finish(model: Any, tokenizer: Any, kind: str, where: Path, digest: str, extra: dict[str, Any]) -> LoadedLM:
    _check_tokenizer(model, tokenizer, where)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    model.eval()
    return LoadedLM(model, tokenizer, kind, str(where), digest, _context(model, tokenizer), extra)


__all__ = ["CAUSAL", "CLASSIFIER", "LoadedLM", "directory_sha256", "is_model_dir", "kind_of", "load_model_dir"]
