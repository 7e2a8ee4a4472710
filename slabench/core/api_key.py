"""The API key, read from the environment in one place and checked before any load.

A key travels in an HTTP header (``Authorization: Bearer <key>``), so it is printable ASCII without spaces. A
Kubernetes secret written with ``echo`` ends in a newline: sent as is, every request failed (16,000 error records in
3 s) and the key was printed in clear where an error quoted the header. Such a key is refused with one line that says
what is wrong and where, never the key itself."""

from __future__ import annotations

import os

from slabench.core.errors import UserError


def api_key_from_env(name: str, flag: str = "--api-key-env") -> str | None:
    """The key in environment variable `name` (None when unset or empty); UserError naming `flag` and `name` when
    it holds a character a header cannot carry."""
    key = os.environ.get(name) or None
    if key is None:
        return None
    for i, ch in enumerate(key, 1):
        if not "!" <= ch <= "~":
            raise UserError(
                f"{flag} {name}: the API key in ${name} holds {_what(ch)} at character {i} of {len(key)} — a "
                "secret made with `echo` ends in a newline; store the key alone (printf '%s' KEY, or echo -n) "
                "(the key is not shown)"
            )
    return key


def _what(ch: str) -> str:
    named = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}
    if ch in named:
        return named[ch]
    return "a control character" if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F else "a non-ASCII character"
