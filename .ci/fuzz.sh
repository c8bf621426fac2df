#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (coverage + ASan + UBSan) and runs each
# for FUZZ_SECONDS (default 60), starting from the seeds in tests/fuzz/corpus/<target>.
# Any crash, failed property or sanitizer report fails the script; the executions are printed.
# Needs clang-14 (Debian: clang-14 libclang-rt-14-dev) and cmake + ninja; installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
build=build/fuzz
CC=${CC_FUZZ:-clang-14} CXX=${CXX_FUZZ:-clang++-14} cmake -S . -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPSRT_BUILD_FUZZERS=ON -DMPSRT_WITH_VULKAN=OFF >/dev/null
cmake --build "$build" --target fuzz_options fuzz_rng_state fuzz_api
total=0
for target in fuzz_options fuzz_rng_state fuzz_api; do
  name=${target#fuzz_}
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  log="$build/$target.log"
  echo "fuzz: $target for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$build/$target-" "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $target FAILED (log: $log; the input is saved as $build/$target-*)"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
  echo "fuzz: $target ok: ${runs:-?} inputs in ${seconds}s, $cov, corpus $(ls "$corpus" | wc -l) files"
  total=$((total + ${runs:-0}))
done
echo "fuzz: $total inputs in all, no failure"
