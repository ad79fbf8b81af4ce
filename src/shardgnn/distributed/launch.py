"""Start N worker processes on this machine with PyTorch's elastic launcher, and report failures
well.

``shardgnn train --workers N`` and the multi-process tests go through :func:`launch_local`. It is
``torchrun`` for one machine, as a function: PyTorch's elastic agent (``elastic_launch``) runs in
the calling process, hosts a static rendezvous (one node: the caller) on
``127.0.0.1:<free port>``, starts the workers with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/
``MASTER_ADDR``/``MASTER_PORT`` set (read by :func:`shardgnn.distributed.context.init_distributed`,
nowhere else) and collects their return values. Several machines use ``torchrun`` and
:mod:`shardgnn.run` instead.

On Linux the workers are forked from multiprocessing's **forkserver**, which imports torch (with
``torch._dynamo``, which DDP's constructor imports), numba and scipy once and freezes their
objects out of the garbage collector's sight
(:data:`~shardgnn.distributed.start_method.FORKSERVER_PRELOAD`), ignores the stop signals the
launcher forwards, and lives as long as the calling process: a worker then starts in a fraction of
a second instead of paying those imports itself (a second or more each, and on a
2-core machine N of them in turn).
A forked worker takes the launcher's environment and standard output and error of the moment of
the launch (not the forkserver's, which are those of the first launch), its working directory and
``sys.path``, as a spawned one does. Elsewhere, and with ``start_method="spawn"``, workers are
spawned.

What this module adds to ``elastic_launch``:

* **The first failure, named.** When one rank dies, its peers fail within milliseconds ("Connection
  closed by peer"), and elastic's monitor, which polls every ``MONITOR_INTERVAL_S``, reports
  whichever dead worker it sees first in rank order, so the root cause can be a victim. Each worker
  registers with a watcher thread over a local socket, says so on it when it raises, and keeps the
  connection open until it exits; the kernel closes it however the process ends. The
  :class:`WorkerFailedError` lists the failed ranks in the order the watcher saw them fail, first
  one first, with exit code or signal, the exception message and a traceback excerpt of the first
  one from elastic's per-rank error files.
* **A deadline.** ``timeout_s`` bounds the whole launch: the watcher SIGKILLs every registered
  worker when it passes (a worker can hang where no collective timeout reaches it), and the
  launch raises :class:`WorkerTimeoutError`.
* **No stopped worker left waiting.** With ``stopped_timeout_s`` the watcher SIGKILLs a worker
  that has been stopped (SIGSTOP, SIGTSTP: state ``T``) that long, and the launch fails naming
  it. Among several workers a peer's collective timeout ends such a job anyway; a lone worker has
  no peer, and without this it would wait for ever.
* **No orphans.** Elastic stops the other workers after a failure. On Linux each worker also asks
  the kernel to SIGKILL it if its parent dies (``PR_SET_PDEATHSIG``): the launcher, or the
  forkserver, which exits when the launcher does, so a launcher killed with ``kill -9`` leaves no
  workers behind.
* **No oversubscription.** Unless the user set ``OMP_NUM_THREADS``, each worker gets
  ``max(1, cores // nprocs)`` torch threads. By default every process sizes its OpenMP pool to all
  cores; N workers on a 2-core machine would then run 2N busy threads on 2 cores, and OpenMP
  threads spinning at barriers while descheduled make every parallel op slower, not faster.
* **Errors a person can read.** A worker that raises writes its full traceback to
  ``rank-<R>.log`` in the launch's log folder and its message to ``rank-<R>.error.json``;
  :meth:`WorkerFailedError.summary` turns the first failure into the one line a single process
  would print, plus the log's path. Elastic's own log lines (per-rank tracebacks, SIGTERM notices)
  go to ``launcher.log`` in the same folder instead of the console. The folder is ``log_dir``
  when given; otherwise a temporary folder, removed after a successful launch and kept after a
  failed one.
* **No side effects on the caller.** Elastic installs SIGTERM/SIGINT/SIGHUP/SIGQUIT handlers in the
  main thread and never removes them; they are restored when the launch returns, and so is the
  configuration of elastic's logger.

POSIX only. The watcher need not be a worker's parent (the forkserver is): a worker says its exit
status on its connection just before it ends; one that ends without saying so (a signal, a crash
in native code, ``os._exit``) is a failure the moment its connection closes, and its exit status
is read afterwards from the process object elastic started it with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hmac
import json
import logging
import math
import mmap
import multiprocessing
import multiprocessing.process
import multiprocessing.reduction
import multiprocessing.util
import os
import pickle
import secrets
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.utils import macros
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from shardgnn.distributed.comm import CollectiveError
from shardgnn.distributed.config import DEFAULT_STOP_GRACE_S, FAILURE_GRACE_S
from shardgnn.distributed.oom import OomWatch, memory_limit_hint
from shardgnn.distributed.start_method import (
    START_METHODS,
    default_start_method,
    preload_forkserver,
    start_forkserver,
)
from shardgnn.errors import REQUEUE_EXIT_CODE, OutOfMemory, Preempted, ShardgnnError
from shardgnn.exiting import end_process
from shardgnn.timing import tell_stages_to

__all__ = [
    "START_METHODS",
    "RankFailure",
    "WorkerFailedError",
    "WorkerPreemptedError",
    "WorkerStoppedError",
    "WorkerTimeoutError",
    "free_port",
    "launch_local",
    "start_forkserver",
]

MONITOR_INTERVAL_S = 0.1
"""How often elastic's agent polls its workers: how long after a worker ends the launch notices
the end or the failure. Elastic's default (torchrun's ``--monitor-interval``): a poll is one
non-blocking wait on N local processes; 0.5 s made every launch 0.25-0.5 s longer (BENCHMARKS.md,
"Worker start-up")."""

_HANDLED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
"""The signals elastic's agent turns into a stop of the workers; it forwards the signal itself, so
a worker sees SIGTERM or SIGUSR1 (preemption: checkpoint, exit) as the launcher did."""

_PORT_ATTEMPTS = 3  # a free port can be taken by someone else before the rendezvous store binds it
# torchrun's variables: a forked worker's values are elastic's, whatever the launcher's environment
_TORCHRUN_ENV = frozenset(
    ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")
    + ("ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
)
# A process that dies without raising may close its connections to its peers a few milliseconds
# before its connection to the watcher (the kernel closes them in no promised order; 3 ms seen on
# Linux 6.x), so a peer's "raised" can reach the watcher first. Such a death is dated this much
# earlier than seen. A peer's echo is an exception, never a death without one (except the
# launcher's own SIGTERM, which is not advanced).
_SILENT_DEATH_LEAD_S = 0.1
_STOPPED_POLL_S = 1.0  # how often the watcher reads the workers' states, with stopped_timeout_s


# ------------------------------------------------------------------------------------------- errors
@dataclasses.dataclass(frozen=True)
class RankFailure:
    """How one worker ended in a failed launch.

    Attributes:
        rank: the worker's global rank.
        exitcode: exit status; negative for "killed by signal ``-exitcode``"; ``None`` if unknown.
        error: ``"ExceptionType: message"`` if the worker raised, else ``None``.
        traceback: the worker's Python traceback if it raised, else ``None``.
        message: the exception's message alone (``str(exc)``), if the worker raised.
        user_error: the worker raised a :class:`~shardgnn.errors.ShardgnnError` (bad input or
            settings, fixable by the user, as opposed to a crash or a failed peer).
        log_file: the worker's log with its full traceback, if it was written.
        killed_by_launcher: it was still running ``FAILURE_GRACE_S`` after a peer failed, and the
            launcher SIGKILLed it (stopped, stuck in native code, or not yet at a collective).
        stopped_s: the launcher SIGKILLed it after it had been stopped (SIGSTOP, SIGTSTP) this many
            seconds, longer than ``stopped_timeout_s`` (None: not for that).
        oom: for a SIGKILL the launcher did not send, the kernel's out-of-memory killer's part in
            it, as read from the kernel log or the memory cgroup (None: no evidence).
        where: where its main thread was when it ended, as it last told the launcher:
            ``"in <stage>"`` or ``"after <stage>"`` of :class:`~shardgnn.timing.StageTimer`'s
            stages (None: it entered none).
    """

    rank: int
    exitcode: int | None
    error: str | None = None
    traceback: str | None = None
    message: str | None = None
    user_error: bool = False
    log_file: str | None = None
    killed_by_launcher: bool = False
    oom: str | None = None
    stopped_s: float | None = None
    where: str | None = None

    @property
    def signal_name(self) -> str | None:
        if self.exitcode is None or self.exitcode >= 0:
            return None
        try:
            return signal.Signals(-self.exitcode).name
        except ValueError:
            return f"signal {-self.exitcode}"

    @property
    def stage(self) -> str | None:
        """``"in stage 'fetch'"`` or ``"after stage 'sample'"``: where it was, as it last told
        (None: it told nothing)."""
        if self.where is None:
            return None
        position, _, stage = self.where.partition(" ")
        return f"{position} stage '{stage}'"

    def describe(self, *, killed_by_deadline: bool = False) -> str:
        """One line: rank, how it ended, and the exception message if there was one; for a worker
        that ended without one, where it was (it could not say so itself)."""
        where = f", {self.stage}" if self.stage is not None and not self.error else ""
        if self.exitcode is None:
            how = ("raised" if self.error else "ended (exit status not observed)") + where
        elif self.exitcode < 0:
            how = f"killed by {self.signal_name}"
            if killed_by_deadline and self.exitcode == -signal.SIGKILL:
                how += f" (deadline{where})"
            elif self.stopped_s is not None and self.exitcode == -signal.SIGKILL:
                how = (
                    f"stopped (SIGSTOP or SIGTSTP) and not continued for {self.stopped_s:.0f} s, "
                    f"past the timeout: killed by the launcher{where}"
                )
            elif self.killed_by_launcher and self.exitcode == -signal.SIGKILL:
                how += f" (still running {FAILURE_GRACE_S:g} s after a peer failed{where})"
            elif self.exitcode == -signal.SIGKILL and self.oom:
                how += f": {self.oom}{where}"
            elif self.exitcode == -signal.SIGKILL:
                how += (
                    " (not by the launcher, nor by the kernel's OOM killer as far as the kernel "
                    f"log and the memory cgroup show: by another process){where}"
                )
            else:
                how += where
        else:
            how = f"exit code {self.exitcode}"
        text = f"rank {self.rank}: {how}"
        if self.error:
            first_line = self.error.strip().splitlines()[0] if self.error.strip() else self.error
            text += f": {first_line[:300]}"
        elif self.exitcode is not None and self.exitcode > 0:
            text += (
                " without a Python exception (os._exit, sys.exit, or a crash in native code)"
                + where
            )
        return text


class WorkerFailedError(RuntimeError):
    """One or more workers of a :func:`launch_local` run failed; the others were stopped.

    Attributes:
        failures: every worker that ended abnormally, in the order they exited (first = root
            cause, as far as the launcher could observe it).
        log_dir: the launch's log folder (per-rank logs and ``launcher.log``), kept after a failure.
    """

    timed_out = False

    def __init__(
        self,
        failures: list[RankFailure],
        *,
        nprocs: int,
        log_dir: str | None = None,
        timeout_s: float | None = None,
    ):
        self.failures = failures
        self.nprocs = nprocs
        self.log_dir = log_dir
        self.timeout_s = timeout_s
        super().__init__(self._format())

    def _headline(self) -> str:
        if not self.failures:
            return f"a worker of {self.nprocs} failed (no details were recorded)"
        first = self.failures[0]
        return (
            f"worker rank {first.rank} of {self.nprocs} failed first; "
            f"{len(self.failures)} worker(s) ended abnormally"
        )

    def _format(self) -> str:
        lines = [self._headline()]
        lines += ["  " + f.describe(killed_by_deadline=self.timed_out) for f in self.failures]
        # the root cause's; the others are its echoes
        if self.failures and self.failures[0].traceback:
            first = self.failures[0]
            excerpt = first.traceback.rstrip().splitlines()[-15:]
            lines.append(f"traceback of rank {first.rank} (last {len(excerpt)} lines):")
            lines += ["    " + line for line in excerpt]
        if self.log_dir:
            lines.append(f"worker logs: {self.log_dir}")
        return "\n".join(lines)

    @property
    def user_error(self) -> bool:
        """The first failure was a user error (bad input or settings) rather than a crash."""
        return bool(self.failures) and self.failures[0].user_error

    def summary(self, command: str) -> str:
        """What the command line prints: one line naming the root cause and its rank, as a
        single process would print the same error, and one line saying where the details are."""
        if not self.failures:
            cause = self._headline()
        else:
            first = self.failures[0]
            if first.message is not None:
                text = first.message.strip() or first.error or "an exception without a message"
                cause = (
                    text if first.user_error else f"{(first.error or '').split(':', 1)[0]}: {text}"
                )
                same = [f.rank for f in self.failures if f.message == first.message]
                where = (
                    f"rank {first.rank}"
                    if len(same) == 1
                    else f"ranks {', '.join(map(str, sorted(same)))}"
                )
                # The rank goes on the first line, which names the problem (a "fix:" line may
                # follow).
                head, newline, rest = cause.partition("\n")
                cause = f"{head} ({where}){newline}{rest}"
            else:
                how = first.describe(killed_by_deadline=self.timed_out)
                cause = f"worker {how}; the job was stopped"
            stalled = [f for f in self.failures[1:] if f.killed_by_launcher]
            waited = (first.error or "").lower()
            if stalled and ("collectiveerror" in waited or "timed out" in waited):
                # The peers timed out waiting for it and it never failed by itself: it was stopped
                # (SIGSTOP), stuck in native code, or hung; name it, and where it was, before the
                # symptom.
                ranks = ", ".join(
                    f"{f.rank} {f.stage}" if f.stage is not None else str(f.rank) for f in stalled
                )
                cause = (
                    f"worker {'rank' if len(stalled) == 1 else 'ranks'} {ranks} stalled (no answer "
                    f"within the collective timeout; killed): {cause}"
                )
        detail = None
        if self.failures and self.failures[0].log_file:
            detail = f"  full traceback: {self.failures[0].log_file}"
        elif self.log_dir:
            detail = f"  worker logs: {self.log_dir}"
        return f"shardgnn {command}: error: {cause}" + (f"\n{detail}" if detail else "")


class WorkerPreemptedError(WorkerFailedError):
    """The workers stopped on a stop signal (SIGTERM, SIGUSR1) after the same step and exited
    with :data:`~shardgnn.errors.REQUEUE_EXIT_CODE`; ``message`` says what rank 0 saved."""

    def __init__(self, message: str, *, nprocs: int, log_dir: str | None = None):
        self.message = message
        super().__init__([], nprocs=nprocs, log_dir=log_dir)

    def _format(self) -> str:
        return self.message

    def summary(self, command: str) -> str:
        return f"shardgnn {command}: {self.message}"


class WorkerStoppedError(WorkerFailedError):
    """This launcher received a stop signal (SIGTERM, SIGUSR1...) and the workers ended without
    saving a step at it (they had finished, had no time within the grace, or do not handle it).

    Attributes:
        signum: the signal; a shell reports such an exit as ``128 + signum``.
    """

    def __init__(self, signum: int, *, nprocs: int, log_dir: str | None = None):
        self.signum = signum
        super().__init__([], nprocs=nprocs, log_dir=log_dir)

    def _format(self) -> str:
        return (
            f"stopped by {signal.Signals(self.signum).name}: the {self.nprocs} workers were "
            "stopped without a checkpoint at the stop"
        )

    def summary(self, command: str) -> str:
        return f"shardgnn {command}: {self._format()}"


class WorkerTimeoutError(WorkerFailedError):
    """The launch passed its ``timeout_s`` deadline; every worker was killed."""

    timed_out = True

    def _headline(self) -> str:
        return (
            f"the {self.nprocs} workers did not finish within timeout_s={self.timeout_s:g} s; "
            "the launcher killed them"
        )


# --------------------------------------------------------------------------------------- public API
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it: bind to port 0).

    Another process can take it before it is used; :func:`launch_local` retries with a new port
    when that happens.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_local(
    entrypoint: Callable[..., Any],
    args: tuple = (),
    nprocs: int = 1,
    *,
    timeout_s: float | None = None,
    max_restarts: int = 0,
    log_dir: str | os.PathLike | None = None,
    stop_grace_s: float = DEFAULT_STOP_GRACE_S,
    stopped_timeout_s: float | None = None,
    start_method: str | None = None,
) -> dict[int, Any]:
    """Run ``entrypoint(*args)`` in ``nprocs`` new processes on this machine; return ``{rank:
    value}``.

    Each process has the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT``), so ``entrypoint`` typically starts with
    ``init_distributed(...)``. Processes are forked from a forkserver (Linux) or spawned, so
    ``entrypoint`` must be a module-level function and ``args`` and the return values must be
    picklable.

    Args:
        entrypoint: module-level function run by every worker.
        args: positional arguments, the same for every worker.
        nprocs: number of workers (the world size).
        timeout_s: deadline for the whole launch, start-up included; when it passes every worker
            is killed and :class:`WorkerTimeoutError` is raised. ``None``: no deadline (collective
            timeouts inside the workers still turn a dead peer into an error).
        max_restarts: how many times elastic restarts the whole worker group after a failure.
        log_dir: the folder for per-rank logs and elastic's files (default: a temporary folder,
            removed after success and kept after a failure, named in the error).
        stop_grace_s: when this process receives SIGTERM or SIGUSR1, the workers receive it too
            and have this long to stop (after a step, with a checkpoint) before SIGKILL.
        stopped_timeout_s: a worker stopped (SIGSTOP, SIGTSTP) this long is SIGKILLed and the
            launch fails naming it (Linux: read from ``/proc``). ``None``: stopped workers are not
            watched. ``shardgnn train`` and ``infer`` pass their collective ``--timeout``.
        start_method: ``"forkserver"`` (the default on Linux with pidfds: workers forked from a
            process that has imported torch once) or ``"spawn"`` (the default elsewhere: each
            worker a fresh interpreter).

    Raises:
        WorkerFailedError: a worker raised, exited non-zero or was killed; the message names the
            first failed rank, its exit code or signal and its exception with a traceback excerpt.
        WorkerTimeoutError: ``timeout_s`` passed.
        WorkerPreemptedError: a stop signal ended the run after a checkpoint (the workers raised
            :class:`~shardgnn.errors.Preempted`).
        TypeError: ``entrypoint`` or ``args`` cannot be pickled.
        KeyboardInterrupt: Ctrl-C; the workers were stopped.
    """
    if nprocs < 1:
        raise ValueError(f"nprocs={nprocs} must be >= 1")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s} must be > 0 (or None for no deadline)")
    if stopped_timeout_s is not None and not stopped_timeout_s > 0:
        raise ValueError(f"stopped_timeout_s={stopped_timeout_s} must be > 0 (or None)")
    if max_restarts < 0:
        raise ValueError(f"max_restarts={max_restarts} must be >= 0")
    start_method = default_start_method() if start_method is None else start_method
    if start_method not in START_METHODS:
        raise ValueError(f"start_method={start_method!r} must be one of {START_METHODS}")
    payload = _pickle_payload(entrypoint, args)
    if start_method == "forkserver":
        preload_forkserver()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    log_root = tempfile.mkdtemp(prefix="shardgnn-logs-") if log_dir is None else os.fspath(log_dir)
    os.makedirs(log_root, exist_ok=True)
    succeeded = False
    board = StageBoard.create(os.path.join(log_root, "worker-stages"), nprocs)
    try:
        with (
            _WorkerWatch(deadline, stopped_timeout_s) as watch,
            _restore_signal_handlers(),
            _elastic_log_to(log_root),
        ):
            worker_args = (
                macros.local_rank,
                watch.address,
                watch.token,
                payload,
                _threads_per_worker(nprocs),
                os.getpid(),
                log_root,
                board.path,
                # a forked worker's environment and output are the forkserver's: it takes these
                _LauncherState.now() if start_method == "forkserver" else None,
            )
            signalled: SignalException | None = None
            for attempt in range(_PORT_ATTEMPTS):
                config = _launch_config(
                    nprocs,
                    max_restarts,
                    os.path.join(log_root, "elastic"),
                    stop_grace_s,
                    start_method,
                )
                try:
                    results = dict(
                        sorted(elastic_launch(config, _worker_main)(*worker_args).items())
                    )
                    succeeded = True
                    return results
                except torch.distributed.DistNetworkError as exc:
                    # Raised before any worker starts when the rendezvous store cannot bind its
                    # port (taken since free_port() found it free): try another port.
                    if "EADDRINUSE" not in str(exc) or attempt + 1 == _PORT_ATTEMPTS:
                        raise
                except ChildFailedError as exc:
                    failed, run_id = exc, config.run_id
                    break
                except SignalException as exc:  # elastic has stopped the workers already
                    if exc.sigval == signal.SIGINT:
                        raise KeyboardInterrupt from exc
                    # SIGTERM / SIGUSR1: the workers got it too; did they stop with a checkpoint?
                    failed, run_id, signalled = None, config.run_id, exc
                    break
        # The watcher has stopped: its record of who exited when is final.
        preempted = _preempted_message(log_root, watch.token, watch.records)
        if preempted is not None:
            raise WorkerPreemptedError(preempted, nprocs=nprocs, log_dir=log_root) from None
        if failed is None:
            assert signalled is not None
            raise WorkerStoppedError(
                int(signalled.sigval), nprocs=nprocs, log_dir=log_root
            ) from None
        error_cls = WorkerTimeoutError if watch.timed_out else WorkerFailedError
        failures = _collect_failures(failed, watch, log_root, run_id, board)
        raise error_cls(failures, nprocs=nprocs, log_dir=log_root, timeout_s=timeout_s) from None
    finally:
        board.close()
        if succeeded and log_dir is None:
            shutil.rmtree(log_root, ignore_errors=True)


# the launcher's console noise
_TORCH_LOGGERS = ("torch.distributed.elastic", "torch.multiprocessing")


@contextlib.contextmanager
def _elastic_log_to(log_root: str) -> Iterator[None]:
    """Send the log records of elastic and of torch's process starter (their copies of worker
    tracebacks, SIGTERM notices) to ``launcher.log`` instead of the console; restore the loggers
    afterwards."""
    handler = logging.FileHandler(os.path.join(log_root, "launcher.log"), delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in _TORCH_LOGGERS]
    saved = [(list(logger.handlers), logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        handler.close()
        for logger, (handlers, propagate, level) in zip(loggers, saved):
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(level)


# ------------------------------------------------------------------------------------ launcher side
def _pickle_payload(entrypoint: Callable[..., Any], args: tuple) -> bytes:
    """Pickle ``(entrypoint, args)`` now, so a bad argument fails here with a clear message instead
    of in every child; the workers unpickle it only after setting their thread count, so modules
    imported by the unpickling already see ``OMP_NUM_THREADS``."""
    try:
        return pickle.dumps((entrypoint, tuple(args)))
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise TypeError(
            f"launch_local starts workers in new processes: the entrypoint {entrypoint!r} must be "
            f"a module-level function and its arguments picklable ({exc})"
        ) from exc


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _threads_per_worker(nprocs: int) -> int | None:
    """Torch threads per worker: the cores this process may use, shared out; ``None`` when the user
    set ``OMP_NUM_THREADS`` (workers inherit it and elastic forwards it)."""
    if "OMP_NUM_THREADS" in os.environ:
        return None
    return max(1, available_cores() // nprocs)


def _launch_config(
    nprocs: int, max_restarts: int, log_root: str, stop_grace_s: float, start_method: str
) -> LaunchConfig:
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=uuid.uuid4().hex,  # fresh: rendezvous keys are namespaced by it
        role="shardgnn",
        # One node, so a static rendezvous (torchrun's with --master-port): this agent, node rank 0,
        # hosts the store and binds its port or fails (never connects to whatever took the port).
        # c10d's dynamic rendezvous, meant for nodes that come and go, first sleeps a random
        # 0-0.3 s to spread many nodes' joins. A restart (max_restarts) keeps the store; workers
        # of each attempt meet under their own prefix (TORCHELASTIC_RESTART_COUNT).
        rdzv_backend="static",
        rdzv_endpoint=f"127.0.0.1:{free_port()}",
        rdzv_configs={"rank": 0},
        max_restarts=max_restarts,
        monitor_interval=MONITOR_INTERVAL_S,
        start_method=start_method,
        logs_specs=DefaultLogsSpecs(log_dir=log_root),
        **supported_fields(
            LaunchConfig,
            # local_addr: MASTER_ADDR for the workers; unset, elastic uses socket.getfqdn(),
            # which may not resolve inside containers.
            local_addr="127.0.0.1",
            # SIGTERM / SIGUSR1 to the launcher: the workers get the same signal and this long to
            # finish their step and save a checkpoint (a torch without the field: its fixed 30 s).
            shutdown_timeout=max(1, math.ceil(stop_grace_s)),
            # a torch without the field forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT only
            signals_to_handle=_HANDLED_SIGNALS,
        ),
    )


def supported_fields(cls: type, **optional: Any) -> dict[str, Any]:
    """The keywords of ``optional`` that dataclass ``cls`` has fields for. Elastic's
    ``LaunchConfig`` gains fields between torch releases (``signals_to_handle``,
    ``shutdown_timeout`` is in 2.13 and not in 2.11); pyproject allows torch >= 2.3, so a field
    newer than that is passed only where the installed torch has it."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in optional.items() if k in names}


