"""A typed batch's input rows, fetched by node type from their owners (distributed typed
training): the featured types' feature rows and the featureless types' learnt rows."""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.partition.hetero import TypedPartitionBook
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore


class TypedRowFetcher:
    """A batch's input rows by node type, fetched from their owners: feature rows of featured
    types, learnt rows of featureless ones (collective: every rank fetches every type, in type
    order, also with no nodes of it)."""

    def __init__(
        self,
        typed: TypedPartitionBook,
        features: dict[int, DistFeatureStore],
        tables: dict[int, DistEmbeddingTable | DistFeatureStore],
        device: torch.device,
    ):
        self.typed, self.features, self.tables, self.device = typed, features, tables, device
        self.num_types = len(typed.node_types)

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
