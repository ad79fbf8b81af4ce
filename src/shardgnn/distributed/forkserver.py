"""What multiprocessing's forkserver imports before it forks the local launcher's workers (Linux;
:data:`shardgnn.distributed.launch.FORKSERVER_PRELOAD`).

Torch, once, so that no forked worker imports it again. And, in the forkserver process only, a
deafness to the stop signals a batch system sends every process of a job (SIGTERM, SIGUSR1,
SIGHUP, SIGQUIT; SLURM's preemption, ``kill`` of a process group): the launcher handles them and
forwards them to its workers, which must live to finish their step and save a checkpoint, and a
forkserver ended by one would take every worker with it (a worker dies with its parent,
``PR_SET_PDEATHSIG``). The forkserver still ends when the launcher does. Each forked worker hears
the signals again from its first instruction (``os.register_at_fork``).

Importing this module anywhere else imports torch and nothing more. Nothing here reads the
environment: the forkserver imports it in the environment of the first launch.
"""

from __future__ import annotations

import os
import signal
import sys

import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.distributed.elastic.multiprocessing  # noqa: F401

STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGUSR1", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


def started_as_forkserver() -> bool:
    """Whether this process is multiprocessing's forkserver (its command line runs its ``main``)."""
    return any(
        arg.startswith("from multiprocessing.forkserver import main") for arg in sys.orig_argv
    )


def _deaf_to_stop_signals() -> None:
    """Ignore the stop signals here; every child forked from here hears them as before."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)

    def hear_them_again() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    os.register_at_fork(after_in_child=hear_them_again)


if started_as_forkserver():
    _deaf_to_stop_signals()
