"""Random walks over a partition, each step drawn by the current node's owner: meta-path walks
over a typed partition (the distributed :func:`shardgnn.sampling.walks.metapath_walks`) and
uniform walks per node over a plain one (the distributed :func:`~shardgnn.sampling.walks.
node_walks`)."""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import bucket_by_owner
from shardgnn.sampling.kernels import KERNEL_LOCK
from shardgnn.sampling.walks import (
    check_walks,
    metapath_relations,
    node_walk_step_kernel,
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
    part = graph.part
    indptr = np.ascontiguousarray(graph.indptr, dtype=np.int64)
    out = np.full((starts.shape[0], length + 1), -1, dtype=np.int64)
    out[:, 0] = starts
    walk_ids = np.arange(starts.shape[0], dtype=np.int64) + walk_offset

    def draw(nodes: np.ndarray, walks: np.ndarray, i: int, out_K: np.ndarray) -> None:
        walk_step_kernel(
            indptr, part.indices, part.etype, np.int64(part.start), nodes, walks,
            np.int64(path_R[i % len(path_R)]), np.uint64(seed), np.int64(i), out_K,
        )  # fmt: skip

    _walk_by_owners(out, walk_ids, graph.owner, comm, draw, stage)
    return out


def dist_node_walks(
    owner,
    indptr: np.ndarray,
    indices: np.ndarray,
    first_row: int,
    comm: Communicator,
    starts: np.ndarray,
    walk_keys: np.ndarray,
    num_walks: int,
    length: int,
    seed: int,
    stage: str = "walk",
) -> np.ndarray:
    """:func:`~shardgnn.sampling.walks.node_walks` over a partition: ``num_walks`` walks of
    ``length`` steps from each of ``starts`` (this rank's; any owner), each step drawn by the
    owner of the walk's current node over its rows (``indptr``/``indices``: its in-edge CSR, rows
    ``first_row ..``; ``owner(ids)``: the owning rank of ids). A collective: every rank calls it,
    possibly with no starts; ``length`` exchanges of requests and replies.

    Walk ``j`` of start ``s`` draws from the stream of walk ``walk_keys[s] * num_walks + j``: with
    ``walk_keys`` the starts' original ids and rows in the original order of each node's edges,
    the walks are one process's :func:`node_walks` over the whole graph, node for node."""
    starts = np.asarray(starts, dtype=np.int64)
    out = np.full((starts.shape[0], num_walks, length + 1), -1, dtype=np.int64)
    out[:, :, 0] = starts[:, None]
    walk_ids = np.asarray(walk_keys, dtype=np.int64)[:, None] * num_walks
    walk_ids = (walk_ids + np.arange(num_walks, dtype=np.int64)).reshape(-1)
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)

    def draw(nodes: np.ndarray, walks: np.ndarray, i: int, out_K: np.ndarray) -> None:
        node_walk_step_kernel(
            indptr, indices, np.int64(first_row), nodes, walks, np.uint64(seed), np.int64(i), out_K
        )

    _walk_by_owners(out.reshape(-1, length + 1), walk_ids, owner, comm, draw, stage)
    return out


def _walk_by_owners(out, walk_ids: np.ndarray, owner, comm: Communicator, draw, stage: str):
    """Fill ``out[:, 1:]`` (``[walks, length + 1]``, starts in column 0) step by step: each step
    sends every live walk's (current node, walk id) to the node's owner, which draws the next
    node (``draw(nodes, walks, step, out)``, a kernel over its rows) and sends it back."""
    world = comm.world_size
    for i in range(out.shape[1] - 1):
        current = out[:, i]
        active = np.flatnonzero(current >= 0)
        order, counts = bucket_by_owner(current[active], owner(current[active]), world)
        asked = active[order]
        bounds = np.cumsum(counts)[:-1]
        # a request is (node, walk id) pairs; the step is the same everywhere
        requests = [
            torch.from_numpy(np.stack([current[rows], walk_ids[rows]], axis=1))
            for rows in np.split(asked, bounds)
        ]
        replies = []
        for request in comm.all_to_all(requests, stage):
            pairs = request.numpy().reshape(-1, 2)
            nxt = np.empty(pairs.shape[0], dtype=np.int64)
            with KERNEL_LOCK:
                draw(np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]), i, nxt)
            replies.append(torch.from_numpy(nxt))
        got = comm.all_to_all(replies, stage, recv_counts=counts.tolist())
        out[asked, i + 1] = torch.cat(got).numpy() if asked.size else np.zeros(0, np.int64)
