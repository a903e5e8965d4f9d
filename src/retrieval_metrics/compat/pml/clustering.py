"""NMI and AMI as PML computes them: faiss k-means on the queries, then scikit-learn's
scores of labels against clusters."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["FaissKMeans", "numpy_pair"]


def numpy_pair(labels: Any, clusters: Any) -> tuple[np.ndarray, np.ndarray]:
    def to_numpy(x: Any) -> np.ndarray:
        return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)

    return to_numpy(labels), to_numpy(clusters)


class FaissKMeans:
    """faiss k-means as PML's default ``FaissKMeans`` runs it: the same clusters, the same NMI."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __call__(self, x: Tensor, nmb_clusters: int) -> Tensor:
        try:
            import faiss
        except ImportError as err:
            raise ImportError(
                "NMI and AMI cluster the queries with faiss k-means, as pytorch-metric-learning "
                "does: install faiss-cpu (or faiss-gpu), pass kmeans_func=, or leave them out "
                'with exclude=("NMI", "AMI")'
            ) from err
        data = np.ascontiguousarray(x.detach().cpu().numpy().astype(np.float32))
        kmeans = faiss.Kmeans(data.shape[1], nmb_clusters, **self.kwargs)
        kmeans.train(data)
        _, idxs = kmeans.index.search(data, 1)
        return torch.as_tensor(idxs[:, 0].astype(np.int64), device=x.device)
