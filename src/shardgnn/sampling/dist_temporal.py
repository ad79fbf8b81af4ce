"""Temporal neighbour sampling over a temporal partition: each seed's events drawn by its node's
owner (the distributed variant of :func:`shardgnn.sampling.temporal.temporal_hop`)."""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.partition.book import bucket_by_owner, unbucket_segments
from shardgnn.sampling.temporal import TemporalHop, temporal_hop


def dist_temporal_hop(
    store,
    comm,
    nodes: np.ndarray,
    seed_times: np.ndarray,
    fanout: int,
    mode: str = "recent",
    seed: int = 0,
    stage: str = "sample",
) -> TemporalHop:
    """:func:`sample_temporal_neighbors` over a temporal partition (``store``: its
    :class:`~shardgnn.store.dist_graph.DistGraphStore`): each seed's events are drawn by its
    node's owner over one all-to-all of requests and two of replies (a collective: every rank
    calls it, possibly with no seeds). The owner draws with the seed's own key (global id,
    time, ``seed``), so the hop equals one process's on the reassembled graph."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    seed_times = np.ascontiguousarray(seed_times, dtype=np.float64)
    world, part = comm.world_size, store.part
    order, counts = bucket_by_owner(nodes, store.owner(nodes), world)
    bounds = np.cumsum(counts)[:-1]
    # a request row: (node, time bits); replies: per-seed counts, then (nbr, time bits, eid)
    requests = [
        torch.from_numpy(np.stack([nodes[rows], seed_times[rows].view(np.int64)], axis=1))
        for rows in np.split(order, bounds)
    ]
    incoming = comm.all_to_all(requests, stage)
    reply_counts, reply_rows = [], []
    for request in incoming:
        pairs = request.numpy().reshape(-1, 2)
        offsets, nbr, when, eid = temporal_hop(
            store.indptr, part.indices, part.edge_arrays["times"], part.edge_arrays["eids"],
            pairs[:, 0] - part.start, pairs[:, 1].view(np.float64), fanout, mode, seed,
            id_offset=part.start,
        )  # fmt: skip
        reply_counts.append(torch.from_numpy(np.diff(offsets)))
        reply_rows.append(torch.from_numpy(np.stack([nbr, when.view(np.int64), eid], axis=1)))
    got_counts = comm.all_to_all(reply_counts, stage, recv_counts=counts.tolist())
    got_rows = comm.all_to_all(reply_rows, stage)
    per_seed = torch.cat(got_counts).numpy() if nodes.size else np.zeros(0, np.int64)
    rows = torch.cat(got_rows).numpy().reshape(-1, 3) if nodes.size else np.zeros((0, 3), np.int64)
    # replies arrive grouped by owner: put every seed's segment back at its position
    offsets, gather = unbucket_segments(order, per_seed)
    rows = rows[gather]
    return TemporalHop(
        nodes, seed_times, offsets, rows[:, 0].copy(), rows[:, 1].view(np.float64).copy(),
        rows[:, 2].copy(),
    )  # fmt: skip
