#!/usr/bin/env bash
# The exit status of an mpirun job preempted with SIGTERM (issue 21; see
# "Exit statuses under mpirun" in docs/fault-tolerance.md):
#   1. SIGTERM sent to every rank: each checkpoints and exits 75, and mpirun
#      reports the first non-zero status of its ranks: 75.
#   2. SIGTERM sent to mpirun itself: Open MPI (4.1) passes SIGTERM on to
#      the ranks (after odls_base_sigkill_timeout s, SIGKILL after as long
#      again) and exits 1 whatever the ranks return. Pinned here so that the
#      documentation is revisited if a new Open MPI changes it.
#   preempted_status.sh MPIRUN MNIST_MLP [ARGS...]   (exit 77 without MNIST)
set -uo pipefail
mpirun=$1 exe=$2
shift 2
dir=$(mktemp -d /tmp/strata_preempted.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    local kids
    kids=$(pgrep -P "$pid")
    [ -n "$kids" ] && kill -KILL $kids 2> /dev/null
    kill -KILL "$pid" 2> /dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  cat "$dir/log"
  exit 1
}

run_and_signal() {  # run_and_signal ranks|mpirun CKPT_DIR [ARGS...] -> $status
  local target=$1 ck=$2
  shift 2
  "$mpirun" -np 2 --oversubscribe "$exe" --strategy multi_worker_mirrored --replicas 1 --epochs 50 --quiet \
    --min-accuracy 0 --if-present --checkpoint-dir "$ck" "$@" > "$dir/log" 2>&1 &
  pid=$!
  local waited=0
  until compgen -G "$ck/ckpt-*.strata" > /dev/null; do
    if ! kill -0 $pid 2> /dev/null; then
      wait $pid
      status=$?
      [ $status -eq 77 ] && { cat "$dir/log"; exit 77; }
      fail "the job ended (status $status) before its first checkpoint"
    fi
    sleep 0.02
    waited=$((waited + 1))
    [ $waited -gt 6000 ] && fail "no checkpoint within 120 s"
  done
  if [ "$target" = ranks ]; then
    # shellcheck disable=SC2046
    kill -TERM $(pgrep -P $pid)
  else
    kill -TERM $pid
  fi
  local start=$SECONDS
  while kill -0 $pid 2> /dev/null; do
    [ $((SECONDS - start)) -ge 60 ] && fail "mpirun still running 60 s after SIGTERM ($target)"
    sleep 0.1
  done
  wait $pid
  status=$?
  pid=
}

run_and_signal ranks "$dir/ck1" "$@"
grep -q "stopped by signal 15 after saving checkpoint" "$dir/log" || fail "SIGTERM to the ranks: no checkpoint saved"
[ $status -eq 75 ] || fail "SIGTERM to every rank: mpirun exited $status, expected 75 (every rank preempted)"
echo "ok: SIGTERM to every rank: mpirun exited 75"

run_and_signal mpirun "$dir/ck2" "$@"
[ $status -eq 1 ] || fail "SIGTERM to mpirun: mpirun exited $status; Open MPI 4.1 exits 1 there (if this Open MPI \
does otherwise, update 'Exit statuses under mpirun' in docs/fault-tolerance.md and this test)"
echo "ok: SIGTERM to mpirun: mpirun exited 1 (Open MPI's own status)"
exit 0
