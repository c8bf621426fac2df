"""The markdown of the tables the docs build generates, so that none is kept by hand (the
directives that put them into pages are docs/_ext/mpsrt_tables.py's; this module needs no
Sphinx, so the tests check what it writes).

- ``{mpsrt-options}``: every environment variable of the options table (``mpsrt.options()``,
  csrc/core/options.cpp): name, alias, default, meaning.
- ``{mpsrt-bench} PATH``: the figures of one ``python -m bench --json PATH`` run (a file in the
  repository, path relative to docs/), one table per backend and area, with the run's header
  (machine, versions, date).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cell(text: str) -> str:
    """A markdown table cell: pipes escaped, one line."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def options_table(options: list[dict[str, str]]) -> list[str]:
    """The markdown table of `mpsrt.options()`."""
    lines = ["| variable | alias | default | meaning |", "|---|---|---|---|"]
    for o in options:
        cells = [_code(o["name"]), _code(o["alias"]), _code(o["default"]), o["help"]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def bench_tables(result: dict) -> list[str]:
    """Markdown for one `python -m bench --json` result: the header, then a table per backend
    and area, in the run's order, with the rows' notes under each table."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.timing import TABLE_HEADER, Row, row_cells

    header = result["header"]
    out = ["| | |", "|---|---|"]
    for key, value in header.items():
        if key in ("devices", "not_finished"):
            continue
        out.append(f"| {_cell(key)} | {_cell(value)} |")
    for device in header.get("devices", []):
        out.append(
            f"| device | {_cell(device.get('device', ''))} ({_cell(device.get('details', ''))}) |"
        )
    out.append("")
    tables: dict[tuple[str, str], list[Row]] = {}
    for raw in result["rows"]:
        row = Row(**raw)
        tables.setdefault((row.backend, row.area), []).append(row)
    for (backend, area), rows in tables.items():
        out += [f"**{area}** (`{backend}`)", ""]
        out.append("| " + " | ".join(TABLE_HEADER) + " |")
        out.append("|---|--:|---|--:|--:|---|---|")
        notes: dict[str, None] = {}
        for r in rows:
            out.append("| " + " | ".join(_cell(c) for c in row_cells(r)) + " |")
            if r.note:
                notes.setdefault(f"{r.name}: {r.note}", None)
        out.append("")
        out += [f"- {_cell(n)}" for n in notes]
        out.append("")
    return out
