"""Matrix-based bulk sampling against one batch at a time (issue 32): sampled edges per second of
the numba kernels (one batch at a time, every core), the tensor sampler one batch at a time, and
the tensor sampler drawing k batches per call (`DeviceNeighborSampler.sample_many`: the k
frontiers stacked into one draw per hop; the draws are the same), relabelled in one sort for all
k batches (the GPU default) or batch by batch (the CPU default). On a GPU the hops are drawn by
the Triton kernel. Every variant samples the same
batches with the same seeds; rounds alternate the variants so drift hits all alike; the median
round is reported.

    python benchmarks/bench_bulk.py --out benchmarks/out/bulk_sampling.json
    python benchmarks/bench_bulk.py --device cuda --out benchmarks/out/bulk_sampling_gpu.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from shardgnn.atomic import save_json
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--degree", type=float, default=20.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--fanouts", default="15,10,5")
    parser.add_argument("--ks", default="4,16,64", help="batches per bulk call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bulk_sampling.json"))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    graph = generate(SyntheticConfig(nodes=args.nodes, degree=args.degree, seed=0))
    config = SamplerConfig(fanouts=tuple(int(f) for f in args.fanouts.split(",")))
    rng = np.random.default_rng(0)
    batches = [
        torch.from_numpy(np.sort(rng.choice(graph.num_nodes, args.batch_size, replace=False)))
        for _ in range(args.batches)
    ]
    seeds = list(range(args.batches))
    kernels = NeighborSampler(graph.indptr, graph.indices, config)
    tensor = DeviceNeighborSampler(graph.indptr, graph.indices, config, device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def one_at_a_time(sampler):
        return [sampler.sample(b, s) for b, s in zip(batches, seeds)]

    def bulk(k):
        out = []
        for i in range(0, len(batches), k):
            out += tensor.sample_many(batches[i : i + k], seeds[i : i + k])
        return out

    ks = [int(k) for k in args.ks.split(",")]
    name = f"{tensor.kernel} ({device.type})"  # Triton's hop kernel on a GPU, else tensor code
    variants = {"numba kernels, 1 batch/call": lambda: one_at_a_time(kernels)}
    variants[f"{name}, 1 batch/call"] = lambda: one_at_a_time(tensor)
    for k in ks:
        variants[f"{name}, {k} batches/call"] = lambda k=k: bulk(k)
    # the other relabelling at the largest k: batch by batch (node map) or one sort for all
    other = "one sort" if not tensor.relabel_together else "batch by batch"

    def bulk_other(k=ks[-1]):
        tensor.relabel_together = not tensor.relabel_together
        try:
            return bulk(k)
        finally:
            tensor.relabel_together = not tensor.relabel_together

    variants[f"{name}, {ks[-1]} batches/call, relabelled {other}"] = bulk_other
    edges = sum(s.num_sampled_edges for s in one_at_a_time(kernels))
    for fn in variants.values():  # warm-up (numba compilation, allocator)
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            sync()
            start = time.perf_counter()
            fn()
            sync()
            seconds[name].append(time.perf_counter() - start)
    rows, records = [], []
    base = statistics.median(seconds["numba kernels, 1 batch/call"])
    for name, times in seconds.items():
        t = statistics.median(times)
        records.append({"variant": name, "seconds": times, "edges_per_s": edges / t})
        rows.append([name, f"{t:.3f}", f"{edges / t / 1e6:.2f}", f"{base / t:.2f}"])
    table = format_table(["variant", "s (median)", "M sampled edges/s", "vs numba"], rows)
    save_json(
        args.out,
        {"command": "python benchmarks/bench_bulk.py " + " ".join(sys.argv[1:] if argv is None
                                                                else argv),
         "args": vars(args), "sampled_edges": edges, "threads": torch.get_num_threads(),
         "runs": records},
    )  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
