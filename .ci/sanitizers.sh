#!/usr/bin/env bash
# Sanitizer CI: builds mpsrt with ASan+UBSan ("address") and with TSan ("thread") and runs the
# C++ tests (GoogleTest) and the Python tests under each. Any sanitizer report fails the run.
# Needs an activated venv with the test dependencies (numpy and the "test" extra), gcc, and the
# apt packages of .ci/run. One build per sanitizer (build/san-<san>) gives both the extension
# (installed into build/san-<san>-site, used through PYTHONPATH) and tests/cpp/mpsrt_tests:
# mpsrt_core is compiled once per sanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
step() { printf '\n==== %s (%ss)\n' "$*" "$SECONDS"; }

# Build requirements for --no-build-isolation (pyproject.toml [build-system]).
python -m pip install -q "scikit-build-core>=0.10" "nanobind>=2.4,<4" cmake ninja

logs=$root/build/san-logs
rm -rf "$logs"
mkdir -p "$logs"
jobs=2

build() {  # build SAN [-Ccmake.define.NAME=VALUE...]
  local san=$1
  shift
  step "build with MPSRT_SANITIZE=$san"
  rm -rf "build/san-$san-site"
  python -m pip install -q --no-build-isolation --no-deps \
    -Cbuild-dir="build/san-$san" -Ccmake.build-type=RelWithDebInfo \
    -Ccmake.define.MPSRT_SANITIZE="$san" -Ccmake.define.MPSRT_BUILD_TESTS=ON "$@" \
    --target "build/san-$san-site" .
}

