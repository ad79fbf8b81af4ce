"""A typed batch's input rows by node type: the featured types' feature rows and the
featureless types' learnt rows, fetched from their owners (distributed typed training,
:class:`TypedRowFetcher`) or read in process (:class:`LocalTypedRows`). Both are the
:class:`~shardgnn.loader.pipeline.InputRows` a :class:`~shardgnn.loader.pipeline.FeatureFetcher`
reads: typed training runs the same loader as homogeneous training, with a typed sampler."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from shardgnn.partition.typed import TypedPartitionBook
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.embedding import EmbeddingTable


class TypedBatchRows(NamedTuple):
    """A typed batch's input rows (a :class:`~shardgnn.loader.pipeline.MiniBatch`'s ``x_SF``)."""

    by_type: dict[int, tuple[torch.Tensor, torch.Tensor]]
    """``by_type[t] = (positions, rows)``: :meth:`~shardgnn.nn.typed.TypedInput.assemble`'s"""
    learnt: list
    """``(table, typed ids, rows)`` of the fetched learnt rows that take a gradient (the step
    sends it back to the table's owners)"""

    def apply_gradients(self) -> None:
        """After the step's backward: each learnt table's optimiser step on its rows' gradients
        (every table, in type order, also with no rows: Adam counts steps; on workers a
        collective, the gradients go back to the rows' owners)."""
        for table, typed_ids, rows in self.learnt:
            grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
            table.apply_gradients(typed_ids, grad.cpu())


class _NoLookahead:
    """The :class:`~shardgnn.loader.pipeline.InputRows` look-ahead hooks, doing nothing: typed
    rows are read batch by batch."""

    lookahead = 0

    def plan(self, window: list[torch.Tensor]) -> None:
        pass

    def prefetch(self) -> None:
        pass


class TypedRowFetcher(_NoLookahead):
    """A batch's input rows by node type, fetched from their owners: feature rows of featured
    types, learnt rows of featureless ones (collective: every rank fetches every type, in type
    order, also with no nodes of it). ``learn``: the learnt rows :meth:`gather` returns take a
    gradient."""

    def __init__(
        self,
        typed: TypedPartitionBook,
        features: dict[int, DistFeatureStore],
        tables: dict[int, DistEmbeddingTable | DistFeatureStore],
        device: torch.device,
        learn: bool = False,
    ):
        self.typed, self.features, self.tables, self.device = typed, features, tables, device
        self.num_types = len(typed.node_types)
        self.learn = learn

    def gather(self, input_nodes: torch.Tensor) -> TypedBatchRows:
        """The rows of a batch's ``input_nodes`` (:meth:`fetch` with this fetcher's ``learn``)."""
        return TypedBatchRows(*self.fetch(input_nodes, self.learn))

    def fetch(
        self, input_nodes: torch.Tensor, learn: bool
    ) -> tuple[dict[int, tuple[torch.Tensor, torch.Tensor]], list]:
        """``(by_type, learnt)``: ``by_type[t] = (positions, rows)`` for
        :meth:`TypedInput.assemble`; ``learnt``: ``(table, typed ids, rows)`` of the learnt rows
        that take a gradient (``learn``)."""
        ids = input_nodes.numpy()
        type_S = self.typed.type_of(ids)
        by_type, learnt = {}, []
        for t in range(self.num_types):
            where = np.flatnonzero(type_S == t)
            typed_ids = torch.from_numpy(self.typed.typed_id(ids[where], t))
            if t in self.features:
                rows = self.features[t].gather(typed_ids).to(self.device)
            else:
                table = self.tables[t]
                rows = table.gather(typed_ids).to(self.device)
                if learn:
                    rows.requires_grad_(True)
                    learnt.append((table, typed_ids, rows))
            by_type[t] = (torch.from_numpy(where).to(self.device), rows)
        return by_type, learnt


class LocalTypedRows(TypedRowFetcher):
    """A batch's input rows by node type in one process: the featured types' feature rows and
    the featureless types' learnt rows (one table per type, :class:`EmbeddingTable`: the rows a
    worker's :class:`DistEmbeddingTable` holds of its part), by global id of the unpartitioned
    graph (``type_offsets``: where each type's ids start)."""

    def __init__(
        self,
        type_offsets: np.ndarray,
        features: dict[int, torch.Tensor],
        tables: dict[int, EmbeddingTable],
        device: torch.device,
        learn: bool = False,
    ):
        super().__init__(
            _GlobalTypes(np.asarray(type_offsets, dtype=np.int64)),
            {t: _Rows(x) for t, x in features.items()},
            tables,
            device,
            learn,
        )


class _GlobalTypes:
    """The type of a global id, and its id within its type, of a graph whose types are
    contiguous id ranges (one process's typed graph: what a partition's typed book answers)."""

    def __init__(self, type_offsets: np.ndarray):
        self.type_offsets = type_offsets
        self.node_types = range(len(type_offsets) - 1)

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.type_offsets, ids, side="right") - 1

    def typed_id(self, ids: np.ndarray, t: int) -> np.ndarray:
        return np.asarray(ids, dtype=np.int64) - self.type_offsets[t]


class _Rows:
    """Rows of a tensor by id, where the tensor lies (a feature matrix on the training
    device)."""

    def __init__(self, x: torch.Tensor):
        self.x = x

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        return self.x.index_select(0, ids.to(self.x.device))
