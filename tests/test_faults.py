"""Faults beyond a dead process: preemption (SIGTERM / SIGUSR1 → a mid-epoch checkpoint every rank
agrees on, bit-exact resume), stalled workers (killed within seconds of the first failure), slow
workers (never killed), a checkpoint that cannot be written (the previous one stays)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from shardgnn.distributed.launch import WorkerFailedError, launch_local, worker_pids
from shardgnn.errors import REQUEUE_EXIT_CODE, CheckpointError, Preempted
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.nn.models import ModelConfig
from shardgnn.partition.format import write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.store.cache.config import CacheConfig
from shardgnn.train.checkpoint import Checkpointer
from shardgnn.train.config import CheckpointConfig, OptimConfig, RunConfig, TrainConfig
from shardgnn.train.single import LocalSteps, run_training

from conftest import assert_same_weights, final_weights, fixed_port, signal_self_at_step
from distributed_helpers import run_workers

BATCH = 16  # 10 batches per epoch on this graph's 150 training nodes


@pytest.fixture(scope="module")
def graph(checkpoint_graph):
    return checkpoint_graph


def _config(
    directory, epochs=3, resume=False, fetch_bits=32, error_feedback=False, cache="none", bulk=None,
    **run,
):  # fmt: skip
    return TrainConfig(
        model=ModelConfig(hidden=16, num_layers=2, dropout=0.5),
        sampler=SamplerConfig(fanouts=(5, 5), bulk=bulk),
        # windows of 3 batches (look-ahead, bulk): the stop after batch 4 falls inside one
        **({} if cache == "none" else {"cache": CacheConfig(policy=cache, size="5%", lookahead=3)}),
        optim=OptimConfig(epochs=epochs, lr=0.01),
        batch_size=BATCH,
        seed=3,
        progress=False,
        threads=1,
        checkpoint=CheckpointConfig(dir=str(directory), every=1, keep=2, resume=resume),
        fetch_bits=fetch_bits,
        error_feedback=error_feedback,
        **({"run": RunConfig(**run)} if run else {}),
    )


# ----------------------------------------------------------------------------- one process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_stop_signal_saves_mid_epoch_and_resume_is_bit_exact(tmp_path, graph, signum):
    from shardgnn.train.loop import TrainingLoop

    straight = tmp_path / "straight"
    expected = run_training(_config(straight), graph)
    batches = -(-len(graph.train_idx) // BATCH)
    interrupted = tmp_path / "interrupted"
    config = _config(interrupted)
    steps = LocalSteps(config, graph)
    signal_self_at_step(steps.optimizer, batches + 3, signum)  # epoch 2, batch 3
    with pytest.raises(Preempted) as stopped:
        TrainingLoop(config, steps).run()
    name = signal.Signals(signum).name
    assert str(stopped.value).startswith(f"stopped by {name} in epoch 2 after batch 3 of {batches}")
    assert "--resume" in str(stopped.value)
    # the step in flight was finished; nothing after it
    assert [p.name for p in Checkpointer(interrupted).complete()] == [
        "epoch-000001",
        "epoch-000001-batch-000003",
    ]
    assert signal.getsignal(signum) is not None  # handler restored (not ours any more)
    resumed = run_training(_config(interrupted, resume=True), graph)
    assert_same_weights(final_weights(straight), final_weights(interrupted))
    # the resumed epoch carries the sums of its first batches: the same history
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in expected["epochs"]]
    assert [e["train_acc"] for e in resumed["epochs"]] == [
        e["train_acc"] for e in expected["epochs"]
    ]


def test_stop_signal_without_checkpoint_dir_says_nothing_was_saved(graph):
    from shardgnn.train.loop import TrainingLoop

    config = TrainConfig(optim=OptimConfig(epochs=2), batch_size=BATCH, progress=False, threads=1)
    steps = LocalSteps(config, graph)
    signal_self_at_step(steps.optimizer, 2, signal.SIGTERM)
    with pytest.raises(Preempted, match=r"after batch 2 .*nothing was saved \(no --checkpoint-dir"):
        TrainingLoop(config, steps).run()


def test_stop_signal_in_full_graph_mode_stops_after_the_epoch(tmp_path, graph):
    from shardgnn.train.loop import TrainingLoop

    config = TrainConfig(
        mode="full",
        optim=OptimConfig(epochs=4),
        progress=False,
        threads=1,
        checkpoint=CheckpointConfig(dir=str(tmp_path / "ck"), every=3),
    )
    steps = LocalSteps(config, graph)
    signal_self_at_step(steps.optimizer, 2, signal.SIGTERM)
    with pytest.raises(Preempted, match="stopped by SIGTERM after epoch 2; checkpoint saved"):
        TrainingLoop(config, steps).run()
    assert [p.name for p in Checkpointer(tmp_path / "ck").complete()] == ["epoch-000002"]


# ----------------------------------------------------------------------- checkpoint writes
def _small_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a full disk) needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def test_full_disk_keeps_the_previous_checkpoint_and_names_the_free_space(tmp_path, graph):
    disk = tmp_path / "disk"
    # One checkpoint of this model takes 32 kB in 4 kB pages (weights, Adam moments, best
    # weights, meta.json); 40 kB hold the first and not the second.
    _small_tmpfs(disk, "40k")
    try:
        config = _config(disk, epochs=3)
        with pytest.raises(CheckpointError) as failure:
            run_training(config, graph)
        message = str(failure.value)
        assert "epoch-000002" in message and "No space left on device" in message, message
        assert re.search(r"; [\d.]+ (kB|bytes) free of 4\d\.\d kB\)", message), message
        assert "the previous checkpoint" in message and "epoch-000001 is intact" in message
        # nothing half-written is left, and the previous checkpoint resumes
        assert sorted(p.name for p in disk.iterdir()) == ["epoch-000001"]
        state = Checkpointer(disk).load_latest(config.to_dict(), None)
        assert state is not None and state["epoch"] == 1
    finally:
        # lazily: the loaded checkpoint maps its file until it is collected
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


# ---------------------------------------------------------------------------- multi-process
def _partitions(tmp_path, graph, parts=2):
    path = tmp_path / ("parts" if parts == 2 else f"parts-{parts}")
    if not path.exists():
        method = "metis" if parts > 1 else "random"
        result = partition_graph(graph, PartitionConfig(num_parts=parts, method=method, seed=0))
        write_partitions(
            graph, result.assignment, path, method=result.method, settings=result.settings
        )
    return str(path)


def _train_and_signal(ctx, config, signal_rank, step_number):
    """A distributed training rank; rank ``signal_rank`` alone receives SIGUSR1 at its optimiser
    step ``step_number`` (the other rank never sees a signal, yet must stop after the same step)."""
    from shardgnn.train.dist_node import DistMiniBatchSteps
    from shardgnn.train.loop import TrainingLoop

    steps = DistMiniBatchSteps(config, ctx)
    if ctx.rank == signal_rank:
        signal_self_at_step(steps.optimizer, step_number, signal.SIGUSR1)
    try:
        TrainingLoop(config, steps).run()
    except Preempted as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "overlap, bits, feedback, cache, bulk",
    [("off", 32, False, "none", None), ("on", 32, False, "none", None),
     ("on", 4, False, "none", None), ("off", 4, True, "none", None), ("on", 4, True, "none", None),
     ("on", 4, False, "lru", None), ("off", 4, False, "belady", None),
     ("on", 4, True, "belady", None), ("off", 4, True, "none", 3)],
)  # fmt: skip
def test_one_rank_signalled_every_rank_stops_after_the_same_step(
    tmp_path, graph, overlap, bits, feedback, cache, bulk
):
    """SIGUSR1 on rank 1 only: both ranks agree on the step, write one mid-epoch checkpoint, and the
    resumed job ends bit-identical to an uninterrupted one (with the prefetch thread too, whose
    collectives must stay matched when the epoch ends early; with 4-bit fetches, whose rounding
    is keyed by the batch: the batch fetched ahead of the checkpoint does not shift it; with
    error feedback, whose residuals the checkpoint carries; with a cache of rounded rows, whose
    admissions of the batches fetched ahead are taken back; and inside a window of batches
    fetched together, a belady cache's look-ahead or a bulk-sampled group, which the resumed
    run fetches again whole)."""
    path = _partitions(tmp_path, graph)
    straight, interrupted = tmp_path / f"straight-{overlap}", tmp_path / f"interrupted-{overlap}"
    settings = dict(
        partitions=path, overlap=overlap, fetch_bits=bits, error_feedback=feedback, cache=cache,
        bulk=bulk,
    )  # fmt: skip
    if bits < 32:  # peers' rows travel (quantised), not read from their mapped files
        settings["host_sharing"] = "off"
    run_workers(_train_and_signal, 2, _config(straight, **settings), 0, 0)
    per_epoch = -(-len(graph.train_idx) // BATCH)
    config = _config(interrupted, **settings)
    messages = run_workers(_train_and_signal, 2, config, 1, per_epoch + 4, timeout_s=30)
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"stopped by SIGUSR1 in epoch 2 after batch 4 of {per_epoch}")
    assert Checkpointer(interrupted).complete()[-1].name == "epoch-000001-batch-000004"
    resumed = _config(interrupted, resume=True, **settings)
    run_workers(_train_and_signal, 2, resumed, 0, 0)
    assert_same_weights(final_weights(straight), final_weights(interrupted))


def _prefetch_then_meet(ctx, slow_rank, stop_after):
    """Consume ``stop_after`` items of a prefetched stream whose producer all-reduces per item on
    the data group (rank ``slow_rank``'s producer is slow), close it early, then all-reduce on the
    data group again: it only matches if both producers issued the same collectives."""

    def source():
        for i in range(50):
            if ctx.rank == slow_rank:
                time.sleep(0.05)
            t = torch.tensor([i])
            dist.all_reduce(t, group=ctx.data_group)
            yield int(t)

    stream = iter(Prefetcher(source(), depth=2))
    got = [next(stream) for _ in range(stop_after)]
    if ctx.rank != slow_rank:
        time.sleep(0.5)  # let this rank's producer run ahead and fill its queue
    stream.close()
    marker = torch.tensor([1000 + ctx.rank])
    dist.all_reduce(marker, group=ctx.data_group)
    return got, int(marker)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_prefetcher_closed_early_leaves_collectives_matched():
    results = run_workers(_prefetch_then_meet, 2, 1, 5, timeout_s=10)
    assert results == [([0, 2, 4, 6, 8], 2001)] * 2


def _stall_or_crawl(ctx, behaviour, steps, slow_rank=1):
    from shardgnn.timing import StageTimer

    timer = StageTimer()
    for step in range(steps):
        with timer("sample"):
            time.sleep(0.05)
        with timer("fetch"):
            if ctx.rank == slow_rank:
                if behaviour == "stall" and step == 3:
                    os.kill(os.getpid(), signal.SIGSTOP)  # stopped: cannot act on SIGTERM
                if behaviour == "crawl":
                    time.sleep(0.3)  # 3x the peer's step time, well within the collective timeout
        with timer("compute"):
            time.sleep(0.05)
            t = torch.ones(1)
            dist.all_reduce(t)
    return "done"


def _run_in_job(fn, timeout_s, *args):
    from shardgnn.distributed.context import init_distributed, shutdown

    ctx = init_distributed(device="cpu", timeout_s=timeout_s)
    result = fn(ctx, *args)
    shutdown()
    return result


@pytest.mark.slow
@pytest.mark.multiprocess
def test_stalled_worker_is_killed_seconds_after_its_peer_times_out():
    start = time.perf_counter()
    with pytest.raises(WorkerFailedError) as failure:
        launch_local(_run_in_job, (_stall_or_crawl, 5.0, "stall", 30), 2, timeout_s=120)
    elapsed = time.perf_counter() - start
    # rank 0's collective times out after 5 s; the stopped rank 1 is SIGKILLed 3 s later (elastic
    # alone would SIGTERM it, which a stopped process ignores, and wait 30 s more)
    assert elapsed < 5 + 3 + 12, elapsed
    summary = failure.value.summary("train")
    # the one line names the stalled rank and where it stopped, then its peer's symptom
    assert (
        summary.startswith(
            "shardgnn train: error: worker rank 1 in stage 'fetch' stalled (no answer within the "
            "collective timeout; killed): RuntimeError: "
        )
        and "Timed out waiting 5000ms" in summary
    ), summary


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_stopped_lone_worker_is_killed_after_the_timeout():
    """A 1-worker job has no peer whose collective would time out: the launcher reads the
    worker's state and kills it once it has been stopped for ``stopped_timeout_s``."""
    start = time.perf_counter()
    with pytest.raises(WorkerFailedError) as failure:
        launch_local(
            _run_in_job, (_stall_or_crawl, 5.0, "stall", 30, 0), 1, timeout_s=120,
            stopped_timeout_s=3.0,
        )  # fmt: skip
    elapsed = time.perf_counter() - start
    assert elapsed < 3 + 1 + 12, elapsed  # + one look a second + start-up
    summary = failure.value.summary("train")
    assert summary.startswith(
        "shardgnn train: error: worker rank 0: stopped (SIGSTOP or SIGTSTP) and not continued "
        "for 3 s, past the timeout: killed by the launcher, in stage 'fetch'; the job was "
        "stopped"
    ), summary


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_worker_three_times_slower_than_its_peer_is_not_killed():
    results = launch_local(
        _run_in_job, (_stall_or_crawl, 5.0, "crawl", 15), 2, timeout_s=120, stopped_timeout_s=5.0
    )
    assert results == {0: "done", 1: "done"}


def _fault_then_resume(tmp_path, graph, fault, *args: str, epochs=20, at_epoch=1):
    """`shardgnn train ARGS` run straight, then again with ``fault(proc)`` once epoch
    ``at_epoch`` has been printed, then with --resume: returns (seconds from the fault to the
    end, exit code, stderr) of the faulted run, after checking that the resumed run's weights
    equal the straight run's bit for bit. The faulted run leads a process group of its own."""
    from shardgnn.graph.io import save_graph

    data = tmp_path / "graph"
    save_graph(graph, data)

    def command(directory, *extra):
        return [
            sys.executable, "-m", "shardgnn", "train", f"graph:{data}", "--epochs", str(epochs),
            "--batch-size", "16", "--hidden", "16", "--fanouts", "5,5", "--seed", "3",
            "--checkpoint-dir", str(directory), "--overlap", "off", "--quiet", *args, *extra,
        ]  # fmt: skip

    straight = tmp_path / "straight"
    subprocess.run(command(straight), check=True, capture_output=True, timeout=300)
    faulted = tmp_path / "faulted"
    proc = subprocess.Popen(
        command(faulted),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # training is under way
        if re.match(rf"epoch +{at_epoch}/{epochs} ", line):
            break
    victims = fault(proc)
    sent = time.perf_counter()
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    seconds = time.perf_counter() - sent
    subprocess.run(command(faulted, "--resume"), check=True, capture_output=True, timeout=300)
    assert_same_weights(final_weights(straight), final_weights(faulted))
    return seconds, proc.returncode, err


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("to", ["launcher", "every process"])
def test_sigterm_to_the_launcher_checkpoints_and_exits_for_requeue(tmp_path, graph, to):
    """`shardgnn train --workers 2` sent SIGTERM (as SLURM does before a preemption): the workers
    finish their step, save, the command prints one line and exits 75; `--resume` finishes the
    run with the weights of an uninterrupted one. The same when every process of the job gets it
    (its process group: the workers and the forkserver they were forked from too)."""

    def sigterm(proc):
        if to == "launcher":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        return []

    parts = _partitions(tmp_path, graph)
    seconds, code, err = _fault_then_resume(
        tmp_path, graph, sigterm, "--partitions", parts, "--workers", "2"
    )
    assert seconds < 30
    assert code == REQUEUE_EXIT_CODE, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("shardgnn train: stopped by SIGTERM"), err
    assert "--resume" in lines[0]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_stopped_worker_of_a_one_worker_job_ends_it_and_resume_finishes(tmp_path, graph):
    """Issue 33's chaos run found it: SIGSTOP of the only worker of `shardgnn train --workers 1`
    hung the job (no peer, no collective timeout). Now it ends within --timeout with one line
    naming the stop, and `--resume` finishes the run with the uninterrupted run's weights."""

    def sigstop(proc):
        victims = list(worker_pids(proc.pid).values())
        assert len(victims) == 1
        os.kill(victims[0], signal.SIGSTOP)
        return victims

    seconds, code, err = _fault_then_resume(
        tmp_path, graph, sigstop, "--workers", "1", "--timeout", "4", epochs=12, at_epoch=2
    )
    assert seconds < 4 + 1 + 10
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith(
        "shardgnn train: error: worker rank 0: stopped (SIGSTOP or SIGTSTP) and not continued for"
    ), err
    assert len(lines) <= 2 and "Traceback" not in err, err  # the line, and where the logs are


# ---------------------------------------------------------------------------------- torchrun
_STUCK_AGENT = """
import subprocess, sys, time
from shardgnn.torchrun import watch_agent

done = subprocess.Popen([sys.executable, "-c", "pass"])  # exits at once, never reaped: a zombie
alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(alive.pid, flush=True)
watch_agent("h0:29500", grace_s=1.0)  # exits the process
"""


def test_torchrun_watchdog_ends_an_agent_that_stopped_reaping_its_workers(tmp_path):
    """The agent's main loop blocked (a store call across a broken network): a worker it does not
    reap for the grace period makes the watchdog kill the rest and exit 1 with one line."""
    script = tmp_path / "stuck_agent.py"
    script.write_text(_STUCK_AGENT)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert time.perf_counter() - start < 20
    assert "blocked on the rendezvous store at h0:29500" in done.stderr, done.stderr
    alive_pid = int(done.stdout.split()[0])
    time.sleep(0.2)
    assert (
        not Path(f"/proc/{alive_pid}").exists()
        or "Z" in Path(f"/proc/{alive_pid}/stat").read_text().rsplit(")", 1)[1].split()[:1]
    )


def _start_job(tmp_path, graph, *train_args: str, workers: int = 2) -> subprocess.Popen:
    """``workers`` workers under `python -m shardgnn.torchrun` on ``graph`` (saved as a graph
    directory), returned once epoch 2 has begun (200 epochs: it runs until the test stops it)."""
    from shardgnn.graph.io import save_graph

    data = tmp_path / "graph"
    save_graph(graph, data)
    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "1", "--nproc-per-node",
        str(workers), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{fixed_port()}",
        "-m", "shardgnn.run", "train", f"graph:{data}", "--partitions",
        _partitions(tmp_path, graph, workers), "--epochs", "200", "--batch-size", "16",
        "--hidden", "16", "--fanouts", "5,5", "--overlap", "off", "--quiet", *train_args,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if re.match(r"epoch +2/200 ", line):
            break
    return proc


def _stop_a_worker_under_torchrun(tmp_path, graph, workers: int, timeout: int):
    """SIGSTOP the last worker of a `python -m shardgnn.torchrun` job of ``workers`` workers with
    ``--timeout timeout``; return (seconds from the stop to the job's end, exit code, stderr),
    after checking the stopped worker is gone."""
    proc = _start_job(tmp_path, graph, "--timeout", str(timeout), workers=workers)
    pids = worker_pids(proc.pid)
    assert len(pids) == workers
    victim = pids[workers - 1]
    os.kill(victim, signal.SIGSTOP)
    stopped = time.perf_counter()
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    seconds = time.perf_counter() - stopped
    assert not Path(f"/proc/{victim}").exists()
    return seconds, proc.returncode, err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_ends_a_refused_job_with_the_workers_line(tmp_path):
    """Bad input under `python -m shardgnn.torchrun`: each worker's one `error:` line, then one
    line of the wrapper and exit 2, not torchrun's report with the agent's traceback."""

    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "1", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{fixed_port()}",
        "-m", "shardgnn.run", "train", "synthetic:nodes=300", "--epochs", "1",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "shardgnn train: error: every worker needs the same partition directory" in done.stderr
    assert re.search(r"shardgnn.torchrun: worker rank [01] refused the job \(exit 2\)", done.stderr)
    assert "Traceback" not in done.stderr and "Root Cause" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("value", "ok"),
    [("2", True), ("1:4", True), ("3:3", True), ("0", False), ("3:2", False), ("abc", False),
     ("1:2:3", False), ("-1", False), ("", False)],
)  # fmt: skip
def test_torchrun_wrapper_checks_nnodes(value, ok):
    """torchrun answers a bad --nnodes with `invalid literal for int()` or an AssertionError's
    traceback; the wrapper names the flag and the rule."""
    from shardgnn.torchrun import nnodes_problem

    problem = nnodes_problem(value)
    assert (problem is None) == ok, problem
    if not ok:
        assert (
            problem == f"--nnodes {value!r} must be N or MIN:MAX (machines), with 1 <= MIN <= MAX"
        )


def test_torchrun_wrapper_tells_its_argument_errors_from_bugs():
    """A ValueError raised where torchrun parses its arguments is a bad argument (one line, exit
    2); any other keeps its traceback."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    from shardgnn.torchrun import refused_setting

    with pytest.raises(ValueError) as bad_endpoint:
        parse_rendezvous_endpoint("node0:http", 29400)
    assert refused_setting(bad_endpoint.value)
    with pytest.raises(ValueError) as elsewhere:
        int("not torchrun's")
    assert not refused_setting(elsewhere.value)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_refuses_a_bad_argument_in_one_line(tmp_path):
    """`--rdzv-conf join_timeout=abc` under `python -m shardgnn.torchrun`: torchrun's own message
    in one line and exit 2 (plain torchrun: its traceback, exit 1)."""
    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "1", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29400", "--rdzv-conf",
        "join_timeout=abc", "-m", "shardgnn.run", "train", "synthetic:nodes=300",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "shardgnn.torchrun: error: The rendezvous configuration option 'join_timeout' does not "
        "represent a valid integer value; see `python -m shardgnn.torchrun --help` (torchrun's "
        "arguments)"
    ], done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("fault", ["unreachable", "missing machine"])
def test_torchrun_wrapper_ends_a_failed_rendezvous_with_one_line(tmp_path, fault):
    """A rendezvous that cannot happen under `python -m shardgnn.torchrun`: a store nobody
    serves (the machine at --rdzv-endpoint is down, or the endpoint is wrong), or a second
    machine that never comes. Plain torchrun prints the store client's every retry with a C++
    stack, then a traceback (82 and 48 lines); here one line names the endpoint and the fix."""
    from shardgnn.distributed.launch import free_port

    port = free_port()  # free: nothing listens there
    conf = "join_timeout=4,read_timeout=2" + (",is_host=false" if fault == "unreachable" else "")
    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job7",
        "--rdzv-conf", conf, "-m", "shardgnn.run", "train", "synthetic:nodes=300",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"shardgnn.torchrun: rendezvous 'job7' at 127.0.0.1:{port}: ")
    if fault == "unreachable":
        assert "the store cannot be reached (" in lines[0] and "--rdzv-endpoint" in lines[0]
    else:
        assert "fewer than --nnodes 2 machines joined within the join timeout (4 s" in lines[0]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_kills_a_stalled_worker_seconds_after_the_failure(tmp_path, graph):
    """Under `python -m shardgnn.torchrun`, a stopped worker is SIGKILLed 3 s after its peer's
    collective timed out (plain torchrun waits 30 s more: SIGTERM means nothing to it)."""
    seconds, code, _ = _stop_a_worker_under_torchrun(tmp_path, graph, workers=2, timeout=5)
    # collective timeout 5 s + 3 s grace + start-up slack; plain torchrun: 5 + 30
    assert seconds < 5 + 3 + 10
    assert code != 0


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_kills_a_stopped_lone_worker_after_the_timeout(tmp_path, graph):
    """Under `python -m shardgnn.torchrun` with one worker (what `--nnodes 1:N` leaves after
    losing the other machines) a stopped worker has no peer to time out: the wrapper kills it
    after the job's --timeout, with one line, and the agent ends the job."""
    seconds, code, err = _stop_a_worker_under_torchrun(tmp_path, graph, workers=1, timeout=4)
    assert seconds < 4 + 1 + 10
    assert code != 0
    assert re.search(
        r"shardgnn.torchrun: worker rank 0 \(pid \d+\) has been stopped \(SIGSTOP or SIGTSTP\) "
        r"for [45] s, past the 4 s timeout; killing it",
        err,
    ), err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_forwards_sigusr1_and_exits_for_requeue(tmp_path, graph):
    """SLURM's early warning (SIGUSR1) to `python -m shardgnn.torchrun`: the workers save a
    checkpoint at a common step and the agent exits 75 with one line of its own."""
    proc = _start_job(tmp_path, graph, "--checkpoint-dir", str(tmp_path / "ck"))
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == REQUEUE_EXIT_CODE, err[-2000:]
    assert "shardgnn train: stopped by SIGUSR1" in err
    assert "shardgnn.torchrun: stopped by SIGUSR1; every worker saved its checkpoint" in err
    assert Checkpointer(tmp_path / "ck").complete()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_wrapper_releases_finished_machines_when_a_peer_fails_last(tmp_path):
    """Two machines' agents under `python -m shardgnn.torchrun`; one worker exits 0 at once, the
    other fails 3 s later (as a worker aborting in its exit after the results were written did).
    Plain torchrun keeps the finished machine's agent at its exit barrier for 300 s; here the
    failed agent joins the barrier, so both agents end within seconds, each with its own
    result."""

    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(3)\n    sys.exit(3)\n"
    )
    port = fixed_port()
    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "exit",
        str(script), "--timeout", "20",
    ]  # fmt: skip
    start = time.monotonic()
    agents = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        errs = [agent.communicate(timeout=120)[1] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    elapsed = time.monotonic() - start
    assert sorted(a.returncode for a in agents) == [0, 1], errs
    assert elapsed < 40, (elapsed, errs)  # plain torchrun: > 300 s


@pytest.mark.slow
@pytest.mark.multiprocess
def test_elastic_job_that_loses_a_machine_resumes_on_the_rest(tmp_path, graph):
    """Issue 33: two torchrun agents (two machines of one worker each) under elastic `--nnodes
    1:2 --max-restarts 1` with `--partitions parts-{parts}`. One machine is lost after the third
    checkpoint (its agent and worker SIGKILLed at once): the survivor's worker fails its next
    collective with one line, its agent meets the rendezvous again alone, and training resumes on
    1 worker from the 2-worker checkpoint (re-sharded) and finishes every epoch."""
    import socket

    from shardgnn.graph.io import save_graph

    data = tmp_path / "graph"
    save_graph(graph, data)
    for parts in (1, 2):
        result = partition_graph(graph, PartitionConfig(num_parts=parts, method="random", seed=0))
        write_partitions(graph, result.assignment, tmp_path / f"parts-{parts}", method="random")
    port, ck, results = fixed_port(), tmp_path / "ck", tmp_path / "results.json"
    cmd = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "1:2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "lost",
        "--rdzv-conf", "last_call_timeout=3", "--max-restarts", "1",
        "-m", "shardgnn.run", "train", f"graph:{data}", "--partitions",
        str(tmp_path / "parts-{parts}"), "--epochs", "40", "--batch-size", "16", "--hidden", "16",
        "--fanouts", "5,5", "--overlap", "off", "--quiet", "--timeout", "20", "--checkpoint-dir",
        str(ck), "--resume", "--results", str(results),
    ]  # fmt: skip

    def agent(name: str) -> subprocess.Popen:
        with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
            return subprocess.Popen(cmd, stdout=out, stderr=err, text=True)

    survivor = agent("survivor")  # first: it hosts the rendezvous store, which must survive
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        assert time.monotonic() < deadline, "the first agent never opened the rendezvous port"
        time.sleep(0.2)
    lost = agent("lost")
    try:
        while not (ck / "epoch-000003" / "meta.json").exists():
            assert survivor.poll() is None and lost.poll() is None, "an agent ended early"
            assert time.monotonic() < deadline + 120, "no third checkpoint"
            time.sleep(0.1)
        tree, seen = [lost.pid], 0
        while seen < len(tree):  # the agent and its worker: a machine lost whole
            children = Path(f"/proc/{tree[seen]}/task/{tree[seen]}/children")
            with contextlib.suppress(OSError):
                tree += [int(pid) for pid in children.read_text().split()]
            seen += 1
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        survivor.wait(timeout=180)
    finally:
        for proc in (survivor, lost):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    out, err = ((tmp_path / f"survivor.{s}").read_text() for s in ("out", "err"))
    assert survivor.returncode == 0, err[-3000:]
    assert re.search(r"written by 2 workers, re-sharded for 1\)", out), out[-3000:]
    assert re.search(r"shardgnn train: rank 0: the .* failed after .*a peer worker died", err)
    assert "Traceback" not in err, err[-3000:]
    final = json.loads(results.read_text())
    assert final["workers"] == 1 and [e["epoch"] for e in final["epochs"]] == list(range(1, 41))
    assert final["test_acc"] > 0.5
