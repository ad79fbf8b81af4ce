"""The local launcher (elastic_launch underneath), the test helper run_workers, and `python -m shardgnn.run`.

Multi-process tests spawn real workers (gloo on CPU). Worker functions are module-level so they can
be pickled; the ones that fail write their pid first so the test can check that no process is left.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import types
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist
from distributed_helpers import run_workers

from shardgnn.distributed.launch import WorkerFailedError, WorkerTimeoutError, free_port, launch_local
from shardgnn.errors import ConfigError


# ---------------------------------------------------------------------------------------------- worker functions
def _sum_of_ranks(ctx, offset):
    t = torch.tensor([float(ctx.rank + offset)])
    dist.all_reduce(t)
    return ctx.rank, ctx.world_size, t.item(), torch.get_num_threads()


def _write_pid(pid_dir):
    Path(pid_dir, f"{os.getpid()}.pid").write_text(str(os.getpid()))


def _raise_on_rank_1(ctx, pid_dir):
    _write_pid(pid_dir)
    if ctx.rank == 1:
        raise ValueError("boom from rank 1: the partition file is corrupt")
    t = torch.ones(1)
    dist.all_reduce(t)  # blocks until rank 1's death turns it into an error
    return t.item()


def _die_hard_on_rank_1(ctx, pid_dir, how):
    _write_pid(pid_dir)
    if ctx.rank == 1:
        time.sleep(0.5)  # let the others enter the collective first
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _hang_forever(pid_dir):
    _write_pid(pid_dir)
    threading.Event().wait()


# ---------------------------------------------------------------------------------------------- helpers
def _children() -> set[int]:
    """Live processes below this one, except multiprocessing's resource tracker (one per parent,
    started by the first spawn context and alive until the parent exits)."""
    alive = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(proc.cmdline()):
                alive.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _assert_no_orphans(pid_dir: Path, children_before: set[int]) -> None:
    worker_pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert worker_pids, "the workers never started"
    assert [pid for pid in worker_pids if psutil.pid_exists(pid)] == []
    assert _children() - children_before == set()


# ---------------------------------------------------------------------------------------------- tests
def test_free_port_is_bindable():
    port = free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_entrypoint_must_be_picklable():
    with pytest.raises(TypeError, match="module-level function"):
        launch_local(lambda: 0, (), 2)
    with pytest.raises(ValueError, match="nprocs"):
        launch_local(_hang_forever, ("unused",), 0)


@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [2, 3])
def test_all_reduce_and_results_in_rank_order(world_size):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    results = run_workers(_sum_of_ranks, world_size, 10)
    total = sum(rank + 10 for rank in range(world_size))
    # Unless the user set OMP_NUM_THREADS, the cores are shared out between the workers.
    cores = len(os.sched_getaffinity(0))
    threads = int(os.environ["OMP_NUM_THREADS"]) if "OMP_NUM_THREADS" in os.environ else max(1, cores // world_size)
    assert results == [(rank, world_size, total, threads) for rank in range(world_size)]
    # elastic installs its own signal handlers; the launcher puts ours back
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


@pytest.mark.multiprocess
def test_worker_exception_names_rank_and_message(tmp_path):
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        run_workers(_raise_on_rank_1, 2, str(tmp_path), timeout_s=20)
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "rank 1" in message and "ValueError: boom from rank 1: the partition file is corrupt" in message
    assert "_raise_on_rank_1" in message  # traceback excerpt
    first = info.value.failures[0]
    assert (first.rank, first.exitcode) == (1, 1)
    assert first.error.startswith("ValueError: boom from rank 1")
    _assert_no_orphans(tmp_path, before)


@pytest.mark.multiprocess
@pytest.mark.parametrize(("how", "exitcode", "text"), [("exit", 3, "exit code 3"),
                                                       ("sigkill", -signal.SIGKILL, "killed by SIGKILL")])
def test_hard_death_while_peers_block_in_a_collective(tmp_path, how, exitcode, text):
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        run_workers(_die_hard_on_rank_1, 2, str(tmp_path), how, timeout_s=20)
    assert time.monotonic() - start < 60
    # Rank 0 fails too ("Connection closed by peer"), a moment later: rank 1 is named first.
    first = info.value.failures[0]
    assert (first.rank, first.exitcode, first.error) == (1, exitcode, None)
    assert f"rank 1: {text}" in str(info.value)
    _assert_no_orphans(tmp_path, before)


@pytest.mark.multiprocess
def test_deadline_kills_hanging_workers(tmp_path):
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="did not finish within timeout_s=8 s"):
        launch_local(_hang_forever, (str(tmp_path),), 2, timeout_s=8)
    assert time.monotonic() - start < 8 + 15
    _assert_no_orphans(tmp_path, before)


# ---------------------------------------------------------------------------------------------- python -m shardgnn.run
@pytest.fixture
def fake_worker(monkeypatch):
    """Stand-in for shardgnn.train.distributed (the real one needs a torchrun environment)."""
    calls = []
    module = types.ModuleType("shardgnn.train.distributed")

    def run_worker(config, partitions, *, overlap, timeout_s):
        calls.append((config, partitions, overlap, timeout_s))
        if config.dataset == "raise-config-error":
            raise ConfigError("--partitions parts/ holds 4 partitions but the job has 8 ranks")

    module.run_worker = run_worker
    monkeypatch.setitem(sys.modules, "shardgnn.train.distributed", module)
    return calls


def test_run_main_parses_train_arguments(fake_worker):
    from shardgnn.run import main, worker_entry

    assert main(["train", "synthetic", "--epochs", "3", "--fanouts", "5,5", "--partitions", "p/"]) == 0
    assert worker_entry(["train", "synthetic", "--epochs", "4", "--partitions", "p/", "--overlap", "off",
                         "--timeout", "30"]) == 0
    (first, path, overlap, _), (second, _, overlap2, timeout) = fake_worker
    assert (first.dataset, first.optim.epochs, first.sampler.fanouts, path, overlap) == ("synthetic", 3, (5, 5), "p/", "auto")
    assert (second.optim.epochs, overlap2, timeout) == (4, False, 30.0)


def test_worker_entry_lets_errors_reach_the_launcher(fake_worker):
    from shardgnn.run import worker_entry

    with pytest.raises(ConfigError, match="holds 4 partitions"):
        worker_entry(["train", "raise-config-error", "--partitions", "p/"])
    with pytest.raises(ConfigError, match="--partitions DIR"):
        worker_entry(["train", "synthetic"])


@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # @record vs. pytest's captured stderr
def test_run_main_reports_user_errors_like_the_cli(fake_worker, capsys):
    from shardgnn.run import main

    assert main(["train", "raise-config-error", "--partitions", "parts/"]) == 2
    assert "shardgnn train: error: --partitions parts/ holds 4 partitions" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["info"])
    assert info.value.code == 2
    assert fake_worker and len(fake_worker) == 1


def test_cli_and_context_agree_on_the_default_collective_timeout():
    from shardgnn import cli
    from shardgnn.distributed import context

    assert cli.DEFAULT_TIMEOUT_S == context.DEFAULT_TIMEOUT_S <= 45.0  # a stalled worker ends the job within 60 s
    args = cli.build_parser().parse_args(["train", "--workers", "2"])
    assert args.timeout == context.DEFAULT_TIMEOUT_S
