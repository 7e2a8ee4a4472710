"""The JSON Schemas slabench publishes for the files a user writes or reads, generated from the typed models: the SLA
contract (sla/schema/sla.schema.json, beside the contracts, for editors), and summary.json, verdict.json and
run_status.json (docs/*.schema.json). ``python -m slabench.commands.published_schemas`` writes them; ``--check`` names
the stale ones and exits 1 (a unit test keeps them current)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slabench.analysis.summary import SweepSummary
from slabench.evidence.run_status import RunStatus
from slabench.sla.contract import json_schema as contract_schema
from slabench.sla.verdict_file import VerdictFile

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS: dict[Path, Callable[[], dict[str, Any]]] = {
    ROOT / "sla" / "schema" / "sla.schema.json": contract_schema,
    ROOT / "docs" / "summary.schema.json": SweepSummary.model_json_schema,
    ROOT / "docs" / "verdict.schema.json": VerdictFile.model_json_schema,
    ROOT / "docs" / "run_status.schema.json": RunStatus.model_json_schema,
}


def render(make: Callable[[], dict[str, Any]]) -> str:
    return json.dumps(make(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def stale() -> list[Path]:
    return [p for p, make in SCHEMAS.items() if not p.exists() or p.read_text(encoding="utf-8") != render(make)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        old = stale()
        for path in old:
            print(f"{path} is out of date: run `python -m slabench.commands.published_schemas`", file=sys.stderr)
        return 1 if old else 0
    for path, make in SCHEMAS.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(render(make), encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
