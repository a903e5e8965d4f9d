"""What the metric classes hand the ranking: the items of each side and one object of options.

:class:`Items` (one side's per-item tensors) and :class:`RankingOptions` (every option of the
ranking and the engine that ranks by them; :meth:`RankingOptions.rank` is where the items are
ranked) now live in the ranking layer, ``functional/ranking/items.py`` and
``functional/ranking/options.py``; this module keeps the import path the metric classes use.
"""

from retrieval_metrics.functional.ranking.items import ITEM_FIELDS, Items
from retrieval_metrics.functional.ranking.options import RankingOptions

__all__ = ["ITEM_FIELDS", "Items", "RankingOptions"]
