"""The blocked fast path: embeddings and relevance -> a rank table, scratch within a memory budget.

``schedule`` (the entry points: layout, matrices, pass) -> ``layout`` (which pass and blocks:
the symmetric pass of a set against itself, the one-sided pass, the two-way pass; ``plan``'s
block sizes by device and budget) -> ``one_sided`` / ``two_sided`` (the passes; ``shared``
shares one out over processes) -> ``counting`` (one query block across the gallery) ->
``kernels`` (sorts, segment maxima, the sparse and dense counts); ``direction`` holds one
direction's layout and outputs, ``similarity`` prepares the operands, ``fp32`` keeps the products
in full float32, ``exchange`` is the collectives several processes share a pass with, and
``running_best`` keeps each row's K best items block after block (a run's lists; ``listing``
keeps them as the one-sided pass counts, for a table and a run from one pass).
``ranking.reference`` is the plain path every fast path here is tested against, bit for bit.
"""
