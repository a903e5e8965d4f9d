"""``python -m retrieval_metrics``: the ``retrieval-metrics`` command (``demo``, ``evaluate``)."""

import sys

from retrieval_metrics.cli import main

if __name__ == "__main__":
    sys.exit(main())
