"""Tiny models and audit data for the pipeline tests (plugin, reports, action, init).

Everything is generated from a seed in well under a second: a decision tree that
memorises random labels (a leak every attack sees), a constant model (no leak
at all), and a small TorchScript MLP written to disk with its audit files, the
way a CI job would have them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


def random_labels(n: int, seed: int, d: int = 12, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs with labels independent of them: only memorisation can fit them."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32), rng.integers(0, classes, size=n).astype(np.int64)


def leaky_tree(n: int = 200, seed: int = 0, classes: int = 10):
    """(model, members, nonmembers): a fully grown tree on random labels; members get confidence 1.

    With 10 classes a non-member is right by chance 10 % of the time, so attacks reach a balanced
    accuracy near 0.95: a violation of "accuracy ≤ 0.8" that 100 + 100 evaluation rows can prove.
    """
    from sklearn.tree import DecisionTreeClassifier

    members, nonmembers = random_labels(n, seed, classes=classes), random_labels(n, seed + 1, classes=classes)
    model = DecisionTreeClassifier(random_state=seed).fit(*members)
    return model, members, nonmembers


def constant_model(n: int = 200, seed: int = 0):
    """(model, members, nonmembers): predicts the class prior for every input; nothing leaks."""
    from sklearn.dummy import DummyClassifier

    members, nonmembers = random_labels(n, seed), random_labels(n, seed + 1)
    model = DummyClassifier(strategy="prior").fit(*members)
    return model, members, nonmembers


@dataclass
class Files:
    """A TorchScript model and its audit data on disk."""

    dir: Path
    model: Path
    members: Path
    nonmembers: Path


def torch_files(dir: Path, n: int = 150, seed: int = 0, steps: int = 300) -> Files:
    """An MLP trained to memorise random labels, saved with ``torch.jit.save``, plus ``.npz`` audit files."""
    import torch
    from torch import nn

    dir.mkdir(parents=True, exist_ok=True)
    members, nonmembers = random_labels(n, seed), random_labels(n, seed + 1)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(12, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.from_numpy(members[0]), torch.from_numpy(members[1])
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    files = Files(dir, dir / "model.pt", dir / "members.npz", dir / "nonmembers.npz")
    torch.jit.save(torch.jit.script(model), str(files.model))
    np.savez(files.members, x=members[0], y=members[1])
    np.savez(files.nonmembers, x=nonmembers[0], y=nonmembers[1])
    return files
