"""The guides' code examples run, on every backend (conftest's `backend` fixture).

Every fenced Python block (```python) of README.md and docs/**/*.md (not docs/_ext,
docs/_tools) is a test. The blocks of one page run in order in one fresh interpreter
(conftest.run_python, on the run's backend, in a temporary directory), so a later block uses
what an earlier one defined; a block passes when it and the page's blocks before it ran without
raising (the interpreter exits 0), and when what it shows holds:

- `print(...)  # TEXT` (a statement of the block's top level): TEXT is what it prints. The
  pages show the cpu backend, so there the output must be TEXT (whitespace aside); elsewhere it
  must have as many fields. TEXT ending in "..." lists parts of the output: each must be in it.
- `x = f()  # NAME == TEXT` (NAME a dotted name): after the statement, str(NAME) is TEXT.
- A comparison written as a statement (`a() == b()`) must be True.

A block that cannot run as written in a test (it needs several processes, a network, a GPU,
or is deliberately a fragment) has the HTML comment `<!-- not run: REASON -->` on the line right
before its fence: the test skips it with that reason (GitHub and MyST render the comment as
nothing). Blocks that import torch, and the blocks after them on their page, are skipped where
torch is not installed. README.md repeats the guides' quickstarts: a README block that is a
verbatim copy of a guide's block that runs is skipped, saying where it runs (so that the same
code does not run twice); one that differs from every guide's block runs in README's own
interpreter. A block's test fails where a statement raises: the traceback names the page's line.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import run_python

ROOT = Path(__file__).resolve().parents[2]
TORCH_MISSING = "torch is not installed: pip install torch"
PYTHON_LANGUAGES = ("python", "py", "python3")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")
_MARKER_START = re.compile(r"<!--\s*not run", re.IGNORECASE)
_PROBE = re.compile(r"^(?P<expr>[A-Za-z_][\w.]*) == (?P<text>\S.*)$")


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # the page's line of the block's first line of code
    source: str
    not_run: str | None = None  # the marker's reason
    needs_torch: bool = False  # it or an earlier block of its page imports torch
    copy_of: str | None = None  # README.md: the guide's block ("page:line") it repeats

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    docs = ROOT / "docs"
    found = [
        p
        for p in sorted(docs.rglob("*.md"))
        if not any(
            part.startswith(("_", ".")) or part == "build" for part in p.relative_to(docs).parts
        )
    ]
    return [ROOT / "README.md", *found]


def _language(info: str) -> str:
    words = info.split()
    if words and words[0] in ("{code-block}", "{code}", "{code-cell}"):
        words = words[1:]
    return words[0].lower() if words else ""


def scan(path: Path) -> tuple[list[Block], list[str]]:
    """The page's Python blocks, and what is wrong with its not-run markers."""
    page = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    used_markers: set[int] = set()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        end = i + 1
        while end < len(lines) and not (
            lines[end].strip().startswith(fence) and set(lines[end].strip()) == {fence[0]}
        ):
            end += 1
        if _language(m["info"]) in PYTHON_LANGUAGES:
            body = [
                ln[indent:] if ln[:indent].strip() == "" else ln.lstrip()
                for ln in lines[i + 1 : end]
            ]
            marker = _MARKER.match(lines[i - 1]) if i > 0 else None
            if marker is not None:
                used_markers.add(i - 1)
            blocks.append(
                Block(page, i + 2, "\n".join(body) + "\n", marker["reason"] if marker else None)
            )
        i = end + 1
    problems = []
    for n, text in enumerate(lines):
        if _MARKER_START.search(text) and n not in used_markers:
            problems.append(
                f"{page}:{n + 1}: a not-run marker must be `<!-- not run: REASON -->` on one line, "
                f"right before a ```python block: {text.strip()!r}"
            )
    return blocks, problems


