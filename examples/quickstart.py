"""Same-source class retrieval on generated embeddings: R@1/2/4/8, MAP@R, R-precision, MRR.

Runs in seconds, no download:  python examples/quickstart.py
"""

import torch

from retrieval_metrics.functional import chance_table, rank_embeddings, retrieval_measures

torch.manual_seed(0)
num_classes, per_class, dim = 500, 5, 64
centers = torch.randn(num_classes, dim)
labels = torch.arange(num_classes).repeat_interleave(per_class)
embeddings = centers[labels] + 0.9 * torch.randn(labels.numel(), dim)

names = ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision", "mrr"]
table = rank_embeddings(embeddings, query_labels=labels)  # every item queries all the others
values = retrieval_measures(table, names)
chance = retrieval_measures(chance_table(table), names)
print(f"{labels.numel()} items, {num_classes} classes, gallery of {int(table.gallery_size[0])}")
print(f"{'metric':<12} {'value':>8} {'chance':>8}")
for name in names:
    print(f"{name:<12} {float(values[name]):8.4f} {float(chance[name]):8.4f}")
