"""The dataset files: build them from a seed, write them with a manifest, verify them, load them.

``datasets/`` holds
- ``golden.jsonl``: the 250 golden calls with their ground truth (`golden.py`);
- ``queue_burst.csv`` / ``queue_gamma.csv``: ``index,account,offset_s,seed`` per arrival (`queue.py`);
- ``manifest.json``: seed, generator version, settings fingerprint, counts, the token estimator, each file's sha256
  and bytes, and a fingerprint of calls rebuilt from the first queue seeds (so a generator change that would
  silently rebuild different calls from the same seeds is caught by `verify`).

Building is a pure function of (settings, seed): `build_files` returns the exact bytes, `verify_dataset` rebuilds
them and compares byte for byte.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
from pathlib import Path
from typing import Any, Protocol

from slabench.core.errors import UserError
from slabench.core.queue import QueueItem, parse_queue_text
from slabench.workload.accounts import WorkloadSettings, load_settings
from slabench.workload.golden import build_golden, golden_counts, golden_row, parse_golden
from slabench.workload.queue import QUEUE_KINDS, QueueKind, account_counts, build_queue, queue_kind
from slabench.workload.transcripts import ESTIMATOR, GradingItem, generate_call

# Bump whenever the same (settings, seed) would produce different bytes or different rebuilt calls.
GENERATOR_VERSION = "1"
MANIFEST = "manifest.json"
GOLDEN_FILE = "golden.jsonl"
QUEUE_FILES: dict[str, str] = {"burst": "queue_burst.csv", "gamma": "queue_gamma.csv"}
QUEUE_HEADER = ["index", "account", "offset_s", "seed"]
_REBUILD_SAMPLE = 50  # queue items per queue whose rebuilt calls are fingerprinted in the manifest


def settings_fingerprint(settings: WorkloadSettings) -> str:
    """sha256 of the validated settings (independent of YAML comments and layout)."""
    return hashlib.sha256(settings.model_dump_json().encode()).hexdigest()


def _queue_csv(items: list[QueueItem]) -> bytes:
    buf = io.StringIO()
    buf.write(",".join(QUEUE_HEADER) + "\n")
    for it in items:
        buf.write(f"{it.index},{it.account},{it.offset_s:.6f},{it.seed}\n")
    return buf.getvalue().encode()


def _call_fingerprint(calls: list[GradingItem]) -> str:
    h = hashlib.sha256()
    for c in calls:
        h.update(golden_row(c).encode() + b"\n")
    return h.hexdigest()


def build_files(settings: WorkloadSettings, seed: int) -> dict[str, bytes]:
    """Every dataset file's exact bytes, manifest included."""
    taken: set[int] = set()
    golden = build_golden(settings, seed, taken)
    files = {GOLDEN_FILE: ("\n".join(golden_row(c) for c in golden) + "\n").encode()}
    queues = {kind: build_queue(settings, seed, kind, taken) for kind in QUEUE_KINDS}
    for kind, items in queues.items():
        files[QUEUE_FILES[kind]] = _queue_csv(items)
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "generator": "slabench.workload",
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "settings_sha256": settings_fingerprint(settings),
        "token_estimator": ESTIMATOR,
        "queue": {"total": settings.queue.total, "duration_s": settings.queue.duration_s},
        "counts": {
            "golden": golden_counts(settings),
            **{kind: account_counts(settings, settings.queue.total) for kind in QUEUE_KINDS},
        },
        "rebuild_sha256": {
            kind: _call_fingerprint([build_item(q, settings) for q in items[:_REBUILD_SAMPLE]])
            for kind, items in queues.items()
        },
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "lines": data.count(b"\n")}
            for name, data in files.items()
        },
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2) + "\n").encode()
    return files


def write_dataset(out_dir: str | Path, settings: WorkloadSettings, seed: int) -> dict[str, bytes]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = build_files(settings, seed)
    for name, data in files.items():
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(out / name)  # no half-written file if interrupted
    return files


