"""The one training loop: epochs, evaluation, best epoch, patience, checkpoints, resume, history,
progress lines and results, for every kind of training.

What happens inside an epoch is a :class:`Steps` object's business: each recipe of
:mod:`shardgnn.train.recipes` names its steps, in one process (the reference) and on workers.
Everything around the epochs is here, once; the loop imports no recipe.

In a distributed run every rank runs this loop in lockstep; every reduction goes through
``Steps.sum`` (an all-reduce, so every rank issues it at the same point), and only rank 0 prints
and writes files.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import math
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.atomic import save_json
from shardgnn.distributed.comm import Communicator
from shardgnn.errors import ConfigError, DivergedError, Preempted
from shardgnn.store.embedding import snapshot_state
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig
from shardgnn.train.epoch import EpochRun, EpochSums
from shardgnn.train.loop_results import add_epoch_comm, loop_results
from shardgnn.train.loop_state import LoopState, loop_checkpointer, resume_loop, save_checkpoint
from shardgnn.train.report import epoch_line
from shardgnn.train.scalars import ScalarLog
from shardgnn.train.stop import StopSignals


@dataclasses.dataclass
class EpochRecord:
    """One epoch of the history (``epochs[i]`` of the results JSON)."""

    epoch: int
    """1-based: the epoch's number, which is also the number of epochs done when it ended"""
    loss: float
    train_acc: float
    """share of right training predictions (link prediction: pairs on the right side of 0)"""
    val_acc: float
    """the validation metric (``Steps.metric``: accuracy, or AUC for link prediction)"""
    time_s: float
    """seconds of training (evaluation excluded), averaged over workers"""
    stages: dict[str, float]
    """seconds per stage (sample, fetch, compute, comm, eval...), averaged over workers"""
    cache: dict[str, float | None] | None = None
    """distributed mini-batch: feature-fetch metrics of the epoch, summed over workers (hit rate,
    requested / missed / remote MB)"""


