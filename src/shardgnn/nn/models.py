"""Stacked GNN models that run on sampled blocks or on the full graph alike.

``model(graphs, x)`` takes one :class:`MessageGraph` per layer (input layer first) and the
features of ``graphs[0]``'s src nodes; it returns ``[D_last, num_classes]`` logits. For
full-graph training pass the same full-graph ``MessageGraph`` for every layer.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.errors import ConfigError
from shardgnn.nn.conv import GATConv, GCNConv, SAGEConv
from shardgnn.nn.dropout import hashed_dropout
from shardgnn.nn.functional import dropout
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.sampling.kernels import mix_seed

MODELS = ("sage", "gcn", "gat")


@dataclasses.dataclass(kw_only=True)
class ModelConfig:
    """Model architecture."""

    model: str = "sage"
    """layer type: sage (GraphSAGE-mean), gcn or gat"""
    hidden: int = 256
    """hidden width (for gat: per head)"""
    num_layers: int = 2
    """number of message-passing layers"""
    dropout: float = 0.5
    """dropout on the hidden representations between layers"""
    input_dropout: float = 0.0
    """dropout on the input features (Kipf & Welling's GCN uses 0.5)"""
    heads: int = 4
    """attention heads (gat only)"""

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose one of {MODELS}")
        if self.hidden < 1 or self.num_layers < 1 or self.heads < 1:
            raise ConfigError(f"hidden={self.hidden}, num_layers={self.num_layers}, heads={self.heads} must be >= 1")
        if not (0.0 <= self.dropout < 1.0 and 0.0 <= self.input_dropout < 1.0):
            raise ConfigError(f"dropout={self.dropout} and input_dropout={self.input_dropout} must lie in [0, 1)")


class GNN(nn.Module):
    """A stack of graph layers with ReLU (ELU for GAT) and dropout between them.

    The input features may be a sparse COO tensor in full-graph mode (see ``nn.functional``).
    """

    def __init__(self, layers: Sequence[nn.Module], dropout: float = 0.5, activation=F.relu,
                 input_dropout: float = 0.0):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = dropout
        self.input_dropout = input_dropout
        self.activation = activation
        self.dropout_seed: int | None = None
        self.dropout_step = 0

    def use_hashed_dropout(self, seed: int) -> None:
        """Draw dropout masks from ``(seed, training step, layer, global node id, column)``
        (:func:`hashed_dropout`): a parallel kernel instead of torch's single-threaded Bernoulli
        sampling, and in full-graph training a rank holding rows ``start..end`` of the graph
        drops exactly what a single process drops for those nodes. Each graph passed to
        ``forward`` names its rows' global ids: ``graph.src_ids_S`` (sampled blocks) or
        ``graph.row_offset`` (full graph or row block; 0 when absent)."""
        self.dropout_seed = int(seed)
        self.dropout_step = 0

    def _drop(self, h: torch.Tensor, p: float, graph, layer: int) -> torch.Tensor:
        if p == 0.0 or not self.training:
            return h
        if self.dropout_seed is None:
            return dropout(h, p, True)
        seed = mix_seed(self.dropout_seed, self.dropout_step, layer)
        src_ids = getattr(graph, "src_ids_S", None)
        if src_ids is not None:
            return hashed_dropout(h, p, seed, row_ids=src_ids)
        assert graph.num_src == graph.num_dst, "hashed dropout needs global row ids or full-graph rows"
        return hashed_dropout(h, p, seed, getattr(graph, "row_offset", 0))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def forward(self, graphs: Sequence[MessageGraph], x_SF: torch.Tensor) -> torch.Tensor:
        if len(graphs) != len(self.layers):
            raise ValueError(f"model has {len(self.layers)} layers but got {len(graphs)} graphs")
        h = self._drop(x_SF, self.input_dropout, graphs[0], 0)
        for i, (layer, graph) in enumerate(zip(self.layers, graphs)):
            if i > 0:
                h = self._drop(self.activation(h), self.dropout, graph, i)
            h = layer(graph, h)
        if self.training and self.dropout_seed is not None:
            self.dropout_step += 1
        return h


def build_model(config: ModelConfig, in_dim: int, num_classes: int) -> GNN:
    """Build the model ``config`` names for ``in_dim`` input features and ``num_classes`` outputs."""
    dims = [in_dim] + [config.hidden] * (config.num_layers - 1) + [num_classes]
    layers: list[nn.Module] = []
    if config.model == "sage":
        layers = [SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    if config.model == "gcn":
        layers = [GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    heads = config.heads
    for i in range(config.num_layers):
        last = i == config.num_layers - 1
        in_width = in_dim if i == 0 else config.hidden * heads
        out_width = num_classes if last else config.hidden
        layers.append(GATConv(in_width, out_width, heads=1 if last else heads, concat=not last))
    return GNN(layers, config.dropout, activation=F.elu, input_dropout=config.input_dropout)
