"""Learnable rows sharded by partition: each rank holds, and alone updates, the rows of the nodes
its part owns; no row is replicated, so a rank's table is 1/P of the whole.

A step reads rows through the all-to-all fetch path (:class:`DistFeatureStore` over the local
table: ids to owners, rows back) and sends the rows' gradients back the same way (ids, then
gradient rows, in one all-to-all each). Every owner then runs one sparse optimiser step over
everything it received, repeats from several ranks summed. P ranks therefore take, row for row,
the step one process takes over the union of their batches (tested against one table, P = 2
and 3, across checkpoint and resume).

A cache may front the rows (:meth:`DistEmbeddingTable.cache_rows`, ``--embedding-staleness s``):
peers' rows are then read from it while they are at most ``s`` steps old (HET's bounded
staleness; see :mod:`shardgnn.store.cache.store`), and every update ticks its clock.

Collective ordering: :meth:`DistEmbeddingTable.gather` and :meth:`apply_gradients` are
collectives; every rank calls both once per training step, in that order, also with no rows
(an owner whose rows nobody used still steps, which keeps Adam's step count equal everywhere).
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import PartitionBook, bucket_by_owner
from shardgnn.store.cache.store import CachedFeatureStore
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.embedding import EmbeddingTable
from shardgnn.store.feature import FeatureStore


class DistEmbeddingTable:
    """The rows of ``book``'s part ``rank``, gathered and updated by global (new) node id.

    Args:
        book: the partition book (part ``p`` is owned by rank ``p``).
        rank: this rank.
        comm: the communicator; row and gradient bytes are counted under ``stage``.
        config: width, optimiser and learning rate.
        seed: seed of the initial values.
        orig_ids: original ids of this part's nodes (they key the initial values, so the rows
            start as one process's rows of the same nodes).
    """

    def __init__(
        self,
        book: PartitionBook,
        rank: int,
        comm: Communicator,
        config: EmbeddingConfig,
        seed: int,
        orig_ids: np.ndarray,
        stage: str = "embed",
    ):
        self.book, self.rank, self.comm, self.stage = book, rank, comm, stage
        self.start, self.end = (int(v) for v in book.part_range(rank))
        self.local = EmbeddingTable(self.end - self.start, config, seed, init_ids=orig_ids)
        self.owners = DistFeatureStore(self.local, book, rank, comm, stage)
        self.cache: CachedFeatureStore | None = None

    @property
    def rows(self) -> FeatureStore:
        """The store training reads rows from: the cache when one fronts the owners."""
        return self.owners if self.cache is None else self.cache

    def cache_rows(self, cache: CachedFeatureStore) -> None:
        """Read peers' rows through ``cache`` (built over :attr:`owners`, with a ``max_age``)."""
        assert cache.fallback is self.owners and cache.max_age is not None
        self.cache = cache

    @property
    def dim(self) -> int:
        return self.local.config.dim

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """The current rows of ``ids`` (global ids; collective)."""
        return self.rows.gather(ids)

    @torch.no_grad()
    def apply_gradients(self, ids: torch.Tensor, grad_RD: torch.Tensor) -> None:
        """Send each row's gradient to its owner; every owner takes one optimiser step over what
        it received (collective)."""
        ids_np = ids.numpy()
        order, counts = bucket_by_owner(ids_np, self.book.owner(ids_np), self.comm.world_size)
        bounds = np.cumsum(counts)[:-1]
        id_parts = [torch.from_numpy(s) for s in np.split(ids_np[order], bounds)]
        grad_parts = list(torch.split(grad_RD[torch.from_numpy(order)], counts.tolist()))
        got_ids = self.comm.all_to_all(id_parts, self.stage)
        got_grads = self.comm.all_to_all(
            grad_parts, self.stage, recv_counts=[int(t.shape[0]) for t in got_ids]
        )
        # Received in rank order, each rank's rows in its own order: the concatenation one
        # process makes of the ranks' batches, so repeats sum in the same order.
        local_ids = torch.cat(got_ids) - self.start
        self.local.apply_gradients(local_ids, torch.cat(got_grads))
        if self.cache is not None:
            self.cache.tick()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """This rank's rows and optimiser state (a checkpoint holds one per rank)."""
        return self.local.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.local.load_state_dict(state)
