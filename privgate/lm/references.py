"""Reference language models privgate fine-tunes itself, from a recipe, on population text (LiRA, RMIA).

Offline setting of Carlini et al. 2022 (arXiv 2112.03570) and Zarifzadeh et al. 2024 (arXiv 2312.03262): the
population is split into a training pool and z-samples (at most :data:`MAX_Z`, never trained on); references 2p and
2p + 1 fine-tune the recipe's base on complementary halves of the pool, and **no reference ever trains on an audit
record**. Fine-tunes and their token scores are cached (:mod:`privgate.training.cache`,
:mod:`privgate.lm.score_cache`) under content hashes, tagged with the run's secret key; an entry that fails its
check is ignored and the report says so: a cache can save time, never change a verdict. Details:
``docs/language-models.md``.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privgate.attacks.base import AttackSkipped
from privgate.errors import RecipeError

#: The most z-samples (population records no model trains on) the split keeps.
MAX_Z = 2000
#: The share of the population kept as z-samples.
Z_SHARE = 0.25
#: Bumped when a fine-tune would give another model from the same inputs (old entries are never read).
REFERENCE_VERSION = 1


@dataclass(frozen=True)
class PopulationSplit:
    """The population as the references use it: a training pool and z-samples no model trains on."""

    pool: list[str]
    z: list[str]


def split_population(texts: list[str], seed: int) -> PopulationSplit:
    """Shuffle ``texts`` with ``seed`` and keep ⌊Z_SHARE·m⌋ (at most :data:`MAX_Z`) of them as z-samples."""
    perm = np.random.default_rng(np.random.SeedSequence([int(seed), 0x2E7F])).permutation(len(texts))
    nz = min(MAX_Z, int(Z_SHARE * len(texts)))
    return PopulationSplit([texts[i] for i in perm[nz:]], [texts[i] for i in perm[:nz]])


@dataclass
class FineTunedReferences:
    """K fine-tuned references' per-record mean token log-probabilities, and what they cost.

    Attributes:
        audit: ``[K, n]`` on the pooled audit records (no reference trained on any of them).
        pool: ``[K, m]`` on the training pool; ``inside[k, j]``: reference k trained on pool record j.
        z: ``[K, q]`` on the z-samples (no model trained on them); ``target_z``: ``[q]``, the target's.
        trained, cached: references fine-tuned in this run and read from the cache.
        seconds: fine-tuning time of the references trained here; ``tokens``: tokens they trained on
            (records × epochs).
        warnings: cache entries that failed their check, a cache that could not be written.
    """

    audit: np.ndarray
    pool: np.ndarray
    inside: np.ndarray
    z: np.ndarray
    target_z: np.ndarray
    trained: int = 0
    cached: int = 0
    reused: int = 0
    seconds: float = 0.0
    tokens: int = 0
    recipe: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def k(self) -> int:
        return len(self.audit)

    def notes(self) -> list[str]:
        """One sentence on how the references were obtained."""
        if self.reused == self.k:
            how = f"the {self.k} reference models fine-tuned (or read from the cache) earlier in this run"
        elif self.trained == 0:
            how = f"all {self.k} reference models came from the cache"
        else:
            rate = f", {self.tokens / self.seconds:,.0f} tokens/s" if self.seconds > 0 else ""
            how = (
                f"fine-tuned {self.trained} reference model(s) with {self.recipe} "
                f"({self.seconds:.1f} s, {self.seconds / self.trained:.2f} s each{rate})"
                + (f", {self.cached} from the cache" if self.cached else "")
            )
        return [
            f"{how}; each trained on half of {self.pool.shape[1]} population records, none on an audit record; "
            f"{self.z.shape[1]} population records held out as z-samples"
        ]

    def extras(self) -> dict[str, Any]:
        return {
            "reference_models": self.k,
            "models_trained": self.trained,
            "models_from_cache": self.cached,
            "models_reused": self.reused,
            "fine_tune_seconds": round(self.seconds, 3),
            "fine_tune_tokens": self.tokens,
            "population_pool": int(self.pool.shape[1]),
            "z_samples": int(self.z.shape[1]),
            "cache_warnings": list(self.warnings),
        }


def _sha(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()


def recipe_fingerprint(recipe: Any, base_digest: str) -> str:
    """SHA-256 of what makes a fine-tune: every training setting, the base's files, the training libraries."""
    import peft
    import torch
    import transformers

    settings = json.dumps(recipe.training_settings(), separators=(",", ":"), ensure_ascii=False)
    versions = f"torch {torch.__version__}|transformers {transformers.__version__}|peft {peft.__version__}"
    text = f"lm-reference|{REFERENCE_VERSION}|{settings}|{base_digest}|{versions}"
    return hashlib.sha256(text.encode()).hexdigest()


