#!/usr/bin/env bash
# Kill-and-resume with a real example (issue 15): mnist_mlp with
# --checkpoint-dir, killed with SIGKILL right after its first checkpoint and
# run again, must save the very weights (cmp, byte for byte) of a run never
# interrupted; SIGTERM must make it save, exit 75, and resume the same way.
# A run stopped three times in a row (SIGKILL, SIGKILL after the resumed
# run's next checkpoint, SIGTERM) writes the uninterrupted run's --csv
# history, byte for byte (issue 48).
#   kill_resume.sh MNIST_MLP [LAUNCHER...] -- [EXTRA ARGS...]
# LAUNCHER: e.g. "mpirun -np 2" (then EXTRA picks multi_worker_mirrored): SIGKILL
# goes to one rank (the job ends; the run again resumes), SIGTERM to every rank.
# Exit 77 (skipped) without MNIST.
set -uo pipefail
exe=$1
shift
launcher=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do launcher+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")

dir=$(mktemp -d /tmp/strata_kill_resume.XXXXXX)
trap 'rm -rf "$dir"' EXIT
common=(--epochs 4 --train-limit 12000 --seed 3 --quiet --min-accuracy 0 --if-present "${extra[@]}")

run() {  # run ARGS... : the example under the launcher, output into $dir/log
  "${launcher[@]}" "$exe" "${common[@]}" "$@" > "$dir/log" 2>&1
}
fail() {
  echo "FAIL: $*"
  cat "$dir/log"
  exit 1
}

run --save "$dir/ref.bin" --csv "$dir/ref.csv"
rc=$?
[ $rc -eq 77 ] && { cat "$dir/log"; exit 77; }
[ $rc -eq 0 ] || fail "the uninterrupted run exited $rc"

# start, wait for a complete checkpoint newer than any there, send SIGNAL, wait for the exit
newest() { ls "$1"/ckpt-*.strata 2> /dev/null | tail -n 1; }
interrupt() {  # interrupt SIGNAL CKPT_DIR [ARGS...] -> sets $status
  local sig=$1 ck=$2
  shift 2
  local before
  before=$(newest "$ck")
  "${launcher[@]}" "$exe" "${common[@]}" --checkpoint-dir "$ck" --save "$dir/out.bin" "$@" > "$dir/log" 2>&1 &
  local pid=$! waited=0
  until [ -n "$(newest "$ck")" ] && [ "$(newest "$ck")" != "$before" ]; do
    kill -0 $pid 2> /dev/null || fail "the run ended (status $(wait $pid; echo $?)) before its first checkpoint"
    sleep 0.005
    waited=$((waited + 1))
    [ $waited -gt 12000 ] && { kill -9 $pid; fail "no checkpoint within 60 s"; }
  done
  if [ ${#launcher[@]} -gt 0 ]; then  # under mpirun: signal the ranks (SIGKILL: the last one only)
    local ranks
    ranks=$(pgrep -P $pid)
    [ "$sig" = KILL ] && ranks=$(echo "$ranks" | tail -n 1)
    kill "-$sig" $ranks
  else
    kill "-$sig" $pid
  fi
  wait $pid
  status=$?
}
mpi=${#launcher[@]}

# 1. SIGKILL: the second run resumes and ends bitwise like the reference
interrupt KILL "$dir/ck1"
if [ $mpi -eq 0 ]; then
  [ $status -eq 137 ] || fail "SIGKILL: status $status, expected 137"
else
  [ $status -ne 0 ] || fail "SIGKILL of a rank: mpirun exited 0"
fi
ls "$dir/ck1"/ckpt-*.strata > /dev/null 2>&1 || fail "SIGKILL: no checkpoint left to resume from"
run --checkpoint-dir "$dir/ck1" --save "$dir/out.bin" || fail "the resumed run failed"
grep -q "resumed from the checkpoint of step" "$dir/log" || fail "SIGKILL: the second run did not resume"
cmp "$dir/ref.bin" "$dir/out.bin" || fail "SIGKILL then resume: weights differ from the uninterrupted run"
compgen -G "$dir/ck1/ckpt-*" > /dev/null && fail "a completed run left its checkpoints behind"

# 2. SIGTERM: save, exit 75, resume to the same weights
rm -f "$dir/out.bin"
interrupt TERM "$dir/ck2"
if [ $mpi -eq 0 ]; then
  [ $status -eq 75 ] || fail "SIGTERM: status $status, expected 75 (preempted after saving)"
else
  [ $status -ne 0 ] || fail "SIGTERM of the ranks: mpirun exited 0"
fi
grep -q "after saving checkpoint" "$dir/log" || fail "SIGTERM: no message naming the checkpoint"
[ -e "$dir/out.bin" ] && fail "SIGTERM: a preempted run wrote its --save file"
run --checkpoint-dir "$dir/ck2" --save "$dir/out.bin" || fail "the run resumed after SIGTERM failed"
grep -q "resumed from the checkpoint of step" "$dir/log" || fail "SIGTERM: the second run did not resume"
cmp "$dir/ref.bin" "$dir/out.bin" || fail "SIGTERM then resume: weights differ from the uninterrupted run"

# 3. three stops in a row, then to the end: the CSV history is the uninterrupted run's
rm -f "$dir/out.bin"
interrupt KILL "$dir/ck3" --csv "$dir/got.csv"
interrupt KILL "$dir/ck3" --csv "$dir/got.csv"  # (its output, buffered, dies with it)
interrupt TERM "$dir/ck3" --csv "$dir/got.csv"
run --checkpoint-dir "$dir/ck3" --save "$dir/out.bin" --csv "$dir/got.csv" || fail "3: the last resumed run failed"
cmp "$dir/ref.bin" "$dir/out.bin" || fail "3: three stops then resume: weights differ from the uninterrupted run"
cmp "$dir/ref.csv" "$dir/got.csv" || { diff "$dir/ref.csv" "$dir/got.csv"; fail "3: the CSV history differs from the uninterrupted run's"; }
echo "OK: SIGKILL and SIGTERM runs resumed to the uninterrupted run's weights and CSV history, byte for byte"
