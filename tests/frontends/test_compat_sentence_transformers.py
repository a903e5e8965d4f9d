"""retrieval_metrics.compat.sentence_transformers.InformationRetrievalEvaluator against the
installed sentence-transformers' own evaluator, on a fake model (no download).

The fake model's embeddings are Gaussian (a topic vector plus noise seeded by the text), so no two
scores tie; ties are the documented difference and have their own hand-worked test.
"""

from __future__ import annotations

import logging
import pickle
import sys
import warnings
import zlib

import numpy as np
import pytest
import torch

st = pytest.importorskip("sentence_transformers")
from sentence_transformers.base.evaluation.evaluator import BaseEvaluator  # noqa: E402
from sentence_transformers.base.evaluation.sequential import SequentialEvaluator  # noqa: E402
from sentence_transformers.sentence_transformer.evaluation import (  # noqa: E402
    InformationRetrievalEvaluator as Theirs,
)
from sentence_transformers.util import cos_sim, dot_score, euclidean_sim, manhattan_sim  # noqa: E402
from sentence_transformers.util.similarity import SimilarityFunction  # noqa: E402

import retrieval_metrics.compat  # noqa: E402
from emulated_cuda import fake_cuda_fixture, fake_mps_fixture, is_fake_cuda  # noqa: E402, F401
from retrieval_metrics.compat import sentence_transformers as compat  # noqa: E402
from retrieval_metrics.compat.sentence_transformers import (  # noqa: E402
    InformationRetrievalEvaluator as Ours,
)

TOPICS = 6


