"""The `slabench` command itself: what `--help` tells a user, and `--version` for bug reports and CI logs."""

import subprocess
import sys

from slabench import __version__


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slabench", *args], capture_output=True, text=True, timeout=60)


def test_version_prints_the_version_and_exits_0():
    p = run("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"slabench {__version__}"


def test_help_describes_the_tool_to_a_user():
    p = run("--help")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "Load testing and SLA grading for OpenAI-compatible LLM endpoints" in text
    assert "exit 0 PASS, 1 CONDITIONAL, 2 FAIL" in text
    assert "registers itself" not in text and "add_parser" not in text  # never the developer's module comment
