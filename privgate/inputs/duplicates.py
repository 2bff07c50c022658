"""Rows both members and non-members: refused, or — on request — dropped from both sides, repeats kept once.

A row on both sides makes every membership number wrong, so it is refused by
default. Removing it from the non-members alone is no fix: repeated rows are
the typical ones, so the non-members left differ in distribution from the
members and the attacks measure that difference (measured in docs/inputs.md).
With ``drop_duplicates`` a row whose features and label appear on both sides
leaves both, a row repeated within a side is kept once, and the report says
how many rows went from each side (:class:`Dropped`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.errors import DataError

if TYPE_CHECKING:
    from privgate.inputs.data import Dataset

#: How a refusal says to drop them: the CLI flag, the config key, the API's and the assertions' keyword.
HOW = "--drop-duplicates (config drop_duplicates = true; drop_duplicates=True in the API and the assertions)"


@dataclass(frozen=True)
class Dropped:
    """How many rows ``drop_duplicates`` removed from each side.

    Attributes:
        members_shared, nonmembers_shared: rows whose features and label appear on the other side too.
        members_repeated, nonmembers_repeated: further copies of a row kept once on its side.
    """

    members_shared: int = 0
    members_repeated: int = 0
    nonmembers_shared: int = 0
    nonmembers_repeated: int = 0

    def __add__(self, other: Dropped) -> Dropped:
        return Dropped(*(a + b for a, b in zip(self._counts(), other._counts())))

    @property
    def total(self) -> int:
        """Rows removed from both sides together."""
        return sum(self._counts())

    def _counts(self) -> tuple[int, int, int, int]:
        return (self.members_shared, self.members_repeated, self.nonmembers_shared, self.nonmembers_repeated)

    def describe(self) -> dict[str, dict[str, int]]:
        """The report's ``data.duplicates``: per side, the rows removed as shared, as repeats, and in all."""
        m, mr, n, nr = self._counts()
        return {
            "members": {"shared": m, "repeated": mr, "removed": m + mr},
            "nonmembers": {"shared": n, "repeated": nr, "removed": n + nr},
        }

    def sentence(self) -> str:
        m, mr, n, nr = self._counts()
        return (
            f"--drop-duplicates removed {m + mr} member row(s) ({m} also among the non-members, {mr} repeats) and "
            f"{n + nr} non-member row(s) ({n} also among the members, {nr} repeats); the blind baseline checks "
            "that the rows left are still one distribution"
        )


def settle(
    members: Dataset, nonmembers: Dataset, hashes: Callable[[Dataset], np.ndarray], drop: bool, where: str = ""
) -> tuple[np.ndarray, np.ndarray, Dropped] | None:
    """The rows of each side to keep and what went, or ``None`` when no row is on both sides and ``drop`` is off.

    Args:
        members, nonmembers: the two sides.
        hashes: one hash per row over its features and label (equal rows hash equally).
        drop: drop shared rows from both sides and keep repeats once; else a shared row is refused.
        where: what the rows were compared on, for the refusal (``" on the model's columns"``).

    Raises:
        DataError: a row on both sides without ``drop`` (naming the first, and ``--drop-duplicates``), or a side
            left empty.
    """
    ours, theirs = hashes(members), hashes(nonmembers)
    shared_m, shared_n = np.isin(ours, theirs), np.isin(theirs, ours)
    if not drop:
        if not shared_m.any():
            return None
        i = int(np.argmax(shared_m))
        j = int(np.argmax(theirs == ours[i]))
        raise DataError(
            f"{nonmembers.source}: {int(shared_m.sum())} member row(s) also appear among the non-members (same "
            f"features and label{where}; first: members row {_row(members, i)} is non-members row "
            f"{_row(nonmembers, j)}); membership numbers would be wrong, so remove them from both files or pass "
            f"{HOW} to drop them from both sides."
        )
    keep_m, keep_n = ~shared_m & _first(ours), ~shared_n & _first(theirs)
    dropped = Dropped(
        int(shared_m.sum()), int((~shared_m & ~keep_m).sum()), int(shared_n.sum()), int((~shared_n & ~keep_n).sum())
    )
    for side, keep in (("members", keep_m), ("non-members", keep_n)):
        if not keep.any():
            raise DataError(
                f"{(members if side == 'members' else nonmembers).source}: no {side} are left once the rows on both "
                "sides are dropped; the two sets are the same rows."
            )
    return keep_m, keep_n, dropped


def _first(h: np.ndarray) -> np.ndarray:
    """Whether each row is the first of the rows with its hash."""
    out = np.zeros(len(h), dtype=bool)
    out[np.unique(h, return_index=True)[1]] = True
    return out


def _row(d: Any, i: int) -> int:
    """Row ``i`` of ``d`` as its file counts it (1-based; a table's place before any sub-sampling)."""
    return (int(d.rows[i]) if d.rows is not None else i) + 1


__all__ = ["HOW", "Dropped", "settle"]
