"""Where each rank computes and which backend carries its gradients (issue 30), checked without a
GPU: the pure placement rule, the refusals of ``--backend`` / ``--device``, the launcher's
compatibility with the installed torch's elastic API, and a communicator that stays on the host
when its group is gloo."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from shardgnn.cli import build_parser, main
from shardgnn.cli.train import train_config
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.config import device_problem
from shardgnn.distributed.context import check_placement, choose_placement
from shardgnn.distributed.launch import _launch_config, supported_fields
from shardgnn.errors import ConfigError
from shardgnn.torchrun import torchrun_has_option
from shardgnn.train.config import TrainConfig
from shardgnn.train.settings import InferConfig
from shardgnn.train.setup import resolve_device

SMALL = "synthetic:nodes=300,degree=6,classes=3,features=8"


def _place(device, backend="auto", *, rank=0, ranks=1, gpus=0):
    return choose_placement(
        device, backend, local_rank=rank, local_world_size=ranks, cuda_devices=gpus
    )


@pytest.mark.parametrize(
    "device, backend, rank, ranks, gpus, expected",
    [
        ("auto", "auto", 0, 1, 0, ("cpu", "gloo")),
        ("auto", "auto", 1, 2, 0, ("cpu", "gloo")),
        ("cpu", "auto", 0, 1, 4, ("cpu", "gloo")),
        ("auto", "auto", 0, 1, 1, ("cuda:0", "nccl")),
        ("cuda", "auto", 0, 1, 1, ("cuda:0", "nccl")),
        # two ranks, one GPU: both on it, and gloo (NCCL refuses two ranks on one GPU)
        ("cuda", "auto", 0, 2, 1, ("cuda:0", "gloo")),
        ("cuda", "auto", 1, 2, 1, ("cuda:0", "gloo")),
        ("auto", "gloo", 1, 2, 1, ("cuda:0", "gloo")),
        # one GPU per local rank
        ("cuda", "auto", 1, 2, 4, ("cuda:1", "nccl")),
        ("cuda", "nccl", 3, 4, 4, ("cuda:3", "nccl")),
        ("cuda", "gloo", 3, 4, 4, ("cuda:3", "gloo")),
        # more ranks than GPUs: round-robin
        ("cuda", "auto", 3, 4, 2, ("cuda:1", "gloo")),
        # an explicit GPU: every local rank on it
        ("cuda:1", "auto", 0, 1, 2, ("cuda:1", "nccl")),
        ("cuda:1", "auto", 1, 2, 2, ("cuda:1", "gloo")),
    ],
)
def test_placement_rule(device, backend, rank, ranks, gpus, expected):
    assert _place(device, backend, rank=rank, ranks=ranks, gpus=gpus) == expected


@pytest.mark.parametrize(
    "device, backend, ranks, gpus, words",
    [
        ("cpu", "nccl", 1, 0, "--backend nccl runs on CUDA devices"),
        ("auto", "nccl", 2, 0, "--backend nccl runs on CUDA devices"),
        ("cuda", "nccl", 2, 1, "--backend nccl needs a GPU per rank and 2 workers share 1"),
        ("cuda:0", "nccl", 2, 4, "--backend nccl needs a GPU per rank"),
        ("cuda", "auto", 1, 0, "--device cuda: CUDA is not available here"),
        ("cuda:2", "auto", 1, 2, "--device cuda:2: this machine has 2 CUDA device(s)"),
        ("tpu", "auto", 1, 0, "--device 'tpu'"),
        ("cpu", "mpi", 1, 0, "--backend 'mpi'"),
    ],
)
def test_placement_refusals_are_one_line(device, backend, ranks, gpus, words):
    with pytest.raises(ConfigError) as refused:
        _place(device, backend, ranks=ranks, gpus=gpus)
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine w/o CUDA")
def test_check_placement_refuses_what_no_worker_could_use():
    check_placement("cpu", "auto", 2)
    check_placement("auto", "gloo", 2)
    with pytest.raises(ConfigError, match="--backend nccl runs on CUDA devices"):
        check_placement("cpu", "nccl", 2)
    with pytest.raises(ConfigError, match="CUDA is not available"):
        check_placement("cuda", "auto", 2)


def test_backend_is_a_worker_setting():
    args = build_parser().parse_args(["train", SMALL, "--workers", "2", "--backend", "gloo"])
    assert train_config(args).run.backend == "gloo"
    args = build_parser().parse_args(["train", SMALL, "--backend", "gloo"])
    with pytest.raises(ConfigError, match="--backend does not apply to .*in one process"):
        train_config(args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine w/o CUDA")
def test_an_impossible_backend_is_refused_before_partitioning(tmp_path, capsys):
    argv = ["train", SMALL, "--workers", "2", "--backend", "nccl", "--epochs", "1", "--quiet"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "--backend nccl runs on CUDA devices" in err[0], err
    assert "partitioned" not in captured.out


@pytest.mark.parametrize(
    "device, hint",
    [
        ("gpu", "(did you mean cuda?)"),
        ("CUDA", "(did you mean cuda?)"),
        ("gpu:1", "(did you mean cuda:1?)"),
        ("cuda:x", ""),
        ("cuda:-1", ""),
        ("mps", ""),
        ("meta", ""),
        ("", ""),
    ],
)
def test_a_device_shardgnn_cannot_run_on_is_refused_as_settings_are_built(device, hint):
    """Before: `--device gpu` (or cuda:x, mps, meta) passed the settings, the graph was read,
    and torch's parser or autocast ended one-process training with a traceback."""
    want = f"--device {device}: give cpu, cuda, cuda:N or auto{hint and ' ' + hint}"
    assert device_problem(device) is not None
    with pytest.raises(ConfigError) as refused:
        TrainConfig(dataset=SMALL, device=device)
    assert str(refused.value) == want
    with pytest.raises(ConfigError) as refused:
        InferConfig(checkpoint="c", out="o", device=device)
    assert str(refused.value) == want
    with pytest.raises(ConfigError, match=re.escape(f"--device {device!r}: give cpu")):
        _place(device)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "cuda", "cuda:0", "cuda:12", "auto"])