_ELASTIC_SIGNALS = tuple(
    getattr(signal, name) for name in _HANDLED_SIGNALS.split(",") if hasattr(signal, name)
)


@contextlib.contextmanager
def _restore_signal_handlers() -> Iterator[None]:
    """Undo elastic's process-wide changes when the launch ends.

    ``PContext.start`` installs handlers for SIGTERM/SIGINT/SIGHUP/SIGQUIT (they turn the signal
    into a ``SignalException`` so the agent can stop its workers) and never removes them: after a
    launch, Ctrl-C would no longer raise ``KeyboardInterrupt``. ``launch_agent`` also sets
    ``TORCHELASTIC_SIGNALS_TO_HANDLE`` in ``os.environ``.
    """
    env_key = "TORCHELASTIC_SIGNALS_TO_HANDLE"
    saved_env = os.environ.get(env_key)
    in_main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in _ELASTIC_SIGNALS} if in_main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed from C, cannot be restored from Python
                signal.signal(sig, handler)
        if saved_env is None:
            os.environ.pop(env_key, None)
        else:
            os.environ[env_key] = saved_env


@dataclasses.dataclass
class _WorkerRecord:
    """One registered worker process, as the watcher saw it."""

    attempt: int  # elastic's restart count
    local_rank: int
    pid: int
    raised_time: float | None = None  # watcher's clock when the worker said it raised
    raised_stamp: float = 0.0  # the worker's time.time() when it raised
    exit_time: float | None = None  # watcher's clock when its connection closed (the process ended)
    exitcode: int | None = None  # as the worker said before it ended
    status_known: bool = False  # it said so (a worker killed by a signal says nothing)
    pidfd: int | None = None  # signals this process and no other, even once its pid is reused
    # elastic's process object for it: its exit status once the launch is over
    process: multiprocessing.process.BaseProcess | None = None
    killed_by_watcher: bool = False  # still running FAILURE_GRACE_S after a peer failed
    oom: str | None = None  # evidence that the OOM killer sent its SIGKILL
    stopped_s: float | None = None  # killed by the watcher after being stopped this long


