"""The tables the docs build generates from files of the project (docs/_ext/mpsrt_tables.py):
the bench's latest figures (docs/_data/bench.json, one `python -m bench --json` run) render every
row of the run, and the file still matches what the bench writes."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BENCH_JSON = DOCS / "_data" / "bench.json"


def _tables_ext():
    path = DOCS / "_ext" / "generated_tables.py"
    spec = importlib.util.spec_from_file_location("generated_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_row_fields() -> set[str]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.timing import Row

    return {f.name for f in dataclasses.fields(Row)}


def test_the_bench_figures_page_renders_every_row_of_the_run() -> None:
    result = json.loads(BENCH_JSON.read_text())
    rows = result["rows"]
    assert rows, "docs/_data/bench.json holds no row"
    # Written by the bench as it is now: the same fields as its Row, a full run's header.
    assert all(set(r) == _bench_row_fields() for r in rows)
    assert result["header"]["mode"] == "full", "the docs show a full run, not --quick"
    assert not result["header"]["not_finished"], result["header"]["not_finished"]
    text = "\n".join(_tables_ext().bench_tables(result))
    table_rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    body = [line for line in table_rows if not line.startswith(("| case |", "| | |"))]
    header_lines = len(result["header"]) - 2 + len(result["header"]["devices"])
    assert len(body) == len(rows) + header_lines
    for r in rows:
        assert f"| {r['name'].replace('|', chr(92) + '|')} |" in text, r["name"]
    # One table per backend and area, titled with both.
    for backend, area in {(r["backend"], r["area"]) for r in rows}:
        assert f"**{area}** (`{backend}`)" in text
    assert (DOCS / "_static" / "bench.png").stat().st_size > 10_000