def test_the_devices_shardgnn_runs_on_pass_the_settings(device):
    assert device_problem(device) is None
    assert TrainConfig(dataset=SMALL, device=device).device == device


def test_one_process_on_the_cpu_trains_where_the_placement_rule_puts_its_rank():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == torch.device(expected)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine w/o CUDA")
def test_one_process_on_an_absent_gpu_is_refused_before_the_graph_is_read(tmp_path, capsys):
    missing = tmp_path / "no-such-graph"
    argv = ["train", f"graph:{missing}", "--device", "cuda", "--epochs", "1", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "shardgnn train: error: --device cuda: CUDA is not available here; use "
        "--device cpu (or auto)"
    ], err


def test_infer_has_a_device_flag():
    args = build_parser().parse_args(
        ["infer", "--checkpoint", "c", "--partitions", "p", "--out", "o", "--device", "auto"]
    )
    assert args.device == "auto"


# ---------------------------------------------------------------------------------------- launcher
def test_launch_config_passes_only_the_fields_the_installed_torch_has():
    @dataclasses.dataclass
    class OldLaunchConfig:  # as torch 2.11's: no shutdown_timeout
        nproc_per_node: int
        signals_to_handle: str = "SIGTERM"

    kept = supported_fields(OldLaunchConfig, shutdown_timeout=30, signals_to_handle="SIGUSR1")
    assert kept == {"signals_to_handle": "SIGUSR1"}
    assert supported_fields(OldLaunchConfig) == {}
    # the installed torch's LaunchConfig accepts what the launcher builds
    config = _launch_config(2, 0, "/tmp/shardgnn-test-elastic", 7.5, "forkserver")
    assert config.start_method == "forkserver"
    names = {f.name for f in dataclasses.fields(config)}
    if "shutdown_timeout" in names:
        assert config.shutdown_timeout == 8
    if "signals_to_handle" in names:
        assert "SIGUSR1" in config.signals_to_handle


def test_torchrun_wrapper_adds_only_options_torchrun_knows():
    assert not torchrun_has_option("--no-such-option")
    assert torchrun_has_option("--nproc-per-node")


def test_one_rank_communicator_leaves_tensors_where_they_are():
    comm = Communicator(0, 1, None)
    t = torch.arange(4.0)
    assert comm.wire_device is None and comm.on_wire(t) is t
    assert comm.all_reduce(t, "metrics") is t


@pytest.mark.parametrize(
    "env, said",
    [
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc': must be an integer >= 1"),
        ({"RANK": "3"}, "RANK='3': must be an integer in [0, WORLD_SIZE=2)"),
        ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc': must be an integer in [1, 65536)"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK='-1': must be an integer in [0, LOCAL_WORLD_SIZE=2)"),
    ],
)
def test_a_bad_torchrun_environment_is_one_line(monkeypatch, env, said):
    """A mistyped variable was a ValueError traceback; a rank beyond the world waited for the
    rendezvous and ended in one."""
    from shardgnn.distributed.context import init_distributed

    base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for name, value in {**base, **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match=f"^environment variable {re.escape(said)}; torchrun"):
        init_distributed(device="cpu")


def test_a_rendezvous_nobody_joins_ends_in_one_line_within_the_timeout(monkeypatch):
    """Rank 0 of 2 alone: torch's DistStoreError traceback, now one line naming the endpoint."""
    from shardgnn.distributed.comm import CollectiveError
    from shardgnn.distributed.context import init_distributed

    from conftest import fixed_port

    port = fixed_port()
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CollectiveError) as failed:
        init_distributed(device="cpu", timeout_s=1.0)
    assert str(failed.value).startswith(
        f"rank 0: the rendezvous of 2 workers at 127.0.0.1:{port} failed within --timeout 1 s: "
    )
    assert "every worker starts with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE" in str(
        failed.value
    )
