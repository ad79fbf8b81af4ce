"""Distributed mini-batch link prediction: one rank of ``shardgnn train --task link --workers N``.

The launcher split the edges before partitioning (:func:`~shardgnn.graph.linksplit.split_edges`
on the whole graph, the same function one process uses), so the partitions hold the training
graph only and ``DIR/link/`` the split, in original node ids; every rank reads the same split.

* **Training edges** are dealt out so that every rank runs the same number of batches: each pair
  belongs to the owner of its destination, ranks keep their own up to an even quota and the
  surplus goes to ranks below it (:class:`~shardgnn.loader.dist_batches.DistSeedBatcher` over
  pair positions). ``--batch-size`` is the global batch.
* **Negatives** are drawn over the whole graph (the degrees are replicated), their rows fetched
  through the same all-to-all path as every other input row; each batch's own target edges are
  excluded from its sampled blocks by the owners that sample them.
* **Evaluation**: each rank scores an even share of the held-out pairs against their fixed
  negatives, with the embeddings of the nodes they name; the scores are gathered (one
  all-to-all) so every rank computes the same AUC, AP, MRR and Hits@K.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.graph.linksplit import LINK_SPLIT_DIR, load_link_split
from shardgnn.heap import stock_heap
from shardgnn.loader.dist_batches import DistSeedBatcher, FixedBatches
from shardgnn.loader.link import IndexedPairs, LinkSamplingStage, even_share
from shardgnn.loader.pipeline import FeatureFetcher, NeighborSamplingStage, WindowedRows
from shardgnn.partition.book import PartitionBook
from shardgnn.precision import precision_context
from shardgnn.sampling.dist_neighbor import DistNeighborSampler
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.embedding import input_store
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_sampled import DistSampledSteps
from shardgnn.train.dist_steps import partition_dataset_record
from shardgnn.train.link import build_link_model, link_objective, score_pairs
from shardgnn.train.linkmetrics import link_record, metrics_of_shares
from shardgnn.train.loop import EpochRecord
from shardgnn.train.minibatch import batch_graphs
from shardgnn.train.setup import eval_sampler_config


class DistLinkSteps(DistSampledSteps):
    """One rank of a distributed mini-batch link-prediction job."""

    metric = "auc"

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        self._open_inputs(config, ctx, need_labels=False)
        book, n = self.graph.book, self.graph.book.num_nodes
        split = load_link_split(self.pset.path / LINK_SPLIT_DIR)
        self.split = split
        # The split is in the original ids of the graph; the partitions number nodes anew.
        new_of_orig = self.pset.new_id_of_orig()
        train = new_of_orig[split.train_pos_2P]
        # Pairs grouped by the owner of their destination, so that positions double as "node
        # ids" of a partition book over pairs: DistSeedBatcher then keeps pairs with the rank
        # that owns their destination and evens the counts out.
        order = np.argsort(book.owner(train[1]), kind="stable")
        self.train_pairs_2P = train[:, order]
        pair_counts = np.bincount(book.owner(self.train_pairs_2P[1]), minlength=ctx.world_size)
        pair_book = PartitionBook(np.concatenate([[0], np.cumsum(pair_counts)]).astype(np.int64))
        per_rank_batch = max(1, -(-config.item_batch_size // ctx.world_size))
        self.train_batches = DistSeedBatcher(
            np.arange(self.train_pairs_2P.shape[1], dtype=np.int64),
            pair_book,
            ctx.rank,
            ctx.world_size,
            per_rank_batch,
            shuffle=True,
            seed=config.seed,
        )
        link = config.link
        self.negatives = NegativeSampler(
            link.negative_sampler, n, link.negatives, np.asarray(self.graph.degree)
        )

        def link_stage(sampler: DistNeighborSampler, seed: int, timer=None) -> LinkSamplingStage:
            return LinkSamplingStage(
                self.train_batches,
                self.train_pairs_2P,
                sampler,
                self.negatives,
                num_nodes=n,
                symmetric=split.symmetric,
                seed=seed,
                timer=timer,
            )

        self._build_caches(link_stage)
        features = input_store(
            self.fetch_store if self.cache is None else self.cache,
            None if self.embedding is None else self.embedding.rows,
        )
        bulk = config.sampler.batches_per_call
        if bulk > 1 and features.lookahead == 0 and self.embedding is None:
            # k batches sampled together fetch their rows together: one exchange per group
            features = WindowedRows(features, bulk)
        sampler = DistNeighborSampler(self.graph, config.sampler, self.data_comm, "sample")
        self.train_stages = self._train_fetcher(
            link_stage(sampler, mix_seed(config.seed, ctx.rank), self.timer),
            features,
            None,
            self.edge_cache if self.edge_cache is not None else self.edge_store,
        )
        # Evaluation: an even share of each split's positives per rank, all ranks the same
        # number of embedding batches.
        self.eval_inputs, self.eval_edge_rows = self.eval_input_rows()
        self.eval_sampler = DistNeighborSampler(
            self.graph, eval_sampler_config(config), self.data_comm, "eval"
        )
        self.eval_pairs: dict[str, IndexedPairs] = {}
        self.eval_counts: dict[str, int] = {}
        for name in ("val", "test"):
            pos, neg, shares = even_share(split, name, new_of_orig, ctx.rank, ctx.world_size)
            self.eval_pairs[name] = IndexedPairs.of(pos, neg)
            # every rank's node count, so the batch count is agreed without a collective
            pos_all, neg_all = getattr(split, f"{name}_pos_2P"), getattr(split, f"{name}_neg_PK")
            sizes = [
                np.unique(np.concatenate([pos_all[0, s], pos_all[1, s], neg_all[s].ravel()])).size
                for s in shares
            ]
            self.eval_counts[name] = max(1, -(-max(sizes) // config.eval_batch_size))
        self.last_metrics: dict[str, dict[str, float]] = {}
        torch.manual_seed(config.seed)  # identical initial weights on every rank
        self.objective = link_objective(link)
        model = build_link_model(config, self.feature_width, edge_dim=self.edge_dim)
        self._wrap_model(model.to(ctx.device))

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _embed(self, nodes: np.ndarray, count: int) -> torch.Tensor:
        """Embeddings of ``nodes`` (this rank's, sorted) in ``count`` batches (collective)."""
        self.model.eval()
        fetcher = FeatureFetcher(
            NeighborSamplingStage(
                FixedBatches(nodes, count),
                self.eval_sampler,
                mix_seed(self.config.seed + 1, self.ctx.rank),
                StageTimer(),
            ),
            self.eval_inputs,
            None,
            StageTimer(),
            edge_rows=self.eval_edge_rows,
        )
        device = self.ctx.device
        parts = []
        # one batch alive at a time, its memory returned (as evaluate_batches)
        with precision_context(self.config.precision, device), stock_heap():
            for batch in fetcher:
                parts.append(self.model(batch_graphs(batch, device), batch.x_SF.to(device)).float())
                del batch
        return torch.cat(parts)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """AUC over every held-out pair of ``split`` (each scored by exactly one rank; the scores
        of all ranks are gathered, so every rank returns the same metrics)."""
        pairs = self.eval_pairs[split]
        h_ND = self._embed(pairs.nodes, self.eval_counts[split])
        pos, neg = score_pairs(self.model, h_ND, pairs)
        metrics = metrics_of_shares(self.data_comm, pos, neg, self.config.link.reported_hits_at())
        self.last_metrics[split] = metrics
        return metrics["auc"]

    def dataset_info(self) -> dict[str, Any]:
        record = partition_dataset_record(self.pset, self.feature_width, 0, self.split.sizes())
        record["symmetric"] = self.split.symmetric
        return record

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {
            **super().results_extra(history),
            "link": link_record(self.split, self.last_metrics),
        }