def _first_difference(a: bytes, b: bytes) -> str:
    la, lb = a.split(b"\n"), b.split(b"\n")
    for n, (x, y) in enumerate(zip(la, lb, strict=False), start=1):
        if x != y:
            col = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            return f"line {n}, column {col + 1}"
    return f"line {min(len(la), len(lb)) + 1} (one file is longer)"


def read_manifest(dataset_dir: Path) -> dict[str, Any]:
    path = dataset_dir / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found (build the dataset with `slabench dataset build`)") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a JSON object (rebuild the dataset with `slabench dataset build`)")
    for key in ("generator_version", "seed", "settings_sha256", "files"):
        if key not in data:
            raise UserError(f"{path}: {key}: required key is missing")
    if not isinstance(data["seed"], int) or isinstance(data["seed"], bool) or data["seed"] < 0:
        raise UserError(f"{path}: seed: must be a non-negative integer (got {data['seed']!r})")
    return data


def verify_dataset(dataset_dir: str | Path, settings: WorkloadSettings | None = None) -> list[str]:
    """Rebuild the dataset from its manifest's seed and compare every file byte for byte.

    Returns one line per verified file; raises UserError listing every file that differs (or is missing)."""
    d = Path(dataset_dir)
    settings = settings or load_settings()
    manifest = read_manifest(d)
    if manifest["generator_version"] != GENERATOR_VERSION:
        raise UserError(
            f"{d / MANIFEST}: generator_version: built by generator {manifest['generator_version']}, this is "
            f"{GENERATOR_VERSION}; rebuild with `slabench dataset build`"
        )
    if manifest["settings_sha256"] != settings_fingerprint(settings):
        raise UserError(
            f"{d / MANIFEST}: settings_sha256: the dataset was built with different settings than the ones loaded "
            "(pass the same --config, or rebuild with `slabench dataset build`)"
        )
    expected = build_files(settings, manifest["seed"])
    problems, ok = [], []
    for name, data in expected.items():
        path = d / name
        if not path.exists():
            problems.append(f"{path}: missing (expected {len(data)} bytes)")
            continue
        actual = path.read_bytes()
        if actual != data:
            problems.append(
                f"{path}: differs from what seed {manifest['seed']} generates (first difference at "
                f"{_first_difference(actual, data)}); it was edited, or the generator changed without a version bump"
            )
        else:
            ok.append(f"{path}: ok ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}…)")
    if problems:
        raise UserError("dataset verification failed:\n  " + "\n  ".join(problems))
    return ok


def resolve_dir(dataset_dir: str | Path) -> Path:
    """`dataset_dir` as given, or (when relative and absent) relative to the repository root, so the default
    "datasets" works from any working directory of a source checkout."""
    p = Path(dataset_dir)
    if p.is_dir() or p.is_absolute():
        return p
    alt = Path(__file__).resolve().parents[2] / p
    return alt if alt.is_dir() else p


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(
            f"{path}: file not found (build the dataset with `slabench dataset build --out {path.parent}`)"
        ) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None


def _check_manifest_hash(d: Path, name: str, data: bytes) -> None:
    """Rows that parse can still be edited (a seed, an offset): the manifest's sha256 catches that."""
    if not (d / MANIFEST).exists():
        return  # a dataset without a manifest (e.g. private data) is trusted as it is
    entry = read_manifest(d)["files"].get(name)
    if entry is not None and entry.get("sha256") != hashlib.sha256(data).hexdigest():
        raise UserError(
            f"{d / name}: sha256 differs from {d / MANIFEST} (the file was edited after the build); "
            "`slabench dataset verify` shows where, `slabench dataset build` regenerates it"
        )


