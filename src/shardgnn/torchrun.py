r"""``python -m shardgnn.torchrun ARGS``: ``torchrun`` with the same arguments, bounded on faults.

Plain torchrun (torch 2.x) does not bound three faults that clusters produce every day:

* **A network partition.** The agent asks the rendezvous store (``TCPStore`` on the first host)
  how many nodes are waiting, on every poll of its workers. When the network to that host
  breaks, the call blocks in a ``recv`` that no ``--rdzv-conf`` timeout reaches (``read_timeout``
  bounds the first wait only; the cancel that follows waits without a limit), SIGTERM cannot
  interrupt it, and the agent stays stuck for the kernel's TCP retransmission limit (~15 min)
  although its workers have long failed. Measured with two network-namespace hosts:
  ``benchmarks/netns_hosts.py``.
* **A stalled worker.** After a worker fails, the agent sends SIGTERM to the others and waits a
  fixed 30 s before SIGKILL; a stopped process (SIGSTOP) or one stuck in native code never acts on
  SIGTERM.
* **Preemption.** SIGUSR1 (SLURM's usual early warning) is not forwarded to the workers unless
  ``--signals-to-handle`` lists it.

This wrapper runs torchrun's own ``main`` in this process and adds:

* a watchdog thread: when a worker of this agent has been dead but unreaped for
  :data:`~shardgnn.distributed.config.FAILURE_GRACE_S` seconds (the agent polls its workers every
  ``--monitor-interval``, so an unreaped worker means its main loop is blocked), it prints one
  line naming the cause, SIGKILLs the remaining workers and exits 1. The watchdog keeps running
  while the main thread is blocked: the store call releases the GIL;
* a worker stopped (SIGSTOP, SIGTSTP) for the job's ``--timeout`` is SIGKILLed with one line, so
  the agent sees it fail (and restarts the group, or ends): among several workers a peer's
  collective timeout does that anyway, but a lone worker (one left by ``--nnodes 1:N`` after a
  machine was lost) has no peer;
* after a worker failure, the other workers get the same seconds between SIGTERM and SIGKILL
  (instead of 30);
* an agent whose workers failed joins torchrun's exit barrier before it ends, so machines whose
  workers finished do not wait its 300 s for it (a worker failing after its peers succeeded);
* a worker that refused the job (bad input: exit 2 after its one ``error:`` line) ends it with
  one more line and exit 2, not torchrun's report and traceback; another failure prints the
  report (which worker, how) and exits 1;
* ``--signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1`` unless given, and on such a
  signal one line and exit code 75 (:data:`~shardgnn.errors.REQUEUE_EXIT_CODE`) when every worker
  saved its checkpoint and exited 75, as ``shardgnn train`` does (torchrun: a traceback, exit 1).
* a bad torchrun argument (``--rdzv-endpoint host:x``, ``--rdzv-conf join_timeout=abc``) is
  one line and exit 2, not a traceback;
* a rendezvous that fails (its store out of reach, fewer machines than ``--nnodes`` within the
  join timeout, a closed ``--rdzv-id``) ends with one line naming the endpoint and what to check,
  exit 1 (torchrun: the store client's every retry with a C++ stack, then a traceback): the
  agent's own C++ logging is quiet unless ``TORCH_CPP_LOG_LEVEL`` is set.

With them every host of a job ends within ``--timeout`` + ~7 s of a partition, with a named
cause (measured: 50-52 s at the default 45 s timeout). Use it wherever the README says torchrun:

    python -m shardgnn.torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \
        --rdzv-endpoint node0:29500 --rdzv-id run1 -m shardgnn.run train --partitions parts/ ...
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time

from shardgnn.distributed.config import DEFAULT_TIMEOUT_S, FAILURE_GRACE_S
from shardgnn.errors import REQUEUE_EXIT_CODE

STOP_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
_POLL_S = 0.5
_EXIT_CODES: list[int | None] = []  # the workers' exit codes when the agent last stopped them


def _children() -> dict[int, tuple[str, int]]:
    """``{pid: (state, starttime)}`` of this process's child processes."""
    from shardgnn.distributed.launch import proc_table

    me = os.getpid()
    return {
        pid: (state, start) for pid, (ppid, state, start, _) in proc_table().items() if ppid == me
    }


