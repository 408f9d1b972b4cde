"""The results site in headless Chromium: index, filtered index, run page, comparison and trends with a regression.

The site runs as ``alflow results serve`` over a copy of the previous release's runs plus two later M2 runs (copies
with later dates and image tags); the latest carries a ``regression.json`` that judges its concurrency-8 point
``regressed``. Pixel checks as in ``test_report_browser.py``: pages are not blank, plots are drawn, the red regression
marker is on the trend page of the regressed line and absent from another line's page. No console error (a CSP
violation would be one) on any page. Chromium is Debian's ``chromium`` package: without it the test fails under
``CI`` and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alflow.results.catalog import read_entry
from tests.browser import HEADLESS, chromium_binary, decode_png
from tests.regression_reports import m2_report

pytestmark = pytest.mark.services

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "4f9de94"
M2 = "m2/20261205T060247Z-99135e4f5ce3"
M1 = "m1/20261205T060245Z-537765be2c4d"
LATER = ("m2/20261206T060000Z-1111aaaa2222", "m2/20261207T060000Z-3333bbbb4444")
REGRESSED_RED = (0xE8, 0x11, 0x2D)  # alflow.site.charts.REGRESSED
LINE_BLUE = (0x1F, 0x77, 0xB4)  # alflow.site.charts.LINE
CONSOLE = re.compile(r"CONSOLE[:(]|Uncaught|Failed to load resource|Refused to", re.I)


def _near(pixel: tuple[int, int, int], colour: tuple[int, int, int], tol: int = 30) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(pixel, colour, strict=True))


def _build_root(root: Path) -> None:
    shutil.copytree(FIXTURES, root)
    for n, rel in enumerate(LATER, start=1):
        run = root / rel
        shutil.copytree(root / M2, run)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest["started"] = f"2026-12-0{5 + n}T06:00:00+00:00"
        manifest["finished"] = (
            f"2026-12-0{5 + n}T06:20:00+00:00"  # a run ends after it starts (else: unreadable)
        )
        manifest["run_id"] = rel.rsplit("-", 1)[1]
        manifest["provenance"]["server"]["image"] = f"alflow-sim-base:nightly-{n}"
        (run / "manifest.json").write_text(json.dumps(manifest))
    # each point's series as the regression check writes it (framework, image, model, K, c, thinking, target)
    entry = read_entry(LATER[1], str(root / LATER[1]))
    keys = {key.concurrency: key for key, _ in entry.series()}
    assert (keys[8].framework, keys[8].image, keys[8].model) == ("sim", "alflow-sim-base", "demo-llama-70b")
    verdicts = [(keys[c], "regressed" if c == 8 else "unchanged") for c in (4, 8, 16)]
    (root / LATER[1] / "regression.json").write_text(json.dumps(m2_report(verdicts)))


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    chromium_binary("the results site browser test")
    tmp = tmp_path_factory.mktemp("site")
    _build_root(tmp / "results")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alflow.cli",
            "results",
            "serve",
            str(tmp / "results"),
            "--port",
            "0",
            "--no-cache",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp / "cache")},
    )
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        url = found.group(1) if found else None
        if not line and proc.poll() is not None:
            break
    try:
        assert url is not None, "the site did not start"
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def _chromium(
    url: str, tmp_path: Path, *mode: str, size: str = "1280,2400"
) -> subprocess.CompletedProcess[str]:
    args = [
        chromium_binary("the results site browser test"),
        *HEADLESS,
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={size}",
        *mode,
        url,
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if CONSOLE.search(line)]
    assert not console, f"console errors on {url}:\n" + "\n".join(console)
    return proc


def _pixels(url: str, tmp_path: Path) -> list[tuple[int, int, int]]:
    shot = tmp_path / "shot.png"
    shot.unlink(missing_ok=True)
    _chromium(url, tmp_path, f"--screenshot={shot}")
    width, height, pixels = decode_png(shot.read_bytes())
    assert width > 0
    assert height > 0
    assert len(set(pixels)) > 50, f"{url}: the screenshot is blank"
    return pixels


def _dom(url: str, tmp_path: Path) -> str:
    return _chromium(url, tmp_path, "--dump-dom").stdout


def test_the_index_and_a_filtered_index_render(site_url: str, tmp_path: Path) -> None:
    _pixels(f"{site_url}/", tmp_path)
    filtered = _dom(f"{site_url}/?flow=m2&sort=date&order=asc", tmp_path)
    rels = re.findall(r'name="run" value="([^"]+)"', filtered)
    assert rels == [M2, *LATER]
    assert 'class="regressed"' in filtered  # the verdict column of the judged run


def test_a_run_page_and_a_comparison_render_their_plots(site_url: str, tmp_path: Path) -> None:
    pixels = _pixels(f"{site_url}/runs/{M2}/", tmp_path)
    assert sum(1 for p in pixels if _near(p, LINE_BLUE)) > 500, "the run page's plots are missing"
    dom = _dom(f"{site_url}/compare?run={M2}&run={LATER[1]}", tmp_path)
    assert "Comparison of 2 runs" in dom


def test_the_trend_page_marks_the_regressed_point_in_red(site_url: str, tmp_path: Path) -> None:
    dom = _dom(f"{site_url}/trends?concurrency=8", tmp_path)
    assert dom.count('class="regressed"') >= 4  # one marker per chart of the line
    assert "regressed (regression.json)" in dom  # the legend
    marked = _pixels(f"{site_url}/trends?concurrency=8", tmp_path)
    red = sum(1 for p in marked if _near(p, REGRESSED_RED))
    blue = sum(1 for p in marked if _near(p, LINE_BLUE))
    assert red > 300, f"the regression markers are missing ({red} red pixels)"
    assert blue > 300, f"the trend lines are missing ({blue} blue pixels)"
    plain = _pixels(f"{site_url}/trends?concurrency=4", tmp_path)
    assert sum(1 for p in plain if _near(p, REGRESSED_RED)) == 0  # no regression on that line: no red
