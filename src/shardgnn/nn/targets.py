"""What a node's label is, and how a model's outputs are trained and scored against it.

Three kinds of node labels (``Graph.label_kind``), each a :class:`NodeTarget`:

============== ========================================= ============ =============================
kind           labels ``y``                              model output loss; selection metric
============== ========================================= ============ =============================
``class``      int64 ``[N]``, ``-1`` = unlabelled          ``C`` logits cross-entropy; accuracy
``multilabel`` float32 ``[N, L]`` of 0/1, NaN = unknown    ``L`` logits binary cross-entropy; mean
                                                                      ROC-AUC over the labels
``regression`` float32 ``[N, T]``, NaN = unknown           ``T`` values squared error; mean R² over
                                                                      the targets
============== ========================================= ============ =============================

A node's loss is the mean over its known entries (multi-label, regression), so a node counts
once whatever its width; a node whose entries are all unknown adds nothing. Every training step
reports a per-node score summed over its nodes (right or wrong; the share of labels right at
probability 0.5; ``1 - squared error / variance of the training targets``), so the epoch's
training score is a mean over nodes whatever the batching, as the loss.

Several tasks over one encoder (``multitask:NAME=KIND/WIDTH*WEIGHT,...``, a
:class:`MultiTaskTarget`) put their label columns and their outputs side by side; a class task
takes one column of class ids (NaN = unknown).

Evaluation accumulates a state per batch on each rank and reduces it over ranks once per split
(:class:`Reducer`): sums for accuracy and R² (exact), every rank's scores and labels gathered for
ROC-AUC (exact: the metric of ``ogbn-proteins``, averaged over labels with both a positive and a
negative, as OGB's evaluator).
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

import numpy as np
import torch
from torch.nn import functional as F

from shardgnn.graph.csr import LABEL_KINDS, LabelTask, label_tasks

__all__ = ["LABEL_KINDS", "NodeTarget", "node_target", "roc_auc", "target_of_labels"]


class Reducer(Protocol):
    """How evaluation states become one over every rank (the identity in one process)."""

    def sum(self, values: list[float]) -> list[float]:
        """``values`` summed over ranks."""

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's ``rows`` (same trailing shape), concatenated in rank order."""


class LocalReducer:
    """One process: nothing to reduce."""

    def sum(self, values: list[float]) -> list[float]:
        return list(values)

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        return rows


class CommReducer:
    """Over the ranks of a :class:`~shardgnn.distributed.comm.Communicator` (collectives: every
    rank reduces at the same point)."""

    def __init__(self, comm: Any, stage: str = "metrics"):
        self.comm, self.stage = comm, stage

    def sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        self.comm.all_reduce(t, self.stage)
        return t.tolist()

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.cpu().contiguous()
        return torch.cat(self.comm.all_to_all([rows] * self.comm.world_size, self.stage))


