#!/usr/bin/env bash
# cibuildwheel's before-build (.github/workflows/wheels.yml), once per Python: the PyTorch
# device's glue prebuilt for each torch minor version the project supports, into
# python/mpsrt/torch/_prebuilt/, which the wheel built next carries. `python -m
# mpsrt.torch.prebuild` runs from an installed mpsrt, so mpsrt is built once here first.
# A torch version without a build for this Python or platform is skipped, saying so. The CPU
# builds of torch (the glue links libtorch_cpu and libc10, which CUDA builds carry too).
set -euo pipefail
out=python/mpsrt/torch/_prebuilt
find "$out" -mindepth 1 ! -name README.md -exec rm -rf {} +  # another Python's glues
python -m pip install -q --no-deps .
for version in ${MPSRT_PREBUILD_TORCH:-2.13 2.14 2.15}; do
  if python -m pip install -q "torch==$version.*" --index-url https://download.pytorch.org/whl/cpu; then
    python -m mpsrt.torch.prebuild "$out"
  else
    echo "torch $version: no CPU build for this Python/platform; no prebuilt glue for it"
  fi
done
python -m pip uninstall -q -y torch mpsrt
ls -l "$out"
