#!/usr/bin/env bash
# The extension module built the way the first GPU machine's compiler built it (a g++ wrapper
# that linked libstdc++ statically and whose LTO could not run; docs/building.md):
#   - with a g++ whose lto-wrapper cannot run ("ld: error: could not run lto-wrapper"), the
#     configure falls back to no LTO and says why (MPSRT_LTO=AUTO), and MPSRT_LTO=ON refuses;
#   - built Release with -DMPSRT_STATIC_LIBSTDCXX=ON, the module needs no libstdc++.so or
#     libgcc_s.so and exports only PyInit__C (and so does the bench's module, PyInit__bench);
#   - in a process that loaded a shared libstdc++ first (numpy, torch, libstdc++.so.6 with
#     RTLD_GLOBAL), the runtime resets on every backend, shows its options, raises its errors and
#     runs a few ops (.ci/foreign_libstdcxx_check.py), and not one symbol of the module binds to
#     the process's libstdc++ or libgcc_s (LD_DEBUG=bindings; before the fix, thousands did,
#     the locale facets' ids among them).
# Linux with GNU ld. Needs g++, cmake, ninja and numpy in the active Python (the venv of
# .ci/run); installs nanobind there if missing; torch is optional (its checks then skip).
# CXX_UNDER_TEST picks the g++ under the wrapper (default g++; e.g. g++-11 for a static
# libstdc++ older than the process's shared one).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build/ci-static-libstdcxx
rm -rf "$out"
mkdir -p "$out/broken-lto"
python -c "import nanobind" 2>/dev/null || python -m pip install -q "nanobind>=2.4,<4"

# g++ with a broken LTO: -B puts a lto-wrapper first on its program path that cannot be run.
printf '#!/nonexistent/lto-wrapper-interpreter\n' >"$out/broken-lto/lto-wrapper"
chmod +x "$out/broken-lto/lto-wrapper"
cat >"$out/g++" <<EOF
#!/bin/sh
exec ${CXX_UNDER_TEST:-g++} -B$out/broken-lto/ "\$@"
EOF
chmod +x "$out/g++"
configure() {  # configure BUILD_DIR [-D...]...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPSRT_BUILD_PYTHON=ON \
    -DCMAKE_CXX_COMPILER="$out/g++" -DPython_EXECUTABLE="$(command -v python)" "$@"
}

echo "-- MPSRT_LTO=ON with a compiler whose LTO cannot run: the configure must stop"
if configure "$out/lto-on" -DMPSRT_LTO=ON >"$out/lto-on.log" 2>&1; then
  cat "$out/lto-on.log"
  echo "MPSRT_LTO=ON configured although the compiler's LTO does not work"
  exit 1
fi
grep -q "MPSRT_LTO=ON, but the compiler's LTO does not work" "$out/lto-on.log" || {
  cat "$out/lto-on.log"
  echo "MPSRT_LTO=ON failed, but not with the LTO message"
  exit 1
}

echo "-- MPSRT_LTO=AUTO (default), MPSRT_STATIC_LIBSTDCXX=ON: configure, build, install"
configure "$out/build" -DMPSRT_STATIC_LIBSTDCXX=ON 2>&1 | tee "$out/configure.log" | grep -E "mpsrt:|^    "
grep -q "mpsrt: LTO off: the compiler's LTO does not work" "$out/configure.log" || {
  echo "the configure did not fall back to no LTO with a broken lto-wrapper"
  exit 1
}
grep -q "could not run lto-wrapper" "$out/configure.log" || {
  echo "the configure did not say why LTO is off"
  exit 1
}
grep -q -- "-flto" "$out/build/build.ninja" && {
  echo "the build still uses -flto"
  exit 1
}
timeout 900 cmake --build "$out/build" >"$out/build.log" 2>&1 || {
  tail -n 40 "$out/build.log"
  exit 1
}
cmake --install "$out/build" --prefix "$out/pkg" >/dev/null
cp -r python/mpsrt/. "$out/pkg/mpsrt/"
for name in _C _bench; do
  so=$(ls "$out"/pkg/mpsrt/$name.*.so)
  echo "-- linkage of $(basename "$so")"
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  echo "needs: $(echo "$needed" | tr '\n' ' ')"
  if echo "$needed" | grep -E -q 'libstdc\+\+|libgcc_s'; then
    echo "MPSRT_STATIC_LIBSTDCXX=ON left a shared libstdc++ or libgcc_s in the module's needs"
    exit 1
  fi
  exports=$(nm -D --defined-only "$so" | awk '{print $NF}')
  if [ "$exports" != "PyInit_$name" ]; then
    echo "the module must export only PyInit_$name; it exports $(echo "$exports" | wc -l) symbols:"
    echo "$exports" | head -n 20
    exit 1
  fi
  echo "exports: PyInit_$name only"
done
so=$(ls "$out"/pkg/mpsrt/_C.*.so)

echo "-- the module beside the process's shared libstdc++"
torch_device=0
# The PyTorch device's glue only where it is already built (.ci/run builds it at install).
if python -c "import torch" >/dev/null 2>&1 && [ -n "${TORCH_EXTENSIONS_DIR:-}" ]; then
  torch_device=1
fi
rm -f "$out"/ld-bindings.*
PYTHONPATH="$out/pkg" MPSRT_EXPECT_MODULE_DIR="$out/pkg/mpsrt" MPSRT_CHECK_TORCH_DEVICE=$torch_device \
  LD_DEBUG=bindings LD_DEBUG_OUTPUT="$out/ld-bindings" \
  timeout 300 python .ci/foreign_libstdcxx_check.py
# Every symbol the module takes from another object, by object: libc must be there (else this
# grep sees nothing and proves nothing), libstdc++ and libgcc_s must not.
cat "$out"/ld-bindings.* | grep -F "binding file $so " |
  sed -n 's/.* to \([^ ]*\) .*/\1/p' | sort | uniq -c | tee "$out/bound-to.txt"
grep -q 'libc\.so' "$out/bound-to.txt" || {
  echo "LD_DEBUG=bindings showed no binding of the module to libc: the check cannot see bindings"
  exit 1
}
if grep -E -q 'libstdc\+\+|libgcc_s' "$out/bound-to.txt"; then
  echo "symbols of the module were bound to the process's libstdc++ or libgcc_s:"
  cat "$out"/ld-bindings.* | grep -F "binding file $so " | grep -E 'libstdc\+\+|libgcc_s' | head -n 20
  exit 1
fi
echo "static libstdc++ module: passed"
