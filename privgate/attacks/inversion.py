"""Model inversion: reconstruct a representative input of every class from the weights.

Fredrikson, Jha & Ristenpart 2015 (CCS, doi:10.1145/2810103.2813677), with the log-odds in place of 1 − p_c, a
total-variation term (Mahendran & Vedaldi 2015, arXiv 1412.0035) and an optional denoising-autoencoder prior
(Alain & Bengio 2014, arXiv 1211.4246); the optimisation is in :mod:`privgate.attacks.inversion_search`. Success is
a number: the metric ``similarity`` (:class:`privgate.stats.leakage.ReconstructionSimilarity`), how much closer
reconstructions are to training records than to unseen ones of their class, also the membership score.
Artefacts: ``reconstructions.png`` (images), ``reconstructions.csv``. Objective: ``docs/whitebox.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from privgate.attacks.base import Attack, AttackContext, AttackResult, AttackSkipped
from privgate.errors import shown
from privgate.io.png import png_bytes

if TYPE_CHECKING:
    from privgate.attacks.inversion_search import Inversion
    from privgate.inputs.data import Dataset

#: Fewest population rows to train the denoising-autoencoder prior.
MIN_PRIOR_ROWS = 50
_MEASURES = ("auto", "cosine", "ssim")


# --------------------------------------------------------------------------- similarity


def cosine_to(recon: np.ndarray, x: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of ``x`` to the matching row of ``recon``, both centred on ``centre``."""
    a = recon.reshape(len(recon), -1) - centre.reshape(1, -1)
    b = x.reshape(len(x), -1) - centre.reshape(1, -1)
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(den > 0, num / np.maximum(den, 1e-300), 0.0)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float, sigma: float = 1.5) -> np.ndarray:
    """Mean SSIM of each pair of images (Wang, Bovik, Sheikh & Simoncelli 2004).

    SSIM = (2μₐμ_b + C₁)(2σₐ_b + C₂) / ((μₐ² + μ_b² + C₁)(σₐ² + σ_b² + C₂)) with
    local statistics under a Gaussian window (σ = 1.5, as in the paper),
    C₁ = (0.01 L)², C₂ = (0.03 L)², averaged over the image (and channels).
    Images smaller than the paper's 11×11 window (digits are 8×8) use
    reflected borders instead of the "valid" region.

    Args:
        a, b: arrays of shape [n, H, W] or [n, C, H, W].
        data_range: L, the width of the pixel range.
    """
    from scipy import ndimage

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    sig = (0.0,) * (a.ndim - 2) + (sigma, sigma)

    def g(v: np.ndarray) -> np.ndarray:
        return ndimage.gaussian_filter(v, sigma=sig, mode="reflect", truncate=3.5)

    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_a, mu_b = g(a), g(b)
    va = g(a * a) - mu_a**2
    vb = g(b * b) - mu_b**2
    cov = g(a * b) - mu_a * mu_b
    smap = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (va + vb + c2))
    return smap.reshape(len(a), -1).mean(axis=1)


# --------------------------------------------------------------------------- artefacts


def image_grid(images: np.ndarray, lo: float, hi: float, columns: int = 10, min_tile: int = 48) -> np.ndarray:
    """Tile images [n, H, W] or [n, C, H, W] into one 8-bit array, enlarged to at least ``min_tile`` pixels."""
    imgs = np.asarray(images, dtype=np.float64)
    if imgs.ndim == 4:
        imgs = np.moveaxis(imgs, 1, -1)
        if imgs.shape[-1] != 3:
            imgs = imgs[..., 0]
    scaled = np.clip((imgs - lo) / max(hi - lo, 1e-12), 0, 1) * 255
    n, h, w = scaled.shape[:3]
    f = max(1, math.ceil(min_tile / max(h, w)))
    tiles = scaled.repeat(f, axis=1).repeat(f, axis=2)
    cols = min(columns, n)
    rows = math.ceil(n / cols)
    gap = 2
    shape = (rows * (h * f + gap) - gap, cols * (w * f + gap) - gap) + tiles.shape[3:]
    grid = np.full(shape, 128.0)
    for i in range(n):
        r, c = divmod(i, cols)
        grid[r * (h * f + gap) : r * (h * f + gap) + h * f, c * (w * f + gap) : c * (w * f + gap) + w * f] = tiles[i]
    return grid.round().astype(np.uint8)


