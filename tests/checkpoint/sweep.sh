#!/usr/bin/env bash
# The kill sweep (issue 21): an MNIST example with --checkpoint-dir is
# interrupted at random moments (SIGKILL or SIGTERM, anywhere from start-up
# through training to its final evaluation and --save), one to three times in
# a row, then run to its end. After every interruption nothing written before
# is lost (the newest checkpoint seen before the signal, or a newer one, is
# still there, or the run had finished and written everything), the status
# says what happened (0, 75 preempted, 137 killed, 143 terminated outside
# fit), and the run completed at last saves weights byte for byte those of a
# run never interrupted (for a deterministic strategy) and leaves no
# checkpoint behind.
#   sweep.sh EXE ROUNDS [LAUNCHER...] -- [EXTRA ARGS...]
# LAUNCHER: e.g. "mpirun -np 2": SIGKILL goes to one rank, SIGTERM to every rank.
# STRATA_SWEEP_SEED replays a sweep (it is printed). Exit 77 without MNIST.
set -uo pipefail
exe=$1
rounds=$2
shift 2
launcher=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do launcher+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")
seed=${STRATA_SWEEP_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$seed
echo "sweep seed $seed (STRATA_SWEEP_SEED=$seed replays it): ${launcher[*]} $(basename "$exe") ${extra[*]}"

dir=$(mktemp -d /tmp/strata_sweep.XXXXXX)
trap 'rm -rf "$dir"' EXIT
common=(--epochs 2 --train-limit 4000 --batch 32 --seed 3 --quiet --min-accuracy 0 --if-present "${extra[@]}")
mpi=${#launcher[@]}

fail() {
  echo "FAIL: $*"
  echo "--- the last run's output:"
  cat "$dir/log"
  exit 1
}
now() { date +%s%N; }
newest() {  # the highest step among the complete checkpoints in $1 (-1: none)
  local best=-1 f s
  for f in "$1"/ckpt-*.strata; do
    [ -f "$f" ] || continue
    s=${f##*/ckpt-}
    s=$((10#${s%.strata}))
    [ "$s" -gt "$best" ] && best=$s
  done
  echo $best
}

t0=$(now)
"${launcher[@]}" "$exe" "${common[@]}" --save "$dir/ref.bin" > "$dir/log" 2>&1
rc=$?
[ $rc -eq 77 ] && { cat "$dir/log"; exit 77; }
[ $rc -eq 0 ] || fail "the uninterrupted run exited $rc"
span_ms=$(( ($(now) - t0) / 1000000 ))
echo "uninterrupted: ${span_ms} ms"

for round in $(seq 1 "$rounds"); do
  ck="$dir/ck$round"
  rm -f "$dir/out.bin"
  stops=$((1 + RANDOM % 3))
  for stop in $(seq 1 $stops); do
    sig=$([ $((RANDOM % 2)) -eq 0 ] && echo KILL || echo TERM)
    at_ms=$(( (RANDOM * 32768 + RANDOM) % (span_ms * 11 / 10 + 1) ))  # up to 10% past the uninterrupted run's end
    "${launcher[@]}" "$exe" "${common[@]}" --checkpoint-dir "$ck" --save "$dir/out.bin" > "$dir/log" 2>&1 &
    pid=$!
    if [ $mpi -gt 0 ]; then  # the ranks must exist to be signalled
      for _ in $(seq 1 2000); do [ -n "$(pgrep -P $pid)" ] && break; sleep 0.005; done
    fi
    sleep "$(printf '%d.%03d' $((at_ms / 1000)) $((at_ms % 1000)))"
    before=$(newest "$ck")
    if [ $mpi -gt 0 ]; then
      ranks=$(pgrep -P $pid)
      [ "$sig" = KILL ] && ranks=$(echo "$ranks" | tail -n 1)
      [ -n "$ranks" ] && kill "-$sig" $ranks 2> /dev/null
    else
      kill "-$sig" $pid 2> /dev/null
    fi
    wait $pid 2> /dev/null
    status=$?
    echo "round $round, stop $stop: SIG$sig at ${at_ms} ms (newest checkpoint then: $before): status $status"
    if [ $mpi -eq 0 ]; then
      case "$sig:$status" in
        *:0 | KILL:137 | TERM:75 | TERM:143) ;;
        *) fail "SIG$sig: status $status (expected 0, or 137 for KILL, 75 or 143 for TERM)" ;;
      esac
      [ "$status" = 75 ] && ! grep -q "after saving checkpoint" "$dir/log" && fail "status 75 without naming the checkpoint"
    fi
    if [ "$status" -eq 0 ]; then  # it finished before the signal: everything written, nothing left behind
      cmp -s "$dir/ref.bin" "$dir/out.bin" || fail "a run that finished saved other weights than the uninterrupted run"
      [ "$(newest "$ck")" -eq -1 ] || fail "a finished run left its checkpoints"
      break
    fi
    after=$(newest "$ck")
    if [ "$after" -eq -1 ] && [ -e "$dir/out.bin" ]; then  # stopped after its work was written (in its exit)
      cmp -s "$dir/ref.bin" "$dir/out.bin" || fail "a run stopped after finishing saved other weights"
      status=0
      break
    fi
    [ "$after" -ge "$before" ] || fail "SIG$sig lost checkpoint $before (newest left: $after)"
  done
  if [ "$status" -ne 0 ]; then
    "${launcher[@]}" "$exe" "${common[@]}" --checkpoint-dir "$ck" --save "$dir/out.bin" > "$dir/log" 2>&1 ||
      fail "the run resumed after the interruptions exited $?"
    cmp -s "$dir/ref.bin" "$dir/out.bin" || fail "round $round: the resumed run's weights differ from the uninterrupted run's"
    [ "$(newest "$ck")" -eq -1 ] || fail "round $round: the completed run left its checkpoints"
  fi
  echo "round $round: the completed run saved the uninterrupted run's weights, byte for byte"
done
echo "OK: $rounds round(s) of interruptions at random moments lost nothing and resumed bitwise"
