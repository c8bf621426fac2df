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

import re

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

# The extension's docstrings are plain text, where a name such as `fill_` would read as a
# reStructuredText reference: a trailing underscore outside ``literals`` is escaped.
_LITERAL = re.compile(r"(``.*?``)")
_TRAILING_UNDERSCORE = re.compile(r"(?<=\w)_(?!\w)")


def _escape_trailing_underscores(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        parts = _LITERAL.split(line)
        lines[i] = "".join(
            part if part.startswith("``") else _TRAILING_UNDERSCORE.sub(r"\\_", part)
            for part in parts
        )


# The extension's functions are nanobind objects (`nanobind.nb_func`), which autodoc does not
# take for functions: this documenter does, and their signatures come from the first line of
# the docstrings nanobind writes. Custom documenters need autodoc's class-based implementation.
autodoc_use_legacy_class_based = True


def setup(app):
    from sphinx.ext.autodoc import FunctionDocumenter, ModuleDocumenter

    class NanobindFunctionDocumenter(FunctionDocumenter):
        objtype = "nbfunction"
        directivetype = "function"
        priority = FunctionDocumenter.priority + 1

        @classmethod
        def can_document_member(cls, member, membername, isattr, parent):
            return type(member).__name__ == "nb_func" and isinstance(parent, ModuleDocumenter)

    app.add_autodocumenter(NanobindFunctionDocumenter)
    app.connect("autodoc-process-docstring", _escape_trailing_underscores)
