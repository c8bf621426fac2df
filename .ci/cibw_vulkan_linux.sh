#!/usr/bin/env bash
# cibuildwheel's before-all on Linux (.github/workflows/wheels.yml): what the vulkan backend
# needs at build time, into /opt/vulkan (VULKAN_SDK): the Vulkan headers and volk (sources,
# pinned to one Vulkan SDK release) and glslc, built from shaderc (the manylinux images'
# distribution, AlmaLinux, packages no glslc for both x86_64 and aarch64). Runs once per
# container; about 5-10 minutes, most of it glslc.
set -euo pipefail
sdk=vulkan-sdk-1.3.296.0
shaderc=v2024.4
prefix=/opt/vulkan
py=/opt/python/cp312-cp312/bin/python
"$py" -m pip install -q cmake ninja
export PATH="$($py -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
src=$(mktemp -d)
git clone -q --depth 1 -b "$sdk" https://github.com/KhronosGroup/Vulkan-Headers "$src/headers"
cmake -S "$src/headers" -B "$src/headers/build" -G Ninja -DCMAKE_INSTALL_PREFIX="$prefix"
cmake --install "$src/headers/build"
git clone -q --depth 1 -b "$sdk" https://github.com/zeux/volk "$src/volk"
mkdir -p "$prefix/include/volk"
cp "$src/volk/volk.c" "$src/volk/volk.h" "$prefix/include/volk/"
git clone -q --depth 1 -b "$shaderc" https://github.com/google/shaderc "$src/shaderc"
(cd "$src/shaderc" && "$py" utils/git-sync-deps)
cmake -S "$src/shaderc" -B "$src/shaderc/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DSHADERC_SKIP_TESTS=ON -DSHADERC_SKIP_EXAMPLES=ON -DSHADERC_SKIP_COPYRIGHT_CHECK=ON \
  -DSPIRV_SKIP_TESTS=ON -DENABLE_GLSLANG_BINARIES=OFF
cmake --build "$src/shaderc/build" --target glslc_exe
install -D -m 755 "$src/shaderc/build/glslc/glslc" "$prefix/bin/glslc"
"$prefix/bin/glslc" --version
rm -rf "$src"
