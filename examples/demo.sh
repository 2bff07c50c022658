#!/usr/bin/env bash
# `make demo`: privgate judges the bundled example models, as a user would run it.
# A failing verdict is the expected outcome for these deliberately leaky models,
# so the demo reports exit codes instead of stopping on them.
# The steps run in two lanes at once (each privgate run then takes one core: its default thread count leaves the
# cores other work holds): each lane takes the next example not yet taken, the costliest first, and runs its steps
# in order; every step's output is printed whole, in the order of the step numbers, as soon as it is its turn.
set -uo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PRIVGATE="$ROOT/$VENV/bin/privgate"
PY="$ROOT/$VENV/bin/python"
OUT="$ROOT/privgate-reports"
CN="$OUT/clinical-notes"
mkdir -p "$OUT"
# bytecode: `make demo` installs none, so the demo's interpreters keep what they import in the venv, where the later
# ones find it (with PYTHONDONTWRITEBYTECODE set, each would compile ~10 CPU-seconds of imports again)
export PYTHONPYCACHEPREFIX="$ROOT/$VENV/pycache"
unset PYTHONDONTWRITEBYTECODE
LOGS=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$LOGS"' EXIT

# step N DIR NAME EXPECTED ARGS...: `privgate check ARGS` in examples/DIR; its output to $LOGS/N.out, then
# "code expected" to $LOGS/N.code (written last: the printer waits for it)
step() {
  local n=$1 dir=$2 name=$3 expected=$4 t0=$SECONDS; shift 4
  {
    echo
    echo "════ $name  (cd examples/$dir && privgate check $*)"
    (cd "$ROOT/examples/$dir" && "$PRIVGATE" check "$@")
    local code=$?
    echo "──── exit code $code (expected $expected), $((SECONDS - t0)) s"
    echo "$code $expected" > "$LOGS/$n.part"
  } > "$LOGS/$n.out" 2>&1
  mv "$LOGS/$n.part" "$LOGS/$n.code"
}

# build N WHAT COMMAND...: a step that makes an example's files (exit 0 expected)
build() {
  local n=$1 what=$2 t0=$SECONDS; shift 2
  { echo; echo "════ building $what"; "$@"; echo "$? 0" > "$LOGS/$n.part"; echo "──── $((SECONDS - t0)) s"; } \
    > "$LOGS/$n.out" 2>&1
  mv "$LOGS/$n.part" "$LOGS/$n.code"
}

digits() {
  step 1 digits "digits MLP vs the strict policy" 1 \
    --json "$OUT/digits-strict.json" --html "$OUT/digits-strict.html" --markdown "$OUT/digits-strict.md"
  # the fix: retrain with DP-SGD from scratch, lowering ε until the policy passes within its utility floor.
  # strict-remediate.yaml is strict without its TPR@0.1%-FPR check, which 600 digits non-members cannot measure.
  step 2 digits "harden the digits MLP with DP-SGD" 0 \
    --policy strict-remediate.yaml --remediate --output-model "$OUT/digits-hardened.pt" \
    --json "$OUT/digits-hardened.json" --html "$OUT/digits-hardened.html"
}

purchase() {
  step 3 purchase "purchase MLP vs the internal policy (MIA accuracy < 80 %)" 1 \
    --json "$OUT/purchase-internal.json" --html "$OUT/purchase-internal.html"
}

cnn() {
  # a CNN with BatchNorm: its 16 LiRA reference CNNs train at once (the engine's general kernel), on the CPU or a GPU
  step 4 digits_cnn "digits CNN (conv + BatchNorm) vs LiRA and RMIA with CNN reference models" 0 \
    --json "$OUT/digits-cnn.json" --html "$OUT/digits-cnn.html"
}

mortgage() {
  # a scikit-learn Pipeline (one-hot encoded text columns + a random forest) on a real table of mortgage
  # applications, saved with skops, its members and non-members in Parquet: the pipeline is its own recipe
  if [ -f "$ROOT/examples/mortgage/model.skops" ]; then echo "0 0" > "$LOGS/5.code"; : > "$LOGS/5.out"
  else build 5 "the mortgage Pipeline (examples/mortgage/build.py)" "$PY" "$ROOT/examples/mortgage/build.py"; fi
  step 6 mortgage "mortgage Pipeline (text columns, random forest) vs LiRA and RMIA on clones of it" 1 \
    --json "$OUT/mortgage.json" --html "$OUT/mortgage.html"
  # the fix for a forest: no DP-SGD to run, so its own capacity (min_samples_leaf) is searched with the same
  # attacks. Here it ends no_setting (exit 1), and says why: the leaf size at which the attacks stop is no more
  # accurate than always predicting 'no' (0.8725 on the held-out rows): privgate hands out no model a constant matches
  step 7 mortgage "harden the mortgage Pipeline by its own capacity (no DP guarantee)" 1 \
    --policy harden.yaml --remediate --output-model "$OUT/mortgage-hardened.skops" --json "$OUT/mortgage-hardened.json"
}

clinical_notes() {
  # a language model: a tiny Llama fine-tuned on synthetic patient records with canaries, built from a seed
  # (about a minute of one core, once), audited on its text: MIA, canary exposure and verbatim extraction
  if [ -f "$CN/memorised/config.json" ]; then echo "0 0" > "$LOGS/8.code"; : > "$LOGS/8.out"
  else build 8 "the clinical-notes language models (examples/clinical_notes/build.py)" \
    "$PY" "$ROOT/examples/clinical_notes/build.py" "$CN"; fi
  step 9 clinical_notes "clinical-notes language model vs its policy (internal + exposure + extraction)" 1 \
    "$CN/memorised" --policy policy.yaml --members "$CN/members.jsonl" --nonmembers "$CN/nonmembers.jsonl" \
    --reference-model "$CN/base" --canaries "$CN/canaries.jsonl" \
    --json "$OUT/clinical-notes.json" --html "$OUT/clinical-notes.html"
  step 10 clinical_notes "the same base fine-tuned on other records of the same distribution" 0 \
    "$CN/other" --policy internal --members "$CN/members.jsonl" --nonmembers "$CN/nonmembers.jsonl" \
    --reference-model "$CN/base" --json "$OUT/clinical-notes-other.json"
}

# the examples, costliest first (so that the two lanes end close together); a lane takes one by making its folder
lane() {
  local example
  for example in clinical_notes digits mortgage cnn purchase; do
    mkdir "$LOGS/taken-$example" 2>/dev/null && "$example"
  done
}

lane &
lane &
for n in $(seq 1 10); do
  while [ ! -f "$LOGS/$n.code" ]; do sleep 0.2; done
  cat "$LOGS/$n.out"
  read -r code expected < "$LOGS/$n.code"
  [ "$code" -eq "$expected" ] || { echo "demo: step $n exited $code, expected $expected" >&2; exit 1; }
done
wait

echo
echo "Reports written to $OUT:"
ls -1 "$OUT"
echo "The demo took $SECONDS s."
