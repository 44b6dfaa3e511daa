#!/usr/bin/env bash
# shaped_link.sh [--hosts 2|4] [--rate 1gbit|10gbit|0] [--delay-ms 0.2] [--timeout S] [--] PROGRAM [ARGS...]
# -- run PROGRAM under mpirun, one rank on each of N throwaway "hosts" (network namespaces) joined by
# a switch whose every link is rate-shaped, as if each host had a NIC of that speed (issue 25's
# measurements: bench/ddp_side_by_side.sh). Not a test; CI does not run it. Needs root.
#
# How (tests/mpi/two_hosts.sh's approach, copied, not shared, so that the test stays as it is):
# namespaces strata-sl-PID-h1..hN and a switch namespace strata-sl-PID-sw holding a bridge; each
# host has a veth "lnk" (10.232.X.i/24, X from the PID) whose peer p<i> is a bridge port. Each link
# is shaped in both directions: the host's egress on lnk and the switch's egress on p<i>, with
#   netem rate R delay D       where the kernel has sch_netem (the delay on the host's side only, so
#                              a message between two hosts crosses one delay: RTT = 2 D)
#   tbf rate R                 where it has not (this machine's kernel: no netem, fq, cake), the
#                              delay then cannot be emulated: a warning says so and the run goes on
#                              unshaped in delay (veth's own, some 10 us)
# mpirun runs inside h1 with a hostfile of the N addresses (1 slot each); to start its daemon on
# host i it calls an rsh agent which runs the command through `ip netns exec` in that namespace
# (Open MPI passes HOST CMD..., the command pre-quoted for a remote shell, hence `sh -c "$*"`).
# Each host also gets its own UTS namespace (hostname = namespace name). OOB and BTL are TCP on
# the subnet. Exported to every rank (mpirun -x): MASTER_ADDR (host 1's address), MASTER_PORT,
# GLOO_SOCKET_IFNAME=lnk (torch.distributed's gloo cannot resolve the namespaces' hostnames), and
# SHAPED_LINK (a description of the link, for the programs' headers).
# Cleanup (EXIT/INT/TERM/HUP trap): stop mpirun, kill what still runs in the namespaces, delete them.
#
# Exit status: PROGRAM's (via mpirun); 124 on timeout; 2 on bad usage; 77 when mpirun is missing
# or namespaces, veths, the bridge or the shaping cannot be made (not root, ...).
#   bench/shaped_link.sh --hosts 2 --rate 1gbit -- build-bench/bench/mpi_train_bench --bucket-mb 4
set -euo pipefail

usage() { echo "usage: shaped_link.sh [--hosts 2|4] [--rate 1gbit|10gbit|0] [--delay-ms D] [--timeout S] [--] PROGRAM [ARGS...]" >&2; exit 2; }
skip() { echo "shaped_link.sh: skipped: $*" >&2; exit 77; }

