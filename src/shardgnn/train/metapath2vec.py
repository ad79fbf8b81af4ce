"""The metapath2vec training loop (one process): meta-path walks from every node of the path's
start type, their (center, context) pairs, and sparse-Adam steps of the skip-gram model
(:class:`shardgnn.nn.metapath2vec.SkipGram`, which holds the model and its loss) against
negatives drawn uniformly from the context node's own type (metapath2vec++). The ``center``
table is the embedding."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.typed import TypedGraph
from shardgnn.nn.metapath2vec import SkipGram, walk_pairs
from shardgnn.sampling.walks import metapath_walks


@dataclasses.dataclass(kw_only=True)
class Metapath2VecConfig:
    """Settings of :func:`train_metapath2vec`."""

    dim: int = 64
    walk_length: int = 20
    walks_per_node: int = 5
    window: int = 3
    negatives: int = 5
    epochs: int = 2
    batch_size: int = 4096
    lr: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dim", "walk_length", "walks_per_node", "window", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"metapath2vec {name}={getattr(self, name)} must be >= 1")
        if self.negatives < 0 or self.lr <= 0:
            raise ConfigError("metapath2vec needs negatives >= 0 and lr > 0")


def train_metapath2vec(
    graph: TypedGraph, metapath: list[str], config: Metapath2VecConfig | None = None
) -> np.ndarray:
    """float32 ``[N, dim]`` embeddings of every node (global ids) trained on ``metapath`` walks
    from every node of its start type (``graph`` must hold the reverse relations:
    ``graph.with_reverse_relations()``). Nodes of types the path never visits keep their initial
    rows."""
    cfg = config or Metapath2VecConfig()
    generator = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = SkipGram(graph.num_nodes, cfg.dim)
    optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=cfg.lr)
    first = graph.node_types.index(_start_type(graph, metapath))
    starts = np.arange(graph.type_offsets[first], graph.type_offsets[first + 1], dtype=np.int64)
    offsets = torch.from_numpy(graph.type_offsets)
    for epoch in range(cfg.epochs):
        walks = metapath_walks(
            graph,
            metapath,
            np.repeat(starts, cfg.walks_per_node),
            cfg.walk_length,
            seed=cfg.seed,
            walk_offset=epoch * starts.size * cfg.walks_per_node,
        )
        center, context = (torch.from_numpy(a) for a in walk_pairs(walks, cfg.window))
        order = torch.randperm(center.numel(), generator=generator)
        for begin in range(0, order.numel(), cfg.batch_size):
            batch = order[begin : begin + cfg.batch_size]
            u, v = center[batch], context[batch]
            # negatives of the context's own type: uniform in its id range
            v_type = torch.searchsorted(offsets, v, right=True) - 1
            low, size = offsets[v_type], offsets[v_type + 1] - offsets[v_type]
            draws = torch.rand(v.numel(), cfg.negatives, generator=generator)
            negative = low[:, None] + (draws * size[:, None]).long()
            optimizer.zero_grad()
            model.loss(u, v, negative).backward()
            optimizer.step()
    return model.center.weight.detach().numpy().copy()


def _start_type(graph: TypedGraph, metapath: list[str]) -> str:
    """The node type a meta-path's walks start from (its first relation's source)."""
    ids = graph.relation_ids(metapath[0]) if metapath else []
    if len(ids) != 1:
        raise ConfigError(f"meta-path {metapath} must start with one relation of the graph")
    return graph.relations[ids[0]][0]
