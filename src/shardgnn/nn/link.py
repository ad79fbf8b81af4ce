"""Link prediction on top of a GNN encoder: edge scorers (predictors) and losses.

Shape legend: ``P`` positive pairs, ``K`` negatives per positive, ``D`` embedding width.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.config import LINK_LOSSES, PREDICTORS, RELATIONAL_PREDICTORS
from shardgnn.nn.models import GNN
from shardgnn.store.embedding import EmbeddingTable


class DotPredictor(nn.Module):
    """``score(u, v) = <h_u, h_v>`` (GAE's inner-product decoder; no parameters)."""

    def forward(self, h_u_PD: torch.Tensor, h_v_PD: torch.Tensor) -> torch.Tensor:
        return (h_u_PD * h_v_PD).sum(-1)


class MLPPredictor(nn.Module):
    """``score(u, v) = MLP(h_u * h_v)``: the element-wise product through ``layers`` linear layers
    with ReLU between them (the OGB link-prediction baselines' predictor)."""

    def __init__(self, dim: int, hidden: int, layers: int = 2):
        super().__init__()
        widths = [dim] + [hidden] * (layers - 1) + [1]
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, h_u_PD: torch.Tensor, h_v_PD: torch.Tensor) -> torch.Tensor:
        h = h_u_PD * h_v_PD
        for i, linear in enumerate(self.linears):
            if i:
                h = F.relu(h)
            h = linear(h)
        return h.squeeze(-1)


class LinkModel(nn.Module):
    """A GNN encoder (node embeddings) and a predictor (pair scores); one module, so that one
    state dict checkpoints both.

    ``model(graphs, x)`` returns the embeddings of ``graphs[-1]``'s destination nodes;
    ``model.score(h_u, h_v)`` scores pairs of them.
    """

    def __init__(self, encoder: GNN, predictor: nn.Module, embedding: EmbeddingTable | None = None):
        super().__init__()
        self.encoder, self.predictor = encoder, predictor
        # Learnable input rows, when any: held here so that the model's state (checkpoints, the
        # best epoch's weights) includes them and their optimiser state. They are buffers, not
        # parameters: their sparse optimiser updates them, never the dense one.
        self.embedding = embedding

    @property
    def num_layers(self) -> int:
        return self.encoder.num_layers

    def use_hashed_dropout(self, seed: int) -> None:
        self.encoder.use_hashed_dropout(seed)

    # The dropout step counts the encoder's training forwards; checkpoints save and restore it
    # through the model they are given, so it must be reachable here (else resume would reuse
    # step 0's dropout masks).
    @property
    def dropout_step(self) -> int:
        return self.encoder.dropout_step

    @dropout_step.setter
    def dropout_step(self, step: int) -> None:
        self.encoder.dropout_step = step

    def forward(self, graphs, x_SF: torch.Tensor) -> torch.Tensor:
        return self.encoder(graphs, x_SF)

    def score(self, h_u_PD: torch.Tensor, h_v_PD: torch.Tensor) -> torch.Tensor:
        return self.predictor(h_u_PD, h_v_PD)

    def score_batch(
        self, h_ND: torch.Tensor, src_P: torch.Tensor, dst_P: torch.Tensor, neg_PK: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of positives ``(src_P, dst_P)`` ``[P]`` and of negatives ``(src_P, neg_PK)``
        ``[P, K]``, all given as rows of ``h_ND``."""
        h_src_PD = h_ND[src_P]
        pos_P = self.score(h_src_PD, h_ND[dst_P])
        k = neg_PK.shape[1]
        h_src_QD = h_src_PD.repeat_interleave(k, dim=0)
        neg_PK_scores = self.score(h_src_QD, h_ND[neg_PK.reshape(-1)]).reshape(-1, k)
        return pos_P, neg_PK_scores


def build_predictor(kind: str, dim: int, hidden: int) -> nn.Module:
    """The scorer of a homogeneous graph's pairs (``auto`` is ``dot`` there)."""
    assert kind in PREDICTORS and kind not in RELATIONAL_PREDICTORS, kind
    return MLPPredictor(dim, hidden) if kind == "mlp" else DotPredictor()


def link_loss(
    pos_P: torch.Tensor,
    neg_PK: torch.Tensor,
    kind: str,
    margin: float,
    num_pos: int | None = None,
    num_neg: int | None = None,
) -> torch.Tensor:
    """``bce``: mean of ``-log sigmoid(pos)`` plus mean of ``-log(1 - sigmoid(neg))`` (GAE's
    reconstruction loss); ``margin``: mean of ``max(0, margin - pos + neg)`` over every
    (positive, its negative) pair; ``softmax``: mean over positives of the cross-entropy of the
    positive against its ``K`` negatives (sampled softmax). An empty batch gives a zero connected
    to the graph (a DDP backward must still run).

    ``num_pos``/``num_neg`` (default: the pairs given) are the means' denominators: a rank that
    scores a share of all pairs divides its sums by the global counts, so the shares' losses
    (and gradients) add up to the loss over all pairs. Computed in fp32 whatever the scores'
    dtype (``--precision bf16``)."""
    assert kind in LINK_LOSSES, kind
    pos_P, neg_PK = pos_P.float(), neg_PK.float()  # fp32 scores under bf16 autocast too
    num_pos = pos_P.numel() if num_pos is None else num_pos
    num_neg = neg_PK.numel() if num_neg is None else num_neg
    if pos_P.numel() == 0:
        return pos_P.sum() + neg_PK.sum()
    if kind == "bce":
        pos_loss = F.softplus(-pos_P).sum() / num_pos
        neg_loss = F.softplus(neg_PK).sum() / num_neg if neg_PK.numel() else neg_PK.sum()
        return pos_loss + neg_loss
    if neg_PK.numel() == 0:
        return pos_P.sum() * 0.0
    if kind == "softmax":
        logits_PK1 = torch.cat([pos_P[:, None], neg_PK], dim=1)
        return (torch.logsumexp(logits_PK1, dim=1) - pos_P).sum() / num_pos
    return F.relu(margin - pos_P[:, None] + neg_PK).sum() / num_neg
