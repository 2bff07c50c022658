"""The exposed-records section as every format shows it: one row per record, the same words everywhere.

A compact view of the JSON ``exposed`` section (:mod:`privgate.stats.exposed_members`): each record's 0-based
row in the members file, label and split; the leading attack's score, the FPR of flagging everyone down to
it and the TPR reached there (evaluation members only: a calibration member's would read 0 %); and the
other attacks flagging it at FPR ≤ :data:`FLAG_FPR`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from privgate.report.model import BaseReport

#: An attack "flags" a record when its score's FPR is at most this.
FLAG_FPR = 0.01

HEADER = ["#", "row", "label", "split", "score", "FPR", "TPR", f"also at FPR ≤ {FLAG_FPR:g}"]
#: Characters of a text record (language models) shown in the label's column.
TEXT_CHARS = 60


def _shown_text(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= TEXT_CHARS else flat[: TEXT_CHARS - 1] + "…"


@dataclass
class ExposedView:
    """Rows for a table of exposed records, and the sentence that introduces it."""

    attack: str
    intro: str
    header: list[str]
    rows: list[list[str]]
    images: list[str | None] = field(default_factory=list)  # artefact path of each record's image, when saved
    records: list[dict[str, Any]] = field(default_factory=list)
    caption: str = ""  # what the row numbers count: "row = 0-based index in members.parquet"


def _pct(v: float) -> str:
    return f"{v:.2%}" if v < 0.1 else f"{v:.1%}"


def view(report: BaseReport) -> ExposedView | None:
    """The exposed-records table of ``report``, or None when it has none (or a hand-made report's is malformed)."""
    try:
        return _view(report)
    except (KeyError, TypeError, ValueError, AttributeError):  # a report read back is data: show no broken table
        return None


def _view(report: BaseReport) -> ExposedView | None:
    ex = getattr(report, "exposed", None)  # only check/harden reports list exposed records
    if not ex or not ex.get("records"):
        return None
    lead = ex["attack"]
    rows, images = [], []
    for i, rec in enumerate(ex["records"], 1):
        mine = rec["attacks"][lead]
        also = sorted(n for n, a in rec["attacks"].items() if n != lead and a["fpr"] <= FLAG_FPR)
        rows.append(
            [
                str(i),
                str(rec["member_index"]),
                _shown_text(rec["text"]) if "text" in rec else str(rec.get("class", rec["label"])),
                rec["split"],
                f"{mine['score']:.4g}",
                _pct(mine["fpr"]),
                _pct(mine["tpr"]) if rec["split"] == "evaluation" else "—",
                ", ".join(also) or "—",
            ]
        )
        images.append(rec.get("image"))
    intro = (
        f"The {len(rows)} members that '{lead}' (the strongest attack at low FPR) scores highest, of "
        f"{ex.get('n_members', '?')}: 'row' is the 0-based index in the members file as given; FPR and TPR are "
        "where an attacker flagging everyone down to this record operates on the evaluation split "
        f"({ex.get('n_eval_members', '?')} members, {ex.get('n_eval_nonmembers', '?')} non-members; "
        "TPR only for evaluation members). "
        "Remove, deduplicate or down-weight these records before retraining."
    )
    header = list(HEADER)
    if any("text" in rec for rec in ex["records"]):  # a language model's records: the text instead of a label
        header[2] = "text"
    source = ((getattr(report, "data", None) or {}).get("members") or {}).get("source")
    caption = f"row = 0-based index in {PurePath(str(source)).name if source else 'the members file'}"
    return ExposedView(lead, intro, header, rows, images, list(ex["records"]), caption)


__all__ = ["FLAG_FPR", "HEADER", "ExposedView", "view"]
