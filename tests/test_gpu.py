"""The `gpu` tier: the GPU pipeline on a real GPU against the CPU path (skipped without CUDA; run
by benchmarks/gpu_check.sh). Distributed and checkpoint checks: tests/test_gpu_distributed.py."""

from __future__ import annotations

import copy

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

from conftest import random_known_answers, write_cluster_triples

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
FIELDS = ("src_nodes_S", "indptr_D1", "indices_E", "edge_ids_E", "src_degree_S")


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=20000, features=16))


@pytest.mark.parametrize("fused", [True, False])  # the Triton hop kernel; tensor code
@pytest.mark.parametrize("resident", [True, False])
@pytest.mark.parametrize(
    "fanouts,replace", [((15, 10, 5), False), ((4, 4), True), ((-1, 3), False), ((25,), False)]
)
def test_gpu_sampler_equals_the_cpu_kernels(graph, resident, fanouts, replace, fused):
    config = SamplerConfig(fanouts=fanouts, replace=replace)
    gpu = DeviceNeighborSampler(graph.indptr, graph.indices, config, CUDA, None if resident else 0)
    gpu.fused = fused
    assert gpu.resident is resident  # budget 0: the CSR is read in place from pinned memory
    cpu = NeighborSampler(graph.indptr, graph.indices, config)
    seeds = torch.from_numpy(np.random.default_rng(0).choice(graph.num_nodes, 1024, replace=False))
    for seed in (3, 2**63 + 1):
        a, b = cpu.sample(seeds, seed), gpu.sample(seeds, seed)
        for block_a, block_b in zip(a.blocks, b.blocks, strict=True):
            assert block_b.src_nodes_S.is_cuda
            for field in FIELDS:
                assert torch.equal(getattr(block_a, field), getattr(block_b, field).cpu()), field


@pytest.mark.parametrize("resident", [True, False])
def test_gpu_bulk_sampling_equals_the_cpu_kernels(graph, resident):
    """k batches per hop on the GPU (stacked frontiers, per-row seeds): each batch's blocks are
    the kernels' one-at-a-time blocks."""
    config = SamplerConfig(fanouts=(15, 10, 5))
    gpu = DeviceNeighborSampler(graph.indptr, graph.indices, config, CUDA, None if resident else 0)
    cpu = NeighborSampler(graph.indptr, graph.indices, config)
    rng = np.random.default_rng(1)
    batches = [
        torch.from_numpy(rng.choice(graph.num_nodes, n, replace=False)) for n in (512, 3, 700)
    ]
    seeds = [4, 2**63 + 2, 9]
    for batch, seed, got in zip(batches, seeds, gpu.sample_many(batches, seeds), strict=True):
        want = cpu.sample(batch, seed)
        for block_a, block_b in zip(want.blocks, got.blocks, strict=True):
            for field in FIELDS:
                assert torch.equal(getattr(block_a, field), getattr(block_b, field).cpu()), field


@pytest.mark.parametrize("bulk", [False, True])
def test_gpu_ladies_equals_the_cpu_kernels(graph, bulk):
    """LADIES on the GPU (one batch, or k stacked): the kernels' nodes and edges; the weights
    equal to float32 rounding (CUDA's log and expm1 may differ from the CPU's in the last bit)."""
    config = SamplerConfig(ladies=(2048, 1024, 512))
    gpu = DeviceNeighborSampler(graph.indptr, graph.indices, config, CUDA)
    cpu = NeighborSampler(graph.indptr, graph.indices, config)
    rng = np.random.default_rng(2)
    batches = [torch.from_numpy(rng.choice(graph.num_nodes, n, replace=False)) for n in (512, 40)]
    seeds = [5, 2**63 + 3]
    got = (
        gpu.sample_many(batches, seeds)
        if bulk
        else [gpu.sample(b, s) for b, s in zip(batches, seeds)]
    )
    for batch, seed, sample in zip(batches, seeds, got, strict=True):
        want = cpu.sample(batch, seed)
        for block_a, block_b in zip(want.blocks, sample.blocks, strict=True):
            for field in FIELDS:
                assert torch.equal(getattr(block_a, field), getattr(block_b, field).cpu()), field
            torch.testing.assert_close(block_a.edge_weight_E, block_b.edge_weight_E.cpu())


