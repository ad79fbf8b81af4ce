"""What multiprocessing's forkserver imports before it forks the local launcher's workers (Linux;
:data:`shardgnn.distributed.start_method.FORKSERVER_PRELOAD`).

Torch, once, so that no forked worker imports it again, and what every worker imports besides:
torch's compiler front end, ``torch._dynamo``, which ``DistributedDataParallel``'s constructor
imports (1.7 s a worker on a 2-core machine, more than anything else in a worker's start-up),
and, through shardgnn's partition reader, numba and scipy's sparse graph routines (0.3-0.5 s).
None of these imports asks about CUDA (a query would leave every forked worker unable to use
it; a test holds them to that). In the forkserver process only, the objects those imports made
are frozen out of the garbage collector's sight (:func:`_freeze_what_is_imported`), and a
deafness to the stop signals a batch system sends every process of a job (SIGTERM, SIGUSR1,
SIGHUP, SIGQUIT; SLURM's preemption, ``kill`` of a process group): the launcher handles them and
forwards them to its workers, which must live to finish their step and save a checkpoint, and a
forkserver ended by one would take every worker with it (a worker dies with its parent,
``PR_SET_PDEATHSIG``). The forkserver still ends when the launcher does, and at once
(without the interpreter's teardown). Each forked worker hears the signals again from its first
instruction (``os.register_at_fork``).

Importing this module anywhere else imports those and nothing more. The forkserver imports it in
the environment of the first launch, and numba reads its ``NUMBA_*`` variables (and a
``.numba_config.yaml`` in the working directory) as it is imported: a forked worker, once it has
taken the launcher's environment and directory, reads them again (:func:`reread_environment`).
What torch, dynamo and inductor read from the environment as they are imported (``TORCH_LOGS``,
``TORCHDYNAMO_*``, ``TORCHINDUCTOR_*``) is the first launch's, as for any module imported before
a variable changes; shardgnn compiles nothing with them. The BLAS thread pools of numpy and scipy
are sized as they load, here as in any process.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys

import numba
import numba.core.config
import scipy.sparse.csgraph  # noqa: F401
import torch  # noqa: F401
import torch._dynamo  # noqa: F401
import torch.distributed  # noqa: F401
import torch.distributed.elastic.multiprocessing  # noqa: F401

from shardgnn.exiting import end_process

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


def _freeze_what_is_imported() -> None:
    """Move every object the imports made (over 300,000) to the garbage collector's permanent
    generation: a forked worker's collections never walk them again nor write to their pages,
    which stay shared with the forkserver (CPython's advice for a process that forks without
    exec). Unfrozen, a worker's full collection took 0.18 s instead of 0.003 s, and importing
    pytest in a worker 0.25 s instead of 0.045 s (collections run as it allocates)."""
    gc.freeze()


if started_as_forkserver():
    _deaf_to_stop_signals()
    _freeze_what_is_imported()
    # Once the launcher has gone, end without the interpreter's teardown: freeing what torch,
    # dynamo, numba and scipy made took 0.85 s here, and a caller that reads the command's output
    # to its end (a pipe, `| tee`, a test) waited for it, as the forkserver holds the command's
    # standard output and error open (teardown with those objects frozen also made triton's
    # bindings report them as leaked on the launcher's standard error). The atexit hooks
    # registered before this one (torch's, numba's, multiprocessing's) are skipped, as in every
    # worker forked from here: a process that only forked has nothing for them to do. A forked
    # worker inherits the registration and must not keep it: ending at its first exit hook, a
    # finished worker would skip the hooks registered before it and not tell the launcher its
    # status.
    atexit.register(end_process, 0)
    os.register_at_fork(after_in_child=lambda: atexit.unregister(end_process))
