"""Sparse aggregation (SpMM) forward + backward: the numba kernels vs torch sparse CSR.

Builds one random block shaped like the input layer of a 3-layer sampled mini-batch (``--dst``
dst rows, ``--src`` src nodes, ``--degree`` edges per dst row to uniformly random src nodes) and,
for every (norm, width), times ``spmm`` forward and backward on both paths in the same run,
alternating them repetition by repetition. Each repetition builds a fresh ``MessageGraph`` as a
training step does, so the *cold* times include the per-batch set-up each path pays on first use
(torch: normalised CSR + ``to_sparse_csc`` transpose; numba: the counting-sort transpose); the
*warm* times repeat the call on the same graph (cached matrices: the kernels alone; the minimum
over repetitions, the cold ones are medians).

Optionally (``--train-models``) it also times real training epochs, ``shardgnn train synthetic``
in a child process per path (the child flips ``shardgnn.nn.message_graph.USE_KERNELS``, a module
switch, from an environment variable this script sets). Run
``python benchmarks/bench_spmm.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np
import torch

import shardgnn.nn.message_graph as mg
from machine import machine_info  # noqa: E402  (benchmarks/machine.py)
from shardgnn.atomic import atomic_open, save_json
from shardgnn.heap import HEAP_MODES, configure_heap
from shardgnn.train.progress import format_table

PATHS = ("torch", "numba")
_ENV = "BENCH_SPMM_PATH"  # read only by the training child this script starts
_CHILD = (
    "import os, sys\n"
    "import shardgnn.nn.message_graph as mg\n"
    f"mg.USE_KERNELS = os.environ['{_ENV}'] == 'numba'\n"
    "from shardgnn.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dst", type=int, default=100_000, help="dst rows D of the block")
    p.add_argument("--src", type=int, default=1_000_000, help="src nodes S of the block")
    p.add_argument("--degree", type=int, default=10, help="edges per dst row")
    p.add_argument("--widths", default="128,256", help="comma-separated feature widths F")
    p.add_argument("--norms", default="mean,gcn", help="comma-separated norms: mean, sum, gcn")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per path and config")
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions first (JIT)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (unset: torch's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the block and the features")
    p.add_argument(
        "--heap",
        choices=HEAP_MODES,
        default="reuse",
        help="C heap mode, as `shardgnn --heap` (reuse: what every shardgnn process runs with)",
    )
    p.add_argument(
        "--train-models",
        default="sage,gcn",
        help="comma-separated models to time `shardgnn train synthetic` with ('' to skip)",
    )
    p.add_argument("--train-epochs", type=int, default=2, help="epochs per training run")
    p.add_argument(
        "--train-runs", type=int, default=3, help="training runs per path (alternating paths)"
    )
    p.add_argument("--out", default="benchmarks/out/spmm.json", help="results JSON")
    p.add_argument("--md", default="benchmarks/out/spmm.md", help="results Markdown table")
    return p.parse_args(argv)


def make_block(num_dst: int, num_src: int, degree: int, seed: int):
    """``(indptr_D1, indices_E, src_degree_S)`` of a block with ``degree`` edges per row."""
    rng = np.random.default_rng(seed)
    indptr_D1 = torch.arange(0, (num_dst + 1) * degree, degree, dtype=torch.int64)
    indices_E = torch.from_numpy(rng.integers(0, num_src, num_dst * degree, dtype=np.int64))
    src_degree_S = torch.from_numpy(rng.integers(1, 50, num_src, dtype=np.int64))
    return indptr_D1, indices_E, src_degree_S


def time_once(
    block, h_SF, grad_DF, norm: str, path: str
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Cold (fresh graph) then warm (same graph) forward and backward; seconds of each, and the
    cold output and gradient (to check the paths agree)."""
    mg.USE_KERNELS = path == "numba"
    graph = mg.MessageGraph(block[0], block[1], h_SF.shape[0], block[2])
    times = {}
    for phase in ("cold", "warm"):
        h_SF.grad = None
        t0 = time.perf_counter()
        out_DF = mg.spmm(graph, h_SF, norm)
        t1 = time.perf_counter()
        out_DF.backward(grad_DF)
        t2 = time.perf_counter()
        times[f"{phase}_forward_s"] = t1 - t0
        times[f"{phase}_backward_s"] = t2 - t1
        if phase == "cold":
            result = (out_DF.detach(), h_SF.grad)
    mg.USE_KERNELS = True
    return times, *result


