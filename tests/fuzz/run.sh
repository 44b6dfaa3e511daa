#!/usr/bin/env bash
# The fuzz targets: builds them with clang++ (libFuzzer, AddressSanitizer,
# UBSan) into build-fuzz/, replays every input kept under
# tests/fuzz/regressions/<target>/ (each once, as a normal test), then
# fuzzes each target for SECONDS from a seed corpus that make_corpus writes
# (valid files of every IDX type and rank, weights files of both formats).
# Prints one line per target, "fuzz <target>: ok" or "fuzz <target>: FAILED
# (...)", and exits non-zero if any failed. A crash is saved under
# build-fuzz/crashes/<target>/: copy it into tests/fuzz/regressions/<target>/
# so that every later run replays it.
#   bash tests/fuzz/run.sh [SECONDS] [TARGET...]     (default: 20 s each; targets idx weights checkpoint)
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx weights checkpoint)
out=build-fuzz
cxx=${FUZZ_CXX:-clang++}
mkdir -p "$out/include/strata" "$out/seeds"
# the one generated header: no backend, no BLAS (the readers need neither)
sed -e 's/@VERSION@/fuzz/' -e 's/@HAS_[A-Z]*@/0/' include/strata/config.hpp.in > "$out/include/strata/config.hpp.new"
cmp -s "$out/include/strata/config.hpp.new" "$out/include/strata/config.hpp" ||
  mv "$out/include/strata/config.hpp.new" "$out/include/strata/config.hpp"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I"$out/include" -Iinclude)

status=0
build() {  # build NAME SOURCE EXTRA-FLAGS...: compiles in the background, log in build-fuzz/NAME.log
  local name=$1 src=$2
  shift 2
  rm -f "$out/$name"  # never run a stale binary when the build breaks
  "$cxx" "${flags[@]}" "$@" "$src" -o "$out/$name" > "$out/$name.log" 2>&1 &
}
build make_corpus tests/fuzz/make_corpus.cpp
for t in "${targets[@]}"; do
  build "${t}_fuzz" "tests/fuzz/${t}_fuzz.cpp" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
done
wait
if [ ! -x "$out/make_corpus" ] || ! "$out/make_corpus" "$out/seeds"; then
  cat "$out/make_corpus.log"
  echo "fuzz: the seed corpus could not be built; fuzzing from empty inputs"
fi

for t in "${targets[@]}"; do
  fuzz=$out/${t}_fuzz
  if [ ! -x "$fuzz" ]; then
    tail -n 40 "$fuzz.log"
    echo "fuzz $t: FAILED (build: $fuzz.log)"
    status=1
    continue
  fi
  mapfile -t kept < <(find "tests/fuzz/regressions/$t" -type f ! -name '.*' ! -name '*.md' 2>/dev/null | sort)
  if [ ${#kept[@]} -gt 0 ] && ! "$fuzz" "${kept[@]}" > "$out/${t}_replay.log" 2>&1; then
    tail -n 40 "$out/${t}_replay.log"
    echo "fuzz $t: FAILED (a regression input under tests/fuzz/regressions/$t fails again)"
    status=1
    continue
  fi
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  if "$fuzz" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=2048 -print_final_stats=1 \
      -artifact_prefix="$out/crashes/$t/" "$out/corpus/$t" "$out/seeds/$t" > "$out/${t}_fuzz.run.log" 2>&1; then
    echo "fuzz $t: ok (${#kept[@]} regression input(s) replayed; $(grep -o 'stat::number_of_executed_units: *[0-9]*' \
      "$out/${t}_fuzz.run.log" | grep -o '[0-9]*$') runs in ${secs} s)"
  else
    tail -n 40 "$out/${t}_fuzz.run.log"
    echo "fuzz $t: FAILED (the input is in $out/crashes/$t/: copy it into tests/fuzz/regressions/$t/)"
    status=1
  fi
done
exit $status
