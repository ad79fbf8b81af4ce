"""One sampler protocol (:class:`~shardgnn.sampling.types.Sampler`): every block sampler,
homogeneous, typed, temporal, torch reference, device and distributed (one rank: the all-to-alls
stay in process), takes a :class:`SeedInput` and returns :class:`SampledBlocks` whose invariants
hold; the temporal sampler's blocks hold exactly its hops; the one loader stage drives a typed
sampler as it drives a homogeneous one."""

from __future__ import annotations

import inspect
import types

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.graph.synthetic_hetero import AcademicConfig, generate_academic
from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal
from shardgnn.loader.batches import SeedBatcher
from shardgnn.loader.pipeline import NeighborSamplingStage
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.dist_neighbor import DistNeighborSampler, DistTypedNeighborSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.reference import TorchNeighborSampler
from shardgnn.sampling.temporal import TemporalNeighborSampler
from shardgnn.sampling.typed import TypedNeighborSampler, relation_fanouts
from shardgnn.sampling.types import SampledBlocks, Sampler, SeedInput
from shardgnn.seeding import mix_seed

TYPED_LAYERS = [{"writes": 2, "cites": 3, "rev_writes": 2}, 2]


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=800, degree=8, classes=3, features=4, seed=5))


@pytest.fixture(scope="module")
def academic():
    config = AcademicConfig(papers=600, authors=500, institutions=20, fields=16, features=4)
    return generate_academic(config).with_reverse_relations()


@pytest.fixture(scope="module")
def stream():
    return generate_temporal(TemporalStreamConfig(nodes=200, events=3000, seed=3))


