#!/usr/bin/env bash
# Every GPU kernel of csrc/kernels/ translated to Metal Shading Language with SPIRV-Cross, as the
# metal backend's build will (csrc/kernels/README.md): GLSL -> SPIR-V (glslc) -> MSL. A kernel
# that does not translate fails the check, except those listed in KNOWN with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
# random: float64 push constants and Box-Muller in double; MSL has no double.
KNOWN="random"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for src in csrc/kernels/*.comp csrc/kernels/runtime/*.comp; do
  name=$(basename "$src" .comp)
  glslc --target-env=vulkan1.2 -O -I csrc/kernels -o "$out/$name.spv" "$src"
  if spirv-cross --msl --msl-version 20300 "$out/$name.spv" --output "$out/$name.metal" \
      > "$out/$name.log" 2>&1; then
    echo "msl: $name translates ($(wc -l < "$out/$name.metal") lines)"
  elif [[ " $KNOWN " == *" $name "* ]]; then
    echo "msl: $name does not translate yet (known): $(head -c 160 "$out/$name.log")"
  else
    echo "msl: $name FAILS to translate: $(cat "$out/$name.log")"
    status=1
  fi
done
exit $status
