"""The report as a browser draws it: a headless Chromium (Debian's ``chromium`` package) saves a screenshot of
``report.html`` beside it (``report.png``), and says whether every picture on the page loaded.

``python -m components.evaluate --screenshot`` takes it (a few seconds: two browser runs), so that the evaluation
output holds a picture of the report for places that show no HTML (a chat message, an email); without a browser
(``find_browser``) it says so and goes on. The I/O (running the browser) is apart from the decisions (``drawn``,
``page_check_script``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile

from components.artifacts.evaluation import SCREENSHOT_FILE

log = logging.getLogger(__name__)

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH = 1200
MAX_HEIGHT = 16000  # a report with a long misclassified grid is cut here rather than made a 100-MB picture
TIMEOUT_SECONDS = 120


def find_browser(env: dict | None = None) -> str | None:
    """The headless browser to draw with: ``TPU_PIPELINE_BROWSER`` (empty: none), else the first of ``BROWSERS`` on
    the PATH; None when there is none."""
    env = os.environ if env is None else env
    if "TPU_PIPELINE_BROWSER" in env:
        return env["TPU_PIPELINE_BROWSER"] or None
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def page_check_script() -> str:
    """A script that, once the page has loaded, writes what it drew into the page: pictures and how many loaded
    (complete, with a width), inline drawings, and the page's height."""
    return (
        "<script>window.addEventListener('load', () => {"
        "const images = Array.from(document.images);"
        "const check = {images: images.length,"
        " loaded: images.filter(i => i.complete && i.naturalWidth > 0).length,"
        " broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),"
        " svgs: document.querySelectorAll('svg').length, height: document.documentElement.scrollHeight};"
        "const out = document.createElement('pre'); out.id = 'page-check'; out.textContent = JSON.stringify(check);"
        "document.body.appendChild(out);});</script>"
    )


def run_browser(browser: str, *args: str) -> subprocess.CompletedProcess:
    """Runs the headless browser (no sandbox: containers and root have none to give it; the page is our own)."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--mute-audio",
        "--no-first-run",
        "--disable-dev-shm-usage",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False)


def check_page(report_html: str, browser: str) -> dict:
    """Loads a copy of ``report_html`` with ``page_check_script`` in the browser; returns what it drew."""
    with open(report_html, encoding="utf-8") as handle:
        page = handle.read()
    with tempfile.TemporaryDirectory(prefix="report-check-") as scratch:
        copy = os.path.join(scratch, "report.html")
        with open(copy, "w", encoding="utf-8") as handle:
            handle.write(page.replace("</body>", page_check_script() + "</body>", 1))
        done = run_browser(browser, "--virtual-time-budget=10000", "--dump-dom", f"file://{copy}")
    found = re.search(r'<pre id="page-check">(.*?)</pre>', done.stdout, re.S)
    if not found:
        raise RuntimeError(f"{browser} drew no page from {report_html}: {done.stderr.strip()[-300:]}")
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def drawn(png: bytes) -> dict:
    """Whether a screenshot shows a drawn page rather than a blank one: its size, the share of pixels that are not
    the background (the top-left corner's colour) and the number of colours."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    background = pixels[0, 0]
    ink = float((pixels != background).any(axis=-1).mean())
    colours = len(np.unique(pixels.reshape(-1, 3)[:: max(1, pixels.shape[0] * pixels.shape[1] // 200_000)], axis=0))
    return {
        "width": int(pixels.shape[1]),
        "height": int(pixels.shape[0]),
        "ink": ink,
        "colours": colours,
        "blank": ink < 0.01 or colours < 8,
    }


def screenshot_report(report_html: str, browser: str | None = None) -> dict | None:
    """Saves ``report.png`` beside ``report_html``, the whole page's height, as ``browser`` draws it; returns the
    page check and the picture's figures (None, and a log line, without a browser). A page that draws blank or with
    a picture that did not load is logged as a warning: the report is kept, the screenshot shows what is wrong."""
    browser = browser or find_browser()
    if browser is None:
        log.info("no headless browser (apt-get install chromium): %s not drawn", SCREENSHOT_FILE)
        return None
    check = check_page(report_html, browser)
    height = min(MAX_HEIGHT, max(400, int(check.get("height") or 0) + 16))
    path = os.path.join(os.path.dirname(report_html), SCREENSHOT_FILE)
    with tempfile.TemporaryDirectory(prefix="report-shot-") as scratch:
        shot = os.path.join(scratch, SCREENSHOT_FILE)
        done = run_browser(browser, f"--window-size={WIDTH},{height}", f"--screenshot={shot}", f"file://{report_html}")
        if not os.path.isfile(shot):
            raise RuntimeError(f"{browser} saved no screenshot of {report_html}: {done.stderr.strip()[-300:]}")
        with open(shot, "rb") as handle:
            png = handle.read()
    from components.storage import write_atomically

    write_atomically(path, png)
    result = {**check, **drawn(png), "path": path}
    if result["blank"] or check["loaded"] < check["images"]:
        log.warning("the report draws %s: %s", "blank" if result["blank"] else "broken pictures", result)
    else:
        log.info("drew %s (%dx%d, %d pictures loaded)", path, result["width"], result["height"], check["loaded"])
    return result


def draw_report(report_html: str) -> dict | None:
    """``report.png`` beside the report, as a headless browser draws it, when one is installed; what it drew (None
    without a browser). A browser that fails is a warning: the report itself is written."""
    import subprocess

    try:
        drawn = screenshot_report(report_html)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
        log.warning("the report could not be drawn: %s", err)
        return None
    return drawn and {key: drawn[key] for key in ("path", "images", "loaded", "svgs", "blank")}
