#!/usr/bin/env bash
# The whole test suite, three times: a release build with g++ (unit tests,
# MPI tests under mpirun, compile-fail tests, packaging test; warnings are
# errors), then the unit tests under ThreadSanitizer (g++) and under
# AddressSanitizer+UBSan (clang++); the sanitizer builds leave the CUDA
# backend out (no GPU here: its tests only compile and skip, which the
# release build already does). Every supported configuration is built,
# warnings as errors (issue 21): everything, with the examples and
# benchmarks (the release build); MPI without CUDA, no MPI and no CUDA, and
# CUDA without MPI (compiled only, unoptimized: the files whose code differs
# by configuration). Ends with the line "N passed, M failed"; exits non-zero
# if any test failed or a build broke.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

# Real MNIST for the integration tests (they skip, saying so, without it).
bash scripts/fetch-mnist.sh || echo "test.sh: could not fetch MNIST; the tests that need it will be skipped"
# Debian's fortunes for examples/char_lm's tests (they skip, saying so, without it).
bash scripts/fetch-corpus.sh > /dev/null || echo "test.sh: could not fetch the text corpus; examples/char_lm's tests will be skipped"

passed=0
failed=0
count() {  # add the results of one meson test log
  local log=$1 p f
  read -r p f < <(python3 - "$log" <<'PY'
import json, sys
ok = bad = 0
for line in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"):
        ok += 1
    elif r != "SKIP":
        bad += 1
print(ok, bad)
PY
)
  passed=$((passed + p))
  failed=$((failed + f))
}

# configure DIR COMPILER SETUP-ARGS...: meson setup DIR with CXX=COMPILER,
# or, for a directory set up before, meson setup --reconfigure (so that it
# has these options, and knows options added to meson_options.txt since);
# warnings are errors; the log in DIR.setup.log.
configure() {
  local dir=$1 cxx=$2
  shift 2
  local setup=(env CXX="$cxx" meson setup "$dir")
  [ -f "$dir/build.ninja" ] && setup=(meson setup --reconfigure "$dir")
  "${setup[@]}" -Dwerror=true "$@" > "$dir.setup.log" 2>&1
}

# suite NAME BUILDDIR COMPILER MESON-TEST-ARGS -- SETUP-ARGS
# Builds the default targets, then runs the tests.
suite() {
  local name=$1 dir=$2 cxx=$3
  shift 3
  local test_args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do test_args+=("$1"); shift; done
  shift
  echo "=== $name"
  configure "$dir" "$cxx" "$@" || { cat "$dir.setup.log"; failed=$((failed + 1)); return; }
  if ! ninja -C "$dir" all > "$dir.build.log" 2>&1; then
    tail -n 60 "$dir.build.log"
    echo "$name: build failed"
    failed=$((failed + 1))
    return
  fi
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --print-errorlogs "${test_args[@]}" 2>&1 | grep -Ev '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout): '
  count "$dir/meson-logs/testlog.json"
}

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# The MPI tests run in the release suite, and under ThreadSanitizer as the
# 'mpi_tsan' suite (2 ranks, Open MPI's own reports suppressed by
# tests/mpi/tsan.supp); not under ASan: Open MPI's memory hooks and
# never-freed globals defeat it, so that build leaves MPI out (and the
# TSan build makes only the MPI programs its suite runs).
# The sanitizer builds compile the tests only, at the lowest optimization
# their sanitizer runs well at (TSan -O1, ASan -O0) with line tables (-g1)
# for the reports: half the compile time of -O2 -g or less, where the tests
# run for seconds. The examples and benchmarks are built and run by the
# release build; the code in them that depends on the configuration is
# compiled below, once per configuration.
# The three suites build the test programs in unity groups (-Dtest_unity=true,
# tests/meson.build): the test files of a group compile as one translation
# unit, which parses the headers and instantiates the training code they
# share once; each test still runs alone, under its own name.
only_unit=(--no-suite compile_fail --no-suite packaging --no-suite readme --no-suite examples --no-suite mpi
           --no-suite cli --no-suite docs)
suite "release (g++)" build g++ -- -Dbuildtype=release -Dtest_unity=true
suite "ThreadSanitizer (g++)" build-tsan g++ "${only_unit[@]}" -- \
  -Doptimization=1 -Ddebug=false -Dcpp_args=-g1 -Db_sanitize=thread -Dbench=false -Dexamples=false -Dtest_unity=true \
  -Dcuda=disabled -Dnccl=disabled
