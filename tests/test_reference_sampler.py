"""The pure-torch reference sampler: structural invariants of its blocks, agreement with the numba
sampler on everything that is not random, and uniformity of both samplers' draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig
from shardgnn.sampling.reference import TorchNeighborSampler
from shardgnn.sampling.types import SampledBlocks


@pytest.fixture(scope="module")
def graph():
    # Power-law degrees: isolated nodes, nodes below and far above the fanouts.
    return generate(SyntheticConfig(nodes=3000, degree=8, features=2, seed=3))


def _seeds(graph, n=200, seed=0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).choice(graph.num_nodes, n, replace=False))


def check_blocks(graph, sample: SampledBlocks, seeds: torch.Tensor, fanouts, replace: bool) -> None:
    """Every invariant of :class:`SampledBlocks` for a sample of ``seeds``."""
    indptr = torch.from_numpy(graph.indptr)
    indices = torch.from_numpy(graph.indices.astype(np.int64))
    blocks = sample.blocks
    assert len(blocks) == len(fanouts)
    assert torch.equal(sample.seeds, seeds)
    assert torch.equal(blocks[-1].dst_nodes_D, seeds)
    for lower, upper in zip(blocks[:-1], blocks[1:]):  # the chain: input layer first
        assert torch.equal(upper.src_nodes_S, lower.dst_nodes_D)
    # blocks are input-layer first; fanouts[0] is the output layer
    for block, fanout in zip(blocks, reversed(fanouts)):
        for t in (block.src_nodes_S, block.indptr_D1, block.indices_E, block.edge_ids_E):
            assert t.dtype == torch.int64 and t.dim() == 1
        D, S, E = block.num_dst, block.num_src, block.num_edges
        src = block.src_nodes_S
        assert S >= D and torch.unique(src).numel() == S  # src nodes are distinct
        assert block.indptr_D1.shape == (D + 1,) and int(block.indptr_D1[0]) == 0
        assert int(block.indptr_D1[-1]) == E == block.edge_ids_E.numel()
        assert bool((block.indptr_D1[1:] >= block.indptr_D1[:-1]).all())
        assert E == 0 or (0 <= int(block.indices_E.min()) and int(block.indices_E.max()) < S)
        # every non-dst src node is some edge's source (no unused src nodes)
        used = torch.zeros(S, dtype=torch.bool)
        used[block.indices_E] = True
        assert bool(used[D:].all())
        # every sampled edge exists: its CSR position holds its src and lies in its dst's row
        eid = block.edge_ids_E
        assert torch.equal(indices[eid], src[block.indices_E])
        dst_global = src[block.dst_index_E()]
        assert bool((eid >= indptr[dst_global]).all()) and bool(
            (eid < indptr[dst_global + 1]).all()
        )
        if block.src_degree_S is not None:  # graph in-degree of every src node
            assert torch.equal(block.src_degree_S, indptr[src + 1] - indptr[src])
        # neighbour counts: exactly what the fanout rules say
        dst = block.dst_nodes_D
        deg = indptr[dst + 1] - indptr[dst]
        got = block.indptr_D1[1:] - block.indptr_D1[:-1]
        if fanout < 0:
            want = deg
        elif replace:
            want = torch.where(deg > 0, fanout, 0)
        else:
            want = deg.clamp(max=fanout)
        assert torch.equal(got, want)
        if not replace:  # no neighbour twice in a row
            row = block.dst_index_E()
            pairs = torch.unique(row * graph.indices.shape[0] + eid)
            assert pairs.numel() == E


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts", [(5, 3), (4, 3, -1), (40, 2)])
def test_reference_invariants(graph, fanouts, replace):
    seeds = _seeds(graph)
    sampler = TorchNeighborSampler(
        graph.indptr, graph.indices, SamplerConfig(fanouts=fanouts, replace=replace)
    )
    sample = sampler.sample(seeds, seed=11)
    check_blocks(graph, sample, seeds, fanouts, replace)
    # deterministic in its seed, different across seeds
    again = sampler.sample(seeds, seed=11)
    for a, b in zip(sample.blocks, again.blocks):
        assert torch.equal(a.src_nodes_S, b.src_nodes_S) and torch.equal(a.edge_ids_E, b.edge_ids_E)
    other = sampler.sample(seeds, seed=12)
    assert not torch.equal(other.blocks[-1].edge_ids_E, sample.blocks[-1].edge_ids_E)


@pytest.mark.parametrize("replace", [False, True])
def test_numba_sampler_passes_the_same_checks(graph, replace):
    fanouts = (5, 3, -1)
    seeds = _seeds(graph, seed=1)
    ours = NeighborSampler(
        graph.indptr, graph.indices, SamplerConfig(fanouts=fanouts, replace=replace, num_threads=1)
    )
    check_blocks(graph, ours.sample(seeds, seed=5), seeds, fanouts, replace)


@pytest.mark.parametrize("replace", [False, True])
def test_samplers_agree_on_deterministic_parts(graph, replace):
    """The output layer's neighbour counts depend only on degrees; with fanouts above every degree
    (or -1) both samplers must return exactly the same neighbourhoods."""
    seeds = _seeds(graph, seed=2)
    cfg = SamplerConfig(fanouts=(7, 4), replace=replace, num_threads=1)
    a = TorchNeighborSampler(graph.indptr, graph.indices, cfg).sample(seeds, 3)
    b = NeighborSampler(graph.indptr, graph.indices, cfg).sample(seeds, 3)
    assert torch.equal(a.blocks[-1].indptr_D1, b.blocks[-1].indptr_D1)

    cfg_all = SamplerConfig(fanouts=(-1, -1), replace=replace, num_threads=1)
    a = TorchNeighborSampler(graph.indptr, graph.indices, cfg_all).sample(seeds, 3)
    b = NeighborSampler(graph.indptr, graph.indices, cfg_all).sample(seeds, 3)
    # Local ids differ (new src nodes are numbered in a different order): compare global edges.
    for x, y in zip(a.blocks, b.blocks):
        assert x.num_dst == y.num_dst and x.num_src == y.num_src
        assert torch.equal(torch.sort(x.src_nodes_S).values, torch.sort(y.src_nodes_S).values)
        assert torch.equal(torch.sort(x.edge_ids_E).values, torch.sort(y.edge_ids_E).values)
        assert torch.equal(x.indptr_D1[-1], y.indptr_D1[-1])


def test_empty_and_isolated_seeds(graph):
    isolated = np.flatnonzero(np.diff(graph.indptr) == 0)
    assert isolated.size, "the fixture graph should have isolated nodes"
    for seeds in (torch.empty(0, dtype=torch.int64), torch.from_numpy(isolated[:5])):
        for replace in (False, True):
            cfg = SamplerConfig(fanouts=(3, 2), replace=replace)
            sample = TorchNeighborSampler(graph.indptr, graph.indices, cfg).sample(seeds, 0)
            check_blocks(graph, sample, seeds, cfg.fanouts, replace)
            assert sample.num_sampled_edges == 0


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("kind", ["numba", "torch"])
def test_uniform_neighbour_frequencies(graph, kind, replace):
    """Over many seeds, each neighbour of a high-degree node is picked equally often."""
    degrees = np.diff(graph.indptr)
    v = int(np.argmax(degrees))
    deg = int(degrees[v])
    fanout, trials = 5, 1500
    assert deg >= 40
    cfg = SamplerConfig(fanouts=(fanout,), replace=replace, num_threads=1)
    cls = NeighborSampler if kind == "numba" else TorchNeighborSampler
    sampler = cls(graph.indptr, graph.indices, cfg)
    seeds = torch.tensor([v])
    counts = np.zeros(deg, dtype=np.int64)
    for t in range(trials):
        eid = sampler.sample(seeds, seed=1000 + t).blocks[0].edge_ids_E.numpy()
        assert eid.size == fanout
        np.add.at(counts, eid - graph.indptr[v], 1)
    assert counts.sum() == fanout * trials
    result = stats.chisquare(counts)  # H0: uniform over the deg neighbours
    assert result.pvalue > 1e-3, (kind, replace, deg, result)
