"""Mixed precision (issue 30, ``--precision bf16``): bf16 autocast of the dense layers with fp32
master weights, on CPU here (the same code path runs on CUDA: the autocast takes the training
device's type)."""

from __future__ import annotations

import pytest
import torch

from shardgnn import precision
from shardgnn.cli import build_parser
from shardgnn.cli.train import train_config
from shardgnn.errors import ConfigError
from shardgnn.nn import message_graph
from shardgnn.nn.config import ModelConfig
from shardgnn.nn.message_graph import MessageGraph, spmm
from shardgnn.precision import precision_context
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.minibatch import node_objective
from shardgnn.train.single import LocalSteps, run_training

CPU = torch.device("cpu")


def _config(precision_name: str, **kw) -> TrainConfig:
    base = dict(
        model=ModelConfig(model="sage", hidden=64, num_layers=2, dropout=0.0),
        sampler=SamplerConfig(fanouts=(10, 5)),
        optim=OptimConfig(epochs=1, lr=0.01),
        batch_size=256,
        progress=False,
        precision=precision_name,
    )
    base.update(kw)
    return TrainConfig(**base)


def _first_batch_loss(config: TrainConfig, graph) -> tuple[torch.Tensor, torch.Tensor, LocalSteps]:
    """The loss and logits of the first training batch, and the steps (same seed: same weights)."""
    steps = LocalSteps(config, graph)
    steps.train_loader.set_epoch(0)
    batch = next(iter(steps.train_loader))
    graphs = [MessageGraph.from_block(b, CPU) for b in batch.sample.blocks]
    steps.model.train()
    with precision_context(config.precision, CPU):
        logits = steps.model(graphs, batch.x_SF)
        loss = node_objective(steps.target)(steps.model, graphs, batch, CPU).loss
    return loss, logits, steps


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_a_bf16_step_matches_fp32_within_bf16_rounding_on_fp32_weights(small_graph, model):
    models = ModelConfig(model=model, hidden=64, num_layers=2, heads=2, dropout=0.0)
    loss32, logits32, _ = _first_batch_loss(_config("fp32", model=models), small_graph)
    loss16, logits16, steps = _first_batch_loss(_config("bf16", model=models), small_graph)
    assert logits32.dtype == torch.float32
    # the dense layers ran in bf16 (GAT's attention sum is fp32 by design)
    assert logits16.dtype == (torch.float32 if model == "gat" else torch.bfloat16)
    assert loss16.dtype == torch.float32  # the loss is computed from fp32 logits
    assert abs(loss16.item() - loss32.item()) < 2e-2 * max(1.0, abs(loss32.item()))
    loss16.backward()
    for name, param in steps.model.named_parameters():
        assert param.dtype == torch.float32, name
        assert param.grad is not None and param.grad.dtype == torch.float32, name
        assert torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("use_kernels", [True, False])
def test_bf16_rows_aggregate_in_fp32_and_their_gradient_comes_back_in_bf16(
    small_graph, monkeypatch, use_kernels
):
    """Both paths: the numba kernels (CPU) and torch sparse CSR (what CUDA runs), under an
    autocast that would otherwise run the sparse product in bf16."""
    monkeypatch.setattr(message_graph, "USE_KERNELS", use_kernels)
    g = small_graph
    graph = MessageGraph.from_csr(g.indptr, g.indices)
    h32 = torch.randn(g.num_nodes, 16)
    h16 = h32.to(torch.bfloat16).requires_grad_(True)
    for norm in ("mean", "gcn", "sum"):
        with precision_context("bf16", CPU):
            out = spmm(graph, h16, norm)
        assert out.dtype == torch.bfloat16
        expected = spmm(graph, h16.detach().float(), norm)
        torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)
        (grad,) = torch.autograd.grad(out.float().sum(), h16)
        assert grad.dtype == torch.bfloat16 and torch.isfinite(grad.float()).all()


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_an_epoch_of_bf16_training_learns_and_keeps_fp32_master_weights(small_graph, mode):
    config = _config("bf16", optim=OptimConfig(epochs=3, lr=0.01))
    if mode == "full":
        config = _config(
            "bf16",
            mode="full",
            model=ModelConfig(model="sage", hidden=32, num_layers=2, dropout=0.0),
            optim=OptimConfig(epochs=30, lr=0.02),
        )
    steps = LocalSteps(config, small_graph)
    results = TrainingLoop(config, steps).run()
    assert results["test_acc"] > 0.45, results["test_acc"]  # 4 classes: chance is 0.25
    assert all(p.dtype == torch.float32 for p in steps.model.parameters())
    state = steps.optimizer.state_dict()["state"]
    assert state and all(
        t.dtype == torch.float32 for s in state.values() for k, t in s.items() if k != "step"
    )


def test_bf16_link_prediction_trains_and_scores_in_fp32(small_graph):
    results = run_training(
        _config(
            "bf16",
            task="link",
            model=ModelConfig(model="sage", hidden=32, num_layers=2, dropout=0.0),
            sampler=SamplerConfig(fanouts=(5, 5)),
        ),
        small_graph,
    )
    assert 0.0 <= results["test_acc"] <= 1.0 and results["epochs"][0]["loss"] > 0


def test_the_flag_is_refused_where_no_step_reads_it():
    args = build_parser().parse_args(
        ["train", "synthetic-temporal:nodes=60,events=600", "--model", "tgn", "--precision", "bf16"]
    )
    with pytest.raises(ConfigError) as refused:
        train_config(args)
    message = str(refused.value)
    assert "--precision" in message and "does not apply" in message and "\n" not in message


def test_an_unknown_precision_is_refused():
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision="fp8")


def test_a_device_without_native_bf16_gets_one_warning_line(monkeypatch, capsys):
    monkeypatch.setattr(precision, "bf16_is_fast", lambda device: False)
    monkeypatch.setattr(precision, "_warned", set())
    for _ in range(3):
        with precision_context("bf16", "cpu"):
            pass
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--precision bf16" in err[0] and "slower" in err[0]
    with precision_context("fp32", "cpu"):  # fp32: no autocast at all
        assert not torch.is_autocast_enabled("cpu")
