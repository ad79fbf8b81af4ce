"""The distributed graph store: this rank's partition, memory-mapped, plus the partition book.

Rank ``r`` owns part ``r``: the contiguous new-id range ``[start, end)``, its in-edge CSR
(neighbour ids in the global numbering), and — replicated on every rank — the in-degree of every
node (4 bytes a node), which GCN normalisation needs for remote neighbours.

Ranks on one host also open each other's parts, memory-mapped (:attr:`DistGraphStore.peers`): the
files sit once in the host's page cache, and a rank samples a same-host peer's nodes and reads its
feature rows itself instead of asking the peer through a collective.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.errors import ConfigError
from shardgnn.partition.book import PartitionBook, TypedPartitionBook
from shardgnn.partition.format import LocalPartition, read_partitions


@dataclasses.dataclass(frozen=True)
class PeerPart:
    """A same-host peer's part, as this rank reads it (memory-mapped, read-only)."""

    part: LocalPartition
    edge_offset: int
    indptr: np.ndarray

    @property
    def start(self) -> int:
        return self.part.start


class DistGraphStore:
    """One rank's view of a partitioned graph.

    Attributes:
        part: the loaded :class:`LocalPartition` (arrays memory-mapped).
        book: the partition book (owner lookup over ``P + 1`` boundaries).
        start, end: the owned id range.
        edge_offset: global CSR position of this part's first edge (parts are concatenated in
            order, so ``local position + edge_offset`` is the position in the reassembled graph).
        degree: int32 ``[N]`` in-degree of every node (replicated).
        peers: the parts of the other ranks on this host, by rank (empty: every peer is reached
            through collectives).
        edge_book: the edges' partition book (part ``p`` owns the global edge ids
            ``edge_offset .. edge_offset + e_p - 1`` of its rows' in-edges: where a store of
            edge features by edge id looks up their owner), set by :meth:`open`.
        typed: the (type, id) book: a typed graph's node types and relations, a homogeneous
            graph's one type and one relation (DGL's ``DistGraph``: homogeneous is typed with one
            type), so code over node types needs no branch for the homogeneous case.
    """

    def __init__(
        self,
        part: LocalPartition,
        edge_offset: int,
        degree: np.ndarray,
        peers: dict[int, PeerPart] | None = None,
        typed: TypedPartitionBook | None = None,
    ):
        self.part = part
        self.peers = dict(peers or {})
        self.book: PartitionBook = part.book
        self.start, self.end = part.start, part.end
        self.indptr = np.ascontiguousarray(part.indptr, dtype=np.int64)
        self.indices = part.indices
        self.edge_offset = int(edge_offset)
        self.edge_book: PartitionBook | None = None
        self.degree = degree
        self.typed = (
            typed if typed is not None else TypedPartitionBook.one_type(self.book.boundaries)
        )

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        rank: int,
        world_size: int,
        comm: Communicator,
        verify: bool = True,
        host_ranks: tuple[int, ...] = (),
    ) -> "DistGraphStore":
        """Open part ``rank`` of the partition directory (checks its files) and gather degrees;
        also open, memory-mapped, the parts of the other ``host_ranks`` (same-host peers).

        Collective: every rank must call it.
        """
        pset = read_partitions(path, verify=False)
        if pset.num_parts != world_size:
            raise ConfigError(
                f"{path} holds {pset.num_parts} parts but the job has {world_size} workers; "
                f"run with --workers {pset.num_parts} or re-partition with --parts {world_size}"
            )
        part = pset.load_part(rank, mmap=True, verify=verify)

        def edge_offset_of(p: int) -> int:
            return sum(int(info["num_edges"]) for info in pset.meta["parts"][:p])

        edge_offset = edge_offset_of(rank)
        # The owner verifies its own files; peers trust that and only map them.
        peers = {}
        for p in host_ranks:
            if p != rank:
                peer = pset.load_part(p, mmap=True, verify=False)
                indptr = np.ascontiguousarray(peer.indptr, dtype=np.int64)
                peers[p] = PeerPart(peer, edge_offset_of(p), indptr)
        local_degree = torch.from_numpy(np.diff(np.asarray(part.indptr)).astype(np.int32))
        # All ranks' degree blocks, in rank (= id range) order: one all-to-all that sends the own
        # block to every peer.
        received = comm.all_to_all([local_degree] * world_size, stage="setup")
        degree = torch.cat(received).numpy()
        assert degree.shape[0] == pset.num_nodes
        store = cls(part, edge_offset, degree, peers, pset.typed_book)
        # the edges' book: part p owns the global edge ids (CSR positions) of its rows' in-edges
        store.edge_book = PartitionBook(
            np.cumsum([0] + [int(info["num_edges"]) for info in pset.meta["parts"]])
        )
        return store

    @property
    def num_nodes(self) -> int:
        return self.book.num_nodes

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """Part (= rank) owning each global id."""
        return self.book.owner(ids)


__all__ = ["DistGraphStore", "PeerPart"]
