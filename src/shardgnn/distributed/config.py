"""Constants of the distributed layer that settings refer to (imports nothing heavy)."""

from __future__ import annotations

import re

BACKENDS = ("auto", "gloo", "nccl")
"""``--backend`` choices: the process group of gradients and metrics (the data group is gloo)."""

BITS = (1, 2, 4, 8, 16, 32)
"""Bits per value the low-bit row codec can send (32: exact float32)."""

HOST_SHARING = ("auto", "off")
"""``--host-sharing``: workers on one host read each other's rows from the mapped partition
files (``auto``), or every remote row travels through collectives (``off``)."""

DEFAULT_TIMEOUT_S = 45.0
"""Deadline of every collective. A worker that stalls makes the others fail within this many
seconds, so a stalled job ends within 60 s. Long enough for any single collective of a 1M-node
job on 2 cores (a few seconds); raise it with ``--timeout`` when ranks legitimately wait on each
other longer (a slow shared file system at start-up, a very large layer-wise inference chunk)."""

DEFAULT_STOP_GRACE_S = 30.0
"""After SIGTERM or SIGUSR1 (preemption), how long workers have to finish their step and save a
checkpoint before the launcher SIGKILLs them. SLURM's default ``KillWait`` is 30 s; with
``--signal=USR1@120`` there are 120 s."""

FAILURE_GRACE_S = 3.0
"""Once a worker has failed, how long the others have to exit by themselves (they write their
error record and leave in milliseconds) before the watcher SIGKILLs them. Elastic alone sends
SIGTERM and waits a fixed 30 s (hard-coded for a failed group in torch 2.x), and a stopped process
(SIGSTOP) or one stuck in native code never acts on SIGTERM."""

_DEVICE = re.compile(r"(cpu|cuda)(:\d+)?|auto")


def device_problem(name: str) -> str | None:
    """What is wrong with a ``--device`` value, as the constraint of its one-line refusal (None:
    nothing): shardgnn runs on ``cpu``, ``cuda``, ``cuda:N`` or ``auto``; a GPU's other spellings
    (``gpu``, ``CUDA:1``) are told the one meant. Checked as settings are built, before any data
    is read (torch's own parser would fail later, with a traceback, and takes device types such
    as ``mps`` or ``meta`` that no layer here runs on)."""
    if _DEVICE.fullmatch(name):
        return None
    meant = name.strip().lower().replace("gpu", "cuda")
    hint = f" (did you mean {meant}?)" if _DEVICE.fullmatch(meant) else ""
    return f"give cpu, cuda, cuda:N or auto{hint}"
