"""The training loop's results JSON (rewritten after every epoch and at the end of a run) and the
communication counters it adds up epoch by epoch.

``steps`` below is the loop's :class:`~shardgnn.train.loop.Steps`, typed loosely: this module sits
below the loop, which imports it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from shardgnn.distributed.comm import CommStats, Communicator
from shardgnn.train.config import TrainConfig
from shardgnn.train.loop_state import LoopState


def add_epoch_comm(comms: Iterable[Communicator], comm_total: dict[str, list]) -> dict[str, list]:
    """Reset the counters of every communicator of ``comms``, adding them to the run's
    ``comm_total``; return the epoch's, per stage (``[bytes_sent, bytes_recv, seconds, calls,
    host_bytes]``, this rank's)."""
    epoch_comm: dict[str, list] = {}
    for comm in comms:
        for name, st in comm.reset().items():
            for total in (
                comm_total.setdefault(name, list(dataclasses.astuple(CommStats()))),
                epoch_comm.setdefault(name, list(dataclasses.astuple(CommStats()))),
            ):
                for i, value in enumerate(dataclasses.astuple(st)):
                    total[i] += value
    return epoch_comm


def loop_results(
    config: TrainConfig,
    recipe: str | None,
    steps: Any,
    loop: LoopState,
    dataset: dict[str, Any],
    final: dict[str, Any] | None,
) -> dict[str, Any]:
    """The results JSON: after every epoch (``final`` None: rank 0 only, no collective) and at
    the end (collective: traffic and extras are gathered from every rank)."""
    history = loop.history
    results: dict[str, Any] = {
        "status": "complete" if final is not None else "running",
        "config": config.to_dict(),
        "mode": config.mode,
        "task": config.task,
        "recipe": recipe,
        "metric": steps.metric,
        "dataset": dataset,
        "workers": steps.world_size,
        "epochs": [dataclasses.asdict(r) for r in history],
        "num_epochs_run": len(history),
        "best_epoch": loop.best_epoch,
        "best_val_acc": loop.best_val if history else None,
    }
    if final is None:
        return results
    results.update(final)
    results["mean_epoch_time_s"] = (
        float(np.mean([r.time_s for r in history[1:]] or [history[0].time_s])) if history else None
    )
    if steps.main_comm is not None:
        totals = {name: CommStats(*v) for name, v in loop.comm_total.items()}
        per_rank = steps.main_comm.gather_stats(totals)
        # Bytes summed over ranks and epochs, plus the most any one rank sent / received.
        results["comm"] = {
            name: {
                "bytes_sent": sum(st.bytes_sent for st in ranks),
                "bytes_recv": sum(st.bytes_recv for st in ranks),
                "time_s": sum(st.time_s for st in ranks),
                "max_rank_bytes_sent": max(st.bytes_sent for st in ranks),
                "max_rank_bytes_recv": max(st.bytes_recv for st in ranks),
                "host_bytes": sum(st.host_bytes for st in ranks),
            }
            for name, ranks in per_rank.items()
        }
    results["peak_memory_mb"] = peak_memory_mb(steps)
    results.update(steps.results_extra(history))
    return results


def peak_memory_mb(steps: Any) -> dict[str, list[float]]:
    """Every worker's peak memory so far in MB, in rank order (collective): ``rss``, its
    process's largest resident set (what a machine must have for it; the operating system's
    count, torch's and Python's own memory included), and on a GPU ``gpu``, the most torch
    allocated on its device."""
    world, rank = steps.world_size, steps.rank
    device = torch.device(getattr(steps, "device", None) or "cpu")
    values = [0.0] * (2 * world)
    values[rank] = max_rss_bytes() / 1e6
    if device.type == "cuda":
        values[world + rank] = torch.cuda.max_memory_allocated(device) / 1e6
    summed = steps.sum(values, stage="metrics") if world > 1 else values
    out = {"rss": summed[:world]}
    if device.type == "cuda":
        out["gpu"] = summed[world:]
    return out


def max_rss_bytes() -> int:
    """This process's largest resident set so far, in bytes (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes; Linux: KiB
