"""Graph- and edge-level models: message passing over a batch of small graphs, then a readout
that turns each graph's node rows into one row and a head (graph classification and
regression), or a head over each edge's two end rows and its features (edge classification).

The readouts (:func:`readout`) are PyG's ``global_add_pool``, ``global_mean_pool``,
``global_max_pool`` and ``AttentionalAggregation(gate_nn=Linear(H, 1))``, equal within 1e-6
(``tests/test_graphlevel.py``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.config import GRAPH_MODELS, READOUTS
from shardgnn.nn.conv import GINConv, GINEConv
from shardgnn.nn.functional import segment_softmax
from shardgnn.nn.message_graph import MessageGraph


def readout(
    kind: str,
    h_NH: torch.Tensor,
    graph_index_N: torch.Tensor,
    num_graphs: int,
    gate_N1: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[B, H]``: each graph's node rows ``h_NH`` (``graph_index_N``: their graph, 0..B-1)
    summed, averaged, maxed or, for ``attention``, summed under weights ``softmax(gate_N1)``
    taken over each graph's nodes."""
    H = h_NH.shape[1]
    if kind == "max":
        return h_NH.new_zeros(num_graphs, H).scatter_reduce(
            0, graph_index_N[:, None].expand(-1, H), h_NH, "amax", include_self=False
        )
    if kind == "attention":
        assert gate_N1 is not None, "attention readout needs its gate"
        h_NH = segment_softmax(gate_N1, graph_index_N, num_graphs) * h_NH
    sum_BH = h_NH.new_zeros(num_graphs, H).index_add(0, graph_index_N, h_NH)
    if kind == "mean":
        # an index_add of ones, not bincount: exported models (ONNX) have no bincount
        ones_N = torch.ones_like(graph_index_N, dtype=h_NH.dtype)
        count_B = ones_N.new_zeros(num_graphs).index_add(0, graph_index_N, ones_N).clamp_min(1)
        return sum_BH / count_B[:, None]
    return sum_BH


class GraphGNN(nn.Module):
    """An input projection, ``num_layers`` GIN (or GINE) layers each followed by batch
    normalisation, ReLU and dropout, then a two-layer head: over each graph's readout
    (``level`` ``graph``: ``out_dim`` outputs per graph) or over each edge's
    ``[h_src, h_dst, edge row]`` (``level`` ``edge``: ``out_dim`` outputs per edge, as the
    edge classifiers of Exa.TrkX)."""

    def __init__(
        self,
        model: str,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int,
        *,
        dropout: float = 0.0,
        readout: str = "sum",
        edge_dim: int = 0,
        level: str = "graph",
    ):
        super().__init__()
        assert model in GRAPH_MODELS and readout in READOUTS and level in ("graph", "edge")
        self.model, self.readout_kind, self.dropout, self.level = model, readout, dropout, level
        self.num_layers = num_layers
        self.input = nn.Linear(in_dim, hidden)
        if model == "gine":
            convs = [GINEConv(hidden, hidden, edge_dim) for _ in range(num_layers)]
        else:
            convs = [GINConv(hidden, hidden) for _ in range(num_layers)]
        self.convs = nn.ModuleList(convs)
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(num_layers))
        self.gate = nn.Linear(hidden, 1) if readout == "attention" and level == "graph" else None
        head_in = hidden if level == "graph" else 2 * hidden + edge_dim
        self.head = nn.Sequential(nn.Linear(head_in, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(
        self,
        graph: MessageGraph,
        x_NF: torch.Tensor,
        graph_index_N: torch.Tensor,
        num_graphs: int,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[B, out_dim]`` for the ``num_graphs`` graphs of a batch (``graph``: their disjoint
        union; ``graph_index_N``: each node's graph), or ``[E, out_dim]`` for its edges in CSR
        order (``level`` ``edge``)."""
        return self.encode(graph, x_NF, graph_index_N, num_graphs, edge_attr_ED)[1]

    def encode(
        self,
        graph: MessageGraph,
        x_NF: torch.Tensor,
        graph_index_N: torch.Tensor,
        num_graphs: int,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings, outputs)``: each graph's readout ``[B, H]`` (what the head reads) and
        the head's outputs; for ``level`` ``edge`` the node rows ``[N, H]`` and each edge's
        outputs."""
        h = self.input(x_NF)
        for conv, norm in zip(self.convs, self.norms):
            h = conv(graph, h, edge_attr_ED) if self.model == "gine" else conv(graph, h)
            h = F.dropout(F.relu(_normalise(norm, h)), self.dropout, self.training)
        if self.level == "edge":
            ends = [h.index_select(0, graph.indices_E), h.index_select(0, graph.dst_index_E())]
            rows_EK = torch.cat(ends + ([] if edge_attr_ED is None else [edge_attr_ED]), dim=1)
            return h, self.head(F.dropout(rows_EK, self.dropout, self.training))
        gate = None if self.gate is None else self.gate(h)
        pooled_BH = readout(self.readout_kind, h, graph_index_N, num_graphs, gate)
        return pooled_BH, self.head(F.dropout(pooled_BH, self.dropout, self.training))


def _normalise(norm: nn.BatchNorm1d, h_NH: torch.Tensor) -> torch.Tensor:
    """Batch normalisation of a batch's node rows; a batch of one node (a one-atom molecule
    drawn alone) has no batch variance, so it is normalised by the running statistics."""
    if not norm.training or h_NH.shape[0] > 1:
        return norm(h_NH)
    return F.batch_norm(
        h_NH, norm.running_mean, norm.running_var, norm.weight, norm.bias, False, 0.0, norm.eps
    )