@dataclasses.dataclass
class _Connection:
    buffer: bytes = b""
    record: _WorkerRecord | None = None


class _WorkerWatch:
    """A background thread that knows every worker of one launch: when it exited, with which status.

    Each worker connects to a listening socket at start-up, sends ``token attempt local_rank pid``,
    sends ``raised <time>`` if its entrypoint raises and ``exit <status>`` just before it ends,
    and keeps the connection open, as a bare file descriptor, until the process ends; the kernel
    closes it however the process ends, so end-of-file here dates the exit, and an end-of-file
    without ``exit`` is a death (a signal, a crash in native code). The token keeps other local
    processes from registering pids. When the deadline passes the watcher SIGKILLs every live
    worker, and any that registers later; with ``stopped_timeout_s`` it reads each live worker's
    state every ``_STOPPED_POLL_S`` and SIGKILLs one stopped that long.
    """

    def __init__(self, deadline: float | None, stopped_timeout_s: float | None = None):
        self.token = secrets.token_hex(16)
        self._stopped = None if stopped_timeout_s is None else StoppedWatch(stopped_timeout_s)
        self.timed_out = False
        self._kill_at: float | None = None  # set when the first worker of an attempt fails
        self._failed_attempt = -1  # the latest attempt (elastic's restart count) with a failure
        self._oom = OomWatch.start()
        self.records: list[_WorkerRecord] = []
        self._deadline = deadline
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "stop")
        self._thread = threading.Thread(target=self._run, name="shardgnn-launch-watch", daemon=True)

    def __enter__(self) -> _WorkerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._wake_w.send(b"x")
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._wake_w.close()
        for record in self.records:
            if record.pidfd is not None:
                os.close(record.pidfd)
                record.pidfd = None

    # -------------------------------------------------------------------------- the loop
    def _run(self) -> None:
        while True:
            now = time.monotonic()
            timeouts = []
            if self._deadline is not None:
                timeouts.append(max(0.0, self._deadline - now))
            if self._kill_at is not None and self._kill_at != math.inf:
                timeouts.append(max(0.0, self._kill_at - now))
            if self._stopped is not None and self.records:
                timeouts.append(_STOPPED_POLL_S)
            events = self._selector.select(min(timeouts) if timeouts else None)
            now = time.monotonic()  # one timestamp for every exit seen in this wake-up
            for key, _ in events:
                if key.data == "stop":
                    return
                if key.data == "accept":
                    self._accept()
                else:
                    record = self._read(key, now)
                    if record is not None and not record.status_known:
                        self._died(record)
            if self._stopped is not None:
                self._kill_stopped(now)
            failed = max((r.attempt for r in self.records if self._failed(r)), default=-1)
            if failed > self._failed_attempt:
                self._failed_attempt = failed
                self._kill_at = time.monotonic() + FAILURE_GRACE_S
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                # A peer failed; whoever still runs is stuck (stopped, in native code, or in a
                # collective that has not timed out yet): end the job now, not after elastic's 30 s.
                # Not the workers of a later attempt (max_restarts): elastic restarted the group.
                self._kill_at = math.inf
                for record in self.records:
                    if record.exit_time is None and record.attempt <= self._failed_attempt:
                        record.killed_by_watcher = True
                        _kill_worker(record)
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._deadline = None
                self.timed_out = True
                for record in self.records:
                    if record.exit_time is None:
                        _kill_worker(record)

    def _kill_stopped(self, now: float) -> None:
        assert self._stopped is not None
        live = {r.pid: r for r in self.records if r.exit_time is None and r.stopped_s is None}
        states = {pid: proc_state(pid) for pid in live}
        for pid, stopped_s in self._stopped.overdue(states, now):
            live[pid].stopped_s = stopped_s
            _kill_worker(live[pid])

    @staticmethod
    def _failed(record: _WorkerRecord) -> bool:
        """The worker raised, said it exits with a status other than 0, or ended without saying
        (a worker that returned exits 0 while its peers still work)."""
        if record.raised_time is not None:
            return True
        if record.status_known:
            return record.exitcode != 0
        return record.exit_time is not None

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            conn, _ = self._listener.accept()
            conn.setblocking(False)
            self._selector.register(conn, selectors.EVENT_READ, _Connection())

    def _read(self, key: selectors.SelectorKey, now: float) -> _WorkerRecord | None:
        """Handle data or end-of-file on a worker connection; return the record of a worker that
        exited."""
        conn: socket.socket = key.fileobj  # type: ignore[assignment]
        state: _Connection = key.data
        try:
            data = conn.recv(256)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if data:
            state.buffer += data
            while b"\n" in state.buffer:
                line, state.buffer = state.buffer.split(b"\n", 1)
                if state.record is None:
                    state.record = self._register(line)
                    if state.record is None:  # not one of ours
                        self._drop(conn)
                        return None
                elif line.startswith(b"raised ") and state.record.raised_time is None:
                    state.record.raised_time = now
                    with contextlib.suppress(ValueError, IndexError):
                        state.record.raised_stamp = float(line.split()[1])
                elif line.startswith(b"exit "):
                    with contextlib.suppress(ValueError, IndexError):
                        state.record.exitcode = int(line.split()[1])
                        state.record.status_known = True
            if len(state.buffer) > 1024:
                self._drop(conn)
            return None
        self._drop(conn)
        if state.record is not None:
            state.record.exit_time = now
        return state.record

    def _register(self, line: bytes) -> _WorkerRecord | None:
        parts = line.split()
        if len(parts) != 4 or not hmac.compare_digest(parts[0], self.token.encode("ascii")):
            return None
        try:
            attempt, local_rank, pid = (int(p) for p in parts[1:])
        except ValueError:
            return None
        record = _WorkerRecord(attempt, local_rank, pid)
        # Its connection is open, so it is alive and the pid is its own: pin it down now.
        with contextlib.suppress(OSError, AttributeError):
            record.pidfd = os.pidfd_open(pid)
        record.process = _started_process(pid)
        self.records.append(record)
        self._oom.note_worker(pid)
        if self.timed_out:
            _kill_worker(record)
        return record

    def _drop(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        conn.close()

    def explain_kill(self, pid: int) -> str | None:
        """The out-of-memory killer's part in the SIGKILL of worker ``pid`` (None: no evidence)."""
        return self._oom.explain(pid)

    def _died(self, record: _WorkerRecord) -> None:
        """A worker ended without saying its exit status: killed by a signal, most often SIGKILL,
        maybe by the kernel's out-of-memory killer, whose log line is read now (the kernel log
        moves on; it is used only if the status turns out to be SIGKILL)."""
        if not (self.timed_out or record.killed_by_watcher or record.stopped_s is not None):
            record.oom = self._oom.explain(record.pid)


def _started_process(pid: int) -> multiprocessing.process.BaseProcess | None:
    """The process object this process started ``pid`` with (elastic's, for its worker), read
    from multiprocessing's own set of started children, which elastic's thread may be adding to
    (hence the retries); None if none (a pid registered by a process not started here)."""
    for _ in range(10):
        try:
            started = tuple(multiprocessing.process._children)  # type: ignore[attr-defined]
        except RuntimeError:  # the set changed size while copied
            continue
        return next((p for p in started if p.pid == pid), None)
    return None


def _exit_status(process: multiprocessing.process.BaseProcess | None) -> int | None:
    """A process object's exit status (negative: killed by that signal), once elastic has waited
    for it; None if unknown."""
    if process is None:
        return None
    with contextlib.suppress(ValueError, OSError):  # closed, or never started
        return process.exitcode
    return None


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, starttime, exit status)`` of ``pid`` from ``/proc/PID/stat`` (the exit
    status, a wait status, is readable while the process is a zombie); None: no such process or
    no ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # after "(comm)": fields 3 (state), 4 (ppid), 22 (starttime), 52 (exit_code)
    rest = data[data.rfind(b")") + 2 :].split()
    exit_status = int(rest[49]) if len(rest) > 49 else 0
    return rest[0].decode(), int(rest[1]), int(rest[19]), exit_status


