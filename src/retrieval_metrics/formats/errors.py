"""The error every file reader of :mod:`retrieval_metrics.formats` raises."""

from __future__ import annotations

__all__ = ["FormatError"]


class FormatError(ValueError):
    """A file that cannot be read as the format its name says; the message names the file and
    the line (or the array)."""
