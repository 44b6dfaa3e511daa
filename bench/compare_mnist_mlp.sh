#!/usr/bin/env bash
# Two builds of examples/mnist_mlp side by side: samples/s per strategy and
# replica count, runs alternating between the two binaries (so drift in the
# machine's load hits both alike), medians of N runs.
#   bash bench/compare_mnist_mlp.sh OLD_BINARY NEW_BINARY [N]
# e.g. OLD built from an earlier commit in another build directory.
set -euo pipefail
old=$1 new=$2 n=${3:-9}
rate() { "$@" --epochs 2 --quiet --min-accuracy 0 | sed -n 's/.*: \([0-9]*\) samples\/s.*/\1/p'; }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf "%-16s %8s %12s %12s %8s\n" strategy replicas old/s new/s new/old
for cfg in "one_device 1" "mirrored 1" "mirrored 2" "central_storage 1" "central_storage 2"; do
  read -r s r <<< "$cfg"
  o=() w=()
  for _ in $(seq "$n"); do
    args=(--strategy "$s")
    [ "$s" = one_device ] || args+=(--replicas "$r")  # one_device takes no --replicas
    o+=("$(rate "$old" "${args[@]}")")
    w+=("$(rate "$new" "${args[@]}")")
  done
  mo=$(printf "%s\n" "${o[@]}" | median)
  mw=$(printf "%s\n" "${w[@]}" | median)
  printf "%-16s %8s %12s %12s %8.3f\n" "$s" "$r" "$mo" "$mw" "$(awk -v a="$mw" -v b="$mo" 'BEGIN {print a / b}')"
done
