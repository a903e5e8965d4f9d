"""A worker of tests/test_launch.py: ``python failing_worker.py RANK WORLD INIT OUT``. The last
rank fails; the others hang, as a rank can whose peer left a collective half done."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(rank: int, world: int) -> dict:
    import time

    if rank == world - 1:
        raise RuntimeError(f"rank {rank} fails on purpose")
    time.sleep(3600)
    return {"rank": rank}


if __name__ == "__main__":
    from launch import worker_main

    worker_main(run)
