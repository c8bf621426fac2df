"""Sphinx configuration of mpsrt's documentation site.

Why Sphinx + MyST + furo: the guides were markdown in the README and stay markdown (MyST
parses them, so they also read on GitHub as they are); Sphinx's autodoc builds the API
reference from the docstrings of the Python layer and the extension `mpsrt._C` as installed;
Breathe renders the C++ and C API reference (api/cpp.md, api/c.md) from the XML that doxygen
writes of the public headers (docs/Doxyfile, into build/doxygen); furo is a plain, searchable
theme. Build from the repository root with `bash .ci/docs.sh` (doxygen, then
`python -m sphinx -W --keep-going -n -b html docs build/docs`).

autodoc imports the mpsrt that the running Python imports (an installed build: `pip install
".[docs]"`), since the extension module `mpsrt._C` is compiled, not in the source tree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import mpsrt

# docs/_ext: the tables the build generates (the environment variables, the bench's figures).
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "mpsrt"
author = "the mpsrt authors"
release = mpsrt.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "breathe",
    "mpsrt_tables",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# Only the pages: build outputs and anything else in docs/ stay out of the site.
exclude_patterns = ["_build", "build", "Thumbs.db", ".DS_Store", "README.md", "_ext", "_tools"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

# The C++ and C API reference: doxygen's XML of csrc/include/mpsrt (`doxygen docs/Doxyfile` from
# the repository root; .ci/docs.sh runs it first).
_DOXYGEN_XML = Path(__file__).resolve().parent.parent / "build" / "doxygen" / "xml"
if not (_DOXYGEN_XML / "index.xml").is_file():
    raise RuntimeError(
        f"{_DOXYGEN_XML} has no doxygen output: run `doxygen docs/Doxyfile` from the repository "
        "root first (bash .ci/docs.sh does)"
    )
breathe_projects = {"mpsrt": str(_DOXYGEN_XML)}
breathe_default_project = "mpsrt"
breathe_default_members = ("members",)
# Enumerator and macro values are part of the API (stable ids, versions): show them.
breathe_show_enumvalue_initializer = True
breathe_show_define_initializer = True

html_theme = "furo"
html_title = f"mpsrt {release}"

# `-n` (nitpicky) stays on for mpsrt's own references. Types of the standard library, numpy and
# torch in signatures have no inventory to link to (the build reads no network inventories),
# so only those are ignored: in Python signatures, and in C++ and C signatures the C++ standard
# library (std::) and the C fixed-width and size types (uint64_t, size_t, ...).
nitpick_ignore_regex = [
    ("py:class", r"(collections\.abc|os|numpy|torch)\..*"),
    ("cpp:identifier", r"std(::.*)?"),
    ("cpp:identifier", r"(u?int(8|16|32|64)|u?intptr|size|ptrdiff)_t"),
]

# The extension's docstrings are plain text, where a name such as `fill_` would read as a
# reStructuredText reference: a trailing underscore outside ``literals`` is escaped.
_LITERAL = re.compile(r"(``.*?``)")
_TRAILING_UNDERSCORE = re.compile(r"(?<=\w)_(?!\w)")


def _escape_trailing_underscores(app, what, name, obj, options, lines):
    in_doctest = False
    for i, line in enumerate(lines):
        # A doctest block (">>>" up to the next blank line) is shown as code: no escapes there.
        in_doctest = line.lstrip().startswith(">>>") or (in_doctest and bool(line.strip()))
        if in_doctest:
            continue
        parts = _LITERAL.split(line)
        lines[i] = "".join(
            part if part.startswith("``") else _TRAILING_UNDERSCORE.sub(r"\\_", part)
            for part in parts
        )


# The extension's functions are nanobind objects (`nanobind.nb_func`), which autodoc does not
# take for functions: this documenter does, and their signatures come from the first line of
# the docstrings nanobind writes. Custom documenters need autodoc's class-based implementation.
autodoc_use_legacy_class_based = True

# Doxygen links a header named in a doc comment ("mpsrt/kernel.h") to the header's own page,
# `<name>_8h` or, for a header without a file comment, its source listing `<name>_8h_source`.
# The reference has neither: api/cpp.md and api/c.md put a label of the first form on the
# section that documents each header, and links of the second form land there too. A link to a
# header that no section claims still warns.
_HEADER_SOURCE_REF = re.compile(r"(\w+_8h)_source")


def _resolve_header_ref(app, env, node, contnode):
    m = _HEADER_SOURCE_REF.fullmatch(node.get("reftarget", ""))
    if node.get("refdomain") != "std" or node.get("reftype") != "ref" or m is None:
        return None
    return env.get_domain("std").resolve_xref(
        env, node["refdoc"], app.builder, "ref", m.group(1), node, contnode
    )


# The C headers: their declarations are global (no namespace), documented by a `\file` comment.
_C_HEADERS = ("c_api.h", "dtype_ids.h")


def _cpp_aliases(xml_dir):
    """The project's plain type aliases (`using Op = RandomOp` in RandomSpec; not
    `using StackFrames = std::vector<StackFrame>`): alias -> what it names, for the aliases whose
    name means one thing."""
    import xml.etree.ElementTree as ET

    aliases = {}
    index = ET.parse(xml_dir / "index.xml").getroot()
    for compound in index.iter("compound"):
        compounddef = ET.parse(xml_dir / f"{compound.get('refid')}.xml").getroot()
        for member in compounddef.iter("memberdef"):
            m = re.fullmatch(r"using \S+ = +([\w:]+)", member.findtext("definition") or "")
            if member.get("kind") == "typedef" and m:
                aliases.setdefault(member.findtext("name"), set()).add(m.group(1))
    return {alias: named.pop() for alias, named in aliases.items() if len(named) == 1}


def _resolve_cpp_identifier(app, env, node, contnode):
    """Two names in C++ signatures that the C++ domain cannot link by itself, though both are
    the project's: a C macro in an initializer (`kDTypeCount = MPSRT_DTYPE_ID_COUNT`), which is
    an object of the C domain, and an enumerator reached through a type alias (RandomSpec's
    `Op op = Op::Bits`). Each resolves to the declaration it names; anything else still warns."""
    if node.get("refdomain") != "cpp" or node.get("reftype") != "identifier":
        return None
    target = node["reftarget"]
    if re.fullmatch(r"MPSRT_[A-Z0-9_]+", target):
        domain, typ = env.get_domain("c"), "macro"
    else:
        alias, sep, rest = target.partition("::")
        if not sep or alias not in _CPP_ALIASES:
            return None
        domain, typ, target = env.get_domain("cpp"), "identifier", f"{_CPP_ALIASES[alias]}::{rest}"
    return domain.resolve_xref(env, node["refdoc"], app.builder, typ, target, node, contnode)


_CPP_ALIASES = _cpp_aliases(_DOXYGEN_XML)


def _doxygen_public_names(xml_dir):
    """What doxygen documents of the public headers, by qualified name: the classes and members
    of the namespaces mpsrt, mpsrt::philox and mpsrt::profiler (doxygen leaves out mpsrt::detail
    and testing.h), and the declarations of the C headers. Class members are not listed: a class
    is rendered with its members."""
    import xml.etree.ElementTree as ET

    names = {}  # name -> where it is declared
    index = ET.parse(xml_dir / "index.xml").getroot()
    for compound in index.iter("compound"):
        kind, name = compound.get("kind"), compound.findtext("name")
        if not ((kind == "namespace" and name.startswith("mpsrt")) or name in _C_HEADERS):
            continue
        compounddef = ET.parse(xml_dir / f"{compound.get('refid')}.xml").getroot()[0]
        prefix = f"{name}::" if kind == "namespace" else ""
        for inner in compounddef.iter("innerclass"):
            names[inner.text] = name
        for member in compounddef.iter("memberdef"):
            names[prefix + member.findtext("name")] = name
    return names


def _check_reference_complete(app, env):
    """Fails the build (a warning) when a public declaration that doxygen documents is on no
    page of the reference: a header's new function must be added to api/cpp.md or api/c.md."""
    from sphinx.util import logging

    rendered = set()
    for domain in ("cpp", "c"):
        for symbol in env.domaindata[domain]["root_symbol"].get_all_symbols():
            if symbol.declaration is not None:
                rendered.add(str(symbol.get_full_nested_name()))
    for name, scope in sorted(_doxygen_public_names(_DOXYGEN_XML).items()):
        if name not in rendered:
            logging.getLogger(__name__).warning(
                "%s (%s) is documented in the headers but on no page of the C++/C reference: "
                "add it to docs/api/cpp.md or docs/api/c.md",
                name,
                scope,
                type="mpsrt",
                subtype="api_reference",
            )


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

    # A static method of an extension class (Stream.priority_range) is an nb_func in the class's
    # namespace, not a staticmethod: documented as a static method, from its docstring.
    from sphinx.ext.autodoc import ClassDocumenter, MethodDocumenter

    class NanobindStaticMethodDocumenter(MethodDocumenter):
        objtype = "nbstaticmethod"
        directivetype = "method"
        priority = 11  # ahead of AttributeDocumenter (10), which takes non-routines

        @classmethod
        def can_document_member(cls, member, membername, isattr, parent):
            return type(member).__name__ == "nb_func" and isinstance(parent, ClassDocumenter)

        def add_directive_header(self, sig):
            super().add_directive_header(sig)
            self.add_line("   :staticmethod:", self.get_sourcename())

    app.add_autodocumenter(NanobindStaticMethodDocumenter)
    app.connect("autodoc-process-docstring", _escape_trailing_underscores)
    app.connect("missing-reference", _resolve_header_ref)
    app.connect("missing-reference", _resolve_cpp_identifier)
    app.connect("env-check-consistency", _check_reference_complete)
