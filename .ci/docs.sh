#!/usr/bin/env bash
# Builds the documentation site (docs/, Sphinx + MyST) into build/docs; warnings are errors.
# Needs the docs extra and an installed mpsrt (autodoc imports it): pip install ".[docs]"; and
# doxygen (apt-get install doxygen, brew install doxygen) for the C++ and C API reference:
# doxygen writes the headers' XML into build/doxygen (docs/Doxyfile), which Breathe renders, and
# fails on an undocumented public declaration.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v doxygen >/dev/null 2>&1; then
  echo "error: doxygen is not installed; the C++ and C API reference needs it:" \
    "install doxygen (apt-get install doxygen, brew install doxygen) and run again" >&2
  exit 1
fi
# From scratch: doxygen does not remove the XML of a declaration that is gone.
rm -rf build/doxygen
mkdir -p build/doxygen
doxygen docs/Doxyfile
python -m sphinx -W --keep-going -n -b html docs build/docs "$@"
