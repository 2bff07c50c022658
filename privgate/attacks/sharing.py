"""One set of reference models per run: the attacks that ask for fewer read the first of the most any asks for.

Every reference-model attack (shadow models, Shokri et al. 2017, arXiv 1610.05820; LiRA, Carlini et al. 2022, arXiv
2112.03570; RMIA, Zarifzadeh et al. 2024, arXiv 2312.03262; the learned attack) trains on the plan of
:mod:`privgate.attacks.reference`, whose first ``k`` models are the same whatever the total. So shadow 4, RMIA 4
and LiRA 16 train 16 models once, at the first attack that needs any, and hand the others the first 4: one
vectorised training of K models costs much less than two of K/2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def planned_models(todo: Mapping[str, Mapping[str, Any]], registry: Mapping[str, Any], population_rows: int) -> int:
    """The most reference models any attack of ``todo`` (``{name: options}``) will ask for; 0 when none will.

    An attack counts when it trains reference models (``needs_recipe``), its
    options are valid and, for one with ``min_population``, the population is
    large enough — an attack that will be skipped must not make another train
    models nobody reads.
    """
    most = 0
    for name, options in todo.items():
        cls = registry.get(name)
        if cls is None or not getattr(cls, "needs_recipe", False):
            continue
        try:
            resolved = cls(**options).options
        except Exception:  # noqa: BLE001 - invalid options are reported by the attack itself
            continue
        k = resolved.get("models")
        if not isinstance(k, int) or isinstance(k, bool):
            continue
        if population_rows < int(resolved.get("min_population", 0) or 0):
            continue
        most = max(most, k)
    return most


__all__ = ["planned_models"]