def csv_bytes(classes: Sequence[int], confidence: np.ndarray, recon: np.ndarray) -> bytes:
    flat = recon.reshape(len(recon), -1)
    lines = ["class,confidence," + ",".join(f"f{i}" for i in range(flat.shape[1]))]
    for c, p, row in zip(classes, confidence, flat):
        lines.append(f"{int(c)},{p:.6g}," + ",".join(f"{v:.6g}" for v in row))
    return ("\n".join(lines) + "\n").encode()


# --------------------------------------------------------------------------- the attack


def _resolve_image_shape(option: Any, ctx: AttackContext) -> tuple[tuple[int, ...] | None, str | None]:
    """The image shape of one audit row (or None for tabular data), and a note on how it was chosen."""
    row = ctx.x.shape[1:]
    d = int(np.prod(row))
    if option in (None, "none", False):
        return None, None
    if option != "auto":
        shape = tuple(int(v) for v in option)
        if int(np.prod(shape)) != d or len(shape) not in (2, 3):
            raise AttackSkipped(f"option image_shape {list(shape)} does not fit audit rows of {d} features")
        return shape, None
    return image_shape(ctx.x, ctx.recipe)


def image_shape(x: np.ndarray, recipe: Any = None) -> tuple[tuple[int, ...] | None, str | None]:
    """The image shape of one row of ``x`` when the rows look like images (else None), and how it was chosen.

    The recipe's ``extra['image_shape']`` wins; rows of 2 or 3 dimensions are
    images; flat rows of a perfect-square number (≥ 36) of non-binary features
    are square grey images (8×8 digits); anything else is a table.
    """
    if np.asarray(x).dtype == object:  # a table with text columns (privgate.inputs.tables) is no image
        return None, None
    row = x.shape[1:]
    d = int(np.prod(row))
    declared = recipe.extra.get("image_shape") if recipe is not None else None
    if declared is not None:
        return tuple(int(v) for v in declared), "image shape from the recipe's extra['image_shape']"
    if len(row) in (2, 3):
        return tuple(int(v) for v in row), None
    side = int(round(math.sqrt(d)))
    binary = np.isin(x, (0.0, 1.0)).all()
    if len(row) == 1 and side * side == d and d >= 36 and not binary:
        return (
            (side, side),
            f"treated as {side}x{side} images (auto: {d} non-binary features, a perfect square); set "
            f"image_shape: none for tabular data",
        )
    return None, None


def _prior(kind: str, pop: Dataset | None, lo: np.ndarray, hi: np.ndarray, seed: int) -> Any:
    """The denoising-autoencoder prior trained on population data (``dae``; ``auto`` when there are enough rows), or
    None."""
    from privgate.attacks.inversion_search import train_prior

    if not (kind == "dae" or (kind == "auto" and pop is not None and len(pop) >= MIN_PRIOR_ROWS)):
        return None
    if pop is None or len(pop) < MIN_PRIOR_ROWS:
        raise AttackSkipped(
            f"prior 'dae' is trained on population data and needs at least {MIN_PRIOR_ROWS} population rows"
        )
    width = np.maximum(hi - lo, 1e-12)
    return train_prior(((pop.x - lo) / width).reshape(len(pop), -1), seed=seed)


def _starts(centre: np.ndarray, n_classes: int, rows: int, lo: np.ndarray, hi: np.ndarray, seed: int) -> np.ndarray:
    """Where each restart starts: the first restart of every class at ``centre``, the others seeded noise around it
    (a quarter of the range), clipped to the range."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1A7]))
    starts = np.repeat(centre[None], rows, axis=0)
    noise = rng.normal(size=starts[n_classes:].shape) * 0.25 * (hi - lo)
    starts[n_classes:] = np.clip(starts[n_classes:] + noise, lo, hi)
    return starts


def _similarities(
    recon: np.ndarray,
    ctx: AttackContext,
    centre: np.ndarray,
    data_range: float,
    n_classes: int,
    restarts: int,
    image_shape: tuple[int, ...] | None,
) -> dict[str, np.ndarray]:
    """Each audit example's similarity (cosine; SSIM on images) to the closest reconstruction of its class."""
    sims: dict[str, np.ndarray] = {}
    for r in range(restarts):
        recon_of = recon[r * n_classes + ctx.y]
        per = {"cosine": cosine_to(recon_of, ctx.x, centre)}
        if image_shape is not None:
            shape = (len(ctx.x), *image_shape)
            per["ssim"] = ssim(recon_of.reshape(shape), ctx.x.reshape(shape), data_range)
        sims = per if not sims else {k: np.maximum(sims[k], v) for k, v in per.items()}
    return sims


