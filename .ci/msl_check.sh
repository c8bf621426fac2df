#!/usr/bin/env bash
# Every GPU kernel of csrc/kernels/ translated to Metal Shading Language with SPIRV-Cross, as the
# metal backend's build does for the runtime kernels (csrc/kernels/README.md): GLSL -> SPIR-V
# (glslc) -> MSL. A kernel that does not translate fails the check, except those listed in KNOWN
# with the reason. random is its float64-free build (the one metal embeds); its MSL must hold no
# double. The MPSRT_RANDOM_F64 build (vulkan only) must NOT translate: Metal has no double.
set -euo pipefail
cd "$(dirname "$0")/.."
KNOWN=""
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for src in csrc/kernels/*/*.comp; do
  name=$(basename "$src" .comp)
  glslc --target-env=vulkan1.2 -O -I csrc/kernels -I csrc/include -o "$out/$name.spv" "$src"
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
if grep -qw double "$out/random.metal"; then
  echo "msl: random's MSL uses double"
  status=1
fi
glslc --target-env=vulkan1.2 -O -DMPSRT_RANDOM_F64=1 -o "$out/random_f64.spv" \
  csrc/kernels/runtime/random.comp
if spirv-cross --msl --msl-version 20300 "$out/random_f64.spv" >/dev/null 2>&1; then
  echo "msl: random -DMPSRT_RANDOM_F64 translates: the check cannot tell float64 apart; update it"
  status=1
else
  echo "msl: random -DMPSRT_RANDOM_F64 does not translate (float64, vulkan only), as expected"
fi
exit $status
