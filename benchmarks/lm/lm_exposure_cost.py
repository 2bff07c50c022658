"""What canary exposure costs through ``privgate check``: CPU, wall time and peak memory for 6-digit secrets.

The case of issue 36: the 91k-parameter tiny LM of ``tests/tiny_lm.py`` (trained here from its seed, a few
seconds), its 24 + 24 records, and ``--canaries`` files of one and of ten canaries with 6-digit secrets
(|R| = 10^6). Each audit runs as a user runs it, ``privgate check MODEL --policy public --canaries FILE
--threads 1`` under ``/usr/bin/time -v``, and the script prints CPU and wall time, the peak resident memory, the
exposure measurement's own seconds and, per canary, how it was measured (``exact`` or ``extrapolated``) with
its value and interval. ``--max-exact 1000000`` adds a policy that ranks the six digits exactly (every
candidate scored, in chunks: memory bounded).

    python benchmarks/lm/lm_exposure_cost.py [--canaries 1 10] [--max-exact 1000000]

Measured on a 2-core machine shared with other jobs, load about 2 (CPU = user + sys of the whole run; secret
482193 alone, 48219i for canary i of ten; the model memorised "4821"): without canaries 8.8 s and 0.53 GB
peak RSS; one canary before (all candidates tokenised at once) 56.8 s and 5.21 GB, now 11.3 s and 0.58 GB
(10^4 sampled: 17.18 [11.40, 19.93] bits, the exact 15.84 inside); ranked exactly in chunks (max_exact 10^6)
62.8 s and 0.60 GB; ten canaries before killed after 300 s, now 24.6 s and 0.59 GB. docs/lm-leakage.md has
the table.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from tiny_lm import INSERTED, build_tiny_lm, tiny_lm_records  # noqa: E402

POLICY = """name: exposure-cost
extends: public
sensitivity: public
release: api
confidence: 0.9
attacks:
  canary_exposure: {max_exact: %d}
"""


def run(model: Path, work: Path, n: int, policy: str) -> None:
    canaries = work / f"canaries{n}.jsonl"
    secrets = ["482193"] if n == 1 else [f"48219{i % 10}" for i in range(n)]  # canary i's secret; alone, 482193
    rows = [{**INSERTED, "prefix": f"canary {i}: the secret number is ", "secret": s} for i, s in enumerate(secrets)]
    canaries.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = work / f"report{n}.json"
    exe = shutil.which("privgate") or "privgate"
    cmd = [exe, "check", str(model), "--policy", policy, "--members", str(work / "m.jsonl")]
    cmd += ["--nonmembers", str(work / "n.jsonl"), "--canaries", str(canaries), "--json", str(out), "--threads", "1"]
    timed = ["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd
    done = subprocess.run(timed, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    cpu = sum(float(t) for t in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr))
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if done.returncode not in (0, 1, 3) or not out.exists():
        print(done.stdout + done.stderr)
        raise SystemExit(f"privgate check exited {done.returncode}")
    attack = next(a for a in json.loads(out.read_text())["attacks"] if a["name"] == "canary_exposure")
    print(
        f"{n} canaries ({policy}): CPU {cpu:.1f} s, wall {wall.group(1) if wall else '?'}, peak RSS "
        f"{int(rss.group(1)) / 1024**2:.2f} GB, exposure measured in {attack['seconds']:.1f} s"
        if rss
        else f"{n} canaries: exposure measured in {attack['seconds']:.1f} s (no /usr/bin/time for memory)"
    )
    for c in attack["extras"]["canaries"]:
        how = f"{c['samples']:,} sampled, {c['below']} below" if c["method"] == "extrapolated" else "all 10^6 ranked"
        print(f"  canary {c['index']}: {c['method']} ({how}): {c['exposure']:.2f} bits [{c['lo']:.2f}, {c['hi']:.2f}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canaries", type=int, nargs="+", default=[1, 10], help="canaries per audit")
    ap.add_argument("--max-exact", type=int, default=None, help="also rank exactly up to this many candidates")
    ap.add_argument("--model", type=Path, default=None, help="a tiny LM folder already built (else built here)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        model = args.model or build_tiny_lm(work / "tiny", layers=2)
        members, nonmembers = tiny_lm_records()
        (work / "m.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in members))
        (work / "n.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in nonmembers))
        policies = ["public"]
        if args.max_exact:
            (work / "exact.yaml").write_text(POLICY % args.max_exact)
            policies.append(str(work / "exact.yaml"))
        for policy in policies:
            for n in args.canaries:
                run(model, work, n, policy)


if __name__ == "__main__":
    main()
