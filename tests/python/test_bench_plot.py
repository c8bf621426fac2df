"""python -m bench --plot (bench/plot.py): a panel per area and backend that fits a screen,
misses red, met goals green, rows without a goal grey, goal thresholds marked; a bad path or a
missing matplotlib is a clear error before the run."""

from __future__ import annotations

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def bench_plot(monkeypatch: pytest.MonkeyPatch, backend: str):
    """bench.plot from the repository; the drawing does not depend on the backend, so it is
    checked once, on the run's first backend."""
    from conftest import AVAILABLE, BACKENDS

    if backend != next(b for b in BACKENDS if b in AVAILABLE):
        pytest.skip("the plot is backend-independent: checked on the first backend")
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import plot

    return plot


def _rows():
    """Two backends, three areas: met, missed, not judged and no-goal rows, a row against its
    own goal (no peer), one that cannot be drawn and an area that did not finish."""
    from bench.timing import Row

    rows = []
    for backend in ("cpu", "vulkan"):
        judged = backend == "cpu"
        memory = [
            Row("memory", "empty(64 B) + release", 100.0, "ns", "numpy.empty", 80.0),
            Row(
                "memory",
                "empty(1 MiB) + release",
                100.0,
                "ns",
                "torch.empty",
                400.0,
                goal="<= 0.25x torch.empty",
                goal_met=True if judged else None,
            ),
            Row(
                "memory",
                "C++ alloc+free 1 MiB, cache miss (new heap each time)",
                90.0,
                "ns",
                "posix_memalign+free",
                50.0,
                goal="<= 1.0x posix_memalign",
                goal_met=False if judged else None,
            ),
            Row(
                "memory",
                "256 MiB again + fill: page faults",
                0.0,
                "faults",
                goal="0 faults",
                goal_met=True if judged else None,
            ),
        ]
        rand = [
            Row(
                "random",
                "uniform float32 16 MB, 1 thread",
                24.0,
                "GB/s",
                "numpy random",
                3.0,
                goal=">= 3.5x numpy",
                goal_met=True,
            ),
            Row(
                "random",
                "uniform float32 16 MB, 1 thread",
                24.0,
                "GB/s",
                "C memset",
                130.0,
                goal=">= 0.8x C memset",
                goal_met=False,
            ),
            Row("random", "hot, median", 7.2, "µs", goal="<= 1 µs", goal_met=False),
        ]
        torch_rows = [Row("torch", "torch: not finished", None, "", note="stopped after 60 s")]
        for r in memory + rand + torch_rows:
            r.backend = backend
        rows += memory + rand + torch_rows
    return rows


def _bars(ax):
    """(y, colour, drawn ratio) of each bar of a panel, top to bottom (bars start at 1)."""
    from matplotlib.colors import to_hex

    out = []
    for p in ax.patches:
        y = p.get_y() + p.get_height() / 2
        out.append((round(y), to_hex(p.get_facecolor()), p.get_x() + p.get_width()))
    return sorted(out)


def test_a_panel_per_area_and_backend_that_fits_a_screen(bench_plot, tmp_path) -> None:
    image = pytest.importorskip("matplotlib.image")
    path = tmp_path / "bench.png"
    fig = bench_plot.plot(_rows(), str(path), "test")
    assert [ax.get_label() for ax in fig.axes] == [
        "memory/cpu",
        "memory/vulkan",
        "random/cpu",
        "random/vulkan",
        "torch/cpu",
        "torch/vulkan",
    ]
    height, width = image.imread(str(path)).shape[:2]
    assert (width, height) == tuple(round(x) for x in fig.get_size_inches() * fig.dpi)
    assert width <= 1920 and height <= 1080, (width, height)
    titles = {ax.get_label(): ax.get_title("left") for ax in fig.axes}
    assert titles["memory/cpu"].startswith("memory · cpu — 1 of 3 goals missed — 1 row not drawn")
    assert titles["memory/vulkan"] == "memory · vulkan — 1 row not drawn (see the table)"
    assert titles["torch/cpu"] == "torch · cpu — NOT FINISHED"


