"""The local launcher (elastic_launch underneath), the test helper run_workers, and `python -m
shardgnn.run`.

Multi-process tests start real workers (gloo on CPU). Worker functions are module-level so they can
be pickled; the ones that fail write their pid first so the test can check that no process is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist

from shardgnn.distributed.launch import (
    StoppedWatch,
    WorkerFailedError,
    WorkerTimeoutError,
    free_port,
    launch_local,
    proc_state,
    start_forkserver,
)
from shardgnn.errors import ConfigError

from distributed_helpers import run_workers


# --------------------------------------------------------------------------------- worker functions
def _sum_of_ranks(ctx, offset):
    t = torch.tensor([float(ctx.rank + offset)])
    dist.all_reduce(t)
    return ctx.rank, ctx.world_size, t.item(), torch.get_num_threads()


class _TornDown:
    """Writes its file when destroyed: at the interpreter's teardown, if it comes to that."""

    def __init__(self, path: Path):
        self.path = path

    def __del__(self):
        self.path.write_text("torn down")


_KEPT: list = []


def _finish_with_an_exit_hook(ctx, folder):
    import atexit

    atexit.register(Path(folder, f"rank-{ctx.rank}.hook").write_text, "hook ran")
    _KEPT.append(_TornDown(Path(folder, f"rank-{ctx.rank}.teardown")))
    return ctx.rank


def _exit_hooks_that_end_the_process():
    """The statuses this worker's ``atexit`` hooks would end it with, but the launcher's own
    ending of a finished worker (``os._exit`` caught while they run; they run once, as at the
    worker's end)."""
    import atexit
    import traceback

    ended = []

    def caught(code):
        if all(frame.name != "_end_finished_worker" for frame in traceback.extract_stack()):
            ended.append(code)

    real_exit, os._exit = os._exit, caught
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit = real_exit
    return ended


def _what_a_worker_sees(names):
    """A worker's view of its start: the variables ``names``, its directory, its own processes'
    start method, whether the forkserver forked it, and a setting numba read from the
    environment (numba is imported by the forkserver, in the environment of the first launch)."""
    import multiprocessing

    import numba

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
        forked = b"multiprocessing.forkserver" in fh.read()
    environ = {name: os.environ.get(name) for name in names}
    numba_setting = numba.config.DISABLE_PERFORMANCE_WARNINGS
    return environ, os.getcwd(), multiprocessing.get_start_method(), forked, numba_setting


# The launcher's environment changes between two launches, after the first started the forkserver.
_CHANGING_LAUNCHER = """
import json, os, sys
sys.path.insert(0, sys.argv[2])
from shardgnn.distributed.launch import launch_local
from test_launch import _what_a_worker_sees

os.environ.update(SHARDGNN_TEST_KEPT="first", SHARDGNN_TEST_GONE="first")
launch_local(_what_a_worker_sees, ([],), 1)
os.environ.update(
    SHARDGNN_TEST_KEPT="second", SHARDGNN_TEST_NEW="new", NUMBA_DISABLE_PERFORMANCE_WARNINGS="1"
)
del os.environ["SHARDGNN_TEST_GONE"]
os.chdir(sys.argv[1])
names = ["SHARDGNN_TEST_KEPT", "SHARDGNN_TEST_GONE", "SHARDGNN_TEST_NEW", "RANK", "WORLD_SIZE"]
print(json.dumps(launch_local(_what_a_worker_sees, (names,), 2)))
"""


# Imports what the forkserver imports, noting every question asked of CUDA on the way.
_CUDA_QUESTIONS = """
import sys
QUERIES = {"is_available", "device_count", "_lazy_init", "init", "current_device",
           "get_device_properties", "mem_get_info", "_cuda_getDeviceCount", "_cuda_init"}
asked = []
def note(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", "") in QUERIES:
        asked.append(arg.__name__)
    elif event == "call" and frame.f_code.co_name in QUERIES and "cuda" in frame.f_code.co_filename:
        asked.append(frame.f_code.co_name)
sys.setprofile(note)
import shardgnn.distributed.forkserver
sys.setprofile(None)
import torch
print(asked, torch.cuda.is_initialized())
"""


def _frozen_objects():
    import gc

    gc.collect()  # a worker's full collection: the frozen objects are not in it
    return gc.get_freeze_count()


def _parent_pid():
    return os.getppid()


def _write_pid(pid_dir):
    Path(pid_dir, f"{os.getpid()}.pid").write_text(str(os.getpid()))