class Steps(abc.ABC):
    """What one kind of training does inside an epoch, and what it knows about its data.

    Attributes the loop reads: ``model`` (the module whose state is checkpointed and whose best
    weights are kept), ``optimizer``, ``timer`` (stage seconds, reset every epoch), ``rank`` and
    ``world_size``, ``comms`` (every communicator whose traffic is reported; none for one
    process) and ``main_comm`` (the communicator over all workers that gathers the report).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    timer: StageTimer
    rank: int = 0
    world_size: int = 1
    comms: tuple[Communicator, ...] = ()
    main_comm: Communicator | None = None
    metric: str = "acc"
    """what :meth:`evaluate` measures (``acc``, or ``auc`` for link prediction): the results'
    ``val_acc``/``test_acc`` and the epoch lines hold it"""

    @abc.abstractmethod
    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        """Train one epoch; return ``(mean loss, accuracy)`` over every worker's training nodes,
        or ``None`` when it stopped early (``run.stopped`` then holds this rank's sums)."""

    @abc.abstractmethod
    def evaluate(self, split: str) -> float:
        """The selection metric (``metric``) over every node (or edge) of ``split`` (``val`` or
        ``test``)."""

    def evaluate_splits(self, splits: tuple[str, ...]) -> dict[str, float]:
        """:meth:`evaluate` of each of ``splits``, in order (the run's end: ``val`` and
        ``test``). Steps whose evaluation computes every node's output at once (full-graph,
        layer-wise) score every split from one pass."""
        return {split: self.evaluate(split) for split in splits}

    @abc.abstractmethod
    def dataset_info(self) -> dict[str, Any]:
        """The dataset's identity and size: spec, name, fingerprint, split sizes."""

    def sum(self, values: list[float], stage: str = "metrics") -> list[float]:
        """``values`` summed over workers (a collective in distributed runs)."""
        return list(values)

    def barrier(self) -> None:
        """Wait for every worker (a collective in distributed runs)."""

    def generators(self) -> list[torch.Generator]:
        """Random generators whose state a checkpoint must carry (low-bit codecs)."""
        return []

    def extra_state(self) -> dict[str, torch.Tensor]:
        """This rank's state beyond model, optimiser and generators that a checkpoint must carry
        for an exact resume (historical embeddings' tables)."""
        return {}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def load_resharded_extra_state(self, states: list[dict[str, torch.Tensor]]) -> None:
        """Restore :meth:`extra_state` from what every rank of a job of another size (or over
        another partition) saved, in rank order (historical tables by original node id)."""
        if any(states):
            raise ConfigError(
                f"the checkpoint holds per-rank state of {self.fixed_shards} that cannot be "
                "re-sharded; resume it on the workers and partition that wrote it"
            )

    fixed_shards: str = "this kind of training"
    """why :meth:`sharded_rows` is None: what ties a checkpoint to its worker count"""

    def sharded_rows(self) -> dict[str, np.ndarray] | None:
        """For a checkpoint written by another number of workers: the original node ids of the
        rows every sharded table of the model holds on this rank (``{state prefix: ids}``,
        :func:`~shardgnn.train.checkpoint.reshard`), or None when this kind of training resumes
        only on the worker count that wrote it (:attr:`fixed_shards` says why). By default the
        tables that name their rows (:func:`model_rows`); the rest of the model is replicated."""
        return model_rows(self.model)

    def epoch_metrics(self, epoch_comm: dict[str, list]) -> dict[str, Any] | None:
        """Per-epoch metrics beyond loss and accuracy (collective); ``epoch_comm``: this rank's
        ``[bytes_sent, bytes_recv, seconds, calls, host_bytes]`` per stage in the epoch."""
        return None

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        """Results of this kind of training (collective): sampling rate, SpMM variant, cache..."""
        return {}

    def finish(self) -> None:
        """Complete work still in flight (asynchronous exchanges) before the final evaluation."""


def _improves(value: float, best: float) -> bool:
    """Whether validation metric ``value`` beats ``best``: a number beats an undefined metric
    (NaN: an R² over fewer than two validation rows), NaN beats nothing, and any value beats the
    first epoch's absence (the first epoch is the best so far, whatever its value: an R² may lie
    far below -1)."""
    if value != value:
        return False
    return best != best or value > best


def weights_sha256(steps: Steps) -> str:
    """SHA-256 of the weights training ended with, over every rank (a collective): each rank's
    model state (names, dtypes, shapes and bytes, in name order; sharded rows differ per rank)
    and its extra state, then the ranks' digests in rank order. Two runs of the same command
    agree on it exactly when they computed the same weights bit for bit."""
    digest = hashlib.sha256()
    state = {**steps.model.state_dict(), **steps.extra_state()}
    for name in sorted(state):
        # a fresh row-major copy: an expanded or strided tensor cannot be viewed as bytes
        tensor = state[name].detach().cpu().clone(memory_format=torch.contiguous_format)
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    # every rank's 32 bytes, each in its own row of a sum over ranks (exact in float64)
    rows = [0.0] * (32 * steps.world_size)
    rows[32 * steps.rank : 32 * (steps.rank + 1)] = [float(b) for b in digest.digest()]
    every = bytes(int(v) for v in steps.sum(rows, stage="control"))
    return hashlib.sha256(every).hexdigest()


def model_rows(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """:meth:`Steps.sharded_rows` of a model whose only rank-local state is tables of node rows
    that name their rows' original ids (``<prefix>node_ids``: learnable rows, temporal
    memory)."""
    return {
        name[: -len("node_ids")]: tensor.cpu().numpy()
        for name, tensor in model.state_dict().items()
        if name.endswith("node_ids")
    }


class TrainingLoop:
    """Runs ``steps`` for ``config.optim.epochs`` epochs with every piece of bookkeeping.

    Args:
        config: the resolved training config.
        steps: what one epoch does.
        recipe: the name of the kind of training (:mod:`shardgnn.train.recipes`), recorded in
            the results.
    """

    def __init__(self, config: TrainConfig, steps: Steps, recipe: str | None = None):
        self.config, self.steps, self.recipe = config, steps, recipe
        self.is_main = steps.rank == 0
        self.checkpointer = loop_checkpointer(config, steps)

    def run(self) -> dict[str, Any]:
        """Train, then evaluate the best epoch's weights; return the results (on every rank).
        Rank 0 prints a line per epoch and, with ``config.results``, rewrites that file after
        every epoch (``status: running``) and at the end (``status: complete``).

        Raises:
            Preempted: a stop signal (SIGTERM, SIGUSR1) arrived; every rank stopped after the
                same step and, with ``config.checkpoint.dir``, saved a checkpoint there first.
        """
        with StopSignals().installed() as self.stop_signals:
            return self._run()

    def _run(self) -> dict[str, Any]:
        cfg, steps = self.config, self.steps
        dataset = steps.dataset_info()
        loop = resume_loop(
            self.checkpointer, cfg, steps, dataset, EpochRecord, announce=self.is_main
        )
        run_start = time.perf_counter()
        scalars = ScalarLog(cfg.tensorboard if self.is_main else None, steps.metric)
        try:
            return self._epochs(loop, dataset, run_start, scalars)
        finally:
            scalars.close()

    def _epochs(
        self, loop: LoopState, dataset: dict[str, Any], run_start: float, scalars: ScalarLog
    ) -> dict[str, Any]:
        cfg, steps = self.config, self.steps
        for epoch in range(loop.next_epoch, cfg.optim.epochs):
            resumed = EpochSums(**loop.partial) if loop.partial else None
            run = EpochRun(
                epoch, cfg.progress and self.is_main, resumed, stop_requested=self._stop_agreed
            )
            record = self._epoch(run, loop)
            if record is None:  # stopped part-way by a stop signal
                assert run.stopped is not None
                self._preempt(loop, dataset, run.stopped, run.total_batches)
            if not math.isfinite(record.loss):  # the same on every rank: all of them stop here
                self._diverged(loop, dataset, record)
            loop.partial = None
            loop.history.append(record)
            if loop.best_state is None or _improves(record.val_acc, loop.best_val):
                loop.best_val, loop.best_epoch = record.val_acc, record.epoch
                loop.best_state = snapshot_state(steps.model)
            loop.next_epoch = epoch + 1
            stop = bool(cfg.optim.patience and record.epoch - loop.best_epoch >= cfg.optim.patience)
            saved = self.checkpointer is not None and (
                stop or self.checkpointer.due(loop.next_epoch, cfg.optim.epochs)
            )
            if saved:
                self._save(loop, dataset)
            if self.is_main:
                self._print_epoch(record, loop)
                if cfg.results:
                    save_json(cfg.results, self._results(loop, dataset, final=None))
                scalars.epoch(record)
            if stop:
                if self.is_main:
                    print(
                        f"no better validation accuracy for {cfg.optim.patience} epochs: stopping "
                        "early",
                        flush=True,
                    )
                break
            if loop.next_epoch < cfg.optim.epochs and self._stop_agreed():
                self._preempt(loop, dataset, None, None, saved=saved)
        steps.finish()
        assert loop.best_state is not None
        digest = weights_sha256(steps)
        steps.model.load_state_dict(loop.best_state)
        metrics = steps.evaluate_splits(("val", "test"))  # one pass where the steps can
        final = {
            "val_acc": metrics["val"],
            "test_acc": metrics["test"],
            "total_time_s": time.perf_counter() - run_start,
            "weights_sha256": digest,
        }
        results = self._results(loop, dataset, final)
        if self.is_main and cfg.results:
            save_json(cfg.results, results)
        scalars.final(loop.best_epoch, final["val_acc"], final["test_acc"])
        return results

    def _print_epoch(self, record: EpochRecord, loop: LoopState) -> None:
        cfg = self.config
        line = epoch_line(
            record,
            cfg.optim.epochs,
            loop.best_val,
            loop.best_epoch,
            cfg.cache.enabled,
            metric=self.steps.metric,
        )
        print(line, flush=True)

    def _diverged(self, loop: LoopState, dataset: dict[str, Any], record: EpochRecord) -> None:
        """Stop on a NaN or infinite training loss (its epoch line printed, the results marked
        ``diverged``, nothing of the epoch saved): raise :class:`DivergedError`."""
        cfg = self.config
        if self.is_main:
            self._print_epoch(record, loop)
            if cfg.results:
                results = self._results(loop, dataset, final=None)
                results["status"] = "diverged"
                results["epochs"].append(dataclasses.asdict(record))
                save_json(cfg.results, results)
        saved = self.checkpointer.complete() if self.checkpointer is not None else []
        kept = f"; the last checkpoint, {saved[-1]}, is kept" if saved else ""
        raise DivergedError(
            f"epoch {record.epoch}: the training loss is {record.loss} (the weights are no longer "
            f"finite numbers): stopped, nothing of this epoch saved{kept}\n  fix: lower --lr "
            f"(now {cfg.optim.lr:g}), or look for NaN or infinite values in the inputs (features, "
            "targets, edge weights; `shardgnn convert` refuses them in the files it reads)"
        )

    def _save(self, loop: LoopState, dataset: dict[str, Any]) -> Path:
        assert self.checkpointer is not None
        return save_checkpoint(self.checkpointer, loop, self.steps, self.config, dataset)

    def _stop_agreed(self) -> bool:
        """Whether any rank received a stop signal (collective: every rank asks at the same step,
        so all of them stop after the same one)."""
        signum = self.stop_signals.received
        asked, signal_sum = self.steps.sum(
            [float(signum is not None), float(signum or 0)], stage="control"
        )
        if asked:
            # the signal one rank received (ranks that received one received the same, typically)
            self._stop_signal = signal.Signals(round(signal_sum / asked)).name
        return asked > 0

    def _preempt(
        self,
        loop: LoopState,
        dataset: dict[str, Any],
        partial: EpochSums | None,
        total_batches: int | None,
        *,
        saved: bool = False,
    ) -> None:
        """Save the state after the agreed step (unless just saved) and raise :class:`Preempted`."""
        cfg = self.config
        self.stop_signals.acted_on = True
        loop.partial = dataclasses.asdict(partial) if partial is not None else None
        path = None
        if self.checkpointer is not None:
            path = self.checkpointer.complete()[-1] if saved else self._save(loop, dataset)
        if partial is not None:
            where = f"in epoch {loop.next_epoch + 1} after batch {partial.batches}" + (
                f" of {total_batches}" if total_batches else ""
            )
        else:
            where = f"after epoch {loop.next_epoch}"
        message = f"stopped by {self._stop_signal} {where}; " + (
            f"checkpoint saved in {path}; run the same command with --resume to continue"
            if path is not None
            else "nothing was saved (no --checkpoint-dir)"
        )
        if self.is_main and cfg.results:
            results = self._results(loop, dataset, final=None)
            results["status"] = "preempted"
            save_json(cfg.results, results)
        raise Preempted(message, self._stop_signal, None if path is None else str(path))

    def _epoch(self, run: EpochRun, loop: LoopState) -> EpochRecord | None:
        steps, world = self.steps, self.steps.world_size
        start = time.perf_counter()
        trained = steps.train_epoch(run)
        if trained is None:
            return None
        loss, train_acc = trained
        train_time = time.perf_counter() - start
        with steps.timer("eval"):
            val_acc = steps.evaluate("val")
        stages = steps.timer.reset()
        names = sorted(stages)  # every rank has the same stage names
        totals = steps.sum([stages[n] for n in names] + [train_time])
        stages = {n: v / world for n, v in zip(names, totals)}
        epoch_comm = add_epoch_comm(steps.comms, loop.comm_total)
        return EpochRecord(
            run.epoch + 1,
            loss,
            train_acc,
            val_acc,
            totals[-1] / world,
            stages,
            steps.epoch_metrics(epoch_comm),
        )

    def _results(
        self, loop: LoopState, dataset: dict[str, Any], final: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The results JSON (:func:`~shardgnn.train.loop_results.loop_results`; collective when
        ``final`` is given)."""
        return loop_results(self.config, self.recipe, self.steps, loop, dataset, final)