# Fails when a log or a sanitizer log file holds a report (reports of subprocesses included).
check_logs() {  # check_logs NAME LOGFILE...
  local name=$1
  shift
  if grep -l -E "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer" \
    "$@" "$logs"/*.san.* 2>/dev/null; then
    echo "$name: the sanitizer reported the above (logs in $logs)"
    head -n 80 "$logs"/*.san.* 2>/dev/null || true
    exit 1
  fi
}

# The C++ tests: two shards in parallel, one process each (no per-test timeout: sanitized
# tests can take longer than ctest's 60 s limit).
cpp_tests() {  # cpp_tests SAN FILTER
  local san=$1 filter=$2 rc=0 pids=()
  step "C++ tests under $san ($filter)"
  for i in $(seq 0 $((jobs - 1))); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i timeout 1200 \
      "build/san-$san/tests/cpp/mpsrt_tests" --gtest_filter="$filter" \
      >"$logs/cpp-$san.$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for i in $(seq 0 $((jobs - 1))); do tail -n 3 "$logs/cpp-$san.$i.log"; done
  check_logs "C++ tests under $san" "$logs"/cpp-"$san".*.log
  if [ "$rc" -ne 0 ]; then echo "C++ tests under $san failed"; exit 1; fi
  if ! grep -q "tests from .* test suites ran" "$logs/cpp-$san.0.log"; then
    echo "C++ tests under $san ran no test"; exit 1
  fi
}

# The C API test (tests/cpp/test_c_api.c: the library from plain C) on the given backends, leak
# detection on (the driver's own blocks suppressed: .ci/lsan.supp); 77 is "no device for that
# backend here".
c_api_test() {  # c_api_test SAN BACKEND...
  local san=$1 backend rc
  shift
  for backend in "$@"; do
    step "C API test under $san on $backend"
    set +e
    LSAN_OPTIONS="suppressions=$root/.ci/lsan.supp" MPSRT_BACKEND=$backend timeout 300 \
      "build/san-$san/tests/cpp/mpsrt_c_api_test" \
      >"$logs/c-api-$san-$backend.log" 2>&1
    rc=$?
    set -e
    tail -n 3 "$logs/c-api-$san-$backend.log"
    check_logs "C API test under $san on $backend" "$logs/c-api-$san-$backend.log"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then echo "C API test under $san failed"; exit 1; fi
  done
}

py_tests() {  # py_tests SAN PRELOAD PYTEST-ARGS...
  local san=$1 preload=$2 rc=0
  shift 2
  step "Python tests under $san"
  set +e
  PYTHONPATH="$root/build/san-$san-site" LD_PRELOAD="$preload" \
    timeout 1800 python -m pytest -p no:cacheprovider -q "$@" 2>&1 | tee "$logs/py-$san.log" | tail -n 15
  rc=${PIPESTATUS[0]}
  set -e
  check_logs "Python tests under $san" "$logs/py-$san.log"
  if [ "$rc" -ne 0 ]; then echo "Python tests under $san failed (exit $rc; 5: no test ran)"; exit 1; fi
}

libstdcxx=$(gcc -print-file-name=libstdc++.so.6)

# ------------------------------------------------------------------ ASan + UBSan
build address
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan.san"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_init_order=1:log_path=$logs/asan.san"
# Every test on every backend (cpu and vulkan on lavapipe), but the random kernels' two
# large-count comparisons of every SIMD level with the scalar code (millions of values each,
# two thirds of the C++ tests' time under ASan; the plain run in .ci/run has them): their loads and
# stores, tails included, are the other RandomKernel tests' too, which run here.
cpp_tests address '-RandomKernel/RandomKernelIsa.LargeCountsMatchScalar/*:RandomKernel/RandomKernelIsa.SplitCallsEqualOneCall/*'
c_api_test address cpu vulkan
# CPython leaks by design at exit (interned objects, module state), so leak detection is off
# for the interpreter; the C++ tests above keep it on. libasan must come first; libstdc++ is
# preloaded too, or ASan cannot find __cxa_throw when the extension throws.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=0:log_path=$logs/asan.san"
# The Python suite on both backends, the stress test shortened. Left out: the tests that run a
# heavy peer rather than mpsrt under the sanitizer (Perfetto's trace processor in Node,
# torch.distributed's gloo in spawned ranks, mypy), and those whose time is mostly torch's, the
# bench's or the packaging's: the bench, the prebuilt glue, the model zoo, torch.compile (inductor
# compiling C++), the op table, and the device kernels' families (test_torch_kernels_*.py: their
# numbers come from GLSL that lavapipe runs and from the glue, which torch's cpp_extension
# compiles without the sanitizer; the launch path of mpsrt they share is test_torch_kernels.py's,
# which stays, as do the PyTorch device's allocator, stream and copy tests). All of them run in
# .ci/run, the kernels under the Vulkan validation layer too.
MPSRT_STRESS_SECONDS=20 py_tests address "$(gcc -print-file-name=libasan.so):$libstdcxx" \
  --ignore=tests/python/test_bench.py --ignore=tests/python/test_bench_peers.py \
  --ignore=tests/python/test_bench_plot.py --ignore=tests/python/test_torch_prebuilt.py \
  --ignore=tests/python/test_torch_zoo.py --ignore=tests/python/test_torch_zoo_fallbacks.py \
  --ignore=tests/python/test_torch_compile.py --ignore=tests/python/test_torch_op_table.py \
  --ignore=tests/python/test_package.py --ignore=tests/python/test_typed_api.py \
  --ignore-glob='tests/python/test_torch_kernels_*.py' \
  -k "not perfetto_trace_processor and not gloo and not test_torch_distributed"
unset ASAN_OPTIONS UBSAN_OPTIONS

# ------------------------------------------------------------------ TSan
# cpu backend only: see .ci/tsan.supp for why lavapipe is left to ASan; so the vulkan backend is
# not built here at all (a third less to compile). The RandomKernel tests call the kernels on
# one thread, with no thread for TSan to check: left out.
build thread -Ccmake.define.MPSRT_WITH_VULKAN=OFF
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/.ci/tsan.supp:log_path=$logs/tsan.san"
cpp_tests thread '-RandomKernel/*:*vulkan*:*Vulkan*'
c_api_test thread cpu
# The tests that use threads, streams, events and the profiler, on the cpu backend.
# Left out: the Perfetto trace-processor test (Node).
# Not the isolation watchdog's own test: it makes faulthandler dump a hung child's stacks, which
# faulthandler does from its watchdog thread without the GIL while the main thread runs (by
# design: the dump must work when the interpreter is stuck), a race TSan reports in CPython.
MPSRT_STRESS_SECONDS=10 py_tests thread "$(gcc -print-file-name=libtsan.so):$libstdcxx" \
  tests/stress tests/python/test_streams.py tests/python/test_device.py \
  tests/python/test_profiler.py tests/python/test_memory.py tests/python/test_random.py \
  -k "cpu and not perfetto_trace_processor and not isolation_watchdog"
unset TSAN_OPTIONS

step "done"
echo "sanitizers passed"
