"""Edge features on one large graph: stored in CSR order, kept aligned by every edge transform,
partitioned with their edges, fetched with each sampled block (locally, from other workers, through
a cache and a low-bit codec), read by GINE for node classification, and inferred."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.io import load_graph, save_graph
from shardgnn.graph.linksplit import LinkSplitSpec, split_edges
from shardgnn.loader.pipeline import MiniBatchLoader
from shardgnn.nn.config import ModelConfig
from shardgnn.partition.format import read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import assert_same_weights, final_weights

EDGED = "synthetic:nodes=6000,degree=12,edge_features=8,train=0.3"


def _rows_by_pair(graph: Graph) -> dict[tuple[int, int], tuple[float, ...]]:
    src, dst = graph.edge_index()
    return {
        (int(s), int(d)): tuple(np.round(graph.edge_attr[i], 6))
        for i, (s, d) in enumerate(zip(src, dst))
    }


def _random_graph(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, 30, 200), rng.integers(0, 30, 200)
    pairs = np.unique(np.stack([src, dst], 1), axis=0)  # one row per pair: features by pair
    attr = rng.standard_normal((pairs.shape[0], 3)).astype(np.float32)
    return Graph.from_edge_index(pairs[:, 0], pairs[:, 1], 30, edge_attr=attr)


def test_edge_rows_follow_their_edges_through_every_transform(tmp_path):
    g = _random_graph()
    assert g.edge_dim == 3 and g.edge_attr.shape == (g.num_edges, 3)
    before = _rows_by_pair(g)
    for changed in (g.coalesce(), g.remove_self_loops(), g.add_self_loops()):
        after = _rows_by_pair(changed)
        for pair, row in after.items():
            if pair[0] == pair[1] and changed.num_edges > g.remove_self_loops().num_edges:
                continue  # an added self-loop: zero features
            assert before[pair] == row
    loops = g.add_self_loops()
    src, dst = loops.edge_index()
    assert not loops.edge_attr[src == dst].any()
    both = g.symmetrize()  # a reverse edge takes its edge's row unless the pair existed already
    for (s, d), row in _rows_by_pair(both).items():
        assert row == before.get((s, d), before.get((d, s)))
    train, _ = split_edges(g, LinkSplitSpec(val=0.1, test=0.1, seed=0))
    for pair, row in _rows_by_pair(train).items():
        assert before[pair] == row
    back = load_graph(save_graph(g, tmp_path / "g"))
    np.testing.assert_array_equal(back.edge_attr, g.edge_attr)
    pyg = pytest.importorskip("torch_geometric")
    del pyg
    again = Graph.from_pyg(g.to_pyg())
    assert _rows_by_pair(again) == before


def test_a_wrong_edge_feature_count_is_one_clear_error():
    with pytest.raises(Exception, match=r"edge features must be \[3, D\]"):
        Graph.from_edge_index([0, 1, 2], [1, 2, 0], 3, edge_attr=np.zeros((2, 4)))


def test_partitions_carry_edge_rows_and_come_back_equal(tmp_path):
    g = load_dataset("synthetic:nodes=400,degree=6,edge_features=4")
    result = partition_graph(g, PartitionConfig(method="random", num_parts=3, seed=0))
    pset = write_partitions(g, result.assignment, tmp_path / "p", method=result.method)
    book = read_partitions(tmp_path / "p")
    orig = np.asarray(book.orig_ids)
    for p in range(3):
        part = book.load_part(p)
        assert part.edge_attr.shape == (part.num_edges, 4)
        for row in range(part.num_nodes):  # each in-edge's row, by (original src, original dst)
            v = int(orig[part.start + row])
            lo, hi = part.indptr[row], part.indptr[row + 1]
            mine = {
                int(orig[u]): tuple(r) for u, r in zip(part.indices[lo:hi], part.edge_attr[lo:hi])
            }
            theirs = {
                int(u): tuple(r)
                for u, r in zip(g.indices[g.indptr[v] : g.indptr[v + 1]],
                                g.edge_attr[g.indptr[v] : g.indptr[v + 1]])
            }  # fmt: skip
            assert mine == theirs
    whole = pset.reassemble()
    assert whole.edge_attr.shape == g.edge_attr.shape


def test_each_batch_carries_its_blocks_edge_rows():
    g = load_dataset(EDGED)
    sampler = NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(5, 5)))
    loader = MiniBatchLoader(
        g.train_idx, sampler, LocalFeatureStore(g.x), LocalFeatureStore(torch.from_numpy(g.y)),
        batch_size=128, shuffle=True, seed=0, edge_rows=LocalFeatureStore(g.edge_attr),
    )  # fmt: skip
    loader.set_epoch(0)
    batch = next(iter(loader))
    assert len(batch.edge_attr) == len(batch.sample.blocks) == 2
    for block, rows in zip(batch.sample.blocks, batch.edge_attr):
        eid = block.edge_ids_E.numpy()
        np.testing.assert_array_equal(rows.numpy(), g.edge_attr[eid])
        # the id is the edge's CSR position: its source is the block edge's source
        src = block.src_nodes_S.numpy()[block.indices_E.numpy()]
        np.testing.assert_array_equal(g.indices[eid], src)


def _config(model: str, epochs: int = 12, **kw) -> TrainConfig:
    return TrainConfig(
        dataset=kw.pop("dataset", EDGED), model=ModelConfig(model=model, hidden=64, dropout=0.0),
        sampler=SamplerConfig(fanouts=(10, 10)), optim=OptimConfig(epochs=epochs),
        batch_size=256, seed=0, progress=False, threads=1, **kw,
    )  # fmt: skip


def test_gine_learns_what_only_the_edges_carry():
    """synthetic with edge_features: the class signal is on the edges only, so GINE (reading
    them) learns the classes and GraphSAGE (node rows only) stays far below."""
    gine = run_training(_config("gine"))
    sage = run_training(_config("sage"))
    assert gine["test_acc"] >= 0.6, gine["test_acc"]  # seed 0: see BENCHMARKS
    assert gine["test_acc"] >= sage["test_acc"] + 0.2, (gine["test_acc"], sage["test_acc"])


def test_models_that_read_edge_features_are_refused_where_there_are_none(capsys):
    from shardgnn.cli import main

    with pytest.raises(ConfigError, match="reads edge features, and dataset"):
        run_training(_config("gine", dataset="synthetic:nodes=500", epochs=1))
    assert main(["train", "synthetic:nodes=500", "--model", "gine", "--mode", "full"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reads edge features, and dataset" in err[0]
    assert main(["train", "synthetic:nodes=500", "--model", "gine", "--task", "link"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reads edge features, and dataset" in err[0]
    # with workers: the dataset given, not only the folder it was partitioned into on the fly
    argv = ["train", "synthetic:nodes=500", "--model", "gine", "--workers", "2"]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reads edge features, and dataset 'synthetic:nodes=500" in err[0]


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_gine_link_prediction_reads_what_only_the_edges_carry(mode):
    """Link prediction on the graph whose edges alone carry the classes (and the classes the
    links: homophily): GINE's encoder reads the blocks' (or the whole training graph's) edge rows
    and ranks the held-out edges well above GraphSAGE's, which sees noise rows only."""
    spec = "synthetic:nodes=1500,degree=8,edge_features=8"
    auc = {}
    for model in ("sage", "gine"):
        config = dataclasses.replace(
            _config(model, epochs=8 if mode == "minibatch" else 40, dataset=spec),
            task="link", mode=mode, model=ModelConfig(model=model, hidden=32, dropout=0.0),
        )  # fmt: skip
        auc[model] = run_training(config)["link"]["test"]["auc"]
    assert auc["gine"] >= 0.65 and auc["gine"] >= auc["sage"] + 0.08, auc  # seed 0: 0.75/0.62


@pytest.mark.slow
@pytest.mark.multiprocess
def test_gine_link_prediction_on_workers_trains_as_one_process_and_infers(tmp_path):
    """Two workers (the other part's edge rows travel, 8-bit through a presample cache) rank the
    held-out edges as one process does; `shardgnn infer` of their checkpoint, on a partition of
    the whole graph, gives the encoder's embeddings over the whole graph with its edge rows."""
    from shardgnn.cli import main
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.train.link import build_link_model

    spec = "synthetic:nodes=3000,degree=8,edge_features=8"
    argv = ["train", spec, "--task", "link", "--model", "gine", "--hidden", "32", "--dropout"]
    argv += ["0", "--epochs", "8", "--fanouts", "10,10", "--batch-size", "256", "--quiet"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    ck = tmp_path / "ck"
    assert main([*argv, "--results", str(one)]) == 0
    workers = [*argv, "--workers", "2", "--host-sharing", "off", "--fetch-bits", "8"]
    workers += ["--cache-policy", "presample", "--cache-size", "20%"]
    assert main([*workers, "--results", str(two), "--checkpoint-dir", str(ck)]) == 0
    r_one, r_two = (json.loads(p.read_text()) for p in (one, two))
    auc_one, auc_two = r_one["link"]["test"]["auc"], r_two["link"]["test"]["auc"]
    assert auc_two >= 0.65 and abs(auc_two - auc_one) < 0.05, (auc_one, auc_two)
    assert r_two["epochs"][-1]["cache"]["edge_hit_rate"] > 0
    parts, out = tmp_path / "p", tmp_path / "out"
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    infer = ["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(out)]
    assert main(infer) == 0
    last = sorted(ck.glob("epoch-*"))[-1]
    config = TrainConfig.from_dict(json.loads((last / "meta.json").read_text())["config"])
    graph = load_dataset(spec)
    model = build_link_model(config, graph.num_features, edge_dim=graph.edge_dim)
    model.load_state_dict(torch.load(last / "rank-0.pt", weights_only=True)["best_state"])
    model.eval()
    whole = MessageGraph.from_csr(graph.indptr, graph.indices)
    whole.edge_attr_ED = torch.from_numpy(np.asarray(graph.edge_attr, dtype=np.float32))
    with torch.no_grad():
        expected = model.encoder([whole] * 2, torch.from_numpy(graph.x)).numpy()
    embeddings = np.load(out / "embeddings.npy", allow_pickle=False)
    np.testing.assert_allclose(embeddings, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_edge_rows_on_workers_train_as_one_process_and_infer(tmp_path):
    """Two workers (no same-host sharing: edge rows of the other part travel) train GINE to
    one process's accuracy, exact rows and through a presample cache with 8-bit exchange;
    ``shardgnn infer`` fetches the blocks' edge rows and reproduces the trained test accuracy."""
    from shardgnn.cli import main

    argv = ["train", EDGED, "--model", "gine", "--hidden", "64", "--dropout", "0", "--epochs", "30"]
    argv += ["--fanouts", "10,10", "--eval-fanouts", "-1,-1", "--batch-size", "256", "--quiet"]
    one, two, low = (tmp_path / f"{n}.json" for n in ("one", "two", "low"))
    ck = str(tmp_path / "ck")
    assert main([*argv, "--results", str(one)]) == 0
    assert main(["partition", EDGED, "--parts", "2", "--out", str(tmp_path / "p")]) == 0
    workers = [
        *argv,
        "--workers",
        "2",
        "--host-sharing",
        "off",
        "--partitions",
        str(tmp_path / "p"),
    ]
    assert main([*workers, "--results", str(two), "--checkpoint-dir", ck]) == 0
    assert main([*workers, "--results", str(low), "--fetch-bits", "8",
                 "--cache-policy", "presample", "--cache-size", "20%"]) == 0  # fmt: skip
    r_one, r_two, r_low = (json.loads(p.read_text()) for p in (one, two, low))
    assert r_two["test_acc"] >= 0.6 and r_low["test_acc"] >= 0.6
    for r in (r_two, r_low):
        assert abs(r["test_acc"] - r_one["test_acc"]) < 0.05, (r_one["test_acc"], r["test_acc"])
    assert r_low["epochs"][-1]["cache"]["hit_rate"] > 0
    out = tmp_path / "inf"
    assert (
        main(["infer", "--checkpoint", ck, "--partitions", str(tmp_path / "p"), "--out", str(out)])
        == 0
    )
    summary = json.loads((out / "inference.json").read_text())
    assert summary["accuracy"]["test"] == pytest.approx(r_two["test_acc"], abs=1e-6)


@pytest.mark.parametrize("task", ["node", "link"])
def test_gine_resumes_bit_exact(tmp_path, task):
    from shardgnn.train.config import CheckpointConfig

    def config(directory, epochs, resume=False):
        return _config(
            "gine", epochs=epochs, dataset="synthetic:nodes=1500,degree=8,edge_features=4",
            checkpoint=CheckpointConfig(dir=str(directory), every=1, resume=resume), task=task,
        )  # fmt: skip

    run_training(config(tmp_path / "straight", 3))
    run_training(config(tmp_path / "cut", 2))
    run_training(config(tmp_path / "cut", 3, resume=True))
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(tmp_path / "cut"))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("task", ["node", "link"])
def test_low_bit_edge_rows_through_a_cache_resume_bit_exact_on_workers(tmp_path, capfd, task):
    """8-bit edge and node rows through LRU caches (each hit serves the rounding of the fetch
    that admitted it, so checkpoints carry both caches): a run cut after epoch 2 and resumed
    ends with the uninterrupted run's weights, node classes and links; the epoch line reports
    the edge cache."""
    from shardgnn.cli import main

    spec = "synthetic:nodes=1500,degree=8,edge_features=4"
    parts = str(tmp_path / "p")
    assert main(["partition", spec, "--parts", "2", "--out", parts, "--task", task]) == 0
    argv = ["train", spec, "--task", task, "--model", "gine", "--hidden", "16", "--fanouts"]
    argv += ["5,5", "--workers"]
    argv += ["2", "--partitions", parts, "--host-sharing", "off", "--fetch-bits", "8"]
    argv += ["--cache-policy", "lru", "--cache-size", "30%", "--batch-size", "64"]
    straight, cut = str(tmp_path / "straight"), str(tmp_path / "cut")
    assert main([*argv, "--epochs", "3", "--checkpoint-dir", straight]) == 0
    assert "edge cache hit" in capfd.readouterr().out
    assert main([*argv, "--epochs", "2", "--checkpoint-dir", cut, "--quiet"]) == 0
    assert main([*argv, "--epochs", "3", "--checkpoint-dir", cut, "--resume", "--quiet"]) == 0
    assert_same_weights(final_weights(straight), final_weights(cut))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_error_feedback_on_edge_rows_resumes_bit_exact_on_workers(tmp_path):
    """4-bit node and edge rows with ``--error-feedback``: each table's residuals (what its
    rows' last sends lost) travel with the checkpoint, the edge rows' too, so a run cut after
    epoch 2 and resumed ends with the uninterrupted run's weights."""
    from shardgnn.cli import main

    spec = "synthetic:nodes=1500,degree=8,edge_features=4"
    parts = str(tmp_path / "p")
    assert main(["partition", spec, "--parts", "2", "--out", parts]) == 0
    argv = ["train", spec, "--model", "gine", "--hidden", "16", "--fanouts", "5,5"]
    argv += ["--workers", "2", "--partitions", parts, "--host-sharing", "off"]
    argv += ["--fetch-bits", "4", "--error-feedback", "--batch-size", "64", "--quiet"]
    straight, cut = str(tmp_path / "straight"), str(tmp_path / "cut")
    assert main([*argv, "--epochs", "3", "--checkpoint-dir", straight]) == 0
    assert main([*argv, "--epochs", "2", "--checkpoint-dir", cut]) == 0
    assert main([*argv, "--epochs", "3", "--checkpoint-dir", cut, "--resume"]) == 0
    assert_same_weights(final_weights(straight), final_weights(cut))


@pytest.mark.parametrize("task", ["node", "link"])
def test_an_edge_feature_model_exports_with_an_edge_attr_input(tmp_path, capsys, task):
    """GINE (a node classifier, or a link model's encoder) exports with a third input (the
    edges' feature rows, in edge_index order) to every format; each file, run on a random
    graph, equals the trained model (checked by export with onnxruntime, torch.export and
    TorchScript), and the ONNX file serves another graph size."""
    import onnxruntime

    from shardgnn.cli import main
    from shardgnn.train.config import CheckpointConfig
    from shardgnn.train.inference.export import example_inputs, serving_model, trained_outputs
    from shardgnn.train.inference.run import resolve_checkpoint

    ck = tmp_path / "ck"
    spec = "synthetic:nodes=800,degree=6,edge_features=4,features=8"
    config = _config("gine", epochs=1, dataset=spec, checkpoint=CheckpointConfig(dir=str(ck)))
    run_training(dataclasses.replace(config, task=task))
    for suffix in ("onnx", "pt2", "pt"):
        assert (
            main(["export", "--checkpoint", str(ck), "--out", str(tmp_path / f"m.{suffix}")]) == 0
        )
        assert "max |difference|" in capsys.readouterr().out
    serving, *_ = serving_model(resolve_checkpoint(str(ck)))
    x, edge_index, edge_attr = example_inputs(serving, 300, 8, seed=5)
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"))
    feed = {"x": x.numpy(), "edge_index": edge_index.numpy(), "edge_attr": edge_attr.numpy()}
    got = torch.from_numpy(session.run(None, feed)[0])
    torch.testing.assert_close(
        got, trained_outputs(serving, x, edge_index, edge_attr), atol=1e-4, rtol=1e-4
    )


def test_convert_reads_edge_feature_columns_and_npz_edge_attr(tmp_path, capsys):
    import pandas as pd

    from shardgnn.cli import main

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    a, b = rng.random(300), rng.random(300)
    pd.DataFrame({"src": src, "dst": dst, "a": a, "b": b}).to_csv(tmp_path / "e.csv", index=False)
    argv = ["convert", "--edges", str(tmp_path / "e.csv"), "--edge-feature-cols", "b,a"]
    assert main([*argv, "--out", str(tmp_path / "g")]) == 0
    g = load_graph(tmp_path / "g")
    rows = {(int(s), int(d)): (np.float32(y), np.float32(x)) for s, d, x, y in zip(src, dst, a, b)}
    got_src, got_dst = g.edge_index()
    for s, d, row in zip(got_src, got_dst, g.edge_attr):  # duplicates: any of the pair's rows
        assert rows[(int(s), int(d))] == tuple(row) or any(
            (int(s), int(d)) == (int(u), int(v)) and tuple(row) == (np.float32(y), np.float32(x))
            for u, v, x, y in zip(src, dst, a, b)
        )
    assert "edge_features" in capsys.readouterr().out
    assert main([*argv[:-2], "--edge-feature-cols", "zz", "--out", str(tmp_path / "h")]) != 0
    assert "no column 'zz' (named by --edge-feature-cols)" in capsys.readouterr().err
    np.savetxt(tmp_path / "plain.txt", np.stack([src, dst], 1), fmt="%d")
    plain = ["convert", "--edges", str(tmp_path / "plain.txt"), "--edge-feature-cols", "a"]
    assert main([*plain, "--out", str(tmp_path / "k")]) != 0
    assert "plain edge list" in capsys.readouterr().err
    attr = rng.random((300, 3)).astype(np.float32)
    np.savez(tmp_path / "g.npz", edge_index=np.stack([src, dst]), edge_attr=attr)
    assert main(["convert", "--npz", str(tmp_path / "g.npz"), "--out", str(tmp_path / "n")]) == 0
    n = load_graph(tmp_path / "n")
    order = np.lexsort((np.arange(300), dst))  # the CSR keeps each row's edges in file order
    np.testing.assert_array_equal(n.edge_attr, attr[order])
    np.savez(tmp_path / "bad.npz", edge_index=np.stack([src, dst]), edge_attr=attr[:7])
    assert main(["convert", "--npz", str(tmp_path / "bad.npz"), "--out", str(tmp_path / "b")]) != 0
    assert "edge_attr has shape [7, 3], not [300, D]" in capsys.readouterr().err


EDGE_USER_MODEL = """
import torch
from shardgnn.nn.conv import GATv2Conv


class EdgeAttention(torch.nn.Module):
    def __init__(self, in_dim, out_dim, config, edge_dim=None):
        super().__init__()
        assert edge_dim == 8, edge_dim  # the graph's edge features: their width, given
        dims = [in_dim] + [config.hidden] * (config.num_layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(
            GATv2Conv(a, b, heads=1, edge_dim=edge_dim) for a, b in zip(dims[:-1], dims[1:])
        )

    def forward(self, graphs, x):
        h = x
        for i, (conv, graph) in enumerate(zip(self.convs, graphs)):
            assert graph.edge_attr_ED.shape == (graph.num_edges, 8)
            h = conv(graph, h.relu() if i else h)
        return h
"""


def test_a_model_of_your_own_reads_the_blocks_edge_rows(tmp_path):
    """A user's module taking ``edge_dim`` is built with the edge features' width, and every
    block it receives holds its edges' rows: GATv2 with edge features learns what only the edges
    carry."""
    (tmp_path / "mine.py").write_text(EDGE_USER_MODEL)
    result = run_training(_config(f"{tmp_path / 'mine.py'}:EdgeAttention", epochs=8))
    assert result["test_acc"] >= 0.4, result["test_acc"]  # chance 0.125; see the GINE test


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("task", ["node", "link"])
def test_full_graph_gine_on_workers_equals_one_process(tmp_path, capsys, task):
    """Full-graph GINE: each worker's edge rows are its part's in-edges (no exchange), the
    source rows of remote neighbours come from their owners (the halo exchange attention layers
    use): 2 workers train epoch for epoch as one process (loss within 1e-5), node classes and
    links (GAE: the partitions hold the training graph and its edge rows); another SpMM plan is
    refused in one line."""
    from shardgnn.cli import main

    spec = "synthetic:nodes=2000,degree=8,edge_features=4,features=16"
    parts = str(tmp_path / "p")
    partition = ["partition", spec, "--parts", "2", "--out", parts, "--task", task, "--quiet"]
    assert main(partition) == 0
    argv = ["train", spec, "--model", "gine", "--mode", "full", "--epochs", "3", "--hidden", "32"]
    argv += ["--task", task, "--dropout", "0", "--quiet"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([*argv, "--results", str(one)]) == 0
    assert main([*argv, "--workers", "2", "--partitions", parts, "--results", str(two)]) == 0
    r_one, r_two = (json.loads(p.read_text()) for p in (one, two))
    assert r_two["spmm"] == "1d-sparse"
    for a, b in zip(r_one["epochs"], r_two["epochs"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    if task == "link":
        assert r_two["link"]["test"]["auc"] == pytest.approx(r_one["link"]["test"]["auc"], abs=1e-5)
    capsys.readouterr()
    dense = [*argv, "--workers", "2", "--partitions", parts, "--spmm", "1d"]
    assert main(dense) != 0
    assert "runs with --spmm 1d-sparse" in capsys.readouterr().err
