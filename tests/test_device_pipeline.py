"""The GPU pipeline's device-independent logic, run on CPU tensors: the tensor sampler draws what
the numba kernels draw (bit for bit, so the chi-square tests of those kernels cover it), the
two-tier store gathers the rows a plain store gathers, and a batch made by the device pipeline
equals the CPU pipeline's. The same checks on a GPU are in tests/test_gpu.py."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.linksplit import pair_keys, sorted_unique
from shardgnn.loader.config import DeviceConfig
from shardgnn.loader.device import device_pipeline, map_batch
from shardgnn.loader.pipeline import MiniBatchLoader
from shardgnn.nn.dropout import _device_mask, _threshold, hashed_dropout
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler, relabel, splitmix64
from shardgnn.sampling.kernels import relabel as relabel_kernel
from shardgnn.sampling.kernels import splitmix64 as splitmix64_kernel
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.types import SeedInput
from shardgnn.store.device import DeviceFeatureStore, degree_order
from shardgnn.store.feature import LocalFeatureStore

CPU = torch.device("cpu")
BLOCK_FIELDS = ("src_nodes_S", "indptr_D1", "indices_E", "edge_ids_E", "src_degree_S")


def assert_same_blocks(a, b):
    assert torch.equal(a.seeds, b.seeds)
    for block_a, block_b in zip(a.blocks, b.blocks, strict=True):
        assert block_a.num_dst == block_b.num_dst
        for field in BLOCK_FIELDS:
            assert torch.equal(getattr(block_a, field), getattr(block_b, field)), field


def test_splitmix64_matches_the_kernels_bits():
    values = np.array([0, 1, 2**31, 2**62 + 12345, 2**63 - 1], dtype=np.int64)
    ours = splitmix64(torch.from_numpy(values)).numpy().view(np.uint64)
    theirs = [splitmix64_kernel(np.uint64(v)) for v in values]
    assert ours.tolist() == [int(t) for t in theirs]


@pytest.mark.parametrize(
    "fanouts,replace", [((15, 10, 5), False), ((3, 2), True), ((-1, 4), False), ((40,), False)]
)
@pytest.mark.parametrize("seed", [1, 2**63 + 5])
def test_tensor_sampler_draws_what_the_kernels_draw(small_graph, fanouts, replace, seed):
    config = SamplerConfig(fanouts=fanouts, replace=replace)
    cpu = NeighborSampler(small_graph.indptr, small_graph.indices, config)
    tensor = DeviceNeighborSampler(small_graph.indptr, small_graph.indices, config, CPU)
    rng = np.random.default_rng(seed % 1000)
    seeds = torch.from_numpy(rng.choice(small_graph.num_nodes, 64, replace=False))
    assert_same_blocks(cpu.sample(seeds, seed), tensor.sample(seeds, seed))


def test_tensor_sampler_excludes_edges_as_the_kernels_do(small_graph):
    config = SamplerConfig(fanouts=(5, 5))
    g = small_graph
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    chosen = np.random.default_rng(0).choice(g.indices.shape[0], 300, replace=False)
    exclude = sorted_unique(pair_keys(g.indices[chosen], dst[chosen], g.num_nodes))
    seeds = torch.from_numpy(np.unique(dst[chosen])[:50])
    inputs = SeedInput(seeds, exclude=exclude)
    cpu = NeighborSampler(g.indptr, g.indices, config).sample(inputs, 7)
    tensor = DeviceNeighborSampler(g.indptr, g.indices, config, CPU).sample(inputs, 7)
    assert_same_blocks(cpu, tensor)
    assert (
        cpu.num_sampled_edges
        < NeighborSampler(g.indptr, g.indices, config).sample(seeds, 7).num_sampled_edges
    )  # the exclusion removed something


@pytest.mark.parametrize("together", [False, True])  # batch by batch (CPU); one sort (GPU)
@pytest.mark.parametrize(
    "fanouts,replace", [((15, 10, 5), False), ((3, 2), True), ((-1, 4), False)]
)
def test_bulk_sampling_draws_each_batch_as_one_at_a_time(small_graph, fanouts, replace, together):
    """`sample_many`: k batches' frontiers stacked into one draw per hop (uneven sizes, one of a
    single seed, two batches sharing nodes, seeds across the int64 range) give each batch the
    blocks the kernels draw, relabelled batch by batch or all at once."""
    config = SamplerConfig(fanouts=fanouts, replace=replace)
    g = small_graph
    kernels = NeighborSampler(g.indptr, g.indices, config)
    bulk = DeviceNeighborSampler(g.indptr, g.indices, config, CPU)
    bulk.relabel_together = together
    rng = np.random.default_rng(3)
    batches = [torch.from_numpy(rng.choice(g.num_nodes, n, replace=False)) for n in (64, 1, 37)]
    batches.append(batches[0][10:40].flip(0))  # the same nodes in another batch: its own ids
    seeds = [5, 2**63 + 9, 77, 6]
    for batch, seed, got in zip(batches, seeds, bulk.sample_many(batches, seeds), strict=True):
        assert_same_blocks(kernels.sample(batch, seed), got)


def test_bulk_sampling_is_uniform_without_replacement(small_graph):
    """2,000 batches of one seed node drawn at once: every neighbour is drawn with probability
    fanout / degree (chi-square), never twice in one batch."""
    from scipy.stats import chisquare

    g = small_graph
    node = int(np.argmax(np.diff(g.indptr)))
    degree, fanout = int(g.indptr[node + 1] - g.indptr[node]), 3
    assert degree > 2 * fanout
    bulk = DeviceNeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(fanout,)), CPU)
    draws = bulk.sample_many([torch.tensor([node])] * 2000, list(range(2000)))
    eids = [d.blocks[0].edge_ids_E for d in draws]
    assert all(len(e) == fanout and len(torch.unique(e)) == fanout for e in eids)
    counts = np.bincount(torch.cat(eids).numpy() - g.indptr[node], minlength=degree)
    assert chisquare(counts).pvalue > 0.01


def test_bulk_batches_train_as_one_at_a_time(small_graph):
    """`--bulk-batches 3` (uneven last group included) trains exactly as one batch at a time;
    refused where it does not apply."""
    from shardgnn.nn.models import ModelConfig
    from shardgnn.train.config import OptimConfig, TrainConfig
    from shardgnn.train.single import run_training

    def run(bulk):
        config = TrainConfig(
            model=ModelConfig(model="sage", hidden=16),
            sampler=SamplerConfig(fanouts=(5, 5), bulk=bulk),
            optim=OptimConfig(epochs=2),
            batch_size=70,
            progress=False,
        )
        return run_training(config, small_graph)

    one, bulk = run(1), run(3)
    assert [e["loss"] for e in one["epochs"]] == [e["loss"] for e in bulk["epochs"]]
    assert one["test_acc"] == bulk["test_acc"]
    with pytest.raises(ConfigError, match="--bulk-batches 0: must be >= 1"):
        SamplerConfig(bulk=0)
    unset = run(None)  # one batch at a time off the GPU pipeline
    assert [e["loss"] for e in unset["epochs"]] == [e["loss"] for e in one["epochs"]]


def test_gpu_pipeline_samples_several_batches_a_call_unless_told(small_graph):
    """Sampling on a GPU draws GPU_BULK_BATCHES batches a call where --bulk-batches is unset (a
    hop's launches and waits shared), and what the user set where it is set."""
    from shardgnn.sampling.config import GPU_BULK_BATCHES

    g = small_graph
    x = np.zeros((g.num_nodes, 2), dtype=np.float32)
    y = torch.zeros(g.num_nodes, dtype=torch.int64)
    for bulk, want in ((None, GPU_BULK_BATCHES), (1, 1), (3, 3)):
        config = SamplerConfig(fanouts=(4,), bulk=bulk)
        parts = device_pipeline(
            g.indptr, g.indices, x, y, g.train_idx, device=CPU, config=DeviceConfig(),
            sampler_config=config, eval_sampler_config=config, batch_size=16, seed=0,
        )  # fmt: skip
        assert parts.sampler.config.batches_per_call == want
        assert parts.stats()["bulk_batches"] == want
        assert parts.eval_sampler.config.batches_per_call == (bulk or 1)


def test_relabel_keeps_first_appearance_order():
    frontier = np.array([9, 4, 7], dtype=np.int64)
    nbr = np.array([4, 12, 3, 12, 9, 5, 3], dtype=np.int64)
    src_k, local_k = relabel_kernel(frontier, nbr, np.full(20, -1, dtype=np.int64))
    node_map = torch.full((20,), torch.iinfo(torch.int64).max)
    for map_ in (None, node_map, node_map):  # a kept map is restored after each use
        src, local = relabel(torch.from_numpy(frontier), torch.from_numpy(nbr), map_)
        assert src.tolist() == src_k.tolist() == [9, 4, 7, 12, 3, 5]
        assert local.tolist() == local_k.tolist()
    assert (node_map == torch.iinfo(torch.int64).max).all()


_FUSED_CHECK = """
import sys, numpy as np, torch
from shardgnn.graph.linksplit import pair_keys, sorted_unique
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler, sample_hop
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.types import SeedInput
g = generate(SyntheticConfig(nodes=1500, degree=30, features=4))
seeds = torch.from_numpy(np.random.default_rng(0).choice(g.num_nodes, 150, replace=False))
dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
exclude = sorted_unique(pair_keys(g.indices[:400], dst[:400], g.num_nodes))
runs = 0
for fanouts, replace in [((15, 10, 5), False), ((3, 2), True), ((-1, 4), False), ((40, 1), False)]:
    config = SamplerConfig(fanouts=fanouts, replace=replace)
    cpu = NeighborSampler(g.indptr, g.indices, config)
    fused = DeviceNeighborSampler(g.indptr, g.indices, config, torch.device("cpu"))
    fused.fused = True
    for seed in (1, 2**63 + 5):
        for inputs in (seeds, SeedInput(torch.from_numpy(np.unique(dst[:400])), exclude=exclude)):
            a, b = cpu.sample(inputs, seed), fused.sample(inputs, seed)
            for x, y in zip(a.blocks, b.blocks, strict=True):
                for f in ("src_nodes_S", "indptr_D1", "indices_E", "edge_ids_E", "src_degree_S"):
                    assert torch.equal(getattr(x, f), getattr(y, f)), (fanouts, replace, seed, f)
                runs += 1
# an owner's rows drawn with its range start as id_offset: the draws of the whole graph's rows
indptr, indices = torch.from_numpy(g.indptr), torch.from_numpy(g.indices)
rows = torch.arange(100, 300)
whole = sample_hop(indptr, indices, rows, 7, False, 99, fused=False)
part_indptr = indptr[100:301] - indptr[100]
part_indices = indices[int(indptr[100]):]
part = sample_hop(part_indptr, part_indices, rows - 100, 7, False, 99, 100, fused=True)
assert torch.equal(whole[0], part[0]) and torch.equal(whole[1], part[1])
# stacked batches, one seed per row (bulk sampling): each batch's draws as drawn alone
for replace in (False, True):
    config = SamplerConfig(fanouts=(15, 10, 5), replace=replace)
    cpu = NeighborSampler(g.indptr, g.indices, config)
    bulk = DeviceNeighborSampler(g.indptr, g.indices, config, torch.device("cpu"))
    bulk.fused = bulk.relabel_together = True
    batches = [seeds[:100], seeds[90:], seeds[:1]]
    bulk_seeds = [3, 2**63 + 1, 8]
    for batch, seed, b in zip(batches, bulk_seeds, bulk.sample_many(batches, bulk_seeds)):
        for x, y in zip(cpu.sample(batch, seed).blocks, b.blocks, strict=True):
            for f in ("src_nodes_S", "indptr_D1", "indices_E", "edge_ids_E", "src_degree_S"):
                assert torch.equal(getattr(x, f), getattr(y, f)), (replace, seed, f)
            runs += 1
print("fused ok", runs)
"""


def test_fused_kernel_draws_what_the_kernels_draw():
    """The Triton hop kernel, run by Triton's interpreter on CPU tensors, against the numba
    kernels bit for bit: plain, with replacement, every neighbour then a fanout, a fanout above
    most degrees, excluded edges, two seeds, an owner's id offset, stacked batches with a seed per
    row. (On a GPU: tests/test_gpu.py.)"""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _FUSED_CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "fused ok 54" in done.stdout


def test_fused_kernel_on_a_cpu_without_the_interpreter_is_refused():
    pytest.importorskip("triton")
    code = (
        "import torch\n"
        "from shardgnn.sampling.device import sample_hop\n"
        "i = torch.tensor([0, 1, 2]); j = torch.tensor([1, 0])\n"
        "try:\n"
        "    sample_hop(i, j, torch.tensor([0, 1]), 2, False, 0, fused=True)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "runs on a CUDA device, or on cpu with TRITON_INTERPRET=1" in done.stdout, done.stderr


def test_draws_depend_only_on_seed_and_node(small_graph):
    """Counter-based: a node's neighbours do not change with the batch it is drawn in."""
    sampler = DeviceNeighborSampler(
        small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(3,)), CPU
    )
    alone = sampler.sample(torch.tensor([5]), 11).blocks[0]
    among = sampler.sample(torch.tensor([8, 2, 5, 1]), 11).blocks[0]
    picked = among.src_nodes_S[among.indices_E[among.indptr_D1[2] : among.indptr_D1[3]]]
    assert picked.tolist() == alone.src_nodes_S[alone.indices_E].tolist()


@pytest.mark.parametrize("resident", [0, 37, None])
def test_two_tier_store_gathers_the_rows(small_graph, resident):
    x = np.random.default_rng(1).standard_normal((small_graph.num_nodes, 6)).astype(np.float32)
    store = DeviceFeatureStore(x, CPU, resident, hot_order=degree_order(small_graph.indptr))
    ids = torch.from_numpy(np.random.default_rng(2).integers(0, small_graph.num_nodes, 500))
    assert torch.equal(store.gather(ids), LocalFeatureStore(x).gather(ids))
    expected = small_graph.num_nodes if resident is None else resident
    assert store.resident_rows == expected
    assert store.hits + store.misses == 500
    assert store.pcie_bytes == store.misses * 6 * 4
    if resident == 0:
        assert store.hit_rate == 0.0


def test_degree_policy_keeps_the_highest_degrees(small_graph):
    order = degree_order(small_graph.indptr)
    degree = np.diff(small_graph.indptr)
    assert np.all(np.diff(degree[order]) <= 0)
    x = np.arange(small_graph.num_nodes, dtype=np.float32)[:, None]
    store = DeviceFeatureStore(x, CPU, 10, hot_order=order)
    store.gather(torch.from_numpy(order[:10]))
    assert store.hit_rate == 1.0


@pytest.mark.parametrize("policy", ["degree", "presample"])
def test_device_pipeline_batches_equal_the_cpu_pipeline(small_graph, policy):
    g = small_graph
    x = np.random.default_rng(3).standard_normal((g.num_nodes, 5)).astype(np.float32)
    y = torch.from_numpy(np.asarray(g.y, dtype=np.int64))
    edge_attr = np.random.default_rng(5).standard_normal((g.num_edges, 3)).astype(np.float32)
    config = SamplerConfig(fanouts=(4, 3))
    parts = device_pipeline(
        g.indptr, g.indices, x, y, g.train_idx,
        device=CPU, config=DeviceConfig(feature_memory="30%", hot_policy=policy),
        sampler_config=config, eval_sampler_config=config, batch_size=16, seed=4,
        edge_attr=edge_attr,
    )  # fmt: skip
    assert parts.features.resident_rows == round(0.3 * g.num_nodes)

    def loader(sampler, features, labels, edges):
        return MiniBatchLoader(
            g.train_idx, sampler, features, labels, batch_size=16, shuffle=True, seed=4,
            edge_rows=edges,
        )  # fmt: skip

    ours = loader(parts.sampler, parts.features, parts.labels, parts.edges)
    cpu = loader(NeighborSampler(g.indptr, g.indices, config), LocalFeatureStore(x),
                 LocalFeatureStore(y), LocalFeatureStore(edge_attr))  # fmt: skip
    for epoch in (0, 1):
        ours.set_epoch(epoch)
        cpu.set_epoch(epoch)
        for a, b in zip(ours, cpu, strict=True):
            assert_same_blocks(a.sample, b.sample)
            assert torch.equal(a.x_SF, b.x_SF) and torch.equal(a.y, b.y)
            assert all(torch.equal(u, v) for u, v in zip(a.edge_attr, b.edge_attr, strict=True))
    assert 0 < parts.features.hit_rate < 1
    assert parts.stats()["edge_gpu_hit_rate"] == 1.0  # every edge row resident


def test_map_batch_reaches_every_tensor(small_graph):
    config = SamplerConfig(fanouts=(3, 3))
    batch = next(iter(MiniBatchLoader(
        small_graph.train_idx, NeighborSampler(small_graph.indptr, small_graph.indices, config),
        LocalFeatureStore(np.ones((small_graph.num_nodes, 2), np.float32)),
        LocalFeatureStore(torch.zeros(small_graph.num_nodes, dtype=torch.int64)),
        batch_size=8, shuffle=False, seed=0,
        edge_rows=LocalFeatureStore(np.ones((small_graph.num_edges, 2), np.float32)),
    )))  # fmt: skip
    seen = []
    map_batch(batch, lambda t: seen.append(t) or t)
    assert len(seen) == 3 + 6 * len(batch.sample.blocks)  # each block's tensors and edge rows


def test_device_dropout_mask_has_the_kernels_bits():
    h = torch.randn(200, 9)
    ids = torch.randint(0, 10**9, (200,))
    for p, seed in ((0.3, 3), (0.5, 2**62 + 7)):
        scale = np.float32(1 / (1 - p))
        mask = _device_mask(h, seed, _threshold(p), scale, 0, ids)
        assert torch.equal(hashed_dropout(h, p, seed, row_ids=ids), h * mask)


def test_gpu_settings_without_a_gpu_are_refused():
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.single import gpu_sampling

    config = TrainConfig(gpu=DeviceConfig(sampler_device="gpu"))
    with pytest.raises(ConfigError, match="--sampler-device applies to training on a GPU"):
        gpu_sampling(config, CPU)
    assert gpu_sampling(TrainConfig(), CPU) is False
    with pytest.raises(ConfigError, match="--gpu-feature-memory"):
        DeviceConfig(feature_memory="lots")


def test_windowed_rows_fetch_a_group_of_batches_in_one_gather(small_graph):
    """`--bulk-batches k` with workers: k batches' input rows come from one gather of their union
    (`WindowedRows`), each batch's rows those a direct gather gives."""
    from shardgnn.loader.batches import SeedBatcher
    from shardgnn.loader.pipeline import FeatureFetcher, NeighborSamplingStage, WindowedRows
    from shardgnn.store.feature import LocalFeatureStore

    class Counting(LocalFeatureStore):
        calls, rows = 0, 0

        def gather(self, ids):
            self.calls, self.rows = self.calls + 1, self.rows + int(ids.shape[0])
            return super().gather(ids)

    g = small_graph
    store = Counting(torch.from_numpy(np.asarray(g.x)))
    batches = SeedBatcher(np.arange(0, 700), 100, shuffle=True, seed=2)  # 7 batches
    stage = NeighborSamplingStage(
        batches, NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(4, 4))), 5
    )
    direct = LocalFeatureStore(torch.from_numpy(np.asarray(g.x)))
    got = list(FeatureFetcher(stage, WindowedRows(store, 3), None))
    assert len(got) == 7 and store.calls == 3  # groups of 3, 3 and 1
    assert store.rows < sum(b.sample.input_nodes.shape[0] for b in got)  # shared rows once
    for batch in got:
        assert torch.equal(batch.x_SF, direct.gather(batch.sample.input_nodes))


