"""Node labels beyond classes (issue 31): multi-label (per-label ROC-AUC, as ogbn-proteins) and
regression (R²), from the graph format through partitions, training in one process and on
workers (mini-batch and full-graph), resume, inference and conversion."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph, label_tasks, labels_of
from shardgnn.graph.io import load_graph, save_graph
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.models import ModelConfig
from shardgnn.nn.targets import LocalReducer, node_target, roc_auc, target_of_labels
from shardgnn.partition.format import read_partitions, verify_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import CheckpointConfig, OptimConfig, RunConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import assert_same_weights, final_weights
from distributed_helpers import run_workers


def _graph(labels: str, nodes: int = 1200, columns: int = 0) -> Graph:
    return generate(
        SyntheticConfig(
            nodes=nodes,
            degree=8,
            classes=4,
            features=16,
            seed=5,
            train=0.3,
            val=0.2,
            labels=labels,
            label_columns=columns,
        )
    )


@pytest.fixture(scope="module")
def multilabel_graph():
    return _graph("multilabel", columns=24)


@pytest.fixture(scope="module")
def regression_graph():
    return _graph("regression", columns=3)


@pytest.fixture(scope="module")
def multitask_graph():
    return _graph("multitask", columns=6)


# ------------------------------------------------------------------------------- metrics and losses
def test_roc_auc_counts_every_positive_negative_pair_ties_half():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 30).astype(float)
    pairs = [(p > n) + 0.5 * (p == n) for p, n in itertools.product(pos, neg)]
    assert roc_auc(pos, neg) == pytest.approx(np.mean(pairs), abs=1e-12)
    assert np.isnan(roc_auc(pos, []))


def test_multilabel_loss_metric_and_unknown_entries():
    torch.manual_seed(0)
    target = node_target("multilabel", 5)
    out = torch.randn(50, 5)
    y = (torch.rand(50, 5) < 0.4).float()
    y[3, 1] = y[7, :2] = float("nan")
    known = ~torch.isnan(y)
    # each node's loss: the mean over its known labels
    rows = [F.binary_cross_entropy_with_logits(out[i][known[i]], y[i][known[i]]) for i in range(50)]
    assert target.loss_sum(out, y).item() == pytest.approx(float(sum(rows)), rel=1e-6)
    # the metric: the mean over labels of each label's ROC-AUC over its known entries
    evaluation = target.evaluation()
    for chunk in (slice(0, 17), slice(17, 50)):  # batches add up to the whole split
        evaluation.add(out[chunk], y[chunk])
    metric, details = evaluation.result(LocalReducer())
    per_label = []
    for j in range(5):
        k = known[:, j]
        scores, labels = out[k, j].numpy(), y[k, j].numpy()
        per_label.append(roc_auc(scores[labels == 1], scores[labels == 0]))
    assert details["rocauc_per_label"] == pytest.approx(per_label)
    assert metric == pytest.approx(np.mean(per_label))
    predicted = target.predict(out)
    assert torch.allclose(predicted, torch.sigmoid(out))


def test_regression_r2_over_batches_equals_the_whole_split():
    torch.manual_seed(1)
    target = node_target("regression", 2)
    y = torch.randn(60, 2)
    out = y + 0.3 * torch.randn(60, 2)
    y[5, 0] = float("nan")
    evaluation = target.evaluation()
    for start in range(0, 60, 25):
        evaluation.add(out[start : start + 25], y[start : start + 25])
    metric, details = evaluation.result(LocalReducer())
    r2 = []
    for j in range(2):
        k = ~torch.isnan(y[:, j])
        yj, oj = y[k, j].double().numpy(), out[k, j].double().numpy()
        r2.append(1 - ((oj - yj) ** 2).sum() / ((yj - yj.mean()) ** 2).sum())
    assert details["r2_per_target"] == pytest.approx(r2, abs=1e-9)
    assert metric == pytest.approx(np.mean(r2), abs=1e-9)
    # the training score is R² against the training targets' variance, once fitted
    target.fit(target.fit_statistics(y))
    score = target.score_sum(out, y) / 60
    assert 0.5 < score < 1.0


@pytest.mark.parametrize("kind", ["regression", "multilabel"])
def test_a_row_of_unknowns_adds_no_loss_and_does_not_count(kind):
    """The batch loss is the mean over the rows with a known entry: rows with none (the fake
    edges of tracks:labels=regression) neither add loss nor dilute the mean."""
    torch.manual_seed(2)
    target = node_target(kind, 2)
    out = torch.randn(10, 2)
    y = torch.rand(10, 2) if kind == "multilabel" else torch.randn(10, 2)
    y[1, 0] = float("nan")
    real = target.loss_mean(out[:6], y[:6])
    y_fakes = torch.cat([y[:6], torch.full((4, 2), float("nan"))])
    with_fakes = target.loss_mean(torch.cat([out[:6], torch.randn(4, 2)]), y_fakes)
    assert with_fakes.item() == pytest.approx(real.item(), rel=1e-6)
    assert real.item() == pytest.approx(target.loss_sum(out[:6], y[:6]).item() / 6, rel=1e-6)
    assert target.rows_scored(y_fakes) == 6


# ------------------------------------------------------------------------ graphs and partitions
def test_label_tables_are_validated_with_one_clear_line():
    g = _graph("class", nodes=50)
    table = np.zeros((50, 3), np.float32)
    ok = dataclasses.replace(g, y=table, num_classes=0, label_kind="multilabel")
    ok.validate()
    bad = dataclasses.replace(ok, y=table + 0.5)
    with pytest.raises(DatasetError, match="neither 0 nor 1"):
        bad.validate()
    with pytest.raises(DatasetError, match="not float32"):
        dataclasses.replace(ok, y=table[:, 0]).validate()
    with pytest.raises(DatasetError, match="label_kind"):
        dataclasses.replace(ok, label_kind="ordinal").validate()
    with pytest.raises(DatasetError, match="infinite"):
        inf = table.copy()
        inf[0, 0] = np.inf
        dataclasses.replace(ok, y=inf, label_kind="regression").validate()


def test_pyg_and_ogb_label_arrays_map_to_their_kind():
    assert labels_of(np.array([0, 2, 1]), 3)["label_kind"] == "class"
    assert labels_of(np.array([[0, 1], [1, 1], [0, 0]]), 3)["label_kind"] == "multilabel"
    reg = labels_of(np.array([0.5, 1.5, 2.0]), 3)
    assert reg["label_kind"] == "regression" and reg["y"].shape == (3, 1)


def test_synthetic_label_tables_leave_the_graph_as_with_classes():
    classes, table = _graph("class"), _graph("multilabel", columns=24)
    assert np.array_equal(classes.indices, table.indices)
    assert np.array_equal(classes.x, table.x)
    assert table.y.shape == (1200, 24) and table.y.dtype == np.float32
    assert set(np.unique(table.y)) <= {0.0, 1.0}
    # a class-labelled spec is spelled as before the option existed
    assert "labels" not in classes.name and "labels=multilabel" in table.name


def test_save_partition_verify_and_reassemble_keep_the_label_table(tmp_path, regression_graph):
    g = dataclasses.replace(regression_graph, y=regression_graph.y.copy())
    g.y[4, 1] = np.nan
    loaded = load_graph(save_graph(g, tmp_path / "g"))
    assert loaded.label_kind == "regression"
    np.testing.assert_array_equal(loaded.y, g.y)
    result = partition_graph(g, PartitionConfig(num_parts=2, method="random", seed=0))
    write_partitions(g, result.assignment, tmp_path / "parts", method="random")
    verify_partitions(tmp_path / "parts")
    pset = read_partitions(tmp_path / "parts")
    assert pset.meta["labels"] == {
        "num_classes": 0,
        "dtype": "float32",
        "kind": "regression",
        "width": 3,
    }
    back = pset.reassemble()
    assert back.label_kind == "regression"
    np.testing.assert_array_equal(back.y, g.y[np.asarray(pset.orig_ids)])


def test_a_split_of_nodes_without_any_known_label_is_refused(multilabel_graph):
    g = dataclasses.replace(multilabel_graph, y=multilabel_graph.y.copy())
    g.y[g.val_idx[0]] = np.nan
    with pytest.raises(ConfigError, match="val split holds nodes none of whose labels"):
        run_training(_config(epochs=1), g)


# ------------------------------------------------------------------------------------- training
def _config(epochs=6, mode="minibatch", path=None, checkpoint=None, resume=False, **kw):
    return TrainConfig(
        mode=mode,
        model=ModelConfig(model="sage", hidden=32, num_layers=2, dropout=0.2),
        sampler=SamplerConfig(fanouts=(8, 8)),
        optim=OptimConfig(epochs=epochs, lr=0.01),
        batch_size=128,
        seed=4,
        progress=False,
        threads=1,
        run=RunConfig() if path is None else RunConfig(partitions=path),
        checkpoint=CheckpointConfig(dir=checkpoint, every=1, resume=resume)
        if checkpoint
        else CheckpointConfig(),
        **kw,
    )


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_one_process_learns_multilabel_and_regression_labels(
    multilabel_graph, regression_graph, mode
):
    epochs = 6 if mode == "minibatch" else 40
    ml = run_training(_config(epochs, mode), multilabel_graph)
    assert ml["metric"] == "rocauc" and ml["label_kind"] == "multilabel"
    per_label = ml["metric_details"]["test"]["rocauc_per_label"]
    assert len(per_label) == 24
    assert ml["test_acc"] > 0.6  # chance is 0.5; communities decide each label's probability
    reg = run_training(_config(epochs, mode), regression_graph)
    assert reg["metric"] == "r2" and len(reg["metric_details"]["test"]["r2_per_target"]) == 3
    assert reg["test_acc"] > 0.2  # predicting the mean scores 0
    assert reg["metric_details"]["test"]["rmse"] > 0


def test_multilabel_training_resumes_bit_exact(tmp_path, multilabel_graph):
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    run_training(_config(3, checkpoint=straight), multilabel_graph)
    run_training(_config(2, checkpoint=interrupted), multilabel_graph)
    run_training(_config(3, checkpoint=interrupted, resume=True), multilabel_graph)
    assert_same_weights(final_weights(straight), final_weights(interrupted))


def _parts(tmp_path, graph, parts=2):
    path = tmp_path / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=parts, method="metis", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method, settings=result.settings)
    return str(path)


def _train_dist(ctx, config):
    from shardgnn.train.worker import train_with_context

    return train_with_context(config, ctx)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("labels", ["regression", "multitask"])
def test_distributed_full_graph_regression_equals_one_process(
    tmp_path, regression_graph, multitask_graph, labels
):
    graph = regression_graph if labels == "regression" else multitask_graph
    config = _config(8, "full", path=_parts(tmp_path, graph))
    ref = run_training(dataclasses.replace(config, run=RunConfig()), graph)
    got = run_workers(_train_dist, 2, config)[0]
    for r, g in zip(ref["epochs"], got["epochs"], strict=True):
        assert abs(r["loss"] - g["loss"]) <= 1e-5
        assert abs(r["train_acc"] - g["train_acc"]) <= 1e-5
        assert abs(r["val_acc"] - g["val_acc"]) <= 1e-5
    assert abs(ref["test_acc"] - got["test_acc"]) <= 1e-5
    if labels == "regression":
        assert got["metric_details"]["test"]["r2_per_target"] == pytest.approx(
            ref["metric_details"]["test"]["r2_per_target"], abs=1e-5
        )


@pytest.mark.slow
@pytest.mark.multiprocess
def test_distributed_minibatch_multilabel_matches_one_process_and_infers(
    tmp_path, multilabel_graph
):
    from shardgnn.cli import main

    path = _parts(tmp_path, multilabel_graph)
    checkpoint = str(tmp_path / "ckpt")
    config = _config(6, path=path, checkpoint=checkpoint)
    ref = run_training(_config(6), multilabel_graph)
    got = run_workers(_train_dist, 2, config)[0]
    assert len(got["metric_details"]["test"]["rocauc_per_label"]) == 24
    assert abs(got["test_acc"] - ref["test_acc"]) < 0.03  # same recipe, other batches
    out = tmp_path / "out"
    assert main(["infer", "--checkpoint", checkpoint, "--partitions", path, "--out", str(out)]) == 0
    summary = json.loads((out / "inference.json").read_text())
    predictions = np.load(out / "predictions.npy")
    assert predictions.shape == (1200, 24) and predictions.dtype == np.float32
    assert 0.0 <= predictions.min() and predictions.max() <= 1.0
    assert summary["metric"]["name"] == "rocauc" and summary["metric"]["test"] > 0.6
    assert summary["label_kind"] == "multilabel"
    header = (out / "predictions.csv").read_text().splitlines()[0]
    assert header.startswith("node_id,probability_0,probability_1")


# ---------------------------------------------------------------------------------- several tasks
def test_multitask_specs_are_parsed_and_refused_with_the_reason():
    tasks = label_tasks("multitask:topic=class/7,tags=multilabel/20*0.5,views=regression")
    assert [(t.name, t.kind, t.width, t.weight, t.columns) for t in tasks] == [
        ("topic", "class", 7, 1.0, 1),
        ("tags", "multilabel", 20, 0.5, 20),
        ("views", "regression", 1, 1.0, 1),
    ]
    assert label_tasks("regression") is None
    for bad, reason in [
        ("multitask:topic=class", "names its width"),
        ("multitask:topic=ordinal/3", "KIND one of"),
        ("multitask:a=regression,a=regression", "same name"),
        ("multitask:a=regression*0", "weight > 0"),
    ]:
        with pytest.raises(ValueError, match=reason):
            label_tasks(bad)


def test_multitask_loss_is_the_weighted_sum_of_the_tasks_losses():
    torch.manual_seed(2)
    kind = "multitask:topic=class/3,tags=multilabel/4*0.5,views=regression/2"
    target = target_of_labels(kind, None, 0)
    assert target.out_dim == 3 + 4 + 2
    out = torch.randn(30, 9)
    y = torch.cat(
        [
            torch.randint(0, 3, (30, 1)).float(),
            (torch.rand(30, 4) < 0.5).float(),
            torch.randn(30, 2),
        ],
        dim=1,
    )
    y[0, 0] = float("nan")  # node 0's class is unknown: the class loss leaves it out
    known = ~torch.isnan(y[:, 0])
    expected = (
        F.cross_entropy(out[known, :3], y[known, 0].long(), reduction="sum")
        + 0.5 * node_target("multilabel", 4).loss_sum(out[:, 3:7], y[:, 1:5])
        + node_target("regression", 2).loss_sum(out[:, 7:], y[:, 5:])
    )
    assert target.loss_sum(out, y).item() == pytest.approx(expected.item(), rel=1e-6)
    evaluation = target.evaluation()
    evaluation.add(out[:12], y[:12])
    evaluation.add(out[12:], y[12:])
    metric, details = evaluation.result(LocalReducer())
    values = [details["tasks"][name]["value"] for name in ("topic", "tags", "views")]
    assert metric == pytest.approx(np.dot([1, 0.5, 1], values) / 2.5)
    predicted = target.predict(out)  # the label columns' layout: class id, probabilities, values
    assert predicted.shape == (30, 1 + 4 + 2)
    assert torch.equal(predicted[:, 0], out[:, :3].argmax(1).float())


def test_multitask_graph_trains_partitions_and_converts(tmp_path, multitask_graph):
    g = multitask_graph
    assert g.y.shape == (1200, 1 + 6 + 1) and g.label_kind.startswith("multitask:")
    result = run_training(_config(4), g)
    assert set(result["metric_details"]["test"]["tasks"]) == {"community", "tags", "score"}
    assert result["metric"] == "tasks"
    loaded = load_graph(save_graph(g, tmp_path / "g"))
    assert loaded.label_kind == g.label_kind
    path = _parts(tmp_path, g)
    verify_partitions(path)
    assert read_partitions(path).meta["labels"]["kind"] == g.label_kind
    bad = g.y.copy()
    bad[3, 0] = 9.0  # not a class of community=class/4
    with pytest.raises(DatasetError, match="class 9.0 is not an id in"):
        dataclasses.replace(g, y=bad).validate()
    # the same table from files
    from shardgnn.cli import main

    src, dst = g.edge_index()
    np.savetxt(tmp_path / "edges.txt", np.stack([src, dst], 1), fmt="%d")
    np.save(tmp_path / "x.npy", g.x)
    np.save(tmp_path / "y.npy", g.y)
    argv = ["convert", "--edges", str(tmp_path / "edges.txt"), "--features"]
    argv += [str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"), "--out"]
    argv += [str(tmp_path / "c"), "--label-kind", g.label_kind]
    assert main(argv) == 0
    assert load_graph(tmp_path / "c").label_kind == g.label_kind
    assert main([*argv[:-1], "multitask:a=class"]) == 2