def one_rank_store(graph, path, typed: bool):
    """A one-part partition of ``graph`` opened as rank 0 of 1 (no process group needed), its
    communicator, and the new id of every original id."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.partition.config import PartitionConfig
    from shardgnn.partition.format import read_partitions
    from shardgnn.store.dist_graph import DistGraphStore

    config = PartitionConfig(num_parts=1, method="random", seed=0)
    if typed:
        from shardgnn.partition.typed import partition_typed_graph, write_typed_partitions

        result = partition_typed_graph(graph, config)
        write_typed_partitions(graph, result.assignment, path, method=result.method)
    else:
        from shardgnn.partition.format import write_partitions
        from shardgnn.partition.methods import partition_graph

        result = partition_graph(graph, config)
        write_partitions(graph, result.assignment, path, method=result.method)
    comm = Communicator(0, 1)
    orig = np.asarray(read_partitions(path, verify=False).orig_ids)
    new_of_orig = np.empty(orig.size, dtype=np.int64)
    new_of_orig[orig] = np.arange(orig.size)
    return DistGraphStore.open(path, 0, 1, comm), comm, new_of_orig


@pytest.fixture(scope="module")
def every(graph, academic, stream, tmp_path_factory):
    """``name -> (sampler, inputs, csr or None, typed, temporal)`` for every block sampler (the
    distributed ones over one-part partitions, their seeds in the partition's ids) and the new
    id of every original id of each partition."""
    tmp_path = tmp_path_factory.mktemp("parts")
    config = SamplerConfig(fanouts=(4, 3))
    seeds = torch.from_numpy(np.random.default_rng(0).choice(graph.num_nodes, 40, replace=False))
    csr = (graph.indptr, graph.indices)
    fanouts_LR = relation_fanouts(academic.relations, TYPED_LAYERS)
    papers = torch.arange(0, 600, 13)
    store, comm, new_ids = one_rank_store(graph, tmp_path / "homogeneous", typed=False)
    typed_store, typed_comm, typed_new_ids = one_rank_store(academic, tmp_path / "typed", True)
    rng = np.random.default_rng(1)
    temporal_inputs = SeedInput(
        rng.integers(0, stream.num_nodes, 60), rng.choice(stream.t[100:], 60)
    )
    out = {
        "neighbor": (NeighborSampler(*csr, config), SeedInput(seeds), csr, False, False),
        "reference": (TorchNeighborSampler(*csr, config), SeedInput(seeds), csr, False, False),
        "device": (
            DeviceNeighborSampler(*csr, config, torch.device("cpu")),
            SeedInput(seeds),
            csr,
            False,
            False,
        ),
        "typed": (
            TypedNeighborSampler(academic, fanouts_LR),
            SeedInput(papers),
            (academic.indptr, academic.indices),
            True,
            False,
        ),
        "distributed": (
            DistNeighborSampler(store, config, comm),
            SeedInput(new_ids[seeds.numpy()]),
            (store.indptr, store.part.indices),
            False,
            False,
        ),
        "distributed-typed": (
            DistTypedNeighborSampler(
                typed_store, relation_fanouts(academic.relations, TYPED_LAYERS), typed_comm
            ),
            SeedInput(typed_new_ids[papers.numpy()]),
            (typed_store.indptr, typed_store.part.indices),
            True,
            False,
        ),
    }
    ladies = SamplerConfig(ladies=(30, 20))  # layer-wise: the same protocol, weighted edges
    out["ladies"] = (NeighborSampler(*csr, ladies), SeedInput(seeds), csr, False, False)
    out["ladies-device"] = (
        DeviceNeighborSampler(*csr, ladies, torch.device("cpu")),
        SeedInput(seeds),
        csr,
        False,
        False,
    )
    out["ladies-distributed"] = (
        DistNeighborSampler(store, ladies, comm),
        SeedInput(new_ids[seeds.numpy()]),
        (store.indptr, store.part.indices),
        False,
        False,
    )
    for mode in ("recent", "uniform"):
        out[f"temporal-{mode}"] = (
            TemporalNeighborSampler(stream, [5, 3], mode),
            temporal_inputs,
            None,
            False,
            True,
        )
    return out, {"distributed": new_ids, "distributed-typed": typed_new_ids}


SAMPLER_NAMES = [
    "neighbor",
    "reference",
    "device",
    "typed",
    "distributed",
    "distributed-typed",
    "ladies",
    "ladies-device",
    "ladies-distributed",
    "temporal-recent",
    "temporal-uniform",
]


def check_blocks(sample, inputs, csr, typed, temporal, num_layers):
    """The invariants of :class:`SampledBlocks` every sampler's output keeps."""
    assert isinstance(sample, SampledBlocks)
    blocks = sample.blocks
    assert len(blocks) == num_layers
    assert torch.equal(sample.seeds.cpu(), inputs.nodes.cpu())
    assert torch.equal(blocks[-1].dst_nodes_D.cpu(), inputs.nodes.cpu())
    for layer, b in enumerate(blocks):
        src_S, indptr, indices = b.src_nodes_S.cpu(), b.indptr_D1.cpu(), b.indices_E.cpu()
        assert b.num_src >= b.num_dst and torch.equal(b.dst_nodes_D.cpu(), src_S[: b.num_dst])
        assert indptr.shape == (b.num_dst + 1,) and int(indptr[0]) == 0
        assert int(indptr[-1]) == b.num_edges and bool((indptr.diff() >= 0).all())
        assert indices.dtype == torch.int64
        assert bool(((indices >= 0) & (indices < b.num_src)).all())
        if layer + 1 < len(blocks):  # blocks chain: a layer's dst nodes are the next one's src
            assert torch.equal(blocks[layer + 1].src_nodes_S.cpu(), b.dst_nodes_D.cpu())
        assert (b.edge_type_E is not None) == typed
        assert (b.edge_time_E is not None) == temporal
        assert (b.src_time_S is not None) == temporal
        if b.edge_weight_E is not None:  # LADIES: a row's weights sum to its edges
            assert b.edge_weight_E.shape == (b.num_edges,) and bool((b.edge_weight_E > 0).all())
        dst_E = torch.repeat_interleave(torch.arange(b.num_dst), indptr.diff())
        if typed:
            assert b.edge_type_E.shape == (b.num_edges,)
        if temporal:
            # never the future: every edge is an event strictly before its dst row's time, and
            # a row reached by an event is at that event's time
            assert bool((b.edge_time_E < b.src_time_S[dst_E]).all())
            assert torch.equal(b.src_time_S[indices], b.edge_time_E)
        else:
            assert torch.unique(src_S).shape[0] == b.num_src  # nodes relabelled once
        if csr is not None:  # every edge is a real in-edge of its dst node, at its CSR position
            indptr_g, indices_g = csr
            eid = b.edge_ids_E.cpu().numpy()
            dst_nodes = src_S[dst_E].numpy()
            assert np.all((eid >= indptr_g[dst_nodes]) & (eid < indptr_g[dst_nodes + 1]))
            np.testing.assert_array_equal(np.asarray(indices_g)[eid], src_S[indices].numpy())
    if temporal:
        np.testing.assert_array_equal(blocks[-1].src_time_S[: inputs.nodes.shape[0]], inputs.times)


@pytest.mark.parametrize("name", SAMPLER_NAMES)
def test_every_sampler_implements_the_protocol(name, every):
    sampler, inputs, csr, typed, temporal = every[0][name]
    assert isinstance(sampler, Sampler)
    assert list(inspect.signature(sampler.sample).parameters)[:2] == ["inputs", "seed"]
    sample = sampler.sample(inputs, 11)
    check_blocks(sample, inputs, csr, typed, temporal, sampler.num_layers)
    assert sample.num_sampled_edges > 0
    again = sampler.sample(inputs, 11)  # the seed fixes every draw
    for a, b in zip(sample.blocks, again.blocks):
        assert torch.equal(a.src_nodes_S, b.src_nodes_S) and torch.equal(a.indices_E, b.indices_E)
    if temporal:  # a temporal graph needs the seeds' times; the others refuse them
        with pytest.raises(ConfigError, match="time"):
            sampler.sample(SeedInput(inputs.nodes), 11)
    else:
        timed = SeedInput(inputs.nodes, torch.zeros(inputs.nodes.shape[0], dtype=torch.float64))
        with pytest.raises(ConfigError, match="seed times"):
            sampler.sample(timed, 11)


def test_distributed_samplers_on_one_rank_draw_what_the_local_ones_draw(every):
    """Draws are keyed on global ids: on a renumbered one-part partition, the output layer's
    neighbourhoods are the local sampler's, renamed (deeper layers' frontiers come in another
    order, so their relabelling differs)."""
    samplers, new_ids = every
    for local, dist in (("neighbor", "distributed"), ("typed", "distributed-typed")):
        want = samplers[local][0].sample(samplers[local][1], 5).blocks[-1]
        got = samplers[dist][0].sample(samplers[dist][1], 5).blocks[-1]
        nbr_want = want.src_nodes_S[want.indices_E].numpy()
        np.testing.assert_array_equal(got.src_nodes_S[got.indices_E], new_ids[dist][nbr_want])
        np.testing.assert_array_equal(got.indptr_D1, want.indptr_D1)


@pytest.mark.parametrize("mode", ["recent", "uniform"])
def test_temporal_blocks_hold_exactly_the_hops(stream, mode):
    rng = np.random.default_rng(4)
    nodes, times = rng.integers(0, stream.num_nodes, 50), rng.choice(stream.t, 50)
    sampler = TemporalNeighborSampler(stream, [4, 3, 2], mode)
    hops = sampler.sample_hops(nodes, times, seed=9)
    blocks = sampler.sample(SeedInput(nodes, times), seed=9).blocks
    assert len(blocks) == len(hops) == sampler.num_layers
    for layer, b in enumerate(blocks):
        held = hops[: len(hops) - layer]  # the input layer holds every hop, the output layer one
        dst_E = torch.repeat_interleave(torch.arange(b.num_dst), b.indptr_D1.diff())
        cat = np.concatenate
        np.testing.assert_array_equal(b.edge_ids_E, cat([h.eids for h in held]))
        np.testing.assert_array_equal(b.edge_time_E, cat([h.nbr_times for h in held]))
        np.testing.assert_array_equal(b.src_nodes_S[b.indices_E], cat([h.nbr for h in held]))
        np.testing.assert_array_equal(
            b.src_nodes_S[dst_E], cat([np.repeat(h.dst_nodes, np.diff(h.offsets)) for h in held])
        )
        np.testing.assert_array_equal(
            b.src_time_S[dst_E], cat([np.repeat(h.dst_times, np.diff(h.offsets)) for h in held])
        )


def test_seed_input_checks_its_times_and_keeps_int64_ids():
    ids = np.arange(5, dtype=np.int64)
    inputs = SeedInput(ids)
    assert inputs.nodes.dtype == torch.int64 and np.shares_memory(inputs.nodes.numpy(), ids)
    assert SeedInput.of(inputs) is inputs and torch.equal(SeedInput.of(ids).nodes, inputs.nodes)
    assert SeedInput(np.arange(3, dtype=np.int32)).nodes.dtype == torch.int64
    with pytest.raises(ConfigError, match="one seed time"):
        SeedInput(ids, np.zeros(4))


def test_the_sampling_stage_drives_a_typed_sampler_as_a_homogeneous_one(academic):
    """The loader's stage asks any sampler for ``mix_seed(*stream, epoch, index)``'s draws:
    the typed training's streams (``(seed, rank)`` per epoch, ``seed + 1`` for evaluation)."""
    sampler = TypedNeighborSampler(academic, relation_fanouts(academic.relations, TYPED_LAYERS))
    batches = SeedBatcher(np.arange(0, 600, 7), 16, shuffle=True, seed=3)
    batches.set_epoch(2)
    for stream, per_epoch, want_seed in (
        ((3, 1), True, lambda i: mix_seed(3, 1, 2, i)),
        (3, True, lambda i: mix_seed(3, 2, i)),
        (4, False, lambda i: mix_seed(4, i)),
    ):
        stage = NeighborSamplingStage(batches, sampler, stream, per_epoch=per_epoch)
        got = list(stage)
        assert [index for index, _ in got] == list(range(len(batches)))
        for (index, seeds), (_, sample) in zip(batches, got):
            want = sampler.sample(SeedInput(seeds), want_seed(index))
            for a, b in zip(sample.blocks, want.blocks):
                assert torch.equal(a.src_nodes_S, b.src_nodes_S)
                assert torch.equal(a.edge_ids_E, b.edge_ids_E)
                assert torch.equal(a.edge_type_E, b.edge_type_E)


def test_a_sampler_that_cannot_honour_an_input_refuses_it(graph, stream):
    exclude = np.array([1, 2, 3], dtype=np.int64)
    reference = TorchNeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(2,)))
    with pytest.raises(ConfigError, match="exclude"):
        reference.sample(SeedInput(torch.arange(4), exclude=exclude), 0)
    temporal = TemporalNeighborSampler(stream, [2])
    with pytest.raises(ConfigError, match="exclude"):
        temporal.sample(SeedInput(np.arange(4), np.full(4, 1e9), exclude=exclude), 0)


def test_protocol_is_structural():
    """Anything with ``num_layers`` and ``sample`` is a sampler to the loader (a wrapper that
    counts, a benchmark's sampler)."""
    wrapper = types.SimpleNamespace(num_layers=1, sample=lambda inputs, seed: None)
    assert isinstance(wrapper, Sampler)
    assert not isinstance(types.SimpleNamespace(sample=lambda inputs, seed: None), Sampler)
