"""Distributed mini-batch training: one process per partition, DDP over the models, the data
pipeline on ``torch.distributed`` all-to-alls.

Every rank runs the same number of batches (``DistSeedBatcher``), evaluates a disjoint share of
the validation/test nodes that together cover each exactly once, and reduces metrics over ranks.
With ``overlap`` the sampling and feature fetch of batch i+1 run in a background thread (on the
context's ``data_group``) while the main thread trains on batch i (gradients on ``group``);
``auto`` turns it on when every worker has at least two cores.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from shardgnn.distributed.codec import RowResiduals, make_codec
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.inference import LayerwiseInference, layerwise_accuracies
from shardgnn.fullgraph.shard import Grid, load_shard
from shardgnn.graph.features import normalize_features, row_sums
from shardgnn.loader.cluster_batches import ClusterBatcher
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.loader.pipeline import (
    FeatureFetcher,
    HistoryReader,
    LocalityCounter,
    NeighborSamplingStage,
    count_accesses,
)
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.nn.models import build_model
from shardgnn.partition.format import PartitionSet, read_partitions
from shardgnn.precision import precision_context
from shardgnn.sampling.distributed import DistNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.cache.build import build_cache, cacheable_rows
from shardgnn.store.cache.store import CachedFeatureStore
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.dist_graph import DistGraphStore
from shardgnn.store.embedding import check_table_fits, input_store
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.store.historical import HistoricalEmbeddings, halo_of
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.minibatch import (
    Objective,
    count_correct,
    node_classification,
    train_epoch_batches,
)
from shardgnn.train.setup import EMBEDDING_STREAM, eval_sampler_config


# no annotations: DDP compares them to dist.GradBucket by identity
def _counted_allreduce_hook(comm, bucket):
    """DDP gradient averaging routed through the communicator, so its bytes are counted."""
    buffer = bucket.buffer()
    buffer.div_(comm.world_size)
    comm.all_reduce(buffer, "allreduce")
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(buffer)
    return future


def partition_dataset_record(
    pset: PartitionSet, num_features: int, num_classes: int, split_sizes: dict[str, int]
) -> dict[str, Any]:
    """What results and checkpoints record of the partitioned dataset (as ``dataset_record``)."""
    identity = pset.dataset
    return {
        **identity,
        "num_nodes": pset.num_nodes,
        "num_edges": pset.num_edges,
        "num_features": num_features,
        "num_classes": num_classes,
        **split_sizes,
        "partitions": {"path": str(pset.path), "parts": pset.num_parts, "method": pset.method},
    }


def _served_ages(ages) -> dict[str, Any]:
    """Mean and largest age of served entries, from ``ages[a]`` = entries served at age ``a``."""
    served = int(np.sum(ages))
    return {
        "mean_served_age": float(np.dot(np.arange(len(ages)), ages) / served) if served else None,
        "max_served_age": int(np.flatnonzero(ages)[-1]) if served else None,
    }


def _mean_of(history: list[EpochRecord], key: str) -> float | None:
    """The mean of epoch metric ``key`` over the epochs that recorded it."""
    values = [r.cache[key] for r in history if r.cache and r.cache.get(key) is not None]
    return float(np.mean(values)) if values else None


def _mapped_rows(rows: np.ndarray, feature_norm: str) -> LocalFeatureStore:
    """A store over memory-mapped feature rows, normalised per gathered row (bit for bit what
    :func:`normalize_features` gives; ``standard`` is refused for distributed runs)."""
    return LocalFeatureStore(rows, row_divisor=row_sums(rows) if feature_norm == "row" else None)


class DistSteps(Steps):
    """What every distributed kind of training shares: the context, the communicators and the
    reductions over ranks."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        self.config, self.ctx = config, ctx
        self.rank, self.world_size = ctx.rank, ctx.world_size
        apply_process_settings(config)
        self.main_comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        self.timer = StageTimer()
        assert config.run.partitions is not None
        self.pset = read_partitions(config.run.partitions, verify=False)
        if self.pset.num_parts != ctx.world_size:
            raise ConfigError(
                f"{self.pset.path} holds {self.pset.num_parts} parts but {ctx.world_size} workers "
                f"run; use --workers {self.pset.num_parts} or re-partition with --parts "
                f"{ctx.world_size}"
            )
        if config.feature_norm == "standard":
            raise ConfigError(
                "--feature-norm standard needs global statistics; use row or none when distributed"
            )

    def sum(self, values: list[float], stage: str = "metrics") -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        self.main_comm.all_reduce(t, stage)
        return t.tolist()

    def barrier(self) -> None:
        self.ctx.barrier()

    def broadcast_weights(self, model: torch.nn.Module) -> None:
        """Rank 0's weights everywhere (identical by seeding already; made certain here)."""
        for tensor in model.state_dict().values():
            self.main_comm.broadcast(tensor, src=0, stage="setup")

    def data_parallel(self, module: torch.nn.Module) -> DistributedDataParallel:
        """``module`` in DDP over the job's group, its gradient all-reduce counted by the
        communicator; buffers are never broadcast (sharded rows attached to a model are
        rank-local)."""
        ctx = self.ctx
        with warnings.catch_warnings():
            # torch deprecates broadcast_buffers in favour of forward_sync_buffers, which still
            # syncs buffers at init; rank-local buffers (the sharded rows) need the old switch,
            # as the warning itself advises until init_sync_buffers exists.
            warnings.filterwarnings(
                "ignore", message=".*broadcast_buffers.*", category=FutureWarning
            )
            ddp = DistributedDataParallel(
                module,
                device_ids=None if ctx.device.type == "cpu" else [ctx.device],
                process_group=ctx.group,
                init_sync=False,
                broadcast_buffers=False,
            )
        ddp.register_comm_hook(self.main_comm, _counted_allreduce_hook)
        return ddp

    def _check_labelled(self, has_features: bool, has_labels: bool) -> None:
        if not (has_features and has_labels):
            raise ConfigError(
                f"{self.pset.path} holds no {'features' if not has_features else 'labels'}; "
                "partition a labelled dataset (or give yours features and labels with "
                "`shardgnn convert`)"
            )