def _label(pid: int) -> str:
    """``rank R (pid P)`` from the environment torchrun gave the worker."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = dict(e.split(b"=", 1) for e in fh.read().split(b"\0") if b"=" in e)
    except OSError:
        return f"pid {pid}"
    rank = env.get(b"RANK")
    return f"rank {rank.decode()} (pid {pid})" if rank else f"pid {pid}"


def watch_agent(
    endpoint: str, grace_s: float = FAILURE_GRACE_S, stopped_timeout_s: float = DEFAULT_TIMEOUT_S
) -> None:
    """Thread body: end this agent when a worker has been dead and unreaped for ``grace_s``;
    SIGKILL a worker stopped (SIGSTOP, SIGTSTP) for ``stopped_timeout_s``, so that the agent sees
    it fail (a lone worker has no peer whose collective would time out)."""
    from shardgnn.distributed.launch import StoppedWatch

    dead_since: dict[tuple[int, int], float] = {}
    labels: dict[tuple[int, int], str] = {}
    stopped = StoppedWatch(stopped_timeout_s)
    while True:
        time.sleep(_POLL_S)
        now = time.monotonic()
        children = _children()
        for pid, stopped_s in stopped.overdue({p: c[0] for p, c in children.items()}, now):
            print(
                f"shardgnn.torchrun: worker {_label(pid)} has been stopped (SIGSTOP or SIGTSTP) "
                f"for {stopped_s:.0f} s, past the {stopped_timeout_s:g} s timeout; killing it",
                file=sys.stderr,
                flush=True,
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)  # unreaped child: the pid cannot be reused yet
        stuck = None
        for pid, (state, start) in children.items():
            key = (pid, start)
            if state != "Z":
                labels.setdefault(key, _label(pid))
                continue
            since = dead_since.setdefault(key, now)
            if now - since >= grace_s:
                stuck = labels.get(key, f"pid {pid}")
        if stuck is None:
            continue
        alive = [pid for pid, (state, _) in children.items() if state != "Z"]
        print(
            f"shardgnn.torchrun: worker {stuck} ended {grace_s:g} s ago and the torchrun agent has "
            f"not noticed: it is blocked on the rendezvous store at {endpoint} (network failure?); "
            f"killing {len(alive)} remaining worker(s), exit 1",
            file=sys.stderr,
            flush=True,
        )
        for pid in alive:  # elastic starts each worker in a session of its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        os._exit(1)


def _stopped_timeout(argv: list[str]) -> float:
    """The job's collective ``--timeout`` (an option of ``shardgnn.run``'s command line, which
    torchrun does not have), default when absent or not a positive number."""
    with contextlib.suppress(TypeError, ValueError):
        value = float(_option(argv, "timeout"))  # type: ignore[arg-type]
        if value > 0:
            return value
    return DEFAULT_TIMEOUT_S


def _bound_failure_shutdown(grace_s: float) -> None:
    """After a worker failure, give the others ``grace_s`` between SIGTERM and SIGKILL.

    Elastic stops the rest of the group with a bare ``PContext.close()`` when its poll finds a
    failed worker, and again through ``LocalElasticAgent._stop_workers``, both with a default of
    30 s. Calls that name a timeout keep it: the SIGTERM/SIGUSR1 path (preemption) passes
    ``--shutdown-timeout``. Private APIs: on a torch without them the 30 s stay, and this says so.
    """
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.api import PContext

    if not (hasattr(LocalElasticAgent, "_shutdown") and hasattr(PContext, "close")):
        print(
            "shardgnn.torchrun: this torch's elastic agent has no _shutdown/close to bound; a "
            "stalled worker is killed 30 s after a failure",
            file=sys.stderr,
        )
        return
    close = PContext.close

    def close_soon(self, death_sig=None, timeout=None) -> None:
        close(self, death_sig, math.ceil(grace_s) if timeout is None else timeout)
        handlers = getattr(self, "subprocess_handlers", None) or {}
        _EXIT_CODES[:] = [h.proc.returncode for h in handlers.values()]

    def stop_workers(self, *args, **kwargs) -> None:
        self._shutdown(timeout=math.ceil(grace_s))

    PContext.close = close_soon  # type: ignore[method-assign]
    LocalElasticAgent._stop_workers = stop_workers  # type: ignore[method-assign]


def _release_exit_barrier(timeout_s: float) -> None:
    """Let an agent whose workers failed join torchrun's exit barrier before it ends.

    An agent whose workers succeeded waits at the exit barrier (``exit_barrier_timeout``, 300 s)
    for every other agent; an agent whose workers failed (no restarts left) returns without
    joining it, so the machines that finished wait 300 s whenever a peer's worker fails last
    (seen: a worker aborting in its exit after the results were written; the other machine's
    agent waited 300 s). Here the failed agent joins the barrier too, waiting at most
    ``timeout_s`` (the job's ``--timeout``) for agents that do not come: the finished machines
    end at once. Private API: on a torch without it the 300 s stay, and this says so.
    """
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    if not all(hasattr(SimpleElasticAgent, a) for a in ("run", "_exit_barrier")):
        print(
            "shardgnn.torchrun: this torch's elastic agent has no _exit_barrier; machines whose "
            "workers finished wait up to 300 s for a peer whose workers failed",
            file=sys.stderr,
        )
        return
    run = SimpleElasticAgent.run

    def run_then_release(self, *args, **kwargs):
        result = run(self, *args, **kwargs)
        if result.is_failed() and getattr(self, "_store", None) is not None:
            self._exit_barrier_timeout = min(self._exit_barrier_timeout, timeout_s)
            self._exit_barrier()  # logs (and swallows) a timeout: the result stands
        return result

    SimpleElasticAgent.run = run_then_release  # type: ignore[method-assign]


def _option(argv: list[str], name: str) -> str | None:
    """The value of torchrun option ``--name`` (either spelling, ``--x y`` or ``--x=y``; the last
    one given, as argparse takes it)."""
    spellings = {f"--{name}", f"--{name.replace('-', '_')}"}
    found = None
    for i, arg in enumerate(argv):
        if arg in spellings and i + 1 < len(argv):
            found = argv[i + 1]
        head, eq, value = arg.partition("=")
        if eq and head in spellings:
            found = value
    return found


def torchrun_has_option(flag: str) -> bool:
    """Whether the installed torch's torchrun takes ``flag`` (``--signals-to-handle`` is newer
    than the torch 2.3 pyproject allows: an older torchrun would refuse the whole command line,
    and forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT without it)."""
    from torch.distributed.run import get_args_parser

    return flag in get_args_parser()._option_string_actions


def _import_torch_with_quiet_cpp_logs() -> None:
    """Import torch with c10's C++ logging at FATAL in this agent, unless the user chose a level.

    The agent's C++ code is the rendezvous store's client and server: while a store is out of
    reach it logs every try with a C++ stack (80 lines for one unreachable endpoint), which
    :func:`rendezvous_failure`'s one line replaces. c10 reads ``TORCH_CPP_LOG_LEVEL`` once, when
    torch loads, so it is set for the import only: the workers inherit the user's environment.
    """
    if "torch" in sys.modules or "TORCH_CPP_LOG_LEVEL" in os.environ:
        return
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        import torch  # noqa: F401
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def rendezvous_failure(exc: BaseException, argv: list[str]) -> str:
    """One line for a rendezvous that failed (torchrun: the agent's traceback): what did not
    happen, at which endpoint, and what to check."""
    from torch.distributed.elastic.rendezvous import (
        RendezvousClosedError,
        RendezvousConnectionError,
        RendezvousTimeoutError,
    )
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

    endpoint = _option(argv, "rdzv-endpoint") or "the rendezvous endpoint"
    rdzv_id = _option(argv, "rdzv-id") or "none"
    head = f"shardgnn.torchrun: rendezvous {rdzv_id!r} at {endpoint}"
    if isinstance(exc, RendezvousTimeoutError):
        conf = dict(
            item.partition("=")[::2] for item in (_option(argv, "rdzv-conf") or "").split(",")
        )
        join = conf.get("join_timeout") or f"{RendezvousTimeout().join.total_seconds():g}"
        return (
            f"{head}: fewer than --nnodes {_option(argv, 'nnodes') or 1} machines joined within "
            f"the join timeout ({join} s, --rdzv-conf join_timeout=S); start the same command on "
            "every machine, with the same --rdzv-endpoint and --rdzv-id"
        )
    cause = exc.__cause__ or exc.__context__
    detail = str(cause or exc).strip().splitlines()
    said = f" ({detail[0][:200].rstrip('.')})" if detail else ""
    if isinstance(exc, RendezvousConnectionError):
        return (
            f"{head}: the store cannot be reached{said}; the machine at that address hosts it "
            "and must run this command too: check --rdzv-endpoint (host:port of the first "
            "machine), that it is up, that the port is open between the machines and that no other "
            "program holds it"
        )
    if isinstance(exc, RendezvousClosedError):
        return f"{head} is closed (a run with this --rdzv-id ended); give a new --rdzv-id"
    return f"{head} failed: {type(exc).__name__}{said}"


_SETTINGS_CODE = ("torch/distributed/run.py", "torch/distributed/elastic/rendezvous/")
"""Where torchrun turns its arguments into settings: a ``ValueError`` raised there is a bad
argument, worded for the user (``The port number of the rendezvous endpoint 'h:x' must be an
integer ...``)."""


def refused_setting(exc: ValueError) -> bool:
    """Whether ``exc`` was raised by torchrun's own parsing of its arguments (not by a bug further
    in, which keeps its traceback)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename.replace(os.sep, "/") if tb is not None else ""
    return any(part in where for part in _SETTINGS_CODE)


