"""What the training loop and the steps exchange about one epoch: where it starts, how it may end
early, and what its batches add up to (kept in a mid-epoch checkpoint)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, NamedTuple

import torch

from shardgnn.timing import StageTimer
from shardgnn.train.progress import progress


@dataclasses.dataclass
class EpochSums:
    """What one worker's batches of an epoch add up to (summed over workers by the caller); a
    mid-epoch checkpoint carries them, so the resumed epoch reports the same loss and accuracy."""

    loss_sum: float = 0.0
    correct: float = 0
    """summed training score (right predictions for classes and links)"""
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


class StepResult(NamedTuple):
    """What one optimiser step over a batch adds to its epoch's :class:`EpochSums`. ``loss`` and
    ``correct`` may be 0-dim device tensors: :func:`batch_epoch` sums them there and reads them
    once, when the epoch ends (a read per step makes the host wait for each step's kernels and
    leaves the GPU idle while the next batch is launched)."""

    loss: float | torch.Tensor
    """the batch's mean loss"""
    correct: float | torch.Tensor
    count: int
    """the predictions ``loss`` averages over and ``correct`` counts from: what a batch counts
    for in the epoch's means (node classification: its seeds; link prediction: its pairs)"""
    sampled_edges: int


def _float64(value: float | torch.Tensor) -> float | torch.Tensor:
    """A step's number as summed: a device scalar in float64 (the sums stay exact as Python's)."""
    return value.double() if isinstance(value, torch.Tensor) else value


def batch_epoch(
    run: EpochRun,
    batcher: Any,
    step: Callable[[Any], StepResult],
    stream: Iterable[Any] | None = None,
    *,
    wait_timer: StageTimer | None = None,
) -> EpochSums | None:
    """Epoch ``run``: one ``step(item)`` per item of ``stream``, the pipeline ``batcher`` feeds
    (default: ``batcher`` itself, its ``(index, seeds)``); every kind of batch training runs its
    epochs here, with its own ``step``.

    ``batcher.set_epoch(epoch, start)`` starts the epoch after the batches a mid-epoch checkpoint
    reached (``run.resumed``, whose sums it continues); ``len(batcher)`` is then the number of
    batches left. ``run.stop_requested`` is asked after every batch but the last (a collective in
    distributed runs: every rank asks at the same batch); when it says yes the epoch ends there:
    the stream's iterator is closed (a :class:`~shardgnn.loader.prefetch.PrefetchIterator` does
    alike on every rank), this process's sums go to ``run.stopped`` and the result is ``None``.
    ``wait_timer``, when given, records the time spent waiting for each item as stage ``wait``
    (with a prefetch thread, what the pipeline failed to hide). Returns this process's sums.
    """
    sums = dataclasses.replace(run.resumed) if run.resumed is not None else EpochSums()
    batcher.set_epoch(run.epoch, start=sums.batches)
    left = len(batcher)
    run.total_batches = sums.batches + left
    iterator = iter(batcher if stream is None else stream)
    bar = progress(iterator, f"epoch {run.epoch + 1}", run.show_progress, total=left)
    stopped = False
    waited = shown = time.perf_counter()
    try:
        for item in bar:
            if wait_timer is not None:
                wait_timer.add("wait", time.perf_counter() - waited)
            result = step(item)
            sums.loss_sum += _float64(result.loss) * result.count
            sums.correct += _float64(result.correct)
            sums.count += result.count
            sums.sampled_edges += result.sampled_edges
            sums.batches += 1
            if run.show_progress and time.perf_counter() - shown > 0.5:
                bar.set_postfix(loss=f"{float(result.loss):.4f}")  # a read: twice a second
                shown = time.perf_counter()
            stop = run.stop_requested
            if stop is not None and sums.batches < run.total_batches and stop():
                stopped = True
                break
            waited = time.perf_counter()
    except BaseException:
        getattr(iterator, "abort", getattr(iterator, "close", lambda: None))()
        raise
    sums.loss_sum, sums.correct = float(sums.loss_sum), float(sums.correct)
    if stopped:
        getattr(iterator, "close", lambda: None)()
        run.stopped = sums
        return None
    return sums
