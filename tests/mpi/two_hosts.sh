#!/usr/bin/env bash
# two_hosts.sh PROGRAM [ARGS...] -- run PROGRAM as a real two-host MPI job (one rank per "host")
# on two throwaway network namespaces joined by a veth pair; exit with PROGRAM's status.
#
# How: namespaces strata-h1-PID and strata-h2-PID get a veth pair (created directly inside them,
# so nothing appears in the root namespace) with 10.231.X.1/24 and 10.231.X.2/24, X from the PID.
# mpirun runs inside h1 with a hostfile of both IPs (1 slot each); to start its daemon (orted) on
# 10.231.X.2 it calls an rsh agent written to a temp dir which, instead of ssh, does
# `ip netns exec strata-h2-PID sh -c "<command>"`. Open MPI passes the agent `HOST CMD...`, the
# command pre-quoted for a remote shell as ssh would get it, hence `sh -c "$*"`. Each side also
# gets its own UTS namespace, so MPI_Get_processor_name() says strata-h1-PID / strata-h2-PID.
# OOB and BTL are forced to TCP on the veth subnet. Both sides share the filesystem, so no
# --prefix is needed and orted inherits mpirun's environment (PATH, LD_LIBRARY_PATH, ...).
# Cleanup (EXIT/INT/TERM/HUP trap): stop mpirun, kill whatever still runs in the namespaces,
# delete them. Namespace names carry the PID, so concurrent runs never clash, and leftovers of a
# killed earlier run with the same PID are removed first.
#
# Exit status: PROGRAM's (via mpirun); 124 on timeout; 2 on bad usage; 77 (Meson's "skipped")
# when mpirun is missing or namespaces/veths cannot be made (not root, no CAP_SYS_ADMIN, ...).
# Environment:
#   TWO_HOSTS_TIMEOUT=SECONDS  hard limit for the whole mpirun (default 120; then SIGTERM,
#                              SIGKILL 10 s later)
#   TWO_HOSTS_FORCE_SKIP=1     behave as if namespaces could not be made (tests the skip path)
#   TWO_HOSTS_DEBUG=1          the rsh agent logs the arguments it receives to stderr
set -euo pipefail

skip() { echo "two_hosts.sh: skipped: $*" >&2; exit 77; }
[[ $# -ge 1 ]] || { echo "usage: two_hosts.sh PROGRAM [ARGS...]" >&2; exit 2; }

prog=$(command -v -- "$1") || { echo "two_hosts.sh: not an executable: $1" >&2; exit 2; }
[[ $prog == /* ]] || prog="$PWD/$prog"
shift
timeout_s=${TWO_HOSTS_TIMEOUT:-120}
[[ $timeout_s =~ ^[0-9]+$ ]] || { echo "two_hosts.sh: bad TWO_HOSTS_TIMEOUT: $timeout_s" >&2; exit 2; }

command -v mpirun >/dev/null || skip "mpirun not found in PATH"
[[ ${TWO_HOSTS_FORCE_SKIP:-0} == 1 ]] &&
  skip "cannot create network namespaces: forced by TWO_HOSTS_FORCE_SKIP=1"
command -v ip >/dev/null || skip "cannot create network namespaces: 'ip' (iproute2) not found"
command -v unshare >/dev/null || skip "cannot create UTS namespaces: 'unshare' not found"

NS1=strata-h1-$$ NS2=strata-h2-$$
NET=10.231.$(($$ % 254 + 1))
IP1=$NET.1 IP2=$NET.2
runner='' tmp=''

kill_ns() { # kill every process in namespace $1 (TERM, then KILL after ~2 s)
  local pids i
  for i in 1 2 3 4 5 6 7 8 9 10 11; do
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086
    if ((i < 11)); then kill $pids 2>/dev/null || true; sleep 0.2; else kill -9 $pids 2>/dev/null || true; fi
  done
}
teardown() {
  local ns
  for ns in "$NS1" "$NS2"; do
    kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
}
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [[ -n $runner ]]; then kill "$runner" 2>/dev/null || true; fi # timeout forwards TERM to mpirun
  teardown
  [[ -n $tmp ]] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

teardown # leftovers of a killed earlier run that had our PID
err=$(ip netns add "$NS1" 2>&1) || skip "cannot create network namespaces: $err"
err=$(ip netns add "$NS2" 2>&1) || skip "cannot create network namespaces: $err"
err=$(ip link add name h1 netns "$NS1" type veth peer name h2 netns "$NS2" 2>&1) ||
  skip "cannot create veth pair: $err"
err=$( { ip -n "$NS1" addr add "$IP1/24" dev h1 && ip -n "$NS2" addr add "$IP2/24" dev h2 &&
  ip -n "$NS1" link set lo up && ip -n "$NS2" link set lo up &&
  ip -n "$NS1" link set h1 up && ip -n "$NS2" link set h2 up; } 2>&1) ||
  skip "cannot configure veth pair: $err"
err=$(ip netns exec "$NS2" unshare --uts true 2>&1) || skip "cannot create UTS namespaces: $err"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/two_hosts.XXXXXX")
printf '%s slots=1\n%s slots=1\n' "$IP1" "$IP2" >"$tmp/hostfile"
cat >"$tmp/rsh" <<EOF
#!/bin/sh
# Open MPI's plm_rsh_agent: called as \`rsh HOST ORTED-COMMAND...\` (words pre-quoted for a shell)
if [ "\${TWO_HOSTS_DEBUG:-0}" = 1 ]; then i=0; for a; do echo "rsh[\$i] <\$a>" >&2; i=\$((i+1)); done; fi
[ "\$1" = "$IP2" ] || { echo "two_hosts.sh rsh: unexpected host '\$1'" >&2; exit 255; }
shift
exec ip netns exec "$NS2" unshare --uts sh -c "hostname $NS2 && \$*"
EOF
chmod +x "$tmp/rsh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Background + wait: a trapped Ctrl-C interrupts `wait`; it would not interrupt a foreground child.
# shellcheck disable=SC2016 # $0/$@ are for the inner sh
timeout -k 10 "$timeout_s" ip netns exec "$NS1" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$NS1" \
  mpirun -np 2 --hostfile "$tmp/hostfile" --map-by node \
  --mca plm_rsh_agent "$tmp/rsh" \
  --mca btl self,tcp --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
  "$prog" "$@" &
runner=$!
rc=0
wait "$runner" || rc=$?
runner=''
((rc != 124)) || echo "two_hosts.sh: timed out after ${timeout_s}s (TWO_HOSTS_TIMEOUT)" >&2
exit "$rc"
