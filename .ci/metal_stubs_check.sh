#!/usr/bin/env bash
# Cross-checks the Metal stand-in headers (tests/metal_stubs) against Apple's API data as
# recorded in a pinned pyobjc-framework-Metal macOS wheel (used as data only), then runs the
# checker's self-test. Needs clang-14 on PATH (the caller installs it) and network access to
# the package registry only. Exits non-zero on any mismatch or self-test failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PIN=${PYOBJC_METAL_PIN:-12.2.2}
PY=${PYTHON:-python3}
CLANG=${CLANG:-clang-14}
dest=build/metal-stubs-check

command -v "$CLANG" >/dev/null || { echo "$CLANG is not installed"; exit 2; }
test -f tests/metal_stubs/Metal/Metal.h || { echo "tests/metal_stubs/Metal/Metal.h is missing"; exit 2; }

mkdir -p "$dest"
wheel=$(find "$dest" -maxdepth 1 -name "pyobjc_framework_metal-$PIN-*.whl" -print -quit)
if [ -z "$wheel" ]; then
  "$PY" -m pip download -q --no-deps --only-binary :all: --platform macosx_11_0_universal2 \
    --python-version 3.12 -d "$dest" "pyobjc-framework-Metal==$PIN"
  wheel=$(find "$dest" -maxdepth 1 -name "pyobjc_framework_metal-$PIN-*.whl" -print -quit)
fi
test -n "$wheel" || { echo "pip download gave no pyobjc-framework-Metal $PIN wheel"; exit 2; }

echo "==== metal stand-ins vs $(basename "$wheel")"
"$PY" .ci/metal_stubs_check.py "$wheel" --stubs tests/metal_stubs --clang "$CLANG"
echo "==== metal stand-ins check: self-test"
"$PY" .ci/metal_stubs_check.py "$wheel" --stubs tests/metal_stubs --clang "$CLANG" --self-test
