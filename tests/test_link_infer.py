"""``shardgnn infer`` for link-prediction models: the encoder's embeddings of every node in
original ids, and the scores of given pairs, from 2 workers, equal to the checkpoint's model run
on the whole graph in one process; bad pair files refused before any worker starts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardgnn.cli import main
from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import load_dataset
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.train.config import TrainConfig
from shardgnn.train.link import build_link_model
from shardgnn.train.settings import InferConfig


def _train_and_partition(tmp_path, spec: str, extra: list[str]):
    ckpt, parts = tmp_path / "ckpt", tmp_path / "parts"
    argv = ["train", spec, "--task", "link", "--model", "gcn", "--hidden", "8", "--out-dim", "6"]
    argv += ["--fanouts", "5,5", "--epochs", "2", "--quiet", "--checkpoint-dir", str(ckpt)]
    assert main([*argv, *extra]) == 0
    argv = ["partition", spec, "--parts", "2", "--method", "metis", "--out", str(parts)]
    assert main([*argv, "--quiet"]) == 0
    return ckpt, parts


def _expected(ckpt, spec: str):
    """The checkpoint's best model on the whole original graph, in one process."""
    checkpoint = sorted(ckpt.glob("epoch-*"))[-1]
    meta = json.loads((checkpoint / "meta.json").read_text())
    config = TrainConfig.from_dict(meta["config"])
    state = torch.load(checkpoint / "rank-0.pt", weights_only=True)["best_state"]
    graph = load_dataset(spec)
    parts = [] if graph.x is None else [torch.from_numpy(np.asarray(graph.x, np.float32))]
    if config.embedding.enabled:
        parts.append(state["embedding.weight"])
    model = build_link_model(config, graph.num_features)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("embedding.")})
    model.eval()
    with torch.no_grad():
        h = model.encoder(
            [MessageGraph.from_csr(graph.indptr, graph.indices)] * 2, torch.cat(parts, dim=1)
        )
    return model, h, graph.num_nodes


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("featureless", [True, False], ids=["embedding-rows", "features"])
def test_link_infer_writes_embeddings_and_pair_scores(tmp_path, featureless):
    if featureless:
        edges = tmp_path / "edges.txt"
        rng = np.random.default_rng(1)
        edges.write_text("".join(f"{u} {v}\n" for u, v in rng.integers(0, 200, (1500, 2))))
        spec, extra = f"file:{edges}", ["--embedding-dim", "5", "--embedding-optimizer", "adam"]
    else:
        spec, extra = "synthetic:nodes=400,degree=6,classes=3,features=7", ["--predictor", "mlp"]
    ckpt, parts = _train_and_partition(tmp_path, spec, extra)
    model, h, n = _expected(ckpt, spec)
    pairs = np.array([[0, 1], [5, 3], [n - 1, 0], [7, 7]])
    pair_file = tmp_path / ("pairs.txt" if featureless else "pairs.npy")
    if featureless:
        pair_file.write_text("# u v\n" + "".join(f"{u},{v}\n" for u, v in pairs))
    else:
        np.save(pair_file, pairs)
    out = tmp_path / "out"
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", str(parts), "--out", str(out)]
    assert main([*argv, "--pairs", str(pair_file), "--chunk-rows", "50"]) == 0
    embeddings = np.load(out / "embeddings.npy", allow_pickle=False)
    np.testing.assert_allclose(embeddings, h.numpy(), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        expected_scores = model.score(h[pairs[:, 0]], h[pairs[:, 1]]).numpy()
    scores = np.load(out / "scores.npy", allow_pickle=False)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5, rtol=1e-5)
    summary = json.loads((out / "inference.json").read_text())
    assert summary["task"] == "link" and summary["pairs_scored"] == 4
    assert not (out / "logits.npy").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_bad_pairs_are_refused_before_workers_start(tmp_path, capsys):
    spec = "synthetic:nodes=300,degree=5,classes=3,features=4"
    ckpt, parts = _train_and_partition(tmp_path, spec, [])
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", str(parts), "--out"]
    argv.append(str(tmp_path / "out"))
    bad = tmp_path / "bad.txt"
    for text, message in [
        ("1 2\n3\n", "pair 2 has 1 values"),
        ("1 2\n0 300\n", "pair 2 (0, 300) names a node outside [0, 300)"),
        ("a b\n", "cannot read pairs"),
    ]:
        bad.write_text(text)
        capsys.readouterr()
        assert main([*argv, "--pairs", str(bad)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and message in err, err
    assert not (tmp_path / "out" / "scores.npy").exists()
    node_ckpt = tmp_path / "node-ckpt"
    argv = ["train", spec, "--fanouts", "5,5", "--hidden", "8", "--epochs", "1", "--quiet"]
    assert main([*argv, "--checkpoint-dir", str(node_ckpt)]) == 0
    bad.write_text("1 2\n")
    capsys.readouterr()
    argv = ["infer", "--checkpoint", str(node_ckpt), "--partitions", str(parts), "--out"]
    assert main([*argv, str(tmp_path / "out"), "--pairs", str(bad)]) == 2
    assert "node-classification model" in capsys.readouterr().err
    # --at picks a time of an event stream: refused for a graph without one
    assert main([*argv, str(tmp_path / "out"), "--at", "5"]) == 2
    err = capsys.readouterr().err
    message = "--at 5: " + str(parts) + " holds a homogeneous graph; --at picks a time"
    assert message in err and err.count("\n") == 1, err
    # or a time not finite: the flag's parser refuses it (the config too, for the Python API)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, str(tmp_path / "out"), "--at", "nan"])
    assert exit_.value.code == 2
    assert "argument --at: 'nan' is not a finite number" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--at nan: must be a finite time"):
        InferConfig(checkpoint=str(node_ckpt), partitions=str(parts), out="o", at=float("nan"))
