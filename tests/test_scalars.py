"""``--tensorboard DIR``: the scalars TensorBoard reads back, one point per epoch."""

from __future__ import annotations

import json

import pytest

from shardgnn.cli import main

SPEC = "synthetic:nodes=400,degree=5,classes=3,features=6"


def _scalars(directory) -> dict[str, list[tuple[int, float]]]:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(directory))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_every_epoch_and_the_test_metric_reach_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    board, results = tmp_path / "board", tmp_path / "r.json"
    argv = ["train", SPEC, "--epochs", "3", "--fanouts", "3,3", "--quiet"]
    assert main([*argv, "--tensorboard", str(board), "--results", str(results)]) == 0
    done = json.loads(results.read_text())
    scalars = _scalars(board)
    assert [step for step, _ in scalars["loss"]] == [1, 2, 3]
    losses = [e["loss"] for e in done["epochs"]]
    assert [v for _, v in scalars["loss"]] == pytest.approx(losses, rel=1e-6)
    assert [v for _, v in scalars["val/acc"]] == pytest.approx(
        [e["val_acc"] for e in done["epochs"]], rel=1e-6
    )
    assert {"train/acc", "time/epoch_s", "time/compute_s"} <= set(scalars)
    assert scalars["test/acc"] == [(done["best_epoch"], pytest.approx(done["test_acc"]))]


def test_link_prediction_names_its_metric(tmp_path):
    pytest.importorskip("tensorboard")
    board = tmp_path / "board"
    argv = ["train", SPEC, "--task", "link", "--epochs", "1", "--fanouts", "3,3", "--quiet"]
    assert main([*argv, "--tensorboard", str(board)]) == 0
    assert {"val/auc", "test/auc"} <= set(_scalars(board))


def test_without_the_package_it_is_refused_before_training(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name)
    )
    assert main(["train", SPEC, "--epochs", "1", "--tensorboard", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs the tensorboard package (pip install tensorboard)" in err and "\n" not in err