def _imports_torch(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False  # the block's run reports it
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        if any(n == "torch" or n.startswith(("torch.", "mpsrt.torch")) for n in names):
            return True
    return False


def collect() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in pages():
        page_blocks, page_problems = scan(path)
        problems += page_problems
        needs_torch = False
        for b in page_blocks:
            if b.not_run is None:
                needs_torch = needs_torch or _imports_torch(b.source)
                b.needs_torch = needs_torch
        blocks += page_blocks
    guides = {b.source: b.id for b in blocks if b.page != "README.md" and b.not_run is None}
    for b in blocks:
        if b.page == "README.md" and b.not_run is None:
            b.copy_of = guides.get(b.source)
    return blocks, problems


BLOCKS, PROBLEMS = collect()
TORCH_INSTALLED = importlib.util.find_spec("torch") is not None


def _skip_reason(block: Block) -> str | None:
    if block.not_run is not None:
        return f"{block.id} not run: {block.not_run}"
    if block.copy_of is not None:
        return f"{block.id} is a verbatim copy of {block.copy_of}, which runs there"
    if block.needs_torch and not TORCH_INSTALLED:
        return f"{block.id}: {TORCH_MISSING}"
    return None


# What the guides' blocks show ------------------------------------------------------------------


@dataclass
class Shown:
    prints: dict[int, str] = field(default_factory=dict)  # print line -> the output it shows
    probes: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # line -> (NAME, TEXT)
    comparisons: list[int] = field(default_factory=list)  # lines of comparison statements


def shown(block: Block) -> Shown:
    """What the block's comments and statements say it does (see the module's docstring)."""
    out = Shown()
    try:
        tree = ast.parse(block.source)
    except SyntaxError:
        return out  # the block's run reports it
    ast.increment_lineno(tree, block.line - 1)
    comments = {
        tok.start[0] + block.line - 1: tok.string[1:].strip()
        for tok in tokenize.generate_tokens(io.StringIO(block.source).readline)
        if tok.type == tokenize.COMMENT
    }
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Compare):
            out.comparisons.append(stmt.lineno)
        comment = comments.get(stmt.lineno, "")
        if not comment or stmt.lineno != stmt.end_lineno:
            continue
        probe = _PROBE.match(comment)
        if probe is not None:
            out.probes.setdefault(stmt.lineno, []).append((probe["expr"], probe["text"]))
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id == "print"
        ):
            out.prints[stmt.lineno] = comment
    return out


def output_matches(shows: str, printed: str, backend: str) -> bool:
    if shows.endswith("..."):
        parts = [p.strip() for p in shows[:-3].split(",")]
        return all(p in printed for p in parts if p)
    if backend == "cpu":
        return printed.split() == shows.split()
    return len(printed.split()) == len(shows.split())


# Running a page --------------------------------------------------------------------------------

# The page's interpreter: runs each block's top-level statements in turn in a fresh __main__ and
# writes, between its output, markers ("\x1e" KIND LINE [JSON]) that say which statement wrote
# it, what the statements written as expressions gave and the values of the probes.
_RUNNER = r"""
import ast, builtins, json, os, sys, types

def _mark(kind, line, value=None):
    sys.stdout.flush()
    extra = "" if value is None else " " + json.dumps(value)
    sys.stdout.write("\n\x1e%s %d%s\n" % (kind, line, extra))
    sys.stdout.flush()

def _run(path, cwd, blocks):
    os.chdir(cwd)
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    ns = main.__dict__
    for block in blocks:
        _mark("block", block["line"])
        tree = ast.parse("\n" * (block["line"] - 1) + block["source"], path)  # the page's lines
        probes = {int(k): v for k, v in block["probes"].items()}
        for stmt in tree.body:
            _mark("stmt", stmt.lineno)
            if isinstance(stmt, ast.Expr):
                value = eval(compile(ast.Expression(stmt.value), path, "eval"), ns)
                if value is not None:
                    _mark("value", stmt.lineno, repr(value)[:200])
            else:
                exec(compile(ast.Module([stmt], []), path, "exec"), ns)
            for expr in probes.get(stmt.lineno, ()):
                _mark("probe", stmt.lineno, [expr, str(eval(expr, ns))])
        _mark("done", block["line"])
"""