class DistSampledSteps(DistSteps):
    """What sampled (mini-batch) distributed training shares, node classification or link
    prediction: the graph store, the input rows (features, learnable rows, or both), the
    DDP-wrapped model and the epoch. Subclasses set ``train_batches`` (the batcher),
    ``train_stages`` (the pipeline it feeds) and ``objective``."""

    objective: Objective = staticmethod(node_classification)
    sampled_edges = 0
    sampled_epochs = 0
    history: HistoricalEmbeddings | None = None
    locality: LocalityCounter | None = None

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        trained = train_epoch_batches(
            run,
            self.train_batches,
            Prefetcher(self.train_stages) if self.overlap else self.train_stages,
            self.ddp,
            self.optimizer,
            device=self.ctx.device,
            timer=self.timer,
            orig_ids=self.pset.orig_ids,
            time_waits=self.overlap,
            objective=self.objective,
            embedding=self.embedding,
            history=self.history,
            precision=self.config.precision,
        )
        if trained is None:
            return None
        sums, new_edges = trained
        self.sampled_edges += new_edges
        self.sampled_epochs += 1
        loss_sum, correct, count = self.sum([sums.loss_sum, sums.correct, sums.count])
        return loss_sum / max(count, 1), correct / max(count, 1)

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        edges = self.sum([float(self.sampled_edges)])[0]
        return {
            "partitioner": self.pset.method,
            "overlap": self.overlap,
            # Sampling runs on every rank at once: edges summed over ranks per second of one rank.
            "sampled_edges_per_s": edges / sample_time if sample_time > 0 else None,
            # all ranks' sampled edges per epoch this process trained (a resumed run counts its
            # own epochs only)
            "sampled_edges_per_epoch": edges / self.sampled_epochs if self.sampled_epochs else None,
            "cache": self.cache_summary(history),
            "batching": self.config.batching,
            # sampled training edges whose source the worker owns, mean over epochs
            "local_edge_share": _mean_of(history, "local_edge_share"),
            # with --cluster-halo: sampled edges kept inside the bounded halo, mean over epochs
            "kept_edge_share": _mean_of(history, "kept_edge_share"),
            "fetch_bits": self.config.fetch_bits,
            "error_feedback": self.config.error_feedback,
            # the owners' residuals, summed over workers
            "residual_mb": self.sum([float(0 if self.feedback is None else self.feedback.nbytes)])[
                0
            ]
            / 1e6,
            "historical": self._historical_summary(history),
        }

    def _historical_summary(self, history: list[EpochRecord]) -> dict[str, Any] | None:
        """Historical embeddings (``--historical``) over the epochs that recorded them."""
        if self.history is None:
            return None
        epochs = [r.cache["historical"] for r in history if r.cache and "historical" in r.cache]
        ages = np.sum([e["ages"] for e in epochs], axis=0) if epochs else []
        lookups = sum(e["lookups"] for e in epochs)
        return {
            "layers": list(self.history.layers),
            "max_age": self.history.max_age,
            "mode": self.history.mode,
            "scope": self.history.scope,
            "push_every": self.history.push_every if not self.history.pull else None,
            "hit_rate": sum(e["hits"] for e in epochs) / lookups if lookups else None,
            **_served_ages(ages),
            # pushes, or pull requests and replies, received per epoch (all workers)
            "traffic_mb_per_epoch": (
                float(np.mean([e["traffic_mb"] for e in epochs])) if epochs else None
            ),
            # the tables, summed over workers
            "memory_mb": self.sum([float(self.history.nbytes)])[0] / 1e6,
        }

    def epoch_metrics(self, epoch_comm: dict[str, list]) -> dict[str, Any] | None:
        """Input traffic of the epoch's training batches, summed over ranks (collective; every
        rank has the same stores, so all or none call it).

        Features: bytes requested from a slow tier (peers, or disk), of them missed by the
        cache, and bytes the fetch moved. Cached learnable rows (``--embedding-staleness``):
        peers' rows requested, missed (fetched: not cached, or too old and refreshed), the
        refreshed ones, the row and gradient bytes received, and how old the served cached rows
        were (``row_ages[a]``: rows served
        ``a`` steps after they were fetched)."""
        metrics: dict[str, Any] = {}
        if self.fetch_store is not None:
            if self.cache is not None:
                requested, missed = self.cache.reset_counters()
            else:
                requested = missed = self.fetch_store.slow_rows
            self.fetch_store.slow_rows = 0
            remote = epoch_comm.get("fetch", [0, 0])[1]
            row_bytes = self.fetch_store.row_bytes
            requested, missed, remote = self.sum(
                [requested * row_bytes, missed * row_bytes, float(remote)]
            )
            metrics.update(
                hit_rate=(requested - missed) / requested if requested else None,
                requested_mb=requested / 1e6,
                missed_mb=missed / 1e6,
                remote_feature_mb=remote / 1e6,
            )
        row_cache = None if self.embedding is None else self.embedding.cache
        if row_cache is not None:
            requested, missed = row_cache.reset_counters()
            ages = row_cache.served_ages
            embed = float(epoch_comm.get("embed", [0, 0])[1])  # rows and gradients received
            totals = self.sum([requested, missed, row_cache.refreshed, embed, *ages.tolist()])
            row_cache.refreshed, ages[:] = 0, 0
            metrics.update(
                row_hit_rate=(totals[0] - totals[1]) / totals[0] if totals[0] else None,
                row_requested=int(totals[0]),
                row_missed=int(totals[1]),
                row_refreshed=int(totals[2]),
                row_embed_mb=totals[3] / 1e6,
                row_ages=[int(v) for v in totals[4:]],
            )
        if self.locality is not None:
            counts = self.locality
            local, edges, dropped = self.sum([counts.local_edges, counts.edges, counts.dropped])
            counts.local_edges = counts.edges = counts.dropped = 0
            metrics["local_edge_share"] = local / edges if edges else None
            if self.config.cluster_halo is not None:
                metrics["kept_edge_share"] = edges / (edges + dropped) if edges else None
        if self.history is not None:
            traffic = float(epoch_comm.get(self.history.stage, [0, 0])[1])
            totals = self.sum([*self.history.counters(), traffic])
            self.history.reset_counters()
            lookups, hits, sent_rows = totals[:3]
            metrics["historical"] = {
                "lookups": int(lookups),
                "hits": int(hits),
                "hit_rate": hits / lookups if lookups else None,
                "sent_rows": int(sent_rows),
                "ages": [int(v) for v in totals[3:-1]],
                "traffic_mb": totals[-1] / 1e6,
            }
        return metrics or None

    def extra_state(self) -> dict[str, torch.Tensor]:
        if self.history is None:
            return {}
        return {f"historical.{k}": v for k, v in self.history.state_dict().items()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.history is not None:
            prefix = "historical."
            self.history.load_state_dict(
                {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            )

    def generators(self) -> list[torch.Generator]:
        codec = None if self.fetch_store is None else self.fetch_store.codec
        return [] if codec is None or codec.generator is None else [codec.generator]

    def cache_summary(self, history: list[EpochRecord]) -> dict[str, Any]:
        """The cache's configuration and its epoch metrics averaged over epochs >= 2."""
        cfg = self.config.cache
        capacity = self.cache.capacity if self.cache is not None else 0
        staged = self.sum([float(self.cache.max_staged_rows if self.cache is not None else 0)])[0]
        # Epochs recorded before a resume may come from a run without these metrics.
        measured = [r for r in (history[1:] or history) if r.cache]
        row_bytes = 0 if self.fetch_store is None else self.fetch_store.row_bytes

        def mean(values):
            values = [v for v in values if v is not None]
            return float(np.mean(values)) if values else None

        return {
            "policy": cfg.policy,
            "size": cfg.size if cfg.enabled else None,
            "capacity_rows": capacity,
            "capacity_mb": capacity * row_bytes / 1e6,
            "feature_storage": self.config.feature_storage,
            "lookahead": cfg.lookahead if cfg.policy == "belady" else None,
            "setup_s": self.sum([self.cache_setup_s])[0] / self.world_size,
            "hit_rate": mean(r.cache.get("hit_rate") for r in measured),
            "requested_mb_per_epoch": mean(r.cache.get("requested_mb") for r in measured),
            "remote_feature_mb_per_epoch": mean(r.cache.get("remote_feature_mb") for r in measured),
            "fetch_s_per_epoch": mean(r.stages.get("fetch", 0.0) for r in measured),
            "lookahead_s_per_epoch": mean(r.stages.get("lookahead", 0.0) for r in measured),
            # The look-ahead's memory: rows staged for one window (summed over workers).
            "max_staged_mb": staged * row_bytes / 1e6,
            "rows": self._row_cache_summary(measured),
        }

    def _row_cache_summary(self, measured: list[EpochRecord]) -> dict[str, Any] | None:
        """The learnable rows' cache (``--embedding-staleness``) over the measured epochs."""
        row_cache = None if self.embedding is None else self.embedding.cache
        if row_cache is None:
            return None
        epochs = [r.cache for r in measured if r.cache and "row_requested" in r.cache]
        requested = sum(e["row_requested"] for e in epochs)
        missed = sum(e["row_missed"] for e in epochs)
        ages = np.sum([e["row_ages"] for e in epochs], axis=0) if epochs else []
        return {
            "staleness": row_cache.max_age,
            "capacity_rows": row_cache.capacity,
            "hit_rate": (requested - missed) / requested if requested else None,
            "refreshed_per_epoch": (
                sum(e["row_refreshed"] for e in epochs) / len(epochs) if epochs else None
            ),
            **_served_ages(ages),
            "embed_mb_per_epoch": (
                float(np.mean([e["row_embed_mb"] for e in epochs])) if epochs else None
            ),
        }

    def _open_inputs(self, config: TrainConfig, ctx: DistContext, *, need_labels: bool) -> None:
        """Open this rank's part and its input stores: ``fetch_store`` (training features, None
        without features), ``eval_features``, ``embedding`` and ``eval_rows`` (learnable rows)."""
        overlap = config.run.overlap
        # The prefetch thread needs a core of its own: with fewer than 2 cores per worker it only
        # steals cycles from compute (measured on 2 cores, 2 workers: 148 s vs 77 s/epoch).
        self.overlap = (
            (os.cpu_count() or 1) // ctx.local_world_size >= 2
            if overlap == "auto"
            else overlap == "on"
        )
        self.data_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        self.comms = (self.data_comm, self.main_comm)
        # Ranks on this host map each other's part files (--host-sharing auto): sampling and
        # feature reads of their nodes need no collective.
        host_ranks = ctx.host_ranks if config.run.host_sharing == "auto" else ()
        self.graph = DistGraphStore.open(
            self.pset.path, ctx.rank, ctx.world_size, self.data_comm, host_ranks=host_ranks
        )
        part = self.graph.part
        has_x = part.x is not None
        self._check_labelled(
            has_x or config.embedding.enabled, part.y is not None or not need_labels
        )
        x_local, x_store, peer_x = None, None, {}
        if has_x and config.feature_storage == "disk":
            # Rows stay in the memory-mapped part file and are read on demand; row normalisation is
            # applied per gathered row (its scales computed in one chunked pass).
            x_local = part.x
            x_store = _mapped_rows(part.x, config.feature_norm)
        elif has_x:
            x_local = normalize_features(np.array(part.x, dtype=np.float32), config.feature_norm)
            x_store = LocalFeatureStore(x_local)
        if has_x:
            # Same-host peers' rows stay in their mapped files (one copy in the page cache for the
            # host), normalised per gathered row exactly as their owner normalises them.
            peer_x = {
                p: _mapped_rows(peer.part.x, config.feature_norm)
                for p, peer in self.graph.peers.items()
            }
        self.has_x, self.x_local, self.x_store, self.peer_x = has_x, x_local, x_store, peer_x
        book = self.graph.book
        self.codec = make_codec(config.fetch_bits, mix_seed(config.seed, ctx.rank, 0xFE7C))
        # Stages: "fetch" is training's feature traffic only (what a cache saves); labels,
        # evaluation and cache set-up are counted apart.
        self.feedback = None
        if has_x and self.codec is not None and config.error_feedback:
            # One residual per local row: what its previous send to any peer lost.
            self.feedback = RowResiduals(*x_store.shape)
        self.fetch_store = (
            self.dist_rows(x_store, peer_x, "fetch", self.codec, self.feedback) if has_x else None
        )
        self.eval_features = self.dist_rows(x_store, peer_x, "eval", self.codec) if has_x else None
        # Learnable rows (--embedding-dim): this rank holds and steps its own part's rows only;
        # batches read them after their features (both gathers are collectives, same order on
        # every rank) and evaluation reads them under its own stage.
        self.embedding: DistEmbeddingTable | None = None
        self.eval_rows = None
        if config.embedding.enabled:
            start, end = book.part_range(ctx.rank)
            check_table_fits(end - start, config.embedding)
            self.embedding = DistEmbeddingTable(
                book,
                ctx.rank,
                self.data_comm,
                config.embedding,
                mix_seed(config.seed, EMBEDDING_STREAM),
                np.asarray(self.pset.orig_ids[start:end], dtype=np.int64),
            )
            self.eval_rows = self.dist_rows(self.embedding.local, None, "eval")
            # The next batch's rows must be read after this step's update, on this thread: no
            # prefetch thread (it would read them a step early, and share the communicator).
            self.overlap = False

    def _build_caches(self, presample_stage: Callable[[DistNeighborSampler, int], Any]) -> None:
        """The caches of ``--cache-policy`` (collective): ``self.cache`` in front of the training
        features, and with ``--embedding-staleness`` one in front of peers' learnable rows.

        ``presample_stage(sampler, seed)``: this rank's training batches sampled by ``sampler``
        (GNNLab's pre-sampling epoch of ``presample``: the real sampler over this rank's training
        seeds, on its own random stream so epoch 0 is not replayed, and its own stage)."""
        config, book = self.config, self.graph.book
        self.cache: CachedFeatureStore | None = None
        self.cache_setup_s = 0.0
        if not config.cache.enabled:
            return
        start = time.perf_counter()
        counts: list[np.ndarray] = []

        def presample_counts() -> np.ndarray:
            if not counts:  # one pre-sampling epoch serves both caches
                presampler = DistNeighborSampler(
                    self.graph, config.sampler, self.data_comm, "cache_setup"
                )
                seed = mix_seed(mix_seed(config.seed, self.ctx.rank), 0x9E5A)
                counts.append(count_accesses(presample_stage(presampler, seed), book.num_nodes))
            return counts[0]

        rows_cached = self.embedding is not None and config.embedding.staleness is not None
        # With cached learnable rows, features that need no cache (all on this host) go without.
        if self.fetch_store is not None and (
            not rows_cached or cacheable_rows(self.fetch_store).any()
        ):
            self.cache = build_cache(
                config.cache,
                self.fetch_store,
                fill_from=self.dist_rows(self.x_store, self.peer_x, "cache_setup", self.codec),
                degree=self.graph.degree,
                presample_counts=presample_counts,
            )
        if rows_cached:
            self.embedding.cache_rows(
                build_cache(
                    config.cache,
                    self.embedding.owners,
                    fill_from=self.dist_rows(self.embedding.local, None, "cache_setup"),
                    degree=self.graph.degree,
                    presample_counts=presample_counts,
                    max_age=config.embedding.staleness,
                )
            )
        self.cache_setup_s = time.perf_counter() - start

    def dist_rows(self, local, peers, stage: str, codec=None, feedback=None) -> DistFeatureStore:
        """Rows held by their owners (this rank: ``local``; same-host ``peers``), one stage."""
        return DistFeatureStore(
            local,
            self.graph.book,
            self.ctx.rank,
            self.data_comm,
            stage,
            codec=codec,
            peers=peers,
            feedback=feedback,
        )

    @property
    def feature_width(self) -> int:
        return 0 if self.x_local is None else int(self.x_local.shape[1])

    @property
    def input_width(self) -> int:
        """Width of a node's input row: its features, then its learnable row."""
        return self.feature_width + self.config.embedding.dim

    def _wrap_model(self, model: torch.nn.Module) -> None:
        """Make ``model`` this rank's (identical weights everywhere, its own rows attached), wrap
        it in DDP and create the optimiser."""
        config, ctx = self.config, self.ctx
        self.broadcast_weights(model)
        if self.embedding is not None:
            # This rank's rows join the model's state after the broadcast above (they differ per
            # rank): each rank's checkpoint and best weights carry its own rows. DDP must not
            # broadcast them (broadcast_buffers=False in data_parallel); the model has no other
            # buffers.
            model.embedding = self.embedding.local
        # Parallel counter-based dropout masks keyed by original node ids; the rank in the seed
        # keeps ranks' masks independent (their batches differ anyway).
        model.use_hashed_dropout(mix_seed(config.seed, ctx.rank))
        self.ddp = self.data_parallel(model)
        self.model = model
        self.optimizer = torch.optim.Adam(
            self.ddp.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )


class DistMiniBatchSteps(DistSampledSteps):
    """One rank of a distributed mini-batch training job."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        self._open_inputs(config, ctx, need_labels=True)
        part, book = self.graph.part, self.graph.book
        dist_rows = self.dist_rows
        peer_y = {
            p: np.asarray(peer.part.y, dtype=np.int64) for p, peer in self.graph.peers.items()
        }
        y_local = np.asarray(part.y, dtype=np.int64)
        self.labels = dist_rows(y_local, peer_y, "labels")
        eval_labels = dist_rows(y_local, peer_y, "eval")
        eval_features, eval_rows = self.eval_features, self.eval_rows
        rank_seed = mix_seed(config.seed, ctx.rank)
        # Every rank reads all parts' (small) split index files once: the seed split is a pure
        # function of the global ids, computed identically everywhere.
        split_ids = {split: self.pset.global_split(split) for split in ("train", "val", "test")}
        self.split_sizes = {split: int(len(ids)) for split, ids in split_ids.items()}
        # --batch-size is the global batch: each of the P workers takes B / P seeds per step, so
        # P workers take the same optimiser steps as one (and DDP's gradient mean is the global
        # one).
        batch_size = config.node_batch_size(self.split_sizes["train"])
        per_rank_batch = max(1, -(-batch_size // ctx.world_size))
        if config.batching == "cluster":
            self.train_batches = ClusterBatcher(
                split_ids["train"],
                book,
                ctx.rank,
                ctx.world_size,
                per_rank_batch,
                np.asarray(part.indptr),
                np.asarray(part.indices),
                config.clusters_per_batch,
                seed=config.seed,
            )
        else:
            self.train_batches = DistSeedBatcher(
                split_ids["train"],
                book,
                ctx.rank,
                ctx.world_size,
                per_rank_batch,
                shuffle=True,
                seed=config.seed,
            )
        sampler = DistNeighborSampler(
            self.graph, config.sampler, self.data_comm, "sample", halo_hops=config.cluster_halo
        )
        start, end = book.part_range(ctx.rank)
        if config.historical is not None:
            self.history = HistoricalEmbeddings(
                book,
                ctx.rank,
                self.data_comm,
                halo_of(np.asarray(part.indices), start, end),
                config.historical_layers,
                config.historical_age,
                config.historical_push_interval,
                mode=config.historical_mode,
                scope=config.historical_scope,
            )
            sampler.prune = self.history.prune
            # A batch is sampled after the previous step pushed: no prefetch thread.
            self.overlap = False
        self._build_caches(
            lambda presampler, seed: NeighborSamplingStage(self.train_batches, presampler, seed)
        )
        self.features = input_store(
            self.cache if self.cache is not None else self.fetch_store,
            None if self.embedding is None else self.embedding.rows,
        )
        if self.cache is not None:  # evaluation reads the cached rows but never changes them
            eval_features = self.cache.read_only_view(eval_features)
        eval_features = input_store(eval_features, eval_rows)
        self.locality = LocalityCounter(
            NeighborSamplingStage(self.train_batches, sampler, rank_seed, self.timer),
            lambda ids: (ids >= start) & (ids < end),
        )
        self.train_stages = FeatureFetcher(
            self.locality,
            self.features,
            self.labels,
            self.timer,
        )
        if self.history is not None:
            self.train_stages = HistoryReader(self.train_stages, self.history, self.timer)
        eval_sampler = DistNeighborSampler(
            self.graph, eval_sampler_config(config), self.data_comm, "sample"
        )
        # Full-neighbourhood evaluation (--eval-fanouts -1,...) runs layer-wise over the whole
        # graph: every layer computed once per node instead of once per seed's L-hop neighbourhood.
        self.layerwise = None
        if config.layerwise_eval:
            shard = load_shard(
                self.pset.path,
                Grid(ctx.world_size, 1),
                ctx.rank,
                self.data_comm,
                need_features=self.has_x,
            )
            shard.x = self.x_local  # with learnable rows, set before each evaluation (they change)
            self.layerwise = LayerwiseInference(
                shard, ctx.rank, self.data_comm, device=ctx.device, stage="eval"
            )
        self.eval_stages = {}
        for split in ("val", "test"):
            batches = DistSeedBatcher(
                split_ids[split],
                book,
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
            )
        self.num_classes = int(part.num_classes)
        torch.manual_seed(config.seed)  # identical initial weights on every rank
        model = build_model(config.model, self.input_width, self.num_classes).to(ctx.device)
        self._wrap_model(model)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Accuracy over every node of ``split`` (each evaluated by exactly one rank)."""
        if self.layerwise is not None:
            if self.embedding is not None:
                rows = self.embedding.local.weight.cpu().numpy()
                x = self.x_local
                self.layerwise.shard.x = rows if x is None else np.hstack([np.asarray(x), rows])
            with precision_context(self.config.precision, self.ctx.device):
                return layerwise_accuracies(self.layerwise, self.model, (split,), self.sum)[split]
        correct, count = self.sum(
            list(
                count_correct(
                    self.model, self.eval_stages[split], self.ctx.device, self.config.precision
                )
            )
        )
        return correct / max(count, 1)

    def dataset_info(self) -> dict[str, Any]:
        return partition_dataset_record(
            self.pset, int(self.features.shape[1]), self.num_classes, self.split_sizes
        )