def bench_spmm(args, block, norm: str, width: int) -> dict:
    gen = torch.Generator().manual_seed(args.seed)
    h_SF = torch.randn(args.src, width, generator=gen).requires_grad_()
    grad_DF = torch.randn(args.dst, width, generator=gen)
    samples: dict[str, list[dict]] = {p: [] for p in PATHS}
    max_diff = {"forward": 0.0, "backward": 0.0}
    for rep in range(args.warmup + args.reps):
        outputs = {}
        for path in PATHS:  # alternate, so drift in the machine's speed hits both alike
            times, out_DF, grad_SF = time_once(block, h_SF, grad_DF, norm, path)
            outputs[path] = (out_DF, grad_SF)
            if rep >= args.warmup:
                samples[path].append(times)
        for i, key in enumerate(("forward", "backward")):
            a, b = outputs["torch"][i], outputs["numba"][i]
            rel = float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
            max_diff[key] = max(max_diff[key], rel)
        del outputs
    result = {"norm": norm, "width": width, "max_rel_diff": max_diff}
    for path in PATHS:
        # cold: the median (what a training step pays); warm: the minimum, the kernels alone
        # (a warm call's 0.5-1 GB gradient occasionally page-faults afresh, in either path)
        med = {
            k: float((np.min if k.startswith("warm") else np.median)([s[k] for s in samples[path]]))
            for k in samples[path][0]
        }
        med["cold_total_s"] = med["cold_forward_s"] + med["cold_backward_s"]
        med["warm_total_s"] = med["warm_forward_s"] + med["warm_backward_s"]
        result[path] = {"median": med, "samples": samples[path]}
    result["speedup"] = {
        k: result["torch"]["median"][k] / result["numba"]["median"][k]
        for k in result["numba"]["median"]
    }
    return result


def train_once(model: str, path: str, args) -> dict:
    """One ``shardgnn train synthetic`` run in a child process on ``path``; its last epoch."""
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.json")
        cmd = [sys.executable, "-c", _CHILD, "train", "synthetic", "--model", model]
        cmd += ["--epochs", str(args.train_epochs), "--quiet", "--results", results]
        cmd += ["--heap", args.heap]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        start = time.perf_counter()
        subprocess.run(
            cmd, env=dict(os.environ, **{_ENV: path}), check=True, stdout=subprocess.DEVNULL
        )
        wall = time.perf_counter() - start
        with open(results) as fh:
            report = json.load(fh)
    last = report["epochs"][-1]  # the first epoch pays JIT loading and first-touch costs
    return {
        "wall_s": wall,
        "epoch_s": last["time_s"],
        "compute_s": last["stages"]["compute"],
        "eval_s": last["stages"].get("eval"),
        "test_acc": report["test_acc"],
    }


def bench_train(model: str, args) -> dict:
    """``--train-runs`` runs per path, alternating the paths; medians of the last epochs."""
    runs: dict[str, list[dict]] = {p: [] for p in PATHS}
    for _ in range(args.train_runs):
        for path in PATHS:
            runs[path].append(train_once(model, path, args))
    out: dict = {"model": model}
    for path in PATHS:
        out[path] = {
            "median_epoch_s": float(np.median([r["epoch_s"] for r in runs[path]])),
            "median_compute_s": float(np.median([r["compute_s"] for r in runs[path]])),
            "runs": runs[path],
        }
    out["speedup_epoch"] = out["torch"]["median_epoch_s"] / out["numba"]["median_epoch_s"]
    out["speedup_compute"] = out["torch"]["median_compute_s"] / out["numba"]["median_compute_s"]
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    configure_heap(args.heap)  # before the big tensors: allocations reuse freed pages
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    widths = [int(w) for w in args.widths.split(",")]
    norms = [n.strip() for n in args.norms.split(",")]
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    block = make_block(args.dst, args.src, args.degree, args.seed)

    results, rows = [], []
    for norm in norms:
        for width in widths:
            r = bench_spmm(args, block, norm, width)
            results.append(r)
            t, n, s = r["torch"]["median"], r["numba"]["median"], r["speedup"]
            rows.append(
                [
                    norm,
                    width,
                    f"{1e3 * t['cold_forward_s']:.1f}",
                    f"{1e3 * n['cold_forward_s']:.1f}",
                    f"{s['cold_forward_s']:.2f}x",
                    f"{1e3 * t['cold_backward_s']:.1f}",
                    f"{1e3 * n['cold_backward_s']:.1f}",
                    f"{s['cold_backward_s']:.2f}x",
                    f"{1e3 * t['cold_total_s']:.1f}",
                    f"{1e3 * n['cold_total_s']:.1f}",
                    f"{s['cold_total_s']:.2f}x",
                    f"{s['warm_forward_s']:.2f}x",
                    f"{s['warm_backward_s']:.2f}x",
                    f"{max(r['max_rel_diff'].values()):.1e}",
                ]
            )
            print(
                f"norm={norm} F={width}: total torch {1e3 * t['cold_total_s']:.1f} ms, numba "
                f"{1e3 * n['cold_total_s']:.1f} ms ({s['cold_total_s']:.2f}x)",
                flush=True,
            )
    headers = [
        "norm",
        "F",
        "torch fwd ms",
        "numba fwd ms",
        "fwd ratio",
        "torch bwd ms",
        "numba bwd ms",
        "bwd ratio",
        "torch total ms",
        "numba total ms",
        "total ratio",
        "warm fwd ratio",
        "warm bwd ratio",
        "max rel diff",
    ]
    table = format_table(headers, rows)

    train = []
    models = [m.strip() for m in args.train_models.split(",") if m.strip()]
    for model in models:
        r = bench_train(model, args)
        train.append(r)
        print(
            f"train {model}: epoch torch {r['torch']['median_epoch_s']:.2f} s, numba "
            f"{r['numba']['median_epoch_s']:.2f} s ({r['speedup_epoch']:.2f}x)",
            flush=True,
        )
    train_table = format_table(
        [
            "model",
            "torch epoch s",
            "numba epoch s",
            "epoch ratio",
            "torch compute s",
            "numba compute s",
            "compute ratio",
        ],
        [
            [
                r["model"],
                f"{r['torch']['median_epoch_s']:.2f}",
                f"{r['numba']['median_epoch_s']:.2f}",
                f"{r['speedup_epoch']:.2f}x",
                f"{r['torch']['median_compute_s']:.2f}",
                f"{r['numba']['median_compute_s']:.2f}",
                f"{r['speedup_compute']:.2f}x",
            ]
            for r in train
        ],
    )

    title = (
        f"SpMM forward + backward, torch sparse CSR vs numba kernels: block D={args.dst:,} dst, "
        f"S={args.src:,} src, {args.degree} edges per dst row, {threads} threads; "
        f"{args.reps} repetitions (after {args.warmup} warm-up), heap {args.heap}"
    )
    notes = (
        "fwd/bwd/total: a fresh MessageGraph per repetition, as in training (includes each "
        "path's per-batch set-up: torch builds the normalised CSR and its `to_sparse_csc` "
        "transpose, numba its counting-sort transpose); medians. warm: the same call again on the "
        "same graph (cached matrices; the kernels alone); minimum over the repetitions, since an "
        "occasional fresh page-faulting of the 0.5-1 GB gradient hits either path at random. "
        "ratio = torch time / numba time. max rel diff: largest |torch - numba| / max |numba| "
        "over outputs and gradients."
    )
    machine = machine_info()
    try:
        machine["numba_threading_layer_used"] = numba.threading_layer()
    except ValueError:  # no parallel kernel has run
        pass
    report = {
        "benchmark": "spmm",
        "command": command,
        "argv": sys.argv,
        "args": vars(args),
        "machine": machine,
        "threads": threads,
        "block": {"num_dst": args.dst, "num_src": args.src, "num_edges": args.dst * args.degree},
        "results": results,
        "train": train,
    }
    save_json(args.out, report)
    text = f"{title}\n\n{table}\n\n{notes}\n"
    if train:
        text += (
            f"\nTraining, `shardgnn train synthetic --epochs {args.train_epochs}` (defaults: "
            "fanouts 15,10,5, hidden 256, batch 1024), time of the last epoch (the first pays JIT "
            f"loading), median of {args.train_runs} runs per path (alternating); compute = the "
            "trainer's compute stage (graphs, forward, backward, step):\n\n"
            f"{train_table}\n"
        )
    with atomic_open(args.md, "w") as fh:
        fh.write(f"{text}\nCommand: `{command}`\n")
    print(f"\n{text}\nwrote {args.out} and {args.md}")
    return report


if __name__ == "__main__":
    main()
