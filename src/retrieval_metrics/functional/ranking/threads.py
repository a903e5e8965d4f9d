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

__all__ = ["SHARED_FROM", "pass_threads"]

#: the fewest values (rows x row length) a block needs before its rows are shared out: on one
#: thread about 10 to 60 microseconds of a pass
SHARED_FROM = 1 << 17


def pass_threads(values: int) -> int:
    """The threads a compiled pass over a block of ``values`` values takes: torch's, where the
    block is large enough (SHARED_FROM), else 1."""
    return torch.get_num_threads() if values >= SHARED_FROM else 1