def _fail_in_the_first_attempt():
    """Rank 1 raises in the first attempt; in the restart both ranks meet and all-reduce, after
    longer than the watcher's grace for the first attempt's survivors."""
    from shardgnn.distributed.config import FAILURE_GRACE_S
    from shardgnn.distributed.context import init_distributed, shutdown

    ctx = init_distributed(device="cpu", timeout_s=60)
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0 and ctx.rank == 1:
        raise ValueError("the first attempt fails")
    if attempt == 1:
        time.sleep(FAILURE_GRACE_S + 1)
    t = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(t)
    shutdown()
    return attempt, t.item()


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


def _stuck_where_told(ctx, pid_dir):
    """Rank 1 raises; rank 0 hangs inside stage 'compute' (after a nested 'fetch' ended), rank 2
    after its stage 'sample' ended: the launcher kills both and says where each was."""
    from shardgnn.timing import StageTimer

    _write_pid(pid_dir)
    timer = StageTimer()
    with timer("sample"):
        pass
    if ctx.rank != 1:
        # deaf to elastic's SIGTERM, as a worker stuck in native code is: the launcher's SIGKILL
        # ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dist.barrier()  # rank 1 fails only once the others are deaf
    if ctx.rank == 1:
        raise ValueError("boom from rank 1")
    if ctx.rank == 0:
        with timer("compute"):
            with timer("fetch"):
                pass
            threading.Event().wait()
    threading.Event().wait()


def _hang_forever(pid_dir):
    _write_pid(pid_dir)
    threading.Event().wait()


# ------------------------------------------------------------------------------------------ helpers
def _children() -> set[int]:
    """Live processes below this one, except multiprocessing's resource tracker and forkserver
    (one each per parent, started by the first launch and alive until the parent exits; the
    forkserver's children, the workers, count)."""
    alive = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
            server = "multiprocessing.forkserver" in cmdline and proc.ppid() == os.getpid()
            if proc.status() != psutil.STATUS_ZOMBIE and not (
                "resource_tracker" in cmdline or server
            ):
                alive.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _assert_no_orphans(pid_dir: Path, children_before: set[int]) -> None:
    worker_pids = [int(p.read_text()) for p in pid_dir.glob("*.pid")]
    assert worker_pids, "the workers never started"
    assert [pid for pid in worker_pids if psutil.pid_exists(pid)] == []
    assert _children() - children_before == set()


# -------------------------------------------------------------------------------------------- tests
def test_the_stage_board_holds_where_each_worker_last_said_it_was(tmp_path):
    """Each worker writes its slot of a file the launcher maps too (no system call a stage);
    the launcher reads what the worker wrote last, None before it said anything or past the
    slots, a long name cut to the slot."""
    from shardgnn.distributed.launch import STAGE_SLOT_BYTES, StageBoard

    board = StageBoard.create(str(tmp_path / "stages"), 3)
    worker = StageBoard.open(board.path)
    try:
        assert [board.read(slot) for slot in range(3)] == [None, None, None]
        worker.write(1, "in sample")
        worker.write(1, "in fetch")
        worker.write(2, "after compute")
        assert [board.read(slot) for slot in range(3)] == [None, "in fetch", "after compute"]
        worker.write(2, "in " + "x" * 200)
        assert board.read(2) == ("in " + "x" * 200)[: STAGE_SLOT_BYTES - 1]
        worker.write(1, "")  # a restarted worker starts from nowhere
        assert board.read(1) is None and board.read(3) is None and board.read(-1) is None
    finally:
        worker.close()
        board.close()


