"""Errors that are the user's to fix: shown as one clear line, never as a traceback."""


class UserError(Exception):
    """Bad input (a file, a flag, a config field). The message names what is wrong and how to fix it."""

    exit_code = 3
