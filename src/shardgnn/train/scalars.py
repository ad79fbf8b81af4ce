"""``--tensorboard DIR``: TensorBoard scalars per epoch, written by rank 0 with PyTorch's own
``SummaryWriter`` (the ``tensorboard`` package must be installed: refused in one line before
training otherwise).

Per epoch (the step is the epoch's number, so a resumed run continues the curves): ``loss``,
``train/<metric>`` and ``val/<metric>`` (``acc``; ``auc`` for link prediction), ``time/epoch_s``
and one ``time/<stage>_s`` per stage; at the end, ``test/<metric>`` and ``val/best_<metric>`` at
the best epoch.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from shardgnn.errors import ConfigError

FLAG = "--tensorboard"


def check_tensorboard(directory: str | None) -> None:
    """Refuse ``--tensorboard`` when the ``tensorboard`` package is missing (one line)."""
    if directory is not None and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"{FLAG} {directory}: writing TensorBoard scalars needs the tensorboard package "
            "(pip install tensorboard), or drop the flag"
        )


class ScalarLog:
    """The run's TensorBoard scalars (``directory`` None: nothing is written)."""

    def __init__(self, directory: str | None, metric: str):
        self.metric, self.writer = metric, None
        if directory is not None:
            check_tensorboard(directory)
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=directory)

    def epoch(self, record: Any) -> None:
        """One epoch's scalars (an :class:`~shardgnn.train.loop.EpochRecord`)."""
        if self.writer is None:
            return
        step, m = record.epoch, self.metric
        self.writer.add_scalar("loss", record.loss, step)
        self.writer.add_scalar(f"train/{m}", record.train_acc, step)
        self.writer.add_scalar(f"val/{m}", record.val_acc, step)
        self.writer.add_scalar("time/epoch_s", record.time_s, step)
        for stage, seconds in record.stages.items():
            self.writer.add_scalar(f"time/{stage}_s", seconds, step)
        self.writer.flush()

    def final(self, best_epoch: int, val: float, test: float) -> None:
        """The best epoch's validation and test metric, at that epoch's step."""
        if self.writer is None:
            return
        self.writer.add_scalar(f"val/best_{self.metric}", val, best_epoch)
        self.writer.add_scalar(f"test/{self.metric}", test, best_epoch)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
