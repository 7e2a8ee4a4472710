"""docs/eks.md is the runbook a person follows: it names the pinned versions and the scripts the tests exercise, and
points at nothing outside the repository."""

from __future__ import annotations

import re

from tests.helpers.platform_helpers import ROOT
from tests.unit.test_platform_upstream_values import pinned

RUNBOOK = ROOT / "docs" / "eks.md"


def test_the_runbook_names_the_same_pins_and_no_placeholder():
    text = RUNBOOK.read_text()
    assert "<pinned>" not in text
    for var, version in pinned().items():
        assert version in text, f"docs/eks.md does not mention {var}={version}"


def test_the_runbook_runs_the_tested_scripts_and_says_what_was_not_exercised():
    text = RUNBOOK.read_text()
    for path in ("scripts/eks/install-platform.sh", "scripts/eks/cluster.yaml", "slabench deploy --dry-run"):
        assert path in text
    assert "What was exercised here, and what was not" in text and "Not run:" in text


def test_every_repo_path_the_runbook_names_exists():
    text = RUNBOOK.read_text()
    paths = set(
        re.findall(r"`((?:scripts|karpenter|gpu-operator|observability|helm|slabench|sla|docs|tests)/[^`\s]*)`", text)
    )
    missing = [p for p in sorted(paths) if not (ROOT / p.rstrip("/")).exists() and "*" not in p]
    assert missing == []  # and no path outside the repository: tests/unit/test_self_contained.py checks every file
