"""What the training loop carries from epoch to epoch, and its capture into (and restore from)
the state a checkpoint holds (:class:`~shardgnn.train.checkpoint.Checkpointer` writes and reads
the files)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from shardgnn.distributed.comm import CommStats
from shardgnn.errors import ConfigError


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
