"""sentence-transformers' ``InformationRetrievalEvaluator``, exact: the class (the package's
docstring says how it is used)."""


from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.compat.sentence_transformers.support import (
    bound_class,
    check_ks,
    check_positive_int,
    dense_rows,
    engine_similarity,
    rebuild,
    resolved_similarity,
    score_function_similarity,
    sentence_transformers_package,
)
from retrieval_metrics.functional.options import OPTIONS

__all__ = ["InformationRetrievalEvaluator"]

# (the package's logger: its name is the module users know)
logger = logging.getLogger("retrieval_metrics.compat.sentence_transformers")

#: the measures of sentence-transformers' results, in its order: its key -> the library's name
MEASURES = {
    "accuracy@k": "hit_rate", "precision@k": "precision", "recall@k": "recall",
    "ndcg@k": "ndcg", "mrr@k": "mrr", "map@k": "map",
}
_WHOLE_GALLERY = r".*the cut-off reaches the whole gallery"
_ABSENT = r".*relevant documents the qrels judge for the queries given are not in the corpus"


class InformationRetrievalEvaluator:
    """sentence-transformers' ``InformationRetrievalEvaluator`` (6.x), ranked and scored exactly.

    Args:
        queries: query id -> query (text, or any input the model encodes).
        corpus: document id -> document.
        relevant_docs: query id -> the ids of its relevant documents. Queries without any are
            left out, as sentence-transformers does.
        corpus_chunk_size: documents encoded per ``encode_document`` call (and per gallery
            update). The values do not depend on it.
        mrr_at_k: the cut-offs of MRR (each of these five: a non-empty list of positive ints;
            sentence-transformers' defaults).
        ndcg_at_k: the cut-offs of NDCG; ``primary_metric`` is at the largest.
        accuracy_at_k: the cut-offs of accuracy (the hit rate: a relevant document in the top K).
        precision_recall_at_k: the cut-offs of precision and recall.
        map_at_k: the cut-offs of MAP (divided by min(relevant, K), as theirs).
        show_progress_bar: passed to the model's encode calls; also a bar over corpus chunks.
        batch_size: passed to the model's encode calls.
        name: prefix of every key (``{name}_``), of ``primary_metric`` and of the CSV file name.
        write_csv: append the values to ``Information-Retrieval_evaluation_{name}_results.csv``
            in ``output_path`` when the call gives one.
        truncate_dim: passed to the model's encode calls.
        score_functions: name -> score function; each must be one the ranking can express
            (``sentence_transformers.util.cos_sim``, ``dot_score``, ``euclidean_sim``, or a
            model's ``similarity``). None (default): the model's ``similarity_fn_name``, read
            at every call ("cosine" for a model without one).
        main_score_function: the score function whose NDCG is ``primary_metric``; None: the
            score function with the best NDCG at the largest cut-off.
        query_prompt: passed to the model's ``encode_query`` calls.
        query_prompt_name: passed to the model's ``encode_query`` calls.
        corpus_prompt: passed to the model's ``encode_document`` calls.
        corpus_prompt_name: passed to the model's ``encode_document`` calls.
        write_predictions: must stay False: this evaluator builds no top-k lists to write.
        memory_budget: bytes of scratch memory the ranking may use (the library's option).

    Calling it as ``evaluator(model, output_path=None, epoch=-1, steps=-1)`` returns the dict of
    values; ``corpus_model=`` (another model for the corpus) and ``corpus_embeddings=`` (the
    corpus already encoded, in ``corpus`` order) are passed on to :meth:`compute_all_metrics`,
    as sentence-transformers does.
    """

    #: set on the class made with sentence-transformers' ``BaseEvaluator`` (see ``__new__``)
    _unbound_class: type | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> InformationRetrievalEvaluator:
        # An instance of this class with sentence-transformers' BaseEvaluator as a base too:
        # sentence-transformers is imported here, not when this module is.
        return object.__new__(bound_class(cls))

    def __reduce__(self) -> tuple[Any, ...]:
        return rebuild, (self._unbound_class or type(self), dict(self.__dict__))

    def __init__(
        self,
        queries: Mapping[Any, Any],
        corpus: Mapping[Any, Any],
        relevant_docs: Mapping[Any, Any],
        corpus_chunk_size: int = 50000,
        mrr_at_k: Sequence[int] = (10,),
        ndcg_at_k: Sequence[int] = (10,),
        accuracy_at_k: Sequence[int] = (1, 3, 5, 10),
        precision_recall_at_k: Sequence[int] = (1, 3, 5, 10),
        map_at_k: Sequence[int] = (100,),
        show_progress_bar: bool = False,
        batch_size: int = 32,
        name: str = "",
        write_csv: bool = True,
        truncate_dim: int | None = None,
        score_functions: Mapping[str, Callable[[Tensor, Tensor], Tensor]] | None = None,
        main_score_function: Any = None,
        query_prompt: str | None = None,
        query_prompt_name: str | None = None,
        corpus_prompt: str | None = None,
        corpus_prompt_name: str | None = None,
        write_predictions: bool = False,
        *,
        memory_budget: int | None = OPTIONS["memory_budget"].default,
    ) -> None:
        super().__init__()  # BaseEvaluator: greater_is_better, primary_metric
        st = sentence_transformers_package()
        for arg, value in (("queries", queries), ("corpus", corpus),
                           ("relevant_docs", relevant_docs)):
            if not isinstance(value, Mapping):
                raise ValueError(
                    f"`{arg}` must be a dict (id -> {'ids' if arg == 'relevant_docs' else 'input'}"
                    f"), got {type(value).__name__}"
                )
        if write_predictions:
            raise ValueError(
                "write_predictions=True is not supported: this evaluator ranks every relevant "
                "document exactly and builds no top-k lists to write; use sentence_transformers' "
                "own InformationRetrievalEvaluator for a predictions file"
            )
        if not isinstance(name, str):
            raise ValueError(f"`name` must be a string, got {name!r}")
        if truncate_dim is not None:
            check_positive_int("truncate_dim", truncate_dim)
        OPTIONS["memory_budget"].check(memory_budget)

        self.queries_ids = []
        for qid in queries:
            if isinstance(relevant_docs.get(qid), (str, bytes)):
                # (its characters would be read as the ids: 'd1' as 'd' and '1', scoring 0)
                raise ValueError(
                    f"`relevant_docs[{qid!r}]` must be a collection of document ids, got the "
                    f"{type(relevant_docs[qid]).__name__} {relevant_docs[qid]!r}: write "
                    f"{{{relevant_docs[qid]!r}}} for one document"
                )
            if qid in relevant_docs and len(relevant_docs[qid]) > 0:
                self.queries_ids.append(qid)
        if not self.queries_ids:
            raise ValueError(
                "no query of `queries` has relevant documents in `relevant_docs` (queries "
                "without any are left out, as sentence-transformers does): nothing to score"
            )
        self.queries = [queries[qid] for qid in self.queries_ids]
        self.corpus_ids = list(corpus.keys())
        if not self.corpus_ids:
            raise ValueError("`corpus` is empty: nothing to rank")
        self.corpus = [corpus[cid] for cid in self.corpus_ids]

        self.query_prompt = query_prompt
        self.query_prompt_name = query_prompt_name
        self.corpus_prompt = corpus_prompt
        self.corpus_prompt_name = corpus_prompt_name

        self.relevant_docs = relevant_docs
        self._log_absent_documents()
        self.corpus_chunk_size = check_positive_int("corpus_chunk_size", corpus_chunk_size)
        self.mrr_at_k = check_ks("mrr_at_k", mrr_at_k)
        self.ndcg_at_k = check_ks("ndcg_at_k", ndcg_at_k)
        self.accuracy_at_k = check_ks("accuracy_at_k", accuracy_at_k)
        self.precision_recall_at_k = check_ks("precision_recall_at_k", precision_recall_at_k)
        self.map_at_k = check_ks("map_at_k", map_at_k)

        self.show_progress_bar = show_progress_bar
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.name = name
        self.write_csv = write_csv
        self.truncate_dim = truncate_dim
        self.memory_budget = memory_budget

        if score_functions is not None:
            if not isinstance(score_functions, Mapping) or not score_functions:
                raise ValueError(
                    "`score_functions` must be a non-empty dict (name -> score function) or "
                    f"None (the model's own similarity), got {score_functions!r}"
                )
            self._similarity_of = {
                key: score_function_similarity(key, fn) for key, fn in score_functions.items()
            }
        self.score_functions = dict(score_functions) if score_functions else None
        self.score_function_names = sorted(self.score_functions) if self.score_functions else []
        self._score_functions_from_model = score_functions is None
        if main_score_function:
            try:
                main_score_function = st.util.similarity.SimilarityFunction(main_score_function)
            except ValueError as err:
                raise ValueError(f"`main_score_function`: {err}") from err
        self.main_score_function = main_score_function or None

        suffix = "_" + name if name else ""
        self.csv_file: str = "Information-Retrieval_evaluation" + suffix + "_results.csv"
        self.csv_headers = ["epoch", "steps"]
        self._append_csv_headers(self.score_function_names)
        self.write_predictions = write_predictions

    def _append_csv_headers(self, score_function_names: Sequence[str]) -> None:
        for score_name in score_function_names:
            for k in self.accuracy_at_k:
                self.csv_headers.append(f"{score_name}-Accuracy@{k}")
            for k in self.precision_recall_at_k:
                self.csv_headers.append(f"{score_name}-Precision@{k}")
                self.csv_headers.append(f"{score_name}-Recall@{k}")
            for k in self.mrr_at_k:
                self.csv_headers.append(f"{score_name}-MRR@{k}")
            for k in self.ndcg_at_k:
                self.csv_headers.append(f"{score_name}-NDCG@{k}")
            for k in self.map_at_k:
                self.csv_headers.append(f"{score_name}-MAP@{k}")

    def _model_score_functions(self, model: Any) -> dict[str, Any]:
        """The model's own similarity (sentence-transformers' default), "cosine" without one."""
        name = getattr(model, "similarity_fn_name", None) or "cosine"
        name = getattr(name, "value", name)  # a SimilarityFunction
        function = getattr(model, "similarity", None)
        if function is None:
            st = sentence_transformers_package()
            function = st.util.similarity.SimilarityFunction.to_similarity_fn(name)
        self._similarity_of = {name: engine_similarity(name, "the model's `similarity_fn_name`")}
        return {name: function}

    # ------------------------------------------------------------------ the call

    def __call__(
        self,
        model: Any,
        output_path: str | None = None,
        epoch: int = -1,
        steps: int = -1,
        *args: Any,
        **kwargs: Any,
    ) -> dict[str, float]:
        """Encode, rank and score; returns ``{name}_{score function}_{measure}@{k}`` -> value.

        ``output_path``: where the CSV file is appended (``write_csv``); ``epoch`` and ``steps``
        go into its row. Further arguments (``corpus_model``, ``corpus_embeddings``) are passed
        to :meth:`compute_all_metrics`.
        """
        if epoch != -1:
            out_txt = f" after epoch {epoch}" if steps == -1 else (
                f" in epoch {epoch} after {steps} steps")
        else:
            out_txt = ""
        if self.truncate_dim is not None:
            out_txt += f" (truncated to {self.truncate_dim})"
        logger.info(
            f"Information Retrieval Evaluation of the model on the {self.name} dataset{out_txt}:"
        )

        headers_changed = False
        if self._score_functions_from_model:
            # read at every call, so that an evaluator reused across models follows each one's
            # similarity (sentence-transformers 6.2)
            self.score_functions = self._model_score_functions(model)
            if self.score_function_names != sorted(self.score_functions):
                headers_changed = bool(self.score_function_names)
                self.score_function_names = sorted(self.score_functions)
                self.csv_headers = ["epoch", "steps"]
                self._append_csv_headers(self.score_function_names)
                self.primary_metric = None

        scores = self.compute_all_metrics(model, *args, output_path=output_path, **kwargs)

        if output_path is not None and self.write_csv:
            self._write_csv_row(output_path, scores, epoch, steps, headers_changed)

        if not self.primary_metric:
            largest = max(self.ndcg_at_k)
            if self.main_score_function is None:
                best = max(
                    [(n, scores[n]["ndcg@k"][largest]) for n in self.score_function_names],
                    key=lambda x: x[1],
                )[0]
                self.primary_metric = f"{best}_ndcg@{largest}"
            else:
                self.primary_metric = f"{self.main_score_function.value}_ndcg@{largest}"

        metrics = {
            f"{score_function}_{measure.replace('@k', '@' + str(k))}": value
            for score_function, per_measure in scores.items()
            for measure, values in per_measure.items()
            for k, value in values.items()
        }
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        if hasattr(model, "model_card_data"):
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def _write_csv_row(
        self, output_path: str, scores: dict[str, dict[str, dict[int, float]]], epoch: int,
        steps: int, headers_changed: bool,
    ) -> None:
        os.makedirs(output_path, exist_ok=True)
        csv_path = os.path.join(output_path, self.csv_file)
        new = not os.path.isfile(csv_path)
        if not new and headers_changed:
            logger.warning(
                f"{self.csv_file} was written with different score function columns, so the "
                f"rows appended for {self.score_function_names} are labeled with the previous "
                "score function."
            )
        row: list[Any] = [epoch, steps]
        for name in self.score_function_names:
            values = scores[name]
            row += [values["accuracy@k"][k] for k in self.accuracy_at_k]
            for k in self.precision_recall_at_k:
                row += [values["precision@k"][k], values["recall@k"][k]]
            row += [values["mrr@k"][k] for k in self.mrr_at_k]
            row += [values["ndcg@k"][k] for k in self.ndcg_at_k]
            row += [values["map@k"][k] for k in self.map_at_k]
        with open(csv_path, mode="w" if new else "a", encoding="utf-8") as out:
            if new:
                out.write(",".join(self.csv_headers) + "\n")
            out.write(",".join(map(str, row)) + "\n")

    # ------------------------------------------------------------------ encoding and ranking

    def embed_inputs(
        self,
        model: Any,
        sentences: Any,
        encode_fn_name: str | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The model's ``encode_query`` ("query"), ``encode_document`` ("document") or
        ``encode`` (None, or a model without the other two), called as sentence-transformers
        calls it (``convert_to_tensor=True``)."""
        encode = model.encode
        if encode_fn_name in ("query", "document"):
            encode = getattr(model, f"encode_{encode_fn_name}", encode)
        return encode(
            sentences,
            prompt_name=prompt_name,
            prompt=prompt,
            batch_size=self.batch_size,
            show_progress_bar=self.show_progress_bar,
            convert_to_tensor=True,
            truncate_dim=self.truncate_dim,
            **kwargs,
        )

    def _metric_names(self) -> list[str]:
        cutoffs = {
            "hit_rate": self.accuracy_at_k, "precision": self.precision_recall_at_k,
            "recall": self.precision_recall_at_k, "mrr": self.mrr_at_k, "ndcg": self.ndcg_at_k,
            "map": self.map_at_k,
        }
        return list(dict.fromkeys(f"{base}@{k}" for base, ks in cutoffs.items() for k in ks))

    def _corpus_places(self) -> list[int]:
        """Each corpus document's place in ``sorted(corpus_ids)``: the ids the ranking is given,
        so that ties="id" puts tied documents in sentence-transformers' order (ascending corpus
        id) whatever the ids' type, and ids of any type are compared as sentence-transformers
        compares them (Python's ``==``)."""
        try:
            order = sorted(range(len(self.corpus_ids)), key=self.corpus_ids.__getitem__)
        except TypeError as err:
            raise ValueError(
                "the corpus ids cannot be sorted (sentence-transformers orders tied documents "
                f"by ascending corpus id): {err}"
            ) from err
        places = [0] * len(order)
        for place, i in enumerate(order):
            places[i] = place
        return places

    def _qrels(self, places: list[int]) -> dict[int, list[int]]:
        """The judgments by place (:meth:`_corpus_places`): query i (of ``queries_ids``) -> the
        places of its relevant documents, and for each one the corpus lacks an id beyond the
        corpus (relevant, never retrieved)."""
        position = {cid: places[i] for i, cid in enumerate(self.corpus_ids)}
        absent = len(self.corpus_ids)
        qrels: dict[int, list[int]] = {}
        for i, qid in enumerate(self.queries_ids):
            docs = []
            try:
                for doc in self.relevant_docs[qid]:
                    if doc in position:
                        docs.append(position[doc])
                    else:
                        docs.append(absent)
                        absent += 1
            except TypeError as err:
                raise ValueError(
                    f"`relevant_docs[{qid!r}]` must be a collection of document ids: {err}"
                ) from err
            qrels[i] = list(dict.fromkeys(docs))
        return qrels

    def _log_absent_documents(self) -> None:
        """Log (once, at construction) where a query has none of its relevant documents in the
        corpus, or most relevant ids are not corpus ids: they count as relevant and never
        retrieved, as in sentence-transformers (such a query scores 0), but that usually means
        ids that do not meet (7 and '7', a prefix). The message names the user's ids."""
        corpus = set(self.corpus_ids)
        total, missing, zero_queries = 0, 0, 0
        examples: dict[bool, tuple[Any, Any]] = {}  # an absent id (of a zero query: True)
        for qid in self.queries_ids:
            try:
                docs = list(dict.fromkeys(self.relevant_docs[qid]))
                absent = [doc for doc in docs if doc not in corpus]
            except TypeError:
                return  # refused by name when the judgments are read (_qrels)
            total += len(docs)
            missing += len(absent)
            zero_queries += len(absent) == len(docs)
            if absent:
                examples.setdefault(len(absent) == len(docs), (absent[0], qid))
        if not examples or (zero_queries == 0 and 2 * missing <= total):
            return
        example = examples.get(True, examples.get(False))
        assert example is not None
        logger.warning(
            f"`relevant_docs`: {missing} of the {total} relevant document ids are not ids of "
            f"`corpus`, and {zero_queries} of the {len(self.queries_ids)} queries have none of "
            f"theirs in it (e.g. {example[0]!r}, relevant to query {example[1]!r}; corpus ids "
            f"e.g. {self.corpus_ids[0]!r}). They count as relevant and never retrieved, as in "
            "sentence-transformers: a query without any in the corpus scores 0 on every "
            "measure. Ids are compared with Python's ==: 7 and '7' are two ids"
        )

    def compute_all_metrics(
        self,
        model: Any,
        corpus_model: Any = None,
        corpus_embeddings: Any = None,
        output_path: str | None = None,
    ) -> dict[str, dict[str, dict[int, float]]]:
        """score function -> measure ("accuracy@k", "precision@k", "recall@k", "ndcg@k",
        "mrr@k", "map@k") -> cut-off -> value, as sentence-transformers returns it.

        ``corpus_model`` encodes the corpus (default ``model``); ``corpus_embeddings`` (one row
        per corpus document, in ``corpus`` order; a sparse tensor is made dense a chunk at a
        time) replaces encoding it. ``output_path`` is not read (no predictions file).
        """
        from retrieval_metrics.metrics.named import RetrievalMetrics

        if self.score_functions is None:
            self.score_functions = self._model_score_functions(model)
            self.score_function_names = sorted(self.score_functions)
        if corpus_model is None:
            corpus_model = model
        if corpus_embeddings is not None:
            rows = getattr(corpus_embeddings, "shape", None)
            rows = len(corpus_embeddings) if rows is None else rows[0]
            if rows != len(self.corpus):
                raise ValueError(
                    "`corpus_embeddings` must have one row per corpus document "
                    f"({len(self.corpus)}), got {rows}"
                )

        query_embeddings = dense_rows(
            self.embed_inputs(model, self.queries, encode_fn_name="query",
                              prompt_name=self.query_prompt_name, prompt=self.query_prompt),
            len(self.queries), "the model's query embeddings",
        )
        # one ranking per similarity, shared by the score functions that rank by it
        similarity = {
            name: resolved_similarity(name, self._similarity_of[name])
            for name in self.score_functions
        }
        places = self._corpus_places()
        qrels = self._qrels(places)
        # A query none of whose relevant documents is in the corpus scores 0 on every measure
        # in sentence-transformers (nothing relevant can be retrieved; recall, NDCG and MAP
        # still divide by its relevant count). The ranking refuses judgments that meet no
        # corpus document, so such queries are left out of it and counted as zeros in the
        # means below.
        scored = [i for i, docs in qrels.items() if any(d < len(places) for d in docs)]
        place_ids = torch.tensor(places, dtype=torch.int64)
        names = self._metric_names()
        rankers = {}
        for sim in dict.fromkeys(similarity.values()) if scored else ():
            metric = RetrievalMetrics(
                names, qrels={i: qrels[i] for i in scored}, protocol="sentence_transformers",
                similarity=sim, ignore_identical_ids=False, memory_budget=self.memory_budget,
                # every process encodes everything, as sentence-transformers' does: no gather
                sync_on_compute=False,
            )
            # (in this order: torchmetrics' .to() puts the results' dtype back to float32)
            metric.to(query_embeddings.device).set_dtype(torch.float64)
            rows = torch.tensor(scored, dtype=torch.int64)
            metric.update(
                query_embeddings[rows.to(query_embeddings.device)], ids=rows, role="query"
            )
            rankers[sim] = metric

        starts = range(0, len(self.corpus), self.corpus_chunk_size)
        if self.show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Corpus Chunks")
        for start in starts:
            stop = min(start + self.corpus_chunk_size, len(self.corpus))
            if corpus_embeddings is None:
                chunk = self.embed_inputs(
                    corpus_model, self.corpus[start:stop], encode_fn_name="document",
                    prompt_name=self.corpus_prompt_name, prompt=self.corpus_prompt,
                )
            elif isinstance(corpus_embeddings, Tensor) and corpus_embeddings.is_sparse:
                rows = torch.arange(start, stop, device=corpus_embeddings.device)
                chunk = corpus_embeddings.index_select(0, rows)
            else:
                chunk = corpus_embeddings[start:stop]
            chunk = dense_rows(chunk, stop - start, "the corpus embeddings")
            for metric in rankers.values():
                metric.update(chunk, ids=place_ids[start:stop], role="gallery")

        # the scored queries' means, over every query (the others score 0)
        share = len(scored) / len(self.queries)
        computed = {sim: dict.fromkeys(names, 0.0) for sim in similarity.values()}
        for sim, metric in rankers.items():
            with warnings.catch_warnings():
                # sentence-transformers' defaults (map@100) on a small corpus are routine
                warnings.filterwarnings("ignore", message=_WHOLE_GALLERY, category=UserWarning)
                # relevant ids the corpus lacks are routine here too (they count as never
                # retrieved, as in sentence-transformers); _log_absent_documents names them
                warnings.filterwarnings("ignore", message=_ABSENT, category=UserWarning)
                values = metric.compute().items()
            computed[sim] = {
                key: float(value) if share == 1 else float(value) * share for key, value in values
            }
        logger.info(f"Queries: {len(self.queries)}")
        logger.info(f"Corpus: {len(self.corpus)}\n")

        ks = {
            "accuracy@k": self.accuracy_at_k, "precision@k": self.precision_recall_at_k,
            "recall@k": self.precision_recall_at_k, "ndcg@k": self.ndcg_at_k,
            "mrr@k": self.mrr_at_k, "map@k": self.map_at_k,
        }
        scores = {
            name: {
                measure: {k: computed[similarity[name]][f"{base}@{k}"] for k in ks[measure]}
                for measure, base in MEASURES.items()
            }
            for name in self.score_functions
        }
        for name in self.score_function_names:
            logger.info(f"Score-Function: {name}")
            self.output_scores(scores[name])
        return scores

    # sentence-transformers' backwards-compatibility alias
    compute_metrices = compute_all_metrics

    def output_scores(self, scores: dict[str, dict[int, float]]) -> None:
        """Log one score function's values as sentence-transformers does."""
        for k, value in scores["accuracy@k"].items():
            logger.info(f"Accuracy@{k}: {value * 100:.2f}%")
        for k, value in scores["precision@k"].items():
            logger.info(f"Precision@{k}: {value * 100:.2f}%")
        for k, value in scores["recall@k"].items():
            logger.info(f"Recall@{k}: {value * 100:.2f}%")
        for k, value in scores["mrr@k"].items():
            logger.info(f"MRR@{k}: {value:.4f}")
        for k, value in scores["ndcg@k"].items():
            logger.info(f"NDCG@{k}: {value:.4f}")
        for k, value in scores["map@k"].items():
            logger.info(f"MAP@{k}: {value:.4f}")

    def get_config_dict(self) -> dict[str, Any]:
        """The configuration the model card shows (sentence-transformers' keys)."""
        keys = ["truncate_dim", "query_prompt", "query_prompt_name", "corpus_prompt",
                "corpus_prompt_name"]
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}
