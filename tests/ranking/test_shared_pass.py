"""Same source on several processes: the symmetric pass's block pairs are shared out.

Every process holds the whole set after the state sync; each computes every ``world``-th block
pair of the half product, counts it for both of its sides, and the counts are summed. These tests
run 1, 2 and 3 real gloo processes (tests/distributed/shared_pass.py) and check that every
process gets one process's values and tables, while computing its share of the products only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from distributed import launch

HERE = Path(__file__).resolve().parents[1] / "distributed"
_RUNS: dict[int, list[dict]] = {}


def runs(world: int, tmp_path_factory) -> list[dict]:
    if world not in _RUNS:
        tmp = tmp_path_factory.mktemp(f"shared{world}")
        _RUNS[world] = launch.run_workers(HERE / "shared_pass.py", [], world, tmp)
    return _RUNS[world]


def _listed_agree(got: dict, want: dict) -> None:
    """With a depth, processes may list more relevant items than one process (each raises its
    threshold from the pairs it saw): a query's items are listed best first, so one list is a
    prefix of the other, with the same counts; the values are the same."""
    assert got["values"] == want["values"]
    for name in ("num_relevant", "gallery_size", "depth"):
        assert got[name] == want[name], name
    for q in range(len(want["ptr"]) - 1):
        a = slice(got["ptr"][q], got["ptr"][q + 1])
        b = slice(want["ptr"][q], want["ptr"][q + 1])
        n = min(a.stop - a.start, b.stop - b.start)
        for field in ("above", "tied"):
            assert got[field][a][:n] == want[field][b][:n], (q, field)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_every_process_gets_one_process_values(world, tmp_path_factory):
    single = runs(1, tmp_path_factory)[0]
    for rank, got in enumerate(runs(world, tmp_path_factory)):
        assert got["class"]["values"] == single["class"]["values"], rank
        assert got["class"]["per_query"] == single["class"]["per_query"], rank
        assert got["full"]["table"] == single["full"]["table"], rank
        assert got["euclidean"]["table"] == single["euclidean"]["table"], rank
        _listed_agree(got["depth"]["table"], single["depth"]["table"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_each_process_computes_its_share_of_the_products(world, tmp_path_factory):
    single = runs(1, tmp_path_factory)[0]
    # 8 square blocks of 192: the 36 pairs of the half product, each computed once, through the
    # functional layer and through the metric class (the symmetric pass whatever the classes'
    # sizes, here drawn at random)
    assert single["full"]["products"] == 36
    assert single["class"]["products"] == 36
    for case in ("class", "depth", "full"):
        shares = [got[case]["products"] for got in runs(world, tmp_path_factory)]
        assert sum(shares) == single[case]["products"], (case, shares)
        assert max(shares) <= -(-single[case]["products"] // world), (case, shares)
    # the one-sided pass (euclidean): each process its share of the query blocks
    shares = [got["euclidean"]["products"] for got in runs(world, tmp_path_factory)]
    assert sum(shares) == single["euclidean"]["products"]
    assert max(shares) < single["euclidean"]["products"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_query_gallery_shares_its_products_over_processes(world, tmp_path_factory):
    """Queries against a gallery through the class, on ``world`` processes: gathered, each
    process ranks its share of the queries against the whole gallery, about ``1 / world`` of one
    product (query rows padded to a multiple of 8); sharded, each process its shard against
    every query, in two passes over the shard at most (the relevant scores it holds, exchanged;
    then the counting), and on one process one product (its shard is the whole gallery). One
    process's values either way."""
    from distributed.shared_pass import DIM, GALLERY, QUERIES

    single = runs(1, tmp_path_factory)[0]
    product = QUERIES * GALLERY * DIM
    for case, passes in (("query_gallery", 1), ("sharded", 2)):
        assert single[case]["multiply_adds"] <= 1.02 * product, case
        for rank, got in enumerate(runs(world, tmp_path_factory)):
            assert got[case]["values"] == pytest.approx(single[case]["values"], abs=1e-6)
            share = got[case]["multiply_adds"] / product
            assert share <= (passes + 0.05) / world, (case, rank, share)