def _refuse(problem: str) -> int:
    """One line for a bad torchrun argument; exit code 2."""
    print(
        f"shardgnn.torchrun: error: {problem.strip().rstrip('.')}; see "
        "`python -m shardgnn.torchrun --help` (torchrun's arguments)",
        file=sys.stderr,
    )
    return 2


def nnodes_problem(value: str | None) -> str | None:
    """What is wrong with a ``--nnodes`` value (``N`` or ``MIN:MAX``, 1 <= MIN <= MAX), or None;
    torchrun answers ``invalid literal for int()`` or an ``AssertionError`` traceback."""
    if value is None:
        return None
    bounds = value.split(":")
    if len(bounds) <= 2 and all(b.isdigit() for b in bounds):
        low, high = int(bounds[0]), int(bounds[-1])
        if 1 <= low <= high:
            return None
    return f"--nnodes {value!r} must be N or MIN:MAX (machines), with 1 <= MIN <= MAX"


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv`` (its own arguments), bounded as the module docstring says."""
    argv = list(sys.argv[1:] if argv is None else argv)
    problem = nnodes_problem(_option(argv, "nnodes"))
    if problem is not None:
        return _refuse(problem)
    _import_torch_with_quiet_cpp_logs()
    if _option(argv, "signals-to-handle") is None and torchrun_has_option("--signals-to-handle"):
        argv = ["--signals-to-handle", STOP_SIGNALS, *argv]
    _bound_failure_shutdown(FAILURE_GRACE_S)
    _release_exit_barrier(_stopped_timeout(argv))
    endpoint = _option(argv, "rdzv-endpoint") or "the rendezvous endpoint"
    threading.Thread(
        target=watch_agent,
        args=(endpoint, FAILURE_GRACE_S, _stopped_timeout(argv)),
        daemon=True,
        name="shardgnn-torchrun-watch",
    ).start()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.run import main as torchrun_main

    sys.argv = ["torchrun", *argv]
    try:
        torchrun_main(argv)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode == 2:
            # bad input: the worker said why in one line (`shardgnn train: error: ...`), which
            # torchrun's report and this agent's traceback would bury
            print(
                f"shardgnn.torchrun: worker rank {rank} refused the job (exit 2); its error "
                "line above says why",
                file=sys.stderr,
            )
            return 2
        # which worker failed how (torchrun's report), without this agent's own traceback
        print(exc.format_msg(), file=sys.stderr)
        return 1
    except SignalException as exc:
        # SIGTERM/SIGUSR1 (preemption): the agent forwarded it and waited --shutdown-timeout.
        name = signal.Signals(exc.sigval).name
        if _EXIT_CODES and all(code == REQUEUE_EXIT_CODE for code in _EXIT_CODES):
            print(
                f"shardgnn.torchrun: stopped by {name}; every worker saved its checkpoint and "
                f"exited {REQUEUE_EXIT_CODE} (requeue, then --resume)",
                file=sys.stderr,
            )
            return REQUEUE_EXIT_CODE
        print(
            f"shardgnn.torchrun: stopped by {name}; worker exit codes {_EXIT_CODES or '?'}",
            file=sys.stderr,
        )
        return 128 + int(exc.sigval)
    except RendezvousError as exc:
        print(rendezvous_failure(exc, argv), file=sys.stderr)
        return 1
    except ValueError as exc:
        if not refused_setting(exc):
            raise
        return _refuse(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
