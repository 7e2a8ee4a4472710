"""Write `sla/schema/sla.schema.json` from the contract models: ``python -m slabench.sla.schema_gen`` (``--check``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from slabench.sla.contract import json_schema

# Published beside the contracts (sla/), not inside the package.
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "sla" / "schema" / "sla.schema.json"


def render() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is out of date: run `python -m slabench.sla.schema_gen`", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.parent.mkdir(exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
