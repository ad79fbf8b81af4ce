"""Stop signals: SIGTERM and SIGUSR1 ask a training run to stop at the next step every worker
agrees on, save a checkpoint and exit for a requeue (preemption), instead of dying mid-step.

Schedulers send one of them some time before SIGKILL: SLURM ``--signal=USR1@120`` (or SIGTERM
``KillWait`` seconds before SIGKILL on preemption and ``scancel``), Kubernetes SIGTERM with
``terminationGracePeriodSeconds``. The handler only records the signal; the training loop asks
:meth:`StopSignals.requested` after every step, through a collective in distributed runs, so all
workers stop after the same step.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

STOP_SIGNALS = ("SIGTERM", "SIGUSR1")


class StopSignals:
    """Records the first stop signal this process receives while :meth:`installed`."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self.acted_on = False  # set by whoever stopped the run because of the signal

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        """Handle the stop signals inside the block (main thread only: elsewhere Python cannot
        install handlers and the process keeps the default, dying on SIGTERM); restore the
        previous handlers after it.

        A signal received but not acted on (it came after the last step) is sent again once the
        previous handlers are back: the sender asked this process to end, and a worker that
        swallowed it would wait for its launcher, which waits for it.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        saved = {}
        for name in STOP_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                saved[sig] = signal.signal(sig, self._record)
        try:
            yield self
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        # (not after an exception: the error must be reported, not cut short)
        if self.received is not None and not self.acted_on:
            os.kill(os.getpid(), self.received)

    def _record(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
