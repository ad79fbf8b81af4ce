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

import os
import time
from typing import Any

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import canonical_spec, load_temporal_dataset
from shardgnn.graph.identity import events_sha256
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
from shardgnn.train.epoch import EpochRun
from shardgnn.train.linkmetrics import auc, average_precision
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import EVAL_STREAM, resolve_device


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
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
        )
        overlap = config.run.overlap
        self.overlap = overlap == "on" or (overlap == "auto" and (os.cpu_count() or 1) > 1)
        self.timer = StageTimer()
        self.targets = [
            self.seq.period_pairs(t, g.src, g.dst) for t in range(self.seq.num_snapshots)
        ]
        self.prep_s = self.waited_s = 0.0
        self.last_metrics: dict[str, dict[str, float]] = {}

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
        self.model.train()
        state = torch.zeros(self.graph.num_nodes, self.config.link.out_dim, device=self.device)
        loss_sum = correct = count = 0
        # snapshot t predicts period t + 1, for every training period after the first
        for t, graph in self._snapshots(self.val_start - 1):
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                new_state = self.model.step(graph, state)
                src, dst = self._pairs(t + 1)
                rng = np.random.default_rng(mix_seed(self.config.seed, run.epoch, t))
                neg = torch.from_numpy(rng.integers(0, self.graph.num_nodes, src.numel()))
                pos, negs = self.model.score(new_state, src, [dst, neg.to(self.device)])
                loss = link_loss(pos, negs[:, None], "bce", 1.0)
                loss.backward()
                self.optimizer.step()
                state = new_state.detach()
            loss_sum += loss.item() * 2 * src.numel()
            correct += int((pos > 0).sum()) + int((negs <= 0).sum())
            count += 2 * src.numel()
        return loss_sum / max(count, 1), correct / max(count, 1)

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
            "events_sha256": events_sha256(g.src, g.dst, g.t),
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
