"""The core works without the optional extras (pyproject.toml: report, platform, weights, tokenizer, pandas), and a part
that needs a missing one says which `pip install` brings it, in one line with exit 3, never a traceback.

Each command runs in its own interpreter with the extras' packages made unimportable (a finder first on
`sys.meta_path` raises ModuleNotFoundError for them, as `import` does for a package that is not installed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.analysis_helpers import rec, write_run
from tests.integration.test_plan_cli import files

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("matplotlib", "kubernetes", "pyhelm3", "boto3", "botocore", "tokenizers", "pandas")
# A finder that says "not installed" for the extras' packages, as an interpreter without them does (a None in
# sys.modules is not the same: pyarrow's pandas shim reads it as a broken pandas and fails).
BLOCK = (
    "import sys\n"
    "class _Absent:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {EXTRAS!r}:\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, _Absent())\n"
)


def without_extras(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code, *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def slabench(*args: str) -> subprocess.CompletedProcess:
    return without_extras("from slabench.commands.cli import main; sys.exit(main())", *args)


def test_every_module_but_the_plots_imports_without_the_extras():
    r = without_extras(
        "import importlib, pkgutil, slabench\n"
        "failed = []\n"
        "for m in pkgutil.walk_packages(slabench.__path__, 'slabench.'):\n"
        "    if m.name == 'slabench.__main__':\n"
        "        continue  # runs the CLI\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ImportError as e:\n"
        "        failed.append((m.name, e.name))\n"
        "print(sorted(failed))\n"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(
        [("slabench.analysis.plots", "matplotlib"), ("slabench.workload.plots", "matplotlib")]
    )


def test_aggregate_without_matplotlib_writes_the_report_without_plots(tmp_path):
    for repeat in (1, 2):
        write_run(tmp_path / "s", 1, repeat, [rec(float(i), ttft=0.1 + 0.01 * repeat) for i in range(5)])
    r = slabench("aggregate", str(tmp_path / "s"), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "No plots: matplotlib is not installed (pip install &#x27;slabench[report]&#x27;)" in html
    assert "<img" not in html and list((tmp_path / "rep" / "plots").glob("*.png")) == []
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())["levels"][0]["level"] == 1


def test_plan_without_matplotlib_writes_plan_json_and_says_why_there_is_no_plot(tmp_path):
    gpu, model, sla, queue = files(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    out = tmp_path / "plan"
    r = slabench("plan", "--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue, "--price", "toy1=2",
                 "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "no plan.png: matplotlib is not installed (pip install 'slabench[report]')" in r.stdout
    assert json.loads((out / "plan.json").read_text())["profiles"][0]["replicas"] == 4
    assert not (out / "plan.png").exists()


PLATFORM, REPORT, WEIGHTS = ("pip install 'slabench[platform]'", "pip install 'slabench[report]'",
                             "pip install 'slabench[weights]'")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fleet", "check", "--from-cluster", "--kubeconfig", "{tmp}/kubeconfig"],
         f"reading the cluster needs kubernetes, which is not installed: {PLATFORM}"),
        (["deploy", "--dry-run", "--sla", "sla/config_sla_example.yaml"],
         f"running helm needs pyhelm3, which is not installed: {PLATFORM}"),
        (["results", "upload", "{tmp}/run", "s3://bucket/run/"], f"S3 needs boto3, which is not installed: {WEIGHTS}"),
        (["dataset", "stats", "--plot", "{tmp}/stats.png"],
         f"--plot needs matplotlib, which is not installed: {REPORT}"),
    ],
)  # fmt: skip
def test_a_part_whose_extra_is_missing_names_the_install_command(tmp_path, args, message):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.html").write_text("<html></html>")
    r = slabench(*[a.format(tmp=tmp_path) for a in args])
    assert (r.returncode, r.stdout) == (3, ""), r.stderr
    assert r.stderr.strip().endswith(message) and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_records_frame_without_pandas_names_the_extra(tmp_path):
    write_run(tmp_path / "s", 1, 1, [rec(float(i)) for i in range(3)])
    r = without_extras(
        "from slabench.analysis.frame import records_frame\n"
        "from slabench.core.errors import UserError\n"
        "try:\n"
        "    records_frame(sys.argv[1])\n"
        "except UserError as e:\n"
        "    print(e)\n",
        str(tmp_path / "s" / "1" / "1" / "records.jsonl"),
    )
    assert r.returncode == 0, r.stderr
    assert "needs pandas, which is not installed: pip install 'slabench[pandas]'" in r.stdout
