"""What the training loop and the steps exchange about one epoch: where it starts, how it may end
early, and what its batches add up to (kept in a mid-epoch checkpoint)."""

from __future__ import annotations

import dataclasses
from typing import Callable


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
