"""Errors shardgnn raises for problems a user can fix.

Policy (after torchtitan): a mistake in user input (a file, a flag, a dataset spec) raises a
subclass of :class:`ShardgnnError`, which is also a :class:`ValueError`, with a message that
names the offending file or value, the constraint it breaks and how to fix it. Internal
invariants use ``assert``.
"""

from __future__ import annotations

import os


class ShardgnnError(ValueError):
    """Base class of every user-facing shardgnn error."""


class DatasetError(ShardgnnError):
    """A dataset file or dataset spec is missing, malformed or inconsistent."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, fix: str | None = None):
        self.path = None if path is None else os.fspath(path)
        text = message if self.path is None else f"{self.path}: {message}"
        if fix:
            text = f"{text}\n  fix: {fix}"
        super().__init__(text)


class CheckpointError(DatasetError):
    """A checkpoint could not be written (full disk, quota, permissions); the previous complete
    checkpoint is untouched."""


class ConfigError(ShardgnnError):
    """A command-line flag or configuration value is out of its allowed range."""


class DivergedError(ShardgnnError):
    """Training's loss became NaN or infinite: the weights are no longer numbers, and every later
    epoch would only report NaN (a learning rate too high, NaN or infinite inputs)."""


class OutOfMemory(ShardgnnError):
    """An allocation this process could not make: the dataset or model is too large for its
    memory (numpy's and torch's words, with what to shrink)."""

    @classmethod
    def from_allocation(cls, exc: BaseException, limit: str | None = None) -> OutOfMemory | None:
        """The error for ``exc`` if it is a failed allocation (numpy's ``MemoryError``, torch's
        CPU allocator, CUDA's), else None; ``limit``: the process's memory limit, named (see
        :func:`~shardgnn.distributed.oom.memory_limit_hint`)."""
        said = str(exc)
        if isinstance(exc, MemoryError):
            words = said or "an allocation failed"
        elif isinstance(exc, RuntimeError) and (
            "DefaultCPUAllocator: can't allocate memory" in said
            or said.startswith("CUDA out of memory")
        ):
            words = said.split("Allocator: ")[-1]
        else:
            return None
        limit = f"; {limit}" if limit and not said.startswith("CUDA") else ""  # a host limit
        error = cls(
            f"out of memory ({words.strip().splitlines()[0]}{limit})\n  fix: a smaller dataset or "
            "model (--hidden, --batch-size, --fanouts, the dataset's options), or spread it over "
            "more workers or machines (--workers N, or `shardgnn partition` and torchrun)"
        )
        error.__cause__ = exc  # its traceback, in a worker's log, is where the memory went
        return error


REQUEUE_EXIT_CODE = 75
"""The exit status of a run stopped by preemption after saving its checkpoint: ``EX_TEMPFAIL``
("temporary failure, retry"), which a SLURM batch script (or ``RequeueExit=75`` in slurm.conf)
turns into a requeue; ``--resume`` then continues from the checkpoint."""


class Preempted(Exception):
    """Training stopped on a stop signal (SIGTERM, SIGUSR1) at a step every worker agreed on.

    Not an error: the message says what was saved and how to continue, and the process exits with
    :data:`REQUEUE_EXIT_CODE`.

    Attributes:
        signal_name: the signal that asked for the stop (``SIGTERM``...).
        checkpoint: the checkpoint folder written at the stop (None without ``--checkpoint-dir``).
    """

    def __init__(self, message: str, signal_name: str, checkpoint: str | None):
        super().__init__(message)
        self.signal_name, self.checkpoint = signal_name, checkpoint
