#!/usr/bin/env bash
# Builds the documentation site (docs/, Sphinx + MyST) into build/docs; warnings are errors.
# Needs the docs extra and an installed mpsrt (autodoc imports it): pip install ".[docs]".
set -euo pipefail
cd "$(dirname "$0")/.."
python -m sphinx -W --keep-going -n -b html docs build/docs "$@"
