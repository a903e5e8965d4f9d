"""The command line's one error: a user error, printed as one line, exit status 2 (a module of
its own, so that every command module raises it without importing another)."""

from __future__ import annotations

__all__ = ["CLIError", "in_flags"]


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


#: the Python API's words in a message, as the command line says them
_FLAGS = (
    ("read as written with qrels= or an IR protocol (trec_eval, beir, mteb, ...)",
     "read as written with --qrels and embeddings, or under an IR --protocol (trec_eval, a "
     "--run's default; beir, mteb, ...): --protocol none leaves it ambiguous"),
)


def in_flags(message: str) -> str:
    """``message`` (a refusal of the Python API) with its arguments named as the command line's
    flags, where the two differ."""
    for api, flags in _FLAGS:
        message = message.replace(api, flags)
    return message
