"""What a hardened language model's folder holds: ``save_pretrained`` weights, tokenizer, model card and report.

A language model's hardened output is one folder — the weights (adapters
merged into the base, or the adapter naming its base), the tokenizer, the model
card with the DP statement (``README.md``) and the JSON report — that must not
exist yet (:func:`privgate.dp.hardened.refuse_existing_folder`), written all or
nothing (:mod:`privgate.io.staging`): :func:`hardened_folder` returns its files
as bytes.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any


def hardened_folder(
    report: Any, chosen: Any, recipe: Any, out: Path, target: Any, model_dir: Any
) -> tuple[Any, dict[Path, tuple[str, bytes]]]:
    """The hardened folder's files (``save_pretrained``, tokenizer, card, report) as bytes, and the report describing
    them; ``target`` is the audited original (:class:`~privgate.inputs.targets.hf_target.HFTarget`)."""
    from privgate.dp.card import model_card

    section, model, original = report.remediation, chosen.model, target.lm
    with tempfile.TemporaryDirectory(prefix="privgate-lm-") as tmp:
        root = Path(tmp) / "m"
        if not recipe.merge:  # the adapter alone, naming its public base
            for cfg in model.peft_config.values():
                cfg.base_model_name_or_path = str(recipe.base)
        model.save_pretrained(root, safe_serialization=True)
        original.tokenizer.save_pretrained(root)
        blobs = {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}
    digests = {name: hashlib.sha256(b).hexdigest() for name, b in blobs.items()}
    written = {"folder": str(out), "format": "save_pretrained" + ("" if recipe.merge else " (adapter)")}
    written.update({f"sha256:{k}": v for k, v in digests.items()})
    section = section.model_copy(update={"output": written, "input_sha256": original.sha256})
    described = {
        "path": str(out),
        "format": "hf_dir",
        "kind": original.kind,
        "white_box": True,
        "parameters": sum(p.numel() for p in model.parameters()),
        "hardened_from": {"path": str(model_dir), "sha256": original.sha256},
        "base_model": str(recipe.base),
        "adapter": not recipe.merge,
        "dp": chosen.training.to_dict(),
    }
    report = report.model_copy(update={"remediation": section, "target": described})
    card = model_card(section, model_file=str(out), verdict=report.verdict, summary=report.summary)
    files = {out / name: (f"hardened model's {name}", data) for name, data in blobs.items()}
    files[out / "README.md"] = ("hardened model's card (DP statement)", card.encode("utf-8"))
    files[out / "privgate-report.json"] = (
        "hardened model's report",
        json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False).encode("utf-8"),
    )
    return report, files


__all__ = ["hardened_folder"]
