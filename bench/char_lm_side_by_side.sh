#!/usr/bin/env bash
# examples/char_lm under one device, mirrored x2, tensor parallel T = 2,
# pipeline S = 2 and S = 2 x T = 2, and PyTorch's same GPT and recipe (bench/torch_char_lm.py,
# Debian's python3-torch) on the same data, one after another in one
# sitting; prints one table: training tokens/s and the held-out loss in
# bits per character. Not a test (CI does not run it).
#   bash bench/char_lm_side_by_side.sh [build dir] [-- extra char_lm/torch options]
# Environment: LIMIT (training windows, default 2000), EPOCHS (1), CONTEXT
# (128), LAYERS (4), WIDTH (128), HEADS (4), BATCH (32), THREADS (PyTorch's
# threads, default 2), PYTHON (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
char_lm=$build/examples/char_lm
[ -x "$char_lm" ] || { echo "char_lm_side_by_side: $char_lm not built (ninja -C $build examples/char_lm)" >&2; exit 1; }
bash scripts/fetch-corpus.sh > /dev/null
common=(--train-limit "${LIMIT:-2000}" --epochs "${EPOCHS:-1}" --context "${CONTEXT:-128}" --layers "${LAYERS:-4}"
        --width "${WIDTH:-128}" --heads "${HEADS:-4}" --batch "${BATCH:-32}")
row() {  # name, then the command; its last line "validation X bits/char ... : N tokens/s"
  local name=$1 out
  shift
  out=$("$@" 2>&1 | grep -E '^(validation|pytorch)' | tail -n 1) || true
  local bits tps
  bits=$(sed -nE 's/.*validation ([0-9.]+) bits\/char.*/\1/p' <<< "$out")
  tps=$(sed -nE 's/.*: ([0-9]+) tokens\/s.*/\1/p' <<< "$out")
  printf '%-28s %12s %16s\n' "$name" "${tps:-failed}" "${bits:-failed}"
}
printf '%-28s %12s %16s\n' "run" "tokens/s" "val bits/char"
row "strata one_device" "$char_lm" --strategy one_device --sample 0 --quiet "${common[@]}"
row "strata mirrored x2" "$char_lm" --strategy mirrored --replicas 2 --sample 0 --quiet "${common[@]}"
row "strata tensor_parallel T=2" "$char_lm" --strategy tensor_parallel --tensor-parallel 2 --sample 0 --quiet "${common[@]}"
row "strata pipeline S=2" "$char_lm" --strategy pipeline --stages 2 --microbatches 4 --sample 0 --quiet "${common[@]}"
row "strata pipeline S=2 x T=2" "$char_lm" --strategy pipeline --stages 2 --tensor-parallel 2 --microbatches 4 \
    --sample 0 --quiet "${common[@]}"
python=${PYTHON:-/usr/bin/python3}
if "$python" -c 'import torch' 2> /dev/null; then
  row "pytorch (${THREADS:-2} threads)" "$python" bench/torch_char_lm.py --threads "${THREADS:-2}" "${common[@]}"
else
  printf '%-28s %s\n' "pytorch" "skipped: python3-torch not installed"
fi
