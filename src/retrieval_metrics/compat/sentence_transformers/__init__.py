"""sentence-transformers' ``InformationRetrievalEvaluator``, ranked and scored by this library.

Swap the import and keep the code: the constructor, the call (also inside
``SentenceTransformerTrainer``), the result keys, ``primary_metric`` and the CSV file are
sentence-transformers' (6.x)::

    # from sentence_transformers.evaluation import InformationRetrievalEvaluator
    from retrieval_metrics.compat.sentence_transformers import InformationRetrievalEvaluator

The model encodes the queries and the corpus as sentence-transformers' evaluator has it do
(``encode_query`` / ``encode_document``, or ``encode`` for a model without them, with
``batch_size``, the prompts, ``truncate_dim`` and ``show_progress_bar``; the corpus in chunks of
``corpus_chunk_size``). The embeddings then go to :class:`retrieval_metrics.RetrievalMetrics`
with ``protocol="sentence_transformers"`` and the judgments as ``qrels=``: every relevant
document gets its exact rank in the whole corpus, in blocks that fit ``memory_budget``, and no
top-k list is built. Its keys come back under sentence-transformers' names
(``{name}_{score function}_accuracy@{k}``, ``..._precision@k``, ``..._recall@k``,
``..._ndcg@k``, ``..._mrr@k``, ``..._map@k``), as Python floats.

Score functions: the model's ``similarity_fn_name`` (by default, read at every call, as 6.2 does)
or ``score_functions`` made of ``sentence_transformers.util.cos_sim``, ``dot_score``,
``euclidean_sim`` or a model's ``similarity`` method are the library's ``similarity`` "cosine",
"dot" and "euclidean". Any other callable (a Manhattan distance, a lambda) cannot be handed to the
ranking and is refused by name; so is ``write_predictions=True`` (no top-k lists to write).

Tied scores are ranked as sentence-transformers 6.x ranks them: tied documents in ascending
corpus-id order (the protocol's ``ties="id"``; corpus ids that Python cannot sort, such as ints
mixed with strs, are refused). Differences: the corpus embeddings
are held until the call ends (sentence-transformers holds one chunk, unless given
``corpus_embeddings``). Judgments are read as sentence-transformers reads them: a document id is
relevant when it is in the query's ``relevant_docs`` entry (grades are not read), compared with
Python's ``==``. A cut-off listed twice (``accuracy_at_k=[1, 1]``) is one value here, where
sentence-transformers adds each query's hit (and reciprocal rank) once per listing.

sentence-transformers is an optional dependency, imported when an evaluator is constructed:
``pip install "retrieval-metrics[sentence-transformers]"``.

Example:
    >>> import torch
    >>> from retrieval_metrics.compat.sentence_transformers import InformationRetrievalEvaluator
    >>> class Model:  # a SentenceTransformer, or anything with `encode`
    ...     similarity_fn_name = "cosine"
    ...     def encode(self, texts, **kwargs):
    ...         return torch.tensor([[float(w in t) for w in ("cat", "dog", "fish")]
    ...                              for t in texts])
    >>> evaluator = InformationRetrievalEvaluator(
    ...     queries={"q1": "a cat", "q2": "a dog and a fish"},
    ...     corpus={"d1": "cat", "d2": "dog", "d3": "cat fish", "d4": "dog fish"},
    ...     relevant_docs={"q1": {"d3"}, "q2": {"d2", "d4"}},
    ...     name="toy", accuracy_at_k=[1], precision_recall_at_k=[2],
    ...     mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[10])
    >>> results = evaluator(Model())
    >>> evaluator.primary_metric
    'toy_cosine_ndcg@10'
    >>> results["toy_cosine_accuracy@1"], results["toy_cosine_mrr@10"]
    (0.5, 0.75)
    >>> round(results["toy_cosine_ndcg@10"], 4)
    0.8155
"""

from retrieval_metrics.compat.sentence_transformers.evaluator import InformationRetrievalEvaluator

__all__ = ["InformationRetrievalEvaluator"]
