#!/usr/bin/env bash
# Packaging test: strata consumed by an outside project (1) as a Meson
# subproject and (2) through pkg-config after `meson install` into a
# temporary prefix, both with Meson and with a plain compiler command line.
set -euo pipefail
src=$(cd "$1" && pwd)
cxx=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
quiet() { "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }; }

echo "== as a subproject"
cp -r "$src/tests/packaging/consumer" "$tmp/sub"
mkdir -p "$tmp/sub/subprojects"
ln -s "$src" "$tmp/sub/subprojects/strata"
quiet meson setup "$tmp/sub/build" "$tmp/sub"
quiet meson compile -C "$tmp/sub/build"
"$tmp/sub/build/consumer"
"$tmp/sub/build/consumer_nn"

echo "== installed, through pkg-config"
quiet meson setup "$tmp/strata-build" "$src" --prefix "$tmp/prefix" -Dtests=false -Dbench=false -Dexamples=false \
  -Dmpi=disabled -Dcuda=disabled -Dnccl=disabled
quiet meson install -C "$tmp/strata-build"
pc=$(dirname "$(find "$tmp/prefix" -name strata.pc | head -n 1)")
test -n "$pc" || { echo "no strata.pc installed"; exit 1; }
test -f "$tmp/prefix/include/strata/config.hpp" || { echo "config.hpp not installed"; exit 1; }
test ! -e "$tmp/prefix/include/strata/config.hpp.in" || { echo "config.hpp.in must not be installed"; exit 1; }
export PKG_CONFIG_PATH="$pc"
cp -r "$src/tests/packaging/consumer" "$tmp/pc"   # no subprojects/: pkg-config or nothing
quiet meson setup "$tmp/pc/build" "$tmp/pc"
grep -q "Run-time dependency strata found: YES" "$tmp/pc/build/meson-logs/meson-log.txt" || { echo "meson did not use pkg-config"; exit 1; }
quiet meson compile -C "$tmp/pc/build"
"$tmp/pc/build/consumer"
"$tmp/pc/build/consumer_nn"
# shellcheck disable=SC2046
$cxx $(pkg-config --cflags strata) "$tmp/pc/main.cpp" -o "$tmp/plain" $(pkg-config --libs strata)
"$tmp/plain"
# shellcheck disable=SC2046
$cxx $(pkg-config --cflags strata) "$tmp/pc/main_nn.cpp" -o "$tmp/plain_nn" $(pkg-config --libs strata)
"$tmp/plain_nn"
echo "packaging: ok"
