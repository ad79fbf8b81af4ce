"""A model of the user's own (``--model package.module:Class`` or ``path/to/file.py:Class``):
built from the documented contract, trained by every homogeneous recipe, refused in one line
where it cannot run."""

from __future__ import annotations

import json
import textwrap

import pytest

from shardgnn.cli import main
from shardgnn.errors import ConfigError
from shardgnn.nn.config import ModelConfig, is_user_model
from shardgnn.nn.user import UserModel
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.single import run_training

SPEC = "synthetic:nodes=600,degree=6,classes=3,features=8"

# A stack of PyG layers, as a user would write it against the contract (README, Your own model).
PYG_STACK = textwrap.dedent(
    """
    from torch import nn
    from torch_geometric.nn import SAGEConv


    class StackedSAGE(nn.Module):
        def __init__(self, in_dim, out_dim, config):
            super().__init__()
            dims = [in_dim] + [config.hidden] * (config.num_layers - 1) + [out_dim]
            self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
            self.dropout = config.dropout

        def forward(self, graphs, x):
            h = x
            for i, (conv, g) in enumerate(zip(self.convs, graphs)):
                if i:
                    h = nn.functional.dropout(h.relu(), self.dropout, self.training)
                h = conv((h, h[: g.num_dst]), g.edge_index(), size=(g.num_src, g.num_dst))
            return h


    class NotAModule:
        pass
    """
)


@pytest.fixture
def model_file(tmp_path):
    pytest.importorskip("torch_geometric.nn")
    path = tmp_path / "my_models.py"
    path.write_text(PYG_STACK)
    return path


