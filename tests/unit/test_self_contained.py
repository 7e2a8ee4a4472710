"""The repository stands on its own: no file points at design notes that live outside it (their content is in
docs/architecture.md, docs/fleet.md and docs/workload.md)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|(?<![\w/])(DESIGN|FLEET|WORKLOAD)\.md")


def test_no_file_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for rel in files:
        path = ROOT / rel
        if rel == "tests/unit/test_self_contained.py":
            continue  # the check names what it looks for
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        found += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []
