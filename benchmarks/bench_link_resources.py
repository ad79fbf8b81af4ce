"""Where the memory and time of the README's soc-slashdot link-prediction run go (issue 34).

    python benchmarks/bench_link_resources.py --data-dir ../shared/data --threads 1
    PYTHONPATH=/tmp/before/src python benchmarks/bench_link_resources.py --data-dir ... \
        --out benchmarks/out/link_resources_before.json --md benchmarks/out/link_resources_before.md

The run of ``shardgnn train soc-slashdot --task link --embedding-dim 64`` (defaults: GraphSAGE
64-256-256-64, fanouts 15,10,5, 1024 target edges per batch), cut into its phases in one
process: load, edge split, the first ``--batches`` training batches, the validation embeddings,
the scoring of the validation pairs, the test evaluation. Each phase reports its seconds, the
resident set after it and its own peak (``VmHWM``, reset between phases through
``/proc/self/clear_refs``). ``PYTHONPATH`` pointing at another tree's ``src`` measures that
tree (only public names are used). ``--gemm`` adds the floor of the training compute: the 18
matrix products of one typical batch (forward and backward), timed alone at 1 and 2 threads.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import islice

import torch

from machine import publish  # noqa: E402

# A typical batch's blocks (src -> dst nodes per layer, input layer first) on soc-slashdot.
BLOCK_NODES = (38254, 30021, 13969, 2815)


def memory() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    values = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class Phases:
    def __init__(self):
        self.rows: list[list] = []
        self.start = time.perf_counter()

    def done(self, name: str) -> None:
        rss, peak = memory()
        seconds = time.perf_counter() - self.start
        self.rows.append([name, round(seconds, 2), round(rss), round(peak)])
        print(f"{name:32s} {seconds:7.2f} s  rss {rss:6.0f} MiB  peak {peak:6.0f} MiB", flush=True)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # VmHWM := VmRSS
        self.start = time.perf_counter()


class FirstBatches:
    """The first ``count`` batches of a pipeline, streamed (as the training loop takes them)."""

    def __init__(self, stream, count: int):
        self.stream, self.count = stream, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return islice(iter(self.stream), self.count)


def gemm_floor(threads: int) -> dict:
    """Seconds of one batch's matrix products (best of 5) and their FLOP rate."""
    torch.set_num_threads(threads)
    s0, d0, d1, d2 = BLOCK_NODES
    # (rows, in, out) of C = A W: layer 0 aggregates first (width 64, dst rows), layer 1 too
    # (width 256), layer 2 transforms first (its src rows for the neighbours, dst for itself)
    shapes = [(d0, 64, 256)] * 2 + [(d1, 256, 256)] * 2 + [(d1, 256, 64), (d2, 256, 64)]
    ops = []
    for m, k, n in shapes:
        a, w, g = torch.randn(m, k), torch.randn(k, n), torch.randn(m, n)
        ops += [(a, w), (g, w.t().contiguous()), (a.t(), g)]  # forward, input grad, weight grad
    flops = sum(2 * x.shape[0] * x.shape[1] * y.shape[1] for x, y in ops)
    for x, y in ops:
        x @ y
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for x, y in ops:
            x @ y
        best = min(best, time.perf_counter() - start)
    return {"threads": threads, "gflop": flops / 1e9, "seconds": best, "gflops": flops / best / 1e9}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--gemm", action="store_true")
    parser.add_argument("--out", default="benchmarks/out/link_resources.json")
    parser.add_argument("--md", default="benchmarks/out/link_resources.md")
    args = parser.parse_args()

    import shardgnn
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.store.config import EmbeddingConfig
    from shardgnn.train.config import OptimConfig, TrainConfig, apply_process_settings
    from shardgnn.train.link import LinkLocalSteps, link_objective, score_pairs
    from shardgnn.train.minibatch import minibatch_step

    config = TrainConfig(
        dataset="soc-slashdot",
        task="link",
        data_dir=args.data_dir,
        threads=args.threads,
        embedding=EmbeddingConfig(dim=64),
        optim=OptimConfig(epochs=1),
        progress=False,
    )
    apply_process_settings(config)
    phases = Phases()
    phases.done("imports")
    graph = load_dataset(config.dataset, config.data_dir)
    phases.done("load")
    steps = LinkLocalSteps(config, graph)
    phases.done("edge split, model, pipeline")
    steps.batches.set_epoch(0)
    steps.model.train()
    step = minibatch_step(
        steps.model,
        steps.optimizer,
        device=steps.device,
        timer=steps.timer,
        objective=link_objective(config.link),
        embedding=steps.embedding,
    )
    for batch in FirstBatches(steps.train_stages, args.batches):
        step(batch)
    phases.done(f"{args.batches} training batches")
    pairs = steps.eval_pairs["val"]
    h_ND = steps.embed(pairs.nodes)
    phases.done("validation embeddings")
    score_pairs(steps.model, h_ND, pairs)
    phases.done("score validation pairs")
    steps.evaluate("test")
    phases.done("evaluate test (embed + score)")
    stages = {k: round(v / args.batches * 1000, 1) for k, v in steps.timer.seconds.items()}
    print("ms per training batch:", stages)
    floor = [gemm_floor(t) for t in (1, 2)] if args.gemm else []
    for f in floor:
        print(
            f"GEMMs of one batch, {f['threads']} thread(s): {f['gflop']:.1f} GFLOP in "
            f"{f['seconds'] * 1000:.0f} ms ({f['gflops']:.0f} GFLOP/s)"
        )
    return publish(
        args.out,
        args.md,
        f"soc-slashdot link prediction, phases (tree: {os.path.dirname(shardgnn.__file__)})",
        ["phase", "seconds", "RSS after (MiB)", "peak (MiB)"],
        phases.rows,
        batch_stage_ms=stages,
        gemm_floor=floor,
    )


if __name__ == "__main__":
    sys.exit(main())