def _artefacts(
    classes: np.ndarray,
    inv: Inversion,
    image_shape: tuple[int, ...] | None,
    lo: np.ndarray,
    hi: np.ndarray,
    n_classes: int,
) -> dict[str, bytes]:
    """The reconstructions as CSV and, for images, as one PNG grid (a row per restart)."""
    artefacts = {"reconstructions.csv": csv_bytes(classes, inv.confidence, inv.recon)}
    if image_shape is not None:
        grid = image_grid(
            inv.recon.reshape(len(classes), *image_shape), float(np.min(lo)), float(np.max(hi)), columns=n_classes
        )
        artefacts["reconstructions.png"] = png_bytes(grid)
    return artefacts


def _per_class(classes: np.ndarray, inv: Inversion, n_classes: int) -> list[dict[str, Any]]:
    """How each reconstruction ended: its class, restart, confidence, steps and why it stopped."""
    return [
        {
            "class": int(c),
            "restart": i // n_classes,
            "confidence": round(float(p), 6),
            "steps": int(s),
            "stop": why,
        }
        for i, (c, p, s, why) in enumerate(zip(classes, inv.confidence, inv.steps, inv.stop))
    ]


class InversionAttack(Attack):
    """Model inversion with a measured similarity (Fredrikson, Jha & Ristenpart 2015).

    Options:
        steps: largest number of optimisation steps per class.
        lr: Adam learning rate, in units of the data range.
        confidence_target: stop a class when the target's confidence in it reaches this.
        patience: stop a class after this many steps without improvement.
        tv: weight of the total-variation term for images (``auto``: 0.05 for images, 0 for tables).
        prior: ``auto`` (a denoising autoencoder when population data is available), ``dae`` or ``none``.
        prior_weight: weight of the autoencoder term.
        image_shape: ``auto``, ``none`` or an explicit ``[H, W]`` / ``[C, H, W]``.
        measure: similarity that decides the metric: ``auto`` (SSIM for images, cosine otherwise),
            ``cosine`` or ``ssim``.
    """

    name = "inversion"
    threat_model = "white-box"

    def __init__(
        self,
        steps: int = 300,
        lr: float = 0.05,
        confidence_target: float = 1.0,
        patience: int = 50,
        tv: float | str = "auto",
        prior: str = "auto",
        prior_weight: float = 1.0,
        image_shape: Any = "auto",
        measure: str = "auto",
        restarts: int = 1,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"option steps must be a positive integer, got {shown(steps)}")
        if not isinstance(patience, int) or isinstance(patience, bool) or patience < 1:
            raise ValueError(f"option patience must be a positive integer, got {shown(patience)}")
        if not (isinstance(lr, (int, float)) and lr > 0):
            raise ValueError(f"option lr must be positive, got {shown(lr)}")
        if not (isinstance(confidence_target, (int, float)) and 0 < confidence_target <= 1):
            raise ValueError(f"option confidence_target must be in (0, 1], got {shown(confidence_target)}")
        if not (tv == "auto" or (isinstance(tv, (int, float)) and tv >= 0)):
            raise ValueError(f"option tv must be 'auto' or a non-negative number, got {shown(tv)}")
        if prior not in ("auto", "dae", "none"):
            raise ValueError(f"option prior must be 'auto', 'dae' or 'none', got {shown(prior)}")
        if not (isinstance(prior_weight, (int, float)) and prior_weight >= 0):
            raise ValueError(f"option prior_weight must be non-negative, got {shown(prior_weight)}")
        if not (
            image_shape in ("auto", "none", None)
            or (isinstance(image_shape, (list, tuple)) and all(isinstance(v, int) and v > 0 for v in image_shape))
        ):
            raise ValueError(
                f"option image_shape must be 'auto', 'none' or a list like [8, 8], got {shown(image_shape)}"
            )
        if not isinstance(restarts, int) or isinstance(restarts, bool) or not 1 <= restarts <= 64:
            raise ValueError(f"option restarts must be an integer between 1 and 64, got {shown(restarts)}")
        if measure not in _MEASURES:
            raise ValueError(f"option measure must be one of {', '.join(_MEASURES)}, got {shown(measure)}")
        self.options = {
            "steps": steps,
            "lr": float(lr),
            "confidence_target": float(confidence_target),
            "patience": patience,
            "tv": tv,
            "prior": prior,
            "prior_weight": float(prior_weight),
            "image_shape": list(image_shape) if isinstance(image_shape, (list, tuple)) else image_shape,
            "measure": measure,
            "restarts": restarts,
        }

    def run(self, ctx: AttackContext) -> AttackResult:
        from privgate.attacks.inversion_search import invert
        from privgate.stats.leakage import ReconstructionSimilarity

        t0 = time.perf_counter()
        module = ctx.target.module
        if module is None:
            raise AttackSkipped("the target exposes no torch module, so its inputs cannot be optimised")
        o = self.options
        image_shape, note = _resolve_image_shape(o["image_shape"], ctx)
        notes = [note] if note else []
        lo, hi, start = _range_and_start(ctx)
        if ctx.population is None:
            notes.append(
                "no population data: inversion starts from the middle of the audit data's range, with no prior"
            )
        prior = _prior(o["prior"], ctx.population, lo, hi, ctx.seed)
        tv = (0.05 if image_shape is not None else 0.0) if o["tv"] == "auto" else float(o["tv"])
        n_classes = int(ctx.target.predict_proba(ctx.x[:1]).shape[1])
        R = o["restarts"]
        classes = np.tile(np.arange(n_classes), R)  # restart r of class c is row r·K + c
        starts = _starts(start, n_classes, len(classes), lo, hi, ctx.seed)
        inv = invert(
            module, classes, starts.astype(np.float32), lo, hi,
            tv=tv, image_shape=image_shape, prior=prior, outputs=ctx.target.outputs or "logits",
            **{k: o[k] for k in ("steps", "lr", "confidence_target", "patience", "prior_weight")},
        )  # fmt: skip
        centre = (ctx.population.x if ctx.population is not None else ctx.x).mean(axis=0)
        sims = _similarities(inv.recon, ctx, centre, float(np.max(hi - lo)), n_classes, R, image_shape)
        measure = o["measure"] if o["measure"] != "auto" else ("ssim" if image_shape is not None else "cosine")
        if measure not in sims:
            raise AttackSkipped("measure 'ssim' needs image data (set image_shape)")
        estimate = ReconstructionSimilarity(
            similarity=sims[measure],
            groups=np.asarray(ctx.y),
            measure=measure,
            secondary={k: v for k, v in sims.items() if k != measure},
        )
        extras = {
            "estimates": {"similarity": estimate},
            "artefacts": _artefacts(classes, inv, image_shape, lo, hi, n_classes),
            "measure": measure,
            "image_shape": list(image_shape) if image_shape is not None else None,
            "prior": "dae" if prior is not None else "none",
            "tv": tv,
            "seconds_per_class": round(inv.seconds / n_classes, 4),
            "restarts": R,
            "per_class": _per_class(classes, inv, n_classes),
        }
        return AttackResult(
            attack=self.name,
            threat_model=self.threat_model,
            scores=np.asarray(sims[measure], dtype=float),
            seconds=time.perf_counter() - t0,
            groups=np.asarray(ctx.y),
            options=dict(o),
            notes=notes,
            extras=extras,
        )


def _range_and_start(ctx: AttackContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The attacker's knowledge: the data range and a typical input come from population data; without it, only
    the range (domain knowledge) is taken from the audit data, and inversion starts from its middle."""
    pop = ctx.population
    known = pop.x if pop is not None else ctx.x
    lo, hi = known.min(axis=0), known.max(axis=0)
    return lo, hi, pop.x.mean(axis=0) if pop is not None else (lo + hi) / 2


def __getattr__(name: str) -> Any:
    """``invert``, ``train_prior``, ``Inversion``: from :mod:`privgate.attacks.inversion_search`, on first use."""
    if name in ("Inversion", "invert", "train_prior"):
        from privgate.attacks import inversion_search

        return getattr(inversion_search, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