def test_a_user_model_is_told_from_the_built_in_ones():
    assert is_user_model("pkg.mod:Class") and is_user_model("a/b.py:Net")
    assert not is_user_model("sage") and not is_user_model(":Net") and not is_user_model("m:")


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_a_model_from_a_file_trains_in_one_process(model_file, mode, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a relative path is made absolute for the workers
    config = TrainConfig(
        dataset=SPEC, mode=mode, model=ModelConfig(model="my_models.py:StackedSAGE", hidden=16),
        optim=OptimConfig(epochs=3), progress=False,
    )  # fmt: skip
    assert config.model.model == f"{model_file}:StackedSAGE"
    results = run_training(config)
    losses = [e["loss"] for e in results["epochs"]]
    assert losses[-1] < losses[0]
    assert results["config"]["model"]["model"] == f"{model_file}:StackedSAGE"


def test_a_model_from_a_module_trains_link_prediction(model_file, monkeypatch):
    monkeypatch.syspath_prepend(str(model_file.parent))
    config = TrainConfig(
        dataset=SPEC, task="link", model=ModelConfig(model="my_models:StackedSAGE", hidden=16),
        optim=OptimConfig(epochs=1), progress=False,
    )  # fmt: skip
    results = run_training(config)
    assert 0.0 <= results["link"]["test"]["auc"] <= 1.0


def test_what_cannot_run_is_refused_in_one_line(model_file, tmp_path, capsys):
    cases = [
        ([f"{tmp_path}/absent.py:Net"], "no such file"),
        ([f"{model_file}:NotAModule"], "has no torch.nn.Module subclass 'NotAModule'"),
        ([f"{model_file}:Missing"], "has no torch.nn.Module subclass 'Missing'"),
        (["no_such_package_here:Net"], "importing no_such_package_here failed"),
        ([f"{model_file}:StackedSAGE", "--heads", "2"], "--heads does not apply"),
        ([f"{model_file}:StackedSAGE", "--historical", "1:2"], "--historical"),
    ]
    for model, expected in cases:
        argv = ["train", SPEC, "--epochs", "1", "--quiet", "--model", *model]
        assert main(argv) == 2, model
        err = capsys.readouterr().err.strip()
        assert expected in err and "\n" not in err, (model, err)
    with pytest.raises(ConfigError, match="or MODULE:CLASS"):
        ModelConfig(model="unknown")


# Modules that break the output contract, each as a user might: the line each is refused with.
BROKEN = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Head(nn.Module):
        def __init__(self, in_dim, out_dim, config, extra=0):
            super().__init__()
            self.lin = nn.Linear(in_dim, out_dim + extra)

        def rows(self, graphs, x):
            return self.lin(x[: graphs[-1].num_dst])


    class OneClassTooMany(Head):  # trained silently as a fourth class before
        def __init__(self, in_dim, out_dim, config):
            super().__init__(in_dim, out_dim, config, extra=1)

        forward = Head.rows


    class EverySourceRow(Head):
        def forward(self, graphs, x):
            return self.lin(x)


    class ReturnsATuple(Head):
        def forward(self, graphs, x):
            return self.rows(graphs, x), None


    class ReturnsIntegers(Head):
        def forward(self, graphs, x):
            return self.rows(graphs, x).long()


    class Detached(Head):
        def forward(self, graphs, x):
            return self.rows(graphs, x).detach()


    class NoParameters(nn.Module):
        def __init__(self, in_dim, out_dim, config):
            super().__init__()
            self.out_dim = out_dim

        def forward(self, graphs, x):
            return torch.zeros(graphs[-1].num_dst, self.out_dim)
    """
)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("OneClassTooMany", r"forward returned a tensor of shape \[(\d+), 4\]; the contract: a "
         r"floating-point \[\1, 3\] tensor \(one row per destination node of graphs\[-1\]"),
        ("EverySourceRow", r"forward returned a tensor of shape \[\d+, 3\]; the contract"),
        ("ReturnsATuple", r"forward returned a tuple, not a tensor; the contract"),
        ("ReturnsIntegers", r"forward returned a torch.int64 tensor; the contract"),
        ("Detached", r"forward returned a tensor no parameter produced \(requires_grad is False"),
        ("NoParameters", r"NoParameters\(in_dim, out_dim, config\) has no parameters to train"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_a_forward_that_breaks_the_contract_is_refused_in_one_line(
    tmp_path, capsys, name, expected, mode
):
    """Each was a traceback from the loss or the optimiser, or, one column too many, a model
    trained silently on a class that does not exist."""
    import re

    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    argv = ["train", SPEC, "--epochs", "1", "--quiet", "--mode", mode, "--model", f"{path}:{name}"]
    if mode == "full" and name == "EverySourceRow":  # the whole graph: every row is a destination
        assert main(argv) == 0
        return
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"shardgnn train: error: --model {path}:{name}: ") and re.search(
        expected, err
    ), err
    assert err.endswith("README, Your own model"), err


def test_the_adapter_refuses_historical_inputs(model_file):
    from shardgnn.nn.user import build_user_model

    model = build_user_model(f"{model_file}:StackedSAGE", ModelConfig(hidden=4, num_layers=2), 8, 3)
    assert isinstance(model, UserModel) and model.num_layers == 2
    with pytest.raises(ConfigError, match="historical"):
        model([None, None], None, history={1: None})


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_model_from_a_file_trains_with_workers(model_file, tmp_path):
    out = tmp_path / "results.json"
    argv = ["train", SPEC, "--model", f"{model_file}:StackedSAGE", "--workers", "2"]
    argv += ["--epochs", "2", "--fanouts", "4,4", "--hidden", "16", "--quiet"]
    assert main([*argv, "--results", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["config"]["model"]["model"] == f"{model_file}:StackedSAGE"
    assert len(results["epochs"]) == 2


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_runs_a_user_model_over_a_partition(model_file, tmp_path):
    """`shardgnn infer` of a user model on 2 workers (full-neighbourhood blocks, batch by batch):
    its logits equal the checkpoint's model over the whole graph in one process."""
    import numpy as np
    import torch

    from shardgnn.graph.synthetic import SyntheticConfig, generate
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.user import build_user_model
    from shardgnn.train.inference.run import load_model_weights, resolve_checkpoint

    spec = "synthetic:nodes=600,degree=6,classes=3,features=8,seed=4"
    ck, parts, out = tmp_path / "ck", tmp_path / "parts", tmp_path / "out"
    model = f"{model_file}:StackedSAGE"
    argv = ["train", spec, "--model", model, "--epochs", "2", "--hidden", "16", "--quiet"]
    argv += ["--fanouts", "4,4", "--feature-norm", "none", "--checkpoint-dir", str(ck)]
    assert main(argv) == 0
    assert main(["partition", spec, "--parts", "2", "--method", "random", "--out", str(parts)]) == 0
    argv = ["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads((out / "inference.json").read_text())
    assert summary["workers"] == 2 and summary["num_nodes"] == 600
    graph = generate(SyntheticConfig(nodes=600, degree=6, classes=3, features=8, seed=4))
    net = build_user_model(model, ModelConfig(model=model, hidden=16, num_layers=2), 8, 3)
    weights = load_model_weights(resolve_checkpoint(ck))
    net.load_state_dict(weights)
    net.eval()
    whole = [MessageGraph.from_csr(graph.indptr, graph.indices)] * 2
    with torch.no_grad():
        expected = net(whole, torch.from_numpy(np.asarray(graph.x, dtype=np.float32))).numpy()
    logits = np.load(out / "logits.npy", allow_pickle=False)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)
    predictions = np.load(out / "predictions.npy", allow_pickle=False)
    np.testing.assert_array_equal(predictions, expected.argmax(1))
