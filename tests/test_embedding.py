"""Learnable node embeddings: the sparse optimisers against torch's, initial rows, gathers,
featureless training end to end, resume, and bad settings."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import shardgnn.store.embedding as embedding_module
from shardgnn.cli import main
from shardgnn.errors import ConfigError
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.config import ModelConfig
from shardgnn.sampling.config import SamplerConfig
from shardgnn.seeding import hashed_uniform
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.embedding import (
    EmbeddingTable,
    check_table_fits,
    input_store,
    table_bytes,
)
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.train.config import CheckpointConfig, LinkConfig, OptimConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import assert_same_weights, final_weights


def random_steps(num_rows: int, dim: int, steps: int, seed: int = 0):
    """Per step: row ids (with repeats, sometimes none) and their gradient rows."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        count = 0 if step == 3 else int(rng.integers(1, num_rows))
        ids = torch.from_numpy(rng.integers(0, num_rows, count).astype(np.int64))
        out.append((ids, torch.from_numpy(rng.standard_normal((count, dim)).astype(np.float32))))
    return out


def torch_reference(table: EmbeddingTable, optimizer: str, steps) -> torch.Tensor:
    """The same updates through nn.Embedding(sparse=True) and torch's own optimiser."""
    emb = torch.nn.Embedding.from_pretrained(table.weight.clone(), freeze=False, sparse=True)
    lr = table.config.lr
    if optimizer == "adam":
        opt = torch.optim.SparseAdam(emb.parameters(), lr=lr)
    else:
        opt = torch.optim.Adagrad(emb.parameters(), lr=lr)
    with torch.sparse.check_sparse_tensor_invariants(enable=True):
        return _run_reference(emb, opt, steps)


def _run_reference(emb, opt, steps) -> torch.Tensor:
    for ids, grad in steps:
        opt.zero_grad()
        # d(sum(rows * grad))/d rows = grad: the sparse gradient of exactly these rows.
        (emb(ids) * grad).sum().backward()
        if ids.numel() == 0:  # torch's optimisers skip a missing gradient, but count the step
            emb.weight.grad = torch.sparse_coo_tensor(
                torch.zeros((1, 0), dtype=torch.int64),
                torch.zeros((0, grad.shape[1])),
                emb.weight.shape,
                check_invariants=True,
            )
        opt.step()
    return emb.weight.detach()


@pytest.mark.parametrize("kernels", [True, False], ids=["numba", "torch-ops"])
@pytest.mark.parametrize(("optimizer", "dim"), [("adam", 8), ("adagrad", 1)])
def test_sparse_optimizers_equal_torchs(optimizer, dim, kernels, monkeypatch):
    """adam is torch.optim.SparseAdam; row-wise adagrad with one column is torch.optim.Adagrad
    (both update paths: the CPU kernels and the torch operations other devices use)."""
    monkeypatch.setattr(embedding_module, "USE_KERNELS", kernels)
    config = EmbeddingConfig(dim=dim, optimizer=optimizer, lr=0.05)
    table = EmbeddingTable(40, config, seed=1)
    steps = random_steps(40, dim, 8)
    expected = torch_reference(table, optimizer, steps)
    for ids, grad in steps:
        table.apply_gradients(ids, grad)
    torch.testing.assert_close(table.weight, expected, rtol=0, atol=1e-6)
    assert int(table.steps) == len(steps)


@pytest.mark.parametrize("kernels", [True, False], ids=["numba", "torch-ops"])
def test_rowwise_adagrad_keeps_one_accumulator_per_row(kernels, monkeypatch):
    monkeypatch.setattr(embedding_module, "USE_KERNELS", kernels)
    config = EmbeddingConfig(dim=4, optimizer="adagrad", lr=0.1)
    table = EmbeddingTable(10, config, seed=0)
    w = table.weight.clone().double().numpy()
    acc = np.zeros(10)
    for ids, grad in random_steps(10, 4, 6, seed=5):
        table.apply_gradients(ids, grad)
        g = np.zeros((10, 4))
        np.add.at(g, ids.numpy(), grad.double().numpy())
        used = np.unique(ids.numpy())
        acc[used] += (g[used] ** 2).mean(1)
        w[used] -= 0.1 * g[used] / (np.sqrt(acc[used])[:, None] + 1e-10)
    np.testing.assert_allclose(table.weight.numpy(), w, atol=1e-6)
    np.testing.assert_allclose(table.sum_sq.numpy(), acc, rtol=1e-5)
    assert table.sum_sq.shape == (10,)  # state: one float per row


