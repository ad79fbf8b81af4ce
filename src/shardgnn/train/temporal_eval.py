"""Temporal link prediction's evaluation and records, for the temporal link steps in one process
(:class:`~shardgnn.train.temporal.TemporalLinkSteps`) and on workers; and the metrics of event
labels (dynamic node classification, :func:`label_metrics`).

Evaluation continues the stream: from the memory at the end of training, the validation events
(and for the test split, validation then test events) are scored batch by batch against their
fixed negatives, then applied; the model's state is restored afterwards. The records are the
dataset's (its chronological split) and the results' (the last metrics of each split).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from shardgnn.graph.identity import temporal_fingerprint
from shardgnn.loader.temporal import EventBatches, EventStream
from shardgnn.nn.targets import roc_auc
from shardgnn.nn.temporal import TemporalLinkModel
from shardgnn.seeding import mix_seed
from shardgnn.train.config import TrainConfig
from shardgnn.train.linkmetrics import average_precision, stream_metrics
from shardgnn.train.loop import EpochRecord
from shardgnn.train.setup import EVAL_STREAM

Scorer = Callable[[int, int, float, int], np.ndarray]
"""``(a, b, time, seed) -> scores [K, b - a]`` of the events ``[a, b)`` at the batch's start
``time`` (``seed``: the batch's sampling seed)"""


def label_metrics(logits_NC: np.ndarray, y_N: np.ndarray) -> dict[str, float | int | None]:
    """Accuracy, macro F1 (over the classes present in ``y_N`` or predicted) and, with two
    classes, ROC-AUC of class 1 (scored by its logit margin) of predictions ``logits_NC``."""
    pred = logits_NC.argmax(axis=1) if logits_NC.size else np.zeros(0, dtype=np.int64)
    classes = np.union1d(np.unique(y_N), np.unique(pred))
    f1 = []
    for c in classes:
        tp = np.sum((pred == c) & (y_N == c))
        denominator = np.sum(pred == c) + np.sum(y_N == c)
        f1.append(2.0 * tp / denominator if denominator else 0.0)
    metrics: dict[str, float | int | None] = {
        "acc": float(np.mean(pred == y_N)) if y_N.size else None,
        "macro_f1": float(np.mean(f1)) if f1 else None,
        "events": int(y_N.size),
    }
    if logits_NC.shape[1] == 2:
        margin = logits_NC[:, 1] - logits_NC[:, 0]
        auc = roc_auc(margin[y_N == 1], margin[y_N == 0])
        metrics["rocauc"] = None if np.isnan(auc) else auc
    return metrics


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
    def _stream(
        self, first: int, last: int, scorer: Scorer | None = None, rows: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Score (with ``scorer``, ``rows`` scores per event) and then apply the events
        ``[first, last)`` batch by batch; returns the events this process scored and their
        scores ``[rows, n]``."""
        index, scores = [], []
        for batch, (lo, hi) in EventBatches(first, last, self.config.item_batch_size):
            a, b = self._share(lo, hi)
            if scorer is not None:
                seed = mix_seed(self.config.seed, EVAL_STREAM, first, batch)
                scores.append(scorer(a, b, float(self.events.t[lo]), seed))
                index.append(np.arange(a, b))
            if self.model.memory is not None:
                self._apply(a, b)
        if not scores:
            return np.zeros(0, dtype=np.int64), np.zeros((rows, 0))
        return np.concatenate(index), np.concatenate(scores, axis=1).astype(np.float64)

    def _link_scores(self, a: int, b: int, time: float, seed: int) -> np.ndarray:
        """Scores ``[3, b - a]`` of the events ``[a, b)``: positive, random negative, historical
        negative."""
        z_src, z_dst, z_neg, z_hist = self._embed(
            a, b, time, [self.eval_neg[a:b], self.eval_neg_hist[a:b]], seed
        )[0]
        return self.model.score(z_src, [z_dst, z_neg, z_hist]).cpu().numpy()

    @torch.no_grad()
    def _split_scores(self, split: str, scorer: Scorer, rows: int) -> tuple[int, int, np.ndarray]:
        """``(first, last, scores [rows, last - first])`` of the events of ``split``, every
        process's, in event order: the stream continued from the end of training over the
        validation events (and for ``test``, then the test events), from a copy of memory: the
        model's state is unchanged."""
        model = self.model
        model.eval()
        memory = model.memory
        snapshot = memory.snapshot() if memory is not None else None
        if memory is not None:
            self._flush()
        self._restart_stream()
        try:
            if split == "test":
                self._stream(self.val_start, self.test_start)
                first, last = self.test_start, self.events.num_events
            else:
                first, last = self.val_start, self.test_start
            scores = self._all_scores(*self._stream(first, last, scorer, rows))
        finally:
            if memory is not None:
                memory.restore(snapshot)
        return first, last, scores

    def evaluate(self, split: str) -> float:
        """The link metrics of ``split`` (:meth:`_split_scores`); returns its AP."""
        first, last, (pos, neg, hist) = self._split_scores(split, self._link_scores, 3)
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
            # checked on resume and inference: the same events (their SHA-256 included), however
            # the nodes are numbered
            "fingerprint": self._fingerprint(),
        }

    def _fingerprint(self) -> dict[str, Any] | None:
        """:func:`temporal_fingerprint` of the stream (in original ids: a partition's trainer
        records its partition's)."""
        return temporal_fingerprint(self.events)

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
