"""What the training loop and the steps exchange about one epoch: where it starts, how it may end
early, and what its batches add up to (kept in a mid-epoch checkpoint)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from shardgnn.train.progress import progress


@dataclasses.dataclass
class EpochSums:
    """What one worker's batches of an epoch add up to (summed over workers by the caller); a
    mid-epoch checkpoint carries them, so the resumed epoch reports the same loss and accuracy."""

    loss_sum: float = 0.0
    correct: int = 0
    count: int = 0
    sampled_edges: int = 0
    batches: int = 0
    """batches of the epoch done (including those before a resume)"""


@dataclasses.dataclass
class EpochRun:
    """What the loop asks of one epoch: where it starts and how it may end early.

    Steps that run batches start after ``resumed.batches`` batches (a mid-epoch checkpoint), ask
    ``stop_requested`` after every batch but the last, and when it says yes, stop there and put
    this rank's sums in ``stopped``. Steps with one step per epoch (full graph) ignore both; the
    loop asks again at the end of every epoch.
    """

    epoch: int
    """0-based"""
    show_progress: bool
    resumed: EpochSums | None = None
    stop_requested: Callable[[], bool] | None = None
    stopped: EpochSums | None = None
    total_batches: int | None = None
    """set by batch steps: the epoch's number of batches"""


def batch_epoch(run: EpochRun, batches, step) -> EpochSums | None:
    """Epoch ``run`` over ``batches`` (``set_epoch(epoch, start)``, then ``(index, seeds)``):
    ``step(index, seeds) -> (loss, correct, count, sampled edges)`` per batch. Starts after the
    batches a mid-epoch checkpoint reached and stops after a batch when ``run.stop_requested``
    says so (``None``; this process's sums in ``run.stopped``); else this process's sums."""
    sums = run.resumed if run.resumed is not None else EpochSums()
    batches.set_epoch(run.epoch, start=sums.batches)
    run.total_batches = sums.batches + len(batches)
    for index, seeds in progress(batches, f"epoch {run.epoch + 1}", run.show_progress):
        loss, correct, count, edges = step(index, seeds)
        sums.loss_sum += loss * count
        sums.correct += correct
        sums.count += count
        sums.sampled_edges += edges
        sums.batches += 1
        if run.stop_requested is not None and index + 1 < run.total_batches:
            if run.stop_requested():
                run.stopped = sums
                return None
    return sums
