"""A typed batch's input rows by node type: the featured types' feature rows and the
featureless types' learnt rows, fetched from their owners (distributed typed training,
:class:`TypedRowFetcher`) or read in process (:class:`LocalTypedRows`). Both are the
:class:`~shardgnn.loader.pipeline.InputRows` a :class:`~shardgnn.loader.pipeline.FeatureFetcher`
reads: typed training runs the same loader as homogeneous training, with a typed sampler."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import torch

from shardgnn.partition.typed import TypedPartitionBook
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore


class RawTypedRows(Protocol):
    """What reads a batch's input rows by node type from a model's own learnt rows (the model's
    :class:`~shardgnn.nn.typed.TypedInput`; the loader names no model class, ``nn`` is a layer
    above it)."""

    def raw_rows(self, ids_S: torch.Tensor, features: dict[int, torch.Tensor]): ...


class TypedBatchRows(NamedTuple):
    """A typed batch's input rows (a :class:`~shardgnn.loader.pipeline.MiniBatch`'s ``x_SF``)."""

    by_type: dict[int, tuple[torch.Tensor, torch.Tensor]]
    """``by_type[t] = (positions, rows)``: :meth:`~shardgnn.nn.typed.TypedInput.assemble`'s"""
    learnt: list
    """``(table, typed ids, rows)`` of the fetched learnt rows that take a gradient (the step
    sends it back to the table's owners)"""


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


class LocalTypedRows(_NoLookahead):
    """A batch's input rows by node type in one process: feature rows from ``features`` (type
    index -> ``[N_t, F_t]`` on ``device``), learnt rows from the model's ``typed_input`` (its
    parameters: their gradient reaches them through the step's backward)."""

    def __init__(
        self, typed_input: RawTypedRows, features: dict[int, torch.Tensor], device: torch.device
    ):
        self.typed_input, self.features, self.device = typed_input, features, device

    def gather(self, input_nodes: torch.Tensor) -> TypedBatchRows:
        rows = self.typed_input.raw_rows(input_nodes.to(self.device), self.features)
        return TypedBatchRows(rows, [])
