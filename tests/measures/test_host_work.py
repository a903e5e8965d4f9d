"""The work of the measures on the host, counted (not timed). Image-text's measures at 25,000
queries (hit rates, median and mean rank, both directions) cost a few milliseconds on the host
after the ranking, which on a GPU is what stands beside a product of about 3 ms. A boolean mask
the size of the queries (a search of every entry, then a copy) cost more there than the
measure it fed; where nothing is tied and every query is answerable, none is searched. And what
the measures of one call read alike (the queries with nothing relevant, each query's first
group) is made once, not once a measure. SOP's measures (same source, classes of 2 to 12)
likewise share what they read, and MAP@R's precision sums take as many operations for large
classes as for small."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from torch.overrides import TorchFunctionMode

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.ranking import rank_embeddings

IMAGE_TEXT = ["hit_rate@1", "hit_rate@5", "hit_rate@10", "median_rank", "mean_rank"]


class SizedCalls(TorchFunctionMode):
    """Records the name of each call that :meth:`counts` picks, for tensors of ``size``
    entries (the queries)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self.seen: list[str] = []

    def counts(self, name: str, args: tuple) -> bool:
        raise NotImplementedError

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.counts(name, args):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


class MaskSearches(SizedCalls):
    """Each index or assignment through a boolean mask of at least ``size`` entries."""

    def counts(self, name: str, args: tuple) -> bool:
        if name not in ("__getitem__", "__setitem__") or len(args) < 2:
            return False
        keys = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(key, torch.Tensor) and key.dtype == torch.bool
                   and key.numel() >= self.size for key in keys)


