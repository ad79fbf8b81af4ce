"""Dynamic node classification on a stream of timestamped events (TGN, JODIE, TGAT).

Each event may carry its source's class at that time (JODIE's state labels: a Wikipedia editor
banned after an edit; here also the synthetic stream's drifting communities). The model predicts
it from the source's embedding at the event's time, computed exactly as link prediction computes
it (memory, recent neighbourhood or hops strictly before the batch or the event, never the event
itself), through TGN's MLP decoder. Training streams the events as link prediction does; the loss
is the labelled events' cross-entropy plus ``--temporal-link-weight`` times the link loss (each
event against a random destination), which trains memory on every event, labelled or not.

Evaluation continues the stream over the validation (and for the test split, validation then
test) events, as link prediction's does, and scores the labelled ones: accuracy and macro F1,
and ROC-AUC of the positive class with two classes (the selection metric then; accuracy
otherwise). The epoch's training loss and accuracy are the labelled events' cross-entropy and
accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shardgnn.errors import ConfigError
from shardgnn.graph.temporal import label_summary
from shardgnn.loader.temporal import EventStream
from shardgnn.nn.temporal import TemporalLinkModel
from shardgnn.train.config import TrainConfig
from shardgnn.train.epoch import StepResult
from shardgnn.train.loop import EpochRecord
from shardgnn.train.temporal import TemporalLinkSteps
from shardgnn.train.temporal_eval import label_metrics


class TemporalNodeTask:
    """Mixin over the temporal link steps (one process or a rank of workers): the classifier
    head's classes, the step's loss and report, evaluation and records (see the module
    docstring). The hooks it reads are the link steps'."""

    config: TrainConfig
    events: EventStream
    model: TemporalLinkModel
    device: torch.device
    val_start: int
    test_start: int
    last_metrics: dict[str, dict[str, Any]]

    def _num_classes(self) -> int:
        """Checks the events' labels; the classes they name (ids 0 ... C - 1)."""
        labels = self.events.labels
        where = f"temporal graph {self.events.name!r}"
        if labels is None:
            raise ConfigError(
                f"{where} carries no event labels: --task node classifies each event's source "
                "by the label its events carry; give labelled events (temporal:FILE,labels=1 "
                "with the label in the 4th column, or synthetic-temporal:classes=4,features=16) "
                "or train --task link"
            )
        labels = np.asarray(labels)
        for split, lo, hi in (
            ("training", 0, self.val_start),
            ("validation", self.val_start, self.test_start),
        ):
            if not np.any(labels[lo:hi] >= 0):
                raise ConfigError(
                    f"{where}: no {split} event carries a label (events {lo} ... {hi - 1}); "
                    "give other --link-val / --link-test fractions"
                )
        classes = int(labels.max()) + 1
        if classes < 2:
            raise ConfigError(f"{where}: its event labels name one class; a classifier needs two")
        self.labels_E = torch.from_numpy(labels).to(self.device)
        self.metric = "rocauc" if classes == 2 else "acc"
        return classes

    def _task_loss(
        self,
        loss: torch.Tensor,
        pos: torch.Tensor,
        negs: torch.Tensor,
        z_src: torch.Tensor,
        share: tuple[int, int],
        batch: tuple[int, int],
    ) -> tuple[torch.Tensor, StepResult]:
        """The labelled events' cross-entropy (the global batch's mean: the shares' gradients add
        up to it) plus ``--temporal-link-weight`` times the link ``loss``; reports the share's
        labelled events' mean cross-entropy and correct predictions."""
        (a, b), (lo, hi) = share, batch
        y = self.labels_E[a:b]
        known = y >= 0
        in_batch = int((self.labels_E[lo:hi] >= 0).sum())
        logits = self.model.classify(z_src[known])
        label_sum = F.cross_entropy(logits, y[known], reduction="sum")
        total = label_sum / max(in_batch, 1)
        weight = self.config.temporal.link_weight
        if weight:
            total = total + weight * loss
        count = int(known.sum())
        correct = int((logits.argmax(dim=1) == y[known]).sum())
        return total, StepResult(label_sum.item() / max(count, 1), correct, count, 0)

    def _label_scores(self, a: int, b: int, time: float, seed: int) -> np.ndarray:
        """Class logits ``[C, b - a]`` of the sources of the events ``[a, b)``."""
        z_src = self._embed(a, b, time, [], seed)[0][0]  # type: ignore[attr-defined]
        return self.model.classify(z_src).T.cpu().numpy()

    def evaluate(self, split: str) -> float:
        """The label metrics of ``split``'s labelled events; returns the selection metric."""
        first, last, logits_CN = self._split_scores(  # type: ignore[attr-defined]
            split, self._label_scores, self.model.num_classes
        )
        y = np.asarray(self.events.labels)[first:last]
        known = y >= 0
        metrics = label_metrics(logits_CN.T[known], y[known])
        self.last_metrics[split] = metrics
        value = metrics[self.metric]
        return float("nan") if value is None else float(value)

    def dataset_info(self) -> dict[str, Any]:
        record = super().dataset_info()  # type: ignore[misc]
        labels = np.asarray(self.events.labels)
        record.update(label_summary(labels))
        record["labelled"] = {
            split: int(np.sum(labels[lo:hi] >= 0))
            for split, lo, hi in (
                ("train", 0, self.val_start),
                ("val", self.val_start, self.test_start),
                ("test", self.test_start, labels.size),
            )
        }
        return record

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra = super().results_extra(history)  # type: ignore[misc]
        del extra["link"]
        extra["event_labels"] = {
            "metric": self.metric,
            "val": self.last_metrics.get("val", {}),
            "test": self.last_metrics.get("test", {}),
        }
        return extra


class TemporalNodeSteps(TemporalNodeTask, TemporalLinkSteps):
    """One process's dynamic node classification (see the module docstring)."""
