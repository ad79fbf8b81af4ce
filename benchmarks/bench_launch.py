"""Worker start-up: ``launch_local`` with workers forked from the forkserver against spawned ones,
the two in turn in one process.

    python benchmarks/bench_launch.py --workers 1,2,4 --repeats 5

Each launch runs a trivial entrypoint (the launch's own cost: start, rendezvous, result, exit), one
that imports the modules a training worker imports as it reads its partition and builds its model
(the forkserver imports torch, ``torch._dynamo``, numba and scipy once, not shardgnn), and one
that also joins the process group and wraps a model in ``DistributedDataParallel``, as a training
worker does before its first step (DDP's constructor imports ``torch._dynamo``). Reported: the
median seconds of ``--repeats`` launches per start method and worker count, and the first forked
launch apart (it starts the forkserver, which imports those). The suite's share of it:
BENCHMARKS.md, "Worker start-up".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from machine import machine_info  # noqa: E402
from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.launch import launch_local
from shardgnn.train.progress import format_table


def returns_rank() -> int:
    """The trivial entrypoint."""
    import os

    return int(os.environ["RANK"])


def imports_training() -> int:
    """An entrypoint that imports what a training worker imports."""
    import os

    import shardgnn.nn.models  # noqa: F401
    import shardgnn.partition.format  # noqa: F401
    import shardgnn.train.worker  # noqa: F401

    return int(os.environ["RANK"])


def wraps_a_model() -> int:
    """An entrypoint that starts as a training worker does: imports, process group, DDP."""
    import torch

    from shardgnn.distributed.context import init_distributed, shutdown

    imports_training()
    ctx = init_distributed(device="cpu")
    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    shutdown()
    return ctx.rank


ENTRYPOINTS = {
    "trivial": returns_rank,
    "imports training": imports_training,
    "joins and wraps a model": wraps_a_model,
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/out/launch.json")
    parser.add_argument("--md", default="benchmarks/out/launch.md")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    start = time.perf_counter()
    launch_local(returns_rank, (), 1, start_method="forkserver")
    first_forked_s = time.perf_counter() - start
    print(f"first forked launch (starts the forkserver): {first_forked_s:.2f} s", flush=True)
    seconds: dict[tuple[str, int, str], list[float]] = {}
    for _ in range(args.repeats):
        for name, entrypoint in ENTRYPOINTS.items():
            for nprocs in counts:
                for method in ("spawn", "forkserver"):  # in turn: the machine's drift hits both
                    start = time.perf_counter()
                    result = launch_local(entrypoint, (), nprocs, start_method=method)
                    seconds.setdefault((name, nprocs, method), []).append(
                        time.perf_counter() - start
                    )
                    assert result == {rank: rank for rank in range(nprocs)}
    rows, records = [], []
    for name in ENTRYPOINTS:
        for nprocs in counts:
            spawned = statistics.median(seconds[(name, nprocs, "spawn")])
            forked = statistics.median(seconds[(name, nprocs, "forkserver")])
            rows.append((name, nprocs, spawned, forked, spawned / forked))
            records.append(
                {
                    "entrypoint": name,
                    "workers": nprocs,
                    "spawn_s": seconds[(name, nprocs, "spawn")],
                    "forkserver_s": seconds[(name, nprocs, "forkserver")],
                    "spawn_median_s": spawned,
                    "forkserver_median_s": forked,
                }
            )
            print(rows[-1], flush=True)
    table = format_table(
        ["entrypoint", "workers", "spawned (s)", "forked (s)", "spawned / forked"], rows
    )
    print(table)
    save_json(
        args.out,
        {
            "command": " ".join(["python"] + sys.argv),
            "machine": machine_info(),
            "first_forked_launch_s": first_forked_s,
            "runs": records,
        },
    )
    with atomic_open(args.md, "w") as fh:
        fh.write(
            table + f"\n\nfirst forked launch (starts the forkserver): {first_forked_s:.2f} s\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
