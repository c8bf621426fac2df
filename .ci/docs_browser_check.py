"""Opens the built documentation site in a real browser (.ci/run, step "docs: browser check").

    python .ci/docs_browser_check.py SITE_DIR [--out DIR]

Serves SITE_DIR over HTTP on 127.0.0.1 (http.server in a thread) and opens three pages in
headless Chromium, driven by Selenium through chromedriver:

- the landing page (index.html): its title is the project's ("mpsrt <version>", the version
  read from the site's documentation_options.js) and its first heading is shown;
- one API page (api/mpsrt.html): it documents `mpsrt.empty_cache` (the entry's anchor is there
  and shown);
- the search page with a query (search.html?q=Buffer): once the search has finished, at least
  one result, and every result links to a page of the site (same origin, a file in SITE_DIR).

For each page: a screenshot (OUT/<name>.png) that must not be blank (enough distinct colours and
pixel variance, measured with Pillow) and no console errors (the browser log's SEVERE entries:
uncaught exceptions, failed loads, CSP violations). Exits 1 with every failure listed.

Why Selenium with Debian's `chromium` and `chromium-driver`: both browser and driver come from
the distribution, matched in version, so nothing is downloaded at run time (the driver's path is
given, which keeps Selenium Manager out of it); Selenium is the browser project's own, well-kept
client, and its browser log gives the console's SEVERE entries directly. Needs
`apt-get install chromium chromium-driver` and `pip install selenium` (Pillow comes with
matplotlib, from the docs environment).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WINDOW = (1280, 900)
PROJECT = "mpsrt"
API_ENTRY = "mpsrt.empty_cache"
SEARCH_QUERY = "Buffer"
# A screenshot with fewer distinct colours or less spread than this is taken for blank (a page
# of plain text in furo has hundreds of colours from its anti-aliased glyphs).
MIN_COLOURS = 32
MIN_STDDEV = 8.0


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        # The browser asks for /favicon.ico, which a Sphinx site need not have: no icon is not
        # a console error of the site's.
        if code == 404 and self.path.split("?")[0] == "/favicon.ico":
            self.send_response(204)
            self.end_headers()
            return
        super().send_error(code, message, explain)


def serve(site: Path) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_browser(profile_dir: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox does not start
        "--disable-dev-shm-usage",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile_dir}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def blank_reasons(png: Path) -> list[str]:
    from PIL import Image, ImageStat

    with Image.open(png) as im:
        rgb = im.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 24) or []
        stddev = max(ImageStat.Stat(rgb).stddev)
        size = rgb.size
    reasons = []
    if len(colours) < MIN_COLOURS:
        reasons.append(f"only {len(colours)} distinct colours (< {MIN_COLOURS})")
    if stddev < MIN_STDDEV:
        reasons.append(f"pixel standard deviation {stddev:.1f} (< {MIN_STDDEV})")
    if reasons:
        return [f"the screenshot looks blank ({size[0]}x{size[1]}: " + ", ".join(reasons) + ")"]
    return []


def wait_for(driver: Any, what: str, condition: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def page_ready(driver: Any) -> bool:
    return driver.execute_script(
        "return document.readyState === 'complete' && document.fonts.status === 'loaded'"
    )


def site_version(site: Path) -> str:
    text = (site / "_static" / "documentation_options.js").read_text(encoding="utf-8")
    m = re.search(r"VERSION:\s*'([^']*)'", text)
    return m.group(1) if m else ""


def check_landing(driver: Any, site: Path, base: str) -> list[str]:
    errors = []
    title = driver.title
    want = f"{PROJECT} {site_version(site)}".strip()
    if title != want:
        errors.append(f"the page title is {title!r}, expected {want!r}")
    h1 = driver.execute_script(
        "const h = document.querySelector('article h1, main h1, h1');"
        "return h && h.offsetParent !== null ? h.innerText : null;"
    )
    if not h1 or PROJECT not in h1:
        errors.append(f"no visible first heading naming {PROJECT!r} (found {h1!r})")
    return errors


def check_api(driver: Any, site: Path, base: str) -> list[str]:
    shown = driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "return e === null ? null : e.offsetParent !== null && e.innerText.length > 0;",
        API_ENTRY,
    )
    if shown is None:
        return [f"no entry with the anchor #{API_ENTRY}"]
    if not shown:
        return [f"the entry #{API_ENTRY} is there but not shown"]
    return []


def wait_search(driver: Any) -> None:
    wait_for(
        driver,
        "the search to finish (#search-results .search-summary)",
        lambda: driver.execute_script(
            "const s = document.querySelector('#search-results .search-summary');"
            "return s !== null && s.innerText.length > 0;"
        ),
    )


def check_search(driver: Any, site: Path, base: str) -> list[str]:
    summary, hrefs = driver.execute_script(
        "const s = document.querySelector('#search-results .search-summary');"
        "const links = document.querySelectorAll('#search-results ul.search li a');"
        "return [s.innerText, Array.from(links, a => a.href)];"
    )
    if not hrefs:
        return [f"the search for {SEARCH_QUERY!r} found nothing ({summary!r})"]
    errors = []
    for href in hrefs:
        url = urllib.parse.urlsplit(href)
        if f"{url.scheme}://{url.netloc}" != base:
            errors.append(f"a result links outside the site: {href}")
            continue
        path = site / urllib.parse.unquote(url.path).lstrip("/")
        if not path.is_file():
            errors.append(f"a result links to a page the site does not have: {href}")
    return errors


@dataclass
class Page:
    name: str
    path: str
    check: Callable[[Any, Path, str], list[str]]
    wait: Callable[[Any], None] | None = None


PAGES = [
    Page("landing", "index.html", check_landing),
    Page("api", "api/mpsrt.html", check_api),
    Page("search", f"search.html?q={SEARCH_QUERY}", check_search, wait_search),
]


def console_errors(driver: Any) -> list[str]:
    return [
        f"console: {e.get('source', '?')}: {e['message']}"
        for e in driver.get_log("browser")
        if e.get("level") == "SEVERE"
    ]


def run(site: Path, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    server = serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    failures: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="docs-browser-") as profile:
            t0 = time.monotonic()
            driver = start_browser(profile)
            print(f"browser started in {time.monotonic() - t0:.1f} s")
            try:
                driver.get_log("browser")  # drop what the start logged
                for page in PAGES:
                    t = time.monotonic()
                    errors: list[str] = []
                    try:
                        driver.get(f"{base}/{page.path}")
                        wait_for(driver, "the page to load", lambda: page_ready(driver))
                        if page.wait is not None:
                            page.wait(driver)
                        png = out / f"{page.name}.png"
                        driver.save_screenshot(str(png))
                        errors += blank_reasons(png)
                        errors += page.check(driver, site, base)
                    except Exception as e:  # a timeout or a driver error fails this page
                        errors.append(f"{type(e).__name__}: {e}".strip())
                    errors += console_errors(driver)
                    status = "ok" if not errors else "FAILED"
                    print(f"{page.path}: {status} ({time.monotonic() - t:.1f} s)")
                    failures += [f"{page.path}: {e}" for e in errors]
            finally:
                driver.quit()
    finally:
        server.shutdown()
        server.server_close()
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (e.g. build/docs)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build/docs-browser-check"),
        help="where the screenshots go (default: build/docs-browser-check)",
    )
    args = parser.parse_args()

    missing = []
    if not (args.site / "index.html").is_file():
        missing.append(f"{args.site}/index.html does not exist: build the site first")
    for exe, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(exe, os.X_OK):
            missing.append(f"{exe} is missing: apt-get install {package}")
    try:
        import PIL  # noqa: F401
        import selenium  # noqa: F401
    except ImportError as e:
        missing.append(f"{e.name} is missing: pip install {e.name.replace('PIL', 'pillow')}")
    if missing:
        print("docs browser check: cannot run:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1

    t0 = time.monotonic()
    failures = run(args.site.resolve(), args.out)
    elapsed = time.monotonic() - t0
    if failures:
        print(
            f"docs browser check FAILED ({elapsed:.1f} s; screenshots in {args.out}):\n  "
            + "\n  ".join(failures),
            file=sys.stderr,
        )
        return 1
    print(
        f"docs browser check passed: {len(PAGES)} pages in {elapsed:.1f} s, screenshots in "
        f"{args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
