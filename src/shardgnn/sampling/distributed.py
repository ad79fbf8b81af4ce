"""Cross-worker neighbour sampling over ``torch.distributed`` all-to-all (no RPC).

Per layer:
  1. the frontier (unique global ids, dst nodes first) is bucketed by owner;
  2. all-to-all: request ids to their owners;
  3. each owner samples its requested rows with the single-process kernel, keyed on the global id
     (``id_offset = start``), so it draws exactly what a single process would;
  4. all-to-all: per-request neighbour counts back, then ``(neighbour, edge id)`` pairs;
  5. the requester restores frontier order and relabels locally, as the single-process sampler.

The output is therefore identical to :class:`~shardgnn.sampling.neighbor.NeighborSampler` on the
reassembled graph, for the same seeds and seed. Every rank must call :meth:`sample` the same
number of times (possibly with no seeds): it is a collective.
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import bucket_by_owner
from shardgnn.sampling.neighbor import SamplerConfig, sample_blocks, sample_neighbors
from shardgnn.sampling.types import SampledBlocks
from shardgnn.store.dist_graph import DistGraphStore


class DistNeighborSampler:
    """Multi-layer uniform sampling where each node's neighbours are drawn by its owner."""

    def __init__(
        self,
        graph: DistGraphStore,
        config: SamplerConfig,
        comm: Communicator,
        stage: str = "sample",
    ):
        self.graph, self.config, self.comm, self.stage = graph, config, comm, stage
        self._node_map = np.full(graph.num_nodes, -1, dtype=np.int64)

    @property
    def num_layers(self) -> int:
        return len(self.config.fanouts)

    def _sample_remote(
        self, frontier: np.ndarray, fanout: int, seed: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop for ``frontier`` (global ids): ``(offsets, nbr, edge_ids)`` in frontier order."""
        g, world, rank = self.graph, self.comm.world_size, self.comm.rank
        order, counts = bucket_by_owner(frontier, g.owner(frontier), world)
        requests = list(torch.split(torch.from_numpy(frontier[order]), counts.tolist()))
        incoming = self.comm.all_to_all(requests, self.stage)

        # Serve every requester with one kernel call over all requested rows.
        asked = torch.cat(incoming).numpy()
        asked_per_peer = [len(t) for t in incoming]
        offsets, nbr, eid = sample_neighbors(
            g.indptr,
            g.indices,
            asked - g.start,
            fanout,
            self.config.replace,
            seed,
            id_offset=g.start,
        )
        eid += g.edge_offset
        counts_served = np.diff(offsets)
        row_bounds = np.cumsum([0] + asked_per_peer)
        reply_counts = [
            torch.from_numpy(counts_served[row_bounds[p] : row_bounds[p + 1]]) for p in range(world)
        ]
        pairs = torch.from_numpy(np.stack([nbr, eid], axis=1))
        reply_pairs = [
            pairs[offsets[row_bounds[p]] : offsets[row_bounds[p + 1]]] for p in range(world)
        ]
        got_counts = torch.cat(self.comm.all_to_all(reply_counts, self.stage)).numpy()
        got_pairs = torch.cat(self.comm.all_to_all(reply_pairs, self.stage)).numpy()
        assert rank == self.comm.rank and got_counts.shape[0] == frontier.shape[0]

        # Replies arrive grouped by owner (order[j] is the frontier position of reply j): put each
        # node's segment back at its frontier position.
        seg_start_grouped = np.cumsum(got_counts) - got_counts
        counts_in_order = np.empty_like(got_counts)
        counts_in_order[order] = got_counts
        start_in_order = np.empty_like(seg_start_grouped)
        start_in_order[order] = seg_start_grouped
        out_offsets = np.zeros(frontier.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts_in_order, out=out_offsets[1:])
        total = int(out_offsets[-1])
        gather = np.repeat(start_in_order - out_offsets[:-1], counts_in_order) + np.arange(
            total, dtype=np.int64
        )
        return out_offsets, got_pairs[gather, 0].copy(), got_pairs[gather, 1].copy()

    def sample(self, seeds: torch.Tensor | np.ndarray, seed: int) -> SampledBlocks:
        """Sample blocks for this rank's ``seeds`` (any owners); collective over the
        communicator."""
        return sample_blocks(
            seeds,
            self.config,
            seed,
            one_hop=self._sample_remote,
            degree_of=lambda nodes: self.graph.degree[nodes],
            node_map=self._node_map,
        )
