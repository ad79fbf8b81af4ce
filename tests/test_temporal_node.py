"""Dynamic node classification on timestamped events (issue 31): labelled event streams (the
synthetic stream's drifting communities, JODIE's ``state_label`` column), the temporal-node
recipe in one process and on workers, resume and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.datasets import dataset_traits, load_temporal_dataset
from shardgnn.graph.identity import events_sha256
from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal
from shardgnn.graph.temporal import load_temporal_events
from shardgnn.seeding import mix_seed
from shardgnn.train.config import TrainConfig
from shardgnn.train.recipes import default_task, traits_of
from shardgnn.train.setup import EVAL_STREAM
from shardgnn.train.temporal_eval import label_metrics
from test_temporal_models import temporal_config

STREAM = "synthetic-temporal:nodes=300,events=8000,classes=4,features=8"


def node_config(
    model: str = "tgn", dataset: str = STREAM, learnt_rows: bool = True, **over
) -> TrainConfig:
    """The temporal link tests' small config, on ``dataset``'s labels (``--task node``)."""
    # tgat has no memory: learnt rows give its nodes identity (one process only)
    rows = {"embedding": {"dim": 16}} if model == "tgat" and learnt_rows else {}
    settings = {"task": "node", "batch_size": 100, "optim": {"epochs": 2, "lr": 3e-3}}
    return temporal_config(model, dataset=dataset, **{**settings, **rows, **over})


def test_the_unlabelled_stream_is_unchanged_by_the_label_options():
    """classes=0 keeps the stream (events, features and name) the generator always made."""
    g = generate_temporal(TemporalStreamConfig(nodes=300, events=5000, features=2))
    assert g.labels is None and "classes" not in g.name
    assert events_sha256(g.src, g.dst, g.t) == (
        "877ab28a7df62c6b8de4aba102bfcf487c62a6f8f67eb3aef2a0fd57f1699fc7"
    )
    assert float(g.edge_feat.sum()) == pytest.approx(-100.19221496582031, rel=1e-6)


def test_synthetic_labels_drift_once_and_the_features_carry_the_communities():
    cfg = TemporalStreamConfig(nodes=500, events=30000, classes=3, features=12, drift=0.3, seed=2)
    g = generate_temporal(cfg)
    assert g.labels.shape == (g.num_events,) and set(np.unique(g.labels)) == {0, 1, 2}
    # a source's label changes at most once, and about a drift share of the active sources move
    order = np.lexsort((np.arange(g.num_events), g.src))
    src, labels = g.src[order], g.labels[order]
    same_src = src[1:] == src[:-1]
    changes = np.bincount(src[1:][same_src & (labels[1:] != labels[:-1])], minlength=cfg.nodes)
    assert changes.max() == 1
    active = np.bincount(g.src, minlength=cfg.nodes) >= 20
    assert 0.15 < changes[active].mean() < 0.35
    # recurring events go to the source's current community: the event features' class means
    # are apart by about the centroids' scale, beyond the unit noise's standard error
    means = np.stack([g.edge_feat[g.labels == c].mean(axis=0) for c in range(3)])
    gaps = [np.linalg.norm(means[i] - means[j]) for i in range(3) for j in range(i + 1, 3)]
    assert min(gaps) > 0.5
    assert dataset_traits("synthetic-temporal:classes=3,features=4").labelled
    assert not dataset_traits("synthetic-temporal").labelled
    with pytest.raises(DatasetError, match="features >= 1"):
        load_temporal_dataset("synthetic-temporal:classes=3")


def test_a_jodie_file_with_state_labels_loads_them(tmp_path):
    rows = "user_id,item_id,timestamp,state_label,f0,f1\n" + "\n".join(
        f"{i % 5},{5 + i % 3},{float(i)},{int(i % 7 == 0)},{i * 0.5},{-i}" for i in range(40)
    )
    path = tmp_path / "wiki.csv"
    path.write_text(rows + "\n")
    g = load_temporal_dataset(f"temporal:{path},labels=1")
    assert g.labels.tolist() == [int(i % 7 == 0) for i in range(40)]
    assert g.edge_feat.shape == (40, 2) and g.edge_feat[3].tolist() == [1.5, -3.0]
    assert g.summary()["classes"] == 2 and g.summary()["labelled_events"] == 40
    assert default_task(dataset_traits(f"temporal:{path},labels=1")) == "node"
    # JODIE's users and items each count from 0: bipartite=1 puts the items after the users
    jodie = tmp_path / "jodie.csv"
    jodie.write_text("".join(f"{i % 5},{i % 3},{float(i)},0\n" for i in range(40)))
    two = load_temporal_dataset(f"temporal:{jodie},labels=1,bipartite=1")
    assert two.num_nodes == 8 and two.dst.tolist() == [5 + i % 3 for i in range(40)]
    assert two.src.tolist() == [i % 5 for i in range(40)]
    assert default_task(dataset_traits(f"temporal:{path}")) == "link"
    (tmp_path / "bad.csv").write_text("1,2,3.0,0.5\n")
    with pytest.raises(DatasetError, match="line 1: label 0.5 is not a class id"):
        load_temporal_events(tmp_path / "bad.csv", labels=True)


def test_label_metrics():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 3.0]])
    m = label_metrics(logits, np.array([0, 1, 1, 1]))
    assert m["acc"] == 0.75 and m["events"] == 4
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert m["rocauc"] == 1.0  # every positive's margin above the negative's


@pytest.mark.parametrize("model", ["tgn", "jodie", "tgat"])
def test_every_stream_model_learns_the_drifting_communities(model):
    """Four communities (chance 0.25, the largest class about 0.3): every model reads its
    sources' classes from their recent events; evaluation leaves the model's state unchanged."""
    from shardgnn.train.single import run_training

    results = run_training(node_config(model, optim={"epochs": 3, "lr": 3e-3}))
    assert results["metric"] == "acc"
    test = results["event_labels"]["test"]
    assert test["acc"] > 0.75 and test["macro_f1"] > 0.7, test
    assert results["dataset"]["classes"] == 4 and results["dataset"]["labelled"]["test"] == 1200
    assert results["epochs"][-1]["loss"] < results["epochs"][0]["loss"]


def test_two_classes_select_on_roc_auc_and_labels_alone_train(tmp_path, capsys):
    from shardgnn.cli import main

    out = tmp_path / "results.json"
    code = main(
        [
            "train", "synthetic-temporal:nodes=200,events=5000,classes=2,features=8",
            "--model", "jodie", "--epochs", "2", "--batch-size", "100", "--memory-dim", "16",
            "--time-dim", "8", "--temporal-link-weight", "0", "--results", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text())
    assert results["task"] == "node" and results["metric"] == "rocauc"
    assert results["event_labels"]["test"]["rocauc"] > 0.8
    assert "ROC-AUC" in capsys.readouterr().out


def test_node_task_on_an_unlabelled_stream_and_misplaced_flags_are_refused(tmp_path, capsys):
    from shardgnn.cli import main
    from shardgnn.train.single import run_training

    unlabelled = "synthetic-temporal:nodes=60,events=600"
    with pytest.raises(ConfigError, match="carries no event labels") as refused:
        run_training(node_config(dataset=unlabelled))
    assert "\n" not in str(refused.value)
    # on workers: refused before any worker starts
    assert main(["partition", unlabelled, "--parts", "2", "--out", str(tmp_path / "p")]) == 0
    argv = ["train", unlabelled, "--partitions", str(tmp_path / "p"), "--workers", "2"]
    assert main([*argv, "--task", "node", "--model", "tgn"]) == 2
    assert "holds events without labels" in capsys.readouterr().err
    from shardgnn.cli import build_parser
    from shardgnn.cli.train import train_config

    argv = ["train", "synthetic-temporal", "--task", "link", "--temporal-link-weight", "0.5"]
    with pytest.raises(ConfigError, match="--temporal-link-weight"):
        train_config(build_parser().parse_args(argv))
    with pytest.raises(ConfigError, match="classifies event sources"):
        argv = ["train", STREAM, "--task", "node", "--model", "tgcn"]
        train_config(build_parser().parse_args(argv))


def test_node_training_resumes_exactly(tmp_path):
    """Stopped after an epoch and resumed: the weights and node memory of an uninterrupted
    run, bit for bit."""
    from shardgnn.train.single import run_training

    from conftest import assert_same_weights, final_weights

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    def train(epochs: int, where, resume: bool = False) -> None:
        checkpoint = {"dir": str(where), "resume": resume}
        run_training(node_config(optim={"epochs": epochs, "lr": 1e-3}, checkpoint=checkpoint))

    train(2, straight)
    train(1, resumed)
    train(2, resumed, resume=True)
    assert_same_weights(final_weights(straight), final_weights(resumed))


def _train_distributed(ctx, config_dict):
    from shardgnn.train.worker import train_with_context

    results = train_with_context(TrainConfig.from_dict(config_dict), ctx)
    return [e["loss"] for e in results["epochs"]], results["event_labels"]["test"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("model", ["tgn", "tgat"])
def test_distributed_node_training_equals_one_process(tmp_path, model):
    """Memory and sampling by owner, each batch's labelled events split among the ranks: the
    epochs' losses and the test metrics equal one process's (dropout 0, a small learning rate:
    rounding only; contiguous parts keep node ids)."""
    from shardgnn.partition.temporal import write_temporal_partitions
    from shardgnn.train.single import run_training

    from distributed_helpers import run_workers

    spec = "synthetic-temporal:nodes=120,events=3000,classes=3,features=6,seed=1"
    g = load_temporal_dataset(spec)
    assignment = np.arange(g.num_nodes) * 2 // g.num_nodes
    write_temporal_partitions(g, assignment, tmp_path / "parts", method="range")
    assert traits_of(spec, str(tmp_path / "parts")).labelled
    # workers give tgat no learnt rows: it reads the events' features and times
    config = node_config(model, spec, learnt_rows=False, optim={"epochs": 2, "lr": 1e-4})
    single = run_training(config, g)
    data = config.to_dict()
    data["run"]["partitions"] = str(tmp_path / "parts")
    losses, test = run_workers(_train_distributed, 2, data)[0]
    np.testing.assert_allclose(losses, [e["loss"] for e in single["epochs"]], rtol=2e-5)
    assert abs(test["acc"] - single["event_labels"]["test"]["acc"]) < 2e-3
    assert test["events"] == single["event_labels"]["test"]["events"]


def _replayed(config: TrainConfig, checkpoint, task_rows: int, at: float | None = None):
    """One process's replay of the stream with ``checkpoint``'s weights, from empty memory
    (what ``shardgnn infer`` computes on workers): scores ``[K, E]`` of the events replayed
    (all, or those at or before ``at``) and every node's embedding at the end (at ``at``)."""
    from shardgnn.train.inference.run import read_rank_state, resolve_checkpoint
    from shardgnn.train.inference.temporal import MEMORY_STATE, _pair_scores
    from shardgnn.train.recipes import select

    steps = select(config, "temporal").steps(config)
    weights = read_rank_state(resolve_checkpoint(checkpoint), 0)
    steps.model.load_state_dict(
        {k: v for k, v in weights.items() if not k.startswith(MEMORY_STATE)}, strict=False
    )
    steps.model.eval()
    steps.model.memory.reset()
    scorer = steps._label_scores if config.task == "node" else _pair_scores(steps)
    events = steps.events
    replayed = events.num_events if at is None else int(np.searchsorted(events.t, at, "right"))
    scores = steps._stream(0, replayed, scorer, task_rows)[1]
    last = float(events.t[-1]) if at is None else at
    nodes = np.arange(events.num_nodes)
    seed = mix_seed(config.seed, EVAL_STREAM, events.num_events)
    with torch.no_grad():
        z = steps._embed_nodes([nodes], np.nextafter(last, np.inf), np.full(nodes.size, last), seed)
    return scores, z[0][0].numpy()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("task,model", [("node", "tgn"), ("link", "jodie")])
