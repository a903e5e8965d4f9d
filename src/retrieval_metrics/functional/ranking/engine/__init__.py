"""The blocked fast path: embeddings and relevance -> a rank table, scratch within a memory budget.

``plan`` (block sizes by device and budget) -> ``schedule`` (the one-sided, symmetric and two-way
passes) -> ``counting`` (one query block across the gallery) -> ``kernels`` (sorts, segment maxima,
the sparse and dense counts); ``direction`` holds one direction's layout and outputs,
``similarity`` prepares the operands, ``fp32`` keeps the products in full float32 and
``exchange`` is the collectives several processes share a pass with. ``ranking.reference`` is the
plain path every fast path here is tested against, bit for bit.
"""
