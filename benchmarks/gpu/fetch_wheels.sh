#!/usr/bin/env bash
# Fetch benchmarks/gpu/wheels.txt's wheels for the lent GPU machine (CPython 3.12, manylinux x86_64) into .whl/:
#   bash benchmarks/gpu/fetch_wheels.sh        # here, where pip reaches PyPI; then carry .whl in the device tool's run
# .whl/ must stay out of git: the line `/.whl/` in .git/info/exclude (added here if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
grep -v '^#' benchmarks/gpu/wheels.txt | xargs python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl
du -sh .whl