def proc_table() -> dict[int, tuple[int, str, int, int]]:
    """``{pid: (ppid, state, starttime, exit status)}`` of every process, from ``/proc/PID/stat``
    (the exit status, a wait status, is readable while the process is a zombie)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := proc_stat(int(name))) is not None:
            state, ppid, start, exit_status = stat
            table[int(name)] = (ppid, state, start, exit_status)
    return table


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read()
    return b""


_FORKSERVER_CMDLINE = b"multiprocessing.forkserver"  # the forkserver's, and so its children's


def _runs_worker(pid: int, parent: int) -> bool:
    """Whether ``pid`` runs a training worker: started by multiprocessing's ``spawn`` (not its
    resource tracker) or forked by its forkserver (the child of one, not the forkserver itself),
    or running ``shardgnn.run`` (not a torchrun agent, whose command line names it too)."""
    cmdline = _cmdline(pid)
    if _FORKSERVER_CMDLINE in cmdline:
        return _FORKSERVER_CMDLINE in _cmdline(parent)
    return b"spawn_main" in cmdline or (
        b"shardgnn.run" in cmdline and b"shardgnn.torchrun" not in cmdline
    )


def worker_pids(launcher_pid: int, descendants: bool = False) -> dict[int, int]:
    """``{local rank: pid}`` of a launcher's live worker processes (``shardgnn train --workers``:
    its children started by multiprocessing's ``spawn``, or its forkserver's children; a torchrun
    agent: its children running ``shardgnn.run``), in start order: elastic starts workers in
    local-rank order, so they are ranks 0, 1, ... ``descendants``: workers anywhere below
    ``launcher_pid`` (an agent behind a shell or ``ip netns exec``; each host's ranks in turn).
    Linux (``/proc``); for operators' scripts and the fault benchmarks."""
    table = proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, frontier = [], [launcher_pid]
    while frontier:
        parent = frontier.pop()
        for child in children.get(parent, ()):
            if descendants or (
                _FORKSERVER_CMDLINE in _cmdline(child)
                and _FORKSERVER_CMDLINE not in _cmdline(parent)
            ):  # the forkserver: its children are the launcher's workers
                frontier.append(child)
            if table[child][1] not in "ZX" and _runs_worker(child, parent):
                found.append(child)
    return dict(enumerate(sorted(found, key=lambda pid: (table[pid][2], pid))))


def proc_state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``T`` stopped, ``Z``...); None: unknown."""
    stat = proc_stat(pid)
    return None if stat is None else stat[0]


class StoppedWatch:
    """Which processes have been stopped longer than ``limit_s``: fed their states every second or
    so, it remembers since when each was seen stopped.

    Only state ``T`` counts (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU); ``t``, a debugger's stop, does
    not: a person stepping through a worker is not a fault. A process continued between two looks
    starts over, and so does every process after a gap of more than ``MAX_GAP_S`` between looks
    (the watcher itself was stopped), so a whole job suspended and continued together
    (``scontrol suspend``) is not killed however long it slept.
    """

    MAX_GAP_S = 5.0

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self._since: dict[int, float] = {}
        self._last_look = -math.inf

    def overdue(self, states: dict[int, str | None], now: float) -> list[tuple[int, float]]:
        """``(pid, seconds stopped)`` of each process in ``states`` (``{pid: state}``, every
        process watched) seen stopped at every look for at least ``limit_s``; each is reported
        once."""
        if now - self._last_look > self.MAX_GAP_S:
            self._since = {pid: now for pid in self._since}
        self._last_look = now
        self._since = {pid: t for pid, t in self._since.items() if states.get(pid) == "T"}
        overdue = []
        for pid, state in states.items():
            if state != "T":
                continue
            since = self._since.setdefault(pid, now)
            if now - since >= self.limit_s:
                overdue.append((pid, now - since))
        for pid, _ in overdue:
            self._since[pid] = math.inf  # reported: not again
        return overdue


def _kill_worker(record: _WorkerRecord) -> None:
    """SIGKILL a registered worker whose connection is still open: through its pidfd, which names
    that process and no other; without one (no pidfds here), by pid, which is still its own while
    the connection is open."""
    with contextlib.suppress(ProcessLookupError):
        if record.pidfd is not None:
            signal.pidfd_send_signal(record.pidfd, signal.SIGKILL)
        else:
            os.kill(record.pid, signal.SIGKILL)


def _collect_failures(
    exc: ChildFailedError, watch: _WorkerWatch, log_root: str, run_id: str, board: StageBoard
) -> list[RankFailure]:
    """Merge the three sources: the watcher (exit order and status of every worker), elastic's
    error files (exception and traceback of every worker that raised) and elastic's report (the
    one failure its monitor saw first, with an authoritative exit code); and where each worker
    of the last attempt was (``board``)."""
    records, token = watch.records, watch.token
    attempt = max((r.attempt for r in records), default=0)
    # one machine: rank == local rank
    by_rank = {r.local_rank: r for r in records if r.attempt == attempt}
    errors = _read_error_files(os.path.join(log_root, "elastic"), run_id, attempt)
    ours = _read_rank_errors(log_root, token, attempt)
    reported = {rank: failure.exitcode for rank, failure in exc.failures.items()}
    # In a failed run no worker exits cleanly: one that returned waits for the others before
    # exiting.
    ended = {
        rank
        for rank, r in by_rank.items()
        if r.raised_time is not None or (r.exit_time is not None and r.exitcode != 0)
    }
    ranks = set(reported) | set(errors) | ended

    def exitcode(rank: int) -> int | None:
        record = by_rank.get(rank)
        if rank in reported:
            return reported[rank]
        if record is not None and record.status_known:
            return record.exitcode
        if record is not None and (status := _exit_status(record.process)) is not None:
            return status
        if record is not None and (record.killed_by_watcher or record.stopped_s is not None):
            # alive (its connection open) when the watcher SIGKILLed it; elastic reaped it first
            return -signal.SIGKILL
        # A worker that raised exits with 1 (torch's spawn wrapper); elastic may reap it before
        # the watcher reads its status, and report another rank as its first failure.
        return 1 if rank in errors else None

    def order(rank: int) -> tuple[float, float, int]:
        """First failure first, on the watcher's clock; same-time exceptions by the workers'
        clocks."""
        record = by_rank.get(rank)
        if record is None or (record.raised_time is None and record.exit_time is None):
            return (math.inf, 0.0, rank)
        if record.raised_time is not None:
            return (record.raised_time, record.raised_stamp, rank)
        code = exitcode(rank)
        silent_death = code is not None and code != -signal.SIGTERM
        return (record.exit_time - (_SILENT_DEATH_LEAD_S if silent_death else 0.0), 0.0, rank)

    failures = []
    for rank in sorted(ranks, key=order):
        error, trace = errors.get(rank, (None, None))
        record = ours.get(rank, {})
        seen = by_rank.get(rank)
        if (
            seen is not None
            and seen.oom is None
            and exitcode(rank) == -signal.SIGKILL
            and not (watch.timed_out or seen.killed_by_watcher)
        ):  # elastic reaped it before the watcher read its status
            seen.oom = watch.explain_kill(seen.pid)
        failures.append(
            RankFailure(
                rank=rank,
                exitcode=exitcode(rank),
                error=error,
                traceback=trace,
                message=record.get("message"),
                user_error=bool(record.get("user_error")),
                log_file=record.get("log_file"),
                killed_by_launcher=rank in by_rank and by_rank[rank].killed_by_watcher,
                oom=seen.oom if seen is not None else None,
                stopped_s=seen.stopped_s if seen is not None else None,
                where=board.read(rank) if seen is not None else None,
            )
        )
    return failures


def _preempted_message(log_root: str, token: str, records: list[_WorkerRecord]) -> str | None:
    """Rank 0's :class:`Preempted` message if this launch's workers stopped on a stop signal."""
    attempt = max((r.attempt for r in records), default=0)
    rank0 = _read_rank_errors(log_root, token, attempt).get(0, {})
    return rank0.get("message") if rank0.get("preempted") else None


def _read_rank_errors(log_root: str, token: str, attempt: int) -> dict[int, dict[str, Any]]:
    """``{rank: {message, user_error, log_file}}`` from the ``rank-<R>.error.json`` files that
    :func:`_worker_main` writes when its entrypoint raises (this launch's, this attempt's)."""
    found: dict[int, dict[str, Any]] = {}
    for path in glob.glob(os.path.join(glob.escape(log_root), "rank-*.error.json")):
        try:
            with open(path) as fh:
                record = json.load(fh)
            if record.get("token") == token and record.get("attempt") == attempt:
                found[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def _read_error_files(
    log_root: str, run_id: str, attempt: int
) -> dict[int, tuple[str, str | None]]:
    """``{local_rank: (message, traceback)}`` from the ``error.json`` files that elastic's
    ``record`` wrapper writes in ``<log_root>/<run_id>_*/attempt_<k>/<local_rank>/`` when a worker
    raises."""
    found: dict[int, tuple[str, str | None]] = {}
    pattern = os.path.join(
        glob.escape(log_root), f"{run_id}_*", f"attempt_{attempt}", "*", "error.json"
    )
    for path in glob.glob(pattern):
        try:
            rank = int(os.path.basename(os.path.dirname(path)))
            with open(path) as fh:
                message = json.load(fh).get("message")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(message, dict):
            extra = message.get("extraInfo") or {}
            found[rank] = (str(message.get("message", "")), extra.get("py_callstack"))
        elif message:
            found[rank] = (str(message), None)
    return found


# -------------------------------------------------------------------------------------- worker side
STAGE_SLOT_BYTES = 96
"""a worker's slot on the :class:`StageBoard`: a length byte, then where it is (ASCII, cut)"""


