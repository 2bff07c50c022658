#!/usr/bin/env bash
# Issue 43 on one lent GPU (an H200: python3.12 and a CUDA torch preinstalled, nothing else of privgate's):
# CIFAR-shaped LiRA + RMIA through privgate's real path (benchmarks/engine/cifar_engine.py), printed as one table.
#
#   bash benchmarks/gpu/gpu_check.sh                   # from the repository root: every step, about 8 minutes
#   STEPS="rows20k pm20k" bash benchmarks/gpu/gpu_check.sh    # some of them (rows20k rows50k pm20k lane)
#
# 1. privgate's other dependencies from the carried .whl/ ($WHEELS; wheels.txt, fetch_wheels.sh) and its entry points
#    (_setup.sh, as test_lane.sh does); privgate itself is imported from this checkout.
# 2. 20,000 audit rows, LiRA-16 + RMIA-4 (2 views: the default), vectorised vs sequential reference training.
# 3. 50,000 audit rows, LiRA-64 + RMIA-4, vectorised only, stopped after $BIG_LIMIT seconds (240).
# 4. Privacy Meter's RMIA (its own run_mia.py, unchanged, built-in speedyresnet) vs privgate's RMIA, K = 4, on the
#    same 20,000 rows (benchmarks/gpu/privacy_meter_cifar.py); Privacy Meter stopped after $PM_LIMIT seconds (120).
#    Its checkout travels as the git-ignored folder .pm/ (in .gitignore; about 7.5 MB), made from the mirror with
#      mkdir -p .pm && git --git-dir=/work/.mirror/privacytrustlab+ml_privacy_meter/repo archive HEAD | tar -x -C .pm
#    and carried beside the wheels (the device tool's carry: [".pm", ".whl"]); without .pm/ the step is skipped.
#    Privacy Meter needs no wheel beyond the image's packages: its `datasets` import (never called on CIFAR) gets a
#    stand-in, which the script names.
# 5. lane: the suite on the GPU (test_lane.sh: `make test-gpu` less what cannot be carried), about 3 minutes; last,
#    as the steps above are what only this machine can measure. One device-tool call runs at most 10 minutes:
#    run `STEPS="rows20k rows50k pm20k"` and `STEPS=lane` as two calls where the budget allows.
# Logs and each run's JSON go to $OUT (the device tool's folder), else ./gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIG_LIMIT="${BIG_LIMIT:-240}"
PM_LIMIT="${PM_LIMIT:-120}"
STEPS=" ${STEPS:-rows20k rows50k pm20k lane} "
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# shellcheck source=benchmarks/gpu/_setup.sh
source benchmarks/gpu/_setup.sh

run() {  # name, limit (s), cifar_engine arguments...
    local name=$1 limit=$2
    shift 2
    [[ "$STEPS" == *" $name "* ]] || return 0
    echo "== $name: cifar_engine.py $*"
    timeout "$limit" $PY benchmarks/engine/cifar_engine.py --device cuda --json "$DEST/$name.json" "$@" 2>&1 | tee "$DEST/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 124 ] && echo "== $name: stopped after $limit s" | tee -a "$DEST/$name.log"
    return 0
}
run rows20k 360 --rows 20000 --references 16 --engine both
run rows50k "$BIG_LIMIT" --rows 50000 --references 64 --engine vectorised
if [[ "$STEPS" != *" pm20k "* ]]; then
    :
elif [ -f .pm/run_mia.py ]; then
    echo "== pm20k: privacy_meter_cifar.py, Privacy Meter stopped after $PM_LIMIT s"
    timeout $((PM_LIMIT + 180)) $PY benchmarks/gpu/privacy_meter_cifar.py --pm .pm --device cuda --rows 20000 \
        --references 4 --pm-timeout "$PM_LIMIT" --privgate-timeout 150 --json "$DEST/pm20k.json" 2>&1 |
        tee "$DEST/pm20k.log"
else
    echo "== pm20k: skipped (no Privacy Meter checkout in .pm/: this script's header says how to make one)"
fi

$PY - "$DEST" "$BIG_LIMIT" "$STEPS" <<'EOF'
import json, sys
from pathlib import Path

dest, limit, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split()
cols = ("reference_training_s", "reference_scoring_s", "target_scoring_s", "rest_of_the_check_s", "check_s",
        "end_to_end_s")
print("\n| rows | attacks | engine | views | ref. training | ref. scoring | target scoring | rest | check | "
      "end to end | passes (audit, z) | LiRA AUC | TPR@1% |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, what in (("rows20k", "20,000 rows, LiRA-16 + RMIA-4"), ("rows50k", "50,000 rows, LiRA-64 + RMIA-4")):
    f = dest / f"{name}.json"
    if name not in steps:
        print(f"| {what} | not run (not in STEPS) |")
        continue
    if not f.exists():
        print(f"| {what} | not finished (stopped after {limit if name == 'rows50k' else 360} s, or failed: "
              f"{name}.log) |")
        continue
    for r in json.loads(f.read_text()):
        p = r["passes"]
        tpr = "n/a" if r["lira_tpr_1pct"] is None else f"{r['lira_tpr_1pct']:.3f}"
        auc = "n/a" if r["lira_auc"] is None else f"{r['lira_auc']:.3f}"
        times = " | ".join(f"{r[c]:.1f}" for c in cols)
        print(f"| {r['rows']} | LiRA-{r['references']} + RMIA-4 | {r['engine']} ({r['kernel']}) | {r['views']} | "
              f"{times} | {p.get('audit_rows', '?')}, {p.get('z_samples', '?')} | {auc} | {tpr} |")
print(f"\n(seconds; {json.loads((dest / 'rows20k.json').read_text())[0]['device'] if (dest / 'rows20k.json').exists() else ''})")

f = dest / "pm20k.json"
if "pm20k" not in steps:
    print("\nPrivacy Meter vs privgate: not run (not in STEPS)")
    sys.exit(0)
if not f.exists():
    print("\nPrivacy Meter vs privgate: not run (no .pm/) or failed: pm20k.log")
    sys.exit(0)
s = json.loads(f.read_text())
print(f"\nRMIA, K = {s['references']}, {s['rows']} rows ({s['device']})\n")
print("| tool | network (weights) | models trained | end to end | s per model | AUC | TPR@1% |\n|---|---|---|---|---|---|---|")
for key, name in (("privacy_meter", "Privacy Meter run_mia.py"), ("privgate", "privgate api.check")):
    t = s[key]
    wall = f"{t['wall_s']:.1f}" + (f" (stopped after {t['limit_s']:g} s)" if t["stopped"] else "")
    per = "n/a" if t["per_model_s"] is None else f"{t['per_model_s']:.2f}"
    auc, tpr = (("n/a" if t.get(k) is None else f"{t[k]:.3f}") for k in ("auc", "tpr_1pct"))
    print(f"| {name} | {t['network']} ({t.get('weights', '?')}) | {t['models_trained']} of {t['planned']} | {wall} | "
          f"{per} | {auc} | {tpr} |")
ratio = s["ratio"]
met = "n/a" if ratio is None else ("met" if ratio >= s["goal"] else "MISSED")
print(f"\nprivgate per model vs Privacy Meter per model: {'n/a' if ratio is None else f'{ratio:.1f}'}x "
      f"(goal >= {s['goal']:g}x: {met})")
EOF
if [[ "$STEPS" == *" lane "* ]]; then
    echo "== lane: benchmarks/gpu/test_lane.sh"
    WHEELS=none bash benchmarks/gpu/test_lane.sh
fi