def load_golden(dataset_dir: str | Path = "datasets", settings: WorkloadSettings | None = None) -> list[GradingItem]:
    """The golden calls, validated row by row (errors name file, line and field), then against the manifest."""
    d = resolve_dir(dataset_dir)
    settings = settings or load_settings()
    path = d / GOLDEN_FILE
    data = _read(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    calls = parse_golden(path, text, settings)
    _check_manifest_hash(d, GOLDEN_FILE, data)
    return calls


def parse_queue(path: Path, text: str, settings: WorkloadSettings, kind: str) -> list[QueueItem]:
    """The one queue parser (`slabench.core.queue`) with the dataset's rules: its exact header, indexes numbered from 0
    in order, known accounts, a seed on every row, offsets inside the queue window. Errors name ``file:line: field``."""
    header = next(csv.reader(io.StringIO(text)), None)
    if header != QUEUE_HEADER:
        raise UserError(f"{path}:1: header: expected {','.join(QUEUE_HEADER)} (got {','.join(header or [])!r})")
    duration = settings.queue.duration_s
    position = itertools.count()

    def check(item: QueueItem, where: str) -> None:
        expected = next(position)
        if item.index != expected:
            raise UserError(
                f"{where}: index: expected {expected} (rows are numbered from 0 in order), got {item.index}"
            )
        if item.account is None or item.seed is None:
            raise UserError(f"{where}: every row of the dataset's queue needs its account and seed")
        settings.account(item.account, where=f"{where}: account")
        if not 0.0 <= item.offset_s < duration:
            raise UserError(f"{where}: offset_s: {item.offset_s:g} is outside the queue window [0, {duration:g})")

    if len(text.strip().splitlines()) < 2:
        raise UserError(f"{path}: the queue has no rows")
    return parse_queue_text(text, str(path), kind=kind, check=check)


def load_queue(
    dataset_dir: str | Path = "datasets", kind: QueueKind = "burst", settings: WorkloadSettings | None = None
) -> list[QueueItem]:
    """The queue `kind` ("burst" | "gamma") in arrival order, validated row by row, then against the manifest."""
    kind = queue_kind(kind)  # a caller's text is checked here too
    d = resolve_dir(dataset_dir)
    settings = settings or load_settings()
    path = d / QUEUE_FILES[kind]
    data = _read(path)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: unexpected non-ASCII byte at offset {e.start}") from None
    items = parse_queue(path, text, settings, kind)
    _check_manifest_hash(d, QUEUE_FILES[kind], data)
    return items


class NamesACall(Protocol):
    """What names a call: a queue row (`slabench.core.queue.QueueItem`), a scheduled open-loop item, a golden call."""

    @property
    def account(self) -> str | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def item_id(self) -> str: ...


def build_item(item: NamesACall, settings: WorkloadSettings | None = None, token_scale: float = 1.0) -> GradingItem:
    """The call an item names, rebuilt from its account and seed (a golden call is returned as it is, unless
    `token_scale` asks for its transcript sized in a model's tokens: then it too is rebuilt from its seed)."""
    if isinstance(item, GradingItem) and token_scale == 1.0:
        return item
    if item.account is None or item.seed is None:
        raise UserError(f"item {item.item_id}: names no call (a call is named by its account and seed)")
    return generate_call(settings or load_settings(), item.account, item.seed, item.item_id, token_scale)


def item_ref(item: NamesACall) -> str:
    """A short reference from which `item_from_ref` rebuilds the call: ``<item id>|<account>|<seed>``. Lets a
    request carry its item to the simulator's grading mode (e.g. in the OpenAI ``user`` field) without the
    transcript or the ground truth."""
    return f"{item.item_id}|{item.account}|{item.seed}"


def item_from_ref(ref: str, settings: WorkloadSettings | None = None) -> GradingItem:
    """The call `item_ref` names, rebuilt from its seed (golden calls rebuild to exactly their stored rows)."""
    parts = ref.split("|")
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        raise UserError(f"item reference {ref!r}: expected '<item id>|<account>|<seed>'")
    return generate_call(settings or load_settings(), parts[1], int(parts[2]), parts[0])
