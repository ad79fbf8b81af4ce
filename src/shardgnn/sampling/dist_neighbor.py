"""Cross-worker neighbour sampling over ``torch.distributed`` all-to-all (no RPC).

Per layer:
  1. the frontier (unique global ids, dst nodes first) is bucketed by owner; rows owned on this
     host (this rank's, and same-host peers' whose parts are mapped here) are sampled right here;
  2. all-to-all: request the other ids from their owners, each request headed by the requester's
     layer seed (skipped when all ranks share a host);
  3. each owner samples its requested rows with the single-process kernel, keyed on the global id
     (``id_offset = start``) and the requester's seed, so it draws exactly what a single process
     sampling that rank's batch would;
  4. all-to-all: per-request neighbour counts back, then ``(neighbour, edge id)`` pairs;
  5. the requester restores frontier order and relabels locally, as the single-process sampler.

The output is therefore identical to :class:`~shardgnn.sampling.neighbor.NeighborSampler` on the
reassembled graph, for the same seeds and seed, whichever ranks share a host. Every rank must call
:meth:`sample` the same number of times (possibly with no seeds): it is a collective.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import bucket_by_owner, unbucket_segments
from shardgnn.sampling.neighbor import (
    BlockBuilder,
    Prune,
    SamplerConfig,
    sample_blocks,
    sample_blocks_many,
    sample_neighbors,
)
from shardgnn.sampling.typed import sample_typed_neighbors
from shardgnn.sampling.types import SampledBlocks, SeedInput
from shardgnn.store.dist_graph import DistGraphStore

_UINT64 = (1 << 64) - 1


def _seed_to_int64(seed: int) -> int:
    """A 64-bit seed as the int64 with the same bits (so it travels in an id tensor)."""
    seed &= _UINT64
    return seed - (1 << 64) if seed >= 1 << 63 else seed


CALLS_PER_HOP = 4
"""collective calls a hop of :class:`DistNeighborSampler` makes when some owner is off the
host: the requests' sizes, the requests, then the replies' per-row counts and their pairs (whose
sizes the requester knows)"""


class DistNeighborSampler:
    """Multi-layer uniform sampling where each node's neighbours are drawn by its owner."""

    def __init__(
        self,
        graph: DistGraphStore,
        config: SamplerConfig,
        comm: Communicator,
        stage: str = "sample",
        prune: Prune | None = None,
        halo_hops: int | None = None,
    ):
        self.graph, self.config, self.comm, self.stage = graph, config, comm, stage
        self.prune = prune  # historical embeddings: nodes not to expand (sample_blocks)
        self.halo_hops = halo_hops  # cluster batches with a bounded halo (sample_blocks)
        self._node_map = np.full(graph.num_nodes, -1, dtype=np.int64)
        self._layer = 0  # the hop being sampled (set by sample)
        if graph.peers:
            comm.declare(stage)

    @property
    def num_layers(self) -> int:
        return len(self.config.fanouts)

    payload_columns = 0
    """How many per-edge values :meth:`_draw` returns beyond neighbours and edge ids (the owner
    sends them with each drawn edge)."""

    def _serve(
        self,
        owner: int,
        asked: np.ndarray,
        fanout: int,
        seeds: Sequence[int],
        lengths: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample ``asked`` (global ids owned by ``owner``: this rank or a same-host peer, whose
        CSR is mapped here), in segments of ``lengths`` rows, segment ``b`` with layer seed
        ``seeds[b]`` (one per batch of a bulk hop): ``(per-row counts, [n, 2 + payload_columns]
        (neighbour, edge id, payload...) rows)``."""
        g = self.graph
        if owner == self.comm.rank:
            part, indptr, edge_offset = g.part, g.indptr, g.edge_offset
        else:
            peer = g.peers[owner]
            part, indptr, edge_offset = peer.part, peer.indptr, peer.edge_offset
        counts = [np.zeros(0, np.int64)]
        rows = [np.zeros((0, 2 + self.payload_columns), np.int64)]
        for seed, ids in zip(seeds, np.split(asked, np.cumsum(lengths)[:-1]), strict=True):
            if not ids.size:  # a batch with no row here: no kernel call
                continue
            offsets, nbr, eid, *payload = self._draw(part, indptr, ids - part.start, fanout, seed)
            counts.append(np.diff(offsets))
            rows.append(np.stack([nbr, eid + edge_offset, *payload], axis=1))
        return np.concatenate(counts), np.concatenate(rows)

    def _draw(
        self, part, indptr: np.ndarray, rows: np.ndarray, fanout: int, seed: int
    ) -> tuple[np.ndarray, ...]:
        """One hop over ``rows`` of ``part`` (keyed on global ids, ``id_offset = part.start``):
        ``(offsets, nbr, local edge ids, *payload_columns per-edge arrays)``."""
        return sample_neighbors(
            indptr, part.indices, rows, fanout, self.config.replace, seed, id_offset=part.start
        )

    def _sample_remote(
        self,
        frontier: np.ndarray,
        fanout: int,
        seeds: Sequence[int],
        lengths: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, ...]:
        """One hop for ``frontier`` (global ids): ``(offsets, nbr, edge_ids, *payload)`` in
        frontier order. ``frontier`` stacks ``len(seeds)`` batches' frontiers of ``lengths`` rows
        (one batch: its whole length), each drawn with its batch's layer seed.

        Rows owned on this host (this rank's and mapped peers') are sampled here; the others are
        requested from their owners, every batch's in the same request. Every draw is keyed on
        the global id and the batch's seed, so who samples a row does not change what is drawn.
        """
        g, world, rank = self.graph, self.comm.world_size, self.comm.rank
        k = len(seeds)
        lengths = [frontier.shape[0]] if lengths is None else lengths
        owners = g.owner(frontier)
        order, counts = bucket_by_owner(frontier, owners, world)
        grouped = np.split(frontier[order], np.cumsum(counts)[:-1])
        # rows of each owner by batch (the bucketing is stable: batch order within an owner)
        batch = np.repeat(np.arange(k), lengths)
        by_batch = np.bincount(owners * k + batch, minlength=world * k).reshape(world, k)
        on_host = {rank, *g.peers}
        served: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for owner in sorted(on_host):
            served[owner] = self._serve(owner, grouped[owner], fanout, seeds, by_batch[owner])
            if owner != rank:  # what a request and its replies would have carried
                pair_counts, pairs = served[owner]
                self.comm.record_host(
                    self.stage, grouped[owner].nbytes + pair_counts.nbytes + pairs.nbytes
                )
        if len(on_host) < world:
            served.update(self._exchange(grouped, by_batch, on_host, fanout, seeds))
        got_counts = np.concatenate([served[p][0] for p in range(world)])
        got_pairs = np.concatenate([served[p][1] for p in range(world)])
        assert got_counts.shape[0] == frontier.shape[0]

        # Replies arrive grouped by owner (order[j] is the frontier position of reply j): put each
        # node's segment back at its frontier position, as the single-process sampler has them.
        out_offsets, gather = unbucket_segments(order, got_counts)
        columns = got_pairs[gather]
        return (out_offsets, *(columns[:, c].copy() for c in range(columns.shape[1])))

    def _exchange(
        self,
        grouped: list[np.ndarray],
        by_batch: list[np.ndarray],
        on_host: set[int],
        fanout: int,
        seeds: Sequence[int],
    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Ask the owners off this host for their rows (three all-to-alls: ids out, per-row counts
        and pairs back; :data:`CALLS_PER_HOP` collective calls) and serve what they ask of us.
        Every rank takes part, even with nothing to ask: ranks on one host agree on who is on
        it, so all ranks of the job call this, or none (when every rank shares one host).

        A request starts with a header: the number of batches ``k``, the requester's layer seed
        of each, and how many of the request's rows each holds (``2k + 1`` int64); the owner
        draws each batch's rows with its seed: the rows a rank samples for its batch depend on
        its seed only, not on who serves them, so reading a same-host peer's CSR draws exactly
        what asking it would, and ``k`` batches in one request draw what ``k`` requests would.
        """
        world, rank = self.comm.world_size, self.comm.rank
        k = len(seeds)
        seed_header = [_seed_to_int64(seed) for seed in seeds]
        requests = [
            torch.cat([
                torch.tensor([k, *seed_header], dtype=torch.int64),
                torch.from_numpy(by_batch[p].astype(np.int64)),
                torch.from_numpy(grouped[p]),
            ])
            if p not in on_host and grouped[p].size
            else torch.zeros(0, dtype=torch.int64)
            for p in range(world)
        ]  # fmt: skip
        incoming = self.comm.all_to_all(requests, self.stage)
        reply_counts, reply_pairs = [], []
        for request in incoming:
            if request.numel():
                asked = request.numpy()
                n = int(asked[0])
                requester_seeds = [int(v) & _UINT64 for v in asked[1 : n + 1]]
                counts, pairs = self._serve(
                    rank, asked[2 * n + 1 :], fanout, requester_seeds, asked[n + 1 : 2 * n + 1]
                )
            else:
                counts = np.zeros(0, np.int64)
                pairs = np.zeros((0, 2 + self.payload_columns), np.int64)
            reply_counts.append(torch.from_numpy(counts))
            reply_pairs.append(torch.from_numpy(pairs))
        # The replies' sizes are known here (a count per row asked of an owner, then as many
        # pairs as those add up to): passed, each spares an all-to-all of the sizes, a wait for
        # every rank (0.7 ms a call where two workers share two cores, BENCHMARKS 32za).
        asked_rows = [int(grouped[p].size) if requests[p].numel() else 0 for p in range(world)]
        got_counts = self.comm.all_to_all(reply_counts, self.stage, recv_counts=asked_rows)
        got_pairs = self.comm.all_to_all(
            reply_pairs, self.stage, recv_counts=[int(c.sum()) for c in got_counts]
        )
        return {
            p: (got_counts[p].numpy(), got_pairs[p].numpy().reshape(-1, 2 + self.payload_columns))
            for p in range(world)
            if p not in on_host
        }

    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks:
        """Sample blocks for this rank's ``inputs.nodes`` (any owners); collective over the
        communicator. ``inputs.exclude``: as :meth:`NeighborSampler.sample` (applied by the
        requester after the owners' draws)."""
        inputs = SeedInput.of(inputs).untimed(self)
        layers = iter(range(self.num_layers))

        def one_hop(frontier: np.ndarray, fanout: int, layer_seed: int):
            # what layer this hop is (typed sampling serves each layer's fanouts); every rank
            # is at the same layer, as the hops are collectives
            self._layer = next(layers)
            return self._sample_remote(frontier, fanout, [layer_seed])

        return sample_blocks(
            inputs.nodes,
            self.config,
            seed,
            exclude=inputs.exclude,
            one_hop=one_hop,
            degree_of=lambda nodes: self.graph.degree[nodes],
            node_map=self._node_map,
            prune=self.prune,
            halo_hops=self.halo_hops,
        )

    def sample_many(self, inputs: Sequence[SeedInput], seeds: Sequence[int]) -> list[SampledBlocks]:
        """Bulk sampling with workers (the CAGNET sampling paper's k mini-batches at once): every
        hop requests the ``k`` batches' frontiers in one exchange (three all-to-alls per hop for
        all of them instead of per batch), each batch's rows drawn with its own seed; ``out[b]``
        equals ``sample(inputs[b], seeds[b])``. Collective: every rank calls it with the same
        ``k`` (the seed batchers give every rank as many batches)."""
        items = [SeedInput.of(i).untimed(self) for i in inputs]
        builders = [
            BlockBuilder(
                item.nodes, self.config, seed, degree_of=lambda nodes: self.graph.degree[nodes],
                node_map=self._node_map, exclude=item.exclude, prune=self.prune,
                halo_hops=self.halo_hops,
            )
            for item, seed in zip(items, seeds, strict=True)
        ]  # fmt: skip
        layers = iter(range(self.num_layers))

        def one_hop_many(frontiers: list[np.ndarray], fanout: int, layer_seeds: list[int]):
            self._layer = next(layers)
            lengths = [f.shape[0] for f in frontiers]
            offsets, *columns = self._sample_remote(
                np.concatenate(frontiers), fanout, layer_seeds, lengths
            )
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            return [
                (
                    offsets[lo : hi + 1] - offsets[lo],
                    *(c[offsets[lo] : offsets[hi]] for c in columns),
                )
                for lo, hi in zip(bounds[:-1], bounds[1:])
            ]

        return sample_blocks_many(builders, one_hop_many)


class DistTypedNeighborSampler(DistNeighborSampler):
    """Per-relation sampling (:class:`~shardgnn.sampling.typed.TypedNeighborSampler`) where each
    node's neighbours are drawn by its owner, over the same all-to-all path: identical to the
    single-process typed sampler on the reassembled graph.

    The owner serving a request at layer ``l`` uses layer ``l``'s fanouts: every rank calls
    :meth:`sample` in lockstep (a collective), so the server is at the requester's layer.
    """

    def __init__(
        self, graph: DistGraphStore, fanouts_LR: np.ndarray, comm: Communicator,
        replace: bool = False, stage: str = "sample",
    ):  # fmt: skip
        if graph.part.etype is None:
            raise ValueError("typed sampling needs a typed partition (etype.npy per part)")
        self.fanouts_LR = np.ascontiguousarray(fanouts_LR, dtype=np.int64)
        config = SamplerConfig(fanouts=(-1,) * len(self.fanouts_LR), replace=replace)
        super().__init__(graph, config, comm, stage)

    def _draw(
        self, part, indptr: np.ndarray, rows: np.ndarray, fanout: int, seed: int
    ) -> tuple[np.ndarray, ...]:
        return sample_typed_neighbors(
            indptr, part.indices, part.etype, rows, self.fanouts_LR[self._layer],
            self.config.replace, seed, id_offset=part.start,
        )  # fmt: skip

    # The kernel returns each drawn edge's relation: the owner sends it with the edge (the
    # requester holds no other part's relations, and the R-GCN block needs them).
    payload_columns = 1