class Repeats(TorchFunctionMode):
    """Counts the selections and comparisons made twice on the same tensors with the same
    arguments (the tensors are held, so that no id is reused)."""

    KINDS = frozenset(
        {"index_select", "__eq__", "__ne__", "__gt__", "__ge__", "__lt__", "__le__",
         "eq", "ne", "gt", "ge", "lt", "le"}
    )

    def __init__(self) -> None:
        super().__init__()
        self.held: list[object] = []
        self.calls: dict[tuple, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.KINDS:
            operands = [*args, *(kwargs or {}).values()]
            self.held.extend(operands)
            key = (name, *(id(x) if isinstance(x, torch.Tensor) else repr(x) for x in operands))
            self.calls[key] = self.calls.get(key, 0) + 1
        return func(*args, **(kwargs or {}))

    def repeated(self) -> list[tuple[str, int]]:
        return [(key[0], n) for key, n in self.calls.items() if n > 1]


def image_text_tables(images: int = 300, per_image: int = 5):
    """Both directions of an image-text ranking with random embeddings (no tie)."""
    gen = torch.Generator().manual_seed(0)
    img = torch.randn(images, 32, generator=gen)
    caption_image = torch.arange(images).repeat_interleave(per_image)
    cap = img[caption_image] + torch.randn(images * per_image, 32, generator=gen)
    i2t = rank_embeddings(img, cap, query_labels=torch.arange(images),
                          gallery_labels=caption_image)
    t2i = rank_embeddings(cap, img, query_labels=caption_image,
                          gallery_labels=torch.arange(images))
    return {"i2t": i2t, "t2i": t2i}


def test_image_text_measures_search_no_mask_the_size_of_the_queries():
    for direction, table in image_text_tables().items():
        assert bool((table.tied == 1).all()), "the case is meant to hold no tie"
        with MaskSearches(table.num_queries) as spy:
            values = M.retrieval_measures(table, IMAGE_TEXT)
        assert spy.seen == [], (direction, spy.seen)
        # the values those paths give are the masked paths' (hand-checked against ranks here)
        first = M.first_rank_per_query(table)
        for k in (1, 5, 10):
            assert float(values[f"hit_rate@{k}"]) == float((first <= k).double().mean())
        assert float(values["mean_rank"]) == float(first.mean())


def test_the_median_still_drops_the_unanswerable_queries():
    """With NaN per-query ranks (queries with nothing relevant) the mask is needed, and taken:
    the median is that of the other ranks (worked out here from the sorted list)."""
    first = M.first_rank_per_query(image_text_tables()["t2i"])
    ranks = first.clone()
    ranks[::7] = torch.nan
    kept = sorted(first[[i for i in range(first.numel()) if i % 7]].tolist())
    n = len(kept)
    assert float(M.median_rank(ranks, "plain")) == (kept[(n - 1) // 2] + kept[n // 2]) / 2


def test_the_measures_of_one_call_make_what_they_share_once():
    """Three hit rates, median and mean rank: the mask of the queries with nothing relevant is
    found once a table (every measure fills or drops them), and each query's first group is
    selected once (each hit rate and the first ranks read it). Before, each measure made its
    own: 8 comparisons of ``num_relevant`` with 0 and 16 selections of the first groups a
    table."""
    for direction, table in image_text_tables().items():
        with Repeats() as spy:
            M.retrieval_measures(table, IMAGE_TEXT)
        assert spy.repeated() == [], (direction, spy.repeated())
        assert spy.calls, "the spy saw the measures' work"


class Scatters(SizedCalls):
    """Each copy or sum by an index into a tensor of ``size`` entries."""

    def counts(self, name: str, args: tuple) -> bool:
        return name in ("index_copy_", "index_copy", "index_add_", "index_add") and (
            args[0].numel() == self.size
        )


def test_a_value_for_every_query_is_not_scattered_over_the_queries():
    """Every query of an image-text table has a relevant item, so each hit rate's and the first
    ranks' values, one a query's first group, are already one a query, in order: nothing is
    copied by index into a tensor of the queries (a copy of every entry, the largest single
    operation of these measures before). With a query left without relevant items the values
    are spread over the queries, and that query reads NaN, the others their values."""
    for direction, table in image_text_tables().items():
        with Scatters(table.num_queries) as spy:
            values = M.retrieval_measures(table, IMAGE_TEXT)
        assert spy.seen == [], (direction, spy.seen)
        assert float(values["hit_rate@10"]) > 0
    gen = torch.Generator().manual_seed(1)
    query, gallery = torch.randn(40, 8, generator=gen), torch.randn(200, 8, generator=gen)
    labels = torch.arange(200) % 40
    whole = rank_embeddings(query, gallery, query_labels=torch.arange(40), gallery_labels=labels)
    lacking = torch.arange(40)
    lacking[4] = 1000  # no gallery item has it
    table = rank_embeddings(query, gallery, query_labels=lacking, gallery_labels=labels)
    with Scatters(table.num_queries) as spy:
        hits, first = M.hit_rate_per_query(table, 5), M.first_rank_per_query(table)
    assert spy.seen == ["index_copy_", "index_copy_"]
    others = lacking != 1000
    for got, want in ((hits, M.hit_rate_per_query(whole, 5)),
                      (first, M.first_rank_per_query(whole))):
        assert bool(got[4].isnan())
        assert torch.equal(got[others], want[others])


SOP = ["hit_rate@1", "hit_rate@10", "map@r", "r_precision"]


def same_source_table(largest_class: int, noise: float):
    """A same-source ranking as SOP's: 600 items in classes of 2 to ``largest_class``, listed as
    the metric classes list them (every relevant item, and the top 10)."""
    gen = torch.Generator().manual_seed(2)
    sizes = torch.randint(2, largest_class + 1, (600,), generator=gen)
    labels = torch.repeat_interleave(torch.arange(600), sizes)[:600]
    centres = torch.nn.functional.normalize(torch.randn(600, 16, generator=gen))
    emb = centres[labels] + noise * torch.randn(600, 16, generator=gen)
    return rank_embeddings(emb, query_labels=labels, cover_relevant=True, depth=10)


class AllCalls(TorchFunctionMode):
    """Counts every torch call."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_sop_measures_make_what_they_share_once():
    for noise in (0.1, 1.0):
        table = same_source_table(12, noise)
        with Repeats() as spy:
            values = M.retrieval_measures(table, SOP)
        assert spy.repeated() == [], (noise, spy.repeated())
        assert 0 < float(values["map@r"]) < 1


@pytest.mark.skipif(T._ties is None, reason="_ties.c is not built here")
def test_map_at_r_makes_as_many_operations_for_large_classes_as_for_small():
    """MAP@R's precision sums are one compiled pass (``_ties.precision_sums``): the torch
    operations of a call are as many with classes of up to 12 items as of up to 6, for a strong
    and a weak model. The torch path adds a term a position over a loop as long as the longest
    group (some 16 operations more per extra position): the count grows with the classes."""
    counts = {}
    for largest in (6, 12):
        for noise in (0.1, 1.0):
            table = same_source_table(largest, noise)
            with AllCalls() as spy:
                M.retrieval_measures(table, ["map@r"])
            counts[largest, noise] = spy.count
    assert counts[6, 0.1] == counts[12, 0.1] and counts[6, 1.0] == counts[12, 1.0], counts
    saved = T._ties
    try:
        T._ties = None
        torch_counts = []
        for largest in (6, 12):
            with AllCalls() as spy:
                M.retrieval_measures(same_source_table(largest, 1.0), ["map@r"])
            torch_counts.append(spy.count)
    finally:
        T._ties = saved
    assert torch_counts[1] > torch_counts[0], torch_counts


def _harmonic(n: int) -> Fraction:
    return sum((Fraction(1, i) for i in range(1, n + 1)), Fraction(0))


def test_collapsed_embeddings_sum_each_distinct_tie_group_once(monkeypatch):
    """Collapsed embeddings tie every item with every other: each query's first and last
    relevant item lie in one group of the whole gallery at the top, which MRR and mINP average
    over term by term (a term a position). Queries of one class size have the same group, so
    the terms are summed once a class size, not once a query (they were queries x gallery:
    140 s at 20,000 items). The values against closed forms derived by hand: the first of r
    relevant among t tied positions gives E[1 / X] = r (H_t - H_{r-1}) / (t - r + 1) (the sum
    of C(t - x, r - 1) / x over x is C(t, r - 1) (H_t - H_{r-1})), and the last
    E[1 / Y] = sum over y of C(y - 1, r - 1) / (y C(t, r))."""
    sizes = [2] * 40 + [3] * 45 + [7] * 35  # 460 items: classes of 2, 3 and 7
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    n = labels.numel()
    table = rank_embeddings(torch.ones(n, 4), query_labels=labels)
    summed = []
    original = T._ragged_sums

    def recording(t, *rest):
        summed.append(t.numel())
        return original(t, *rest)

    monkeypatch.setattr(T, "_ragged_sums", recording)
    values = M.retrieval_measures(table, ["mrr", "minp"], ties="expected")
    assert summed == [2, 2]  # classes of 3 and of 7 (r = 2 and 6; r = 1 is a harmonic sum)
    t = n - 1
    mrr, minp = Fraction(0), Fraction(0)
    for size in set(sizes):
        queries, r = size * sizes.count(size), size - 1
        mrr += queries * Fraction(r, t - r + 1) * (_harmonic(t) - _harmonic(r - 1))
        last = sum(
            (Fraction(math.comb(y - 1, r - 1), y * math.comb(t, r)) for y in range(r, t + 1)),
            Fraction(0),
        )
        minp += queries * r * last
    assert float(values["mrr"]) == pytest.approx(float(mrr / n), rel=1e-12)
    assert float(values["minp"]) == pytest.approx(float(minp / n), rel=1e-12)