def test_stage_timer_tells_where_the_main_thread_is():
    from shardgnn.timing import StageTimer, tell_stages_to

    told: list[str] = []
    timer = StageTimer()
    tell_stages_to(told.append)
    try:
        with timer("sample"):
            pass
        with timer("compute"):
            with timer("fetch"):
                pass
            with timer("fetch"):  # back in 'compute' between them: told once each way
                pass
        worker = threading.Thread(target=lambda: timer("lookahead").__enter__())
        worker.start()
        worker.join()  # another thread's stage is not told
        with timer("eval"):
            tell_stages_to(None)  # stops telling mid-stage without confusing a later listener
        tell_stages_to(told.append)
        with timer("embed"):
            pass
    finally:
        tell_stages_to(None)
    assert told == [
        "in sample",
        "after sample",
        "in compute",
        "in fetch",
        "in compute",
        "in fetch",
        "in compute",
        "after compute",
        "in eval",
        "in embed",
        "after embed",
    ]
    assert set(timer.seconds) == {"sample", "compute", "fetch", "lookahead", "eval", "embed"}


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


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world_size", [2, 3])
def test_all_reduce_and_results_in_rank_order(world_size):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    results = run_workers(_sum_of_ranks, world_size, 10)
    total = sum(rank + 10 for rank in range(world_size))
    # Unless the user set OMP_NUM_THREADS, the cores are shared out between the workers.
    cores = len(os.sched_getaffinity(0))
    threads = (
        int(os.environ["OMP_NUM_THREADS"])
        if "OMP_NUM_THREADS" in os.environ
        else max(1, cores // world_size)
    )
    assert results == [(rank, world_size, total, threads) for rank in range(world_size)]
    # elastic installs its own signal handlers; the launcher puts ours back
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


@pytest.mark.slow
@pytest.mark.multiprocess
def test_finished_workers_run_exit_hooks_then_end_without_teardown(tmp_path):
    """A worker that finished hands its result over, runs the ``atexit`` hooks (a user's too),
    then ends without the interpreter's teardown, whose destruction of C++ objects under gloo's
    live threads aborted a finished worker now and then (SIGABRT)."""
    assert run_workers(_finish_with_an_exit_hook, 2, str(tmp_path)) == [0, 1]
    for rank in (0, 1):
        assert (tmp_path / f"rank-{rank}.hook").read_text() == "hook ran"
        assert not (tmp_path / f"rank-{rank}.teardown").exists()  # module teardown never ran


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's")
def test_forked_workers_take_the_launchers_environment_of_each_launch(tmp_path):
    """Workers are forked from a forkserver started by the first launch, whose environment is the
    launcher's of then: each launch's workers see the launcher's environment of that launch (a
    variable changed, one removed, one added, numba's configuration), its directory, elastic's
    own variables, and start their own processes as spawned workers do; the launcher's standard
    error stays empty."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHANGING_LAUNCHER, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # nothing else: not even from the forkserver as it ends after the launcher (the pipe stays
    # open until it has), which once printed triton's report of the objects it had frozen
    assert proc.stderr == ""
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for rank in (0, 1):
        environ, cwd, start_method, forked, numba_setting = seen[str(rank)]
        assert forked and numba_setting == 1
        assert environ == {
            "SHARDGNN_TEST_KEPT": "second",
            "SHARDGNN_TEST_GONE": None,
            "SHARDGNN_TEST_NEW": "new",
            "RANK": str(rank),
            "WORLD_SIZE": "2",
        }
        assert (cwd, start_method) == (str(tmp_path), "spawn")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's")
def test_forked_workers_leave_the_forkservers_imports_out_of_their_collections():
    """The forkserver freezes what its imports made (torch's and the others' hundreds of
    thousands of objects), so a worker's collections do not walk them (a full one took 0.18 s
    otherwise: BENCHMARKS.md section 33)."""
    for frozen in launch_local(_frozen_objects, (), 2).values():
        assert frozen > 100_000


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's")
def test_forked_workers_do_not_inherit_the_forkservers_ending():
    """The forkserver ends without the interpreter's teardown from an ``atexit`` hook; a worker
    forked from it runs its own hooks as it finishes, and must not end at that one (it would skip
    the hooks registered before it and never tell the launcher its status)."""
    assert launch_local(_exit_hooks_that_end_the_process, (), 2) == {0: [], 1: []}


@pytest.mark.slow
def test_the_forkserver_imports_without_asking_about_cuda():
    """What the forkserver imports (torch, torch._dynamo, numba, scipy) never asks about CUDA:
    a device query in the forkserver (``torch.cuda.is_available()`` included) would leave every
    worker forked from it unable to use its GPU."""
    proc = subprocess.run(
        [sys.executable, "-c", _CUDA_QUESTIONS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[] False"


_FORKSERVER_START = """
import multiprocessing.forkserver, sys
from shardgnn.cli import main


def ensure_running():  # where the forkserver would start: say whether torch is here already
    print("torch imported:", "torch" in sys.modules, flush=True)
    raise SystemExit(0)