def test_infer_replays_the_stream_on_workers_as_one_process_does(tmp_path, task, model):
    """`shardgnn infer` of a model trained on 2 workers: every event's logits (node) or score
    (link), and every node's embedding at the stream's end, equal one process's replay of the
    stream with the same weights; tables keyed by event with original node ids."""
    import csv

    from shardgnn.cli import main

    spec = "synthetic-temporal:nodes=150,events=3000,classes=3,features=6,seed=3"
    parts, ckpt, out = tmp_path / "parts", tmp_path / "ckpt", tmp_path / "out"
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    argv = [
        "train", spec, "--partitions", str(parts), "--workers", "2", "--task", task,
        "--model", model, "--epochs", "1", "--batch-size", "100", "--memory-dim", "16",
        "--time-dim", "8", "--checkpoint-dir", str(ckpt), "--quiet",
    ]  # fmt: skip
    if model == "tgn":
        argv += ["--out-dim", "16", "--temporal-neighbors", "5"]
    assert main(argv) == 0
    assert main(["infer", "--checkpoint", str(ckpt), "--partitions", str(parts),
                 "--out", str(out)]) == 0  # fmt: skip
    summary = json.loads((out / "inference.json").read_text())
    assert summary["num_events"] == 3000 and summary["workers"] == 2
    meta = json.loads(next(ckpt.glob("epoch-*/meta.json")).read_text())
    config = TrainConfig.from_dict({**meta["config"], "run": {}})
    expected, embeddings = _replayed(config, ckpt, 3 if task == "node" else 1)
    np.testing.assert_allclose(np.load(out / "embeddings.npy"), embeddings, atol=1e-4)
    g = load_temporal_dataset(spec)
    with (out / "predictions.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 3000
    assert (int(table[7]["src"]), int(table[7]["dst"])) == (g.src[7], g.dst[7])
    if task == "node":
        logits = np.load(out / "logits.npy")
        np.testing.assert_allclose(logits, expected.T, atol=1e-4)
        assert np.array_equal(np.load(out / "predictions.npy"), logits.argmax(axis=1))
        assert summary["metric"]["name"] == "acc" and summary["metric"]["test"] > 0.5
    else:
        np.testing.assert_allclose(np.load(out / "scores.npy"), expected[0], atol=1e-4)
        assert summary["metric"] is None
    # --at TIME: the events up to TIME replayed (here into the validation events), every node
    # embedded at TIME, which lies between two events
    at = float((g.t[1999] + g.t[2000]) / 2) if g.t[1999] < g.t[2000] else float(g.t[1999])
    replayed = int(np.searchsorted(g.t, at, "right"))
    early = tmp_path / "early"
    assert main(["infer", "--checkpoint", str(ckpt), "--partitions", str(parts),
                 "--out", str(early), "--at", str(at)]) == 0  # fmt: skip
    summary = json.loads((early / "inference.json").read_text())
    assert summary["num_events"] == replayed and summary["embedded_at"] == at
    expected, embeddings = _replayed(config, ckpt, 3 if task == "node" else 1, at)
    assert expected.shape[1] == replayed
    np.testing.assert_allclose(np.load(early / "embeddings.npy"), embeddings, atol=1e-4)
    name = "logits" if task == "node" else "scores"
    got = np.load(early / f"{name}.npy")
    np.testing.assert_allclose(got, expected.T if task == "node" else expected[0], atol=1e-4)
    with (early / "predictions.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == replayed
    if task == "node":
        assert summary["metric"]["test"] is None  # no test event replayed yet