class StageBoard:
    """Where each worker's main thread is, as it last said (:func:`shardgnn.timing.
    tell_stages_to`: ``"in <stage>"`` / ``"after <stage>"``), in a file the launcher and every
    worker map into memory, one :data:`STAGE_SLOT_BYTES` slot a local rank: a worker writes its
    slot at every stage change without a system call, and the launcher reads it only when it
    says where a failed worker was. Told through the launcher's socket instead, the six writes
    a batch and the launcher's wake-ups for them cost about 4 % of an epoch on a 2-core machine
    whose two workers use both cores (0.957x without them, BENCHMARKS 32za).

    A read while the worker writes may mix the two strings; the launcher reads only after the
    workers have ended or hung, when nothing writes."""

    def __init__(self, path: str, fd: int, slots: int) -> None:
        self.path = path
        self._map = mmap.mmap(fd, slots * STAGE_SLOT_BYTES)
        os.close(fd)  # the mapping keeps the file

    @classmethod
    def create(cls, path: str, slots: int) -> StageBoard:
        """The launcher's board of ``slots`` workers at ``path`` (replacing a stale one)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, slots * STAGE_SLOT_BYTES)
        return cls(path, fd, slots)

    @classmethod
    def open(cls, path: str) -> StageBoard:
        """A worker's view of the launcher's board."""
        fd = os.open(path, os.O_RDWR)
        return cls(path, fd, os.fstat(fd).st_size // STAGE_SLOT_BYTES)

    def write(self, slot: int, where: str) -> None:
        """Say that worker ``slot`` is ``where`` ("": nowhere yet)."""
        data = where.encode("ascii", "replace")[: STAGE_SLOT_BYTES - 1]
        start = slot * STAGE_SLOT_BYTES
        self._map[start + 1 : start + 1 + len(data)] = data
        self._map[start] = len(data)

    def read(self, slot: int) -> str | None:
        """Where worker ``slot`` last said it was; None where it said nothing (or has no slot)."""
        start = slot * STAGE_SLOT_BYTES
        if not 0 <= slot or start >= len(self._map) or self._map[start] == 0:
            return None
        return self._map[start + 1 : start + 1 + self._map[start]].decode("ascii", "replace")

    def close(self) -> None:
        self._map.close()


_LAUNCHER_CHANNEL: list[int] = []  # worker side: the fd whose closing (at exit) tells the launcher


def _worker_main(
    local_rank: str,
    watch_address: tuple[str, int],
    token: str,
    payload: bytes,
    threads: int | None,
    launcher_pid: int,
    log_root: str,
    stages_path: str,
    launcher: _LauncherState | None,
) -> Any:
    """The function elastic runs in each worker (it wraps it in ``record``, which writes the
    exception and traceback to the worker's ``error.json``).

    ``local_rank`` arrives as the string elastic substitutes for its ``${local_rank}`` macro.
    ``launcher``: the launcher's environment and output, for a worker forked by the forkserver.
    """
    _die_with_launcher(launcher_pid)
    if launcher is not None:
        launcher.take()
        # Its own processes start as a spawned worker's do: numba, seeing "fork" in the start
        # method's name, takes a named lock no forked worker ending with os._exit gives back (the
        # launcher's resource tracker then warns of it at shutdown).
        multiprocessing.set_start_method("spawn", force=True)
    if threads is None and (user_threads := os.environ.get("OMP_NUM_THREADS", "")).isdigit():
        threads = int(user_threads) or None  # a forked worker's torch was loaded without it
    if threads is not None:
        # Torch and its OpenMP runtime are loaded already (elastic's wrapper imports torch), so the
        # environment variable alone would come too late for them; it still reaches libraries
        # initialised later and subprocesses.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    _register_with_launcher(watch_address, token, int(local_rank))
    # Run once elastic's wrapper has handed the result over (or on SystemExit(0)): multiprocessing
    # runs its finalizers as a worker ends, forked or spawned; a forked one never reaches atexit.
    multiprocessing.util.Finalize(None, _end_finished_worker, exitpriority=-(2**31))
    board, slot = StageBoard.open(stages_path), int(local_rank)
    board.write(slot, "")  # not where a worker of an earlier attempt was
    tell_stages_to(lambda where: board.write(slot, where))
    try:
        entrypoint, args = pickle.loads(payload)  # imports the entrypoint's module
        result = entrypoint(*args)
        pickle.dumps(result)  # what elastic sends back must pickle: fail here, as a failure
    except Preempted as exc:
        # Not a failure: every rank stopped after the same step and saved. The exit status says
        # "retry" (a requeue), the record tells the launcher what was saved.
        _write_rank_error(log_root, int(local_rank), exc, token)
        exit_without_teardown(REQUEUE_EXIT_CODE)
    except BaseException as exc:
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            raise
        # a user's sizes (or a ulimit -v far below the machine's memory): one line, as bad input
        exc = OutOfMemory.from_allocation(exc, memory_limit_hint()) or exc
        _write_rank_error(log_root, int(local_rank), exc, token)
        record_elastic_error(exc)
        _tell_launcher(f"raised {time.time():.6f}")
        if not isinstance(exc, (ShardgnnError, CollectiveError)):
            # a crash: its traceback where an uncaught exception leaves it (the terminal, or the
            # worker's output file). A user error, and a peer's failure met in a collective, are
            # the launcher's one line naming the failed rank's log, which holds the traceback:
            # every rank printing its own would bury that line.
            traceback.print_exc()
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        exit_without_teardown(code)
    # Elastic's wrapper sends the result to the launcher and waits until it was read; the
    # process then ends in _end_finished_worker.
    return result


def _end_finished_worker() -> None:
    """End a worker that finished: its other threads joined and its ``atexit`` hooks run, as at
    an interpreter's exit, then without the interpreter's teardown, as a failed worker ends and for
    the same reason (gloo's threads; a torchrun worker ends so too)."""
    end_process(
        0, join_threads=True, run_exit_hooks=True, last_word=lambda: _tell_launcher("exit 0")
    )


@dataclasses.dataclass
class _LauncherState:
    """What a spawned worker inherits from the launcher at the launch and a forked one inherits from
    the forkserver as it was at the first launch: the environment, and standard output and error
    (a caller may redirect them between launches, as pytest's capture does). A forked worker takes
    the launcher's (:meth:`take`)."""

    environ: dict[str, str]
    streams: tuple[_LauncherStream | int | None, ...]  # fds 1 and 2 (None: closed)

    @classmethod
    def now(cls) -> _LauncherState:
        return cls(dict(os.environ), tuple(_LauncherStream.of(fd) for fd in (1, 2)))

    def take(self) -> None:
        """Worker side: make this process's environment the launcher's plus what elastic set, and
        its fds 1 and 2 the launcher's."""
        from shardgnn.distributed.forkserver import reread_environment

        _take_environment(self.environ)
        reread_environment()
        for target, fd in zip((1, 2), self.streams, strict=True):
            if isinstance(fd, int):
                with contextlib.suppress(Exception):
                    (sys.stdout if target == 1 else sys.stderr).flush()
                os.dup2(fd, target)
                os.close(fd)


class _LauncherStream:
    """One of the launcher's file descriptors, for a forked worker: it is reduced while
    multiprocessing pickles the worker's process object, so the forkserver hands the descriptor
    over, and arrives as the worker's own copy of it (an int)."""

    def __init__(self, fd: int):
        self.fd = fd

    @classmethod
    def of(cls, fd: int) -> _LauncherStream | None:
        try:
            os.fstat(fd)
        except OSError:  # closed (a daemon's)
            return None
        return cls(fd)

    def __reduce__(self) -> tuple:
        return (_received_fd, (multiprocessing.reduction.DupFd(self.fd),))


def _received_fd(wrapper: Any) -> int:
    return wrapper.detach()


def _take_environment(launcher_environ: dict[str, str]) -> None:
    """Make a forked worker's environment the launcher's at the launch, plus what elastic set.

    A forked worker starts with the forkserver's environment (the launcher's when the forkserver
    started, ``/proc/<parent>/environ``), updated by elastic with the worker's own variables. Those
    are the variables whose values differ from the forkserver's, and torchrun's, always elastic's.
    """
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as fh:
            entries = fh.read().split(b"\0")
        pairs = (entry.partition(b"=") for entry in entries if entry)
        server = {os.fsdecode(key): os.fsdecode(value) for key, _, value in pairs}
    except OSError:
        server = {}
    elastic = {
        key: value
        for key, value in os.environ.items()
        if server.get(key) != value or key in _TORCHRUN_ENV or key.startswith("TORCHELASTIC_")
    }
    os.environ.clear()
    os.environ.update(launcher_environ)
    os.environ.update(elastic)


def exit_without_teardown(code: int, run_exit_hooks: bool = False) -> None:
    """End a worker that failed (or was preempted) with exit status ``code``, once its record is
    written, or that finished and handed its result over (``run_exit_hooks``: the ``atexit``
    hooks run first, a user's too), without the interpreter's teardown:
    its process group was not left (on purpose, see the tests' ``_run_in_context``) and still
    has threads, and tearing down C++ objects under them aborted the process now and then
    (measured under load: about 1 run in 8 ended with SIGABRT, "terminate called without an
    active exception", so the launcher reported exit status -6 instead of 1)."""
    # a worker that ends without saying so was killed
    end_process(
        code, run_exit_hooks=run_exit_hooks, last_word=lambda: _tell_launcher(f"exit {code}")
    )


def record_elastic_error(exc: BaseException) -> None:
    """Write ``exc`` to the error file elastic names in ``TORCHELASTIC_ERROR_FILE`` (the JSON its
    ``record`` wrapper writes), atomically, and take the name away so that ``record`` does not
    write it again.

    ``record`` writes in place (open, truncate, dump): the agent, stopping the other workers
    after one failed, SIGTERMs this one, which by then has left training's signal handling, so
    a SIGTERM mid-dump left an empty file, and the agent itself died parsing it (a
    ``JSONDecodeError`` instead of a restart). Written to a temporary file and renamed, the file
    is whole or absent; absent, elastic reports the exit code alone."""
    if isinstance(exc, SystemExit):
        return
    path = os.environ.pop("TORCHELASTIC_ERROR_FILE", None)
    if not path:
        return
    data = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(exc)),
                "timestamp": str(int(time.time())),
            },
        }
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(OSError):
        with open(tmp, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)


