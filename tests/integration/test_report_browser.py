"""The M2 flow's HTML report opened in headless Chromium: plots render, no console errors.

Chromium is Debian's ``chromium`` package (``scripts/ci-services.sh`` installs it). Without it the
test fails when ``CI`` is set and is skipped otherwise. The M2 run is a real flow run against the
sim engine, the shape of ``alflow demo``'s M2 run (synthetic AL, random prompts, a concurrency
sweep); the flow writes ``report.html`` itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from alflow.config import (
    BenchmarkParams,
    ModelSpec,
    RandomWorkload,
    SamplingParams,
    ServerPlacement,
    server_config,
)
from alflow.results.store import open_run
from alflow_flows.benchmark import benchmark
from tests import browser
from tests.browser import HEADLESS, chromium_binary, decode_png

pytestmark = pytest.mark.services

PLOT_BLUE = (0x1F, 0x77, 0xB4)  # first palette colour: every chart's first series
PLOT_RED = (0xD6, 0x27, 0x28)  # second palette colour: the latency charts' p90 curves
CONSOLE = re.compile(r"CONSOLE[:(]|Uncaught|Failed to load resource", re.I)


def _near(pixel: tuple[int, int, int], colour: tuple[int, int, int], tol: int = 40) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(pixel, colour, strict=True))


def screenshot(html: Path, out: Path, profile: Path, *, size: str = "1280,4200") -> str:
    """Open ``html`` in headless Chromium, save a PNG screenshot, return Chromium's stderr."""
    args = [
        chromium_binary("the HTML report test"),
        *HEADLESS,
        "--disable-quic",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        f"--window-size={size}",
        f"--screenshot={out}",
        html.resolve().as_uri(),
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    assert out.exists(), f"chromium wrote no screenshot: {proc.stderr[-2000:]}"
    return proc.stderr


def _check_page(html: Path, tmp_path: Path, size: str = "1280,4200") -> None:
    stderr = screenshot(html, tmp_path / "shot.png", tmp_path / "chromium-profile", size=size)
    console = [line for line in stderr.splitlines() if CONSOLE.search(line)]
    assert not console, "console errors in the report page:\n" + "\n".join(console)
    width, height, pixels = decode_png((tmp_path / "shot.png").read_bytes())
    assert width > 0
    assert height > 0
    colours = set(pixels)
    assert len(colours) > 50, f"the screenshot is blank ({len(colours)} colour(s))"
    blue = sum(1 for p in pixels if _near(p, PLOT_BLUE))
    red = sum(1 for p in pixels if _near(p, PLOT_RED))
    assert blue > 500, f"no plotted series in the screenshot ({blue} pixels of the first series colour)"
    assert red > 200, f"the latency charts' curves are missing ({red} pixels of the second series colour)"


def test_the_pixel_checks_fail_on_a_blank_page(tmp_path: Path) -> None:
    chromium_binary("the HTML report test")
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    with pytest.raises(AssertionError, match="blank"):
        _check_page(blank, tmp_path, size="640,400")


@pytest.mark.usefixtures("prefect_harness")
def test_m2_html_report_renders_its_plots_in_chromium_without_console_errors(tmp_path: Path) -> None:
    model = ModelSpec(
        id="demo-llama-70b", sampling_thinking_off=SamplingParams(temperature=0.0, max_tokens=256)
    )
    params = BenchmarkParams(
        model=model,
        k=3,
        server=server_config(
            framework="sim", model=model.id, extra_args=("--time-scale", "0", "--seed", "7")
        ),
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        target_al=3.3,
        workload=RandomWorkload(isl=256, osl=64),
        concurrencies=(4, 8, 16),
    )
    out = benchmark(params=params)
    run = open_run(out.run_dir)
    assert run.complete
    assert run.has("report.html"), "the M2 flow did not write report.html"
    html = Path(out.run_dir) / "report.html"
    page = html.read_text()
    assert page.count("<svg") >= 6  # frontier, 4 latency charts, audit
    assert "SIMULATED DATA" in page
    chromium_binary(
        "the HTML report test"
    )  # the flow's report.html is checked above even where chromium is missing
    _check_page(html, tmp_path)


def test_missing_chromium_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="chromium is missing"):
        chromium_binary("the HTML report test")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="chromium is missing"):
        chromium_binary("the HTML report test")
