"""A straightforward pure-torch uniform neighbour sampler.

It exists as the baseline of the sampler benchmark (``benchmarks/bench_sampler.py``) and as an
independent cross-check of :class:`~shardgnn.sampling.neighbor.NeighborSampler` in the tests: it
has the same interface and returns the same :class:`SampledBlocks` layout, but is written the way
one would write a sampler with vectorised torch ops only (``repeat_interleave``, ``argsort``,
``unique``). It does not reproduce the numba sampler's random draws, only their distribution.

Per hop, for frontier node ``v`` with ``deg`` in-neighbours:

* ``fanout == -1``: every neighbour;
* with replacement: ``fanout`` draws ``indptr[v] + floor(rand * deg)`` (none if ``deg == 0``);
* without replacement: all neighbours if ``deg <= fanout``; otherwise a random key for every
  candidate edge and the ``fanout`` edges with the smallest keys (one argsort over
  ``2 * row + key``), i.e. a uniformly random ``fanout``-subset.

Relabelling gives the dst (frontier) nodes local ids ``0..D-1``; new neighbours follow in
ascending global id (the numba sampler uses order of first appearance; both are valid).
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.sampling.device import tensor_block
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.sampling.types import Block, SampledBlocks, SeedInput


def _segments(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ranges of the given lengths laid end to end: ``(segment id, position within the
    segment)`` of every element."""
    total = int(lengths.sum())
    seg = torch.repeat_interleave(
        torch.arange(lengths.shape[0], dtype=torch.int64), lengths, output_size=total
    )
    starts = torch.cumsum(lengths, 0) - lengths
    within = torch.arange(total, dtype=torch.int64) - starts[seg]
    return seg, within


class TorchNeighborSampler:
    """Samples the L-hop computation graph of a batch of seed nodes, in pure torch.

    The baseline the numba :class:`~shardgnn.sampling.neighbor.NeighborSampler` is measured
    against. Same constructor and :meth:`sample` signature; ``config.num_threads`` is ignored
    (torch's intra-op thread count applies: ``torch.set_num_threads``).
    """

    def __init__(
        self,
        indptr: np.ndarray | torch.Tensor,
        indices: np.ndarray | torch.Tensor,
        config: SamplerConfig,
    ):
        self.indptr = self._as_tensor(indptr).to(torch.int64)
        self.indices = self._as_tensor(indices)
        self.config = config

    @staticmethod
    def _as_tensor(array: np.ndarray | torch.Tensor) -> torch.Tensor:
        if isinstance(array, torch.Tensor):
            return array
        array = np.asarray(array)
        if not array.flags.writeable or not array.flags.c_contiguous:  # e.g. a read-only memory map
            array = np.array(array, copy=True)
        return torch.from_numpy(array)

    @property
    def num_layers(self) -> int:
        return len(self.config.fanouts)

    # ------------------------------------------------------------------ one hop
    def sample_neighbors(
        self, frontier: torch.Tensor, fanout: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One hop for ``frontier`` (global ids): ``(offsets [D + 1], nbr [E], edge_ids [E])``;
        the neighbours of ``frontier[i]`` are ``nbr[offsets[i]:offsets[i + 1]]``."""
        start = self.indptr[frontier]
        deg = self.indptr[frontier + 1] - start
        if fanout < 0:
            counts = deg
        elif self.config.replace:
            counts = torch.where(deg > 0, fanout, 0)
        else:
            counts = torch.clamp(deg, max=fanout)
        offsets = torch.zeros(frontier.shape[0] + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=offsets[1:])
        eid = torch.empty(int(offsets[-1]), dtype=torch.int64)

        if fanout >= 0 and self.config.replace:
            row, _ = _segments(counts)
            draw = torch.rand(row.shape[0], generator=generator, dtype=torch.float64)
            d = deg[row]
            pick = torch.minimum(torch.floor(draw * d).to(torch.int64), d - 1)
            eid = start[row] + pick
        else:
            # Rows taken whole: deg <= fanout (or fanout == -1).
            whole = torch.ones_like(deg, dtype=torch.bool) if fanout < 0 else deg <= fanout
            rows_w = torch.nonzero(whole).squeeze(1)
            seg, j = _segments(deg[rows_w])
            r = rows_w[seg]
            eid[offsets[r] + j] = start[r] + j
            if fanout >= 0:
                # Rows with more candidates than the fanout: keep the `fanout` smallest random keys.
                rows_b = torch.nonzero(~whole).squeeze(1)
                if rows_b.numel():
                    seg, j = _segments(deg[rows_b])
                    key = torch.rand(seg.shape[0], generator=generator, dtype=torch.float64)
                    # Sort by (row, key) in one argsort: 2 * row + key with key in [0, 1) never
                    # rounds into the next row (2 * row + 1 < 2 * (row + 1)), unlike row + key.
                    order = torch.argsort(seg.to(torch.float64) * 2.0 + key)
                    # `order` keeps the rows contiguous and in order, so the rank of a sorted
                    # position inside its row is the same `j` layout.
                    keep = j < fanout
                    chosen = order[keep]  # candidate index of each kept edge, fanout per row
                    r = rows_b[seg[chosen]]
                    eid[offsets[r] + j[keep]] = start[r] + j[chosen]
        nbr = self.indices[eid].to(torch.int64)
        return offsets, nbr, eid

    @staticmethod
    def relabel(frontier: torch.Tensor, nbr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local ids: frontier nodes (unique) get ``0..D-1``, new neighbours ``D..S-1`` in
        ascending global id. Returns ``(src_nodes [S], local_nbr [E])``."""
        n_dst = frontier.shape[0]
        uniq, inverse = torch.unique(torch.cat([frontier, nbr]), return_inverse=True)
        new_id = torch.full((uniq.shape[0],), -1, dtype=torch.int64)
        new_id[inverse[:n_dst]] = torch.arange(n_dst, dtype=torch.int64)
        rest = new_id < 0
        new_id[rest] = torch.arange(n_dst, uniq.shape[0], dtype=torch.int64)
        src_nodes = torch.empty_like(uniq)
        src_nodes[new_id] = uniq
        return src_nodes, new_id[inverse[n_dst:]]

    # ------------------------------------------------------------------ all hops
    def sample(self, inputs: SeedInput, seed: int) -> SampledBlocks:
        """Sample blocks for ``inputs.nodes`` (unique global ids); ``seed`` fixes every random
        draw (one ``torch.Generator`` per call, so results do not depend on torch's global RNG).
        No exclusion (the benchmark's baseline draws plain neighbourhoods)."""
        inputs = SeedInput.of(inputs).untimed(self)
        if inputs.exclude is not None:
            raise ConfigError("TorchNeighborSampler does not exclude edges; use NeighborSampler")
        seeds_t = inputs.nodes.contiguous()
        generator = torch.Generator().manual_seed(int(seed) & ((1 << 64) - 1))
        blocks: list[Block] = []
        frontier = seeds_t
        for fanout in self.config.fanouts:
            offsets, nbr, eid = self.sample_neighbors(frontier, fanout, generator)
            src_nodes, local = self.relabel(frontier, nbr)
            blocks.append(tensor_block(self.indptr, frontier, src_nodes, offsets, local, eid))
            frontier = src_nodes
        blocks.reverse()
        return SampledBlocks(seeds=seeds_t, blocks=blocks)