def roc_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a random positive outscores a random
    negative (Mann-Whitney U with average ranks for ties; NaN without both)."""
    pos, neg = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    if not pos.size or not neg.size:
        return float("nan")
    scores = np.concatenate([pos, neg])
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # average rank (1-based) of each distinct value: its first rank plus half its run
    first = np.cumsum(counts) - counts + 1
    ranks = (first + (counts - 1) / 2.0)[inverse]
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


class NodeTarget(abc.ABC):
    """How outputs ``out_BC`` (fp32) meet labels ``y_B`` of one kind; see the module's table."""

    label_kind: str
    metric: str
    """the selection metric's name in results, epoch lines and plots"""

    def __init__(self, width: int):
        self.out_dim = int(width)
        """the model's output width: classes, labels or targets"""

    # ------------------------------------------------------------------ training
    @abc.abstractmethod
    def loss_sum(self, out_BC: torch.Tensor, y_B: torch.Tensor) -> torch.Tensor:
        """The sum over the rows of each row's loss."""

    def loss_mean(self, out_BC: torch.Tensor, y_B: torch.Tensor) -> torch.Tensor:
        """The mean over the rows of each row's loss."""
        return self.loss_sum(out_BC, y_B) / max(y_B.shape[0], 1)

    @abc.abstractmethod
    def score_sum(self, out_BC: torch.Tensor, y_B: torch.Tensor) -> float | torch.Tensor:
        """The sum over the rows of each row's training score in [0, 1] (class: right or not); a
        number, or a 0-dim tensor on the outputs' device (read it with ``float`` when needed: a
        training step that returns it unread does not make the host wait for the device)."""

    def rows_scored(self, y_B: torch.Tensor) -> int:
        """How many of the rows :meth:`score_sum` scores (what the epoch's training score is
        averaged over): every row."""
        return int(y_B.shape[0])

    fit_width = 0
    """how many numbers :meth:`fit_statistics` gives"""

    def fit_statistics(self, y_B: torch.Tensor) -> list[float]:
        """What this rank's training labels add to :meth:`fit` (summed over ranks)."""
        return []

    def fit(self, sums: list[float]) -> None:
        """Learn what the training score needs from every rank's :meth:`fit_statistics`."""

    def fit_labels(self, y_B: torch.Tensor, reduce_sum=None) -> None:
        """:meth:`fit` on this rank's training labels ``y_B``, their statistics summed over ranks
        by ``reduce_sum`` (None: one process). A target with nothing to learn reduces nothing
        (the same kind on every rank: all reduce or none)."""
        if self.fit_width:
            statistics = self.fit_statistics(y_B)
            self.fit(statistics if reduce_sum is None else reduce_sum(statistics))

    # ------------------------------------------------------------------ evaluation
    @abc.abstractmethod
    def batch_state(self, out_BC: torch.Tensor, y_B: torch.Tensor) -> Any:
        """What one batch adds to its split's evaluation (CPU tensors)."""

    @abc.abstractmethod
    def result(self, states: list[Any], reducer: Reducer) -> tuple[float, dict]:
        """``(metric, details)`` over every rank's batches (a collective with a
        :class:`CommReducer`: every rank calls it, batches or not)."""

    def evaluation(self) -> "Evaluation":
        """A split's evaluation: ``add`` every batch, then ``result``."""
        return Evaluation(self)

    # ------------------------------------------------------------------ outputs
    @abc.abstractmethod
    def predict(self, out_BC: torch.Tensor) -> torch.Tensor:
        """What ``shardgnn infer`` writes per node: the class, label probabilities, values."""

    @abc.abstractmethod
    def check_labels(self, y: np.ndarray, rows: np.ndarray) -> str | None:
        """Why ``y[rows]`` (a split's labels) cannot be trained or scored on, or None."""


class Evaluation:
    """One split's evaluation in progress on this rank."""

    def __init__(self, target: NodeTarget):
        self.target, self.states = target, []

    def add(self, out_BC: torch.Tensor, y_B: torch.Tensor) -> None:
        self.states.append(self.target.batch_state(out_BC.float(), y_B.to(out_BC.device)))

    def result(self, reducer: Reducer) -> tuple[float, dict]:
        return self.target.result(self.states, reducer)


class ClassTarget(NodeTarget):
    label_kind, metric = "class", "acc"

    def loss_sum(self, out_BC, y_B):
        return F.cross_entropy(out_BC, y_B, reduction="sum")

    def loss_mean(self, out_BC, y_B):
        return F.cross_entropy(out_BC, y_B)

    def score_sum(self, out_BC, y_B):
        return (out_BC.argmax(-1) == y_B).sum()

    def batch_state(self, out_BC, y_B):
        correct = int((out_BC.argmax(-1) == y_B).sum())
        return torch.tensor([correct, y_B.numel()], dtype=torch.float64)

    def result(self, states, reducer):
        local = torch.stack(states).sum(0) if states else torch.zeros(2, dtype=torch.float64)
        correct, count = reducer.sum(local.tolist())
        return correct / max(count, 1), {}

    def predict(self, out_BC):
        return out_BC.argmax(-1)

    def check_labels(self, y, rows):
        if np.any(np.asarray(y[rows]) < 0):
            return "holds unlabelled nodes"
        return None