def test_gpu_sampler_is_uniform(graph):
    """Chi-square: over many seeds, each neighbour of a high-degree node is drawn equally often
    (one batch of 4000 copies of the node would draw one neighbourhood: draws are counter-based,
    so the seeds vary instead)."""
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
    kwargs.setdefault("dataset", "synthetic:nodes=5000")
    config = TrainConfig(device=device, **kwargs)
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

    gpu = _train("cuda")  # GPU sampling on a second stream, one batch ahead
    serial = _train("cuda", gpu=DeviceConfig(overlap=False))
    staged = _train("cuda", gpu=DeviceConfig(sampler_device="cpu"))
    tiered = _train("cuda", gpu=DeviceConfig(feature_memory="10%", hot_policy="presample"))
    assert "side" in gpu["epochs"][-1]["stages"] and "side" not in serial["epochs"][-1]["stages"]
    assert gpu["gpu_pipeline"]["sampler_kernel"] == "triton"
    # the second stream's thread made the step's graphs from the second batch on; serially, none
    assert gpu["gpu_pipeline"]["graphs_made_ahead"] > 0
    assert serial["gpu_pipeline"]["graphs_made_ahead"] == 0
    for other in (serial, staged, tiered):
        assert np.allclose(
            [e["loss"] for e in gpu["epochs"]], [e["loss"] for e in other["epochs"]], rtol=1e-4
        )
    assert 0 < tiered["gpu_pipeline"]["gpu_hit_rate"] < 1
    assert "h2d" in staged["epochs"][-1]["stages"]
    # staged sampling also makes the step's graphs in its copying thread, and says so
    assert staged["gpu_pipeline"]["sampler_device"] == "cpu"
    assert staged["gpu_pipeline"]["graphs_made_ahead"] > 0


def test_edge_rows_train_on_the_gpu_as_on_the_cpu():
    """GINE over edge features: GPU sampling gathers each block's edge rows on the device (the
    edge store's rows all resident), staged CPU sampling copies them; both as on the CPU."""
    from shardgnn.loader.config import DeviceConfig
    from shardgnn.nn.config import ModelConfig

    spec = "synthetic:nodes=5000,edge_features=8"
    runs = [
        _train(device, dataset=spec, model=ModelConfig(model="gine"), gpu=gpu)
        for device, gpu in (("cpu", DeviceConfig()), ("cuda", DeviceConfig()),
                            ("cuda", DeviceConfig(sampler_device="cpu")))
    ]  # fmt: skip
    for other in runs[1:]:
        _same_run(runs[0], other)
    assert runs[1]["gpu_pipeline"]["edge_gpu_hit_rate"] == 1.0


def test_bf16_on_gpu_learns_as_fp32():
    fp32, bf16 = _train("cuda"), _train("cuda", precision="bf16")
    assert abs(fp32["test_acc"] - bf16["test_acc"]) < 0.05


def _same_run(cpu: dict, gpu: dict, rtol: float = 2e-3, epochs: int | None = None) -> None:
    loss_cpu = [e["loss"] for e in cpu["epochs"]][:epochs]
    loss_gpu = [e["loss"] for e in gpu["epochs"]][:epochs]
    assert np.allclose(loss_cpu, loss_gpu, rtol=rtol, atol=1e-4), (loss_cpu, loss_gpu)


@pytest.mark.parametrize(
    "spec",
    [
        "synthetic:nodes=3000,labels=multilabel,label_columns=6",
        "synthetic:nodes=3000,labels=regression,label_columns=2",
        "synthetic:nodes=3000,labels=multitask",
    ],
)
@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_label_tables_train_on_the_gpu_as_on_the_cpu(spec, mode):
    runs = {}
    for device in ("cpu", "cuda"):
        config = TrainConfig(dataset=spec, device=device, mode=mode, progress=False)
        config.optim.epochs = 2
        config.model.dropout = config.model.input_dropout = 0.0
        runs[device] = run_training(config)
    _same_run(runs["cpu"], runs["cuda"])
    assert runs["cuda"]["metric"] == runs["cpu"]["metric"]


