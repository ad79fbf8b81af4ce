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

from shardgnn.graph.linksplit import pair_keys
from shardgnn.loader.batches import SeedBatcher
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.sampling.types import SampledBlocks
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
        sampler: a neighbour sampler with ``sample(seeds, seed, exclude=...)``.
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
        for index, positions in self.batches:
            yield index, self.sample_batch(np.asarray(positions), epoch, index)

    def sample_batch(self, positions: np.ndarray, epoch: int, index: int) -> LinkSample:
        """Batch ``index`` of ``epoch`` (the pairs at ``positions``), timed as stages
        ``negatives`` and ``sample``."""
        src, dst = self.pairs_2P[0, positions], self.pairs_2P[1, positions]
        with self.timer("negatives"):
            neg = self.negatives.sample(src, dst, mix_seed(self.seed, epoch, index, 1))
        with self.timer("sample"):
            seeds, inverse = np.unique(np.concatenate([src, dst, neg.ravel()]), return_inverse=True)
            p = src.shape[0]
            exclude = target_exclusion(src, dst, self.num_nodes, self.symmetric)
            sample = self.sampler.sample(seeds, mix_seed(self.seed, epoch, index), exclude=exclude)
            inverse = torch.from_numpy(inverse.astype(np.int64))
        return LinkSample(
            seeds=sample.seeds,
            blocks=sample.blocks,
            pos_src_P=inverse[:p],
            pos_dst_P=inverse[p : 2 * p],
            neg_dst_PK=inverse[2 * p :].reshape(p, neg.shape[1]),
        )


def edge_batcher(num_pairs: int, batch_size: int, *, shuffle: bool, seed: int) -> SeedBatcher:
    """Batches of positions ``0..num_pairs-1`` (a pair's position stands in for the pair)."""
    return SeedBatcher(np.arange(num_pairs, dtype=np.int64), batch_size, shuffle=shuffle, seed=seed)
