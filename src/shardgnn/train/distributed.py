"""Distributed mini-batch training: one process per partition, DDP over the models, the data
pipeline on ``torch.distributed`` all-to-alls.

Every rank runs the same number of batches (``DistSeedBatcher``), evaluates a disjoint share of
the validation/test nodes that together cover each exactly once, and reduces metrics over ranks.
With ``overlap`` the sampling and feature fetch of batch i+1 run in a background thread (on the
context's ``data_group``) while the main thread trains on batch i (gradients on ``group``);
``auto`` turns it on when every worker has at least two cores.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from shardgnn.distributed.codec import make_codec
from shardgnn.distributed.comm import CommStats, Communicator
from shardgnn.distributed.context import DEFAULT_TIMEOUT_S, DistContext
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.inference import LayerwiseInference, layerwise_accuracies
from shardgnn.fullgraph.shard import Grid, load_shard
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.loader.pipeline import FeatureFetcher, NeighborSamplingStage, count_accesses
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import build_model
from shardgnn.partition.format import read_partitions
from shardgnn.sampling.distributed import DistNeighborSampler
from shardgnn.sampling.kernels import mix_seed
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.store.cache import CachedFeatureStore, make_policy, top_ids
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.feature import LocalFeatureStore, row_sums
from shardgnn.store.dist_graph import DistGraphStore
from shardgnn.timing import StageTimer
from shardgnn.train.checkpoint import Checkpointer, LoopState, capture_state, restore_state
from shardgnn.train.config import TrainConfig
from shardgnn.train.progress import progress
from shardgnn.train.single import EpochRecord, normalize_features


def _counted_allreduce_hook(comm, bucket):  # no annotations: DDP compares them to dist.GradBucket by identity
    """DDP gradient averaging routed through the communicator, so its bytes are counted."""
    buffer = bucket.buffer()
    buffer.div_(comm.world_size)
    comm.all_reduce(buffer, "allreduce")
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(buffer)
    return future


def global_split_ids(partitions: str | Path, split: str) -> np.ndarray:
    """All nodes of ``split`` (new global ids), read from every part's small index file."""
    pset = read_partitions(partitions, verify=False)
    ids = []
    for p in range(pset.num_parts):
        part = pset.load_part(p, mmap=True, verify=False)
        local = getattr(part, f"{split}_idx")
        if local is not None:
            ids.append(np.asarray(local, dtype=np.int64) + part.start)
    return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)