multiprocessing.forkserver.ensure_running = ensure_running
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's")
@pytest.mark.parametrize(
    "argv",
    [
        ["train", "synthetic:nodes=300", "--workers", "2"],
        ["train", "synthetic:nodes=300", "--partitions", "parts/"],
        ["infer", "--checkpoint", "ckpt/", "--out", "out/"],
    ],
    ids=["train-workers", "train-partitions", "infer"],
)
def test_commands_that_launch_start_the_forkserver_before_they_import_torch(tmp_path, argv):
    """`shardgnn train` with workers and `shardgnn infer` start the forkserver before anything
    imports torch, so that its imports (torch, torch._dynamo, numba, scipy: 2.3 s on a 2-core
    machine) run beside the command's own import of torch, checks and partitioning: the workers
    start that much sooner."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKSERVER_START, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (0, "torch imported: False\n"), done.stderr


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver is Linux's")
def test_launches_fork_from_the_forkserver_started_ahead():
    """``start_forkserver`` (``shardgnn train`` calls it before partitioning) starts the one
    forkserver the launches fork their workers from; with spawn it starts nothing."""
    start_forkserver("spawn")
    start_forkserver()
    servers = [
        proc.pid
        for proc in psutil.Process().children()
        if "multiprocessing.forkserver" in " ".join(proc.cmdline())
    ]
    assert len(servers) == 1
    assert set(launch_local(_parent_pid, (), 2).values()) == set(servers)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_failed_attempt_restarts_the_group_and_its_workers_meet_again():
    """``max_restarts``: elastic restarts the whole group on the same rendezvous store; the
    workers of the restart meet under their attempt's prefix, not the failed attempt's keys, and
    the watcher, which kills a failed attempt's survivors after a grace, leaves them alone."""
    assert launch_local(_fail_in_the_first_attempt, (), 2, max_restarts=1, timeout_s=180) == {
        0: (1, 3.0),
        1: (1, 3.0),
    }


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_port_taken_before_the_rendezvous_binds_it_is_replaced(monkeypatch):
    """``free_port`` found a port free, someone took it before the rendezvous store bound it:
    the launch binds another one instead of failing (or joining whoever holds it)."""
    from shardgnn.distributed import launch

    ports = []

    def free_port_taken_first():
        ports.append(taken.getsockname()[1] if not ports else free_port())
        return ports[-1]

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(launch, "free_port", free_port_taken_first)
        assert launch_local(_parent_pid, (), 1) != {}
    assert len(ports) == 2


@pytest.mark.slow
@pytest.mark.multiprocess
def test_worker_exception_names_rank_and_message(tmp_path):
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        run_workers(_raise_on_rank_1, 2, str(tmp_path), timeout_s=20)
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert (
        "rank 1" in message
        and "ValueError: boom from rank 1: the partition file is corrupt" in message
    )
    assert "_raise_on_rank_1" in message  # traceback excerpt
    first = info.value.failures[0]
    assert (first.rank, first.exitcode) == (1, 1)
    assert first.error.startswith("ValueError: boom from rank 1")
    _assert_no_orphans(tmp_path, before)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("how", "exitcode", "text"),
    [("exit", 3, "exit code 3"), ("sigkill", -signal.SIGKILL, "killed by SIGKILL")],
)
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_hard_death_while_peers_block_in_a_collective(tmp_path, how, exitcode, text, start_method):
    """A worker that ends without an exception, by its own exit or a signal, is named first with
    its exit status, forked (the launcher is not its parent) or spawned."""
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerFailedError) as info:
        run_workers(
            _die_hard_on_rank_1, 2, str(tmp_path), how, timeout_s=20, start_method=start_method
        )
    assert time.monotonic() - start < 60
    # Rank 0 fails too ("Connection closed by peer"), a moment later: rank 1 is named first.
    first = info.value.failures[0]
    assert (first.rank, first.exitcode, first.error) == (1, exitcode, None)
    assert f"rank 1: {text}" in str(info.value)
    _assert_no_orphans(tmp_path, before)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_workers_killed_after_a_peer_failed_say_where_they_were(tmp_path):
    before = _children()
    with pytest.raises(WorkerFailedError) as info:
        run_workers(_stuck_where_told, 3, str(tmp_path), timeout_s=30)
    by_rank = {f.rank: f for f in info.value.failures}
    assert info.value.failures[0].rank == 1
    assert by_rank[1].describe() == "rank 1: exit code 1: ValueError: boom from rank 1"
    assert by_rank[0].describe() == (
        "rank 0: killed by SIGKILL (still running 3 s after a peer failed, in stage 'compute')"
    )
    assert by_rank[2].describe() == (
        "rank 2: killed by SIGKILL (still running 3 s after a peer failed, after stage 'sample')"
    )
    _assert_no_orphans(tmp_path, before)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_deadline_kills_hanging_workers(tmp_path):
    before = _children()
    start = time.monotonic()
    with pytest.raises(WorkerTimeoutError, match="did not finish within timeout_s=8 s"):
        launch_local(_hang_forever, (str(tmp_path),), 2, timeout_s=8)
    assert time.monotonic() - start < 8 + 15
    _assert_no_orphans(tmp_path, before)


