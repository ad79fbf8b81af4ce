"""What a presample cache costs and saves in a fetch (BENCHMARKS 32w): two workers on a 2-part
METIS partition of the graph sample batches of their own training nodes (the project's
distributed sampler, fanouts 10,10) and fetch each batch's input rows twice, through the
distributed store alone and through the calibration's presample cache in front of it
(``fullgraph.rates.presample_cache``: the remote rows the batches read most, as many as
``--cache-size``'s default holds); per batch size, rank 0's median seconds of either fetch,
of the cache's own work in it (``CachedFeatureStore.own_s``), its remote reads and the cache's
hit rate. ``--sparse``: mostly-zero rows held as CSR and gathered as sparse batches, as
training holds them (``--graph coauthor-cs``, say), the cache holding their non-zeros.

    python benchmarks/cache_fetch_work.py --out out/cache_fetch_work.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from shardgnn.atomic import save_json
from shardgnn.train.progress import format_table


def _worker(path: str, sizes: list[int], rounds: int, sparse: bool) -> list[dict]:
    import torch

    from shardgnn.distributed.comm import Communicator
    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.fullgraph.rates import presample_cache
    from shardgnn.partition.format import read_partitions
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.sampling.types import SeedInput
    from shardgnn.store.dist_graph import DistGraphStore

    torch.set_num_threads(1)
    ctx = init_distributed(device="cpu", backend="gloo", timeout_s=120)
    try:
        comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        train = read_partitions(path).global_split("train")
        graph = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm, verify=False)
        sampler = DistNeighborSampler(graph, SamplerConfig(fanouts=(10, 10)), comm, "bench")
        start, end = graph.book.part_range(ctx.rank)
        own = train[(train >= start) & (train < end)]
        rng = np.random.default_rng(ctx.rank)
        batches = [
            [
                sampler.sample(SeedInput(np.sort(rng.choice(own, size, False))), i).blocks[0]
                for size in sizes
            ]
            for i in range(rounds + 1)
        ]
        inputs = [block.src_nodes_S for blocks in batches for block in blocks]
        store, cached = presample_cache(graph, comm, inputs, sparse)
        out = []
        for k, size in enumerate(sizes):
            plain, through, own_s, reads = [], [], [], []
            requested, missed = cached.core.requested, cached.core.missed
            for blocks in batches:
                ids = blocks[k].src_nodes_S
                ctx.barrier("bench")
                begin = time.perf_counter()
                store.gather(ids)
                plain.append(time.perf_counter() - begin)
                ctx.barrier("bench")
                before, begin = cached.own_s, time.perf_counter()
                cached.gather(ids)
                through.append(time.perf_counter() - begin)
                own_s.append(cached.own_s - before)
                reads.append(int((~store.local_mask(ids.numpy())).sum()))
            hits = 1 - (cached.core.missed - missed) / (cached.core.requested - requested)
            out.append(
                {
                    "batch_size": size,
                    "remote_reads": statistics.median(reads[1:]),
                    "hit_rate": hits,
                    "plain_ms": 1e3 * statistics.median(plain[1:]),
                    "cached_ms": 1e3 * statistics.median(through[1:]),
                    "own_ms": 1e3 * statistics.median(own_s[1:]),
                    "sparse_batches": store.sparse_batches,
                    "cache_layout": cached.layout,
                }
            )
        return out
    finally:
        shutdown()


def main(argv: list[str] | None = None) -> int:
    import tempfile
    from pathlib import Path

    from shardgnn.distributed.launch import launch_local
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=20000,train=0.5")
    parser.add_argument("--sizes", default="128,256,512")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--sparse", action="store_true", help="mostly-zero rows as CSR")
    parser.add_argument("--out", default=None, help="every launch's medians, JSON")
    args = parser.parse_args(argv)
    graph = load_dataset(args.graph)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    with tempfile.TemporaryDirectory(prefix="shardgnn-bench-") as tmp:
        path = str(Path(tmp) / "parts")
        write_partitions(graph, result.assignment, path, method=result.method)
        launches = [
            launch_local(_worker, (path, sizes, args.rounds, args.sparse), 2, timeout_s=600)[0]
            for _ in range(args.launches)
        ]
    rows = []
    for k, size in enumerate(sizes):
        runs = [launch[k] for launch in launches]

        def median(key: str, runs=runs) -> float:
            return statistics.median(r[key] for r in runs)

        rows.append(
            [
                str(size), f"{median('remote_reads'):.0f}", f"{100 * median('hit_rate'):.1f}%",
                f"{median('plain_ms'):.2f}", f"{median('cached_ms'):.2f}",
                f"{median('own_ms'):.2f}",
                f"{median('cached_ms') - median('plain_ms'):+.2f}",
            ]
        )  # fmt: skip
    head = ["seeds", "remote reads", "hit", "fetch ms", "cached ms", "own ms", "cached - fetch"]
    first = launches[0][0]
    batches = "sparse batches" if first["sparse_batches"] else "dense batches"
    layout = f"{batches}, the cache's rows {first['cache_layout']}, "
    print(f"{args.graph}, {layout}2 workers, median of {args.launches} launches' medians of rank 0")
    print(format_table(head, rows))
    if args.out:
        save_json(args.out, {"graph": args.graph, "sizes": sizes, "launches": launches})
    return 0


if __name__ == "__main__":
    sys.exit(main())
