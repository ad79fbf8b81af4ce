"""The launch-to-launch spread of `shardgnn plan --calibrate`'s distributed-sampling probe
(``fullgraph.rates._probe_dist_sampling``, BENCHMARKS 32u): ``--launches`` launches of its two
workers, ``--rounds`` rounds each, on the workload 32o's table calibrates (synthetic 20,000 nodes,
half of them training nodes, 2-part METIS, fanouts 10,10, hidden 256, batches of 128 and 256
seeds). Per way of sampling (through the collectives; reading the peer's mapped part) and mode of
the historical tables (push; pull), and per batch size: rank 0's median seconds, and how far the
single launches' medians and those of ``--pool`` consecutive launches' rounds pooled (as
``PROBE_LAUNCHES`` does) fall from the median of all.

    python benchmarks/sampling_probe_spread.py --launches 18 --rounds 9 --out out/spread_9.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from shardgnn.atomic import save_json
from shardgnn.distributed.launch import launch_local
from shardgnn.fullgraph.rates import _pooled_medians, _probe_dist_sampling
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph

GROUPS = ("sampling, collectives", "sampling, mapped", "tables, push", "tables, pull")


def spread(values: list[float], centre: float) -> str:
    return f"{100 * (min(values) / centre - 1):+.0f} ... {100 * (max(values) / centre - 1):+.0f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=20000,train=0.5")
    parser.add_argument("--launches", type=int, default=18)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pool", type=int, default=3)
    parser.add_argument("--out", default=None, help="the raw rounds, JSON")
    opts = parser.parse_args(argv)
    graph = load_dataset(opts.graph)
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    launches = []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "parts")
        write_partitions(graph, result.assignment, path, method=result.method)
        for i in range(opts.launches):
            probed = launch_local(
                _probe_dist_sampling, (path, (10, 10), [128, 256], opts.rounds, 256), nprocs=2
            )
            # rank 0's rounds: ways of sampling, then the tables' modes
            launches.append([*probed[0][0], *probed[0][1]])
            print(f"launch {i + 1} of {opts.launches}", file=sys.stderr, flush=True)
    if opts.out:  # to the microsecond: the rounds' spread is milliseconds
        rounded = [
            [[[(int(u), round(t, 6)) for u, t in rounds] for rounds in group] for group in launch]
            for launch in launches
        ]
        save_json(opts.out, {"settings": vars(opts), "launches": rounded})
    single = [_pooled_medians([launch]) for launch in launches]
    pooled = [
        _pooled_medians(launches[i : i + opts.pool])
        for i in range(0, len(launches) - opts.pool + 1, opts.pool)
    ]
    everything = _pooled_medians(launches)
    print(
        f"{opts.graph}: {opts.launches} launches of {opts.rounds} rounds (the tables: "
        f"{2 * opts.rounds}); rank 0's median ms per batch and the spread of the medians"
    )
    for g, name in enumerate(GROUPS):
        for k, seeds in enumerate((128, 256)):
            centre = everything[g][k][1]
            print(
                f"  {name:22s} {seeds} seeds: {1e3 * centre:6.2f} ms; one launch "
                f"{spread([s[g][k][1] for s in single], centre)}; {opts.pool} pooled "
                f"{spread([p[g][k][1] for p in pooled], centre)} ({len(pooled)} pools)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
