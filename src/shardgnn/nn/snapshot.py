"""Discrete-time dynamic GNN: a GCN per snapshot feeding a GRU per node (T-GCN / GCN-GRU).

For snapshot ``t`` with graph ``A_t``: ``x_t = GCN_L(A_t, X)`` from every node's learnt input row
``X`` (snapshots of a temporal graph have no node features), then ``s_t = GRU(x_t, s_{t-1})``:
the node's state carries what earlier snapshots showed. ``s_t`` scores the pairs of period
``t + 1`` with TGN's link decoder.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.conv import GCNConv
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.temporal import LinkPredictor


class GCNGRU(nn.Module):
    """T-GCN: ``layers`` GCN layers (ReLU, dropout) then a GRU cell, width ``dim`` throughout."""

    def __init__(self, num_nodes: int, dim: int, layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.node_rows = nn.Embedding(num_nodes, dim)
        self.convs = nn.ModuleList(GCNConv(dim, dim) for _ in range(layers))
        self.gru = nn.GRUCell(dim, dim)
        self.predictor = LinkPredictor(dim)
        self.dropout = dropout

    def step(self, graph: MessageGraph, state_ND: torch.Tensor) -> torch.Tensor:
        """The nodes' state after snapshot ``graph``."""
        h_ND = self.node_rows.weight
        for conv in self.convs:
            h_ND = F.dropout(F.relu(conv(graph, h_ND)), self.dropout, self.training)
        return self.gru(h_ND, state_ND)

    def score(self, state_ND: torch.Tensor, src_P: torch.Tensor, dst_KP: list[torch.Tensor]):
        """``[K, P]`` scores of ``(src_P[i], dst_KP[k][i])``."""
        return self.predictor.score_against(state_ND[src_P], [state_ND[d] for d in dst_KP])
