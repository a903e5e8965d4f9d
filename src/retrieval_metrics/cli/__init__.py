"""The ``retrieval-metrics`` command line, one module a part:

- :mod:`.parser`: the arguments (``--help`` answers from it alone, before torch is imported);
- :mod:`.commands`: the commands ``evaluate``, ``compare`` and ``demo``, and :func:`main`;
- :mod:`.runs`: the systems a command reads from its arguments (embedding files, query and
  gallery pairs, runs with their qrels) and the metric each is scored by;
- :mod:`.data`: the files' arrays as the metric takes them, and the runs ``--write-run`` writes;
- :mod:`.summary`: the printed tables and the JSON report;
- :mod:`.progress`: the progress bar of slow evaluations;
- :mod:`.demo`: ``retrieval-metrics demo``.

``main``, ``run``, ``CLIError`` and ``Progress`` are imported when first read, so that importing
the package (as ``retrieval-metrics --help`` does) imports no command.
"""

from typing import TYPE_CHECKING

from retrieval_metrics.functional._lazy import lazy_names

if TYPE_CHECKING:
    from retrieval_metrics.cli.commands import CLIError, main, run
    from retrieval_metrics.cli.progress import Progress

__getattr__, __dir__ = lazy_names(__name__, {
    "retrieval_metrics.cli.commands": ["CLIError", "main", "run"],
    "retrieval_metrics.cli.progress": ["Progress"],
})

__all__ = ["CLIError", "Progress", "main", "run"]