def test_initial_rows_depend_only_on_node_and_seed():
    config = EmbeddingConfig(dim=6)
    whole = EmbeddingTable(100, config, seed=3)
    part = EmbeddingTable(30, config, seed=3, first_row=50)  # an owner of rows 50..79
    assert torch.equal(part.weight, whole.weight[50:80])
    assert not torch.equal(EmbeddingTable(100, config, seed=4).weight, whole.weight)
    values = hashed_uniform(np.arange(20000), 8, seed=0)
    assert values.min() >= -1 and values.max() < 1
    assert abs(values.mean()) < 0.01 and abs(values.var() - 1 / 3) < 0.01  # uniform on [-1, 1)


def test_gathers_return_the_current_rows():
    """x = arange: every gathered entry names its node and column, before and after an update."""
    table = EmbeddingTable(50, EmbeddingConfig(dim=3, optimizer="adagrad", lr=1.0), seed=0)
    table.weight.copy_(torch.arange(150, dtype=torch.float32).view(50, 3))
    ids = torch.tensor([7, 3, 7, 49])
    assert torch.equal(table.gather(ids), table.weight[ids])
    assert torch.equal(table.gather(ids)[:, 0], ids.float() * 3)
    table.apply_gradients(torch.tensor([3]), torch.ones(1, 3))
    assert torch.equal(table.gather(torch.tensor([3]))[0], torch.tensor([8.0, 9.0, 10.0]))
    both = input_store(LocalFeatureStore(np.full((50, 2), -1.0, np.float32)), table)
    row = both.gather(torch.tensor([3]))[0]
    assert both.shape == (50, 5) and row.tolist() == [-1.0, -1.0, 8.0, 9.0, 10.0]
    with pytest.raises(IndexError):
        table.gather(torch.tensor([50]))


def test_bad_embedding_settings_are_refused():
    with pytest.raises(ConfigError, match="--embedding-dim -1"):
        EmbeddingConfig(dim=-1)
    with pytest.raises(ConfigError, match="--embedding-lr 0"):
        EmbeddingConfig(dim=4, lr=0)
    huge = EmbeddingConfig(dim=1 << 20, optimizer="adam")
    with pytest.raises(ConfigError, match=r"--embedding-dim 1048576: .* GB available"):
        check_table_fits(1 << 20, huge)
    assert table_bytes(10, 4, "adam") == 10 * 4 * 4 * 3
    assert table_bytes(10, 4, "adagrad") == 10 * (4 * 4 + 4)


@pytest.fixture(scope="module")
def featureless():
    g = generate(SyntheticConfig(nodes=1500, degree=10, classes=4, features=4, seed=2))
    return dataclasses.replace(g, x=None)


def link_config(mode, optimizer, epochs, **kw):
    return TrainConfig(
        task="link",
        mode=mode,
        sampler=SamplerConfig(fanouts=(10, 10)),
        batch_size=256,
        optim=OptimConfig(epochs=epochs, lr=0.01),
        model=ModelConfig(hidden=32, dropout=0.0),
        link=LinkConfig(out_dim=16, eval_negatives=20),
        embedding=EmbeddingConfig(
            dim=16, optimizer=optimizer, lr=0.1 if optimizer == "adagrad" else 0.01
        ),
        threads=1,
        progress=False,
        **kw,
    )


@pytest.mark.parametrize(("mode", "optimizer"), [("minibatch", "adagrad"), ("minibatch", "adam")])
def test_a_featureless_graph_learns_with_embeddings(featureless, mode, optimizer):
    results = run_training(link_config(mode, optimizer, 5), featureless)
    assert results["link"]["test"]["auc"] > 0.65, results["link"]["test"]
    assert results["epochs"][-1]["stages"]["embed"] > 0  # timed as its own stage


@pytest.mark.parametrize(
    ("mode", "optimizer", "storage"),
    [("minibatch", "adam", "memory"), ("full", "adagrad", "memory"), ("minibatch", "adam", "disk")],
)
def test_embedding_rows_and_state_resume_bit_exact(featureless, mode, optimizer, storage, tmp_path):
    def config(directory, epochs, resume=False):
        base = link_config(
            mode, optimizer, epochs, checkpoint=CheckpointConfig(dir=str(directory), resume=resume)
        )
        rows = dataclasses.replace(base.embedding, storage=storage, directory=str(tmp_path))
        return dataclasses.replace(base, embedding=rows)

    straight = run_training(config(tmp_path / "a", 4), featureless)
    run_training(config(tmp_path / "b", 2), featureless)
    resumed = run_training(config(tmp_path / "b", 4, resume=True), featureless)
    weights = final_weights(tmp_path / "a")
    assert "embedding.weight" in weights and "embedding.steps" in weights
    assert_same_weights(weights, final_weights(tmp_path / "b"))
    assert resumed["link"] == straight["link"]


