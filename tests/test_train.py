"""Single-process training runs and the command line."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from shardgnn.cli import main
from shardgnn.errors import ConfigError
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.single import run_training


@pytest.fixture(scope="module")
def learnable_graph():
    return generate(SyntheticConfig(nodes=6000, degree=12, classes=4, features=32, seed=3))


def test_minibatch_sage_learns_quickly(learnable_graph):
    start = time.perf_counter()
    results = run_training(
        TrainConfig(
            model=ModelConfig(model="sage", hidden=64, num_layers=2),
            sampler=SamplerConfig(fanouts=(10, 10)),
            optim=OptimConfig(epochs=6, lr=0.01),
            batch_size=256,
            progress=False,
        ),
        learnable_graph,
    )
    assert time.perf_counter() - start < 30
    # An MLP on these features reaches ~40%; neighbourhood averaging must do far better.
    assert results["test_acc"] > 0.83, results["test_acc"]  # 0.85 ± 0.005 over seeds 0-3
    assert len(results["epochs"]) == 6 and results["sampled_edges_per_s"] > 0
    assert set(results["epochs"][1]["stages"]) >= {"sample", "fetch", "compute", "eval"}


@pytest.mark.parametrize("model", ["gcn", "gat", "sage"])
def test_full_graph_training_learns(learnable_graph, model):
    results = run_training(
        TrainConfig(
            mode="full",
            model=ModelConfig(model=model, hidden=16, num_layers=2, heads=2),
            sampler=SamplerConfig(fanouts=(-1, -1)),
            optim=OptimConfig(epochs=30, lr=0.02),
            progress=False,
        ),
        learnable_graph,
    )
    assert results["test_acc"] > 0.8, (model, results["test_acc"])
    best = max(e["val_acc"] for e in results["epochs"])
    assert results["val_acc"] == pytest.approx(best)


def test_training_is_reproducible(learnable_graph):
    config = TrainConfig(
        model=ModelConfig(hidden=16, num_layers=2),
        sampler=SamplerConfig(fanouts=(5, 5)),
        optim=OptimConfig(epochs=2),
        batch_size=512,
        progress=False,
        seed=4,
    )
    a, b = run_training(config, learnable_graph), run_training(config, learnable_graph)
    assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]]
    # the results name the weights training ended with: equal bit for bit, equal digests
    assert len(a["weights_sha256"]) == 64 and a["weights_sha256"] == b["weights_sha256"]
    (peak,) = a["peak_memory_mb"]["rss"]  # this process's largest resident set so far
    assert 100 < peak < 24_000 and "gpu" not in a["peak_memory_mb"]
    other = run_training(dataclasses.replace(config, seed=5), learnable_graph)
    assert other["weights_sha256"] != a["weights_sha256"]


def test_config_errors():
    with pytest.raises(ConfigError, match="fanouts"):
        TrainConfig(model=ModelConfig(num_layers=2), sampler=SamplerConfig(fanouts=(5, 5, 5)))
    with pytest.raises(ConfigError, match="mode"):
        TrainConfig(mode="fast")
    with pytest.raises(ConfigError, match="--model mlp: choose one of sage, gcn, gat"):
        ModelConfig(model="mlp")


def test_unlabelled_dataset_is_refused(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n")
    with pytest.raises(ConfigError, match="no node features"):
        run_training(
            TrainConfig(
                dataset=f"file:{edges}",
                mode="full",
                model=ModelConfig(num_layers=2),
                sampler=SamplerConfig(fanouts=(-1, -1)),
                progress=False,
            )
        )


def test_cli_train_info_plot(tmp_path, capsys):
    results = tmp_path / "run.json"
    spec = "synthetic:nodes=2000,degree=8,classes=3,features=8"
    assert (
        main(
            [
                "train",
                spec,
                "--fanouts",
                "5,5",
                "--hidden",
                "16",
                "--epochs",
                "2",
                "--quiet",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "test accuracy" in out and "sampled edges / s" in out
    data = json.loads(results.read_text())
    assert {"config", "epochs", "val_acc", "test_acc", "sampled_edges_per_s"} <= set(data)
    assert {"epoch", "loss", "train_acc", "val_acc", "time_s"} <= set(data["epochs"][0])
    assert data["config"]["sampler"]["fanouts"] == [5, 5]

    assert main(["info", spec, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_nodes"] == 2000 and info["num_classes"] == 3 and 0 < info["edge_homophily"] < 1

    assert main(["plot", str(results), "--out", str(tmp_path / "plots")]) == 0
    png = tmp_path / "plots" / "training_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_reports_user_errors_without_traceback(tmp_path, capsys):
    assert main(["train", "korra", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'korra'" in err and "Traceback" not in err
    assert (
        main(["train", "synthetic:nodes=500", "--fanouts", "5,5", "--layers", "3", "--quiet"]) == 2
    )
    assert "one count per layer" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["plot", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
