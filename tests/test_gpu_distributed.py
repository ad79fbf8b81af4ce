"""Training and inference on a GPU (issue 30, the ``gpu`` tier): every test needs CUDA and is
skipped without it (tests/conftest.py). Written for one GPU: two workers share it (gloo, as
``--backend auto`` picks), one worker runs NCCL. Small graphs and 1-2 epochs: a few minutes in
all.

What is compared: full-graph training on the GPU against the CPU (the same seed: losses within
1e-4), a checkpoint written on the GPU resumed on the CPU and the other way round (the final
weights within 1e-4 of a run that never moved), and ``shardgnn infer --device cuda`` against
``--device cpu`` (outputs within 1e-4). Runs with workers are checked to finish with results
(their accuracy depends on the batches each worker draws, not only on the device).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shardgnn.cli import main
from shardgnn.nn.models import ModelConfig
from shardgnn.partition.format import write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import CheckpointConfig, OptimConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import final_weights

pytestmark = pytest.mark.gpu

SPEC = "synthetic:nodes=5000,degree=8,classes=4,features=16"


def _config(device, mode="full", epochs=2, task="node", **extra):
    return TrainConfig(
        task=task,
        mode=mode,
        # no dropout: the comparisons hold the arithmetic's rounding only
        model=ModelConfig(
            model=extra.pop("model", "sage"),
            hidden=16,
            num_layers=2,
            dropout=0.0,
            input_dropout=0.0,
        ),  # fmt: skip
        sampler=SamplerConfig(fanouts=(5, 5)),
        optim=OptimConfig(epochs=epochs, lr=0.01),
        batch_size=256,
        seed=3,
        device=device,
        progress=False,
        **extra,
    )


def _same_losses(cpu, gpu, tol=1e-4):
    assert len(cpu["epochs"]) == len(gpu["epochs"])
    for c, g in zip(cpu["epochs"], gpu["epochs"]):
        assert abs(c["loss"] - g["loss"]) <= tol, (c["epoch"], c["loss"], g["loss"])


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_full_graph_training_on_the_gpu_equals_the_cpu(small_graph, model):
    cpu = run_training(_config("cpu", model=model), small_graph)
    gpu = run_training(_config("cuda", model=model), small_graph)
    _same_losses(cpu, gpu)
    assert abs(cpu["test_acc"] - gpu["test_acc"]) <= 0.01


def test_full_graph_link_prediction_on_the_gpu_equals_the_cpu(small_graph):
    cpu = run_training(_config("cpu", task="link"), small_graph)
    gpu = run_training(_config("cuda", task="link"), small_graph)
    _same_losses(cpu, gpu)


def test_minibatch_training_runs_on_the_gpu(small_graph):
    """(Where batches are sampled may follow the device, so only completion is checked.)"""
    gpu = run_training(_config("cuda", mode="minibatch", epochs=1), small_graph)
    assert np.isfinite(gpu["epochs"][0]["loss"]) and gpu["test_acc"] > 0.3


@pytest.mark.parametrize("first, then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_device(tmp_path, small_graph, first, then):
    def config(directory, epochs, device, resume=False):
        ckpt = CheckpointConfig(dir=str(directory), resume=resume)
        return _config(device, epochs=epochs, checkpoint=ckpt)

    straight = tmp_path / "straight"
    run_training(config(straight, 4, then), small_graph)
    moved = tmp_path / "moved"
    run_training(config(moved, 2, first), small_graph)
    resumed = run_training(config(moved, 4, then, resume=True), small_graph)
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3, 4]
    a, b = final_weights(straight), final_weights(moved)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key].cpu(), b[key].cpu(), atol=1e-4, rtol=1e-4)


def _train_cli(tmp_path, name, *flags):
    results = tmp_path / f"{name}.json"
    argv = ["train", SPEC, "--epochs", "1", "--quiet", "--results", str(results), *flags]
    assert main(argv) == 0  # a later --epochs wins
    data = json.loads(results.read_text())
    assert len(data["epochs"]) >= 1 and np.isfinite(data["epochs"][0]["loss"])
    return data


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_share_one_gpu_over_gloo(tmp_path):
    data = _train_cli(tmp_path, "w2", "--workers", "2", "--device", "cuda", "--fanouts", "5,5")
    assert data["test_acc"] > 0.3  # 4 classes: better than chance after one epoch


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_train_the_full_graph_on_one_gpu(tmp_path):
    _train_cli(tmp_path, "wfull", "--workers", "2", "--device", "cuda", "--mode", "full")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_halo_attention_on_one_gpu_equals_the_cpu(tmp_path):
    """GAT in distributed full-graph mode (halo rows scored per in-edge) on CUDA, 2 ranks."""
    flags = ["--workers", "2", "--mode", "full", "--model", "gat", "--spmm", "1d-sparse"]
    flags += ["--dropout", "0", "--epochs", "2"]
    cpu = _train_cli(tmp_path, "gat-cpu", *flags, "--device", "cpu")
    gpu = _train_cli(tmp_path, "gat-gpu", *flags, "--device", "cuda")
    _same_losses(cpu, gpu, tol=1e-3)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("spmm", ["2d", "3d"])
def test_grid_spmm_on_one_gpu_equals_the_cpu(tmp_path, spmm):
    """2D (a 1 x 2 grid) and 3D (1 x 1 x 2: feature slices) full-graph SpMM on CUDA, 2 ranks
    sharing the GPU: the same losses as on the CPU."""
    flags = ["--workers", "2", "--mode", "full", "--spmm", spmm, "--dropout", "0", "--epochs", "2"]
    cpu = _train_cli(tmp_path, f"{spmm}-cpu", *flags, "--device", "cpu")
    gpu = _train_cli(tmp_path, f"{spmm}-gpu", *flags, "--device", "cuda")
    _same_losses(cpu, gpu, tol=1e-3)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_one_worker_trains_over_nccl(tmp_path):
    _train_cli(
        tmp_path, "nccl", "--workers", "1", "--device", "cuda", "--backend", "nccl",
        "--fanouts", "5,5",
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.multiprocess
def test_nccl_with_two_workers_on_one_gpu_is_refused(tmp_path, capsys):
    if torch.cuda.device_count() > 1:
        pytest.skip("the refusal needs workers sharing one GPU")
    argv = ["train", SPEC, "--workers", "2", "--device", "cuda", "--backend", "nccl"]
    assert main([*argv, "--epochs", "1", "--quiet"]) == 2
    assert "--backend nccl needs a GPU per rank" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_inference_on_the_gpu_equals_the_cpu(tmp_path, small_graph):
    parts = tmp_path / "parts"
    result = partition_graph(small_graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    write_partitions(
        small_graph, result.assignment, parts, method=result.method, settings=result.settings
    )
    ckpt = tmp_path / "ckpt"
    argv = ["train", "--partitions", str(parts), "--model", "gcn", "--fanouts", "5,5"]
    argv += ["--hidden", "8", "--epochs", "1", "--quiet", "--checkpoint-dir", str(ckpt)]
    assert main(argv) == 0
    outs = _inferred_on_both_devices(tmp_path, ckpt, parts, "--chunk-rows", "512")
    for name in ("embeddings", "logits"):
        cpu = np.load(Path(outs["cpu"]) / f"{name}.npy")
        gpu = np.load(Path(outs["cuda"]) / f"{name}.npy")
        np.testing.assert_allclose(gpu, cpu, atol=1e-4, rtol=1e-4)


def _inferred_on_both_devices(tmp_path, checkpoint, parts, *extra) -> dict[str, Path]:
    """``shardgnn infer`` of ``checkpoint`` over ``parts`` on the CPU and on the GPU: each
    device's output folder."""
    outs = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"out-{device}"
        argv = ["infer", "--checkpoint", str(checkpoint), "--partitions", str(parts)]
        assert main([*argv, "--out", str(out), "--device", device, *extra]) == 0
        outs[device] = out
    return outs


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("spec,model", [("csl", "gin"), ("tracks:events=8,particles=15", "gine")])
def test_graph_set_inference_on_the_gpu_equals_the_cpu(tmp_path, spec, model):
    """A graph classifier (CSL) and an edge classifier reading edge rows (particle tracks),
    inferred over a 2-part partition of the set on the GPU: the CPU's logits."""
    ck, parts = tmp_path / "ck", tmp_path / "parts"
    train = ["train", spec, "--model", model, "--hidden", "16", "--epochs", "1", "--quiet"]
    assert main([*train, "--checkpoint-dir", str(ck)]) == 0
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    logits = {d: np.load(out / "logits.npy") for d, out in _inferred_on_both_devices(
        tmp_path, ck, parts).items()}  # fmt: skip
    np.testing.assert_allclose(logits["cuda"], logits["cpu"], atol=1e-4, rtol=1e-4)