def test_cli_trains_an_edge_list_with_embeddings(tmp_path, capsys):
    edges = tmp_path / "edges.txt"
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 300, (3000, 2))
    edges.write_text("".join(f"{u} {v}\n" for u, v in pairs if u != v))
    out = tmp_path / "r.json"
    argv = ["train", f"file:{edges}", "--task", "link", "--fanouts", "5,5", "--epochs", "2"]
    argv += [
        "--embedding-dim",
        "8",
        "--embedding-optimizer",
        "adam",
        "--quiet",
        "--results",
        str(out),
    ]
    assert main(argv) == 0
    results = json.loads(out.read_text())
    assert results["config"]["embedding"]["dim"] == 8 and 0 <= results["link"]["test"]["mrr"] <= 1
    capsys.readouterr()


# --------------------------------------------------------------------- node classification
def node_config(mode="minibatch", epochs=5, **kw):
    return TrainConfig(
        mode=mode,
        sampler=SamplerConfig(fanouts=(10, 10)),
        batch_size=128,
        optim=OptimConfig(epochs=epochs, lr=0.01),
        model=ModelConfig(hidden=16, dropout=0.0),
        embedding=EmbeddingConfig(dim=16, lr=0.1),
        threads=1,
        progress=False,
        **kw,
    )


def test_a_featureless_labelled_graph_learns_node_classes(featureless):
    """Only the structure carries the classes (homophily 0.7, 4 classes): well above chance."""
    results = run_training(node_config(), featureless)
    assert results["test_acc"] > 0.45, results["test_acc"]
    with pytest.raises(ConfigError, match="no node features .*--embedding-dim"):
        run_training(dataclasses.replace(node_config(), embedding=EmbeddingConfig()), featureless)


def test_layerwise_evaluation_reads_the_current_rows(featureless):
    """Full-neighbourhood evaluation runs layer-wise over a copy of the input: it must see the
    rows as trained, as node-wise evaluation with fanouts above every degree does."""
    layerwise = run_training(node_config(epochs=2, eval_fanouts=(-1, -1)), featureless)
    nodewise = run_training(node_config(epochs=2, eval_fanouts=(10_000, 10_000)), featureless)
    assert [e["loss"] for e in layerwise["epochs"]] == [e["loss"] for e in nodewise["epochs"]]
    assert layerwise["val_acc"] == pytest.approx(nodewise["val_acc"], abs=1e-9)


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_node_classification_rows_resume_bit_exact(featureless, mode, tmp_path):
    def config(directory, epochs, resume=False):
        checkpoint = CheckpointConfig(dir=str(directory), resume=resume)
        return node_config(mode, epochs, checkpoint=checkpoint)

    straight = run_training(config(tmp_path / "a", 4), featureless)
    run_training(config(tmp_path / "b", 2), featureless)
    resumed = run_training(config(tmp_path / "b", 4, resume=True), featureless)
    assert_same_weights(final_weights(tmp_path / "a"), final_weights(tmp_path / "b"))
    assert resumed["test_acc"] == straight["test_acc"]


def test_what_sharded_rows_do_not_support_yet_is_refused():
    from shardgnn.train.config import RunConfig

    rows, workers = EmbeddingConfig(dim=8), RunConfig(workers=2)
    with pytest.raises(ConfigError, match="--embedding-dim 8: .* --mode minibatch so far"):
        TrainConfig(embedding=rows, run=workers, mode="full")
    with pytest.raises(ConfigError, match="--embedding-dim 8 with --overlap on"):
        TrainConfig(embedding=rows, run=RunConfig(workers=2, overlap="on"))


