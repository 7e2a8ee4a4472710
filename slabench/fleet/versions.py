"""Parsing of the version-like strings the fleet check compares: CUDA releases, driver versions, compute capabilities
and `TORCH_CUDA_ARCH_LIST` entries. Each parser raises ValueError with a message fit to show the user."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Self

_CUDA_RE = re.compile(r"^(\d+)\.(\d+)(?:\.\d+)?$")
_DRIVER_RE = re.compile(r"^\d+(?:\.\d+){0,2}$")
_CC_RE = re.compile(r"^(\d+)\.(\d)$")
_ARCH_RE = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class _MajorMinor:
    """MAJOR.MINOR, ordered numerically (only against its own kind)."""

    major: int
    minor: int
    _pattern: ClassVar[re.Pattern[str]]
    _refusal: ClassVar[str]  # "not a ...: {text} (expected ...)"

    @classmethod
    def parse(cls, text: str) -> Self:
        m = cls._pattern.match(str(text).strip())
        if not m:
            raise ValueError(cls._refusal.format(text=repr(text)))
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


class CudaVersion(_MajorMinor):
    _pattern = _CUDA_RE
    _refusal = "not a CUDA version: {text} (expected MAJOR.MINOR such as '12.9', or '12.9.1')"


@dataclass(frozen=True)
class DriverVersion:
    """An NVIDIA Linux driver version such as 580.95.05; ordered numerically, displayed as written."""

    parts: tuple[int, ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        t = str(text).strip()
        if not _DRIVER_RE.match(t):
            raise ValueError(f"not a driver version: {text!r} (expected e.g. '580.95.05')")
        return cls(tuple(int(p) for p in t.split(".")), t)

    @property
    def branch(self) -> int:
        return self.parts[0]

    def at_least(self, other: DriverVersion) -> bool:
        width = max(len(self.parts), len(other.parts))  # pad so that 580 compares as 580.0.0
        return self.parts + (0,) * (width - len(self.parts)) >= other.parts + (0,) * (width - len(other.parts))

    def __str__(self) -> str:
        return self.text


class ComputeCapability(_MajorMinor):
    _pattern = _CC_RE
    _refusal = "not a compute capability: {text} (expected MAJOR.MINOR such as '8.9')"

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"


@dataclass(frozen=True)
class ArchTarget:
    """One `TORCH_CUDA_ARCH_LIST` entry: SASS for `cc`; variant 'a' (arch-specific, runs only on exactly `cc`) or
    'f' (family-specific); `ptx` when '+PTX' asks for PTX as well."""

    cc: ComputeCapability
    variant: str = ""
    ptx: bool = False

    def __str__(self) -> str:
        return f"{self.cc}{self.variant}{'+PTX' if self.ptx else ''}"


def parse_arch_list(text: str) -> tuple[ArchTarget, ...]:
    """Parse a `TORCH_CUDA_ARCH_LIST` ('8.0 8.6;9.0a 12.0+PTX'): entries separated by spaces, ';' or ','."""
    entries = [e for e in re.split(r"[\s;,]+", str(text).strip()) if e]
    if not entries:
        raise ValueError("the arch list is empty (expected e.g. '8.0 8.6 8.9 9.0 10.0 12.0')")
    targets = []
    for entry in entries:
        m = _ARCH_RE.match(entry)
        if not m:
            raise ValueError(f"not an arch list entry: {entry!r} (expected e.g. '8.9', '9.0a', '12.0+PTX')")
        cc = ComputeCapability(int(m.group(1)), int(m.group(2)))
        targets.append(ArchTarget(cc, m.group(3).lower(), bool(m.group(4))))
    if len({str(t) for t in targets}) != len(targets):
        raise ValueError(f"the arch list repeats an entry: {text!r}")
    return tuple(targets)


def format_arch_list(targets: tuple[ArchTarget, ...]) -> str:
    return " ".join(str(t) for t in targets)
