"""Privacy Meter's RMIA (its own ``run_mia.py``, unchanged) against privgate's RMIA on the same CIFAR-shaped rows.

    python benchmarks/gpu/privacy_meter_cifar.py --pm .pm --device cuda --json OUT.json   # issue 43: 20,000 rows, K = 4
    python benchmarks/gpu/privacy_meter_cifar.py --pm .pm --device cpu --small            # 1,000 rows, K = 2, 2 epochs

``--pm``: a Privacy Meter checkout, or its git mirror (``HEAD`` extracted to scratch). Each tool runs in a fresh
process, timed start to exit: Privacy Meter with its ``configs/cifar10.yaml`` set to K, one experiment, a fresh
``log_dir`` and its built-in network (``speedyresnet`` on a GPU, ``CNN`` on the CPU) on pickles of
``cifar_engine.synthetic_cifar`` rows; privgate (``--child``) training cifar_engine's target and running
``privgate.api.check`` with RMIA-K. Modules Privacy Meter imports but never calls here get stand-ins only where
they do not import. Printed: seconds per model trained, AUC, TPRs, phases, the ratio (goal ≥ 10× on a GPU).
What it measures and why: docs/compute.md, "Privacy Meter's own run on CIFAR-shaped rows".
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "engine"))

#: Issue 43's goal: privgate at least this many times faster per model trained than Privacy Meter, on one GPU.
GOAL_RATIO = 10.0
#: Imported by Privacy Meter's modules but never called on its CIFAR path: stood in for where they do not import.
STAND_IN = ("torchvision", "transformers", "peft", "datasets")
#: Called on its path (its ROC plots, 1000 dpi PNGs): a no-op stand-in only makes Privacy Meter faster, not slower.
NO_OP = ("matplotlib",)
#: On the path it runs: never stood in for (the run stops if one does not import).
REQUIRED = ("torch", "numpy", "sklearn", "scipy", "yaml", "pandas", "tqdm")

STANDIN_SOURCE = '''"""Stand-in for {name}, not installed here: Privacy Meter imports it (no_op: calls do nothing)."""
import importlib.abc
import importlib.machinery
import sys


class _Meta(type):
    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _standin(cls.__qualname__ + "." + attr)

    def __call__(cls, *args, **kwargs):
        if {no_op}:
            return cls
        raise ModuleNotFoundError(cls.__qualname__ + ": {name} is not installed here (benchmark stand-in)")


def _standin(qualname):
    return _Meta(qualname.rsplit(".", 1)[-1], (), {{"__qualname__": qualname}})


def _module_getattr(module_name):
    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _standin(module_name + "." + attr)

    return getattr_


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("{name}."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = _module_getattr(module.__name__)


sys.meta_path.insert(0, _Finder())
__getattr__ = _module_getattr("{name}")
'''


def _stop(message: str) -> None:
    """Bad input: one sentence, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def checkout(pm: Path, scratch: Path) -> Path:
    """Privacy Meter's files: ``pm`` itself if it is a checkout, else ``HEAD`` of the git directory ``pm`` extracted."""
    if (pm / "run_mia.py").is_file():
        return pm.resolve()
    probe = subprocess.run(["git", "--git-dir", str(pm), "rev-parse", "HEAD"], capture_output=True, text=True)
    if probe.returncode != 0:
        _stop(f"--pm {pm}: neither a Privacy Meter checkout (no run_mia.py) nor a git directory")
    dest = scratch / "privacy_meter"
    dest.mkdir()
    archive = subprocess.run(["git", "--git-dir", str(pm), "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    if not (dest / "run_mia.py").is_file():
        _stop(f"--pm {pm}: its HEAD has no run_mia.py (not Privacy Meter?)")
    print(f"Privacy Meter: {pm} at {probe.stdout.strip()[:12]}, extracted to {dest}")
    return dest


def not_importable(names: tuple[str, ...]) -> list[str]:
    """The modules of ``names`` that do not import in this interpreter (tried in a fresh process, not this one)."""
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    try:\n        importlib.import_module(n)\n"
    code += "    except Exception:\n        print('not importable:', n)\n"
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True)
    return [line.split(": ", 1)[1] for line in out.stdout.splitlines() if line.startswith("not importable: ")]


def write_standins(folder: Path, names: list[str], no_op: tuple[str, ...] = NO_OP) -> None:
    """A package per name: any attribute is a class whose call raises (or, for ``no_op``, returns itself)."""
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(STANDIN_SOURCE.format(name=name, no_op=name in no_op))


def write_rows(data_dir: Path, rows: int, seed: int) -> None:
    """The rows both tools audit: Privacy Meter's two pickles and privgate's ``rows.npz``."""
    import numpy as np
    import torch
    from cifar_engine import synthetic_cifar

    members = synthetic_cifar(rows // 2, seed)
    nonmembers = synthetic_cifar(rows // 2, seed + 1)
    population = synthetic_cifar(max(100, rows // 10), seed + 2)
    x, y = np.concatenate([members[0], nonmembers[0]]), np.concatenate([members[1], nonmembers[1]])
    for name, (xs, ys) in (("cifar10", (x, y)), ("cifar10_population", population)):
        with open(data_dir / f"{name}.pkl", "wb") as f:
            pickle.dump(torch.utils.data.TensorDataset(torch.from_numpy(xs), torch.from_numpy(ys)), f)
    np.savez(
        data_dir / "rows.npz", xm=members[0], ym=members[1], xn=nonmembers[0], yn=nonmembers[1],
        xp=population[0], yp=population[1],
    )  # fmt: skip


def pm_config(pm_dir: Path, args: argparse.Namespace, log_dir: Path, data_dir: Path) -> dict:
    """Its ``configs/cifar10.yaml`` with the run's size, device and network (module docstring)."""
    import yaml

    cfg = yaml.safe_load((pm_dir / "configs" / "cifar10.yaml").read_text())
    device = "cuda:0" if args.device == "cuda" else "cpu"
    cfg["run"].update(random_seed=args.seed, log_dir=str(log_dir), time_log=True, num_experiments=1)
    cfg["audit"].update(algorithm="RMIA", num_ref_models=args.references, device=device)
    cfg["audit"].pop("data_size", None)  # every row audited, as privgate audits them
    if args.device == "cuda":  # its commented-out speedyresnet block (the recipe is fixed in fast_train.py)
        cfg["train"] = {
            "type": "pytorch", "model_name": "speedyresnet", "device": device, "batch_size": 5000,
            "optimizer": "speedyresnet_optimizer", "learning_rate": "speedyresnet_learning_rate",
            "weight_decay": "speedyresnet_weight_decay", "epochs": "speedyresnet_epochs",
        }  # fmt: skip
    else:
        cfg["train"].update(model_name="CNN", device=device, epochs=args.epochs)
    cfg["data"].update(dataset="cifar10", data_dir=str(data_dir))
    return cfg


def timed_process(cmd: list[str], *, cwd: Path, env: dict, timeout: float, log: Path) -> tuple[float, bool, int]:
    """Wall seconds of ``cmd`` (its output to ``log``), whether ``timeout`` stopped it (its process group), its code."""
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            return time.perf_counter() - t0, False, code
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return time.perf_counter() - t0, True, -9


def tpr_at(fpr, tpr, at: float) -> float:
    """Privacy Meter's reading (its ``compute_attack_results``): the TPR of the last ROC point with FPR <= ``at``."""
    import numpy as np

    return float(tpr[np.where(fpr <= at)[0][-1]])


def state_weights(state: dict) -> int:
    """Learned numbers in a state dict (BatchNorm's running statistics and counters left out)."""
    return sum(v.numel() for k, v in state.items() if "running_" not in k and "num_batches" not in k)


def read_pm(log_dir: Path) -> dict:
    """Its phases (``time_analysis`` log), models trained, the target's AUC and TPRs, the network's weights."""
    import numpy as np

    log = log_dir / "report" / "log_time_analysis.log"
    text = log.read_text() if log.is_file() else ""

    def took(pattern: str) -> float | None:
        m = re.search(pattern + r" ([\d.]+) seconds", text)
        return float(m.group(1)) if m else None

    trained = re.findall(r"Training model (\d+) took ([\d.]+) seconds", text)
    out: dict = {
        "models_trained": len(trained),
        "phases": {
            "loading data": took("Loading dataset took"),
            "training": took("Model loading/training took"),
            "signals": took("Preparing signals took"),
            "audit": took(r"Auditing the privacy risks of target model 0 costs"),
            "total (its log)": took("Total runtime:"),
        },
        "seconds_per_training": [float(s) for _, s in trained],
    }
    first = log_dir / "models" / "model_0.pkl"
    if first.is_file():  # written by the run this script started, in its own scratch folder
        with open(first, "rb") as f:
            out["weights"] = state_weights(pickle.load(f))
    result = log_dir / "report" / "exp" / "attack_result_0.npz"
    if result.is_file():
        r = np.load(result)
        out.update(auc=float(r["auc"]), tpr_1pct=tpr_at(r["fpr"], r["tpr"], 0.01))
        inside = r["memberships"].astype(bool)
        out.update(tpr_01pct=tpr_at(r["fpr"], r["tpr"], 0.001), scored=[int(inside.sum()), int((~inside).sum())])
    return out


def child(npz: str, out: str, device: str, references: int, width: int, epochs: int, seed: int) -> None:
    """privgate's side, in its own process: rows loaded, target trained, RMIA-K through ``privgate.api.check``."""
    t0 = time.perf_counter()
    import numpy as np
    import torch
    from cifar_engine import recipe_for

    import privgate.api
    from privgate.options import RunOptions
    from privgate.policy import parse_policy
    from privgate.training.loop import train_model

    t_imports = time.perf_counter() - t0
    d = np.load(npz)
    members, nonmembers, population = (d["xm"], d["ym"]), (d["xn"], d["yn"]), (d["xp"], d["yp"])
    t1 = time.perf_counter()
    recipe = recipe_for(width, epochs, device)
    target = train_model(recipe, *members, seed=seed + 99, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    t_target = time.perf_counter() - t1
    policy = parse_policy(
        f"name: pm-compare\nsensitivity: internal\nrelease: api\nattacks: {{rmia: {{models: {references}}}}}\n"
        "checks:\n  - {id: tpr, attack: rmia, metric: tpr_at_fpr, fpr: 0.01, max: 1.0}\n"
    )
    t2 = time.perf_counter()
    opts = RunOptions(seed=seed, cache_dir="off", device=device)
    report = privgate.api.check(
        target, policy, members, nonmembers, population=population, recipe=recipe, options=opts
    )  # fmt: skip
    t_check = time.perf_counter() - t2
    rmia = next(a for a in report.attacks if a.name == "rmia")
    tpr = {round(p.fpr, 6): p for p in rmia.tpr_at_fpr}
    low = tpr.get(0.001)
    result = {
        "models_trained": rmia.models_trained + 1,  # the references and the target
        "phases": {"imports": t_imports, "target training": t_target, "check": t_check},
        "weights": state_weights(target.state_dict()), "network": recipe.name, "auc": rmia.auc,
        "tpr_1pct": tpr[0.01].tpr if 0.01 in tpr else None, "tpr_01pct": low.tpr if low else None,
        "tpr_01pct_note": None if low is None or low.tpr is not None else low.reason,
        "scored": [rmia.n_members, rmia.n_nonmembers],
        "views": len(rmia.extras.get("augmented_queries", [])) or 1, "engine": rmia.extras.get("engine"),
    }  # fmt: skip
    Path(out).write_text(json.dumps(result))


def num(v: float | None, fmt: str = ".3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def table(args: argparse.Namespace, where: str, pm: dict, pg: dict) -> dict:
    """Print the comparison and return its numbers (``--json``)."""
    for tool in (pm, pg):
        done = tool.get("models_trained") or 0
        tool["per_model_s"] = tool["wall_s"] / done if done else None
    ratio = pm["per_model_s"] / pg["per_model_s"] if pm["per_model_s"] and pg["per_model_s"] else None
    print(f"\n[{args.device}] {where}; {args.rows} audit rows (3x32x32, 10 classes), RMIA with K = {args.references}")
    print(
        "| tool | network (weights) | models trained | end to end (s) | s per model | rows scored (in + out) | AUC | "
        "TPR@1% | TPR@0.1% |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t in (("Privacy Meter run_mia.py", pm), ("privgate api.check", pg)):
        wall = f"{t['wall_s']:.1f}" + (f" (stopped after {t['limit_s']:g} s)" if t["stopped"] else "")
        wall += f" (exit {t['exit']})" if t["exit"] not in (0, -9) else ""
        planned = f" of {t['planned']}" if t.get("models_trained") != t["planned"] else ""
        print(
            f"| {name} | {t['network']} ({t.get('weights', '?')}) | {t.get('models_trained', 0)}{planned} | {wall} | "
            f"{num(t['per_model_s'], '.2f')} | {' + '.join(map(str, t.get('scored', ['?'])))} | {num(t.get('auc'))} | "
            f"{num(t.get('tpr_1pct'))} | "
            f"{num(t.get('tpr_01pct'))} |"
        )
    for name, t in (("Privacy Meter", pm), ("privgate", pg)):
        phases = ", ".join(f"{k} {num(v, '.1f')}" for k, v in t.get("phases", {}).items())
        print(f"  {name}: {phases or 'no phases logged'} (s)" + (f"; log {t['log']}" if args.keep else ""))
    if pg.get("tpr_01pct_note"):
        print(f"  privgate's TPR@0.1%: {pg['tpr_01pct_note']}")
    print(
        "  Privacy Meter scores every row against its target (model 0, a random half); privgate holds half the rows "
        "out to set its threshold and reports the other half, with confidence intervals"
    )
    line = f"privgate per model vs Privacy Meter per model: {num(ratio, '.1f')}x"
    if any(t["stopped"] for t in (pm, pg)):
        line += " (a stopped run: its seconds per model are the time until it stopped / the models it finished)"
    if args.device == "cuda":
        met = "n/a" if ratio is None else ("met" if ratio >= GOAL_RATIO else "MISSED")
        print(f"{line}; goal [cuda, {where}] >= {GOAL_RATIO:g}x: {met}")
    else:
        print(f"{line} on the CPU; goal [cuda]: >= {GOAL_RATIO:g}x on one GPU, not measured (run with --device cuda)")
    return {"device": where, "rows": args.rows, "references": args.references, "ratio": ratio, "goal": GOAL_RATIO,
            "privacy_meter": pm, "privgate": pg}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pm", type=Path, help="a Privacy Meter checkout, or its git directory (a bare mirror)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--rows", type=int, default=20_000, help="audit rows, half members (20,000)")
    ap.add_argument("--references", type=int, default=4, help="K, reference models of both RMIAs (4)")
    ap.add_argument("--width", type=int, default=32, help="privgate's network's first width (32)")
    ap.add_argument("--epochs", type=int, default=8, help="privgate's epochs, and Privacy Meter's CNN's on the CPU (8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pm-timeout", type=float, default=150.0, help="Privacy Meter stopped after this (s)")
    ap.add_argument("--privgate-timeout", type=float, default=300.0, help="privgate stopped after this (s)")
    ap.add_argument("--small", action="store_true", help="CPU, 1,000 rows, K = 2, width 8, 2 epochs")
    ap.add_argument("--json", type=Path, default=None, help="also write the table's numbers here (gpu_check.sh)")
    ap.add_argument("--keep", type=Path, default=None, help="scratch folder kept here (logs, models, config)")
    ap.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        npz, out, device, k, width, epochs, seed = args.child
        child(npz, out, device, int(k), int(width), int(epochs), int(seed))
        return 0
    if args.pm is None:
        ap.error("--pm: a Privacy Meter checkout or git directory is needed (benchmarks/gpu/gpu_check.sh says how)")
    if args.small:
        args.device, args.rows, args.references, args.width, args.epochs = "cpu", 1000, 2, 8, 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
        return 2
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU, {os.cpu_count()} core(s) visible"
    missing = not_importable(REQUIRED)
    if missing:
        _stop(f"Privacy Meter's CIFAR path needs {', '.join(missing)}, which do(es) not import here")
    scratch = Path(tempfile.mkdtemp(prefix="pm-cifar-")) if args.keep is None else args.keep.resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        pm_dir = checkout(args.pm, scratch)
        stand = not_importable(STAND_IN + NO_OP)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVGATE_")}
        pm_env = dict(env)
        if stand:
            write_standins(scratch / "standins", stand)
            pm_env["PYTHONPATH"] = os.pathsep.join([str(scratch / "standins"), env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            )
        print(f"stand-ins on Privacy Meter's PYTHONPATH (imported, never called): {', '.join(stand) or 'none'}")
        if set(stand) & set(NO_OP):
            print("  matplotlib: a no-op stand-in, its ROC plots skipped: Privacy Meter runs faster than its users see")
        data_dir, log_dir = scratch / "data", scratch / "pm_log"
        data_dir.mkdir(exist_ok=True)
        shutil.rmtree(log_dir, ignore_errors=True)  # a fresh log_dir: it would reuse the models saved there
        write_rows(data_dir, args.rows, args.seed)
        import yaml

        cfg_path = scratch / "pm_config.yaml"
        cfg_path.write_text(yaml.safe_dump(pm_config(pm_dir, args, log_dir, data_dir)))
        print(f"Privacy Meter: run_mia.py --cf {cfg_path} (stopped after {args.pm_timeout:g} s)", flush=True)
        wall, stopped, code = timed_process(
            [sys.executable, str(pm_dir / "run_mia.py"), "--cf", str(cfg_path)],
            cwd=scratch, env=pm_env, timeout=args.pm_timeout, log=scratch / "pm.log",
        )  # fmt: skip
        pm = {**read_pm(log_dir), "wall_s": wall, "stopped": stopped, "exit": code, "limit_s": args.pm_timeout}
        pm.update(planned=2 * (args.references + 1), log=str(scratch / "pm.log"))
        pm["network"] = "speedyresnet (hlb-CIFAR10)" if args.device == "cuda" else f"CNN, SGD, {args.epochs} epochs"
        print(f"  Privacy Meter: {wall:.1f} s, exit {code}", flush=True)
        out = scratch / "privgate.json"
        child_args = [str(data_dir / "rows.npz"), str(out), args.device, args.references, args.width, args.epochs]
        wall, stopped, code = timed_process(
            [sys.executable, str(Path(__file__).resolve()), "--child", *map(str, child_args), str(args.seed)],
            cwd=ROOT, env=env, timeout=args.privgate_timeout, log=scratch / "privgate.log",
        )  # fmt: skip
        pg = json.loads(out.read_text()) if out.is_file() else {"network": f"airbench-like-w{args.width}"}
        pg.update(wall_s=wall, stopped=stopped, exit=code, limit_s=args.privgate_timeout)
        pg["log"] = str(scratch / "privgate.log")
        pg.update(planned=args.references + 1, network=f"{pg['network']}, {args.epochs} epochs")
        print(f"  privgate: {wall:.1f} s, exit {code}", flush=True)
        summary = table(args, where, pm, pg)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
            print("(scratch folder removed: --keep DIR keeps the logs, models, signals and config)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
