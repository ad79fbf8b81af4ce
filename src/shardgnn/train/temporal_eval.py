"""Temporal link prediction's evaluation and records, for the temporal link steps in one process
(:class:`~shardgnn.train.temporal.TemporalLinkSteps`) and on workers.

Evaluation continues the stream: from the memory at the end of training, the validation events
(and for the test split, validation then test events) are scored batch by batch against their
fixed negatives, then applied; the model's state is restored afterwards. The records are the
dataset's (its chronological split) and the results' (the last metrics of each split).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.graph.identity import events_sha256
from shardgnn.loader.temporal import EventBatches, EventStream
from shardgnn.nn.temporal import TemporalLinkModel
from shardgnn.seeding import mix_seed
from shardgnn.train.config import TrainConfig
from shardgnn.train.linkmetrics import average_precision, stream_metrics
from shardgnn.train.loop import EpochRecord
from shardgnn.train.setup import EVAL_STREAM


class TemporalStreamEvaluation:
    """Mixin of :class:`~shardgnn.train.temporal.TemporalLinkSteps`: :meth:`evaluate`, and the
    records :meth:`dataset_info` and :meth:`results_extra`.

    It reads the steps' state (below) and calls their hooks: ``_share``, ``_embed``, ``_apply``,
    ``_flush``, ``_restart_stream`` and ``_all_scores``, which a distributed trainer replaces.
    """

    config: TrainConfig
    events: EventStream
    model: TemporalLinkModel
    spec: str | None
    event_feat_EF: torch.Tensor
    val_start: int
    test_start: int
    eval_neg: np.ndarray
    """fixed uniform negative destination of every event"""
    eval_neg_hist: np.ndarray
    """fixed historical negative destination of every event"""
    new_event: np.ndarray
    """per event: an endpoint never occurs in the training events"""
    last_metrics: dict[str, dict[str, float]]
    """split -> the metrics of its last evaluation"""
    sampled_events: int

    @torch.no_grad()
    def _stream(self, first: int, last: int, score: bool) -> tuple[np.ndarray, np.ndarray]:
        """Score (when ``score``) and then apply the events ``[first, last)`` batch by batch;
        returns the events this process scored and their scores ``[3, n]`` (positive, random
        negative, historical negative)."""
        index, scores = [], []
        for batch, (lo, hi) in EventBatches(first, last, self.config.item_batch_size):
            a, b = self._share(lo, hi)
            if score:
                z_src, z_dst, z_neg, z_hist = self._embed(
                    a, b, float(self.events.t[lo]),
                    [self.eval_neg[a:b], self.eval_neg_hist[a:b]],
                    mix_seed(self.config.seed, EVAL_STREAM, first, batch),
                )[0]  # fmt: skip
                scores.append(self.model.score(z_src, [z_dst, z_neg, z_hist]).cpu().numpy())
                index.append(np.arange(a, b))
            if self.model.memory is not None:
                self._apply(a, b)
        if not scores:
            return np.zeros(0, dtype=np.int64), np.zeros((3, 0))
        return np.concatenate(index), np.concatenate(scores, axis=1).astype(np.float64)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Continue the stream from the end of training over the validation events (and for
        ``test``, then the test events), from a copy of memory: the model's state is unchanged."""
        model = self.model
        model.eval()
        memory = model.memory
        snapshot = memory.snapshot() if memory is not None else None
        if memory is not None:
            self._flush()
        self._restart_stream()
        try:
            if split == "test":
                self._stream(self.val_start, self.test_start, score=False)
                first, last = self.test_start, self.events.num_events
            else:
                first, last = self.val_start, self.test_start
            pos, neg, hist = self._all_scores(*self._stream(first, last, score=True))
        finally:
            if memory is not None:
                memory.restore(snapshot)
        ends = [hi - first for _, (_, hi) in EventBatches(first, last, self.config.item_batch_size)]
        batch_ap = [
            average_precision(p, n)
            for p, n in zip(np.split(pos, ends[:-1]), np.split(neg, ends[:-1]))
        ]
        metrics = stream_metrics(pos, neg, hist, self.new_event[first:last], batch_ap)
        self.last_metrics[split] = metrics
        return metrics["ap"]

    # ------------------------------------------------------------------ records
    def dataset_info(self) -> dict[str, Any]:
        g = self.events
        return {
            "spec": self.spec,
            "name": g.name,
            "num_nodes": g.num_nodes,
            "num_events": g.num_events,
            "num_edges": g.num_events,  # an event is a (timestamped) edge
            "edge_features": int(self.event_feat_EF.shape[1]),
            "train": self.val_start,
            "val": self.test_start - self.val_start,
            "test": g.num_events - self.test_start,
            "events_sha256": events_sha256(g.src, g.dst, g.t),
        }

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        g = self.events
        return {
            "link": {
                "edges": f"{self.val_start} / {self.test_start - self.val_start} / "
                f"{g.num_events - self.test_start} events",
                "val": self.last_metrics.get("val", {}),
                "test": self.last_metrics.get("test", {}),
            },
            "sampled_edges_per_s": self.sampled_events / sample_time if sample_time > 0 else None,
        }