class _Card:
    """sentence-transformers' model card data: every call accepted, nothing kept."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class FakeModel:
    """encode / encode_query / encode_document from the text alone; the query and document
    sides differ (a side word), and a prompt is part of the text, so a wrong call shows."""

    model_card_data = _Card()

    def __init__(self, similarity_fn_name: str = "cosine", dim: int = 16) -> None:
        self.similarity_fn_name = similarity_fn_name
        self.similarity = SimilarityFunction.to_similarity_fn(similarity_fn_name)
        generator = torch.Generator().manual_seed(0)
        self.topics = torch.randn(TOPICS, dim, generator=generator)
        self.dim = dim
        self.calls: list[tuple[str, int, dict]] = []

    def _embed(self, side: str, texts, prompt=None, **kwargs) -> torch.Tensor:
        self.calls.append((side, len(texts), kwargs))
        rows = []
        for text in texts:
            full = f"{side}|{prompt or ''}|{text}"
            noise = torch.Generator().manual_seed(zlib.crc32(full.encode()))
            rows.append(self.topics[int(text.split()[1])] + torch.randn(self.dim, generator=noise))
        return torch.stack(rows)

    def encode(self, texts, **kwargs):
        return self._embed("any", texts, **kwargs)

    def encode_query(self, texts, **kwargs):
        return self._embed("query", texts, **kwargs)

    def encode_document(self, texts, **kwargs):
        return self._embed("document", texts, **kwargs)


def data(queries: int = 24, docs: int = 150):
    q = {f"q{i}": f"topic {i % TOPICS} question {i}" for i in range(queries)}
    c = {f"d{j:03d}": f"topic {j % TOPICS} passage {j}" for j in range(docs)}
    rel = {
        qid: {f"d{j:03d}" for j in range(docs) if j % TOPICS == i % TOPICS and (3 * j + i) % 4 == 0}
        for i, qid in enumerate(q)
    }
    rel["q1"] = rel["q1"] | {"not-in-corpus"}  # relevant, never retrieved
    rel["q2"] = {"gone-1", "gone-2"}  # nothing retrievable: scores 0
    rel["q3"] = set()  # left out
    del rel["q4"]  # left out
    return q, c, rel


SMALL_KS = dict(accuracy_at_k=[1, 3, 5, 10], precision_recall_at_k=[1, 3, 5, 10],
                mrr_at_k=[5, 10], ndcg_at_k=[3, 10], map_at_k=[5, 100])


def assert_same(theirs: dict, ours: dict) -> None:
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        assert type(ours[key]) is float, key
        assert ours[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


@pytest.mark.parametrize(
    ("similarity", "kwargs"),
    [
        ("cosine", {}),  # sentence-transformers' defaults, no name
        ("dot", dict(name="val", corpus_chunk_size=40, **SMALL_KS)),
        ("euclidean", dict(name="e", query_prompt="find: ", corpus_prompt="doc: ", **SMALL_KS)),
        ("cosine", dict(name="two", score_functions={"dot": dot_score, "cos": cos_sim},
                        corpus_chunk_size=64, **SMALL_KS)),
        ("cosine", dict(score_functions={"c": cos_sim}, main_score_function="dot",
                        accuracy_at_k=[2, 1], precision_recall_at_k=[200], ndcg_at_k=[7])),
    ],
)
def test_same_keys_values_and_primary_metric(similarity, kwargs, tmp_path):
    model = FakeModel(similarity)
    q, c, rel = data()
    kwargs = dict(kwargs, batch_size=8)
    theirs, ours = Theirs(q, c, rel, **kwargs), Ours(q, c, rel, **kwargs)
    for epoch, steps in ((-1, -1), (2, 50)):  # a second call appends a row
        expected = theirs(model, str(tmp_path / "theirs"), epoch, steps)
        got = ours(model, str(tmp_path / "ours"), epoch, steps)
        assert_same(expected, got)
        assert ours.primary_metric == theirs.primary_metric
        assert ours.score_function_names == theirs.score_function_names
    mine = (tmp_path / "ours" / ours.csv_file).read_text().splitlines()
    their = (tmp_path / "theirs" / theirs.csv_file).read_text().splitlines()
    assert ours.csv_file == theirs.csv_file and len(mine) == len(their) == 3
    assert mine[0] == their[0]
    for row in (1, 2):
        for a, b in zip(mine[row].split(","), their[row].split(","), strict=True):
            assert float(a) == pytest.approx(float(b), rel=1e-12, abs=1e-15)


def test_encode_calls_follow_sentence_transformers():
    q, c, rel = data()
    args = dict(corpus_chunk_size=50, batch_size=7, truncate_dim=8, show_progress_bar=False,
                query_prompt_name="query", corpus_prompt="passage: ")
    theirs_model, ours_model = FakeModel(), FakeModel()
    Theirs(q, c, rel, **args)(theirs_model)
    Ours(q, c, rel, **args)(ours_model)
    assert ours_model.calls == theirs_model.calls
    assert [(side, n) for side, n, _ in ours_model.calls] == [
        ("query", 22), ("document", 50), ("document", 50), ("document", 50)]


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_corpus_embeddings_and_corpus_model():
    q, c, rel = data()
    model, other = FakeModel(), FakeModel(dim=16)
    other.topics = other.topics.flip(0)
    emb = other.encode_document(list(c.values()))
    for call in ({"corpus_model": other}, {"corpus_embeddings": emb},
                 {"corpus_embeddings": emb.to_sparse()}):
        expected = Theirs(q, c, rel, corpus_chunk_size=45)(model, **call)
        assert_same(expected, Ours(q, c, rel, corpus_chunk_size=45)(model, **call))
    with pytest.raises(ValueError, match="`corpus_embeddings` must have one row per corpus"):
        Ours(q, c, rel)(model, corpus_embeddings=emb[:-1])


def test_an_evaluator_reused_follows_each_models_similarity():
    q, c, rel = data()
    theirs, ours = Theirs(q, c, rel, name="r"), Ours(q, c, rel, name="r")
    for similarity in ("cosine", "dot", "dot"):
        model = FakeModel(similarity)
        assert_same(theirs(model), ours(model))
        assert ours.primary_metric == theirs.primary_metric == f"r_{similarity}_ndcg@10"


def test_a_sentence_transformers_evaluator_for_its_trainer_and_sequential_evaluator():
    q, c, rel = data()
    ours = Ours(q, c, rel, name="ours")
    assert isinstance(ours, BaseEvaluator) and isinstance(ours, Ours)
    assert type(ours).__qualname__ == "InformationRetrievalEvaluator"
    assert ours.description == "Information Retrieval"
    sequence = SequentialEvaluator([ours, Theirs(q, c, rel, name="theirs")])
    results = sequence(FakeModel())
    assert results["sequential_score"] == pytest.approx(results["theirs_cosine_ndcg@10"])
    assert results["ours_cosine_ndcg@10"] == pytest.approx(results["theirs_cosine_ndcg@10"])
    copy = pickle.loads(pickle.dumps(ours))
    assert isinstance(copy, BaseEvaluator) and copy.primary_metric == ours.primary_metric
    assert copy(FakeModel()) == ours(FakeModel())


def test_hand_checked(caplog):
    """The module's example, every measure by hand. Cosines: q1 ("a cat") ranks d1 (1), d3
    (1/sqrt 2), then d2 and d4 (0); its relevant d3 is 2nd. q2 ("a dog and a fish") ranks d4 (1),
    d2 (1/sqrt 2), d3 (1/2), d1 (0); its relevant d4 and d2 are 1st and 2nd."""

    class Model:  # only `encode`: no similarity_fn_name (cosine), no model card
        def encode(self, texts, **kwargs):
            return torch.tensor([[float(w in t) for w in ("cat", "dog", "fish")] for t in texts])

    evaluator = Ours(
        queries={"q1": "a cat", "q2": "a dog and a fish", "q3": "a bird"},
        corpus={"d1": "cat", "d2": "dog", "d3": "cat fish", "d4": "dog fish"},
        relevant_docs={"q1": {"d3"}, "q2": {"d2", "d4"}},
        name="toy", accuracy_at_k=[1], precision_recall_at_k=[1, 2], mrr_at_k=[10],
        ndcg_at_k=[10], map_at_k=[1, 10],
    )
    with caplog.at_level(logging.INFO, logger=compat.__name__):
        results = evaluator(Model())
    ndcg_q1 = 1 / torch.log2(torch.tensor(3.0, dtype=torch.float64)).item()
    assert results == pytest.approx({
        "toy_cosine_accuracy@1": 0.5,
        "toy_cosine_precision@1": 0.5,
        "toy_cosine_precision@2": (1 / 2 + 2 / 2) / 2,
        "toy_cosine_recall@1": (0 + 1 / 2) / 2,
        "toy_cosine_recall@2": 1.0,
        "toy_cosine_ndcg@10": (ndcg_q1 + 1) / 2,
        "toy_cosine_mrr@10": (1 / 2 + 1) / 2,
        "toy_cosine_map@1": (0 + 1 / 1) / 2,  # divided by min(m, K)
        "toy_cosine_map@10": (1 / 2 + 1) / 2,
    }, rel=1e-12)
    assert next(iter(results)) == "toy_cosine_accuracy@1"
    assert evaluator.queries_ids == ["q1", "q2"]  # q3 has no relevant documents
    assert "Queries: 2" in caplog.text and "NDCG@10: 0.8155" in caplog.text


def test_ties_follow_sentence_transformers_corpus_id_order():
    """Two documents tie; the relevant one, "b", comes second by id: sentence-transformers 6.x
    gives accuracy@1 = 0 and MRR 1/2, and so does the compat evaluator (ties="id"; the
    expected value over the two orders would be 1/2 and 3/4)."""

    class Model(FakeModel):
        def _embed(self, side, texts, **kwargs):
            return torch.tensor([[1.0, 0.0] if "x" in t else [0.0, 1.0] for t in texts])

    args = ({"q": "x"}, {"b": "x", "a": "x", "c": "y"}, {"q": {"b"}})
    kw = dict(accuracy_at_k=[1, 2], precision_recall_at_k=[1], mrr_at_k=[10], ndcg_at_k=[10],
              map_at_k=[10])
    theirs, ours = Theirs(*args, **kw)(Model()), Ours(*args, **kw)(Model())
    assert theirs["cosine_accuracy@1"] == ours["cosine_accuracy@1"] == 0.0
    assert theirs["cosine_mrr@10"] == ours["cosine_mrr@10"] == 0.5
    assert_same(theirs, ours)


class DuplicateTexts(FakeModel):
    """Equal texts get equal rows (the duplicates tie bit for bit), different texts a few
    coordinates from {-1, 0, 1}: many exact ties, between documents and across topics."""

    def _embed(self, side, texts, **kwargs):
        rows = []
        for text in texts:
            g = torch.Generator().manual_seed(zlib.crc32(text.encode()))
            row = torch.randint(-1, 2, (4,), generator=g).float()
            row[0] += float(row.abs().sum() == 0)
            rows.append(row)
        return torch.stack(rows)


def test_metrics_are_independent_of_corpus_chunk_size():
    """sentence-transformers' own test of its tie order (test_metrics_are_independent_of_
    corpus_chunk_size, which needs a model download), with a model that needs none: 20 equal
    documents, ranked by ascending corpus id in every chunking; only q0 finds its d00 first."""
    queries = {"q0": "What is the capital of France?", "q1": "Who painted the Mona Lisa?"}
    corpus = {f"d{idx:02d}": "Paris is the capital of France." for idx in range(20)}
    relevant_docs = {"q0": {"d00", "d15"}, "q1": {"d07"}}
    kw = dict(name="chunked", batch_size=4, accuracy_at_k=[1, 5], precision_recall_at_k=[1, 5],
              mrr_at_k=[10], ndcg_at_k=[10], map_at_k=[10], write_csv=False)
    results = {}
    for size in (4, 8, 20, 50):
        args = (queries, corpus, relevant_docs)
        theirs = Theirs(*args, corpus_chunk_size=size, **kw)(DuplicateTexts())
        results[size] = Ours(*args, corpus_chunk_size=size, **kw)(DuplicateTexts())
        assert_same(theirs, results[size])
    assert all(r == results[50] for r in results.values())
    assert results[50]["chunked_cosine_accuracy@1"] == 0.5


@pytest.mark.parametrize("ids", ["str", "int"])
def test_tie_heavy_corpus_equals_sentence_transformers(ids):
    """Texts drawn from a few, so that most scores tie, also relevant with relevant: every
    value equal to sentence-transformers' evaluator, for str ids (code point order: "d10"
    before "d9") and int ids (by value)."""
    g = torch.Generator().manual_seed(3)
    texts = [f"text {int(t)}" for t in torch.randint(0, 12, (90,), generator=g)]
    names = [f"d{j}" for j in range(90)] if ids == "str" else [7 * j % 97 for j in range(90)]
    corpus = dict(zip(names, texts, strict=True))
    queries = {f"q{i}": f"text {i % 12}" for i in range(15)}
    picks = torch.randint(0, 90, (15, 4), generator=g).tolist()
    relevant_docs = {f"q{i}": {names[j] for j in row} for i, row in enumerate(picks)}
    kw = dict(corpus_chunk_size=32, **SMALL_KS)
    theirs = Theirs(queries, corpus, relevant_docs, **kw)(DuplicateTexts())
    assert_same(theirs, Ours(queries, corpus, relevant_docs, **kw)(DuplicateTexts()))


def test_a_cutoff_listed_twice_counts_once():
    """sentence-transformers adds a query's hit (and reciprocal rank) once per listing of K in
    `accuracy_at_k` (`mrr_at_k`), so accuracy@1 listed twice reaches 2; here it counts once."""
    q, c, rel = data()
    kw = dict(accuracy_at_k=[1, 1], mrr_at_k=[10, 10])
    theirs, ours = Theirs(q, c, rel, **kw)(FakeModel()), Ours(q, c, rel, **kw)(FakeModel())
    once = Ours(q, c, rel)(FakeModel())
    assert list(ours) == list(theirs)
    for key in ("cosine_accuracy@1", "cosine_mrr@10"):
        assert theirs[key] == pytest.approx(2 * ours[key]) and ours[key] == once[key]


class _Table:
    """encode looks each text up in a table of embeddings (cosine)."""

    model_card_data = _Card()
    similarity_fn_name = "cosine"
    similarity = staticmethod(cos_sim)

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode(self, texts, **kwargs):
        return torch.tensor([self.table[t] for t in texts])

    encode_query = encode_document = encode


def test_queries_whose_relevant_documents_are_all_absent_score_zero(caplog):
    """By hand: q1's only relevant id is '1' (a str) and the corpus ids are ints 1, 2, 3, so it
    is never retrieved: sentence-transformers scores q1 0 on every measure. q2's relevant d=2
    is ranked first (cosine 1), so q2 scores 1 on every measure (recall@1 1/1). The values are
    their mean over both queries: 1/2; with q1 alone, 0."""
    table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.6, 0.8]}
    corpus = {1: "a", 2: "b", 3: "c"}
    queries = {"q1": "a", "q2": "b"}
    kw = dict(accuracy_at_k=[1], precision_recall_at_k=[1], mrr_at_k=[10], ndcg_at_k=[10],
              map_at_k=[10])
    for relevant, value in (({"q1": {"1"}, "q2": {2}}, 0.5), ({"q1": {"1"}}, 0.0),
                            ({"q1": {"d99"}}, 0.0)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=compat.__name__), warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning from the ranking either
            ours = Ours(queries, corpus, relevant, **kw)(_Table(table))
        theirs = Theirs(queries, corpus, relevant, **kw)(_Table(table))
        assert_same(theirs, ours)
        assert set(ours.values()) == {value}
        # named by the user's ids, and 7 and '7' are two ids here
        message = caplog.text
        assert "`relevant_docs`" in message and "two ids" in message
        assert repr(next(iter(relevant["q1"]))) in message and "corpus ids e.g. 1" in message


def test_a_minority_of_absent_documents_counts_as_never_retrieved():
    """By hand: q1's relevant ids are 1 (ranked first) and 'x' (not in the corpus): recall@1
    is 1/2, NDCG@10 is 1 / (1 + 1/log2(3)), MAP@10 is 1 / min(10, 2); the ranking's own
    warning about absent documents is not shown (sentence-transformers shows none)."""
    table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.6, 0.8]}
    corpus = {1: "a", 2: "b", 3: "c"}
    relevant = {"q1": {1, "x", "y"}}
    kw = dict(accuracy_at_k=[1], precision_recall_at_k=[1], mrr_at_k=[10], ndcg_at_k=[10],
              map_at_k=[10])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = Ours({"q1": "a"}, corpus, relevant, **kw)(_Table(table))
    theirs = Theirs({"q1": "a"}, corpus, relevant, **kw)(_Table(table))
    assert_same(theirs, ours)
    idcg = 1 + 1 / torch.log2(torch.tensor(3.0, dtype=torch.float64)).item() + 1 / 2
    assert ours["cosine_recall@1"] == pytest.approx(1 / 3)
    assert ours["cosine_ndcg@10"] == pytest.approx(1 / idcg)
    assert ours["cosine_map@10"] == pytest.approx(1 / 3)


def test_cutoffs_as_sentence_transformers_takes_them():
    """numpy ints, sets and numpy arrays are K lists there; they give the values of plain
    ints. Bools and non-integers are refused by name."""
    q, c, rel = data()
    plain = Ours(q, c, rel, ndcg_at_k=[1, 2, 3], mrr_at_k=[10])(FakeModel())
    for kw in (dict(ndcg_at_k=[np.int64(1), np.int64(2), np.int64(3)], mrr_at_k={10}),
               dict(ndcg_at_k=np.arange(1, 4), mrr_at_k=(np.int32(10),))):
        ours = Ours(q, c, rel, **kw)(FakeModel())
        assert ours == plain
        assert_same(Theirs(q, c, rel, **kw)(FakeModel()), ours)
    for k, message in (([True], r"`ndcg_at_k` must hold positive ints, got the bool True"),
                       ([np.bool_(True)], "got the bool"),
                       ([np.float64(3.0)], r"got np.float64\(3.0\) \(float64\)"),
                       ([2.0], r"got 2.0 \(float\)"), ([np.int64(0)], "positive ints"),
                       ("10", "non-empty list"), (10, "non-empty list")):
        with pytest.raises(ValueError, match=message):
            Ours(q, c, rel, ndcg_at_k=k)


def test_refused_by_name():
    q, c, rel = data()
    cases = [
        (dict(score_functions={"mine": lambda a, b: a @ b.T}), r"`score_functions\['mine'\]`"),
        (dict(score_functions={"l1": manhattan_sim}), r"`score_functions\['l1'\]`.*Manhattan"),
        (dict(score_functions={}), "`score_functions` must be a non-empty dict"),
        (dict(write_predictions=True), "write_predictions=True is not supported"),
        (dict(map_at_k=[]), "`map_at_k` must be a non-empty list"),
        (dict(ndcg_at_k=[10, 0]), "`ndcg_at_k` must hold positive ints"),
        (dict(accuracy_at_k=[1.5]), "`accuracy_at_k` must hold positive ints"),
        (dict(corpus_chunk_size=0), "`corpus_chunk_size` must be a positive int"),
        (dict(batch_size=True), "`batch_size` must be a positive int"),
        (dict(main_score_function="jaccard"), "`main_score_function`"),
        (dict(memory_budget=10), "`memory_budget`"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            Ours(q, c, rel, **kwargs)
    with pytest.raises(ValueError, match="no query of `queries` has relevant documents"):
        Ours(q, c, {"q0": set()})
    # a str for one document: its characters were read as ids ('d', '1'), scoring 0 silently
    with pytest.raises(ValueError, match=r"`relevant_docs\['q0'\]` must be a collection of "
                       r"document ids, got the str 'd1': write \{'d1'\}"):
        Ours(q, c, {"q0": "d1"})
    with pytest.raises(ValueError, match="`corpus` is empty"):
        Ours(q, {}, rel)
    with pytest.raises(ValueError, match="`queries` must be a dict"):
        Ours(list(q.values()), c, rel)
    with pytest.raises(ValueError, match="the model's `similarity_fn_name` is 'manhattan'"):
        Ours(q, c, rel)(FakeModel("manhattan"))
    class Model(FakeModel):
        def similarity(self, a, b):  # a method, as SentenceTransformer.similarity
            return SimilarityFunction.to_similarity_fn(self.similarity_fn_name)(a, b)

    model = Model("dot")  # a model's own similarity method follows its similarity_fn_name
    del model.similarity  # (FakeModel sets an attribute)
    both_named = Ours(q, c, rel, score_functions={"mine": model.similarity, "e": euclidean_sim})
    assert set(both_named(model)) >= {"mine_ndcg@10", "e_ndcg@10"}
    model.similarity_fn_name = "manhattan"
    with pytest.raises(ValueError, match=r"`score_functions\['mine'\]` \(a model's similarity\)"):
        both_named(model)


def test_without_sentence_transformers_the_module_imports_and_says_how_to_install(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "sentence_transformers"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    monkeypatch.delitem(sys.modules, compat.__name__)
    monkeypatch.setattr(retrieval_metrics.compat, "sentence_transformers", compat)  # put back
    import retrieval_metrics.compat.sentence_transformers as fresh

    with pytest.raises(ImportError, match=r"retrieval-metrics\[sentence-transformers\]"):
        fresh.InformationRetrievalEvaluator(*data())


@pytest.mark.parametrize("device", ["fake_cuda", "fake_mps"])
def test_on_a_cuda_device(device, request):
    """On a device, and on one without float64 (Apple's MPS: the evaluator's float64 results
    are made on the host)."""
    request.getfixturevalue(device)

    class Model(FakeModel):
        def _embed(self, side, texts, **kwargs):
            return super()._embed(side, texts, **kwargs).to("cuda")

    q, c, rel = data()
    expected = Ours(q, c, rel)(FakeModel())
    model = Model()
    assert is_fake_cuda(model.encode_query(["topic 1 x"]))
    assert Ours(q, c, rel)(model) == pytest.approx(expected, rel=1e-12)
