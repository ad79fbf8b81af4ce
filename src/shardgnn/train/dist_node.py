"""Distributed mini-batch node prediction (classes, multi-label, regression): one process per
partition, DDP over the models, the data pipeline on ``torch.distributed`` all-to-alls (what it
shares with link prediction is in :mod:`shardgnn.train.dist_sampled`).

Every rank runs the same number of batches (``DistSeedBatcher``), evaluates a disjoint share of
the validation/test nodes that together cover each exactly once, and reduces metrics over ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.fullgraph.inference import LayerwiseInference, layerwise_metrics
from shardgnn.fullgraph.shard import Grid, load_shard
from shardgnn.graph.csr import label_dtype
from shardgnn.loader.cluster_batches import ClusterBatcher
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.loader.pipeline import (
    FeatureFetcher,
    HistoryReader,
    LocalityCounter,
    NeighborSamplingStage,
    WindowedRows,
)
from shardgnn.nn.models import build_model
from shardgnn.nn.targets import CommReducer, target_of_labels
from shardgnn.precision import precision_context
from shardgnn.sampling.dist_neighbor import DistNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.embedding import input_store
from shardgnn.store.feature import SparseRowStore
from shardgnn.store.historical import HistoricalEmbeddings, halo_of
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_sampled import DistSampledSteps
from shardgnn.train.dist_steps import partition_dataset_record
from shardgnn.train.loop import EpochRecord
from shardgnn.train.minibatch import evaluate_batches, node_objective
from shardgnn.train.setup import eval_sampler_config, label_results


class DistMiniBatchSteps(DistSampledSteps):
    """One rank of a distributed mini-batch training job."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        self._open_inputs(config, ctx, need_labels=True)
        eval_labels = self._open_labels()
        # Every rank reads all parts' (small) split index files once: the seed split is a pure
        # function of the global ids, computed identically everywhere.
        split_ids = {split: self.pset.global_split(split) for split in ("train", "val", "test")}
        self.split_sizes = {split: int(len(ids)) for split, ids in split_ids.items()}
        self.train_batches = self._train_batcher(split_ids["train"])
        sampler = DistNeighborSampler(
            self.graph, config.sampler, self.data_comm, "sample", halo_hops=config.cluster_halo
        )
        if config.historical is not None:
            self._open_history(sampler)
        self._build_caches(
            lambda presampler, seed: NeighborSamplingStage(self.train_batches, presampler, seed)
        )
        self._build_train_stages(sampler)
        self._build_eval_stages(split_ids, eval_labels)
        part = self.graph.part
        self.num_classes = int(part.num_classes)
        self.target = target_of_labels(part.label_kind, part.y, self.num_classes)
        self.metric, self.details = self.target.metric, {}
        self.objective = node_objective(self.target)
        train_rows = np.asarray(part.train_idx if part.train_idx is not None else [], np.int64)
        y_train = torch.from_numpy(np.asarray(part.y[train_rows]))
        self.target.fit_labels(y_train, lambda values: self.sum(values, "setup"))
        torch.manual_seed(config.seed)  # identical initial weights on every rank
        model = build_model(config.model, self.input_width, self.target.out_dim, self.edge_dim)
        model = model.to(ctx.device)
        self._wrap_model(model)

    def _open_labels(self) -> DistFeatureStore:
        """Set ``labels``, the training batches' labels, and return evaluation's (its own
        stage)."""
        dtype = label_dtype(self.graph.part.label_kind)
        peer_y = {p: np.asarray(peer.part.y, dtype=dtype) for p, peer in self.graph.peers.items()}
        y_local = np.asarray(self.graph.part.y, dtype=dtype)
        self.labels = self.dist_rows(y_local, peer_y, "labels")
        return self.dist_rows(y_local, peer_y, "eval")

    def _train_batcher(self, train_ids: np.ndarray) -> ClusterBatcher | DistSeedBatcher:
        """This rank's training seeds per step: random ones, or groups of clusters of its part
        (``--batching cluster``)."""
        config, ctx, book = self.config, self.ctx, self.graph.book
        # --batch-size is the global batch: each of the P workers takes B / P seeds per step, so
        # P workers take the same optimiser steps as one (and DDP's gradient mean is the global
        # one).
        batch_size = config.node_batch_size(self.split_sizes["train"])
        per_rank_batch = max(1, -(-batch_size // ctx.world_size))
        if config.batching == "cluster":
            part = self.graph.part
            return ClusterBatcher(
                train_ids,
                book,
                ctx.rank,
                ctx.world_size,
                per_rank_batch,
                np.asarray(part.indptr),
                np.asarray(part.indices),
                config.clusters_per_batch,
                seed=config.seed,
            )
        return DistSeedBatcher(
            train_ids,
            book,
            ctx.rank,
            ctx.world_size,
            per_rank_batch,
            shuffle=True,
            seed=config.seed,
        )

    def _open_history(self, sampler: DistNeighborSampler) -> None:
        """The historical embeddings of ``--historical`` (collective), which prune what
        ``sampler`` expands."""
        config, ctx, book = self.config, self.ctx, self.graph.book
        start, end = book.part_range(ctx.rank)
        self.history = HistoricalEmbeddings(
            book,
            ctx.rank,
            self.data_comm,
            halo_of(np.asarray(self.graph.part.indices), start, end),
            config.historical_layers,
            config.historical_age,
            config.historical_push_interval,
            mode=config.historical_mode,
            scope=config.historical_scope,
            orig_ids=self.pset.orig_ids,
        )
        sampler.prune = self.history.prune
        # A batch is sampled after the previous step pushed: no prefetch thread.
        self.overlap = False

    def _build_train_stages(self, sampler: DistNeighborSampler) -> None:
        """The training pipeline: batches sampled by ``sampler`` (their edges' locality counted),
        their input rows (through the cache) and labels, then the historical rows."""
        config, ctx = self.config, self.ctx
        self.features = input_store(
            self.cache if self.cache is not None else self.fetch_store,
            None if self.embedding is None else self.embedding.rows,
        )
        bulk = config.sampler.batches_per_call
        if bulk > 1 and self.features.lookahead == 0 and self.embedding is None:
            # k batches sampled together fetch their rows together: one exchange per group
            self.features = WindowedRows(self.features, bulk)
        start, end = self.graph.book.part_range(ctx.rank)
        self.locality = LocalityCounter(
            NeighborSamplingStage(
                self.train_batches, sampler, mix_seed(config.seed, ctx.rank), self.timer
            ),
            lambda ids: (ids >= start) & (ids < end),
        )
        self.train_stages = self._train_fetcher(
            self.locality, self.features, self.labels,
            self.edge_cache if self.edge_cache is not None else self.edge_store,
        )  # fmt: skip
        if self.history is not None:
            self.train_stages = HistoryReader(self.train_stages, self.history, self.timer)

    def _build_eval_stages(
        self, split_ids: dict[str, np.ndarray], eval_labels: DistFeatureStore
    ) -> None:
        """Evaluation's pipeline per split (its own sampler, seeds and stages), and with full
        neighbourhoods the layer-wise inference that replaces it."""
        config, ctx = self.config, self.ctx
        eval_features, eval_edges = self.eval_input_rows()
        eval_sampler = DistNeighborSampler(  # its own stage: "sample" counts training's
            self.graph, eval_sampler_config(config), self.data_comm, "eval"
        )
        self.layerwise = self._layerwise_inference()
        self.eval_stages = {}
        for split in ("val", "test"):
            batches = DistSeedBatcher(
                split_ids[split],
                self.graph.book,
                ctx.rank,
                ctx.world_size,
                max(1, -(-config.eval_batch_size // ctx.world_size)),
                shuffle=False,
                seed=config.seed,
            )
            self.eval_stages[split] = FeatureFetcher(
                NeighborSamplingStage(
                    batches, eval_sampler, mix_seed(config.seed + 1, ctx.rank), StageTimer()
                ),
                eval_features,
                eval_labels,
                StageTimer(),
                edge_rows=eval_edges,
            )

    def _layerwise_inference(self) -> LayerwiseInference | None:
        """Full-neighbourhood evaluation (--eval-fanouts -1,...) runs layer-wise over the whole
        graph (collective): every layer computed once per node instead of once per seed's L-hop
        neighbourhood. None with sampled evaluation fanouts."""
        if not self.config.layerwise_eval:
            return None
        ctx = self.ctx
        shard = load_shard(
            self.pset.path,
            Grid(ctx.world_size, 1),
            ctx.rank,
            self.data_comm,
            need_features=self.has_x,
        )
        shard.x = self.x_local  # with learnable rows, set before each evaluation (they change)
        return LayerwiseInference(shard, ctx.rank, self.data_comm, device=ctx.device, stage="eval")

    def evaluate(self, split: str) -> float:
        """The target's metric over every node of ``split`` (each evaluated by exactly one
        rank)."""
        return self.evaluate_splits((split,))[split]

    @torch.no_grad()
    def evaluate_splits(self, splits: tuple[str, ...]) -> dict[str, float]:
        """Layer-wise: every split from one pass over every node; sampled: split by split."""
        reducer = CommReducer(self.main_comm)
        if self.layerwise is not None:
            shard = self.layerwise.shard
            x_NF = None  # the shard's features
            if self.embedding is not None:
                rows = self.embedding.local.weight.cpu().numpy()
                x = self.x_local
                shard.x = rows if x is None else np.hstack([np.asarray(x), rows])
            elif isinstance(self.x_store, SparseRowStore):
                # held as CSR (for sparse batches): the first layer multiplies their non-zeros
                x_NF = self.x_store.to_sparse()
            with precision_context(self.config.precision, self.ctx.device):
                results = layerwise_metrics(
                    self.layerwise, self.model, splits, self.target, reducer, x_NF
                )
        else:
            results = {
                split: evaluate_batches(
                    self.model,
                    self.eval_stages[split],
                    self.ctx.device,
                    self.target,
                    self.config.precision,
                ).result(reducer)
                for split in splits
            }
        for split, (_, details) in results.items():
            self.details[split] = details
        return {split: metric for split, (metric, _) in results.items()}

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {**super().results_extra(history), **label_results(self.target, self.details)}

    def dataset_info(self) -> dict[str, Any]:
        return partition_dataset_record(
            self.pset, int(self.features.shape[1]), self.num_classes, self.split_sizes
        )
