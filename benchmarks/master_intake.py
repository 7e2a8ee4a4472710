"""What the master spends per shipped record: a worker's batch arrives as rows (`RequestRecord.to_dict`), and the
master stores them (`RecordStore.store_rows`: each row made a record once, through the record boundary, and written
as it came) — against the path before, which turned each record back into a dict for the sink. Records of a
256-token streamed answer (one chunk a token), into a JSON Lines file.

    python benchmarks/master_intake.py [--records 5000] [--tokens 256]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.record import Outcome, RequestRecord  # noqa: E402
from slabench.locust.record_store import RecordStore  # noqa: E402


def rows(n: int, tokens: int) -> list[dict]:
    out = []
    for i in range(n):
        chunks = tuple(1.0 + 0.05 + 0.002 * k for k in range(tokens))
        out.append(
            RequestRecord(
                run_id="bench", request_id=f"r{i}", worker_id="w1", user_id="w1/1", model="m", wall_sent=1.7e9,
                sent=1.0, first_byte=1.04, first_token=chunks[0], last_token=chunks[-1], end=chunks[-1] + 0.001,
                chunk_times=chunks, chunk_tokens=(1,) * tokens, prompt_tokens=512, completion_tokens=tokens,
                token_source="server", max_tokens=tokens, finish_reason="length", outcome=Outcome.OK,
            ).to_dict()
        )  # fmt: skip
    return out


def per_record(batch: list[dict], store_batch: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = RecordStore()
        store.open(Path(tmp) / "records.jsonl")
        t0 = time.perf_counter()
        for i in range(0, len(batch), 200):  # the master stores a batch in slices of 200
            part = batch[i : i + 200]
            if store_batch == "rows":
                store.store_rows(part)
            else:
                store.store([RequestRecord.from_dict(d) for d in part])
        store.close()
        return (time.perf_counter() - t0) / len(batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    batch = rows(args.records, args.tokens)
    for name, how in (("row → record → row (before)", "records"), ("row → record, row written (now)", "rows")):
        best = min(per_record(batch, how) for _ in range(3))
        print(f"{name:34} {best * 1e6:8.1f} µs per record")


if __name__ == "__main__":
    main()
