"""The command line's one error: a user error, printed as one line, exit status 2 (a module of
its own, so that every command module raises it without importing another)."""

from __future__ import annotations

__all__ = ["CLIError"]


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""
