"""Sphinx directives for the tables the docs build generates (docs/_ext/generated_tables.py
writes their markdown):

- ``{mpsrt-options}``: every environment variable of the options table (``mpsrt.options()``).
- ``{mpsrt-bench} PATH``: the figures of one ``python -m bench --json PATH`` run (a file in the
  repository, path relative to docs/).

Each directive writes markdown that MyST parses as if it were in the page, so the help texts'
markup (backticks, links to other pages) renders as it does elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from generated_tables import bench_tables, options_table


class _MarkdownDirective(Directive):
    """A directive whose output is markdown, parsed in place."""

    def markdown(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.markdown()), self.content_offset, container)
        return container.children


class OptionsTable(_MarkdownDirective):
    def markdown(self) -> list[str]:
        import mpsrt

        return options_table(mpsrt.options())


class BenchTables(_MarkdownDirective):
    required_arguments = 1

    def markdown(self) -> list[str]:
        env = self.state.document.settings.env
        path = Path(env.srcdir) / self.arguments[0]
        env.note_dependency(str(path))
        return bench_tables(json.loads(path.read_text()))


def setup(app):
    app.add_directive("mpsrt-options", OptionsTable)
    app.add_directive("mpsrt-bench", BenchTables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
