"""What the training loop carries from epoch to epoch, and its capture into (and restore from)
the state a checkpoint holds (:class:`~shardgnn.train.checkpoint.Checkpointer` writes and reads
the files): the loop's checkpointer, its saves and its resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from shardgnn.distributed.comm import CommStats
from shardgnn.errors import ConfigError
from shardgnn.train.checkpoint import Checkpointer
from shardgnn.train.config import TrainConfig


class LoopState:
    """What the epoch loop carries from epoch to epoch (and a checkpoint restores)."""

    def __init__(self) -> None:
        self.next_epoch = 0
        self.history: list[Any] = []
        self.best_val, self.best_epoch = -1.0, 0  # best_epoch: 1-based, 0 before any epoch
        self.best_state: dict[str, torch.Tensor] | None = None
        self.comm_total: dict[str, list[float]] = {}
        # this rank's sums of the batches of epoch next_epoch done before a mid-epoch stop
        self.partial: dict[str, Any] | None = None


def capture_state(
    loop: LoopState,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generators: list[torch.Generator],
    extra: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """This rank's full training state after ``loop.next_epoch`` epochs (tensors and plain data);
    ``extra``: the steps' own state (:meth:`Steps.extra_state`)."""
    return {
        "epoch": loop.next_epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "dropout_step": int(getattr(model, "dropout_step", 0)),
        "torch_rng": torch.get_rng_state(),
        "generators": [g.get_state() for g in generators],
        "history": [dataclasses.asdict(r) for r in loop.history],
        "best_val": loop.best_val,
        "best_epoch": loop.best_epoch,
        "best_state": loop.best_state or {},
        "comm_total": loop.comm_total,
        "partial": loop.partial or {},
        "extra": extra or {},
    }


def restore_state(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    generators: list[torch.Generator],
    record_type,
) -> LoopState:
    """Load ``state`` into the model, optimiser and generators; return the loop state.

    ``state`` is read onto the host (:meth:`Checkpointer.load_latest`), wherever it was written:
    the model's ``load_state_dict`` copies into its parameters on their device, the optimiser's
    casts its moments to their parameter's device, and the best epoch's weights are copied in
    the same way at the end, so a checkpoint of a GPU run resumes on the CPU and the other way
    round."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if hasattr(model, "dropout_step"):
        model.dropout_step = int(state["dropout_step"])
    torch.set_rng_state(state["torch_rng"])
    if state["generators"] is None:  # re-sharded for another worker count: fresh generators
        state = {**state, "generators": [g.get_state() for g in generators]}
    if len(state["generators"]) != len(generators):
        raise ConfigError("the checkpoint was written with another --bits/--fetch-bits setting")
    for generator, saved in zip(generators, state["generators"]):
        generator.set_state(saved)
    loop = LoopState()
    loop.next_epoch = int(state["epoch"])
    loop.history = [record_type(**r) for r in state["history"]]
    loop.best_val, loop.best_epoch = float(state["best_val"]), int(state["best_epoch"])
    loop.best_state = dict(state["best_state"]) or None
    # Checkpoints from before a counter existed (e.g. host_bytes) carry fewer per stage: the
    # missing trailing counters start at their defaults.
    zero = dataclasses.astuple(CommStats())
    loop.comm_total = {k: [*v, *zero[len(v) :]] for k, v in state["comm_total"].items()}
    loop.partial = dict(state.get("partial") or {}) or None
    return loop


# The loop's checkpoints. ``steps`` is the loop's :class:`~shardgnn.train.loop.Steps`, typed
# loosely: this module sits below the loop, which imports it.
def loop_checkpointer(config: TrainConfig, steps: Any) -> Checkpointer | None:
    """The checkpointer of ``config.checkpoint`` for the rank ``steps`` trains, or ``None``
    without a checkpoint directory."""
    ckpt = config.checkpoint
    return (
        None
        if not ckpt.dir
        else Checkpointer(
            ckpt.dir,
            rank=steps.rank,
            world_size=steps.world_size,
            every=ckpt.every,
            keep=ckpt.keep,
            sum_over_ranks=lambda values: steps.sum(values, stage="checkpoint"),
        )
    )


def save_checkpoint(
    checkpointer: Checkpointer,
    loop: LoopState,
    steps: Any,
    config: TrainConfig,
    dataset: dict[str, Any],
) -> Path:
    """Save this rank's state after ``loop.next_epoch`` epochs (and the batches of
    ``loop.partial`` when it stopped mid-epoch); return the checkpoint's path."""
    return checkpointer.save(
        loop.next_epoch,
        capture_state(loop, steps.model, steps.optimizer, steps.generators(), steps.extra_state()),
        config.to_dict(),
        dataset,
        batches_done=loop.partial["batches"] if loop.partial else 0,
    )


def resume_loop(
    checkpointer: Checkpointer | None,
    config: TrainConfig,
    steps: Any,
    dataset: dict[str, Any],
    record_type,
    *,
    announce: bool,
) -> LoopState:
    """The loop state to start from: the latest checkpoint's, loaded into ``steps``, with
    ``--resume`` and a checkpoint to resume from (``announce``: print where it resumed), else a
    fresh one."""
    if checkpointer is None or not config.checkpoint.resume:
        return LoopState()
    rows = steps.sharded_rows()
    state = checkpointer.load_latest(config.to_dict(), dataset, rows=rows, fixed=steps.fixed_shards)
    if state is None:
        return LoopState()
    loop = restore_state(state, steps.model, steps.optimizer, steps.generators(), record_type)
    if state.get("resharded_from"):
        steps.load_resharded_extra_state([dict(extra) for extra in state["extras"]])
    else:
        steps.load_extra_state(dict(state.get("extra") or {}))
    if announce:
        where = (
            f"epoch {loop.next_epoch + 1} from batch {loop.partial['batches'] + 1}"
            if loop.partial
            else f"{loop.next_epoch} of {config.optim.epochs} epochs done"
        )
        if state.get("resharded_from"):
            written = state["resharded_from"]
            where += (
                f"; written by {written} worker{'s' * (written > 1)}, re-sharded for "
                f"{steps.world_size}"
            )
        print(f"resumed from {checkpointer.complete()[-1]} ({where})", flush=True)
    return loop
