"""SUREL's link predictor (Yin et al., VLDB 2022): a query ``(u, v)`` is read from the random
walks of its two endpoints, not from a message-passing encoder.

Every node has a set of ``M`` walks of ``L`` steps (:func:`~shardgnn.sampling.walks.node_walks`,
drawn once per node and shared by every query that names it). For a query, each node ``x`` met
by either walk set gets its relative positional encoding (RPE): how often it stands at each step
of ``u``'s walks and of ``v``'s walks, ``[g_u(x), g_v(x)]``, each ``[L + 1]`` counts divided by
``M``; a walk then reads as the sequence of its nodes' RPEs (the walk's own endpoint's counts
first). Each walk is encoded by an MLP of the RPE of every step after an MLP per step (SUREL
reads the sequence with an RNN; a walk has a fixed short length here, so one layer over the
concatenated steps sees the same sequence), the walk sets are mean-pooled per endpoint (a set
encoder), and an MLP of ``z_u * z_v`` and ``z_u + z_v`` (symmetric in the two endpoints) scores
the query. Node ids never enter the model: it learns from structure alone, so a node unseen in
training is scored as any other.

Shape legend: ``Q`` queries, ``S`` sides (2: ``u`` then ``v``), ``M`` walks per node, ``W`` walk
positions (``L + 1``), ``H`` hidden width.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.dropout import hashed_dropout
from shardgnn.seeding import mix_seed


def evaluation_walk_seed(seed: int) -> int:
    """The seed of the walks every evaluation and ``shardgnn infer`` read (fixed: the same
    weights always give the same scores)."""
    return mix_seed(seed + 1, 0)


def query_walks(
    src_Q: np.ndarray, dst_Q: np.ndarray, draw: Callable[[np.ndarray], np.ndarray]
) -> torch.Tensor:
    """``[Q, 2, M, L + 1]``: the walks of every query's two endpoints, each node's drawn once
    (``draw(nodes)``: ``[len(nodes), M, L + 1]`` walks of sorted unique ``nodes``)."""
    nodes, inverse = np.unique(np.concatenate([src_Q, dst_Q]), return_inverse=True)
    walks = draw(nodes)
    both = torch.from_numpy(walks[inverse.reshape(2, len(src_Q))]).transpose(0, 1)
    return both.contiguous()


def relative_positions(walks_QSMW: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """``[Q, S, M, W, 2W]``: the RPE of every position of every walk of every query (zeros
    where a walk ended early, ``-1`` in ``walks_QSMW``); a walk of side ``s`` reads its own side's
    counts first."""
    q, s, m, w = walks_QSMW.shape
    device = walks_QSMW.device
    node = walks_QSMW + 1  # 0: past a dead end
    query = torch.arange(q, device=device).view(q, 1, 1, 1)
    key = (query * (num_nodes + 1) + node).reshape(-1)
    _, inverse = torch.unique(key, return_inverse=True)
    side = torch.arange(s, device=device).view(1, s, 1, 1).expand(q, s, m, w).reshape(-1)
    step = torch.arange(w, device=device).view(1, 1, 1, w).expand(q, s, m, w).reshape(-1)
    counts_KSW = torch.zeros(int(inverse.max()) + 1 if inverse.numel() else 0, s, w, device=device)
    counts_KSW.index_put_(
        (inverse, side, step), torch.ones_like(inverse, dtype=counts_KSW.dtype), accumulate=True
    )
    counts_KSW /= m
    return _own_side_first(counts_KSW[inverse].view(q, s, m, w, s, w), walks_QSMW)


def relative_positions_by_comparison(walks_QSMW: torch.Tensor) -> torch.Tensor:
    """:func:`relative_positions` with shapes that do not depend on the walks' values, what an
    exported file runs (ONNX and ``torch.export`` take ``unique``'s output size from the data):
    every position of a query's walks compared with every other, the matches counted per side
    and step by one product. Equal to :func:`relative_positions` bit for bit (the counts are
    small whole numbers either way, then divided by ``M``); node ids may be any integers (only
    their equality matters). Memory ``Q * (S * M * W)^2``: a serving batch, not training's."""
    q, s, m, w = walks_QSMW.shape
    flat_QP = walks_QSMW.reshape(q, s * m * w)
    same_QPP = (flat_QP.unsqueeze(2) == flat_QP.unsqueeze(1)).float()
    # position p = (side, walk, step) counts towards column side * W + step
    slots = torch.eye(s * w, device=walks_QSMW.device).view(s, 1, w, s * w)
    slot_PC = slots.expand(s, m, w, s * w).reshape(s * m * w, s * w)
    counts_QPC = torch.matmul(same_QPP, slot_PC) / m
    return _own_side_first(counts_QPC.view(q, s, m, w, s, w), walks_QSMW)


def _own_side_first(rpe_QSMWSW: torch.Tensor, walks_QSMW: torch.Tensor) -> torch.Tensor:
    """``[Q, S, M, W, S * W]``: each position's counts, its own side's first (side ``v``:
    ``[g_v, g_u]``), zero past a dead end."""
    q, s, m, w = walks_QSMW.shape
    own_first = torch.stack([rpe_QSMWSW[:, 0], rpe_QSMWSW[:, 1].flip(-2)], dim=1)
    own_first = own_first * (walks_QSMW >= 0).unsqueeze(-1).unsqueeze(-1)
    return own_first.reshape(q, s, m, w, s * w)


class SURELModel(nn.Module):
    """The walk-set link scorer: ``forward(walks_QSMW)`` gives a logit per query."""

    def __init__(self, walk_length: int, hidden: int, dropout: float, num_nodes: int):
        super().__init__()
        width = walk_length + 1
        self.num_nodes = num_nodes
        self.step = nn.Sequential(nn.Linear(2 * width, hidden), nn.ReLU())
        self.walk = nn.Sequential(nn.Linear(width * hidden, hidden), nn.ReLU())
        self.hidden = nn.Linear(2 * hidden, hidden)
        self.out = nn.Linear(hidden, 1)
        self.dropout = dropout

    def forward(
        self,
        walks_QSMW: torch.Tensor,
        keys_Q: torch.Tensor | None = None,
        dropout_seed: int | None = None,
    ) -> torch.Tensor:
        """Logits ``[Q]``. Dropout (training) draws its mask of query ``i`` from
        ``(dropout_seed, keys_Q[i])`` when both are given (:func:`hashed_dropout`: workers that
        score shares of a batch drop what one process drops), else from torch's generator."""
        rpe = relative_positions(walks_QSMW, self.num_nodes)
        return self.score(rpe, keys_Q, dropout_seed)

    def score(
        self,
        rpe_QSMWC: torch.Tensor,
        keys_Q: torch.Tensor | None = None,
        dropout_seed: int | None = None,
    ) -> torch.Tensor:
        """Logits ``[Q]`` of the queries whose walks' positions have the encodings
        ``rpe_QSMWC`` (:func:`relative_positions`); dropout as :meth:`forward`'s."""
        q, s, m, w, _ = rpe_QSMWC.shape
        steps_QSMWH = self.step(rpe_QSMWC)
        walk_QSMH = self.walk(steps_QSMWH.reshape(q, s, m, -1))
        z_QSH = walk_QSMH.mean(2)
        z_u, z_v = z_QSH[:, 0], z_QSH[:, 1]
        h_QH = torch.relu(self.hidden(torch.cat([z_u * z_v, z_u + z_v], dim=-1)))
        if self.training and self.dropout > 0 and keys_Q is not None and dropout_seed is not None:
            h_QH = hashed_dropout(h_QH, self.dropout, dropout_seed, row_ids=keys_Q)
        else:
            h_QH = F.dropout(h_QH, self.dropout, self.training)
        return self.out(h_QH).squeeze(-1)
