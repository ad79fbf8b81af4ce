"""metapath2vec (Dong et al. 2017): node embeddings from meta-path walks by skip-gram.

Walks follow a meta-path (:func:`~shardgnn.sampling.walks.metapath_walks`, e.g. author -> paper
-> author); every node of a walk predicts the nodes within ``window`` steps of it. The model has
two tables, ``center`` and ``context``; a (center, context) pair scores ``<c_u, o_v>`` and is
trained against ``negatives`` nodes drawn uniformly from the context node's own type
(metapath2vec++'s heterogeneous negative sampling: an author's context is told apart from other
authors, not from papers)::

    loss = -log sigmoid(<c_u, o_v>) - sum_n log sigmoid(-<c_u, o_n>)

Both tables are sparse (``torch.optim.SparseAdam``): a step touches only its pairs' rows. The
``center`` table is the embedding. This module holds the model and its pairs; the training loop
is :func:`shardgnn.train.metapath2vec.train_metapath2vec`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def walk_pairs(walks_WL: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """``(center, context)`` of every pair of nodes at most ``window`` steps apart on a walk
    (both orders), leaving out the ``-1`` padding of walks that ended early."""
    centers, contexts = [], []
    length = walks_WL.shape[1]
    for offset in range(1, min(window, length - 1) + 1):
        a, b = walks_WL[:, :-offset].ravel(), walks_WL[:, offset:].ravel()
        keep = (a >= 0) & (b >= 0)
        centers += [a[keep], b[keep]]
        contexts += [b[keep], a[keep]]
    if not centers:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(centers), np.concatenate(contexts)


class SkipGram(nn.Module):
    """Center and context tables of ``num_nodes`` rows (sparse gradients)."""

    def __init__(self, num_nodes: int, dim: int):
        super().__init__()
        self.center = nn.Embedding(num_nodes, dim, sparse=True)
        self.context = nn.Embedding(num_nodes, dim, sparse=True)
        nn.init.uniform_(self.center.weight, -0.5 / dim, 0.5 / dim)
        nn.init.zeros_(self.context.weight)

    def loss(self, center_B: torch.Tensor, context_B: torch.Tensor, negative_BK: torch.Tensor):
        """Mean negative-sampling loss of a batch of pairs and their negatives."""
        c_BD = self.center(center_B)
        positive_B = (c_BD * self.context(context_B)).sum(-1)
        negative_BK_scores = torch.einsum("bd,bkd->bk", c_BD, self.context(negative_BK))
        return -(F.logsigmoid(positive_B) + F.logsigmoid(-negative_BK_scores).sum(-1)).mean()
