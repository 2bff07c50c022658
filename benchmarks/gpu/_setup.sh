# Sourced by test_lane.sh and gpu_check.sh on a lent GPU machine (python3 and a CUDA torch there, privgate's other
# packages not, no network): the wheels of $WHEELS (default .whl/, see wheels.txt and fetch_wheels.sh) go to $SITE
# with `pip --target`, _dist_info.py writes privgate's entry points there (the pytest plugin, the LM registries),
# and PYTHONPATH puts $SITE, then this checkout, first. WHEELS=none skips the install (every package is there).
# Sets PY (default python3) and DEST (the device tool's $OUT, else ./gpu-check/); with DEVICE=cuda (the default)
# checks that torch sees the GPU. Exits 2 on failure.
PY="${PY:-python3}"
DEST="${OUT:-gpu-check}"
SITE="${SITE:-/tmp/site}"
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1
if [ "${WHEELS:-.whl}" != none ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${WHEELS:-.whl}"/*.whl \
        || { echo "gpu set-up: installing the wheels of ${WHEELS:-.whl} into $SITE failed"; exit 2; }
fi
$PY benchmarks/gpu/_dist_info.py "$SITE" || exit 2
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "${DEVICE:-cuda}" = cuda ]; then
    $PY -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'; print('torch', torch.__version__, torch.cuda.get_device_name(0))" || exit 2
fi
