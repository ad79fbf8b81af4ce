"""SUREL link prediction with workers: one rank of ``shardgnn train ... --task link --model surel
--workers N`` over a link-prediction partition (the training graph in parts, the split beside).

Equal to one process (:class:`~shardgnn.train.surel.SURELSteps`) up to fp32 rounding, epoch by
epoch (tested at 1e-5):

* every rank steps through the batches one process does (the same order, the same negatives for
  the whole batch) and scores an even share of each batch's positives with their negatives,
  dividing its loss by the batch's counts, so the shares add up to the batch's loss; the model is
  replicated, its gradients summed over ranks;
* a walk's every step is drawn by the owner of its current node, over that node's edges in their
  original order, from the walk's own stream (the start's original id and the walk's number:
  :func:`~shardgnn.sampling.dist_walks.dist_node_walks`), so the walks are one process's node for
  node; during training each owner leaves out of its rows the whole batch's positive edges, as
  one process does;
* evaluation scores an even share of each held-out split per rank and gathers the scores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.graph.linksplit import LINK_SPLIT_DIR, LinkSplit, load_link_split, pair_keys
from shardgnn.nn.surel import SURELModel
from shardgnn.sampling.dist_walks import dist_node_walks
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import DistSteps, partition_dataset_record
from shardgnn.train.linkmetrics import metrics_of_shares
from shardgnn.train.setup import adam
from shardgnn.train.surel import WalkLinkSteps, csr_without

WALK_STAGE = "walk"


class DistSURELSteps(DistSteps, WalkLinkSteps):
    """One rank of a SUREL job."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        pset = self.pset
        link = config.link
        self.device = ctx.device
        self.comms = (self.main_comm,)
        self._setup_walks()
        orig = load_link_split(pset.path / LINK_SPLIT_DIR)
        self.new_of_orig = pset.new_id_of_orig()
        self.orig_ids = np.asarray(pset.orig_ids)
        # the split in the partition's ids: walks start, step and end in them
        self.split = _relabelled(orig, self.new_of_orig)
        self.book = pset.book
        self.start, end = self.book.part_range(ctx.rank)
        part = pset.load_part(ctx.rank)
        self.indptr = np.asarray(part.indptr, dtype=np.int64)
        self.indices = np.asarray(part.indices, dtype=np.int64)
        dst = self.start + np.repeat(np.arange(end - self.start), np.diff(self.indptr))
        self.edge_keys = pair_keys(self.indices, dst, pset.num_nodes)
        # One process draws negatives over its ids with the training graph's in-degrees: the
        # same degrees in its order give the same draws, then relabelled.
        degrees = pset.in_degrees_by_orig_id()
        self.negatives = _RelabelledNegatives(
            NegativeSampler(link.negative_sampler, pset.num_nodes, link.negatives, degrees),
            self.orig_ids,
            self.new_of_orig,
        )
        torch.manual_seed(config.seed)
        model = config.model
        self.model = SURELModel(self.walk_length, model.hidden, model.dropout, pset.num_nodes)
        self.model = self.model.to(self.device)
        self.optimizer = adam(self.model.parameters(), config.optim)

    def draw_walks(self, nodes: np.ndarray, seed: int, without: np.ndarray | None) -> np.ndarray:
        indptr, indices = self.indptr, self.indices
        if without is not None:
            indptr, indices = csr_without(
                indptr, indices, self.edge_keys, without, self.pset.num_nodes, self.split.symmetric
            )
        return dist_node_walks(
            self.book.owner, indptr, indices, self.start, self.main_comm, nodes,
            self.orig_ids[nodes], self.num_walks, self.walk_length, seed, WALK_STAGE,
        )  # fmt: skip

    def share(self, count: int) -> np.ndarray:
        return np.array_split(np.arange(count), self.world_size)[self.rank]

    def backward_and_step(self, loss_share: torch.Tensor) -> None:
        """Backward, the gradients summed over ranks in one all-reduce, one step."""
        loss_share.backward()
        self.sum_gradients(list(self.model.parameters()))
        self.optimizer.step()

    def metrics(self, pos_P: np.ndarray, neg_PK: np.ndarray) -> dict[str, float]:
        return metrics_of_shares(self.main_comm, pos_P, neg_PK, self.config.link.reported_hits_at())

    def dataset_info(self) -> dict[str, Any]:
        record = partition_dataset_record(self.pset, 0, 0, self.split.sizes())
        record["symmetric"] = self.split.symmetric
        return record


class _RelabelledNegatives:
    """One process's negatives (drawn in original ids) for positives given in the partition's
    ids, returned in them."""

    def __init__(self, sampler: NegativeSampler, orig_ids: np.ndarray, new_of_orig: np.ndarray):
        self.sampler, self.orig_ids, self.new_of_orig = sampler, orig_ids, new_of_orig

    def sample(self, src_P: np.ndarray, dst_P: np.ndarray, seed: int) -> np.ndarray:
        orig = self.orig_ids
        return self.new_of_orig[self.sampler.sample(orig[src_P], orig[dst_P], seed)]


def _relabelled(split: LinkSplit, new_of_orig: np.ndarray) -> LinkSplit:
    """``split`` with every node id relabelled (``new_of_orig``), pairs in the same order."""
    fields = ("train_pos_2P", "val_pos_2P", "test_pos_2P", "val_neg_PK", "test_neg_PK")
    return dataclasses.replace(split, **{f: new_of_orig[getattr(split, f)] for f in fields})
