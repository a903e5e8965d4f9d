"""What a paper in each retrieval field reports, each from one ``protocol=`` argument.

Generated data, no download, runs in seconds:  python examples/fields.py

Fields: image-text (VSE++ 1K / 5K, rsum), metric learning (R@1/2/4/8, MAP@R), person re-id
(CMC, mAP, mINP with cameras), visual place recognition (recall@N with GPS positions), ANN search
(1-recall@R, k-recall@k) and RAG (hit@4, recall@4, MRR, NDCG@10 with string document ids).
"""

import torch

import retrieval_metrics as rm
from retrieval_metrics.protocols import ann_benchmarks_ranks, trec_run_to_lists

gen = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen)


def show(values: dict, names: dict[str, str], digits: int = 2, title: str = "") -> None:
    """One line: the values under the names a paper of the field prints."""
    cells = "  ".join(f"{label} {float(values[key]):.{digits}f}" for key, label in names.items())
    print(f"  {title}{cells}")


# ------------------------------------------------------------------------------------------
print("== image-text retrieval (VSE++ protocol: R@K in percent, rsum)")
num_images, dim = 1000, 64
images = randn(num_images, dim)
image_of_caption = torch.arange(num_images).repeat_interleave(5)  # 5 captions per image
captions = images[image_of_caption] + 2.2 * randn(5 * num_images, dim)
for title, folds in (
    ("5 folds of 200 images (COCO 1K style)", 5),
    ("one gallery (5K style)", None),
):
    m = rm.CrossModalRetrieval(k=(1, 5, 10), folds=folds, protocol="vsepp")
    m.update(images, captions, torch.arange(num_images), text_image_ids=image_of_caption)
    v = m.compute()
    print(f" {title}:  rsum {float(v['rsum']):.1f}")
    for d, name in (("i2t", "image-to-text "), ("t2i", "text-to-image ")):
        show(
            v,
            {f"{d}/hit_rate@1": "R@1", f"{d}/hit_rate@5": "R@5", f"{d}/hit_rate@10": "R@10",
             f"{d}/median_rank": "medr", f"{d}/mean_rank": "meanr"},
            1,
            name,
        )  # fmt: skip

# ------------------------------------------------------------------------------------------
print("== metric learning (same source, PML protocol: Euclidean, lone queries skipped)")
num_classes, per_class = 300, 6
centres = randn(num_classes, dim)
labels = torch.arange(num_classes).repeat_interleave(per_class)
embeddings = centres[labels] + 1.2 * randn(labels.numel(), dim)
m = rm.RetrievalMetrics(
    ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision"],
    protocol="pml",
)
m.update(embeddings, labels)
show(
    m.compute(),
    {"hit_rate@1": "R@1", "hit_rate@2": "R@2", "hit_rate@4": "R@4", "hit_rate@8": "R@8",
     "map@r": "MAP@R", "r_precision": "RP"},
    4,
)  # fmt: skip

# ------------------------------------------------------------------------------------------
print("== person re-identification (Market-1501 style: same identity + camera removed)")
num_ids, num_query, num_gallery = 200, 400, 3000
id_centres = randn(num_ids + 1, dim)
q_ids = torch.randint(1, num_ids + 1, (num_query,), generator=gen)
g_ids = torch.randint(-1, num_ids + 1, (num_gallery,), generator=gen)  # 0 distractor, -1 junk
q_cams = torch.randint(0, 6, (num_query,), generator=gen)
g_cams = torch.randint(0, 6, (num_gallery,), generator=gen)
q_emb = id_centres[q_ids] + 1.6 * randn(num_query, dim)
g_emb = id_centres[g_ids.clamp_min(0)] + 1.6 * randn(num_gallery, dim)
for protocol in ("torchreid", "market1501_official"):
    m = rm.RetrievalMetrics(["cmc@10", "map", "minp"], protocol=protocol, similarity="euclidean")
    m.update(q_emb, q_ids, role="query", cameras=q_cams)
    m.update(g_emb, g_ids, role="gallery", cameras=g_cams)
    v = m.compute()
    cmc = v["cmc@10"] * 100
    print(
        f"  {protocol:<20} Rank-1 {cmc[0]:.1f}  Rank-5 {cmc[4]:.1f}  Rank-10 {cmc[9]:.1f}  "
        f"mAP {v['map'] * 100:.1f}  mINP {v['minp'] * 100:.1f}"
    )

