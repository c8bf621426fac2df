"""Sphinx configuration of mpsrt's documentation site.

Why Sphinx + MyST + furo: the guides were markdown in the README and stay markdown (MyST
parses them, so they also read on GitHub as they are); Sphinx's autodoc builds the API
reference from the docstrings of the Python layer and the extension `mpsrt._C` as installed;
furo is a plain, searchable theme. Build from the repository root with `bash .ci/docs.sh`
(`python -m sphinx -W --keep-going -n -b html docs build/docs`).

autodoc imports the mpsrt that the running Python imports (an installed build: `pip install
".[docs]"`), since the extension module `mpsrt._C` is compiled, not in the source tree.
"""

from __future__ import annotations

import mpsrt

project = "mpsrt"
author = "the mpsrt authors"
release = mpsrt.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# Only the pages: build outputs and anything else in docs/ stay out of the site.
exclude_patterns = ["_build", "build", "Thumbs.db", ".DS_Store", "README.md"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

html_theme = "furo"
html_title = f"mpsrt {release}"

# `-n` (nitpicky) stays on for mpsrt's own references. Types of the standard library, numpy and
# torch in signatures have no inventory to link to (the build reads no network inventories),
# so only those are ignored.
nitpick_ignore_regex = [
    ("py:class", r"(collections\.abc|os|numpy|torch)\..*"),
]
