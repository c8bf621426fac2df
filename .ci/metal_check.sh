#!/usr/bin/env bash
# Compile check of the metal backend on Linux: every csrc/backends/metal/*.mm is parsed and
# type-checked as Objective-C++ (ARC, blocks) by clang against the stand-in SDK headers in
# tests/metal_stubs/, with warnings as errors. The stand-ins declare only what the backend
# uses, so a misspelled selector, a wrong type or any Metal API they do not declare fails.
# Then a self-test proves the check bites: copies of a backend file with an injected mistake
# (a misspelled selector; a call of an API the stand-ins do not declare; a wrong enum name; a
# wrong protocol type; an os_signpost format that does not match its arguments) must fail.
# The kernel sources the .mm files embed are made as the build makes them: csrc/kernels/runtime's
# fill, copy and random translated GLSL -> SPIR-V -> MSL by csrc/backends/metal/
# translate_kernel.cmake (which also checks the entry points' buffer indices).
#
# Needs clang-14 (Debian: apt-get install clang-14), cmake, glslc and spirv-cross; installs nothing.
# Usage: .ci/metal_check.sh   (from anywhere; CLANG=... picks another clang)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
clang="${CLANG:-clang-14}"
command -v "$clang" >/dev/null || { echo "metal_check: $clang not found; install clang-14" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The kernel sources as CMake embeds them (raw string literals of the translated MSL).
for k in fill copy random; do
  cmake -DGLSLC="$(command -v glslc)" -DSPIRV_CROSS="$(command -v spirv-cross)" -DNAME="$k" \
    -DSRC="$root/csrc/kernels/runtime/$k.comp" -DOUT="$tmp/$k.msl.inc" \
    -P "$root/csrc/backends/metal/translate_kernel.cmake"
  echo "metal_check: ok   $k.comp -> MSL ($(wc -l <"$tmp/$k.msl.inc") lines, embedded)"
done

flags=(-x objective-c++ -std=c++17 -fobjc-arc -fblocks -fobjc-runtime=macosx-13.0
  -fsyntax-only -Wall -Wextra -Werror -Wpedantic -Wshadow -Wnon-virtual-dtor
  -I "$root/tests/metal_stubs" -I "$root/csrc/include" -I "$root/csrc" -I "$tmp")

check() {  # check FILE [extra include dir]: 0 when it compiles cleanly
  "$clang" "${flags[@]}" -I "$(dirname "$1")" "$1"
}

status=0
shopt -s nullglob
files=("$root"/csrc/backends/metal/*.mm)
[ ${#files[@]} -gt 0 ] || { echo "metal_check: no .mm files found" >&2; exit 1; }
for f in "${files[@]}"; do
  if check "$f"; then
    echo "metal_check: ok   ${f#"$root"/}"
  else
    echo "metal_check: FAIL ${f#"$root"/}" >&2
    status=1
  fi
done

# ---- self-test: each injected mistake must make the check fail
mutant() {  # mutant NAME FILE SED-EXPRESSION
  local name="$1" src="$2" expr="$3" dir="$tmp/mutant-$1"
  mkdir -p "$dir/backends/metal"
  sed -e "$expr" "$src" >"$dir/backends/metal/$(basename "$src")"
  if cmp -s "$src" "$dir/backends/metal/$(basename "$src")"; then
    echo "metal_check: self-test '$name' did not change $(basename "$src"); update the test" >&2
    status=1
    return
  fi
  if "$clang" "${flags[@]}" -I "$dir" "$dir/backends/metal/$(basename "$src")" >"$dir/log" 2>&1; then
    echo "metal_check: self-test '$name' was NOT caught" >&2
    status=1
  else
    echo "metal_check: self-test '$name' caught: $(grep -m1 -o 'error: .*' "$dir/log")"
  fi
}
q="$root/csrc/backends/metal/metal_queue.mm"
k="$root/csrc/backends/metal/metal_kernels.mm"
b="$root/csrc/backends/metal/metal_backend.mm"
s="$root/csrc/backends/metal/metal_signpost.mm"
mutant misspelled-selector "$q" 's/encodeWaitForEvent:/encodeWaitForEvents:/'
mutant undeclared-api "$k" 's/\[enc endEncoding\];/[enc endEncoding];\n  [enc insertDebugSignpost:@"x"];/'
mutant wrong-enum "$b" 's/MTLHeapTypePlacement/MTLHeapTypePlaced/'
mutant wrong-protocol-type "$k" 's/\[enc setBuffer:buf offset:base atIndex:1\]/[enc setBuffer:d.fill_pipeline offset:base atIndex:1]/'
mutant signpost-format "$s" 's/"%{public}s stream=%lld bytes=%llu"/"%d stream=%lld bytes=%llu"/'

exit $status
