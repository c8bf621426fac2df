"""`python -m bench --plot PATH.png`: the results as one screen of small-multiple panels.

One panel per area and backend, in the tables' order, packed top to bottom into as many columns
as make the picture fit a 1920x1080 screen best. Each bar is one row of that area: its ratio to
the peer, or (a row without a peer but with a goal like "<= 5 µs") its value against that goal,
on one log scale shared by every panel, drawn from 1, so that a bar to the right is mpsrt ahead.
Red: a goal missed (its label red too); green: met; grey: no goal, or a goal not judged on this
backend. A black tick on a bar is the goal's threshold where the goal is a ratio ("<= 1.1x
torch cpu"). Labels are shortened to fit; the table and --json keep the full names.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .timing import Row

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MET, MISSED, NEUTRAL = "#2ca02c", "#d62728", "#a0a0a0"
SCREEN = (1920, 1080)  # px the picture is sized to fit
DPI = 100
ROW_PX = 13  # one bar and its label
HEAD_PX = 22  # a panel's title
FOOT_PX = 16  # a panel's x tick labels
GAP_PX = 12  # between panels of a column
TOP_PX, BOTTOM_PX = 78, 8  # the figure's title and legend; the bottom margin
COL_PX, LABEL_PX, RIGHT_PX = 480, 250, 14  # a column: its labels, its bars, a margin
PEER_CHARS = 20  # a longer peer name is cut; the case's name is cut to fit LABEL_PX
FONT = 7

# Shorter spellings that keep a case recognisable (applied before any cut).
_ABBREVIATIONS = (
    (" (new heap each time)", ""),
    ("float32", "f32"),
    ("float16", "f16"),
    ("bfloat16", "bf16"),
    ("(Python)", "(Py)"),
    (" threads", " thr"),
    (" thread", " thr"),
)
_RATIO_GOAL = re.compile(r"^(<=|>=)\s*([0-9]*\.?[0-9]+)x(?![\w.])")
_VALUE_GOAL = re.compile(r"^(<=|>=)\s*([0-9]*\.?[0-9]+)(?:\s+(\S+))?")


def check_path(path: str) -> None:
    """Raises ValueError (ImportError without matplotlib) with a clear message where `path`
    cannot take the picture: called before the run, so that a bad path does not cost one."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install matplotlib (or '.[bench]')") from e
    if os.path.isdir(path):
        raise ValueError(f"--plot {path}: is a directory; name a file, e.g. {path}/bench.png")
    formats = Figure().canvas.get_supported_filetypes()
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if suffix not in formats:
        raise ValueError(
            f"--plot {path}: the name must end in an image format matplotlib writes: .png "
            f"(or {', '.join('.' + f for f in sorted(formats) if f != 'png')})"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"--plot {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"--plot {path}: the directory {parent} is not writable")


def _shorten(text: str, limit: int, keep: str = "middle") -> str:
    """`text` cut to `limit` characters: in the middle by default (a case's start names it and
    its end often tells it from its neighbours: ", 2 thr", ", p99"), or keeping its "head" or
    "tail"."""
    if len(text) <= limit:
        return text
    head = {"middle": (limit - 1) * 3 // 5, "head": limit - 1, "tail": 0}[keep]
    return text[:head].rstrip() + "…" + text[len(text) - (limit - 1 - head) :].lstrip()


def _abbreviate(name: str) -> str:
    for long, short in _ABBREVIATIONS:
        name = name.replace(long, short)
    return name


def _fit_labels(panels: Sequence[Panel]) -> None:
    """Labels "case vs peer" that fit LABEL_PX (measured with the font, not counted):
    abbreviated, a long peer cut at its end, the case cut in its middle; where two rows of a
    panel would then read alike, cut keeping the case's head, then its tail, else in full."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer, font = RendererAgg(1, 1, DPI), FontProperties(size=FONT)
    budget = LABEL_PX - 10  # the tick and its pad

    def width(text: str) -> float:
        return renderer.get_text_width_height_descent(text, font, ismath=False)[0]

    def fit(b: Bar, keep: str) -> str:
        name, versus = _abbreviate(b.row.name), _abbreviate(b.versus)
        if len(versus) > PEER_CHARS or width(f"{name} vs {versus}") > budget:
            versus = _shorten(versus, PEER_CHARS if len(name) < 20 else PEER_CHARS - 6, "head")
        tail = f" vs {versus}"
        room, n = budget - width(tail), len(name)
        while n > 8 and width(_shorten(name, n, keep)) > room:
            # the characters that fit at this text's mean width, then one by one
            n = min(n - 1, int(n * room / width(_shorten(name, n, keep))))
        return _shorten(name, n, keep) + tail

    for p in panels:
        todo = list(p.bars)
        for keep in ("middle", "head", "tail", None):
            for b in todo:
                b.label = fit(b, keep) if keep else f"{b.row.name} vs {b.versus}"
            labels = [b.label for b in p.bars]
            todo = [b for b in todo if labels.count(b.label) > 1]
            if not todo:
                break


class Bar:
    """What one row draws: its value on the ratio axis, the goal's threshold on that axis (or
    None), its colour and its label."""

    def __init__(self, row: Row, value: float, threshold: float | None, versus: str) -> None:
        self.row, self.value, self.threshold = row, value, threshold
        self.colour = {True: MET, False: MISSED, None: NEUTRAL}[row.goal_met]
        self.versus = versus
        self.label = f"{row.name} vs {versus}"  # until _fit_labels


def _bar(row: Row) -> Bar | None:
    """The row as a bar: its ratio to the peer, else its value against a goal in its own unit
    ("<= 5 µs": goal/value, ">= 7 GB/s": value/goal; > 1 is met either way), else None."""
    if row.ratio is not None and math.isfinite(row.ratio) and row.ratio > 0:
        threshold = None
        m = _RATIO_GOAL.match(row.goal)
        if m:
            n = float(m.group(2))
            if m.group(1) == ">=" and row.higher_is_better and n > 0:
                threshold = n  # value >= n * peer
            elif m.group(1) == "<=" and not row.higher_is_better and n > 0:
                threshold = 1 / n  # value <= n * peer, so peer/value >= 1/n
        return Bar(row, row.ratio, threshold, row.peer_name or "peer")
    m = _VALUE_GOAL.match(row.goal)
    value = row.value
    if not m or value is None or not math.isfinite(value) or value <= 0:
        return None
    goal, unit = float(m.group(2)), m.group(3)
    if goal <= 0 or (unit is not None and unit != row.unit):
        return None
    ratio = goal / value if m.group(1) == "<=" else value / goal
    op = {"<=": "≤", ">=": "≥"}[m.group(1)]
    return Bar(row, ratio, 1.0, f"goal {op} {goal:g} {row.unit}".rstrip())


class Panel:
    """One area on one backend: its bars and what it could not draw."""

    def __init__(self, area: str, backend: str, rows: Sequence[Row]) -> None:
        self.area, self.backend = area, backend
        self.bars = [b for b in map(_bar, rows) if b is not None]
        self.undrawn = [r for r in rows if _bar(r) is None]
        self.unfinished = any(r.value is None and r.name.endswith("not finished") for r in rows)

    @property
    def height(self) -> int:
        return HEAD_PX + ROW_PX * max(1, len(self.bars)) + FOOT_PX + GAP_PX

    def title(self) -> str:
        goals = [r for r in (b.row for b in self.bars) if r.goal_met is not None]
        goals += [r for r in self.undrawn if r.goal_met is not None]
        missed = sum(r.goal_met is False for r in goals)
        parts = [f"{self.area} · {self.backend}"]
        if goals:
            parts.append(f"{missed} of {len(goals)} goals missed" if missed else "goals met")
        if self.unfinished:
            parts.append("NOT FINISHED")
        if self.undrawn and not self.unfinished:
            n = len(self.undrawn)
            parts.append(f"{n} row{'s' if n > 1 else ''} not drawn (see the table)")
        return " — ".join(parts)

    @property
    def bad(self) -> bool:
        rows = [b.row for b in self.bars] + self.undrawn
        return self.unfinished or any(r.goal_met is False for r in rows)


def _panels(rows: Sequence[Row]) -> list[Panel]:
    """A panel per (area, backend), areas in their first row's order, backends within each."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.area, r.backend), []).append(r)
    areas = list(dict.fromkeys(a for a, _ in groups))
    backends = list(dict.fromkeys(b for _, b in groups))
    keys = sorted(groups, key=lambda k: (areas.index(k[0]), backends.index(k[1])))
    return [Panel(a, b, groups[(a, b)]) for a, b in keys]


def _columns(heights: Sequence[int], k: int) -> list[list[int]]:
    """The panels' indices split, in order, into `k` columns whose tallest is the shortest."""
    n = len(heights)
    prefix = [0]
    for h in heights:
        prefix.append(prefix[-1] + h)
    # best[j][i]: the tallest column when the first i panels fill j columns; cut[j][i]: where
    # the last of those columns starts.
    best = [[math.inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(1, n + 1):
            for s in range(j - 1, i):
                tallest = max(best[j - 1][s], prefix[i] - prefix[s])
                if tallest < best[j][i]:
                    best[j][i], cut[j][i] = tallest, s
    out, i = [], n
    for j in range(k, 0, -1):
        out.append(list(range(cut[j][i], i)))
        i = cut[j][i]
    return out[::-1]


def _layout(panels: Sequence[Panel]) -> tuple[list[list[int]], int, int]:
    """The columns and the picture's width and height in px: the number of columns whose
    picture needs the least shrinking to fit SCREEN (the fewer columns on a tie)."""
    best: tuple[float, list[list[int]], int, int] | None = None
    for k in range(1, min(len(panels), 6) + 1):
        cols = _columns([p.height for p in panels], k)
        width = k * COL_PX
        height = TOP_PX + BOTTOM_PX + max(sum(panels[i].height for i in c) for c in cols)
        scale = max(width / SCREEN[0], height / SCREEN[1])
        if best is None or scale < best[0] - 1e-9:
            best = (scale, cols, width, height)
    assert best is not None
    return best[1], best[2], best[3]


def _limits(panels: Sequence[Panel]) -> tuple[float, float]:
    """One x range for every panel: the values and thresholds with room for the value's text,
    at most 1e-3 to 1e4 (bars beyond are cut at the edge, their text says the value)."""
    xs = [x for p in panels for b in p.bars for x in (b.value, b.threshold) if x]
    lo = max(min([0.5, *xs]), 1e-3)
    hi = min(max([2.0, *xs]), 1e4)
    return lo / 1.5, hi * 4


def _draw_panel(ax: Axes, panel: Panel, xlim: tuple[float, float]) -> None:
    ax.set_xscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(max(1, len(panel.bars)) - 0.5, -0.5)  # first row on top
    ax.axvline(1.0, color="black", linewidth=0.6)
    ax.grid(axis="x", which="major", color="#e4e4e4", linewidth=0.5)
    ax.set_axisbelow(True)
    ax.tick_params(axis="both", labelsize=FONT - 1, length=2, pad=1)
    ax.set_title(
        panel.title(),
        loc="left",
        fontsize=FONT + 1,
        fontweight="bold",
        color=MISSED if panel.bad else "black",
        x=-(LABEL_PX - 6) / (COL_PX - LABEL_PX - RIGHT_PX),
        pad=3,
    )
    if not panel.bars:
        ax.set_yticks([])
        ax.text(1.0, 0, "  no ratio or goal to draw", fontsize=FONT, va="center", ha="left")
        return
    lo, hi = xlim
    for y, b in enumerate(panel.bars):
        end = min(max(b.value, lo * 1.2), hi / 3)  # cut at the edge, room for the text
        ax.barh(y, end - 1.0, left=1.0, height=0.7, color=b.colour)
        # the number right of the bar, or right of 1 where the bar goes left
        ax.text(
            max(end, 1.0), y, f" {b.value:.3g}×", fontsize=FONT - 1.5, va="center", color="#333333"
        )
        if b.threshold:
            ax.plot([b.threshold], [y], marker="|", markersize=9, color="black", mew=1.2)
    ax.set_yticks(range(len(panel.bars)), [b.label for b in panel.bars], fontsize=FONT)
    for tick, b in zip(ax.get_yticklabels(), panel.bars):
        if b.row.goal_met is False:
            tick.set_color(MISSED)


def _draw_header(fig: Figure, title: str, width: int, height: int) -> None:
    """The title, what a bar is, and the colours' legend, on three lines at the top left."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.text(8 / width, 1 - 6 / height, title, fontsize=FONT + 4, fontweight="bold", va="top")
    fig.text(
        8 / width,
        1 - 26 / height,
        "bar: ratio to the peer (> 1: mpsrt ahead), or the value against its goal (> 1: met); "
        "log scale, the same in every panel",
        fontsize=FONT + 1,
        va="top",
    )
    handles = [
        Patch(color=MET, label="goal met"),
        Patch(color=MISSED, label="goal missed (label red too)"),
        Patch(color=NEUTRAL, label="no goal, or not judged on this backend"),
        Line2D(
            [],
            [],
            marker="|",
            linestyle="",
            color="black",
            markersize=9,
            mew=1.2,
            label="the goal's threshold",
        ),
    ]
    fig.legend(
        handles=handles,
        loc="upper left",
        ncol=4,
        fontsize=FONT + 1,
        frameon=False,
        borderaxespad=0,
        handlelength=1.5,
        bbox_to_anchor=(4 / width, 1 - 42 / height),
    )


def plot(rows: Sequence[Row], path: str, title: str = "python -m bench") -> Figure:
    """Draws `rows` into `path` (see the module's docstring) and returns the figure: one
    axes per panel, each labelled "AREA/BACKEND" (ax.get_label())."""
    check_path(path)
    from matplotlib.figure import Figure

    panels = _panels(rows)
    if not panels:
        raise ValueError("--plot: no rows to draw")
    _fit_labels(panels)
    cols, width, height = _layout(panels)
    xlim = _limits(panels)
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    for c, column in enumerate(cols):
        top = TOP_PX
        for i in column:
            p = panels[i]
            box_h = ROW_PX * max(1, len(p.bars))
            left = c * COL_PX + LABEL_PX
            bottom = height - (top + HEAD_PX + box_h)
            ax = fig.add_axes(
                (
                    left / width,
                    bottom / height,
                    (COL_PX - LABEL_PX - RIGHT_PX) / width,
                    box_h / height,
                ),
                label=f"{p.area}/{p.backend}",
            )
            _draw_panel(ax, p, xlim)
            top += p.height
    _draw_header(fig, title, width, height)
    fig.savefig(path, dpi=DPI)
    return fig
