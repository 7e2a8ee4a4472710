"""Render a fleet check result: a plain-text table with one reason line per problem, or JSON. Pure (no printing)."""

from __future__ import annotations

from typing import Any

from slabench.core.textcols import aligned, pack, terminal_width
from slabench.fleet.rules import FleetResult, NodeResult, Severity

SCHEMA_VERSION = 1
_COLUMNS = ("NODE", "INSTANCE", "GPU", "CC", "DRIVER", "CUDA≤", "MIG", "RESULT")


def _row(r: NodeResult) -> tuple[str, ...]:
    n = r.node
    return (
        n.name,
        n.instance_type or "-",
        n.gpu_name,
        str(n.cc),
        str(n.driver) if n.driver else "?",
        str(r.driver_max_cuda) if r.driver_max_cuda else "?",
        ",".join(n.mig_profiles) or "-",
        r.severity.name,
    )


def render_table(result: FleetResult, width: int | None = None) -> str:
    """One row per node, each problem under its node. Wider than `width` (default: the terminal's; 80 in a CI log),
    the GPU name goes on a line of its own under its row."""
    width = terminal_width() if width is None else width
    img = result.image
    lines = [*pack([f"image {img.name}: CUDA {img.cuda}", f"arch list {img.arch_list}"], width, sep=", "), ""]
    rows = [_COLUMNS, *(_row(r) for r in result.results)]
    table = aligned(rows)
    stacked = max(map(len, table)) > width
    if stacked:
        gpu = _COLUMNS.index("GPU")
        table = aligned([row[:gpu] + row[gpu + 1 :] for row in rows])
    lines.append(table[0])
    for line, r in zip(table[1:], result.results, strict=True):
        lines.append(line)
        if stacked:
            lines.append(f"    GPU {r.node.gpu_name}")
        for finding in r.findings:
            if finding.severity > Severity.OK:
                lines.append(f"    {finding.severity.name} {finding.rule}: {finding.message}")
    lines.append("")
    summary = ", ".join(f"{result.count(s)} {s.name.lower()}" for s in Severity)
    lines.append(
        f"{len(result.results)} GPU nodes: {summary}" + (f"; {len(result.skipped)} skipped" if result.skipped else "")
    )
    for reason in result.skipped:
        lines.append(f"  skipped {reason}")
    return "\n".join(lines)


def to_json(result: FleetResult) -> dict[str, Any]:
    img = result.image
    return {
        "schema_version": SCHEMA_VERSION,
        "image": {"name": img.name, "cuda": str(img.cuda), "arch_list": img.arch_list},
        "result": result.severity.label,
        "counts": {s.label: result.count(s) for s in Severity},
        "nodes": [
            {
                "name": r.node.name,
                "instance_type": r.node.instance_type,
                "gpu": r.node.gpu,
                "gpu_name": r.node.gpu_name,
                "compute_capability": str(r.node.cc),
                "driver": str(r.node.driver) if r.node.driver else None,
                "driver_max_cuda": str(r.driver_max_cuda) if r.driver_max_cuda else None,
                "mig_profiles": list(r.node.mig_profiles),
                "result": r.severity.label,
                "findings": [{"rule": f.rule, "severity": f.severity.label, "message": f.message} for f in r.findings],
            }
            for r in result.results
        ],
        "skipped": list(result.skipped),
    }