class F1Target(ClassTarget):
    """Two classes, class 1 the positive one (a true track segment among candidate edges):
    selected by the positive class's F1; precision, recall and accuracy in the details."""

    metric = "f1"

    def batch_state(self, out_BC, y_B):
        predicted_B = out_BC.argmax(-1)
        predicted, actual = predicted_B == 1, y_B == 1
        # true positives, false positives, false negatives, right predictions, predictions
        counts = torch.stack(
            [
                (predicted & actual).sum(),
                (predicted & ~actual).sum(),
                (~predicted & actual).sum(),
                (predicted_B == y_B).sum(),
                torch.tensor(y_B.numel(), device=y_B.device),
            ]
        )
        return counts.to("cpu", torch.float64)

    def result(self, states, reducer):
        local = torch.stack(states).sum(0) if states else torch.zeros(5, dtype=torch.float64)
        tp, fp, fn, correct, count = reducer.sum(local.tolist())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return f1, {"precision": precision, "recall": recall, "accuracy": correct / max(count, 1)}


class _TableTarget(NodeTarget):
    """Labels in a float ``[N, W]`` table whose NaN entries are unknown."""

    @staticmethod
    def known(y_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mask_BW, per-row count of known entries (at least 1))``."""
        mask = ~torch.isnan(y_B)
        return mask, mask.sum(1).clamp(min=1)

    def rows_scored(self, y_B):
        """The rows with at least one known entry (a row of unknowns scores nothing: a fake edge
        of ``tracks:labels=regression``, a node of another type)."""
        return int((~torch.isnan(y_B)).any(1).sum())

    def loss_sum(self, out_BC, y_B):
        mask, count = self.known(y_B)
        y = torch.where(mask, y_B, torch.zeros_like(y_B))
        entries = self.entry_loss(out_BC, y) * mask
        return (entries.sum(1) / count).sum()

    def loss_mean(self, out_BC, y_B):
        """The mean over the rows scored: a row of unknowns (a fake edge) adds no loss and does
        not count (dividing by every row would shrink the loss by the share of such rows)."""
        scored = (~torch.isnan(y_B)).any(1).sum().clamp(min=1)  # a tensor: no host sync
        return self.loss_sum(out_BC, y_B) / scored

    @abc.abstractmethod
    def entry_loss(self, out_BC: torch.Tensor, y_BC: torch.Tensor) -> torch.Tensor:
        """The loss of every entry (unknown ones are masked by the caller)."""

    def check_labels(self, y, rows):
        if len(rows) and bool(np.isnan(np.asarray(y[rows])).all(axis=1).any()):
            return "holds nodes none of whose labels is known"
        return None


class MultiLabelTarget(_TableTarget):
    label_kind, metric = "multilabel", "rocauc"

    def entry_loss(self, out_BC, y_BC):
        return F.binary_cross_entropy_with_logits(out_BC, y_BC, reduction="none")

    def score_sum(self, out_BC, y_B):
        mask, count = self.known(y_B)
        right = ((out_BC > 0) == (y_B > 0.5)) & mask
        return float((right.sum(1) / count).sum())

    def batch_state(self, out_BC, y_B):
        return torch.cat([out_BC.detach().cpu(), y_B.float().cpu()], dim=1)

    def result(self, states, reducer):
        width = self.out_dim
        local = torch.cat(states) if states else torch.zeros(0, 2 * width)
        rows = reducer.gather(local).numpy()
        scores, labels = rows[:, :width], rows[:, width:]
        per_label = []
        for j in range(width):
            known = ~np.isnan(labels[:, j])
            positive = labels[known, j] > 0.5
            per_label.append(roc_auc(scores[known, j][positive], scores[known, j][~positive]))
        defined = [a for a in per_label if not np.isnan(a)]
        mean = float(np.mean(defined)) if defined else float("nan")
        return mean, {
            "rocauc_per_label": [None if np.isnan(a) else a for a in per_label],
            "labels_scored": len(defined),
        }

    def predict(self, out_BC):
        return torch.sigmoid(out_BC.float())


class RegressionTarget(_TableTarget):
    label_kind, metric = "regression", "r2"

    def __init__(self, width: int):
        super().__init__(width)
        self.variance_C = torch.ones(width, dtype=torch.float64)
        self.fit_width = 3 * width

    def entry_loss(self, out_BC, y_BC):
        return (out_BC - y_BC) ** 2

    def fit_statistics(self, y_B):
        return self._column_sums(y_B, None)[: 3 * self.out_dim]

    def fit(self, sums):
        n, total, squares = torch.tensor(sums, dtype=torch.float64).view(3, -1)
        mean = total / n.clamp(min=1)
        # a constant target scores by its squared error alone
        self.variance_C = (squares / n.clamp(min=1) - mean**2).clamp(min=1e-12)

    def score_sum(self, out_BC, y_B):
        mask, count = self.known(y_B)
        y = torch.where(mask, y_B, torch.zeros_like(y_B))
        error = ((out_BC.detach() - y) ** 2).double() / self.variance_C.to(out_BC.device)
        return float((((1.0 - error) * mask).sum(1) / count).sum())

    def _column_sums(self, y_B: torch.Tensor, out_BC: torch.Tensor | None) -> list[float]:
        """Per column: known entries, their sum, sum of squares, squared error of ``out_BC``."""
        y = y_B.double().cpu()
        mask = ~torch.isnan(y)
        y0 = torch.where(mask, y, torch.zeros_like(y))
        error = torch.zeros(y.shape[1], dtype=torch.float64)
        if out_BC is not None:
            error = ((out_BC.detach().double().cpu() - y0) ** 2 * mask).sum(0)
        return torch.cat([mask.sum(0).double(), y0.sum(0), (y0**2).sum(0), error]).tolist()

    def batch_state(self, out_BC, y_B):
        return torch.tensor(self._column_sums(y_B, out_BC), dtype=torch.float64)

    def result(self, states, reducer):
        width = self.out_dim
        local = (
            torch.stack(states).sum(0) if states else torch.zeros(4 * width, dtype=torch.float64)
        )
        n, total, squares, error = torch.tensor(
            reducer.sum(local.tolist()), dtype=torch.float64
        ).view(4, -1)
        spread = squares - total**2 / n.clamp(min=1)
        r2 = [
            float(1.0 - error[j] / spread[j]) if n[j] > 1 and spread[j] > 0 else float("nan")
            for j in range(width)
        ]
        defined = [v for v in r2 if not np.isnan(v)]
        known = float(n.sum())
        return (float(np.mean(defined)) if defined else float("nan")), {
            "r2_per_target": [None if np.isnan(v) else v for v in r2],
            "rmse": float(np.sqrt(float(error.sum()) / known)) if known else None,
        }

    def predict(self, out_BC):
        return out_BC.float()


class MultiTaskTarget(NodeTarget):
    """Several tasks over one encoder (``multitask:NAME=KIND/WIDTH*WEIGHT,...``): the model's
    outputs are the tasks' outputs side by side, as the label columns are; the loss is the
    weighted sum of the tasks' losses, the training score and the selection metric the weighted
    means of theirs (a node unknown to a task scores 0 there); ``details`` holds every task's
    metric and details by name."""

    label_kind, metric = "multitask", "tasks"

    def __init__(self, tasks: list[LabelTask]):
        self.tasks = tasks
        self.heads = [node_target(t.kind, t.width) for t in tasks]
        super().__init__(sum(t.width for t in tasks))
        out = np.cumsum([0] + [t.width for t in tasks])
        cols = np.cumsum([0] + [t.columns for t in tasks])
        self._out = [slice(int(a), int(b)) for a, b in zip(out[:-1], out[1:])]
        self._cols = [slice(int(a), int(b)) for a, b in zip(cols[:-1], cols[1:])]
        self._weights = np.array([t.weight for t in tasks], dtype=np.float64)
        self.fit_width = sum(head.fit_width for head in self.heads)

    def _parts(self, out_BC: torch.Tensor, y_B: torch.Tensor):
        """``(task, head, its outputs, its labels)`` per task; a class task's rows are its known
        ones, their labels class ids."""
        for task, head, o, c in zip(self.tasks, self.heads, self._out, self._cols):
            out_t, y_t = out_BC[:, o], y_B[:, c]
            if task.kind == "class":
                known = ~torch.isnan(y_t[:, 0])
                out_t, y_t = out_t[known], y_t[known, 0].long()
            yield task, head, out_t, y_t

    def loss_sum(self, out_BC, y_B):
        total = out_BC.new_zeros(())
        for task, head, out_t, y_t in self._parts(out_BC, y_B):
            total = total + task.weight * head.loss_sum(out_t, y_t)
        return total

    def score_sum(self, out_BC, y_B):
        scores = [
            float(head.score_sum(out_t, y_t)) for _, head, out_t, y_t in self._parts(out_BC, y_B)
        ]
        return float(np.dot(self._weights, scores) / self._weights.sum())

    def fit_statistics(self, y_B):
        return [
            v for head, c in zip(self.heads, self._cols) for v in head.fit_statistics(y_B[:, c])
        ]

    def fit(self, sums):
        start = 0
        for head in self.heads:
            head.fit(sums[start : start + head.fit_width])
            start += head.fit_width

    def batch_state(self, out_BC, y_B):
        return [
            head.batch_state(out_t, y_t.to(out_t.device))
            for _, head, out_t, y_t in self._parts(out_BC, y_B)
        ]

    def result(self, states, reducer):
        metrics, details = [], {}
        for t, (task, head) in enumerate(zip(self.tasks, self.heads)):
            metric, more = head.result([state[t] for state in states], reducer)
            metrics.append(metric)
            details[task.name] = {"kind": task.kind, "metric": head.metric, "value": metric, **more}
        return float(np.dot(self._weights, metrics) / self._weights.sum()), {"tasks": details}

    def predict(self, out_BC):
        parts = []
        for task, head, o in zip(self.tasks, self.heads, self._out):
            predicted = head.predict(out_BC[:, o]).float()
            parts.append(predicted[:, None] if task.kind == "class" else predicted)
        return torch.cat(parts, dim=1)

    check_labels = _TableTarget.check_labels


_TARGETS = {t.label_kind: t for t in (ClassTarget, MultiLabelTarget, RegressionTarget)}


def node_target(label_kind: str, width: int) -> NodeTarget:
    """The target of labels of ``label_kind`` (:data:`LABEL_KINDS`) ``width`` wide (classes for
    ``class``; labels or targets, the label table's columns, otherwise)."""
    return _TARGETS[label_kind](width)


def target_of_labels(label_kind: str, y: Any, num_classes: int) -> NodeTarget:
    """The target of label array ``y`` (``[N]`` classes or a ``[N, W]`` table) of
    ``label_kind``: classes are ``num_classes`` wide, tables as wide as their columns, several
    tasks as their spec says (:func:`~shardgnn.graph.csr.label_tasks`)."""
    if label_kind == "class":
        return ClassTarget(num_classes)
    tasks = label_tasks(label_kind)
    if tasks is not None:
        return MultiTaskTarget(tasks)
    return node_target(label_kind, int(np.shape(y)[1]))
