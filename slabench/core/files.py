"""The user's files in, our files out: one clear line for every way a path can be wrong.

`read_text` is how the project reads a text file the user named (configs, contracts, prompts, records, manifests):
missing, a directory, unreadable or not UTF-8 text (a binary, another encoding) are each a `UserError` naming the
file. `check_output` runs before any work that ends in writing: a parent that is a regular file, a folder that cannot
be made or written, are refused up front, so nothing measured is lost at the end.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from slabench.core.errors import UserError


def read_text(path: str | Path, cut_tail: bool = False) -> str:
    """The file as text. `cut_tail`: the file may end in a line cut mid-character by a killed writer (records, spools);
    that line is dropped rather than refused. Errors name the file and the line of the first bad byte."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{p}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, not a file") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror})") from None
    nul = data.find(b"\x00")
    if nul >= 0:  # no text format we read holds NUL: an image, a tarball, a Parquet file by mistake
        raise UserError(f"{p}:{line_at(data, nul)}: a binary file (NUL byte), not text — is this the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        tail = data.rfind(b"\n") + 1
        if cut_tail and e.start >= tail:  # the first bad byte is in the unfinished last line: the rest is good
            return data[:tail].decode("utf-8")
        raise UserError(
            f"{p}:{line_at(data, e.start)}: not UTF-8 text (byte 0x{data[e.start]:02x}) — save the file as UTF-8"
        ) from None


def line_at(text: str | bytes, offset: int) -> int:
    """The 1-based line of `offset` in `text`."""
    if isinstance(text, str):
        return text.count("\n", 0, offset) + 1
    return text.count(b"\n", 0, offset) + 1


def check_output(path: str | Path, flag: str, is_dir: bool = False) -> Path:
    """`path` can be written (as a file, or as a folder with `is_dir`): its folder exists or is made now, and
    accepts a file. Raises UserError naming `flag` and the fix."""
    p = Path(path)
    try:
        p.exists()
    except OSError as e:  # a name too long for the file system, a loop of links
        raise UserError(f"{flag} {str(p)[:120]}: cannot use this path ({e.strerror}); choose a shorter one") from None
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{flag} {p}: {parent} is a file, not a folder; choose a path in a folder")
            break
    if p.exists() and p.is_dir() != is_dir:
        what = "a directory" if p.is_dir() else "a file"
        raise UserError(f"{flag} {p}: is {what}; give {'a folder' if is_dir else 'a file name'}")
    folder = p if is_dir else p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".slabench-write-test-{uuid.uuid4().hex}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise UserError(f"{flag} {p}: cannot create or write {folder} ({why}); choose a writable folder") from None
    if not os.access(folder, os.W_OK):
        raise UserError(f"{flag} {p}: {folder} is not writable; choose a writable folder")
    return p
