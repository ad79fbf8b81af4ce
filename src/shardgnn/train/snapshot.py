"""Discrete-time (snapshot) link prediction with T-GCN, one process (PiPAD's setting).

The events are cut into ``--snapshots`` periods (:func:`~shardgnn.graph.snapshots.build_snapshots`,
stored as a base graph plus deltas); the last periods are held out for validation and test
(``--link-val``, ``--link-test`` of the periods, at least one each). Snapshot ``t``'s state
scores the pairs of period ``t + 1`` against uniform negatives: training steps once per
snapshot of the training periods (the state carried forward, detached: truncated
backpropagation through time), evaluation rolls the state through every earlier snapshot and
scores the split's periods against fixed negatives (AP, AUC).

Preparing a snapshot (applying its delta, building its symmetric CSR and message graph) runs in
a background thread one snapshot ahead of the compute when ``--overlap`` allows (``auto``: when
the machine has more than one core); the results report the preparation time and how much of it
the compute waited for.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import canonical_spec, load_temporal_dataset
from shardgnn.graph.identity import temporal_fingerprint
from shardgnn.graph.snapshots import build_snapshots
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.loader.snapshots import SnapshotGraphs
from shardgnn.nn.link import link_loss
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.snapshot import GCNGRU
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun, StepResult, batch_epoch
from shardgnn.train.linkmetrics import auc, average_precision
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import EVAL_STREAM, adam, resolve_device


class SnapshotLinkSteps(Steps):
    """T-GCN link prediction over a temporal graph's snapshots (``graph``: given, else loaded)."""

    metric = "ap"

    def __init__(self, config: TrainConfig, graph: TemporalGraph | None = None):
        self.config = config
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        g = graph if graph is not None else load_temporal_dataset(config.dataset, config.data_dir)
        self.graph = g
        temporal = config.temporal
        self.seq = build_snapshots(g, temporal.snapshots, temporal.snapshot_window)
        periods = temporal.snapshots
        self.num_test = max(1, round(periods * config.link.test))
        self.num_val = max(1, round(periods * config.link.val))
        self.val_start = periods - self.num_test - self.num_val  # the first validation period
        if self.val_start < 2:
            raise ConfigError(
                f"--snapshots {periods} with --link-val {config.link.val} --link-test "
                f"{config.link.test} leaves {self.val_start} training period(s); give more "
                "snapshots (training needs at least 2 periods: one to see, one to predict)"
            )
        torch.manual_seed(config.seed)
        # one GCN layer per snapshot, as T-GCN
        self.model = GCNGRU(g.num_nodes, config.link.out_dim, 1, config.model.dropout).to(
            self.device
        )
        self.optimizer = adam(self.model.parameters(), config.optim)
        overlap = config.run.overlap
        self.overlap = overlap == "on" or (overlap == "auto" and (os.cpu_count() or 1) > 1)
        self.timer = StageTimer()
        self.targets = [
            self.seq.period_pairs(t, g.src, g.dst) for t in range(self.seq.num_snapshots)
        ]
        self.prep_s = self.waited_s = 0.0
        self.last_metrics: dict[str, dict[str, float]] = {}
        self._state = torch.zeros(0)  # the recurrent state a training epoch carries forward
        self._epoch = 0

    def _snapshots(self, count: int):
        """``(t, message graph)`` of the first ``count`` snapshots, prepared ahead when
        overlapping; the preparation and waiting times are added up."""
        device = self.device
        graphs = SnapshotGraphs(
            self.seq, count, lambda indptr, indices: MessageGraph.from_csr(indptr, indices, device)
        )
        source = Prefetcher(graphs) if self.overlap else graphs
        iterator = iter(source)
        while True:
            start = time.perf_counter()
            item = next(iterator, None)
            self.waited_s += time.perf_counter() - start
            if item is None:
                break
            yield item
        self.prep_s += graphs.prep_s

    def _pairs(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.targets[t]
        n = self.graph.num_nodes
        return (
            torch.from_numpy(keys // n).to(self.device),
            torch.from_numpy(keys % n).to(self.device),
        )

    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        """One step per training snapshot, in the batch-epoch loop every kind of batch training
        runs (:func:`~shardgnn.train.epoch.batch_epoch`). The recurrent state is not part of a
        mid-epoch checkpoint, so an epoch runs whole: a stop is taken at its end."""
        self.model.train()
        self._state = torch.zeros(
            self.graph.num_nodes, self.config.link.out_dim, device=self.device
        )
        self._epoch = run.epoch
        whole = dataclasses.replace(run, stop_requested=None)
        # snapshot t predicts period t + 1, for every training period after the first
        sums = batch_epoch(whole, _TrainingSnapshots(self, self.val_start - 1), self._train_step)
        assert sums is not None  # nothing stops it early
        run.total_batches = whole.total_batches
        return sums.loss_sum / max(sums.count, 1), sums.correct / max(sums.count, 1)

    def _train_step(self, item: tuple[int, MessageGraph]) -> StepResult:
        """One optimiser step: snapshot ``t``'s state scores period ``t + 1``'s pairs."""
        t, graph = item
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            new_state = self.model.step(graph, self._state)
            src, dst = self._pairs(t + 1)
            rng = np.random.default_rng(mix_seed(self.config.seed, self._epoch, t))
            neg = torch.from_numpy(rng.integers(0, self.graph.num_nodes, src.numel()))
            pos, negs = self.model.score(new_state, src, [dst, neg.to(self.device)])
            loss = link_loss(pos, negs[:, None], "bce", 1.0)
            loss.backward()
            self.optimizer.step()
            self._state = new_state.detach()
        correct = int((pos > 0).sum()) + int((negs <= 0).sum())
        return StepResult(loss.item(), correct, 2 * src.numel(), 0)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Roll the state through the snapshots before the split's periods and score each of
        them from the snapshot before it."""
        self.model.eval()
        first = self.val_start if split == "val" else self.val_start + self.num_val
        last = first + (self.num_val if split == "val" else self.num_test)
        state = torch.zeros(self.graph.num_nodes, self.config.link.out_dim, device=self.device)
        pos, neg = [], []
        for t, graph in self._snapshots(last - 1):
            state = self.model.step(graph, state)
            if t + 1 >= first:
                src, dst = self._pairs(t + 1)
                rng = np.random.default_rng(mix_seed(self.config.link.split_seed, EVAL_STREAM, t))
                negs = torch.from_numpy(rng.integers(0, self.graph.num_nodes, src.numel()))
                p, n = self.model.score(state, src, [dst, negs.to(self.device)]).cpu().numpy()
                pos.append(p)
                neg.append(n)
        p, n = np.concatenate(pos), np.concatenate(neg)
        metrics = {"ap": average_precision(p, n), "auc": auc(p, n), "pairs": int(p.size)}
        self.last_metrics[split] = metrics
        return metrics["ap"]

    def dataset_info(self) -> dict[str, Any]:
        g = self.graph
        return {
            "spec": self.spec,
            "name": g.name,
            "num_nodes": g.num_nodes,
            "num_edges": g.num_events,
            "num_events": g.num_events,
            "snapshots": self.seq.num_snapshots,
            "train": self.val_start,
            "val": self.num_val,
            "test": self.num_test,
            "fingerprint": temporal_fingerprint(g),
        }

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {
            "link": {
                "edges": f"{self.val_start} / {self.num_val} / {self.num_test} periods",
                "val": self.last_metrics.get("val", {}),
                "test": self.last_metrics.get("test", {}),
            },
            "snapshots": {
                "count": self.seq.num_snapshots,
                "window": self.seq.window,
                **self.seq.storage(),
                "overlap": self.overlap,
                "prep_s": self.prep_s,
                "waited_s": self.waited_s,
            },
        }


class _TrainingSnapshots:
    """The first ``count`` snapshots of an epoch, as :func:`~shardgnn.train.epoch.batch_epoch`'s
    batcher (always from the first: an epoch of snapshots is never resumed mid-way)."""

    def __init__(self, steps: SnapshotLinkSteps, count: int):
        self.steps, self.count = steps, count

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        assert start == 0, "snapshot epochs are not resumed mid-epoch"

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return iter(self.steps._snapshots(self.count))
