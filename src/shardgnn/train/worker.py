"""One worker of a distributed training job: join the job, train, report on rank 0.

``shardgnn train --workers N`` starts N processes running :func:`train_worker` with the resolved
config as JSON (workers never parse a command line); under ``torchrun``, ``python -m
shardgnn.run train ...`` builds the same config from its arguments and calls :func:`run_worker`.
"""

from __future__ import annotations

import json
from typing import Any

from shardgnn.distributed.context import DistContext, init_distributed, shutdown
from shardgnn.train.config import TrainConfig
from shardgnn.train.report import print_summary


def train_with_context(config: TrainConfig, ctx: DistContext) -> dict[str, Any]:
    """Train this rank's share of ``config`` in a job that ``ctx`` has joined already; return the
    results (the same on every rank)."""
    from shardgnn.partition.format import partition_kind, read_partition_meta
    from shardgnn.train.recipes import select

    assert config.run.partitions is not None, "workers train a partition directory"
    kind = partition_kind(read_partition_meta(config.run.partitions))
    return select(config, kind).train(config, ctx=ctx)


def run_worker(config: TrainConfig) -> dict[str, Any] | None:
    """The body of one worker process (the environment names its rank, as torchrun sets it).

    Returns the results on rank 0 (also written to ``config.results`` and summarised on stdout),
    ``None`` on the other ranks.
    """
    ctx = init_distributed(
        device=config.device, backend=config.run.backend, timeout_s=config.run.timeout
    )
    try:
        results = train_with_context(config, ctx)
        if not ctx.is_main:
            return None
        print_summary(results)
        if config.results:
            print(f"results written to {config.results}")
        return results
    finally:
        shutdown()


def train_worker(config_json: str) -> None:
    """Entry point of a worker started by :func:`shardgnn.distributed.launch.launch_local`: the
    config arrives resolved, as JSON."""
    run_worker(TrainConfig.from_dict(json.loads(config_json)))