_MARK = re.compile(r"\n?\x1e(?P<kind>\w+) (?P<line>\d+)(?: (?P<value>[^\n]*))?\n")


@dataclass
class PageRun:
    returncode: int
    stderr: str
    started: list[int] = field(default_factory=list)  # blocks, by line
    done: list[int] = field(default_factory=list)
    printed: dict[int, str] = field(default_factory=dict)  # statement line -> its output
    values: dict[int, str] = field(default_factory=dict)
    probes: dict[int, list[tuple[str, str]]] = field(default_factory=dict)


def parse(stdout: str, returncode: int, stderr: str) -> PageRun:
    run = PageRun(returncode, stderr)
    marks = list(_MARK.finditer(stdout))
    for m, after in zip(marks, [*marks[1:], None]):
        kind, line = m["kind"], int(m["line"])
        value = json.loads(m["value"]) if m["value"] else None
        if kind == "block":
            run.started.append(line)
        elif kind == "done":
            run.done.append(line)
        elif kind == "stmt":
            run.printed[line] = stdout[m.end() : after.start() if after else len(stdout)]
        elif kind == "value":
            run.values[line] = value
        elif kind == "probe":
            run.probes.setdefault(line, []).append((value[0], value[1]))
    return run


_RUNS: dict[tuple[str, str], tuple[list[Block], PageRun]] = {}


def page_run(page: str, backend: str, tmp_path_factory: pytest.TempPathFactory):
    """The page's runnable blocks and their run on `backend`, once per process."""
    key = (page, backend)
    if key not in _RUNS:
        blocks = [b for b in BLOCKS if b.page == page and _skip_reason(b) is None]
        if any(b.needs_torch for b in blocks):
            # The PyTorch device's glue is built (once, cached) here, not within the page's
            # interpreter's time limit.
            import mpsrt.torch  # noqa: F401
        payload = [
            {
                "line": b.line,
                "source": b.source,
                "probes": {str(k): [e for e, _ in v] for k, v in shown(b).probes.items()},
            }
            for b in blocks
        ]
        cwd = tmp_path_factory.mktemp("docs-example")
        args = f"{str(ROOT / page)!r}, {str(cwd)!r}, json.loads({json.dumps(payload)!r})"
        code = f"{_RUNNER}\n_run({args})\n"
        r = run_python(code, backend)
        _RUNS[key] = (blocks, parse(r.stdout, r.returncode, r.stderr))
    return _RUNS[key]


# The tests -------------------------------------------------------------------------------------


def test_the_pages_have_examples_and_well_formed_markers() -> None:
    assert any(b.page == "README.md" for b in BLOCKS), "the scan found no block in README.md"
    assert not PROBLEMS, "\n".join(PROBLEMS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_example_runs(block: Block, backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = _skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    blocks, run = page_run(block.page, backend, tmp_path_factory)
    if block.line not in run.done:
        if block.line in run.started:
            why = f"{block.id} raised (exit status {run.returncode})"
        else:
            failed = next(
                (b.id for b in blocks if b.line in run.started and b.line not in run.done), "?"
            )
            why = f"{block.id} was not reached: {failed} failed before it"
        pytest.fail(f"{why}; the interpreter's stderr ends:\n{run.stderr[-4000:]}")
    shows = shown(block)
    for line, text in shows.prints.items():
        printed = run.printed.get(line, "").strip()
        assert output_matches(text, printed, backend), (
            f"{block.page}:{line} shows `{text}` as its output; on {backend} it printed {printed!r}"
        )
    for line, expected in shows.probes.items():
        got = run.probes.get(line, [])
        assert got == expected, (
            f"{block.page}:{line}: the comment says {expected}, the run gave {got}"
        )
    for line in shows.comparisons:
        value = run.values.get(line)
        assert value == "True", f"{block.page}:{line}: the comparison is {value} on {backend}"
    if block.line == blocks[-1].line:  # the page's interpreter exits cleanly after its last block
        assert run.returncode == 0, (
            f"the page's interpreter exited with status {run.returncode}:\n{run.stderr[-4000:]}"
        )
