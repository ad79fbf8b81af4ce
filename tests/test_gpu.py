"""The `gpu` tier: the GPU pipeline on a real GPU against the CPU path (skipped without CUDA; run
by benchmarks/gpu_check.sh). Distributed and checkpoint checks: tests/test_gpu_distributed.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.dropout import hashed_dropout
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.store.device import DeviceFeatureStore, degree_order
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.train.config import TrainConfig
from shardgnn.train.single import run_training

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
FIELDS = ("src_nodes_S", "indptr_D1", "indices_E", "edge_ids_E", "src_degree_S")


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=20000, features=16))


@pytest.mark.parametrize("resident", [True, False])
@pytest.mark.parametrize(
    "fanouts,replace", [((15, 10, 5), False), ((4, 4), True), ((-1, 3), False)]
)
def test_gpu_sampler_equals_the_cpu_kernels(graph, resident, fanouts, replace):
    config = SamplerConfig(fanouts=fanouts, replace=replace)
    gpu = DeviceNeighborSampler(graph.indptr, graph.indices, config, CUDA, None if resident else 0)
    assert gpu.resident is resident  # budget 0: the CSR is read in place from pinned memory
    cpu = NeighborSampler(graph.indptr, graph.indices, config)
    seeds = torch.from_numpy(np.random.default_rng(0).choice(graph.num_nodes, 1024, replace=False))
    for seed in (3, 2**63 + 1):
        a, b = cpu.sample(seeds, seed), gpu.sample(seeds, seed)
        for block_a, block_b in zip(a.blocks, b.blocks, strict=True):
            assert block_b.src_nodes_S.is_cuda
            for field in FIELDS:
                assert torch.equal(getattr(block_a, field), getattr(block_b, field).cpu()), field


def test_gpu_sampler_is_uniform(graph):
    """Chi-square: over many seeds, each neighbour of a high-degree node is drawn equally often."""
    degree = np.diff(graph.indptr)
    node = int(np.argmax(degree))
    k = 5
    sampler = DeviceNeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(k,)), CUDA)
    counts = np.zeros(int(degree[node]), dtype=np.int64)
    for seed in range(4000):
        block = sampler.sample(torch.tensor([node]), seed).blocks[0]
        positions = (block.edge_ids_E - int(graph.indptr[node])).cpu().numpy()
        assert np.unique(positions).shape[0] == k  # without replacement
        np.add.at(counts, positions, 1)
    assert stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.parametrize("resident", [None, 0.3, 0])
def test_gpu_rows_equal_the_cpu_rows(graph, resident):
    rows = None if resident is None else int(resident * graph.num_nodes)
    store = DeviceFeatureStore(graph.x, CUDA, rows, hot_order=degree_order(graph.indptr))
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, graph.num_nodes, 5000))
    assert torch.equal(store.gather(ids.cuda()).cpu(), LocalFeatureStore(graph.x).gather(ids))
    if resident == 0:
        assert store.hit_rate == 0 and store.pcie_bytes == 5000 * store.row_bytes


def test_gpu_dropout_mask_equals_cpu():
    h = torch.randn(500, 64)
    ids = torch.randint(0, 10**9, (500,))
    cpu = hashed_dropout(h, 0.5, 99, row_ids=ids)
    gpu = hashed_dropout(h.cuda(), 0.5, 99, row_ids=ids.cuda())
    assert torch.equal(cpu, gpu.cpu())


def _train(device: str, **kwargs):
    config = TrainConfig(dataset="synthetic:nodes=5000", device=device, **kwargs)
    config.optim.epochs = 2
    config.progress = False
    return run_training(config)


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_gpu_training_equals_cpu_training(mode):
    cpu, gpu = _train("cpu", mode=mode), _train("cuda", mode=mode)
    loss_cpu = [e["loss"] for e in cpu["epochs"]]
    loss_gpu = [e["loss"] for e in gpu["epochs"]]
    assert np.allclose(loss_cpu, loss_gpu, rtol=2e-3, atol=1e-4), (loss_cpu, loss_gpu)
    assert abs(cpu["test_acc"] - gpu["test_acc"]) < 0.02


def test_staged_cpu_sampling_trains_as_gpu_sampling():
    from shardgnn.loader.config import DeviceConfig

    gpu = _train("cuda")
    staged = _train("cuda", gpu=DeviceConfig(sampler_device="cpu"))
    tiered = _train("cuda", gpu=DeviceConfig(feature_memory="10%", hot_policy="presample"))
    for other in (staged, tiered):
        assert np.allclose(
            [e["loss"] for e in gpu["epochs"]], [e["loss"] for e in other["epochs"]], rtol=1e-4
        )
    assert 0 < tiered["gpu_pipeline"]["gpu_hit_rate"] < 1
    assert "h2d" in staged["epochs"][-1]["stages"]


def test_bf16_on_gpu_learns_as_fp32():
    fp32, bf16 = _train("cuda"), _train("cuda", precision="bf16")
    assert abs(fp32["test_acc"] - bf16["test_acc"]) < 0.05