@pytest.mark.parametrize(
    "dataset,task,model",
    [("csl:pe=8", "graph", "gin"), ("tracks:events=8,particles=20", "edge", "gine")],
)
def test_graph_sets_step_on_the_gpu_as_on_the_cpu(dataset, task, model):
    """One batch's outputs, loss and gradients with the same weights on both devices, then a
    short run on the GPU. (Whole runs are not compared: CSL's GIN with sum aggregation amplifies
    rounding; measured, two 3-epoch runs parted by 2 % in the first epoch's loss.)"""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import OptimConfig
    from shardgnn.train.graphlevel import GraphSetSteps

    def config(device):
        return TrainConfig(
            dataset=dataset, task=task, device=device, progress=False, batch_size=8, seed=0,
            model=ModelConfig(model=model, hidden=32, dropout=0.0),
            optim=OptimConfig(epochs=3, lr=0.003),
        )  # fmt: skip

    cpu, gpu = GraphSetSteps(config("cpu")), GraphSetSteps(config("cuda"))
    gpu.model.load_state_dict(cpu.model.state_dict())
    # one graph of each of the first classes: CSL's training ids run class by class, and eight
    # graphs of one class are one circulant graph eight times, whose nodes all carry the same
    # features, so every normalised column is rounding noise over zero (measured on the CPU,
    # float32 against float64: the last norm's bias gradient 3.5 apart on a scale of 3.2; over
    # one graph per class, 4.7e-4 of the largest gradient)
    ids = np.asarray(cpu.graphs.train_idx)
    if cpu.graphs.y is not None:  # graph labels (CSL); the tracks' labels are per edge
        ids = ids[np.sort(np.unique(cpu.graphs.y[ids], return_index=True)[1])]
    ids = ids[:8]
    grads = {}
    for name, steps in (("cpu", cpu), ("cuda", gpu)):
        steps.model.train()
        out, y = steps._forward(steps._batch(ids))
        loss = steps.target.loss_mean(out, y)
        loss.backward()
        grads[name] = (out.detach().cpu(), loss.detach().cpu())
        grads[name] += tuple(p.grad.cpu() for p in steps.model.parameters() if p.grad is not None)
    # against the largest gradient: a batch-normalised layer's bias gradients are rounding noise
    # around zero (measured on an H100: one entry 0 on the CPU, 1.9e-4 on the GPU)
    scale = max(float(t.abs().max()) for t in grads["cpu"][2:])
    out_cpu, loss_cpu, *grads_cpu = grads["cpu"]
    out_gpu, loss_gpu, *grads_gpu = grads["cuda"]
    torch.testing.assert_close(out_gpu, out_cpu, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(loss_gpu, loss_cpu, rtol=1e-3, atol=1e-4)
    for a, b in zip(grads_cpu, grads_gpu, strict=True):
        assert float((b - a).abs().max()) <= 3e-3 * scale, (float((b - a).abs().max()), scale)
    result = run_training(config("cuda"))
    assert len(result["epochs"]) == 3 and all(np.isfinite(e["loss"]) for e in result["epochs"])


def _frozen_epoch_then_training(config) -> None:
    """``config(device, lr)``'s first epoch on the CPU and on the GPU with a learning rate too
    small to move any weight (every batch's loss is then the same model's forward pass on both
    devices): within 0.1 %, and the metric of the same kind; then a real run on the GPU, every
    epoch finite. Whole runs at a real learning rate are not compared: Adam turns rounding-level
    gradient differences into whole steps (measured on an H100: HGT mini-batch epoch 1 0.27 %
    apart, epoch 3 12 %)."""
    runs = {d: run_training(config(d, 1e-12)) for d in ("cpu", "cuda")}
    _same_run(runs["cpu"], runs["cuda"], rtol=1e-3, epochs=1)
    assert runs["cuda"]["metric"] == runs["cpu"]["metric"]
    trained = run_training(config("cuda", None))
    assert all(np.isfinite(e["loss"]) for e in trained["epochs"]), trained["epochs"]


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_hgt_trains_on_the_gpu_as_on_the_cpu(mode):
    """HGT over a typed graph whose featureless types hold learnt rows."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.sampling.config import SamplerConfig as Sampling
    from shardgnn.train.config import OptimConfig

    def config(device, lr):
        return TrainConfig(
            dataset="synthetic-hetero", mode=mode, device=device, progress=False, batch_size=64,
            model=ModelConfig(model="hgt", hidden=32, dropout=0.0),
            sampler=Sampling(fanouts=(8, 8)),
            optim=OptimConfig(epochs=1 if lr else 3, lr=lr or 0.01),
        )  # fmt: skip

    _frozen_epoch_then_training(config)


@pytest.mark.parametrize("model", ["rgcn", "surel"])
def test_knowledge_graphs_and_surel_train_on_the_gpu_as_on_the_cpu(tmp_path, model):
    """R-GCN + DistMult on a knowledge graph (its entity rows stepped by the functional fused
    Adam) and SUREL (walks drawn on the CPU, encoded on the GPU)."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import LinkConfig, OptimConfig

    spec = write_cluster_triples(tmp_path / "kg") if model == "rgcn" else "synthetic:nodes=2000"

    def config(device, lr):
        return TrainConfig(
            dataset=spec, task="link", device=device, progress=False, batch_size=64, seed=1,
            model=ModelConfig(model=model, hidden=32, num_bases=2, dropout=0.0),
            link=LinkConfig(out_dim=32, walks=8),
            optim=OptimConfig(epochs=1 if lr else 2, lr=lr or 0.01),
        )  # fmt: skip

    _frozen_epoch_then_training(config)


@pytest.mark.parametrize(
    "dataset,task,model",
    [
        # featureless types' learnt rows (one table per type) and a multi-task label table
        ("synthetic-hetero:papers=1500,authors=1000,labels=multitask", "node", "rgcn"),
        ("synthetic-temporal:nodes=200,events=3000", "link", "tgn"),  # memory, time encoding
        ("synthetic:nodes=3000", "link", "sage"),  # mini-batch link prediction, excluded edges
        # the blocks' edge rows, gathered on the GPU beside the node rows
        ("synthetic:nodes=1500,degree=8,edge_features=8", "link", "gine"),
        # a labelled event stream: node states read from the memory at each event's time
        ("synthetic-temporal:nodes=200,events=3000,classes=4,features=8", "node", "tgn"),
    ],
)
def test_typed_temporal_and_link_training_on_the_gpu_as_on_the_cpu(dataset, task, model):
    """Every single-process mini-batch recipe not covered above, on the GPU as on the CPU."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import OptimConfig

    def config(device, lr):
        return TrainConfig(
            dataset=dataset, task=task, device=device, progress=False, batch_size=128, seed=2,
            model=ModelConfig(model=model, hidden=32, dropout=0.0),
            optim=OptimConfig(epochs=1 if lr else 2, lr=lr or 0.005),
        )  # fmt: skip

    _frozen_epoch_then_training(config)


def test_known_answers_lookup_on_the_gpu_equals_the_cpu():
    """The knowledge-graph file's filtered lookup (binary search over the known keys, then the
    known answers scored -inf) on the GPU: the same marks, scores and best entities as on the
    CPU."""
    from shardgnn.nn.serving import KnowledgeGraphServingModel
    from shardgnn.nn.typed import DistMult

    rng = np.random.default_rng(5)
    n, relations = 300, 8
    known, pairs = random_known_answers(rng, n, relations, 400, 40)
    cpu = KnowledgeGraphServingModel(
        DistMult(relations, 16), torch.randn(n, 16), top_k=10, known=pairs
    )
    gpu = copy.deepcopy(cpu).to(CUDA)
    entity = torch.from_numpy(rng.integers(0, n, 500))
    relation = torch.from_numpy(rng.integers(0, relations, 500))
    marks = gpu.known_answers(entity.to(CUDA), relation.to(CUDA))
    assert marks.device.type == CUDA.type and torch.equal(marks.cpu(), known[entity, relation])
    scores_cpu = cpu.scores(entity, relation)
    scores_gpu = gpu.scores(entity.to(CUDA), relation.to(CUDA)).cpu()
    assert torch.equal(torch.isinf(scores_gpu), torch.isinf(scores_cpu))
    finite = ~torch.isinf(scores_cpu)
    torch.testing.assert_close(scores_gpu[finite], scores_cpu[finite], rtol=1e-4, atol=1e-5)
    best_cpu, _ = cpu(entity, relation)
    best_gpu, _ = gpu(entity.to(CUDA), relation.to(CUDA))
    # ties aside, the same best entities: each GPU pick scores the CPU's k-th best or better
    kth_QK = scores_cpu.gather(1, best_cpu)[:, -1:]
    picked_QK = scores_cpu.gather(1, best_gpu.cpu())
    assert bool((picked_QK >= kth_QK - 1e-4).all())


@pytest.mark.parametrize("model", ["sage", "gin"])
def test_a_captured_step_is_the_eager_step(graph, model):
    """`--cuda-graphs`: a batch's step captured (its bucket's first) and then replayed on other
    batches gives the eager step's loss and weights, dropout on, from the same weights and Adam
    state; a second batch of the bucket replays without a new capture."""
    from shardgnn.loader.pipeline import MiniBatchLoader
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.models import build_model
    from shardgnn.nn.targets import ClassTarget
    from shardgnn.timing import StageTimer
    from shardgnn.train.captured import CapturedSteps
    from shardgnn.train.config import OptimConfig
    from shardgnn.train.minibatch import minibatch_step, node_objective
    from shardgnn.train.setup import adam

    sampler = DeviceNeighborSampler(
        graph.indptr, graph.indices, SamplerConfig(fanouts=(10, 5)), CUDA
    )
    features = DeviceFeatureStore(graph.x, CUDA)
    labels = DeviceFeatureStore(torch.from_numpy(np.asarray(graph.y)), CUDA)
    loader = MiniBatchLoader(graph.train_idx, sampler, features, labels, batch_size=256,
                             shuffle=True, seed=1)  # fmt: skip
    loader.set_epoch(0)
    batches = [b for _, b in zip(range(6), loader)]
    target = ClassTarget(graph.num_classes)

    def trainer():
        torch.manual_seed(0)
        config = ModelConfig(model=model, hidden=32, num_layers=2, dropout=0.5)
        module = build_model(config, graph.x.shape[1], graph.num_classes).to(CUDA)
        module.use_hashed_dropout(5)
        module.train()
        return module, adam(module.parameters(), OptimConfig(lr=1e-2))

    eager_module, eager_opt = trainer()
    eager = minibatch_step(eager_module, eager_opt, device=CUDA, timer=StageTimer(),
                           objective=node_objective(target))  # fmt: skip
    module, opt = trainer()
    captured = CapturedSteps(module, opt, target)
    for batch in batches:
        want, got = eager(batch), captured.step(batch)
        assert got is not None
        torch.testing.assert_close(got.loss.float(), want.loss.float(), rtol=1e-5, atol=1e-6)
        assert int(got.correct) == int(want.correct) and got.count == want.count
    assert captured.replays == len(batches) and len(captured.captured) < len(batches)
    assert module.dropout_step == eager_module.dropout_step
    for a, b in zip(module.parameters(), eager_module.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["sage", "gin"])
def test_cuda_graphs_train_as_eager_steps(model):
    from shardgnn.loader.config import DeviceConfig
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.captured import MAX_GRAPHS

    eager = _train("cuda", model=ModelConfig(model=model))
    graphed = _train("cuda", model=ModelConfig(model=model), gpu=DeviceConfig(cuda_graphs=True))
    stats = graphed["gpu_pipeline"]
    assert stats["steps_replayed"] > 0 and 1 <= stats["graphs_captured"] <= MAX_GRAPHS
    assert stats["graphs_made_ahead"] == 0  # a captured step makes its graphs in the graph
    losses = [[e["loss"] for e in run["epochs"]] for run in (eager, graphed)]
    assert np.allclose(*losses, rtol=2e-3, atol=1e-4), losses
    assert abs(eager["test_acc"] - graphed["test_acc"]) < 0.02
