"""``retrieval-metrics`` and ``python -m retrieval_metrics``: the arguments parsed before the
commands (torch, numpy, the file readers) are imported, so that ``--help``, ``--version`` and a
mistyped option answer at once."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from retrieval_metrics.cli.parser import build_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retrieval-metrics`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    # the commands' imports, once there is one to run
    from retrieval_metrics.cli.commands import run

    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
