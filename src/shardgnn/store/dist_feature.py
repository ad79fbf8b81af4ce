"""The distributed feature store: rows live with their owners; ``gather`` fetches remote rows with
two all-to-alls (ids out, rows back) and reads local rows directly. Bit-exact by construction.
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.codec import RowCodec
from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import PartitionBook, bucket_by_owner
from shardgnn.store.feature import FeatureStore, LocalFeatureStore


class DistFeatureStore(FeatureStore):
    """A ``[N, F]`` matrix split by owner range; a collective ``gather`` (every rank must call it,
    possibly with no ids).

    Args:
        local: this rank's rows ``[end - start, F]`` (an array, memory map or tensor).
        book: the partition book.
        rank: this rank (= the part it owns).
        comm: the communicator (all bytes are counted under ``stage``).
        stage: the communication stage name, e.g. ``fetch``.
        codec: remote rows travel quantised by this low-bit codec (``--fetch-bits``; None: exact).
    """

    def __init__(
        self,
        local,
        book: PartitionBook,
        rank: int,
        comm: Communicator,
        stage: str = "fetch",
        codec: RowCodec | None = None,
    ):
        self.local = local if isinstance(local, FeatureStore) else LocalFeatureStore(local)
        self.book, self.rank, self.comm, self.stage, self.codec = book, rank, comm, stage, codec
        self.start, self.end = (int(v) for v in book.part_range(rank))
        self._row_shape = tuple(self.local.shape[1:])
        self.slow_rows = 0
        """rows requested from a slow tier (peers; also own rows when on disk), for hit-rate
        baselines"""

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.book.num_nodes, *self._row_shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    @property
    def on_disk(self) -> bool:
        return self.local.on_disk

    def local_mask(self, ids: np.ndarray) -> np.ndarray:
        return (ids >= self.start) & (ids < self.end)

    @property
    def collective(self) -> bool:
        return True

    def read_local_into(self, ids: np.ndarray, out: torch.Tensor, positions: np.ndarray) -> None:
        if ids.shape[0]:
            self.local.gather_into(torch.from_numpy(ids - self.start), out, positions)

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        out = torch.empty((ids.shape[0], *self._row_shape), dtype=self.dtype)
        self._gather_into(ids, out, np.arange(ids.shape[0]))
        return out

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        self.check_ids(ids)
        self._gather_into(ids, out, positions)

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        world = self.comm.world_size
        ids_np = ids.numpy()
        owners = self.book.owner(ids_np)
        order, counts = bucket_by_owner(ids_np, owners, world)
        grouped = torch.from_numpy(ids_np[order])
        requests = list(torch.split(grouped, counts.tolist()))
        self.slow_rows += ids_np.shape[0] - (0 if self.on_disk else int(counts[self.rank]))
        # Own rows are read below without a round trip; peers get our requests.
        mine = requests[self.rank]
        requests[self.rank] = mine[:0]
        incoming = self.comm.all_to_all(requests, self.stage)
        replies = [self.local.gather(req - self.start) for req in incoming]
        rows = self.comm.all_to_all(replies, self.stage, codec=self.codec)
        # Rows arrived grouped by owner; each owner's block is scattered straight to its output
        # positions, own rows copied from the local store (no concatenated intermediate).
        targets = np.split(positions[order], np.cumsum(counts)[:-1])
        for owner, (block, where) in enumerate(zip(rows, targets)):
            if owner == self.rank:
                self.local.gather_into(mine - self.start, out, where)
            elif where.shape[0]:
                out.index_copy_(0, torch.from_numpy(where), block)