# --------------------------------------------------------------------------- python -m shardgnn.run
@pytest.fixture(scope="module")
def small_parts(tmp_path_factory):
    from shardgnn.graph.synthetic import SyntheticConfig, generate
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph

    graph = generate(SyntheticConfig(nodes=300, degree=6, classes=3, features=4, seed=1))
    path = tmp_path_factory.mktemp("run") / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="random"))
    write_partitions(
        graph, result.assignment, path, method=result.method, dataset_spec="synthetic:nodes=300"
    )
    return str(path)


def test_run_builds_the_config_from_train_arguments(small_parts):
    from shardgnn.run import worker_config

    config = worker_config(
        [
            "train",
            "--partitions",
            small_parts,
            "--epochs",
            "3",
            "--fanouts",
            "5,5",
            "--overlap",
            "off",
            "--timeout",
            "30",
        ]
    )
    assert (config.optim.epochs, config.sampler.fanouts, config.model.num_layers) == (3, (5, 5), 2)
    assert (config.run.partitions, config.run.overlap, config.run.timeout, config.run.workers) == (
        small_parts,
        "off",
        30.0,
        2,
    )
    # what the partition holds, not the default dataset
    assert config.dataset == "synthetic:nodes=300"


# @record vs. pytest's captured stderr
@pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
def test_run_refuses_what_a_worker_cannot_run(small_parts, capsys):
    from shardgnn.run import main, worker_config

    with pytest.raises(ConfigError, match="--partitions DIR"):
        worker_config(["train", "synthetic"])
    with pytest.raises(ConfigError, match="holds synthetic:nodes=300.*, not cora"):
        worker_config(["train", "cora", "--partitions", small_parts])
    assert main(["train", "--partitions", small_parts, "--layers", "3", "--fanouts", "5,5"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("shardgnn train: error: --layers 3 but --fanouts 5,5 names 2")
        and err.count("\n") == 1
    )
    with pytest.raises(SystemExit) as info:
        main(["info"])
    assert info.value.code == 2


def test_the_default_collective_timeout_ends_a_stalled_job_within_60_s():
    from shardgnn.cli import build_parser
    from shardgnn.cli.flags import config_from_args
    from shardgnn.distributed.config import DEFAULT_TIMEOUT_S
    from shardgnn.train.config import TrainConfig

    args = build_parser().parse_args(["train", "--workers", "2"])
    assert config_from_args(TrainConfig, args).run.timeout == DEFAULT_TIMEOUT_S <= 45.0


def test_elastic_error_file_is_written_whole_and_once(tmp_path, monkeypatch):
    """A failed worker's error file is renamed into place (never seen half-written by the agent,
    which died parsing an empty one when a SIGTERM cut elastic's in-place write), parses as
    elastic's ``ProcessFailure`` expects, and ``record`` is left no name to write it again."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from shardgnn.distributed.launch import record_elastic_error

    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    try:
        raise RuntimeError("collective failed: peer closed")
    except RuntimeError as exc:
        record_elastic_error(exc)
    assert "TORCHELASTIC_ERROR_FILE" not in os.environ
    assert [p.name for p in tmp_path.iterdir()] == ["error.json"]  # no temporary file left
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=str(path))
    assert failure.message["message"] == "RuntimeError: collective failed: peer closed"
    assert "raise RuntimeError" in failure.error_file_data["message"]["extraInfo"]["py_callstack"]


def test_stopped_watch_counts_only_an_unbroken_stop():
    watch = StoppedWatch(limit_s=3.0)
    assert watch.overdue({1: "T", 2: "S", 3: "t"}, now=0.0) == []
    assert watch.overdue({1: "T", 2: "T", 3: "t"}, now=1.0) == []
    assert watch.overdue({1: "T", 2: "R", 3: "t"}, now=2.0) == []  # 2 continued: starts over
    assert watch.overdue({1: "T", 2: "T", 3: "t"}, now=3.0) == [(1, 3.0)]  # t: a debugger's stop
    assert watch.overdue({1: "T", 2: "T", 3: "t"}, now=4.0) == []  # reported once
    assert watch.overdue({2: "T"}, now=5.0) == []
    # A look 10 s after the last (the watcher itself was suspended with the job): nobody is
    # known to have been stopped while it ran, so every count starts over.
    assert watch.overdue({2: "T"}, now=15.0) == []
    assert watch.overdue({2: "T"}, now=17.0) == []
    assert watch.overdue({2: "T"}, now=18.0) == [(2, 3.0)]


def test_proc_state_reads_a_stopped_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # a child still starting may be waiting for the disk (D: it read python's files while the
        # suite loaded the machine, seen once); every state but a stop is "not stopped" here
        assert proc_state(child.pid) in ("R", "S", "D")
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while proc_state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc_state(child.pid) == "T"
    finally:
        child.kill()
        child.wait()
    assert proc_state(child.pid) is None
