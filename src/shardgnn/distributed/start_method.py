"""How :func:`~shardgnn.distributed.launch.launch_local` starts its workers: forked from
multiprocessing's forkserver (Linux with pidfds) or spawned, and the forkserver started ahead of
the first launch.

Nothing heavy is imported here (no torch): ``shardgnn train --workers N`` starts the forkserver
before it imports torch itself, so that the forkserver's imports (torch, ``torch._dynamo``, numba,
scipy: :mod:`shardgnn.distributed.forkserver`) and the command's own run side by side."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import sys

START_METHODS = ("forkserver", "spawn")
FORKSERVER_PRELOAD = ("shardgnn.distributed.forkserver",)
"""What the forkserver imports once: torch and ``torch._dynamo``, numba and scipy's sparse graph
routines (then frozen out of the garbage collector's sight), and its deafness to the stop
signals the launcher forwards (:mod:`shardgnn.distributed.forkserver`).
Nothing else of shardgnn's (but :mod:`shardgnn.exiting`, which ends it): a module imported there
is imported in the environment of the first launch (numba's configuration is read again in each
worker)."""


def start_forkserver(start_method: str | None = None) -> None:
    """Start the forkserver that the next launches fork their workers from now, so that its
    imports overlap what the caller does before its first launch (``shardgnn train`` imports torch,
    checks, and partitions meanwhile). Nothing where launches spawn (``start_method``: as
    :func:`~shardgnn.distributed.launch.launch_local`'s) or when it runs already; it does not wait
    for the imports."""
    if (start_method or default_start_method()) == "forkserver":
        preload_forkserver()
        multiprocessing.forkserver.ensure_running()


def preload_forkserver() -> None:
    """What the forkserver imports when it starts (no effect on one already running)."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))


def default_start_method() -> str:
    """``"forkserver"`` where a worker forked by another process can be watched safely (Linux:
    ``/proc`` and pidfds, so the watcher signals the worker it registered and never a reused pid);
    ``"spawn"`` elsewhere."""
    if not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")):
        return "spawn"
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel older than 5.3
        return "spawn"
    return "forkserver"
