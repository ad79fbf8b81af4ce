"""Distributed full-graph link prediction (GAE on the distributed SpMM): one rank of
``shardgnn train --task link --mode full --workers N``.

Equal to one process's full-graph link prediction (:class:`~shardgnn.train.link.LinkLocalSteps`
with ``mode="full"``) up to fp32 rounding, epoch by epoch (tested at 1e-5):

* the partitions hold the training graph and ``DIR/link/`` the split, in original ids, as for
  mini-batch link prediction; every rank reads the same split;
* every rank draws the same negatives for *all* training pairs, in original ids and from the
  same seed as one process, and scores the pairs whose destination it owns;
* a pair's source and negatives may lie in any part: their embeddings come from their owners
  through a :class:`~shardgnn.fullgraph.rows.RowGather` (their gradients go back the same way);
* each rank divides its loss sums by the *global* pair counts, so the shares add up to the one
  loss; weight gradients are summed over ranks;
* evaluation scores an even share of each held-out split per rank and gathers the scores, as
  the mini-batch job does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.fullgraph.rows import RowGather
from shardgnn.graph.linksplit import LINK_SPLIT_DIR, load_link_split
from shardgnn.loader.link import IndexedPairs, even_share
from shardgnn.nn.link import link_loss
from shardgnn.precision import precision_context
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.seeding import mix_seed
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import partition_dataset_record
from shardgnn.train.epoch import EpochRun
from shardgnn.train.fullgraph import DistFullGraphSteps
from shardgnn.train.link import build_link_model, score_pairs
from shardgnn.train.linkmetrics import link_record, metrics_of_shares
from shardgnn.train.loop import EpochRecord

PAIR_STAGE = "pairs"


class DistFullLinkSteps(DistFullGraphSteps):
    """One rank of a distributed full-graph link-prediction job."""

    metric = "auc"

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx, need_labels=False)
        pset, book = self.pset, self.pset.book
        self.split = split = load_link_split(pset.path / LINK_SPLIT_DIR)
        self.new_of_orig = pset.new_id_of_orig()
        # One process draws negatives over original ids with the training graph's in-degrees
        # (self-loops included): the same degrees, in original order, give the same draws here.
        link = config.link
        self.negatives = NegativeSampler(
            link.negative_sampler, book.num_nodes, link.negatives, pset.in_degrees_by_orig_id()
        )
        # This rank scores the training pairs whose destination it owns.
        train_dst_new = self.new_of_orig[split.train_pos_2P[1]]
        self.train_mine = np.flatnonzero(book.owner(train_dst_new) == ctx.rank)
        self.own_offset = self.shard.own_start - self.shard.row_start
        self.eval_pairs: dict[str, IndexedPairs] = {}
        self.eval_gathers: dict[str, RowGather] = {}
        for name in ("val", "test"):
            pos, neg, _ = even_share(split, name, self.new_of_orig, ctx.rank, ctx.world_size)
            pairs = IndexedPairs.of(pos, neg)
            self.eval_pairs[name] = pairs
            self.eval_gathers[name] = self._row_gather(pairs.nodes, "eval")
        self.last_metrics: dict[str, dict[str, float]] = {}
        edge_dim = self._model_edge_dim()
        self._set_model(
            lambda: build_link_model(config, self.shard.num_features, edge_dim=edge_dim),
            config.link.out_dim,
        )

    def _row_gather(self, nodes: np.ndarray, stage: str) -> RowGather:
        return RowGather(nodes, self.pset.book, self.spmm_comm, self.own_offset, stage)

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        """GAE, as one process: embeddings of the whole training graph, every training pair
        once, fresh negatives every epoch (``mix_seed(seed, epoch)``, over all pairs)."""
        link, pos_orig_2P = self.config.link, self.split.train_pos_2P
        device = self.ctx.device
        neg_orig_PK = self.negatives.sample(
            pos_orig_2P[0], pos_orig_2P[1], mix_seed(self.config.seed, run.epoch)
        )
        mine = self.train_mine
        new = self.new_of_orig
        pairs = IndexedPairs.of(new[pos_orig_2P[:, mine]], new[neg_orig_PK[mine]])
        gather = self._row_gather(pairs.nodes, PAIR_STAGE)  # negatives change every epoch
        num_pos = pos_orig_2P.shape[1]
        num_neg = neg_orig_PK.size
        with self._timed_step():
            with precision_context(self.config.precision, device):
                h_ND = self.model(self.layers, self.x).float()  # rows travel in fp32
                h_UD = gather.gather(h_ND)
                pos, neg = self.model.score_batch(
                    h_UD, pairs.src_P.to(device), pairs.dst_P.to(device), pairs.neg_PK.to(device)
                )
                loss_share = link_loss(pos, neg, link.loss, link.margin, num_pos, num_neg)
            self._backward_and_step(loss_share)
        correct = int((pos > 0).sum()) + int((neg <= 0).sum())
        loss_total, correct_total = self.sum([float(loss_share.detach()), float(correct)])
        return loss_total, correct_total / max(num_pos + num_neg, 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """AUC over every held-out pair of ``split`` (each scored by exactly one rank; every rank
        returns the same metrics)."""
        self.model.eval()
        pairs = self.eval_pairs[split]
        with precision_context(self.config.precision, self.ctx.device):
            h_ND = self.model(self.layers, self.x).float()
        h_UD = self.eval_gathers[split].gather(h_ND)
        pos, neg = score_pairs(self.model, h_UD, pairs)
        metrics = metrics_of_shares(self.main_comm, pos, neg, self.config.link.reported_hits_at())
        self.last_metrics[split] = metrics
        return metrics["auc"]

    # ------------------------------------------------------------------ results
    def dataset_info(self) -> dict[str, Any]:
        record = partition_dataset_record(self.pset, self.shard.num_features, 0, self.split.sizes())
        record["symmetric"] = self.split.symmetric
        return record

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {
            **super().results_extra(history),
            "link": link_record(self.split, self.last_metrics),
        }
