"""Brute-force reference implementation of the metrics of docs/definitions.md.

This module is the oracle the fast implementation is tested against. It is written from the
definitions only, as plainly as possible: Python loops, full sorts and ``itertools`` enumeration,
float64 everywhere. It never imports the library under test. Nothing here is meant to be fast;
the enumerating functions raise when a case would need more than ``MAX_ORDERINGS`` orderings, so
that tests keep their cases small.

Public functions
----------------
- ``reference_scores``: the (Q, N) score matrix (larger is better).
- ``reference_masks``: per-query relevant and excluded boolean matrices (the Terms).
- ``reference_ordered``: every per-query metric for one complete ordering (0/1 relevance list).
- ``reference_query``: one query from scores, with ties "optimistic", "pessimistic" or
  "expected" (exact average over every permutation of every tie group).
- ``reference_median_rank``: the median rank, VSE++ or plain convention.
- ``reference_chance``: expected metric values under a uniformly random ranking.
- ``reference_ranked_list``: one RAG-style ranked list of ids against a set/dict of relevant ids.
- ``reference_top_k``: each query's k best gallery items by exact dot products, ties by a key.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np

#: The cut-offs K for which every "@K" key of ``reference_ordered`` is computed.
KS = (1, 2, 3, 4, 5, 8, 10, 20)

#: Largest number of orderings / placements the enumerating functions accept.
MAX_ORDERINGS = 200_000


# --------------------------------------------------------------------------------------------
# 1. Scores
# --------------------------------------------------------------------------------------------


def reference_scores(query_emb, gallery_emb, similarity):
    """Return the (Q, N) float64 score matrix between queries and gallery items (larger = better).

    ``similarity``:
    - ``"cosine"``: dot product of L2-normalised rows (a zero vector stays zero, so it scores 0
      against everything);
    - ``"dot"``: plain dot product;
    - ``"euclidean"``: minus the Euclidean distance.
    Computed pair by pair with Python loops.
    """
    queries = np.asarray(query_emb, dtype=np.float64)
    gallery = np.asarray(gallery_emb, dtype=np.float64)
    if queries.ndim != 2 or gallery.ndim != 2 or queries.shape[1] != gallery.shape[1]:
        raise ValueError("embeddings must be 2-D with the same number of columns")

    def normalise(rows):
        out = np.zeros_like(rows)
        for i in range(rows.shape[0]):
            norm = math.sqrt(sum(float(x) * float(x) for x in rows[i]))
            if norm > 0.0:
                out[i] = rows[i] / norm
        return out

    if similarity == "cosine":
        queries = normalise(queries)
        gallery = normalise(gallery)
    elif similarity not in ("dot", "euclidean"):
        raise ValueError(f"unknown similarity {similarity!r}")

    n_queries, n_gallery = queries.shape[0], gallery.shape[0]
    scores = np.zeros((n_queries, n_gallery), dtype=np.float64)
    for q in range(n_queries):
        for i in range(n_gallery):
            a = [float(x) for x in queries[q]]
            b = [float(x) for x in gallery[i]]
            if similarity == "euclidean":
                scores[q, i] = -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
            else:
                scores[q, i] = sum(x * y for x, y in zip(a, b, strict=True))
    return scores


# --------------------------------------------------------------------------------------------
# 2. Relevant and excluded masks
# --------------------------------------------------------------------------------------------


def _same(a, b):
    """Exact equality of two labels / ids (ints or strings, never cast to float)."""
    return bool(a == b)


def reference_masks(
    Q,
    N,
    *,
    query_labels=None,
    gallery_labels=None,
    query_positions=None,
    gallery_positions=None,
    radius=None,
    relevant_ids=None,
    gallery_ids=None,
    query_ids=None,
    same_source=False,
    query_cameras=None,
    gallery_cameras=None,
    ignore_label=None,
):
    """Return ``(relevant, excluded)``, two (Q, N) boolean matrices, by the Terms.

    Exactly one source of relevance must be given:
    - labels (``query_labels`` and ``gallery_labels``): relevant when the labels are equal,
      compared exactly (ints or strings);
    - positions (``query_positions`` and ``gallery_positions``): relevant when the Euclidean
      distance is <= ``radius`` (inclusive; 25.0 when ``radius`` is None, the documented default);
    - ``relevant_ids``: ``relevant_ids[q]`` is a collection of gallery ids; gallery item i has id
      ``gallery_ids[i]``, or i when ``gallery_ids`` is None.

    Excluded (for query q, gallery item i):
    - the query itself: when both ``query_ids`` and ``gallery_ids`` are given, every i with
      ``gallery_ids[i] == query_ids[q]``; otherwise, when ``same_source`` is True, i == q;
    - with cameras (needs labels): items with the query's label AND the query's camera;
    - with ``ignore_label`` (needs ``gallery_labels``): items whose label equals it.

    Excluded items are never relevant.
    """
    use_labels = query_labels is not None or gallery_labels is not None
    use_positions = query_positions is not None or gallery_positions is not None
    use_ids = relevant_ids is not None
    if use_labels + use_positions + use_ids != 1:
        raise ValueError("give exactly one source of relevance: labels, positions or ids")
    if radius is None:
        radius = 25.0

    relevant = np.zeros((Q, N), dtype=bool)
    excluded = np.zeros((Q, N), dtype=bool)

    for q in range(Q):
        for i in range(N):
            # relevance
            if use_labels:
                is_rel = _same(query_labels[q], gallery_labels[i])
            elif use_positions:
                a = [float(x) for x in np.atleast_1d(query_positions[q])]
                b = [float(x) for x in np.atleast_1d(gallery_positions[i])]
                dist = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
                is_rel = dist <= float(radius)
            else:
                item_id = gallery_ids[i] if gallery_ids is not None else i
                is_rel = any(_same(item_id, wanted) for wanted in relevant_ids[q])

            # exclusions
            is_exc = False
            if query_ids is not None and gallery_ids is not None:
                if _same(query_ids[q], gallery_ids[i]):
                    is_exc = True
            elif same_source and i == q:
                is_exc = True
            if query_cameras is not None and gallery_cameras is not None:
                if query_labels is None or gallery_labels is None:
                    raise ValueError("camera exclusion needs labels")
                if _same(query_labels[q], gallery_labels[i]) and _same(
                    query_cameras[q], gallery_cameras[i]
                ):
                    is_exc = True
            if ignore_label is not None:
                if gallery_labels is None:
                    raise ValueError("ignore_label needs gallery_labels")
                if _same(gallery_labels[i], ignore_label):
                    is_exc = True

            excluded[q, i] = is_exc
            relevant[q, i] = is_rel and not is_exc
    return relevant, excluded


# --------------------------------------------------------------------------------------------
# 3. Per-ordering metrics
# --------------------------------------------------------------------------------------------


def _dcg(grades, k, gain):
    """Sum over positions i = 1..k of gain(g_i) / log2(1 + i) (fewer positions if shorter)."""
    total = 0.0
    for i, g in enumerate(grades[:k], start=1):
        value = (2.0 ** float(g) - 1.0) if gain == "exponential" else float(g)
        total += value / math.log2(1 + i)
    return total


def reference_ordered(
    rel_in_order, grades_in_order=None, m=None, gallery_size=None, ideal_grades=None,
    retrieved=None,
):
    """Every per-query metric for one complete ordering, from the definitions.

    ``rel_in_order``: 0/1 relevance of the items in ranked order (rank 1 first).
    ``grades_in_order``: grades of those items (only used for NDCG; the grade of a non-relevant
    item is taken as 0); None means binary grade 1 for every relevant item.
    ``m``: number of relevant items of the query (default ``sum(rel_in_order)``); it may be larger
    to represent relevant items that were never returned (ranked lists).
    ``gallery_size``: reported as is (default ``len(rel_in_order)``).
    ``ideal_grades``: the grades of ALL the query's relevant items, for the IDCG; default the
    grades of the relevant items in the ordering plus grade 1 for each of the ``m - sum(rel)``
    missing ones (an error when grades are given and items are missing, since their grades
    are unknown).

    Returns a dict (h(K) = relevant items in the top K, P(i) = h(i)/i, rel(i) = 0 beyond the end):
    "hit_rate@K", "recall@K" (h(K)/m), "precision@K" (h(K)/K), "r_precision" (h(m)/m),
    "map@r" ((1/m) sum_{i<=m} P(i) rel(i)), "ap" (step AP, divisor m), "ap_trapezoid"
    (Market-1501: (1/m) sum_i ((i-1)/(p_i-1) + i/p_i)/2, first term 1 when p_i = 1),
    "ap@K/relevant" (sum_{i<=K} P(i) rel(i) / m), "ap@K/min" (/ min(m, K)), "ap@K/retrieved"
    (/ h(K), 0/0 = 0), "rr" (1/first relevant rank, 0 if none), "rr@K" (0 if first rank > K),
    "first_rank" (inf if none), "ndcg@K/exponential", "ndcg@K/linear", "ndcg/exponential",
    "ndcg/linear" (no cut-off), "minp" (m / rank of the last relevant item, 0 if a relevant item
    is missing or m = 0), "cmc" (numpy vector of hit rate @k for k = 1..len), "gallery_size",
    "m"; and over the whole ordering: "hit_rate", "recall" (h/m), "precision" (h / retrieved,
    0 when nothing was retrieved), "f1@K" (2 P R / (P + R), P = h(K)/K, R = h(K)/m), "f1" (P =
    h / retrieved), "granular_rr" (mean of 1/p over the relevant positions, 0 if none),
    "ndcg/binary" (every relevant item gains 1). ``retrieved``: the distinct items of the
    ordering (default its length). All ratios are 0 when m = 0. K ranges over ``KS``.
    """
    rel = [1 if int(x) else 0 for x in rel_in_order]
    n = len(rel)
    found = sum(rel)
    if m is None:
        m = found
    m = int(m)
    if m < found:
        raise ValueError("m is smaller than the number of relevant items in the ordering")
    if gallery_size is None:
        gallery_size = n

    if grades_in_order is None:
        grades = [1.0 if r else 0.0 for r in rel]
    else:
        if len(grades_in_order) != n:
            raise ValueError("grades_in_order must have the length of rel_in_order")
        grades = [float(g) if r else 0.0 for r, g in zip(rel, grades_in_order, strict=True)]
    if ideal_grades is None:
        if grades_in_order is not None and m > found:
            raise ValueError("give ideal_grades when graded relevant items are missing")
        ideal_grades = [g for r, g in zip(rel, grades, strict=True) if r] + [1.0] * (m - found)
    ideal = sorted((float(g) for g in ideal_grades), reverse=True)

    def h(k):
        return sum(rel[:k])

    def prec(i):
        return h(i) / i

    def ratio(a, b):
        return a / b if b else 0.0

    positions = [i for i in range(1, n + 1) if rel[i - 1]]  # ranks of the relevant items
    first = positions[0] if positions else math.inf

    out = {}
    for k in KS:
        out[f"hit_rate@{k}"] = 1.0 if h(k) > 0 else 0.0
        out[f"recall@{k}"] = ratio(h(k), m)
        out[f"precision@{k}"] = h(k) / k
        ap_sum = sum(prec(i) for i in range(1, min(k, n) + 1) if rel[i - 1])
        out[f"ap@{k}/relevant"] = ratio(ap_sum, m)
        out[f"ap@{k}/min"] = ratio(ap_sum, min(m, k))
        out[f"ap@{k}/retrieved"] = ratio(ap_sum, h(k))
        out[f"rr@{k}"] = 1.0 / first if first <= k else 0.0
        for gain in ("exponential", "linear"):
            out[f"ndcg@{k}/{gain}"] = ratio(_dcg(grades, k, gain), _dcg(ideal, k, gain))

    out["r_precision"] = ratio(h(m), m)
    out["map@r"] = ratio(sum(prec(i) for i in range(1, min(m, n) + 1) if rel[i - 1]), m)
    out["ap"] = ratio(sum(prec(p) for p in positions), m)
    trapezoid = 0.0
    for i, p in enumerate(positions, start=1):
        old = 1.0 if p == 1 else (i - 1) / (p - 1)
        trapezoid += (old + i / p) / 2.0
    out["ap_trapezoid"] = ratio(trapezoid, m)
    out["rr"] = 1.0 / first if positions else 0.0
    out["first_rank"] = float(first)
    full = max(n, len(ideal))
    for gain in ("exponential", "linear"):
        out[f"ndcg/{gain}"] = ratio(_dcg(grades, full, gain), _dcg(ideal, full, gain))
    out["minp"] = m / positions[-1] if (m > 0 and found == m) else 0.0
    retrieved = n if retrieved is None else int(retrieved)
    out["hit_rate"] = 1.0 if found else 0.0
    out["recall"] = ratio(found, m)
    out["precision"] = ratio(found, retrieved)
    for k in KS:
        p_k, r_k = h(k) / k, ratio(h(k), m)
        out[f"f1@{k}"] = ratio(2 * p_k * r_k, p_k + r_k)
    p_all, r_all = ratio(found, retrieved), ratio(found, m)
    out["f1"] = ratio(2 * p_all * r_all, p_all + r_all)
    out["granular_rr"] = ratio(sum(1.0 / p for p in positions), len(positions))
    binary = [1.0 if r else 0.0 for r in rel]
    out["ndcg/binary"] = ratio(_dcg(binary, full, "linear"), _dcg([1.0] * m, full, "linear"))
    out["cmc"] = np.array([1.0 if h(k) > 0 else 0.0 for k in range(1, n + 1)], dtype=np.float64)
    out["gallery_size"] = int(gallery_size)
    out["m"] = m
    return out


def _average_dicts(weighted):
    """Exact-as-possible average of reference_ordered dicts; ``weighted`` = [(count, dict)]."""
    total = sum(c for c, _ in weighted)
    first = weighted[0][1]
    out = {}
    for key in first:
        if key in ("gallery_size", "m"):
            out[key] = first[key]
        elif key == "cmc":
            acc = np.zeros_like(first["cmc"])
            for c, d in weighted:
                acc = acc + c * d["cmc"]
            out[key] = acc / total
        else:
            out[key] = math.fsum(c * d[key] for c, d in weighted) / total
    return out


# --------------------------------------------------------------------------------------------
# 4. One query from scores, with ties
# --------------------------------------------------------------------------------------------


def reference_query(scores, relevant, excluded=None, grades=None, ties="optimistic"):
    """All metrics of one query from its gallery scores (larger = better), or None if m = 0.

    Excluded items are dropped first. The rest is split into tie groups (exactly equal scores),
    groups in decreasing score order. Inside a group:
    - ``"optimistic"``: relevant items first, higher grade first among them;
    - ``"pessimistic"``: relevant items last, lower grade first among them (the worst order);
    - ``"expected"``: every permutation of every tie group is enumerated
      (``itertools.product`` of ``itertools.permutations``), each complete ordering is scored
      with ``reference_ordered`` and the values are averaged over all orderings (element-wise for
      "cmc"; "first_rank" becomes the expected first relevant rank). Raises ValueError when there
      are more than ``MAX_ORDERINGS`` orderings.
    ``grades``: per-item grades for NDCG (a non-relevant item's grade is taken as 0); None means
    binary. Returns the ``reference_ordered`` dict, with "gallery_size" = number of non-excluded
    items and "m" = number of relevant non-excluded items.
    """
    scores = [float(s) for s in np.asarray(scores, dtype=np.float64).ravel()]
    n_all = len(scores)
    rel_all = [bool(r) for r in np.asarray(relevant).ravel()]
    if excluded is None:
        exc_all = [False] * n_all
    else:
        exc_all = [bool(e) for e in np.asarray(excluded).ravel()]
    if grades is None:
        grade_all = [1.0 if r else 0.0 for r in rel_all]
    else:
        grade_all = [float(g) for g in np.asarray(grades, dtype=np.float64).ravel()]
    if not (len(rel_all) == len(exc_all) == len(grade_all) == n_all):
        raise ValueError("scores, relevant, excluded and grades must have the same length")

    kept = [i for i in range(n_all) if not exc_all[i]]
    rel = {i: rel_all[i] for i in kept}
    grade = {i: (grade_all[i] if rel_all[i] else 0.0) for i in kept}
    m = sum(1 for i in kept if rel[i])
    if m == 0:
        return None
    ideal = [grade[i] for i in kept if rel[i]]

    # tie groups, best score first
    groups = []
    for s in sorted(set(scores[i] for i in kept), reverse=True):
        groups.append([i for i in kept if scores[i] == s])

    def score_ordering(order):
        return reference_ordered(
            [1 if rel[i] else 0 for i in order],
            [grade[i] for i in order],
            m=m,
            gallery_size=len(kept),
            ideal_grades=ideal,
        )

    if ties == "optimistic":
        order = []
        for g in groups:
            order += sorted(g, key=lambda i: (not rel[i], -grade[i], i))
        return score_ordering(order)
    if ties == "pessimistic":
        order = []
        for g in groups:
            order += sorted(g, key=lambda i: (rel[i], grade[i], i))
        return score_ordering(order)
    if ties != "expected":
        raise ValueError(f"unknown ties {ties!r}")

    count = 1
    for g in groups:
        count *= math.factorial(len(g))
    if count > MAX_ORDERINGS:
        raise ValueError(f"{count} orderings is too many for the brute-force reference")

    # Every ordering is enumerated; orderings with the same (relevance, grade) sequence give the
    # same values, so each distinct sequence is scored once and weighted by how often it occurs.
    seen = Counter()
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        order = [i for part in parts for i in part]
        seen[tuple((rel[i], grade[i]) for i in order)] += 1
    weighted = []
    for seq, c in seen.items():
        order_rel = [1 if r else 0 for r, _ in seq]
        order_grades = [g for _, g in seq]
        d = reference_ordered(
            order_rel, order_grades, m=m, gallery_size=len(kept), ideal_grades=ideal
        )
        weighted.append((c, d))
    return _average_dicts(weighted)


# --------------------------------------------------------------------------------------------
# 5. Median rank
# --------------------------------------------------------------------------------------------


def reference_median_rank(first_ranks, convention="vsepp"):
    """Median of the per-query first relevant ranks (1-based).

    ``"vsepp"``: floor(median(r - 1)) + 1 (numpy median: mean of the two middle values), as in the
    VSE++ evaluation code; ``"plain"``: ``np.median(r)``. Returns a float.
    """
    r = np.asarray(first_ranks, dtype=np.float64)
    if convention == "vsepp":
        return float(math.floor(float(np.median(r - 1.0))) + 1)
    if convention == "plain":
        return float(np.median(r))
    raise ValueError(f"unknown convention {convention!r}")


# --------------------------------------------------------------------------------------------
# 6. Chance level
# --------------------------------------------------------------------------------------------


def reference_chance(N, m):
    """Expected metric values under a uniformly random ranking of N items with m relevant.

    The average of ``reference_ordered`` over all C(N, m) placements of the m (binary) relevant
    items among the N positions (``itertools.combinations``); every placement is equally likely
    under a random ranking. Raises ValueError when C(N, m) > ``MAX_ORDERINGS``.
    """
    if not 0 <= m <= N:
        raise ValueError("need 0 <= m <= N")
    if math.comb(N, m) > MAX_ORDERINGS:
        raise ValueError(f"C({N}, {m}) placements is too many for the brute-force reference")
    weighted = []
    for chosen in itertools.combinations(range(N), m):
        rel = [1 if i in chosen else 0 for i in range(N)]
        weighted.append((1, reference_ordered(rel, m=m, gallery_size=N)))
    return _average_dicts(weighted)


# --------------------------------------------------------------------------------------------
# 7. Ranked lists (RAG)
# --------------------------------------------------------------------------------------------


def reference_ranked_list(ranked_ids, relevant, duplicates="first"):
    """Metrics of one ranked list of ids (str or int) against its relevant ids, or None if none.

    ``relevant``: a set of ids (binary) or a dict id -> grade (grade > 0 is relevant; grade 0
    entries are non-relevant). An id repeated in the list counts once, at its first position;
    the repeats stay as non-relevant slots (``duplicates="error"`` raises instead). Relevant ids
    that the list never returned still count in m (and their grades in the IDCG). Returns the
    ``reference_ordered`` dict of the list's 0/1 sequence with m = number of relevant ids.
    """
    if isinstance(relevant, dict):
        graded = {k: float(v) for k, v in relevant.items() if float(v) > 0}
        binary = False
    else:
        graded = {k: 1.0 for k in relevant}
        binary = True
    m = len(graded)
    if m == 0:
        return None
    if duplicates not in ("first", "error"):
        raise ValueError(f"unknown duplicates {duplicates!r}")

    seen = set()
    rel, grades = [], []
    for doc in ranked_ids:
        if doc in seen:
            if duplicates == "error":
                raise ValueError(f"id {doc!r} appears more than once in the ranked list")
            rel.append(0)
            grades.append(0.0)
            continue
        seen.add(doc)
        if doc in graded:
            rel.append(1)
            grades.append(graded[doc])
        else:
            rel.append(0)
            grades.append(0.0)
    return reference_ordered(
        rel,
        None if binary else grades,
        m=m,
        gallery_size=len(rel),
        ideal_grades=list(graded.values()),
        retrieved=len(seen),
    )


# --------------------------------------------------------------------------------------------
# 7. Judgments (qrels) against a corpus, every document scored
# --------------------------------------------------------------------------------------------


def _canonical(value):
    """An id as ids compare: the decimal text of an integer is that integer."""
    if isinstance(value, str) and (value.isdigit() and (value == "0" or value[0] != "0")):
        return int(value)
    return int(value) if isinstance(value, (int, np.integer)) else value


def reference_judged(
    scores, query_ids, doc_ids, qrels, ignore_identical_ids=True, keep_judgment=False
):
    """Per query, the ``reference_ordered`` dict of a corpus scored against judgments, or None
    for a query with nothing relevant.

    ``scores``: the (Q, N) matrix (larger = better, no ties: the order is the sort of the whole
    row). ``qrels``: query id -> document ids, or -> {document id: grade}; a grade <= 0 is not
    relevant; a judged document the corpus lacks is relevant and never retrieved (it counts in m
    and, with its grade, in the ideal DCG); with ``ignore_identical_ids`` the document whose id is
    the query's is removed first (neither ranked nor relevant; with ``keep_judgment``, BEIR's
    rule, not ranked but still relevant: never retrieved).
    """
    doc_keys = [_canonical(d) for d in doc_ids]
    judged = {_canonical(q): v for q, v in qrels.items()}
    out = []
    for qi, qid in enumerate(query_ids):
        key = _canonical(qid)
        row = judged.get(key, {})
        grades = dict(row) if isinstance(row, dict) else {d: 1.0 for d in row}
        grades = {_canonical(d): float(g) for d, g in grades.items() if float(g) > 0}
        kept = [
            j for j in range(len(doc_keys)) if not (ignore_identical_ids and doc_keys[j] == key)
        ]
        if ignore_identical_ids and not keep_judgment:
            grades.pop(key, None)
        order = sorted(kept, key=lambda j: -float(scores[qi][j]))
        rel = [1 if doc_keys[j] in grades else 0 for j in order]
        in_order = [grades.get(doc_keys[j], 0.0) for j in order]
        m = len(grades)
        if m == 0:
            out.append(None)
            continue
        out.append(
            reference_ordered(
                rel, in_order, m=m, gallery_size=len(kept), ideal_grades=list(grades.values())
            )
        )
    return out


def reference_top_k(query_emb, gallery_emb, k, key, excluded=frozenset()):
    """Per query, its ``k`` best ``(score, gallery index)`` by float64 dot products (exact for
    small integer embeddings), tied scores by ascending ``key[index]``; the pairs ``(query,
    index)`` in ``excluded`` are never listed."""
    scores = np.asarray(query_emb, dtype=np.float64) @ np.asarray(gallery_emb, dtype=np.float64).T
    out = []
    for i in range(scores.shape[0]):
        pairs = [(float(scores[i, j]), j) for j in range(scores.shape[1]) if (i, j) not in excluded]
        pairs.sort(key=lambda p: (-p[0], key[p[1]]))
        out.append(pairs[:k])
    return out
