"""The link-prediction pipeline: target pairs become their endpoint nodes, then sampled blocks.

    EdgeBatcher -> LinkSamplingStage -> FeatureFetcher -> (trainer: embeddings, scores, loss)

A batch's positives ``(u, v)`` get their negatives (:class:`NegativeSampler`); every endpoint of
both is a seed node of the sampled blocks, and the batch's own target edges (both directions in
a symmetric graph) are excluded from those blocks, so a positive's label cannot leak through
message passing.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np
import torch

from shardgnn.graph.linksplit import LinkSplit, pair_keys
from shardgnn.loader.batches import SeedBatcher, in_groups
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.sampling.types import SampledBlocks, SeedInput
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer


@dataclasses.dataclass(frozen=True)
class LinkSample(SampledBlocks):
    """Blocks sampled for a batch of target pairs. Pairs are given as local indices into
    ``seeds`` (the sorted unique endpoints): positive ``i`` is ``(seeds[pos_src_P[i]],
    seeds[pos_dst_P[i]])``, its negatives ``(seeds[pos_src_P[i]], seeds[neg_dst_PK[i, j]])``."""

    pos_src_P: torch.Tensor
    pos_dst_P: torch.Tensor
    neg_dst_PK: torch.Tensor


def target_exclusion(src_P: np.ndarray, dst_P: np.ndarray, num_nodes: int, symmetric: bool):
    """Sorted pair keys of the target edges ``src -> dst`` (and ``dst -> src`` when the graph is
    symmetric): what :func:`~shardgnn.sampling.neighbor.excluded` drops."""
    keys = pair_keys(src_P, dst_P, num_nodes)
    if symmetric:
        keys = np.concatenate([keys, pair_keys(dst_P, src_P, num_nodes)])
    return np.unique(keys)


class LinkSamplingStage:
    """Negatives, endpoint seeds and sampled blocks for every batch of target pairs.

    Args:
        batches: a seed batcher over positions ``0..P-1`` of ``pairs_2P`` (a
            :class:`~shardgnn.loader.batches.SeedBatcher` or the distributed one).
        pairs_2P: int64 ``[2, P]`` target pairs (global ids).
        sampler: a :class:`~shardgnn.sampling.types.Sampler` that honours
            ``SeedInput.exclude`` (every block sampler but the torch reference and temporal).
        negatives: the negative sampler.
        num_nodes: nodes of the whole graph.
        symmetric: whether a target edge stands for both directions.
        seed: the stream of this rank: batch ``i`` of epoch ``e`` draws its negatives with
            ``mix_seed(seed, e, i, 1)`` and samples with ``mix_seed(seed, e, i)``.
    """

    def __init__(
        self,
        batches,
        pairs_2P: np.ndarray,
        sampler,
        negatives: NegativeSampler,
        *,
        num_nodes: int,
        symmetric: bool,
        seed: int,
        timer: StageTimer | None = None,
    ):
        self.batches, self.pairs_2P, self.sampler = batches, pairs_2P, sampler
        self.negatives, self.num_nodes, self.symmetric = negatives, num_nodes, symmetric
        self.seed = seed
        self.timer = timer or StageTimer()

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[int, LinkSample]]:
        epoch = self.batches.epoch
        bulk = getattr(getattr(self.sampler, "config", None), "batches_per_call", 1)
        if bulk > 1 and hasattr(self.sampler, "sample_many"):
            yield from self._bulk(epoch, bulk)
            return
        for index, positions in self.batches:
            yield index, self.sample_batch(np.asarray(positions), epoch, index)

    def _bulk(self, epoch: int, k: int) -> Iterator[tuple[int, LinkSample]]:
        """``k`` batches at a time through the sampler's ``sample_many`` (each with its own
        negatives, exclusions and seed: the samples of one batch at a time)."""
        for group in in_groups(self.batches, k):
            targets = [(i, self._targets(np.asarray(p), epoch, i)) for i, p in group]
            with self.timer("sample"):
                inputs = [batch.inputs for _, batch in targets]
                samples = self.sampler.sample_many(
                    inputs, [mix_seed(self.seed, epoch, i) for i, _ in targets]
                )
            for (index, batch), sample in zip(targets, samples, strict=True):
                yield index, batch.sample(sample)

    def sample_batch(self, positions: np.ndarray, epoch: int, index: int) -> LinkSample:
        """Batch ``index`` of ``epoch`` (the pairs at ``positions``), timed as stages
        ``negatives`` and ``sample``."""
        targets = self._targets(positions, epoch, index)
        with self.timer("sample"):
            sample = self.sampler.sample(targets.inputs, mix_seed(self.seed, epoch, index))
        return targets.sample(sample)

    def _targets(self, positions: np.ndarray, epoch: int, index: int) -> "_Targets":
        """Batch ``index``'s pairs, negatives, seeds and exclusions (timed as ``negatives`` and
        ``sample``)."""
        src, dst = self.pairs_2P[0, positions], self.pairs_2P[1, positions]
        with self.timer("negatives"):
            neg = self.negatives.sample(src, dst, mix_seed(self.seed, epoch, index, 1))
        with self.timer("sample"):
            seeds, inverse = np.unique(np.concatenate([src, dst, neg.ravel()]), return_inverse=True)
            exclude = target_exclusion(src, dst, self.num_nodes, self.symmetric)
        return _Targets(
            SeedInput(seeds, exclude=exclude),
            torch.from_numpy(inverse.astype(np.int64)),
            src.shape[0],
            neg.shape[1],
        )


@dataclasses.dataclass(frozen=True)
class _Targets:
    """One batch's target pairs before sampling: the sampler's input and where each pair's
    endpoints sit among its seeds."""

    inputs: SeedInput
    inverse: torch.Tensor
    num_pos: int
    negatives_per_pair: int

    def sample(self, sample: SampledBlocks) -> LinkSample:
        p = self.num_pos
        return LinkSample(
            seeds=sample.seeds,
            blocks=sample.blocks,
            pos_src_P=self.inverse[:p],
            pos_dst_P=self.inverse[p : 2 * p],
            neg_dst_PK=self.inverse[2 * p :].reshape(p, self.negatives_per_pair),
        )


def edge_batcher(num_pairs: int, batch_size: int, *, shuffle: bool, seed: int) -> SeedBatcher:
    """Batches of positions ``0..num_pairs-1`` (a pair's position stands in for the pair)."""
    return SeedBatcher(np.arange(num_pairs, dtype=np.int64), batch_size, shuffle=shuffle, seed=seed)


@dataclasses.dataclass
class IndexedPairs:
    """Positive pairs and their negatives as rows of ``nodes``' embeddings (an evaluation split
    with its fixed negatives, or one rank's training pairs of a full-graph epoch)."""

    nodes: np.ndarray
    """sorted unique endpoints (global ids)"""
    src_P: torch.Tensor
    dst_P: torch.Tensor
    neg_PK: torch.Tensor

    @classmethod
    def of(cls, pos_2P: np.ndarray, neg_PK: np.ndarray) -> "IndexedPairs":
        nodes, inverse = unique_ids(np.concatenate([pos_2P[0], pos_2P[1], neg_PK.ravel()]))
        p = pos_2P.shape[1]
        inverse = torch.from_numpy(inverse)
        neg = inverse[2 * p :].reshape(neg_PK.shape)
        return cls(nodes, inverse[:p], inverse[p : 2 * p], neg)


def unique_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` of non-negative int ids (inverse as int64), by
    marking them in an array of ``max + 1`` instead of sorting: no O(len) sort temporaries (an
    evaluation split's ids are P * (K + 2), 9M on soc-slashdot's test split). Ids far sparser
    than that array (a few ids of a huge graph) are sorted as ``np.unique`` does."""
    ids = np.asarray(ids)
    if ids.size == 0:
        return ids.copy(), np.zeros(0, dtype=np.int64)
    top = int(ids.max()) + 1
    if top > 4 * ids.size + (1 << 20):
        nodes, inverse = np.unique(ids, return_inverse=True)
        return nodes, inverse.reshape(-1).astype(np.int64, copy=False)
    index = np.zeros(top, dtype=np.int64)
    index[ids] = 1
    nodes = np.flatnonzero(index).astype(ids.dtype, copy=False)
    np.cumsum(index, out=index)
    index -= 1  # position of each present id among the present ids
    return nodes, index[ids]


def even_share(split: LinkSplit, name: str, new_of_orig: np.ndarray, rank: int, world: int):
    """Rank ``rank``'s even share of split ``name``'s (``val``/``test``) pairs in new ids, in
    pair order: ``(pos_2P, neg_PK, positions of every rank's share)``."""
    pos = new_of_orig[getattr(split, f"{name}_pos_2P")]
    neg = new_of_orig[getattr(split, f"{name}_neg_PK")]
    shares = np.array_split(np.arange(pos.shape[1]), world)
    return pos[:, shares[rank]], neg[shares[rank]], shares