def reference_seed(seed: int, index: int) -> int:
    """The seed of reference ``index``'s fine-tune (LoRA initialisation, batch order), drawn from the run's."""
    return int(np.random.SeedSequence([int(seed), 0x4E7, int(index)]).generate_state(1)[0])


class ReferenceFactory:
    """Fine-tunes (or reads from the cache) the references of one audit, each at most once per run.

    Args:
        recipe: the language-model recipe (``None``: the attacks that need it are skipped, saying why).
        population: population records (``None``: likewise).
        target: the audited :class:`privgate.inputs.targets.hf.LoadedLM`.
        texts: the pooled audit records in the order the attacks score them.
    """

    def __init__(
        self,
        recipe: Any,
        population: list[str] | None,
        target: Any,
        texts: list[str],
        *,
        seed: int,
        device: str,
        cache_dir: Any = None,
        cache_key: bytes | None = None,
        batch_size: int = 32,
        progress: Any = None,
    ) -> None:
        self.recipe, self.target, self.texts = recipe, target, texts
        self.split = split_population(population, seed) if population else None
        self.seed, self.device, self.batch_size = seed, device, batch_size
        self.cache_dir, self.progress = cache_dir, progress
        self._cache_key = cache_key
        self._per_ref: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._base: Any = None
        self._fp = ""
        self._target_z: np.ndarray | None = None
        self.trained = self.cached = self.tokens = 0
        self.seconds = 0.0
        self._caches: tuple[Any, Any] | None = None

    def available(self, attack: str, min_population: int) -> None:
        """Raise :class:`AttackSkipped` (the reason for the report) when ``attack`` cannot get references."""
        if self.recipe is None:
            raise AttackSkipped(
                f"'{attack}' needs reference language models fine-tuned on population text: give a "
                "language-model recipe (--recipe recipe.yaml) and population text (--population FILE)"
            )
        have = 0 if self.split is None else len(self.split.pool) + len(self.split.z)
        if have < min_population:
            raise AttackSkipped(
                f"'{attack}' needs at least {min_population} population records (text of the audit's distribution "
                f"that is neither member nor non-member) to fine-tune its references on; the audit has "
                f"{have or 'none'} (give --population FILE)"
            )

    def _say(self, msg: str) -> None:
        if self.progress is not None:
            self.progress(msg)

    def _open(self) -> tuple[Any, Any]:
        if self._caches is None:
            from privgate.lm.score_cache import open_cache
            from privgate.training.cache import ModelCache

            root = self.cache_dir
            key = self._cache_key
            self._caches = (ModelCache(root, key) if root is not None else None, open_cache(root, key))
        return self._caches

    def _load_base(self) -> Any:
        if self._base is None:
            from privgate.inputs.targets.hf import directory_sha256, load_model_dir

            base = load_model_dir(self.recipe.base)
            mine, theirs = self.target.tokenizer, base.tokenizer
            if len(mine) != len(theirs) or mine.get_vocab() != theirs.get_vocab():
                raise RecipeError(
                    f"{self.recipe.source}: the recipe's base model {self.recipe.base} has another tokenizer than "
                    "the target, so its fine-tunes' log-probabilities of a record are not comparable with the target's."
                )
            self._base = base
            self._fp = recipe_fingerprint(self.recipe, directory_sha256(self.recipe.base))
        return self._base

    def _model_key(self, mask: np.ndarray, index: int) -> str:
        h = hashlib.sha256()
        h.update(f"{self._fp}|{_sha(self.split.pool)}|{reference_seed(self.seed, index)}|".encode())
        h.update(np.packbits(mask).tobytes())
        return h.hexdigest()

    def _stored(self, base: Any) -> dict[str, Any]:
        """The base's tensors a fine-tune changes (those of the LoRA targets, or all): what the cache stores."""
        state = base.model.state_dict()
        if self.recipe.mode == "full":
            return state
        mods = tuple(f".{m}." for m in self.recipe.lora.target_modules)
        return {n: t for n, t in state.items() if any(m in f".{n}" for m in mods)}

    def _model(self, key: str, mask: np.ndarray, index: int) -> Any:
        """Reference ``index``'s fine-tuned model: from the weights cache, else fine-tuned (and stored)."""
        import copy

        from privgate.lm.finetune import finetune

        base = self._load_base()
        weights, _ = self._open()
        like = self._stored(base)
        if weights is not None:
            state = weights.load(key, like)
            if state is not None:
                model = copy.deepcopy(base.model)
                model.load_state_dict(state, strict=False)
                return model.eval()
        train = [t for t, m in zip(self.split.pool, mask) if m]
        self._say(f"fine-tuning reference model {index + 1} on {len(train)} population records")
        with warnings.catch_warnings():  # transformers' deprecation notices from inside peft, not the user's
            warnings.simplefilter("ignore", FutureWarning)
            model, _, stats = finetune(
                self.recipe,
                train,
                seed=reference_seed(self.seed, index),
                device=self.device,
                base=(base.model, base.tokenizer),
            )
        self.trained += 1
        self.seconds += stats.seconds
        ids = base.tokenizer(train, truncation=True, max_length=self.recipe.max_length)["input_ids"]
        self.tokens += sum(len(i) for i in ids) * stats.epochs
        if weights is not None:
            full = model.state_dict()
            weights.store(key, {n: full[n] for n in like})
        return model

    def _reference(self, index: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from privgate.lm.score_cache import cached_score_texts

        if index in self._per_ref:
            return self._per_ref[index]
        self._load_base()
        key = self._model_key(mask, index)
        _, scores = self._open()
        texts = self.texts + self.split.pool + self.split.z
        kw = {"digest": key, "context": self.target.context, "cache": scores, "device": self.device}
        try:
            s, _ = cached_score_texts(
                None, self.target.tokenizer, texts, batch_size=self.batch_size, moments=False, **kw
            )
            self.cached += 1
        except LookupError:
            model = self._model(key, mask, index).to(self.device)
            self._say(f"scoring the records with reference model {index + 1}")
            s, _ = cached_score_texts(
                model, self.target.tokenizer, texts, batch_size=self.batch_size, moments=False, **kw
            )
        v = s.mean_logprob
        n, m = len(self.texts), len(self.split.pool)
        self._per_ref[index] = (v[:n], v[n : n + m], v[n + m :])
        return self._per_ref[index]

    def _target_on_z(self) -> np.ndarray:
        if self._target_z is None:
            from privgate.lm.score_cache import cached_score_texts

            s, _ = cached_score_texts(
                self.target.model,
                self.target.tokenizer,
                self.split.z,
                digest=self.target.sha256,
                context=self.target.context,
                cache=self._open()[1],
                device=self.device,
                batch_size=self.batch_size,
                moments=False,
            )
            self._target_z = s.mean_logprob
        return self._target_z

    def get(self, k: int, attack: str, min_population: int = 2) -> FineTunedReferences:
        """The first ``k`` references (fine-tuned, or from this run or the cache).

        Raises:
            AttackSkipped: no recipe or too little population text (:meth:`available`).
        """
        self.available(attack, min_population)
        from privgate.training.plan import paired_masks

        assert self.split is not None
        if len(self.split.pool) < 2 or not self.split.z:
            raise AttackSkipped(f"'{attack}' needs at least 4 population records")
        masks = paired_masks(len(self.split.pool), k, self.seed)
        trained, cached, seconds, tokens = self.trained, self.cached, self.seconds, self.tokens
        reused = sum(i in self._per_ref for i in range(k))
        rows = [self._reference(i, masks[i]) for i in range(k)]
        weights, scores = self._open()
        warnings = list(dict.fromkeys((weights.warnings if weights else []) + (scores.warnings if scores else [])))
        return FineTunedReferences(
            audit=np.stack([r[0] for r in rows]),
            pool=np.stack([r[1] for r in rows]),
            inside=masks,
            z=np.stack([r[2] for r in rows]),
            target_z=self._target_on_z(),
            trained=self.trained - trained,
            cached=self.cached - cached,
            reused=reused,
            seconds=self.seconds - seconds,
            tokens=self.tokens - tokens,
            recipe=f"the recipe {self.recipe.name} ({self.recipe.mode})",
            warnings=warnings,
        )


def fine_tuned(ctx: Any, attack: str, k: int, min_population: int = 2) -> FineTunedReferences:
    """The references of ``ctx`` (an :class:`~privgate.lm.attacks.context.LMContext`), or :class:`AttackSkipped`."""
    factory = getattr(ctx, "fine_tuned", None)
    if factory is None:
        raise AttackSkipped(f"'{attack}' needs reference language models fine-tuned by privgate (give --recipe)")
    return factory.get(k, attack, min_population)


__all__ = [
    "FineTunedReferences",
    "PopulationSplit",
    "ReferenceFactory",
    "fine_tuned",
    "recipe_fingerprint",
    "reference_seed",
    "split_population",
]
