"""Sampled edges per second: the numba NeighborSampler vs the pure-torch baseline.

Generates the synthetic graph once, then for every (threads, replace) configuration samples the
same seed batches (consecutive chunks of one fixed random permutation of the node ids) with both
samplers and reports throughput. Run ``python benchmarks/bench_sampler.py --help``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import numba
import numpy as np
import torch

from machine import machine_info  # noqa: E402  (benchmarks/machine.py)
from shardgnn.atomic import atomic_open, save_json
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig
from shardgnn.sampling.reference import TorchNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.train.progress import format_table


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=1_000_000, help="synthetic graph nodes")
    p.add_argument("--degree", type=float, default=20.0, help="synthetic graph average degree")
    p.add_argument(
        "--fanouts", default="10,10,10", help="comma-separated fanouts, output layer first"
    )
    p.add_argument("--batch-size", type=int, default=1024, help="seed nodes per batch")
    p.add_argument("--batches", type=int, default=30, help="timed batches per sampler and config")
    p.add_argument(
        "--warmup", type=int, default=3, help="untimed batches first (JIT compile, caches)"
    )
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts to measure")
    p.add_argument("--replace", default="false,true", help="comma-separated: false, true")
    p.add_argument("--graph-seed", type=int, default=0, help="synthetic graph seed")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch order and sampling")
    p.add_argument("--out", default="benchmarks/out/sampler.json", help="results JSON")
    p.add_argument("--md", default="benchmarks/out/sampler.md", help="results Markdown table")
    return p.parse_args(argv)


def run_sampler(sampler, batches: list[torch.Tensor], warmup: int, base_seed: int) -> dict:
    """Sample ``batches[:warmup]`` untimed, then time ``batches[warmup:]`` one call each."""
    for i in range(warmup):
        sampler.sample(batches[i], mix_seed(base_seed, i))
    times, edges, inputs = [], [], []
    for i in range(warmup, len(batches)):
        start = time.perf_counter()
        sample = sampler.sample(batches[i], mix_seed(base_seed, i))
        times.append(time.perf_counter() - start)
        edges.append(sample.num_sampled_edges)
        inputs.append(int(sample.input_nodes.shape[0]))
    total = float(np.sum(times))
    return {
        "seconds": total,
        "edges_per_s": float(np.sum(edges)) / total if total > 0 else float("nan"),
        "mean_batch_ms": 1e3 * total / len(times),
        "median_batch_ms": 1e3 * float(np.median(times)),
        "mean_edges_per_batch": float(np.mean(edges)),
        "mean_input_nodes_per_batch": float(np.mean(inputs)),
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    thread_counts = [int(t) for t in args.threads.split(",")]
    replaces = [r.strip().lower() in ("1", "true", "yes") for r in args.replace.split(",")]
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])

    t0 = time.perf_counter()
    graph = generate(
        SyntheticConfig(nodes=args.nodes, degree=args.degree, features=8, seed=args.graph_seed)
    )
    gen_s = time.perf_counter() - t0
    print(
        f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, generated in {gen_s:.1f} s",
        flush=True,
    )

    n_batches = args.warmup + args.batches
    perm = torch.from_numpy(np.random.default_rng(args.seed).permutation(graph.num_nodes))
    if n_batches * args.batch_size > graph.num_nodes:
        raise SystemExit(
            f"{n_batches} batches of {args.batch_size} need more than {graph.num_nodes} nodes"
        )
    batches = [
        perm[i * args.batch_size : (i + 1) * args.batch_size].clone() for i in range(n_batches)
    ]

    torch_threads_before = torch.get_num_threads()
    results, rows = [], []
    for threads in thread_counts:
        if threads > numba.config.NUMBA_NUM_THREADS:
            print(
                f"skipping threads={threads}: numba allows at most "
                f"{numba.config.NUMBA_NUM_THREADS}",
                flush=True,
            )
            continue
        for replace in replaces:
            config = SamplerConfig(fanouts=fanouts, replace=replace, num_threads=threads)
            ours = run_sampler(
                NeighborSampler(graph.indptr, graph.indices, config),
                batches,
                args.warmup,
                args.seed,
            )
            torch.set_num_threads(threads)
            try:
                base = run_sampler(
                    TorchNeighborSampler(graph.indptr, graph.indices, config),
                    batches,
                    args.warmup,
                    args.seed,
                )
            finally:
                torch.set_num_threads(torch_threads_before)
            speedup = ours["edges_per_s"] / base["edges_per_s"]
            results.append(
                {
                    "threads": threads,
                    "replace": replace,
                    "ours": ours,
                    "baseline": base,
                    "speedup": speedup,
                }
            )
            rows.append(
                [
                    threads,
                    replace,
                    f"{ours['edges_per_s'] / 1e6:.2f}",
                    f"{base['edges_per_s'] / 1e6:.2f}",
                    f"{speedup:.1f}x",
                    f"{ours['mean_batch_ms']:.1f}",
                    f"{base['mean_batch_ms']:.1f}",
                    round(ours["mean_edges_per_batch"]),
                    round(ours["mean_input_nodes_per_batch"]),
                ]
            )
            print(
                f"threads={threads} replace={replace}: ours {ours['edges_per_s'] / 1e6:.2f} M "
                f"edges/s, torch {base['edges_per_s'] / 1e6:.2f} M edges/s ({speedup:.1f}x)",
                flush=True,
            )

    headers = [
        "threads",
        "replace",
        "ours (M edges/s)",
        "torch (M edges/s)",
        "speedup",
        "ours ms/batch",
        "torch ms/batch",
        "edges/batch",
        "input nodes/batch",
    ]
    table = format_table(headers, rows)
    title = (
        f"Neighbour sampling throughput: synthetic {graph.num_nodes:,} nodes / "
        f"{graph.num_edges:,} edges, fanouts {','.join(map(str, fanouts))}, batch "
        f"{args.batch_size}, {args.batches} timed batches (after {args.warmup} warm-up)"
    )
    machine = machine_info()
    try:
        machine["numba_threading_layer_used"] = numba.threading_layer()
    except ValueError:  # no parallel kernel has run
        pass
    report = {
        "benchmark": "sampler",
        "command": command,
        "argv": sys.argv,
        "args": vars(args),
        "machine": machine,
        "graph": {
            "name": graph.name,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "generate_s": gen_s,
        },
        "results": results,
    }
    save_json(args.out, report)
    with atomic_open(args.md, "w") as fh:
        fh.write(
            f"{title}\n\n{table}\n\nEdges = sampled edges over all layers "
            "(`SampledBlocks.num_sampled_edges`); edges/batch and input nodes/batch are the "
            f"numba sampler's means.\n\nCommand: `{command}`\n"
        )
    print(f"\n{title}\n\n{table}\n\nwrote {args.out} and {args.md}")
    return report


if __name__ == "__main__":
    main()