# ------------------------------------------------------------------------------------------
print("== visual place recognition (NetVLAD protocol: positives within 25 m, all queries)")
db_pos = torch.rand(2000, 2, generator=gen, dtype=torch.float64) * 1000  # UTM metres
q_pos = torch.rand(300, 2, generator=gen, dtype=torch.float64) * 1000
basis = randn(2, dim).double() / 100


def descriptor(pos: torch.Tensor) -> torch.Tensor:
    return torch.sin(pos @ basis) + 0.15 * randn(pos.shape[0], dim).double()


m = rm.HitRateAtK(k=(1, 5, 10, 20), protocol="netvlad")
m.update(descriptor(q_pos), role="query", positions=q_pos)
m.update(descriptor(db_pos), role="gallery", positions=db_pos)
show(m.compute(), {f"hit_rate@{n}": f"recall@{n}" for n in (1, 5, 10, 20)}, 1)
no_positive = int((m.rank_table().num_relevant == 0).sum())
print(f"  ({no_positive} queries without a positive within 25 m count as misses)")

# ------------------------------------------------------------------------------------------
print("== ANN search (exact kNN as ground truth)")
base = randn(20000, 32)
queries = randn(200, 32)
true_d, true_ids = torch.cdist(queries, base).topk(100, largest=False)
# an "approximate" index: exhaustive search over 8-bit quantised vectors
scale = base.abs().max() / 127
approx_base = (base / scale).round() * scale
_, run_ids = torch.cdist(queries, approx_base).topk(100, largest=False)
one = rm.HitRateAtK(k=(1, 10, 100), protocol="ann_benchmarks")
one.update(ranked_ids=run_ids.tolist(), relevant_ids=true_ids[:, :1].tolist())
run_d = torch.cdist(queries.double().unsqueeze(1), base.double()[run_ids[:, :10]]).squeeze(1)
ranks, num_rel = ann_benchmarks_ranks(
    run_d, torch.cdist(queries.double(), base.double()).sort(1).values, 10
)
kk = rm.RecallAtK(k=10, protocol="ann_benchmarks")
kk.update(relevant_ranks=ranks, num_relevant=num_rel)
v = one.compute()
print(
    f"  1-recall@1 {v['hit_rate@1']:.3f}  1-recall@10 {v['hit_rate@10']:.3f}  "
    f"1-recall@100 {v['hit_rate@100']:.3f}  10-recall@10 {float(kk.compute()):.3f}"
)

# ------------------------------------------------------------------------------------------
print("== RAG / ranked lists (trec_eval protocol, string document ids)")
corpus = [f"doc-{i}" for i in range(500)]
run, qrels = {}, {}
for q in range(100):
    qid = f"q{q}"
    relevant = torch.randperm(500, generator=gen)[:3].tolist()
    qrels[qid] = {corpus[i]: 1 + (j == 0) for j, i in enumerate(relevant)}  # grades 2, 1, 1
    retrieved = torch.randperm(500, generator=gen)[:20].tolist()
    # a retriever that finds each relevant document half of the time, near the top
    hits = [i for i in relevant if torch.rand(1, generator=gen) < 0.5]
    scores = {corpus[i]: float(torch.rand(1, generator=gen)) for i in retrieved}
    scores.update({corpus[i]: 0.5 + 0.5 * float(torch.rand(1, generator=gen)) for i in hits})
    run[qid] = scores
ranked, relevant_ids, _ = trec_run_to_lists(run, qrels)
m = rm.RetrievalMetrics(["hit_rate@4", "recall@4", "mrr", "ndcg@10"], protocol="trec_eval")
m.update(ranked_ids=ranked, relevant_ids=relevant_ids)
show(
    m.compute(),
    {"hit_rate@4": "hit@4", "recall@4": "recall@4", "mrr": "MRR", "ndcg@10": "NDCG@10"},
    4,
)
