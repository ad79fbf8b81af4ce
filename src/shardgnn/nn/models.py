"""Stacked GNN models that run on sampled blocks or on the full graph alike.

``model(graphs, x)`` takes one :class:`MessageGraph` per layer (input layer first) and the
features of ``graphs[0]``'s src nodes; it returns ``[D_last, num_classes]`` logits. For
full-graph training pass the same full-graph ``MessageGraph`` for every layer.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.errors import ConfigError
from shardgnn.nn.config import ModelConfig, is_user_model
from shardgnn.nn.conv import GATConv, GATv2Conv, GCNConv, GINConv, GINEConv, SAGEConv
from shardgnn.nn.dropout import hashed_dropout
from shardgnn.nn.functional import dropout, linear
from shardgnn.nn.message_graph import MessageGraph, spmm
from shardgnn.nn.user import build_user_model
from shardgnn.seeding import mix_seed


class GNN(nn.Module):
    """A stack of graph layers with ReLU (ELU for GAT) and dropout between them.

    The input features may be a sparse COO tensor (see ``nn.functional``; the models of
    :data:`~shardgnn.nn.config.SPARSE_INPUT_MODELS`).
    """

    def __init__(
        self,
        layers: Sequence[nn.Module],
        dropout: float = 0.5,
        activation=F.relu,
        input_dropout: float = 0.0,
    ):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout = dropout
        self.input_dropout = input_dropout
        self.activation = activation
        self.dropout_seed: int | None = None
        self.dropout_step = 0
        # a captured training step's seeds, one per layer, on the device (shardgnn.train.captured
        # fills them before each replay): the seeds a replay cannot compute in Python
        self.dropout_seeds: torch.Tensor | None = None

    def use_hashed_dropout(self, seed: int) -> None:
        """Draw dropout masks from ``(seed, training step, layer, original node id, column)``
        (:func:`hashed_dropout`): a parallel kernel instead of torch's single-threaded Bernoulli
        sampling, and whatever rows a worker holds of whatever partitioning, it drops exactly
        what a single process drops for those nodes. Each graph passed to ``forward`` names its
        rows' original ids in ``graph.node_keys_S`` (None: the whole graph, ids 0..S-1)."""
        self.dropout_seed = int(seed)
        self.dropout_step = 0

    def layer_dropout_seed(self, layer: int) -> int:
        """The seed of layer ``layer``'s dropout masks in this training step (hashed dropout)."""
        return mix_seed(self.dropout_seed, self.dropout_step, layer)

    def _drop(self, h: torch.Tensor, p: float, graph, layer: int) -> torch.Tensor:
        if p == 0.0 or not self.training:
            return h
        if self.dropout_seed is None:
            return dropout(h, p, True)
        seed = (
            self.layer_dropout_seed(layer)
            if self.dropout_seeds is None
            else self.dropout_seeds[layer]
        )
        if graph.node_keys_S is not None:
            return hashed_dropout(h, p, seed, row_ids=graph.node_keys_S)
        assert graph.num_src == graph.num_dst, (
            "hashed dropout needs node keys unless the graph is whole"
        )
        return hashed_dropout(h, p, seed)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def forward(
        self,
        graphs: Sequence[MessageGraph],
        x_SF: torch.Tensor,
        history: Mapping[int, tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Logits of the last graph's dst nodes; with ``history``, ``(logits, computed)``.

        ``history[l] = (mask_S, rows_HF)``: layer ``l``'s src nodes where ``mask_S`` holds take
        their input embedding from ``rows_HF`` (historical embeddings, in mask order, no
        gradient); the layer below computed the others. ``computed[l]`` is that layer's computed
        input (detached: what owners push), for each layer ``history`` names."""
        if len(graphs) != len(self.layers):
            raise ValueError(f"model has {len(self.layers)} layers but got {len(graphs)} graphs")
        computed: dict[int, torch.Tensor] = {}
        h = self._drop(x_SF, self.input_dropout, graphs[0], 0)
        for i, (layer, graph) in enumerate(zip(self.layers, graphs)):
            if i > 0 and history is not None and i in history:
                computed[i] = h.detach()
                h = with_history(h, *history[i])
            if i > 0:
                h = self._drop(self.activation(h), self.dropout, graph, i)
            h = layer(graph, h)
        if self.training and self.dropout_seed is not None:
            self.dropout_step += 1
        return h if history is None else (h, computed)


def with_history(h_CF: torch.Tensor, mask_S: torch.Tensor, rows_HF: torch.Tensor) -> torch.Tensor:
    """``[S, F]``: the computed rows ``h_CF`` where ``mask_S`` is False and the historical
    ``rows_HF`` where it is True, each in order (differentiable in ``h_CF``)."""
    assert int(mask_S.sum()) == rows_HF.shape[0] and h_CF.shape[0] + rows_HF.shape[0] == len(mask_S)
    if rows_HF.shape[0] == 0:
        return h_CF
    order = torch.cat([torch.nonzero(~mask_S).flatten(), torch.nonzero(mask_S).flatten()])
    stacked = torch.cat([h_CF, rows_HF.to(device=h_CF.device, dtype=h_CF.dtype)])
    return stacked[torch.argsort(order)]


# ---------------------------------------------------------------- propagation decoupled from layers
# Propagation decoupled from the transformation: APPNP (Gasteiger et al.: an MLP on the input
# rows, then ``K`` steps of personalised-PageRank propagation ``h = (1 - alpha) A h + alpha h0``)
# and SGC (Wu et al.: ``K`` steps of GCN propagation, then one linear layer). ``A`` is GCN's
# ``D^-1/2 (A + I) D^-1/2`` with the graph's degrees (:func:`~shardgnn.nn.message_graph.spmm`'s
# ``"gcn"``), so a block with every neighbour computes exactly the full graph's rows.
#
# One graph per propagation step, as the stacked models take one per layer: a sampled block
# (``--fanouts`` sets ``K``), the whole graph, or a distributed full-graph adjacency. Every
# block's dst nodes are a prefix of the first block's src nodes, so ``h0[:D]`` are the teleport
# rows of any step.


class DecoupledGNN(GNN):
    """APPNP (``kind="appnp"``: a two-layer MLP of width ``hidden``, then propagation) or SGC
    (``kind="sgc"``: propagation, then one linear layer; the layer runs first, which is the same
    product and moves ``out_dim`` columns instead of ``in_dim``). Dropout (hashed by original node
    id, as :class:`GNN`) on the input and, for APPNP, on the MLP's hidden rows."""

    def __init__(
        self,
        kind: str,
        in_dim: int,
        hidden: int,
        out_dim: int,
        steps: int,
        *,
        alpha: float = 0.1,
        dropout: float = 0.5,
        input_dropout: float = 0.0,
    ):
        super().__init__([], dropout, input_dropout=input_dropout)
        assert kind in ("appnp", "sgc") and steps >= 1
        self.kind, self.steps, self.alpha = kind, steps, alpha
        if kind == "appnp":
            self.lin1 = nn.Linear(in_dim, hidden)
            self.lin2 = nn.Linear(hidden, out_dim)
        else:
            self.lin = nn.Linear(in_dim, out_dim, bias=False)
            self.bias = nn.Parameter(torch.zeros(out_dim))

    @property
    def num_layers(self) -> int:
        return self.steps

    def forward(
        self, graphs: Sequence[Any], x_SF: torch.Tensor, history: Any = None
    ) -> torch.Tensor:
        if history is not None:
            raise ConfigError(
                f"--model {self.kind}: historical embeddings replace a layer's inputs, and "
                f"{self.kind} has no layer between its propagation steps; drop --historical"
            )
        if len(graphs) != self.steps:
            raise ValueError(f"model has {self.steps} steps but got {len(graphs)} graphs")
        h = self._drop(x_SF, self.input_dropout, graphs[0], 0)
        steps = iter(graphs)
        _, out = self._propagated(h, lambda z: spmm(next(steps), z, "gcn"), graphs[0])
        if self.training and self.dropout_seed is not None:
            self.dropout_step += 1
        return out

    def rows_forward(self, x_NF: torch.Tensor, propagate) -> tuple[torch.Tensor, torch.Tensor]:
        """Evaluation over whole rows (layer-wise inference): ``propagate(z)`` is one
        propagation step over every row (``A z``, a distributed product). Returns
        ``(embeddings, outputs)``: APPNP's embeddings are its MLP's hidden rows; SGC has no
        hidden layer, its embeddings are its outputs."""
        return self._propagated(x_NF, propagate, None)

    def _propagated(self, h, propagate, graph) -> tuple[torch.Tensor, torch.Tensor]:
        """``(hidden rows, outputs)`` of input rows ``h``, ``propagate(z)`` one propagation step
        (its output: the step's dst rows, a prefix of its input's); ``graph`` keys the hidden
        rows' dropout (None: evaluation, no dropout)."""
        if self.kind == "sgc":
            z = linear(self.lin, h)
            for _ in range(self.steps):
                z = propagate(z)
            out = z + self.bias.to(z.dtype)
            return out, out
        hidden = F.relu(linear(self.lin1, h))
        if graph is not None:
            hidden = self._drop(hidden, self.dropout, graph, 1)
        h0 = self.lin2(hidden)
        out = h0
        for _ in range(self.steps):
            step = propagate(out)
            out = (1 - self.alpha) * step + self.alpha * h0[: step.shape[0]]
        return hidden, out


def build_model(config: ModelConfig, in_dim: int, num_classes: int, edge_dim: int = 0) -> GNN:
    """Build the model ``config`` names for ``in_dim`` input features and ``num_classes`` outputs
    (``config.num_layers`` must be set: a training config resolves it from the fanouts);
    ``edge_dim``: the width of the edge features ``gine`` reads (each graph's ``edge_attr_ED``)."""
    assert config.num_layers is not None, "ModelConfig.num_layers is unresolved"
    if is_user_model(config.model):
        return build_user_model(config.model, config, in_dim, num_classes, edge_dim)  # type: ignore[return-value]
    dims = [in_dim] + [config.hidden] * (config.num_layers - 1) + [num_classes]
    layers: list[nn.Module] = []
    if config.model == "sage":
        layers = [SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    if config.model == "gcn":
        layers = [GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    if config.model in ("appnp", "sgc"):
        return DecoupledGNN(
            config.model, in_dim, config.hidden, num_classes, config.num_layers,
            alpha=config.alpha, dropout=config.dropout, input_dropout=config.input_dropout,
        )  # fmt: skip
    if config.model == "gin":
        layers = [GINConv(a, b) for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    if config.model == "gine":
        assert edge_dim > 0, "gine reads edge features: give their width"
        # Mean aggregation: a sum over a node's sampled in-edges grows with its degree (up to the
        # fan-out), and those large rows drown the edge features' signal in the first Adam steps
        # (measured: stuck at chance with sums, learning with means; the graph-set model
        # normalises its rows with batch norm instead).
        layers = [GINEConv(a, b, edge_dim, aggr="mean") for a, b in zip(dims[:-1], dims[1:])]
        return GNN(layers, config.dropout, input_dropout=config.input_dropout)
    attention = GATv2Conv if config.model == "gatv2" else GATConv
    heads = config.heads
    for i in range(config.num_layers):
        last = i == config.num_layers - 1
        in_width = in_dim if i == 0 else config.hidden * heads
        out_width = num_classes if last else config.hidden
        layers.append(
            attention(
                in_width,
                out_width,
                heads=1 if last else heads,
                concat=not last,
                attn_dropout=config.attention_dropout,
            )
        )
    return GNN(layers, config.dropout, activation=F.elu, input_dropout=config.input_dropout)