def _write_rank_error(log_root: str, rank: int, exc: BaseException, token: str) -> None:
    """The full traceback to ``rank-<R>.log``; the message, and whether it is a user error, to
    ``rank-<R>.error.json`` (read by the launcher). Best effort: a full disk must not mask ``exc``.
    """
    log_file = os.path.join(log_root, f"rank-{rank}.log")
    with contextlib.suppress(OSError):
        with open(log_file, "a") as fh:
            fh.write(
                f"rank {rank} (pid {os.getpid()}) failed at {time.strftime('%Y-%m-%d %H:%M:%S')}:\n"
            )
            fh.write("".join(traceback.format_exception(exc)))
        message = str(exc)
        record = {
            "rank": rank,
            "type": type(exc).__name__,
            "message": message,
            "user_error": isinstance(exc, ShardgnnError),
            "preempted": isinstance(exc, Preempted),
            "log_file": log_file,
            # which launch and attempt wrote it: a kept --log-dir may hold older records
            "token": token,
            "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        }
        tmp = os.path.join(log_root, f".rank-{rank}.error.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, os.path.join(log_root, f"rank-{rank}.error.json"))


def _die_with_launcher(launcher_pid: int) -> None:
    """Linux: have the kernel SIGKILL this worker when its parent dies (the launcher, or the
    forkserver, which ends when the launcher does), so none is orphaned."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    parent = os.getppid()
    if parent != launcher_pid and (proc_stat(parent) or ("", 0))[1] != launcher_pid:
        os._exit(1)  # the launcher (or the forkserver) died before prctl took effect


def _register_with_launcher(address: tuple[str, int], token: str, local_rank: int) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    sock = socket.create_connection(address, timeout=30)
    sock.settimeout(None)  # blocking again, for the os.write in _tell_launcher
    sock.sendall(f"{token} {attempt} {local_rank} {os.getpid()}\n".encode("ascii"))
    # Detach: no Python object owns the fd, so interpreter shutdown does not close it early; the
    # kernel closes it when the process is gone.
    _LAUNCHER_CHANNEL.append(sock.detach())


def _tell_launcher(message: str) -> None:
    for fd in _LAUNCHER_CHANNEL:
        with contextlib.suppress(OSError):
            os.write(fd, (message + "\n").encode("ascii"))
