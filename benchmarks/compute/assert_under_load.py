"""``assert_mia_below`` on the digits CNN, idle and beside busy processes, with the old and the new thread rule.

    python benchmarks/compute/assert_under_load.py                 # 3 busy processes, 2 turns
    python benchmarks/compute/assert_under_load.py --busy 3 --repeat 3 --attack all

The assertion of issue 42: ``assert_mia_below(cnn, members, nonmembers,
accuracy=0.6, auc=0.65)`` on ``examples/digits_cnn`` (the CNN as an
``nn.Module``, 897 members, 600 non-members, no recipe). Each measurement is a
fresh process as a test session is: torch imported first (a test module does),
then the threads decided as the pytest plugin decides them — the **old** rule
(every core the process may use, :func:`privgate.threads.usable_cores`)
or the **new** one (the cores other work leaves free,
:func:`privgate.threads.default_threads`) — then the assertion, timed
alone. ``$OMP_NUM_THREADS``, ``$OMP_WAIT_POLICY`` and ``$PRIVGATE_*`` are
removed from its environment. The measurements run in turns, in the same run:
idle (old, new), then beside ``--busy`` processes spinning ``while True: pass``
(old, new); each turn prints the threads each rule chose and its times, and the
last lines the median ratio busy / idle per rule. On a machine other people
use, "idle" means no busy processes of this benchmark: read the ratios of one
run together.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits_cnn"

CHILD = """
import json, sys, time
import torch  # a test module imports torch before privgate decides its threads
sys.path.insert(0, {example!r})
import data, recipe
from privgate import assertions
from privgate.threads import default_threads, usable_cores
from pytest_privgate import assert_mia_below

rule, attack = sys.argv[1], sys.argv[2]
n, reason = usable_cores() if rule == "old" else default_threads(None)
assertions.settings["run"] = {{"threads": n, "threads_reason": reason}}
cnn = recipe.make_model()
cnn.load_state_dict(torch.load({model!r}))
cnn.eval()
members, nonmembers = data.members(), data.nonmembers()
t0 = time.perf_counter()
try:
    report = assert_mia_below(cnn, members, nonmembers, accuracy=0.6, auc=0.65, attack=attack)
except AssertionError as exc:
    report = exc.report
seconds = time.perf_counter() - t0
attacks = {{a.name: a.seconds for a in report.attacks if a.status == "ran"}}
print(json.dumps({{"seconds": seconds, "threads": n, "reason": reason, "verdict": report.verdict, "attacks": attacks}}))
"""


def measure(rule: str, attack: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "PRIVGATE_"))}
    code = CHILD.format(example=str(EXAMPLE), model=str(EXAMPLE / "model.pt"))
    out = subprocess.run(
        [sys.executable, "-c", code, rule, attack], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def spinners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def show(label: str, rule: str, m: dict) -> None:
    slow = ", ".join(f"{k} {v:.1f}" for k, v in sorted(m["attacks"].items(), key=lambda kv: -kv[1])[:3])
    print(f"  {label:<5} {rule} rule: {m['seconds']:6.1f} s  threads {m['threads']}  ({slow})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=3, help="busy processes beside the assertion (default 3)")
    ap.add_argument("--repeat", type=int, default=2, help="turns (default 2)")
    ap.add_argument("--attack", default="best", help="the assertion's attack= (best: black-box; all: every kind)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still stops the busy processes (finally)
    print(f"cores: affinity {len(os.sched_getaffinity(0))} of {os.cpu_count()}; load {os.getloadavg()}", flush=True)
    times: dict[tuple[str, str], list[float]] = {}
    for turn in range(1, args.repeat + 1):
        print(f"turn {turn}", flush=True)
        for rule in ("old", "new"):
            m = measure(rule, args.attack)
            times.setdefault(("idle", rule), []).append(m["seconds"])
            show("idle", rule, m)
        busy = spinners(args.busy)
        try:
            time.sleep(2.0)
            for rule in ("old", "new"):
                m = measure(rule, args.attack)
                times.setdefault(("busy", rule), []).append(m["seconds"])
                show("busy", rule, m)
                print(f"        ({m['reason']})", flush=True)
        finally:
            for p in busy:
                p.kill()
                p.wait()
        time.sleep(2.0)
    for rule in ("old", "new"):
        idle, busy = statistics.median(times[("idle", rule)]), statistics.median(times[("busy", rule)])
        beside = f"beside {args.busy} busy processes {busy:.1f} s"
        print(f"{rule} rule: idle {idle:.1f} s, {beside}, ratio {busy / idle:.2f}×")


if __name__ == "__main__":
    main()