@pytest.mark.parametrize("model", ["sage", "gcn", "gin"])
def test_graphs_made_ahead_train_as_graphs_made_in_the_step(small_graph, monkeypatch, model):
    """`GraphsAhead` (what the GPU pipeline's thread runs on each batch): once a step has run, a
    batch's graphs come with the matrices that step asked for made, and a step on them computes
    what a step making its own computes, to the bit (the torch sparse path, the one a GPU runs)."""
    from shardgnn.nn import message_graph
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.models import build_model
    from shardgnn.nn.targets import ClassTarget
    from shardgnn.timing import StageTimer
    from shardgnn.train.minibatch import GraphsAhead, minibatch_step, node_objective

    monkeypatch.setattr(message_graph, "USE_KERNELS", False)
    g = small_graph
    loader = MiniBatchLoader(
        g.train_idx, NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(4, 3))),
        LocalFeatureStore(torch.from_numpy(np.asarray(g.x))),
        LocalFeatureStore(torch.from_numpy(np.asarray(g.y))), batch_size=64, shuffle=True, seed=3,
    )  # fmt: skip
    loader.set_epoch(0)
    first, second = [batch for _, batch in zip(range(2), loader)]
    target = ClassTarget(g.num_classes)

    def trainer(ahead=None):
        torch.manual_seed(0)
        config = ModelConfig(model=model, hidden=8, num_layers=2, dropout=0.0)
        module = build_model(config, g.x.shape[1], g.num_classes)
        optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
        step = minibatch_step(module, optimizer, device=CPU, timer=StageTimer(),
                              objective=node_objective(target), ahead=ahead)  # fmt: skip
        return module, step

    ahead = GraphsAhead(CPU)
    assert ahead(first) is first  # nothing learnt yet: the step makes its graphs
    module_a, step_a = trainer(ahead)
    module_b, step_b = trainer()
    assert step_a(first).loss == step_b(first).loss
    assert all(norms for norms, _ in ahead.asked)  # every layer multiplied by a matrix
    made = ahead(second)
    assert made.graphs is not None and len(made.graphs) == 2 and ahead.made == 1
    for graph, asked in zip(made.graphs, ahead.asked):
        assert graph.matrices_made() == asked
        # the parts a stream must mark: the graph's own, then each cached matrix's three
        parts = list(graph.tensors())
        assert len(parts) >= 3 * (len(asked[0]) + len(asked[1])) + 2
    assert torch.equal(step_a(made).loss, step_b(second).loss)
    for p_a, p_b in zip(module_a.parameters(), module_b.parameters(), strict=True):
        assert torch.equal(p_a, p_b)