class RankTrainer:
    """The epoch loop shared by the distributed trainers (mini-batch and full-graph).

    Subclasses set ``config``, ``ctx``, ``model``, ``timer``, ``main_comm``, ``comms`` (every
    communicator whose traffic is reported) and implement ``train_epoch``, ``evaluate``,
    ``dataset_info`` and ``extra_results``.
    """

    config: TrainConfig
    ctx: DistContext
    main_comm: Communicator
    comms: tuple[Communicator, ...]
    timer: StageTimer

    def train_epoch(self, epoch: int) -> tuple[float, float]:
        raise NotImplementedError

    def evaluate(self, split: str) -> float:
        raise NotImplementedError

    def dataset_info(self) -> dict[str, Any]:
        raise NotImplementedError

    def extra_results(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {}

    def epoch_metrics(self, epoch_comm: dict[str, list]) -> dict[str, Any] | None:
        """Per-epoch metrics beyond loss and accuracy (collective); ``epoch_comm``: this rank's
        ``[bytes_sent, bytes_recv, seconds, calls]`` per stage in the epoch."""
        return None

    def _sum(self, values: list[float], stage: str = "metrics") -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        self.main_comm.all_reduce(t, stage)
        return t.tolist()

    def generators(self) -> list[torch.Generator]:
        """Random generators whose state a checkpoint must carry (low-bit codecs)."""
        return []

    def _checkpointer(self) -> Checkpointer | None:
        cfg = self.config
        if not cfg.checkpoint_dir:
            return None
        return Checkpointer(cfg.checkpoint_dir, rank=self.ctx.rank, world_size=self.ctx.world_size,
                            every=cfg.checkpoint_every, keep=cfg.keep_checkpoints, barrier=self.ctx.barrier)

    def fit(self) -> dict[str, Any]:
        cfg = self.config
        checkpointer = self._checkpointer()
        loop = LoopState()
        if checkpointer is not None and cfg.resume:
            state = checkpointer.load_latest(cfg.to_dict())
            if state is not None:
                loop = restore_state(state, self.model, self.optimizer, self.generators(), EpochRecord)
                if self.ctx.is_main:
                    print(f"resumed from {checkpointer.complete()[-1]} (epoch {loop.next_epoch})", flush=True)
        run_start = time.perf_counter()
        for epoch in range(loop.next_epoch, cfg.optim.epochs):
            start = time.perf_counter()
            loss, train_acc = self.train_epoch(epoch)
            train_time = time.perf_counter() - start
            with self.timer("eval"):
                val_acc = self.evaluate("val")
            stages = self.timer.reset()
            names = sorted(stages)
            # Per-stage seconds, averaged over ranks (every rank has the same stage names).
            mean_stages = self._sum([stages[n] for n in names])
            stages = {n: v / self.ctx.world_size for n, v in zip(names, mean_stages)}
            train_time = self._sum([train_time])[0] / self.ctx.world_size
            epoch_comm: dict[str, list] = {}
            for comm in self.comms:
                for name, st in comm.reset().items():
                    for tot in (loop.comm_total.setdefault(name, [0, 0, 0.0, 0]),
                                epoch_comm.setdefault(name, [0, 0, 0.0, 0])):
                        for i, value in enumerate((st.bytes_sent, st.bytes_recv, st.time_s, st.calls)):
                            tot[i] += value
            loop.history.append(EpochRecord(epoch, loss, train_acc, val_acc, train_time, stages,
                                             self.epoch_metrics(epoch_comm)))
            if val_acc > loop.best_val:
                loop.best_val, loop.best_epoch = val_acc, epoch
                loop.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            loop.next_epoch = epoch + 1
            stop = bool(cfg.optim.patience and epoch - loop.best_epoch >= cfg.optim.patience)
            if checkpointer is not None and (stop or checkpointer.due(loop.next_epoch, cfg.optim.epochs)):
                checkpointer.save(loop.next_epoch, capture_state(loop, self.model, self.optimizer, self.generators()),
                                  cfg.to_dict())
            if stop:
                break
        history, best_epoch, best_state = loop.history, loop.best_epoch, loop.best_state
        comm_total = {name: CommStats(int(v[0]), int(v[1]), float(v[2]), int(v[3]))
                      for name, v in loop.comm_total.items()}
        assert best_state is not None
        self.model.load_state_dict(best_state)
        val_acc, test_acc = self.evaluate("val"), self.evaluate("test")
        total_time = time.perf_counter() - run_start
        per_rank = self.main_comm.gather_stats(comm_total)
        return {
            "config": cfg.to_dict(),
            "dataset": self.dataset_info(),
            "workers": self.ctx.world_size,
            "epochs": [dataclasses.asdict(r) for r in history],
            "best_epoch": best_epoch,
            "val_acc": val_acc,
            "test_acc": test_acc,
            "mean_epoch_time_s": float(np.mean([r.time_s for r in history[1:]] or [history[0].time_s])),
            "total_time_s": total_time,
            # Bytes summed over ranks and epochs, plus the most any one rank sent / received.
            "comm": {name: {"bytes_sent": sum(st.bytes_sent for st in ranks),
                            "bytes_recv": sum(st.bytes_recv for st in ranks),
                            "time_s": sum(st.time_s for st in ranks),
                            "max_rank_bytes_sent": max(st.bytes_sent for st in ranks),
                            "max_rank_bytes_recv": max(st.bytes_recv for st in ranks)}
                     for name, ranks in per_rank.items()},
            "num_epochs_run": len(history),
            **self.extra_results(history),
        }


class DistTrainer(RankTrainer):
    """One rank of a distributed mini-batch training job."""

    def __init__(self, config: TrainConfig, ctx: DistContext, partitions: str | Path, *,
                 overlap: bool | str = "auto"):
        if overlap == "auto":
            # The prefetch thread needs a core of its own: with fewer than 2 cores per worker it
            # only steals cycles from compute (measured on 2 cores, 2 workers: 148 s vs 77 s/epoch).
            overlap = (os.cpu_count() or 1) // ctx.local_world_size >= 2
        if config.mode != "minibatch":
            raise ConfigError(f"DistTrainer trains --mode minibatch; --mode {config.mode} runs FullGraphTrainer")
        self.config, self.ctx, self.overlap = config, ctx, overlap
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.data_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        self.main_comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        self.comms = (self.data_comm, self.main_comm)
        self.meta = read_partitions(partitions, verify=False).meta
        self.graph = DistGraphStore.open(partitions, ctx.rank, ctx.world_size, self.data_comm)
        part = self.graph.part
        if part.x is None or part.y is None:
            raise ConfigError(f"{partitions} has no features or labels; partition a labelled dataset")
        if config.feature_norm == "standard":
            raise ConfigError("feature_norm=standard needs global statistics; use row or none when distributed")
        if config.feature_storage == "disk":
            # Rows stay in the memory-mapped part file and are read on demand; row normalisation is
            # applied per gathered row (its scales computed in one chunked pass).
            x_local = part.x
            x_store = LocalFeatureStore(part.x, row_divisor=row_sums(part.x)
                                        if config.feature_norm == "row" else None)
        else:
            x_local = normalize_features(np.array(part.x, dtype=np.float32), config.feature_norm)
            x_store = LocalFeatureStore(x_local)
        book = self.graph.book
        codec = make_codec(config.fetch_bits, mix_seed(config.seed, ctx.rank, 0xFE7C))
        # Stages: "fetch" is training's feature traffic only (what a cache saves); labels,
        # evaluation and cache set-up are counted apart.
        self.fetch_store = DistFeatureStore(x_store, book, ctx.rank, self.data_comm, "fetch", codec=codec)
        y_local = np.asarray(part.y, dtype=np.int64)
        self.labels = DistFeatureStore(y_local, book, ctx.rank, self.data_comm, "labels")
        eval_features = DistFeatureStore(x_store, book, ctx.rank, self.data_comm, "eval", codec=codec)
        eval_labels = DistFeatureStore(y_local, book, ctx.rank, self.data_comm, "eval")
        self.timer = StageTimer()
        rank_seed = mix_seed(config.seed, ctx.rank)
        # Every rank reads all parts' (small) split index files once: the seed split is a pure
        # function of the global ids, computed identically everywhere.
        split_ids = {split: global_split_ids(partitions, split) for split in ("train", "val", "test")}
        self.split_sizes = {split: int(len(ids)) for split, ids in split_ids.items()}
        # --batch-size is the global batch: each of the P workers takes B / P seeds per step, so
        # P workers take the same optimiser steps as one (and DDP's gradient mean is the global one).
        per_rank_batch = max(1, -(-config.batch_size // ctx.world_size))
        self.train_batches = DistSeedBatcher(split_ids["train"], book, ctx.rank, ctx.world_size,
                                             per_rank_batch, shuffle=True, seed=config.seed)
        sampler = DistNeighborSampler(self.graph, config.sampler, self.data_comm, "sample")
        self.cache: CachedFeatureStore | None = None
        self.cache_setup_s = 0.0
        if config.cache.enabled:
            start = time.perf_counter()
            self.cache = self._build_cache(x_store, codec, rank_seed)
            self.cache_setup_s = time.perf_counter() - start
        self.features = self.cache if self.cache is not None else self.fetch_store
        if self.cache is not None:  # evaluation reads the cached rows but never changes them
            eval_features = self.cache.read_only_view(eval_features)
        self.train_stages = FeatureFetcher(NeighborSamplingStage(self.train_batches, sampler, rank_seed, self.timer),
                                           self.features, self.labels, self.timer)
        eval_sampler = DistNeighborSampler(self.graph, SamplerConfig(
            fanouts=config.eval_fanouts or config.sampler.fanouts, replace=config.sampler.replace,
            num_threads=config.sampler.num_threads), self.data_comm, "sample")
        # Full-neighbourhood evaluation (--eval-fanouts -1,...) runs layer-wise over the whole
        # graph: every layer computed once per node instead of once per seed's L-hop neighbourhood.
        self.layerwise = None
        if config.layerwise_eval:
            shard = load_shard(partitions, Grid(ctx.world_size, 1), ctx.rank, self.data_comm)
            shard.x = x_local
            self.layerwise = LayerwiseInference(shard, ctx.rank, self.data_comm, device=ctx.device, stage="eval")
        self.eval_stages = {}
        for split in ("val", "test"):
            batches = DistSeedBatcher(split_ids[split], book, ctx.rank, ctx.world_size,
                                      max(1, -(-config.eval_batch_size // ctx.world_size)), shuffle=False,
                                      seed=config.seed)
            self.eval_stages[split] = FeatureFetcher(
                NeighborSamplingStage(batches, eval_sampler, mix_seed(config.seed + 1, ctx.rank), StageTimer()),
                eval_features, eval_labels, StageTimer())
        self.num_classes = int(part.num_classes)
        torch.manual_seed(config.seed)  # identical initial weights on every rank
        model = build_model(config.model, x_local.shape[1], self.num_classes).to(ctx.device)
        for tensor in model.state_dict().values():  # identical by seeding; made certain here
            self.main_comm.broadcast(tensor, src=0, stage="setup")
        # Parallel counter-based dropout masks; the rank in the seed keeps ranks' masks independent.
        model.use_hashed_dropout(mix_seed(config.seed, ctx.rank))
        self.ddp = DistributedDataParallel(model, device_ids=None if ctx.device.type == "cpu" else [ctx.device],
                                           process_group=ctx.group, init_sync=False)
        self.ddp.register_comm_hook(self.main_comm, _counted_allreduce_hook)
        self.model = model
        self.optimizer = torch.optim.Adam(self.ddp.parameters(), lr=config.optim.lr,
                                          weight_decay=config.optim.weight_decay)
        self.sampled_edges = 0

    def _build_cache(self, x_store: LocalFeatureStore, codec, rank_seed: int) -> CachedFeatureStore:
        """The feature cache of ``config.cache`` (collective: static policies load their rows;
        ``presample`` first runs the sampler over one unrecorded epoch)."""
        cfg, book = self.config.cache, self.graph.book
        n = book.num_nodes
        cacheable = np.ones(n, dtype=bool) if self.fetch_store.on_disk else ~self.fetch_store.local_mask(np.arange(n))
        if not cacheable.any():
            raise ConfigError(f"--cache-policy {cfg.policy}: this worker holds every row in RAM, so there is nothing to "
                              "cache; use --feature-storage disk (the cache then fronts disk reads) or drop the cache")
        # Never more slots than rows that can be cached (this worker's own rows in RAM never are).
        capacity = min(cfg.capacity_rows(n, self.row_bytes), int(cacheable.sum()))
        static_ids = None
        if cfg.policy == "degree":
            static_ids = top_ids(self.graph.degree, cacheable, capacity)
        elif cfg.policy == "presample":
            # GNNLab's PreSC: the real sampler over this rank's training seeds, on its own random
            # stream (so epoch 0 is not replayed) and its own stage (so its bytes stay apart).
            presampler = DistNeighborSampler(self.graph, self.config.sampler, self.data_comm, "cache_setup")
            counts = count_accesses(NeighborSamplingStage(self.train_batches, presampler,
                                                          mix_seed(rank_seed, 0x9E5A)), n)
            static_ids = top_ids(counts, cacheable, capacity)
        policy = make_policy(cfg.policy, num_nodes=n, lookahead=cfg.lookahead, static_ids=static_ids)
        fill = DistFeatureStore(x_store, book, self.ctx.rank, self.data_comm, "cache_setup", codec=codec)
        return CachedFeatureStore(self.fetch_store, policy, capacity, fill_from=fill)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.fetch_store.shape[1:])) * torch.empty(0, dtype=self.fetch_store.dtype).element_size()

    def _stream(self, stages):
        return Prefetcher(stages) if self.overlap else stages

    # ------------------------------------------------------------------ epochs
    def train_epoch(self, epoch: int) -> tuple[float, float]:
        self.ddp.train()
        self.train_batches.set_epoch(epoch)
        loss_sum = correct = count = 0.0
        bar = progress(self._stream(self.train_stages), f"epoch {epoch}", self.config.progress and self.ctx.is_main)
        waited = time.perf_counter()
        for batch in bar:
            self.timer.add("wait", time.perf_counter() - waited)
            with self.timer("compute"):
                graphs = [MessageGraph.from_block(b, self.ctx.device) for b in batch.sample.blocks]
                y = batch.y.to(self.ctx.device)
                self.optimizer.zero_grad(set_to_none=True)
                logits = self.ddp(graphs, batch.x_SF.to(self.ctx.device))
                # An empty batch still runs backward (DDP's all-reduce is a collective): a summed
                # loss over no rows is a zero connected to the graph, so its gradients are zero.
                loss = F.cross_entropy(logits, y, reduction="sum") / max(y.numel(), 1)
                loss.backward()
                self.optimizer.step()
            self.sampled_edges += batch.sample.num_sampled_edges
            loss_sum += loss.item() * y.numel()
            correct += int((logits.argmax(-1) == y).sum())
            count += y.numel()
            bar.set_postfix(loss=f"{loss.item():.4f}")
            waited = time.perf_counter()
        loss_sum, correct, count = self._sum([loss_sum, correct, count])
        return loss_sum / max(count, 1), correct / max(count, 1)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Accuracy over every node of ``split`` (each evaluated by exactly one rank)."""
        if self.layerwise is not None:
            return layerwise_accuracies(self.layerwise, self.model, (split,), self._sum)[split]
        self.model.eval()
        correct = count = 0
        for batch in self.eval_stages[split]:
            graphs = [MessageGraph.from_block(b, self.ctx.device) for b in batch.sample.blocks]
            logits = self.model(graphs, batch.x_SF.to(self.ctx.device))
            correct += int((logits.argmax(-1).cpu() == batch.y).sum())
            count += batch.y.numel()
        correct, count = self._sum([correct, count])
        return correct / max(count, 1)

    def epoch_metrics(self, epoch_comm: dict[str, list]) -> dict[str, Any]:
        """Feature traffic of the epoch's training batches, summed over ranks: bytes requested from
        a slow tier (peers, or disk), of them missed by the cache, and bytes the fetch moved."""
        if self.cache is not None:
            requested, missed = self.cache.reset_counters()
        else:
            requested = missed = self.fetch_store.slow_rows
        self.fetch_store.slow_rows = 0
        remote = epoch_comm.get("fetch", [0, 0])[1]
        requested, missed, remote = self._sum([requested * self.row_bytes, missed * self.row_bytes, float(remote)])
        return {"hit_rate": (requested - missed) / requested if requested else None,
                "requested_mb": requested / 1e6, "missed_mb": missed / 1e6, "remote_feature_mb": remote / 1e6}

    def generators(self) -> list[torch.Generator]:
        codec = self.fetch_store.codec
        return [] if codec is None or codec.generator is None else [codec.generator]

    def dataset_info(self) -> dict[str, Any]:
        return {"name": self.meta.get("graph"), "num_nodes": int(self.meta["num_nodes"]),
                "num_edges": int(self.meta["num_edges"]), "num_features": int(self.features.shape[1]),
                "num_classes": self.num_classes, **self.split_sizes}

    def cache_summary(self, history: list[EpochRecord]) -> dict[str, Any]:
        """The cache's configuration and its epoch metrics averaged over epochs >= 1."""
        cfg = self.config.cache
        measured = history[1:] or history
        capacity = self.cache.capacity if self.cache is not None else 0
        staged = self._sum([float(self.cache.max_staged_rows if self.cache is not None else 0)])[0]

        # Epochs recorded before a resume may come from a run without these metrics.
        measured = [r for r in measured if r.cache]

        def mean(values):
            values = [v for v in values if v is not None]
            return float(np.mean(values)) if values else None

        return {"policy": cfg.policy, "size": cfg.size if cfg.enabled else None, "capacity_rows": capacity,
                "capacity_mb": capacity * self.row_bytes / 1e6, "feature_storage": self.config.feature_storage,
                "lookahead": cfg.lookahead if cfg.policy == "belady" else None,
                "setup_s": self._sum([self.cache_setup_s])[0] / self.ctx.world_size,
                "hit_rate": mean(r.cache["hit_rate"] for r in measured),
                "requested_mb_per_epoch": mean(r.cache["requested_mb"] for r in measured),
                "remote_feature_mb_per_epoch": mean(r.cache["remote_feature_mb"] for r in measured),
                "fetch_s_per_epoch": mean(r.stages.get("fetch", 0.0) for r in measured),
                "lookahead_s_per_epoch": mean(r.stages.get("lookahead", 0.0) for r in measured),
                # The look-ahead's memory: rows staged for one window (summed over workers).
                "max_staged_mb": staged * self.row_bytes / 1e6}

    def extra_results(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        edges = self._sum([float(self.sampled_edges)])[0]
        return {"mode": "minibatch", "partitioner": self.meta.get("partitioner", {}).get("method"), "overlap": self.overlap,
                "cache": self.cache_summary(history),
                # Sampling runs on every rank at once: edges summed over ranks per second of one rank.
                "sampled_edges_per_s": edges / sample_time if sample_time > 0 else None}


def run_worker(config: TrainConfig, partitions: str | Path, *, overlap: bool | str = "auto",
               timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
    """The body of one worker process: join the job, train, report on rank 0.

    Returns the results on rank 0 (also written to ``config.results`` and summarised on stdout),
    ``None`` on the other ranks.
    """
    from shardgnn.atomic import save_json
    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.train.report import print_summary

    ctx = init_distributed(device=config.device, timeout_s=timeout_s)
    try:
        if config.mode == "full":
            from shardgnn.train.fullgraph import FullGraphTrainer

            trainer: RankTrainer = FullGraphTrainer(config, ctx, partitions)
        else:
            trainer = DistTrainer(config, ctx, partitions, overlap=overlap)
        results = trainer.fit()
        if not ctx.is_main:
            return None
        print_summary(results)
        if config.results:
            save_json(config.results, results)
            print(f"results written to {config.results}")
        return results
    finally:
        shutdown()