def _workers_argv(spec, out, *extra):
    argv = ["train", spec, "--workers", "2", "--fanouts", "10,10", "--batch-size", "128"]
    argv += ["--hidden", "16", "--dropout", "0", "--lr", "0.01", "--embedding-dim", "16"]
    return [*argv, "--embedding-lr", "0.1", "--quiet", "--results", str(out), *extra]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_with_sharded_rows_learn_as_one_process(featureless, tmp_path):
    """Featureless graph, node classes: 2 workers (each holding half the rows) reach the
    one-process accuracy within noise, and a run stopped after 2 epochs and resumed ends with
    the weights and rows of an uninterrupted one, rank by rank."""
    from shardgnn.graph.io import save_graph

    save_graph(featureless, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    one = run_training(node_config(epochs=4), featureless)
    straight = tmp_path / "straight"
    argv = _workers_argv(spec, tmp_path / "a.json", "--epochs", "4")
    assert main([*argv, "--checkpoint-dir", str(straight)]) == 0
    two = json.loads((tmp_path / "a.json").read_text())
    assert abs(two["test_acc"] - one["test_acc"]) < 0.05, (two["test_acc"], one["test_acc"])
    assert two["comm"]["embed"]["bytes_sent"] > 0  # rows and their gradients crossed ranks
    stopped = tmp_path / "stopped"
    argv = _workers_argv(spec, tmp_path / "b.json", "--checkpoint-dir", str(stopped))
    assert main([*argv, "--epochs", "2"]) == 0
    assert main([*argv, "--epochs", "4", "--resume"]) == 0
    for rank in (0, 1):
        weights = [
            torch.load(sorted(d.glob("epoch-*"))[-1] / f"rank-{rank}.pt", weights_only=True)
            for d in (straight, stopped)
        ]
        assert_same_weights(weights[0]["model"], weights[1]["model"])
        held = weights[0]["model"]["embedding.weight"].shape[0]
        assert held < featureless.num_nodes  # each rank holds only its part's rows
    # `shardgnn infer` puts the ranks' rows back together by original id (on a partition of its
    # own): its logits equal the model over the whole graph with the assembled table.
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model

    parts, out = tmp_path / "parts", tmp_path / "out"
    assert main(["partition", spec, "--parts", "2", "--method", "random", "--out", str(parts)]) == 0
    argv = ["infer", "--checkpoint", str(straight), "--partitions", str(parts), "--out", str(out)]
    assert main(argv) == 0
    last = sorted(straight.glob("epoch-*"))[-1]
    states = [torch.load(last / f"rank-{r}.pt", weights_only=True)["best_state"] for r in (0, 1)]
    table = torch.empty(featureless.num_nodes, 16)
    for state in states:
        table[state["embedding.node_ids"]] = state["embedding.weight"]
    model = build_model(ModelConfig(model="sage", hidden=16, num_layers=2), 16, 4)
    model.load_state_dict({k: v for k, v in states[0].items() if not k.startswith("embedding.")})
    model.eval()
    graph = [MessageGraph.from_csr(featureless.indptr, featureless.indices)] * 2
    with torch.no_grad():
        expected = model(graph, table).numpy()
    logits = np.load(out / "logits.npy", allow_pickle=False)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_of_a_node_model_with_rows(tmp_path):
    """`shardgnn infer` puts each node's checkpointed row behind it: 2 workers' logits equal the
    checkpoint's model on the whole graph."""
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.graph.io import save_graph
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model

    graph = generate(SyntheticConfig(nodes=500, degree=6, classes=3, features=2, seed=1))
    save_graph(dataclasses.replace(graph, x=None), tmp_path / "g")
    spec, ckpt, parts = f"graph:{tmp_path / 'g'}", tmp_path / "ckpt", tmp_path / "parts"
    argv = ["train", spec, "--model", "sage", "--fanouts", "5,5", "--hidden", "8", "--epochs"]
    argv += ["2", "--embedding-dim", "4", "--quiet", "--checkpoint-dir", str(ckpt)]
    assert main(argv) == 0
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    out = tmp_path / "out"
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", str(parts), "--out", str(out)]
    assert main(argv) == 0
    state = torch.load(sorted(ckpt.glob("epoch-*"))[-1] / "rank-0.pt", weights_only=True)
    state = state["best_state"]
    g = load_dataset(spec)
    model = build_model(ModelConfig(model="sage", hidden=8, num_layers=2), 4, g.num_classes)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("embedding.")})
    model.eval()
    with torch.no_grad():
        expected = model(
            [MessageGraph.from_csr(g.indptr, g.indices)] * 2, state["embedding.weight"]
        ).numpy()
    logits = np.load(out / "logits.npy", allow_pickle=False)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("policy", ["lru", "belady"])
