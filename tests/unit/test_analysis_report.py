"""The report files: self-contained HTML with every plot and table, Markdown, console table, low-sample flags."""

import base64
import io
import json
import re

import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console

from slabench.analysis.aggregate import aggregate
from slabench.analysis.report import LOW, across, console_table, print_console, write_report
from tests.helpers.analysis_helpers import rec, write_run


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    rng = np.random.default_rng(7)
    for level, base in ((1, 0.10), (2, 0.10), (4, 0.40)):
        for repeat in (1, 2, 3):
            n = 120 if level == 1 else 20  # level 1 has enough requests for a trusted p99, the others do not
            recs = [rec(i * 0.05 / level, ttft=base * rng.uniform(0.95, 1.05), gaps=(0.01,) * 4) for i in range(n)]
            write_run(root, level, repeat, recs)
    return aggregate(root, slo={"ttft_s": 0.2})


@pytest.fixture(scope="module")
def paths(summary, tmp_path_factory):
    """The report, written once for the module (rendering the plots is the slow part)."""
    return write_report(summary, tmp_path_factory.mktemp("out"))


def test_write_report_files(paths):
    for key in ("summary", "markdown", "html"):
        assert paths[key].stat().st_size > 0
    pngs = [p for k, p in paths.items() if k.startswith("plot:")]
    assert {p.name for p in pngs} == {
        "ttft_p95.png",
        "itl.png",
        "throughput.png",
        "throughput_latency.png",
        "errors.png",
    }
    for p in pngs:
        img = imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 500
        assert img[..., :3].std() > 0.05  # not a blank canvas
    assert json.loads(paths["summary"].read_text())["levels"][2]["level"] == 4


def test_html_is_self_contained_and_has_the_tables_and_plots(paths):
    html = paths["html"].read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)  # nothing fetched from anywhere
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 5
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    imread(io.BytesIO(base64.b64decode(images[0])))
    for title in ("Scaling cliff", "Per level, across repeats", "Per level, pooled", "All figures", "Runs", "Method"):
        assert f"<h2>{title}</h2>" in html
    assert html.count("<table>") >= 7


def test_markdown_labels_the_views_and_flags_thin_figures(paths):
    md = paths["markdown"].read_text()
    assert "## Per level, across repeats" in md and "## Per level, pooled" in md
    assert "![TTFT p95 vs load](plots/ttft_p95.png)" in md
    assert sum(line.startswith("| ttft_p99 (ms) |") for line in md.splitlines()) == 3  # all figures, per level
    section = md.split("## Per level, across repeats")[1].split("\n## ")[0]
    header, *rows = [
        [c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")
    ]
    col = header.index("TTFT p95 (ms)")
    cells = {row[0]: row[col] for row in rows}
    assert LOW not in cells["1"] and LOW in cells["4"]  # 120 vs 20 requests per run
    assert re.fullmatch(r"[\d.]+ ± [\d.]+ \[[\d.]+, [\d.]+\]", cells["1"])  # mean ± std [CI] on one line


def test_low_sample_dagger_follows_the_rule(summary):
    lv1, lv4 = summary.level(1).metrics, summary.level(4).metrics
    assert not lv1["ttft_p99"].low_samples  # 120 requests per run ≥ 100
    assert lv4["ttft_p99"].low_samples and lv4["ttft_p50"].low_samples  # 20 per run < 30
    assert across(lv4["ttft_p99"], "ms").split("\n")[0].endswith(LOW)
    assert not across(lv1["ttft_p99"], "ms").split("\n")[0].endswith(LOW)


def test_cliff_is_reported(summary, paths):
    # 0.10 s → 0.10 s → 0.40 s TTFT with tight intervals: a latency cliff between 2 and 4
    assert summary.cliff["status"] == "found" and summary.cliff["level"] == 4
    assert summary.cliff["latency"]["status"] == "found" and summary.cliff["latency"]["level"] == 4
    assert "cliff between 2 and 4 users" in paths["html"].read_text()


def test_console_table(summary):
    con = Console(record=True, width=200)
    con.print(console_table(summary))
    print_console(summary, con)
    text = con.export_text()
    assert "TTFT p95 (ms)" in text and "scaling cliff: found" in text
    assert re.search(r"\[\d+\.\d, \d+\.\d\]", text)  # intervals shown


def test_one_repeat_says_no_ci(tmp_path):
    write_run(tmp_path / "s", 1, 1, [rec(float(i)) for i in range(5)])
    s = aggregate(tmp_path / "s")
    assert "(n=1, no CI)" in across(s.level(1).metrics["ttft_p95"], "ms")
    md = write_report(s, tmp_path / "out")["markdown"].read_text()
    assert "n=1, no CI" in md


def test_the_console_summary_fits_an_80_column_ci_log(summary):
    buf = io.StringIO()
    print_console(summary, Console(file=buf, width=80))
    lines = buf.getvalue().splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("scaling cliff"))]
    assert max(len(line) for line in table) <= 80
    assert any("TTFT p95 (ms)" in line for line in table)  # a header kept whole, not one word a line


def test_a_sweep_where_nothing_was_answered_still_gets_its_report(tmp_path):
    from slabench.core.record import ErrorCategory, Outcome

    for level in (1, 2):
        for repeat in (1, 2):
            errors = [rec(0.5 * i, ttft=None, outcome=Outcome.ERROR, category=ErrorCategory.HTTP_5XX) for i in range(5)]
            write_run(tmp_path / "s", level, repeat, errors)
    summary = aggregate(tmp_path / "s")
    assert summary.level(1).metrics["throughput_rps"].mean == 0.0
    paths = write_report(summary, tmp_path / "out")  # the throughput plot has no scaling line to draw, no crash
    assert paths["html"].exists() and "http_5xx" in paths["markdown"].read_text()
