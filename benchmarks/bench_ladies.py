"""LADIES layer-wise importance sampling against node-wise sampling (issue 32).

Part 1, the samplers: the same batches (same seeds) drawn by node-wise sampling (the numba kernels,
one batch at a time), by LADIES over the same kernels, and by LADIES in tensor code k batches at
once (``DeviceNeighborSampler.sample_many``: the stacked frontiers' one hop and one draw per
layer); milliseconds per batch, input nodes and sampled edges per batch. Rounds alternate the
variants so drift hits all alike; the median round is reported.

Part 2, training: GraphSAGE trained with each sampler on the same graph for the same epochs,
several seeds (mean +- std of test accuracy, evaluated on full neighbourhoods), the mean epoch
time, and the input nodes a batch reads.

    python benchmarks/bench_ladies.py --data-dir ../shared/data --out benchmarks/out/ladies.json
    python benchmarks/bench_ladies.py --device cuda --graphs synthetic:nodes=200000 --no-training
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from machine import write_report  # noqa: E402
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.progress import format_table
from shardgnn.train.single import run_training

REPO = Path(__file__).resolve().parents[1]


def _parse_sampler(text: str) -> SamplerConfig:
    """``nodewise:10,10`` or ``ladies:512,512``."""
    kind, counts = text.split(":")
    values = tuple(int(c) for c in counts.split(","))
    return SamplerConfig(fanouts=values) if kind == "nodewise" else SamplerConfig(ladies=values)


def sampler_rows(graph, name: str, samplers: list[str], args) -> list[dict]:
    rng = np.random.default_rng(0)
    pool = graph.train_idx if graph.train_idx is not None and len(graph.train_idx) else None
    pool = np.arange(graph.num_nodes) if pool is None or len(pool) < args.batch_size else pool
    batches = [
        torch.from_numpy(np.sort(rng.choice(pool, args.batch_size, replace=False)))
        for _ in range(args.batches)
    ]
    seeds = list(range(args.batches))
    device = torch.device(args.device)
    variants = {}
    for text in samplers:
        config = _parse_sampler(text)
        tensor = DeviceNeighborSampler(graph.indptr, graph.indices, config, device)
        # on the CPU the numba kernels one batch at a time; on a GPU the device sampler
        one = tensor
        if device.type == "cpu":
            one = NeighborSampler(graph.indptr, graph.indices, config)
        variants[text] = (one, None)
        if config.ladies is not None and args.k > 1:
            variants[f"{text} k={args.k}"] = (tensor, args.k)
    times: dict[str, list[float]] = {v: [] for v in variants}
    sizes: dict[str, tuple[float, float]] = {}
    for _ in range(args.rounds):
        for label, (sampler, k) in variants.items():
            start = time.perf_counter()
            if k is None:
                out = [sampler.sample(b, s) for b, s in zip(batches, seeds)]
            else:
                out = []
                for i in range(0, len(batches), k):
                    out += sampler.sample_many(batches[i : i + k], seeds[i : i + k])
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[label].append((time.perf_counter() - start) / len(batches))
            sizes[label] = (
                float(np.mean([o.input_nodes.shape[0] for o in out])),
                float(np.mean([o.num_sampled_edges for o in out])),
            )
    return [
        {
            "graph": name,
            "sampler": label,
            "ms_per_batch": 1000 * statistics.median(times[label]),
            "input_nodes": sizes[label][0],
            "edges": sizes[label][1],
        }
        for label in variants
    ]


def training_rows(graph, name: str, samplers: list[str], args) -> list[dict]:
    rows = []
    for text in samplers:
        accs, epoch_s = [], []
        for seed in range(args.seeds):
            results = run_training(
                TrainConfig(
                    model=ModelConfig(model="sage", hidden=args.hidden, num_layers=2),
                    sampler=_parse_sampler(text),
                    optim=OptimConfig(epochs=args.epochs, lr=args.lr),
                    batch_size=args.batch_size,
                    seed=seed,
                    progress=False,
                ),
                graph,
            )
            accs.append(results["test_acc"])
            epoch_s.append(results["mean_epoch_time_s"])
        rows.append(
            {
                "graph": name,
                "sampler": text,
                "test_acc_mean": float(np.mean(accs)),
                "test_acc_std": float(np.std(accs)),
                "epoch_s": float(np.mean(epoch_s)),
                "seeds": args.seeds,
            }
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--graphs", default="pubmed coauthor-physics synthetic:nodes=200000")
    parser.add_argument(
        "--samplers",
        default="nodewise:10,10 nodewise:3,3 ladies:512,512 ladies:2048,2048",
        help="space-separated nodewise:FANOUTS and ladies:NODES",
    )
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--k", type=int, default=16, help="batches per bulk LADIES call")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu", help="where the samplers run (cuda: the GPU)")
    parser.add_argument(
        "--no-training", action="store_true", help="time the samplers only (no training runs)"
    )
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "ladies.json"))
    args = parser.parse_args(argv)
    samplers = args.samplers.split()
    sampling, training = [], []
    for spec in args.graphs.split():
        if spec.startswith("synthetic"):
            nodes = int(spec.split("nodes=")[1]) if "nodes=" in spec else 200_000
            graph = generate(SyntheticConfig(nodes=nodes, degree=20, seed=0))
        else:
            try:
                graph = load_dataset(spec, args.data_dir)
            except Exception as exc:  # a dataset not on this machine: say so, go on
                print(f"skipping {spec}: {exc}", file=sys.stderr)
                continue
        sampling += sampler_rows(graph, spec, samplers, args)
        if not spec.startswith("synthetic") and not args.no_training:
            training += training_rows(graph, spec, samplers, args)
    table = format_table(
        ["graph", "sampler", "ms / batch", "input nodes", "edges"],
        [
            [
                r["graph"],
                r["sampler"],
                f"{r['ms_per_batch']:.2f}",
                f"{r['input_nodes']:.0f}",
                f"{r['edges']:.0f}",
            ]
            for r in sampling
        ],  # fmt: skip
    )
    table += "\n\n" + format_table(
        ["graph", "sampler", "test acc", "epoch s"],
        [
            [
                r["graph"],
                r["sampler"],
                f"{100 * r['test_acc_mean']:.1f} +- {100 * r['test_acc_std']:.1f}",
                f"{r['epoch_s']:.2f}",
            ]
            for r in training
        ],  # fmt: skip
    )
    write_report(
        args.out, str(Path(args.out).with_suffix(".md")),
        f"LADIES against node-wise sampling (batch {args.batch_size}"
        + (")" if args.no_training else f", {args.epochs} epochs)"),
        table, batch_size=args.batch_size, epochs=args.epochs, sampling=sampling,
        training=training,
    )  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
