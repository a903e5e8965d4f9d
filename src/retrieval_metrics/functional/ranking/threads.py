"""How many of torch's threads a compiled pass over a block takes: the count of a score block
(``engine._count``), the unit rows of a gallery block (``_rows``) and a top-k list's entering
items share a block's rows out over torch's OpenMP threads (``_parallel.h``), the same values
whatever the split.

A block's product runs on all of torch's threads (``torch.get_num_threads()``), and so do the
passes after it once a block is large enough to pay for a team's start and end (a few
microseconds while the pool's threads still spin after the product); ``torch.set_num_threads(1)``
keeps them on the calling thread.
"""

from __future__ import annotations

import torch

__all__ = ["ROW_VALUES", "SHARED_FROM", "pass_threads"]

#: the least work (values, each row counted as ROW_VALUES more) a block needs before its rows
#: are shared out: on one thread about 10 to 60 microseconds of a pass
SHARED_FROM = 1 << 17
#: what a row costs a pass besides its values, in values: its thresholds, relevant scores and
#: histograms looked up and written (about 0.09 us a row of 10 items against 0.25 ns a value
#: scanned, 400,000 queries against a gallery of 10)
ROW_VALUES = 64


def pass_threads(rows: int, row_length: int) -> int:
    """The threads a compiled pass over a block of ``rows`` rows of ``row_length`` values takes:
    torch's, where the block is large enough (SHARED_FROM), else 1."""
    work = rows * (row_length + ROW_VALUES)
    return torch.get_num_threads() if work >= SHARED_FROM else 1
