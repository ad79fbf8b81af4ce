"""Meta-path walks over a typed partition, each step drawn by the current node's owner (the
distributed variant of :func:`shardgnn.sampling.walks.metapath_walks`)."""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import bucket_by_owner
from shardgnn.sampling.kernels import KERNEL_LOCK
from shardgnn.sampling.walks import (
    check_walks,
    metapath_relations,
    walk_step_kernel,
)
from shardgnn.store.dist_graph import DistGraphStore


def dist_metapath_walks(
    graph: DistGraphStore,
    typed_book,
    comm: Communicator,
    metapath: list[str],
    starts: np.ndarray,
    length: int,
    seed: int,
    walk_offset: int = 0,
    stage: str = "walk",
) -> np.ndarray:
    """:func:`metapath_walks` over a typed partition (``typed_book``: its
    :class:`~shardgnn.partition.typed.TypedPartitionBook`): each step of a walk is drawn by the
    owner of its current node, over an all-to-all per step (a collective: every rank calls it,
    possibly with no starts). The owner draws with the walk's own stream, so the walks equal one
    process's on the reassembled graph, for any number of ranks.

    Walk ``w`` of this rank is walk ``w + walk_offset`` (give ranks disjoint offsets)."""
    relations = typed_book.relations
    path_R = metapath_relations(relations, metapath)
    starts = check_walks(
        relations, typed_book.node_types, typed_book.type_of, path_R, starts, length
    )
    part, world = graph.part, comm.world_size
    indptr = np.ascontiguousarray(graph.indptr, dtype=np.int64)
    out = np.full((starts.shape[0], length + 1), -1, dtype=np.int64)
    out[:, 0] = starts
    walk_ids = np.arange(starts.shape[0], dtype=np.int64) + walk_offset
    for i in range(length):
        current = out[:, i]
        active = np.flatnonzero(current >= 0)
        order, counts = bucket_by_owner(current[active], graph.owner(current[active]), world)
        asked = active[order]
        bounds = np.cumsum(counts)[:-1]
        # a request is (node, walk id) pairs; the step and relation are the same everywhere
        requests = [
            torch.from_numpy(np.stack([current[rows], walk_ids[rows]], axis=1))
            for rows in np.split(asked, bounds)
        ]
        incoming = comm.all_to_all(requests, stage)
        replies = []
        for request in incoming:
            pairs = request.numpy().reshape(-1, 2)
            nxt = np.empty(pairs.shape[0], dtype=np.int64)
            with KERNEL_LOCK:
                walk_step_kernel(
                    indptr, part.indices, part.etype, np.int64(part.start),
                    np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]),
                    np.int64(path_R[i % len(path_R)]), np.uint64(seed), np.int64(i), nxt,
                )  # fmt: skip
            replies.append(torch.from_numpy(nxt))
        got = comm.all_to_all(replies, stage, recv_counts=counts.tolist())
        out[asked, i + 1] = torch.cat(got).numpy() if asked.size else np.zeros(0, np.int64)
    return out