def test_a_feature_cache_beside_sharded_rows_changes_nothing(tmp_path, policy, capsys):
    """Features and rows on 2 workers: the cache fronts the features only (rows are always read
    from their owners), so a cached run's losses and rows equal an uncached run's bit for bit; a
    featureless partition has nothing to cache, nor any row for --fetch-bits, and says so."""
    from shardgnn.graph.io import save_graph

    graph = generate(SyntheticConfig(nodes=1200, degree=8, classes=4, features=6, seed=5))
    save_graph(graph, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    runs = {}
    cached = ["--cache-policy", policy, "--cache-size", "30%"]
    for name, extra in (("none", []), (policy, cached)):
        ckpt = tmp_path / f"ckpt-{name}"
        # host sharing off: on one host every row would be read in place, nothing to cache
        argv = _workers_argv(spec, tmp_path / f"{name}.json", "--epochs", "2", *extra)
        argv += ["--host-sharing", "off"]
        assert main([*argv, "--checkpoint-dir", str(ckpt)]) == 0
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
        runs[name]["weights"] = final_weights(ckpt)
    losses = {name: [e["loss"] for e in run["epochs"]] for name, run in runs.items()}
    assert losses["none"] == losses[policy]
    assert_same_weights(runs["none"]["weights"], runs[policy]["weights"])
    assert runs[policy]["cache"]["hit_rate"] > 0
    save_graph(dataclasses.replace(graph, x=None), tmp_path / "bare")
    capsys.readouterr()
    argv = _workers_argv(f"graph:{tmp_path / 'bare'}", tmp_path / "x.json", "--epochs", "1")
    assert main([*argv, "--cache-policy", "lru"]) == 2
    assert "nothing to cache" in capsys.readouterr().err
    # nor anything for --fetch-bits to round: learnable rows travel exact (said by the workers)
    assert main([*argv, "--host-sharing", "off", "--fetch-bits", "8"]) != 0
    assert "this run has neither (learnable rows travel exact)" in capsys.readouterr().err


def test_bad_row_staleness_settings_are_refused():
    from shardgnn.store.cache.config import CacheConfig
    from shardgnn.train.config import RunConfig

    rows, workers = EmbeddingConfig(dim=8, staleness=2), RunConfig(workers=2)
    with pytest.raises(ConfigError, match="--embedding-staleness -1: must be >= 0"):
        EmbeddingConfig(dim=8, staleness=-1)
    with pytest.raises(ConfigError, match="--embedding-staleness 2 bounds .* add --embedding-dim"):
        TrainConfig(embedding=EmbeddingConfig(staleness=2), run=workers)
    for policy in ("none", "belady"):
        with pytest.raises(ConfigError, match=f"which is {policy}: give degree, presample"):
            TrainConfig(embedding=rows, run=workers, cache=CacheConfig(policy=policy))
    with pytest.raises(ConfigError, match="--embedding-staleness .* one process"):
        TrainConfig(embedding=rows, cache=CacheConfig(policy="lru"))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cached_rows_on_workers(featureless, tmp_path):
    """A featureless graph on 2 workers (link prediction), peers' rows cached: with staleness 0
    the run equals the uncached run bit for bit; with staleness 3 the cache serves rows at most 3
    steps old, moves fewer row bytes, and the model still learns."""
    from shardgnn.graph.io import save_graph

    save_graph(featureless, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    runs = {}
    for name, extra in (
        ("none", []),
        ("s0", ["--cache-policy", "lru", "--embedding-staleness", "0"]),
        ("s3", ["--cache-policy", "degree", "--cache-size", "40%", "--embedding-staleness", "3"]),
    ):
        ckpt = tmp_path / f"ckpt-{name}"
        argv = _workers_argv(spec, tmp_path / f"{name}.json", "--epochs", "3", "--task", "link")
        argv += ["--out-dim", "16", "--eval-negatives", "20"]
        assert main([*argv, *extra, "--checkpoint-dir", str(ckpt)]) == 0
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
        runs[name]["weights"] = final_weights(ckpt)
    assert [e["loss"] for e in runs["none"]["epochs"]] == [e["loss"] for e in runs["s0"]["epochs"]]
    assert_same_weights(runs["none"]["weights"], runs["s0"]["weights"])
    assert runs["s0"]["cache"]["rows"]["hit_rate"] == 0  # nothing may be served at age 0
    stale = runs["s3"]["cache"]["rows"]
    assert stale["hit_rate"] > 0.2 and stale["max_served_age"] <= 3 and stale["staleness"] == 3
    embed = {name: run["comm"]["embed"]["bytes_recv"] for name, run in runs.items()}
    assert embed["s3"] < embed["none"] == embed["s0"]
    assert runs["s3"]["test_acc"] > 0.6  # test AUC: still learns


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_cached_rows_resume_bit_for_bit(featureless, tmp_path, policy):
    """Issue 33: stale rows are served from the cache, so what it holds shapes the run; a
    checkpoint carries it (ids, rows, fetch steps, clock, the policy's state), and a run resumed
    after epoch 2 ends with the weights of the uninterrupted run (a cold cache would fetch fresh
    rows where the uninterrupted run served stale ones)."""
    from shardgnn.graph.io import save_graph

    save_graph(featureless, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    cached = ["--cache-policy", policy, "--cache-size", "30%", "--embedding-staleness", "2"]

    def run(name, epochs, *extra):
        argv = _workers_argv(spec, tmp_path / f"{name}.json", "--epochs", str(epochs))
        argv += ["--task", "link", "--out-dim", "16", "--eval-negatives", "20", *cached]
        assert main([*argv, "--checkpoint-dir", str(tmp_path / name), *extra]) == 0
        return json.loads((tmp_path / f"{name}.json").read_text())

    straight = run("straight", 3)
    assert straight["cache"]["rows"]["hit_rate"] > 0.1
    run("resumed", 2)
    resumed = run("resumed", 3, "--resume")
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in straight["epochs"]]
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed"))


def _mapped_scratch_files() -> int:
    with open("/proc/self/maps") as fh:
        return sum("shardgnn-rows-" in line for line in fh)


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_disk_rows_equal_memory_rows_and_leave_no_file(optimizer, tmp_path):
    """--embedding-storage disk: the same rows, bit for bit, in memory-mapped files that are
    unlinked at once; the best-epoch copy is mapped too."""
    from shardgnn.store.embedding import snapshot_state

    tables = {
        storage: EmbeddingTable(
            500,
            EmbeddingConfig(
                dim=6, optimizer=optimizer, storage=storage, directory=str(tmp_path), lr=0.05
            ),
            seed=3,
        )
        for storage in ("memory", "disk")
    }
    before = _mapped_scratch_files()
    for step in range(5):
        rng = np.random.default_rng(step)
        ids = torch.from_numpy(rng.integers(0, 500, 80))
        grad = torch.from_numpy(rng.standard_normal((80, 6)).astype(np.float32))
        for table in tables.values():
            table.apply_gradients(ids, grad)
    memory, disk = (dict(t.state_dict()) for t in tables.values())
    assert memory.keys() == disk.keys()
    for key in memory:
        assert torch.equal(memory[key], disk[key]), key
    assert list(tmp_path.iterdir()) == []  # unlinked as soon as mapped
    assert before >= (3 if optimizer == "adam" else 2)  # weight + state are mappings
    best = snapshot_state(tables["disk"])
    assert _mapped_scratch_files() > before  # the copy went to mapped files, not memory
    assert all(torch.equal(best[k], disk[k]) for k in disk)
    tables["disk"].apply_gradients(torch.tensor([0]), torch.ones(1, 6))
    assert not torch.equal(best["weight"], tables["disk"].weight)  # a copy, not a view
    with pytest.raises(ConfigError, match="free in .* give --embedding-dir on a larger disk"):
        check_table_fits(1 << 40, EmbeddingConfig(dim=64, storage="disk"))
    missing = tmp_path / "missing" / "x"  # not made: no folder to hold the table
    with pytest.raises(ConfigError, match=f"--embedding-dir {missing}: cannot be used"):
        check_table_fits(10, EmbeddingConfig(dim=4, storage="disk", directory=str(missing)))


def test_disk_rows_train_and_resume_as_memory_rows(featureless, tmp_path):
    """A featureless graph trained with disk-backed rows: the same run as with rows in memory
    (resume: test_embedding_rows_and_state_resume_bit_exact)."""
    disk = EmbeddingConfig(dim=16, lr=0.1, storage="disk", directory=str(tmp_path))
    base = link_config("minibatch", "adagrad", 2)
    one = run_training(base, featureless)
    two = run_training(dataclasses.replace(base, embedding=disk), featureless)
    assert [e["loss"] for e in one["epochs"]] == [e["loss"] for e in two["epochs"]]
    assert one["link"]["test"] == two["link"]["test"]
