"""Plain-text tables and lines that read at the terminal's width (80 in a CI log or a pipe). Pure, but for
`terminal_width`."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from collections.abc import Iterable, Sequence


def terminal_width() -> int:
    """The terminal's columns; 80 without a terminal (CI logs, `| tee`), or $COLUMNS."""
    return shutil.get_terminal_size((80, 24)).columns


def aligned(rows: Sequence[Sequence[str]], right: Iterable[int] = (), gap: str = "  ") -> list[str]:
    """Rows as aligned columns (the columns in `right` right-aligned), trailing spaces stripped."""
    right = set(right)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return [
        gap.join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def pack(parts: Iterable[str], width: int, indent: str = "  ", sep: str = "; ") -> list[str]:
    """Join `parts` with `sep` into lines of at most `width` columns, breaking only between parts (a part longer
    than a line keeps a line of its own: a figure is never cut). Lines after the first are indented."""
    lines: list[str] = []
    line = ""
    for part in parts:
        lead = indent if lines else ""
        candidate = f"{line}{sep}{part}" if line else f"{lead}{part}"
        if line and len(candidate) > width:
            lines.append(line + sep.rstrip())
            line = f"{indent}{part}"
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines


class ParagraphHelpFormatter(argparse.HelpFormatter):
    """A command's description at the terminal's width: each paragraph rewrapped, blank lines between paragraphs
    kept, and a paragraph with indented lines (an example) left as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for block in textwrap.dedent(text).strip().split("\n\n"):
            if any(line.startswith(" ") for line in block.splitlines()):
                out.append(textwrap.indent(block, indent))
            else:
                out.append(
                    textwrap.fill(" ".join(block.split()), width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n\n".join(out)


def add_documented_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str, doc: str | None
) -> argparse.ArgumentParser:
    """A subcommand whose --help opens with `doc` (its module's docstring) rewrapped per paragraph at the terminal's
    width, so a docstring written at the source's 120 columns still reads at 80."""
    return sub.add_parser(name, help=help, description=doc, formatter_class=ParagraphHelpFormatter)