def test_misses_are_red_met_goals_green_the_rest_grey(bench_plot, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    fig = bench_plot.plot(_rows(), str(tmp_path / "bench.png"))
    panels = {ax.get_label(): ax for ax in fig.axes}
    red, green, grey = bench_plot.MISSED, bench_plot.MET, bench_plot.NEUTRAL
    # bars from 1: peer/value for times (80/100, 400/100, 50/90), value/peer for GB/s
    memory = _bars(panels["memory/cpu"])
    assert [c for _, c, _ in memory] == [grey, green, red]
    assert [round(x, 3) for _, _, x in memory] == [0.8, 4.0, 0.556]
    assert [c for _, c, _ in _bars(panels["memory/vulkan"])] == [grey] * 3  # goals not judged
    rand = _bars(panels["random/cpu"])
    assert [c for _, c, _ in rand] == [green, red, red]
    assert round(rand[2][2], 3) == round(1 / 7.2, 3)  # "<= 1 µs": its goal over its value
    ticks = [t.get_text() for t in panels["random/cpu"].get_yticklabels()]
    assert ticks == [
        "uniform f32 16 MB, 1 thr vs numpy random",
        "uniform f32 16 MB, 1 thr vs C memset",
        "hot, median vs goal ≤ 1 µs",
    ]
    colours = [t.get_color() for t in panels["random/cpu"].get_yticklabels()]
    assert colours[0] != red and colours[1:] == [red, red]
    assert len(panels["torch/cpu"].patches) == 0


def test_goal_thresholds_are_marked_on_the_ratio_axis(bench_plot, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    fig = bench_plot.plot(_rows(), str(tmp_path / "bench.png"))
    panels = {ax.get_label(): ax for ax in fig.axes}

    def marks(ax):
        return sorted(
            (round(float(ln.get_ydata()[0])), round(float(ln.get_xdata()[0]), 3))
            for ln in ax.lines
            if ln.get_marker() == "|"
        )

    # "<= 0.25x torch.empty" on a time: peer/value >= 4; "<= 1.0x": >= 1
    assert marks(panels["memory/cpu"]) == [(1, 4.0), (2, 1.0)]
    # ">= 3.5x numpy", ">= 0.8x C memset" on GB/s; "<= 1 µs" against the goal itself: 1
    assert marks(panels["random/cpu"]) == [(0, 3.5), (1, 0.8), (2, 1.0)]


def test_a_full_run_fits_with_labels_inside_their_column(bench_plot, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from bench.timing import Row

    rows = []  # ~250 rows: 8 areas of 6 to 30 rows on two backends, long names
    for backend in ("cpu", "vulkan"):
        for a, area in enumerate(
            ("memory", "fill_copy", "random", "dispatch", "streams", "binding", "profiler", "torch")
        ):
            for i in range(6 + (a * 7) % 25):
                name = f"case {i} of {area}, normal float32 fills of 512 KiB each, 2 threads"
                r = Row(
                    area,
                    name,
                    1.0 + i,
                    "ns",
                    "torch uniform_ (1 thread)",
                    2.0,
                    goal="<= 1.1x torch" if i % 3 == 0 else "",
                    goal_met=(i % 2 == 0),
                )
                r.backend = backend
                rows.append(r)
    assert len(rows) > 240
    fig = bench_plot.plot(rows, str(tmp_path / "bench.png"))
    assert len(fig.axes) == 16
    width, height = fig.get_size_inches() * fig.dpi
    assert width <= 1920 and height <= 1400, (width, height)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        left = ax.get_window_extent(renderer).x0 - bench_plot.LABEL_PX
        labels = ax.get_yticklabels()
        assert len({t.get_text() for t in labels}) == len(labels)  # cut, but still distinct
        for t in labels:
            assert t.get_window_extent(renderer).x0 >= left, t.get_text()


def test_a_bad_path_is_a_clear_error(bench_plot, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    rows = _rows()
    with pytest.raises(ValueError, match="does not exist"):
        bench_plot.plot(rows, str(tmp_path / "missing" / "bench.png"))
    with pytest.raises(ValueError, match=r"must end in an image format .*\.png"):
        bench_plot.plot(rows, str(tmp_path / "bench.txt"))
    with pytest.raises(ValueError, match="is a directory"):
        bench_plot.plot(rows, str(tmp_path))
    with pytest.raises(ValueError, match="no rows"):
        bench_plot.plot([], str(tmp_path / "bench.png"))


def test_the_runner_refuses_a_bad_path_before_it_runs(bench_plot, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    from bench.__main__ import main

    with pytest.raises(SystemExit) as e:
        main(["--only", "binding", "--plot", str(tmp_path / "missing" / "bench.png")])
    assert e.value.code == 2
    err = capsys.readouterr()
    assert "does not exist" in err.err and "####" not in err.out  # nothing ran


def test_without_matplotlib_the_message_says_what_to_install(
    bench_plot, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    with pytest.raises(ImportError, match="--plot needs matplotlib: pip install matplotlib"):
        bench_plot.check_path("bench.png")
