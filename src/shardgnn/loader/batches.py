"""Stage 1 of the pipeline: split seed nodes into mini-batches (the "item sampler")."""

from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.seeding import mix_seed

T = TypeVar("T")


def split_into_batches(
    num_items: int, batch_size: int, drop_last: bool = False
) -> list[tuple[int, int]]:
    """``(start, stop)`` ranges covering ``range(num_items)`` in batches of ``batch_size``.

    A pure function: the distributed loader computes it on every rank and gets the same answer.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size} must be >= 1")
    stop = (num_items // batch_size) * batch_size if drop_last else num_items
    return [(s, min(s + batch_size, stop)) for s in range(0, stop, batch_size)]


def in_groups(items: Iterable[T], k: int) -> Iterator[list[T]]:
    """``items`` in lists of ``k`` (the last one shorter): the groups bulk sampling draws
    together (``--bulk-batches k``)."""
    group: list[T] = []
    for item in items:
        group.append(item)
        if len(group) == k:
            yield group
            group = []
    if group:
        yield group


class SeedBatcher:
    """Yields ``(batch_index, seeds)`` for one epoch; shuffled by ``(seed, epoch)`` when asked.

    Call :meth:`set_epoch` before iterating to get that epoch's order (and, to resume an epoch
    part-way, the first batch to yield).
    """

    def __init__(
        self,
        seeds: np.ndarray | torch.Tensor,
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ):
        self.seeds = torch.as_tensor(np.asarray(seeds), dtype=torch.int64)
        self.batch_size, self.shuffle, self.drop_last, self.seed = (
            batch_size,
            shuffle,
            drop_last,
            seed,
        )
        self.epoch = self.start = 0
        self._ranges = split_into_batches(len(self.seeds), batch_size, drop_last)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Iterate epoch ``epoch`` from batch ``start`` on (its order does not depend on
        ``start``: batch ``i`` is the same whether the epoch started at 0 or was resumed)."""
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        """Batches the next iteration yields."""
        return max(0, len(self._ranges) - self.start)

    def __iter__(self):
        seeds = self.seeds
        if self.shuffle:
            perm = np.random.default_rng(mix_seed(self.seed, self.epoch)).permutation(len(seeds))
            seeds = seeds[torch.from_numpy(perm)]
        for index, (start, stop) in enumerate(self._ranges):
            if index >= self.start:
                yield index, seeds[start:stop]