suite "AddressSanitizer + UBSan (clang++)" build-asan clang++ "${only_unit[@]}" -- \
  -Doptimization=0 -Ddebug=false -Dcpp_args=-g1 -Db_sanitize=address,undefined -Db_lundef=false \
  -Dtest_unity=true -Dbench=false -Dexamples=false -Dcuda=disabled -Dmpi=disabled -Dnccl=disabled

# compile_only NAME DIR COMPILER OBJECTS... -- SETUP-ARGS
# The translation units whose code depends on a configuration the release
# build (MPI, CUDA, NCCL) is not, compiled without optimization and not
# linked (warnings are errors): the `#if STRATA_HAS_MPI` / `#elif
# STRATA_HAS_CUDA` branches of examples/mnist_common.hpp (compiled in
# examples/mnist_common.cpp) and
# bench/train_bench.cpp, allreduce_gpu.cpp without NCCL. The release build
# links and runs the programs.
compile_only() {
  local name=$1 dir=$2 cxx=$3
  shift 3
  local objects=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do objects+=("$1"); shift; done
  shift
  echo "=== $name (compile only)"
  if ! configure "$dir" "$cxx" -Dbuildtype=plain -Dtests=false "$@"; then
    cat "$dir.setup.log"
    failed=$((failed + 1))
  elif ! ninja -C "$dir" "${objects[@]}" > "$dir.build.log" 2>&1; then
    tail -n 60 "$dir.build.log"
    echo "$name: build failed"
    failed=$((failed + 1))
  else
    echo "$name: ${#objects[@]} translation units compile warning-free"
  fi
}
compile_only "MPI without CUDA (g++)" build-mpi-nocuda g++ examples/libmnist_common.a.p/mnist_common.cpp.o -- \
  -Dcuda=disabled -Dnccl=disabled
compile_only "no MPI, no CUDA (clang++)" build-cpu-only clang++ examples/libmnist_common.a.p/mnist_common.cpp.o \
  bench/train_bench.p/train_bench.cpp.o bench/allreduce_bench.p/allreduce_bench.cpp.o -- \
  -Dcuda=disabled -Dmpi=disabled -Dnccl=disabled
# CUDA without MPI (and without NCCL): only where the release build found the CUDA toolkit.
if grep -q '^#define STRATA_HAS_CUDA 1' build/include/strata/config.hpp 2> /dev/null; then
  compile_only "CUDA without MPI or NCCL (g++)" build-cuda-nompi g++ examples/libmnist_common.a.p/mnist_common.cpp.o \
    bench/train_bench.p/train_bench.cpp.o bench/allreduce_bench.p/allreduce_gpu.cpp.o -- \
    -Dcuda=enabled -Dmpi=disabled -Dnccl=disabled
else
  echo "=== CUDA without MPI or NCCL: skipped (the release build found no CUDA toolkit)"
fi

# --- Fuzzing (tests/fuzz/run.sh; issue 15) -------------------------------
# Each libFuzzer target (the IDX reader, the weights-file reader), built with
# clang++ -fsanitize=fuzzer,address,undefined, replays the inputs kept under
# tests/fuzz/regressions/<target>/, then fuzzes for 20 s from a generated
# seed corpus: one test per target, passed or failed (about 90 s in all).
echo "=== fuzzing (clang++ libFuzzer + ASan + UBSan, 20 s per target)"
fuzz_targets=(idx weights checkpoint)
fuzz_seen=0
while read -r line; do
  echo "$line"
  case $line in
    "fuzz "*": ok"*) passed=$((passed + 1)); fuzz_seen=$((fuzz_seen + 1)) ;;
    "fuzz "*": FAILED"*) failed=$((failed + 1)); fuzz_seen=$((fuzz_seen + 1)) ;;
  esac
done < <(bash tests/fuzz/run.sh 20 "${fuzz_targets[@]}" 2>&1)
failed=$((failed + ${#fuzz_targets[@]} - fuzz_seen))  # a target that never reported (run.sh broke) failed
# --- end of fuzzing ---------------------------------------------------------

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