hosts=2 rate=1gbit delay_ms=0.2 timeout_s=600
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) hosts=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --delay-ms) delay_ms=${2:?}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || usage
if ! [[ $hosts =~ ^[0-9]+$ ]] || ((hosts < 2 || hosts > 8)); then echo "shaped_link.sh: --hosts is 2..8, not $hosts" >&2; exit 2; fi
[[ $rate == 0 || $rate =~ ^[0-9]+(k|m|g)bit$ ]] || { echo "shaped_link.sh: --rate is like 1gbit, 500mbit or 0, not $rate" >&2; exit 2; }
[[ $delay_ms =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "shaped_link.sh: bad --delay-ms $delay_ms" >&2; exit 2; }
[[ $timeout_s =~ ^[0-9]+$ ]] || { echo "shaped_link.sh: bad --timeout $timeout_s" >&2; exit 2; }
prog=$(command -v -- "$1") || { echo "shaped_link.sh: not an executable: $1" >&2; exit 2; }
[[ $prog == /* ]] || prog="$PWD/$prog"
shift

command -v mpirun >/dev/null || skip "mpirun not found in PATH"
command -v ip >/dev/null || skip "'ip' (iproute2) not found"
command -v tc >/dev/null || skip "'tc' (iproute2) not found"
command -v unshare >/dev/null || skip "'unshare' not found"

P=strata-sl-$$
SW=$P-sw
NET=10.232.$(($$ % 254 + 1))
ns() { echo "$P-h$1"; }
runner='' tmp=''

kill_ns() { # every process in namespace $1: TERM, then KILL after ~2 s
  local pids i
  for i in 1 2 3 4 5 6 7 8 9 10 11; do
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086
    if ((i < 11)); then kill $pids 2>/dev/null || true; sleep 0.2; else kill -9 $pids 2>/dev/null || true; fi
  done
}
teardown() {
  local i
  for ((i = 1; i <= hosts; i++)); do kill_ns "$(ns "$i")"; ip netns del "$(ns "$i")" 2>/dev/null || true; done
  ip netns del "$SW" 2>/dev/null || true
}
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [[ -n $runner ]]; then kill "$runner" 2>/dev/null || true; fi
  teardown
  [[ -n $tmp ]] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# shape DEV in namespace NS: rate both ways, the delay on the host's side ($3 = 1)
netem=1
shape() {
  local n=$1 dev=$2 with_delay=$3 err
  [[ $rate == 0 && ($with_delay == 0 || $delay_ms == 0) ]] && return 0
  if ((netem)); then
    local args=()
    [[ $rate == 0 ]] || args+=(rate "$rate")
    [[ $with_delay == 0 || $delay_ms == 0 ]] || args+=(delay "${delay_ms}ms")
    ((${#args[@]})) || return 0
    if tc -n "$n" qdisc add dev "$dev" root netem "${args[@]}" limit 100000 2>/dev/null; then return 0; fi
    netem=0
    [[ $delay_ms == 0 ]] ||
      echo "shaped_link.sh: warning: no sch_netem in this kernel: the ${delay_ms} ms delay is NOT emulated; rate only (tbf)" >&2
  fi
  [[ $rate != 0 ]] || return 0
  # tbf: the bucket holds 1 ms at the rate (at least 128 KiB: a veth GSO packet is up to 64 KiB),
  # the queue up to 20 ms of it
  local bits=${rate%bit} mult=1
  case $bits in *k) mult=1000 ;; *m) mult=1000000 ;; *g) mult=1000000000 ;; esac
  local bps=$((${bits%?} * mult)) burst
  burst=$((bps / 8 / 1000)); ((burst >= 131072)) || burst=131072
  err=$(tc -n "$n" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms 2>&1) ||
    skip "cannot shape $dev with tbf: $err"
}

teardown # leftovers of a killed earlier run that had our PID
err=$(ip netns add "$SW" 2>&1) || skip "cannot create network namespaces: $err"
err=$( { ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up && ip -n "$SW" link set lo up; } 2>&1) ||
  skip "cannot create a bridge: $err"
for ((i = 1; i <= hosts; i++)); do
  h=$(ns "$i")
  err=$(ip netns add "$h" 2>&1) || skip "cannot create network namespaces: $err"
  err=$( { ip link add name lnk netns "$h" type veth peer name "p$i" netns "$SW" &&
    ip -n "$SW" link set "p$i" master br0 && ip -n "$SW" link set "p$i" up &&
    ip -n "$h" addr add "$NET.$i/24" dev lnk && ip -n "$h" link set lo up && ip -n "$h" link set lnk up; } 2>&1) ||
    skip "cannot make host $i's link: $err"
  shape "$h" lnk 1
  shape "$SW" "p$i" 0
done
err=$(ip netns exec "$(ns 2)" unshare --uts true 2>&1) || skip "cannot create UTS namespaces: $err"

link="$hosts hosts, a switch, links of ${rate/#0/unshaped rate}"
if ((netem)); then link+=", ${delay_ms} ms delay each (netem)"; else link+=" (tbf; no delay emulated: no sch_netem)"; fi
export SHAPED_LINK=$link
echo "# shaped_link.sh: $link" >&2

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shaped_link.XXXXXX")
: >"$tmp/hostfile"
# shellcheck disable=SC2016 # the agent's own $1, $h and $* are meant literally
{
  echo '#!/bin/sh'
  echo '# Open MPI plm_rsh_agent: `rsh HOST ORTED-COMMAND...` -> run it in that host'"'"'s namespace'
  echo 'case "$1" in'
  for ((i = 1; i <= hosts; i++)); do echo "  $NET.$i) h=$(ns "$i") ;;"; echo "$NET.$i slots=1" >>"$tmp/hostfile"; done
  echo '  *) echo "shaped_link.sh rsh: unexpected host $1" >&2; exit 255 ;;'
  echo 'esac'
  echo 'shift'
  echo 'exec ip netns exec "$h" unshare --uts sh -c "hostname $h && $*"'
} >"$tmp/rsh"
chmod +x "$tmp/rsh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MASTER_ADDR=$NET.1 MASTER_PORT=$((20000 + $$ % 20000)) GLOO_SOCKET_IFNAME=lnk
# Background + wait: a trapped Ctrl-C interrupts `wait`; it would not interrupt a foreground child.
# shellcheck disable=SC2016 # $0/$@ are for the inner sh
timeout -k 10 "$timeout_s" ip netns exec "$(ns 1)" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$(ns 1)" \
  mpirun -np "$hosts" --hostfile "$tmp/hostfile" --map-by node --oversubscribe \
  --mca plm_rsh_agent "$tmp/rsh" \
  --mca btl self,tcp --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
  -x MASTER_ADDR -x MASTER_PORT -x GLOO_SOCKET_IFNAME -x SHAPED_LINK \
  "$prog" "$@" &
runner=$!
rc=0
wait "$runner" || rc=$?
runner=''
((rc != 124)) || echo "shaped_link.sh: timed out after ${timeout_s}s (--timeout)" >&2
exit "$rc"
