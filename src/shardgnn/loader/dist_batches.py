"""Even work by construction: every rank runs the same number of batches.

Uneven batch counts are the classic distributed-GNN deadlock (one rank enters an all-reduce the
others never reach). Here the split is a pure function of (all seed ids, partition book, world
size), computed identically on every rank, and tested for every rank in one process.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from shardgnn.partition.book import PartitionBook
from shardgnn.seeding import mix_seed


def assign_seeds_evenly(
    seeds: np.ndarray, book: PartitionBook, world_size: int
) -> list[np.ndarray]:
    """Split ``seeds`` (global ids) into ``world_size`` sets whose sizes differ by at most one.

    Each rank keeps as many seeds it owns as its quota allows (locality: its own rows need no
    fetch); the surplus of over-full ranks goes, in id order, to ranks below quota. Every seed is
    assigned exactly once.
    """
    seeds = np.sort(np.asarray(seeds, dtype=np.int64))
    total = seeds.shape[0]
    quota = [total // world_size + (1 if r < total % world_size else 0) for r in range(world_size)]
    owners = book.owner(seeds) if total else np.zeros(0, dtype=np.int64)
    kept: list[np.ndarray] = []
    surplus: list[np.ndarray] = []
    for r in range(world_size):
        own = seeds[owners == r]
        kept.append(own[: quota[r]])
        surplus.append(own[quota[r] :])
    pool = np.concatenate(surplus) if surplus else np.zeros(0, dtype=np.int64)
    out, taken = [], 0
    for r in range(world_size):
        need = quota[r] - kept[r].shape[0]
        out.append(np.sort(np.concatenate([kept[r], pool[taken : taken + need]])))
        taken += need
    assert taken == pool.shape[0] and sum(o.shape[0] for o in out) == total
    return out


def num_batches(per_rank: list[np.ndarray], batch_size: int) -> int:
    """The common batch count: enough batches of ``batch_size`` for the largest share (>= 1)."""
    return max(1, math.ceil(max(a.shape[0] for a in per_rank) / batch_size))


def rank_batches(
    my_seeds: np.ndarray, count: int, *, shuffle: bool, seed: int, epoch: int, rank: int
) -> list[np.ndarray]:
    """This rank's seeds in exactly ``count`` batches (sizes differ by at most one; a rank with
    fewer seeds than batches gets some empty batches, which still take part in the collectives)."""
    if shuffle:
        my_seeds = my_seeds[
            np.random.default_rng(mix_seed(seed, epoch, rank)).permutation(my_seeds.shape[0])
        ]
    return np.array_split(my_seeds, count)


class DistSeedBatcher:
    """The distributed counterpart of :class:`~shardgnn.loader.batches.SeedBatcher`: yields
    ``(batch_index, seeds)`` for this rank, the same number of batches on every rank."""

    def __init__(
        self,
        seeds: np.ndarray,
        book: PartitionBook,
        rank: int,
        world_size: int,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
    ):
        shares = assign_seeds_evenly(seeds, book, world_size)
        self.my_seeds = shares[rank]
        self.count = num_batches(shares, batch_size)
        self.rank, self.shuffle, self.seed = rank, shuffle, seed
        self.epoch = self.start = 0
        self.window = 1
        """The training fetch's window (batches whose rows are fetched together, from a batch
        index that is a multiple of it): an epoch resumed inside a window is iterated from the
        window's start, so that the window is fetched again whole, as the uninterrupted run
        fetched it; the fetcher trains from :attr:`start` (``FeatureFetcher(trains_from=)``)."""

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Iterate epoch ``epoch`` from batch ``start`` on (batch ``i`` does not depend on
        ``start``), or from the start of the :attr:`window` it falls in."""
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        """Batches the next epoch trains (the same on every rank): from :attr:`start` on."""
        return max(0, self.count - self.start)

    def batches(self) -> list[np.ndarray]:
        """This epoch's ``count`` batches of this rank."""
        return rank_batches(
            self.my_seeds,
            self.count,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            rank=self.rank,
        )

    def __iter__(self):
        import torch

        first = self.start - self.start % self.window
        for index, seeds in enumerate(self.batches()):
            if index >= first:
                yield index, torch.from_numpy(np.ascontiguousarray(seeds))


class FixedBatches:
    """This rank's ``count`` batches of given node ids (sizes differ by at most one; ``count`` is
    the same on every rank, so an empty batch still takes part in the collectives)."""

    def __init__(self, ids: np.ndarray, count: int):
        self.batches = np.array_split(np.asarray(ids, dtype=np.int64), count)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for index, ids in enumerate(self.batches):
            yield index, torch.from_numpy(np.ascontiguousarray(ids))
