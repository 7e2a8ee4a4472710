"""The optional parts of slabench and the pip extra that brings each (pyproject.toml): the core measures, aggregates
and grades; `report` draws the plots, `platform` talks to Kubernetes and Helm, `weights` to S3, `tokenizer` counts
with the served model's tokenizer, `pandas` reads records as a DataFrame. Using a part whose package is missing is
one line naming the install command, never a traceback."""

from __future__ import annotations

import importlib

from slabench.core.errors import UserError

EXTRA = {
    "matplotlib": "report",
    "kubernetes": "platform",
    "pyhelm3": "platform",
    "boto3": "weights",
    "tokenizers": "tokenizer",
    "pandas": "pandas",
}


def missing(package: str) -> str | None:
    """None when `package` imports; else the command that installs it."""
    try:
        importlib.import_module(package)
    except ImportError:
        return f"pip install 'slabench[{EXTRA[package]}]'"
    return None


def require(package: str, purpose: str) -> None:
    """Refuse `purpose` (what the user asked for) with the install command when `package` is not installed."""
    hint = missing(package)
    if hint is not None:
        raise UserError(f"{purpose} needs {package}, which is not installed: {hint}")
