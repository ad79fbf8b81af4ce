"""What multiprocessing's forkserver imports before it forks the local launcher's workers (Linux;
:data:`shardgnn.distributed.launch.FORKSERVER_PRELOAD`).

Torch, once, so that no forked worker imports it again, and what every worker imports through
shardgnn's partition reader besides: numba and scipy's sparse graph routines (together 0.3-0.5 s
a worker on a 2-core machine, more than torch's share of a worker's start-up once torch is
imported). And, in the forkserver process only, a
deafness to the stop signals a batch system sends every process of a job (SIGTERM, SIGUSR1,
SIGHUP, SIGQUIT; SLURM's preemption, ``kill`` of a process group): the launcher handles them and
forwards them to its workers, which must live to finish their step and save a checkpoint, and a
forkserver ended by one would take every worker with it (a worker dies with its parent,
``PR_SET_PDEATHSIG``). The forkserver still ends when the launcher does. Each forked worker hears
the signals again from its first instruction (``os.register_at_fork``).

Importing this module anywhere else imports those and nothing more. The forkserver imports it in
the environment of the first launch, and numba reads its ``NUMBA_*`` variables (and a
``.numba_config.yaml`` in the working directory) as it is imported: a forked worker, once it has
taken the launcher's environment and directory, reads them again (:func:`reread_environment`).
The BLAS thread pools of numpy and scipy are sized as they load, here as in any process.
"""

from __future__ import annotations

import os
import signal
import sys

import numba
import numba.core.config
import scipy.sparse.csgraph  # noqa: F401
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


def reread_environment() -> None:
    """In a forked worker whose environment and directory are now the launcher's: what the modules
    imported here read from them as they were imported, read again (numba's configuration; a
    no-op when its variables are those of the forkserver's start)."""
    numba.core.config.reload_config()


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
