"""report.html as a person sees it: rendered by headless Chromium (Debian `chromium`) to a PNG, which must show the
plots (their colours) and the tables — with no network access (the page is self-contained)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from matplotlib.image import imread

from slabench.analysis.aggregate import aggregate
from slabench.analysis.report import write_report
from tests.helpers.analysis_helpers import rec, write_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)"
)
TAB_BLUE = np.array([31, 119, 180]) / 255  # matplotlib's first colour: the TTFT p95 series
TAB_PURPLE = np.array([148, 103, 189]) / 255  # the throughput series
HEADER_GREY = np.array([0xF2, 0xF2, 0xF5]) / 255  # table header background (analysis/report.py CSS)


def screenshot(html_path, png_path, tmp_path, height=4000):
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        f"--window-size=1280,{height}",
        f"--screenshot={png_path}",
        html_path.as_uri(),
    ]
    subprocess.run(argv, capture_output=True, timeout=120, check=True)
    return imread(png_path)[..., :3]


def _near(img, colour, tol=0.03):
    return (np.abs(img - colour) < tol).all(axis=-1)


def test_report_renders_with_plots_and_tables(tmp_path):
    rng = np.random.default_rng(3)
    for level, base in ((1, 0.1), (4, 0.12), (16, 0.5)):
        for repeat in (1, 2, 3):
            recs = [rec(i * 0.05 / level, ttft=base * rng.uniform(0.9, 1.1), gaps=(0.01,) * 5) for i in range(60)]
            write_run(tmp_path / "s", level, repeat, recs)
    paths = write_report(aggregate(tmp_path / "s"), tmp_path / "report")
    img = screenshot(paths["html"], tmp_path / "shot.png", tmp_path)
    assert img.shape[1] == 1280
    assert _near(img, TAB_BLUE).sum() > 300  # the TTFT p95 line, markers and error bars are drawn
    assert _near(img, TAB_PURPLE).sum() > 300  # the throughput plot
    assert _near(img, HEADER_GREY, tol=0.01).sum() > 10_000  # table header rows are there
    white = _near(img, np.ones(3), tol=0.02).mean()
    assert 0.3 < white < 0.98  # a page with content, not blank and not an error screen
