"""Feature caches: hit rate, remote feature bytes and epoch time per policy, beside no cache.

For every (dataset, workers, partitioner) one job of ``--workers`` local processes is launched;
inside it, for every configuration (no cache, then each ``--policies`` entry at each
``--capacities`` entry), every rank builds a fresh ``shardgnn.train.dist_node.DistMiniBatchSteps``
(the production data pipeline: distributed sampler -> cached distributed feature store) and runs
``--epochs`` epochs of that pipeline:

* **loader** part (every configuration): the training loader alone (sample + fetch, no model),
  so epochs are cheap and every (policy, capacity) sees the same batches (the cache never changes
  sampling). Reported from epoch 1 on (epoch 0 warms the dynamic caches and numba): hit rate =
  (requested - missed) / requested bytes (GNNLab), remote feature MB per epoch (all bytes of the
  ``fetch`` stage: id requests and rows, summed over ranks), their ratio to no cache, loader epoch
  seconds, fetch seconds, the look-ahead inspector's seconds (belady) and the cache set-up
  seconds (static fill; presample's extra sampling epoch), each averaged over ranks.
* **train** part (``--train-capacity`` only): the training loop (GraphSAGE, hidden 256) for
  ``--epochs`` epochs per policy; epoch time = mean over epochs >= 1 of the training loop.

Capacity is per worker, as a percentage of all nodes. Graphs: the synthetic power-law graph
(DC-SBM, in-degree exponent 2.5) and ``coauthor-physics`` with a 60/20/20 split (so an epoch has
many batches; the per-class split has 100 training nodes). Outputs (atomic, rewritten after every
job): ``benchmarks/out/cache.{json,md}``.

    python benchmarks/bench_cache.py
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_distributed import cores_available, ensure_partitions, threads_for  # noqa: E402
from machine import machine_info  # noqa: E402
from shardgnn.atomic import atomic_open, save_json  # noqa: E402
from shardgnn.distributed.launch import launch_local  # noqa: E402
from shardgnn.graph.datasets import load_dataset  # noqa: E402
from shardgnn.nn.models import ModelConfig  # noqa: E402
from shardgnn.sampling.neighbor import SamplerConfig  # noqa: E402
from shardgnn.store.cache.config import CacheConfig  # noqa: E402
from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig  # noqa: E402
from shardgnn.train.progress import format_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC = "synthetic:nodes=200000,degree=20,features=100,classes=16"
PHYSICS = "coauthor-physics:split=60-20-20"


def make_config(
    spec: str, args, cache: dict, threads: int, epochs: int, partitions: str
) -> TrainConfig:
    return TrainConfig(
        dataset=spec,
        model=ModelConfig(model="sage", hidden=args.hidden, num_layers=len(args.fanouts)),
        sampler=SamplerConfig(fanouts=args.fanouts, num_threads=threads),
        optim=OptimConfig(epochs=epochs, lr=0.003),
        batch_size=args.batch_size,
        progress=False,
        threads=threads,
        seed=0,
        cache=CacheConfig(**cache),
        feature_norm="row" if spec.startswith("coauthor") else "none",
        run=RunConfig(partitions=partitions, overlap="off"),
    )


def _loader_epochs(trainer, epochs: int) -> list[dict[str, Any]]:
    """Run the training loader (no model) ``epochs`` times; per-epoch metrics on every rank."""
    out = []
    for epoch in range(epochs):
        trainer.train_batches.set_epoch(epoch)
        start = time.perf_counter()
        for _ in trainer.train_stages:
            pass
        seconds = time.perf_counter() - start
        stages = trainer.timer.reset()
        comm: dict[str, list] = {}
        for c in trainer.comms:
            for name, st in c.reset().items():
                comm[name] = [st.bytes_sent, st.bytes_recv, st.time_s, st.calls]
        metrics = trainer.epoch_metrics(comm)
        names = ("loader", "fetch", "lookahead", "sample")
        values = trainer.sum([seconds, *(stages.get(n, 0.0) for n in names[1:])])
        metrics.update({f"{n}_s": v / trainer.ctx.world_size for n, v in zip(names, values)})
        out.append(metrics)
    return out


def worker(partitions: str, spec: str, args, configs: list[dict], threads: int, timeout_s: float):
    import torch

    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.train.dist_node import DistMiniBatchSteps
    from shardgnn.train.loop import TrainingLoop

    ctx = init_distributed(device="cpu", timeout_s=timeout_s)
    torch.set_num_threads(threads)
    results = []
    try:
        for item in configs:
            config = make_config(spec, args, item["cache"], threads, args.epochs, partitions)
            trainer = DistMiniBatchSteps(config, ctx)
            res = {
                "label": item["label"],
                "part": item["part"],
                "cache": dict(item["cache"]),
                "setup_s": trainer.sum([trainer.cache_setup_s])[0] / ctx.world_size,
                "capacity_rows": trainer.cache.capacity if trainer.cache is not None else 0,
            }
            if item["part"] == "loader":
                res["epochs"] = _loader_epochs(trainer, args.epochs)
                res["max_staged_mb"] = (
                    trainer.sum([float(trainer.cache.max_staged_rows if trainer.cache else 0)])[0]
                    * trainer.fetch_store.row_bytes
                    / 1e6
                )
            else:
                fit = TrainingLoop(config, trainer).run()
                res["epochs"] = [
                    {"time_s": e["time_s"], **e["stages"], **(e["cache"] or {})}
                    for e in fit["epochs"]
                ]
                res["cache_summary"] = fit["cache"]
            results.append(res)
            del trainer
    finally:
        shutdown()
    return results if ctx.rank == 0 else None


def steady(run: dict[str, Any], key: str) -> float | None:
    values = [e.get(key) for e in run["epochs"][1:] or run["epochs"]]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def configurations(args) -> list[dict]:
    out = [{"label": "none", "part": "loader", "cache": {}}]
    for capacity in args.capacities:
        for policy in args.policies:
            out.append(
                {
                    "label": f"{policy} {capacity}",
                    "part": "loader",
                    "cache": {"policy": policy, "size": capacity, "lookahead": args.lookahead},
                }
            )
    return out


def train_configurations(args) -> list[dict]:
    out = [{"label": "none", "part": "train", "cache": {}}]
    for policy in args.policies:
        out.append(
            {
                "label": f"{policy} {args.train_capacity}",
                "part": "train",
                "cache": {
                    "policy": policy,
                    "size": args.train_capacity,
                    "lookahead": args.lookahead,
                },
            }
        )
    return out


def summarize(job: dict[str, Any]) -> list[dict[str, Any]]:
    base = next(r for r in job["runs"] if r["label"] == "none" and r["part"] == job["part"])
    rows = []
    for run in job["runs"]:
        time_key = "loader_s" if run["part"] == "loader" else "time_s"
        remote = steady(run, "remote_feature_mb")
        rows.append(
            {
                "dataset": job["dataset"],
                "workers": job["workers"],
                "method": job["method"],
                "part": run["part"],
                "policy": run["cache"].get("policy", "none"),
                "capacity": run["cache"].get("size", "-"),
                "capacity_rows": run["capacity_rows"],
                "hit_rate": steady(run, "hit_rate") or 0.0,
                "remote_mb": remote,
                "remote_vs_none": remote / steady(base, "remote_feature_mb")
                if remote is not None
                else None,
                "epoch_s": steady(run, time_key),
                "epoch_vs_none": steady(run, time_key) / steady(base, time_key),
                "fetch_s": steady(run, "fetch_s")
                if run["part"] == "loader"
                else steady(run, "fetch"),
                "lookahead_s": steady(run, "lookahead_s")
                if run["part"] == "loader"
                else steady(run, "lookahead"),
                "setup_s": run["setup_s"],
                "max_staged_mb": run.get("max_staged_mb"),
            }
        )
    return rows


POLICY_ORDER = ("degree", "presample", "fifo", "lru", "belady")


def condensed_markdown(report: dict[str, Any]) -> str:
    """One row per (dataset, workers, partition, capacity); each policy's cell is
    ``hit rate / remote bytes vs none / loader epoch vs none``."""
    rows = [r for job in report["jobs"] for r in summarize(job) if r["part"] == "loader"]
    policies = [p for p in POLICY_ORDER if any(r["policy"] == p for r in rows)]
    keys = list(
        dict.fromkeys(
            (r["dataset"], r["workers"], r["method"], r["capacity"])
            for r in rows
            if r["capacity"] != "-"
        )
    )
    lines = [
        "| dataset | workers | partition | capacity | "
        + " | ".join(policies)
        + " | best static cut |",
        "|---|---|---|---|" + "---|" * (len(policies) + 1),
    ]
    for key in keys:
        sel = {
            r["policy"]: r
            for r in rows
            if (r["dataset"], r["workers"], r["method"], r["capacity"]) == key
        }
        cells = [
            f"{100 * sel[p]['hit_rate']:.1f}% / {sel[p]['remote_vs_none']:.2f} / "
            f"{sel[p]['epoch_vs_none']:.2f}"
            if p in sel
            else "-"
            for p in policies
        ]
        static = [sel[p] for p in ("degree", "presample") if p in sel]
        best = f"{100 * (1 - min(r['remote_vs_none'] for r in static)):.1f}%" if static else "-"
        lines.append(
            f"| {key[0].split(':')[0]} | {key[1]} | {key[2]} | {key[3]} | "
            + " | ".join(cells)
            + f" | {best} |"
        )
    lines += [
        "",
        "| dataset | workers | partition | no cache: remote MB/epoch | loader epoch s | belady "
        "look-ahead s/epoch (5/10/20%) | belady staged MB (max, all workers) |",
        "|---|---|---|---|---|---|---|",
    ]
    for job in report["jobs"]:
        if job["part"] != "loader":
            continue
        sel = [r for r in summarize(job)]
        base = next(r for r in sel if r["policy"] == "none")
        bel = [r for r in sel if r["policy"] == "belady"]
        lookahead = " / ".join(f"{r['lookahead_s']:.2f}" for r in bel) or "-"
        staged = max((r["max_staged_mb"] or 0) for r in bel) if bel else 0
        lines.append(
            f"| {job['dataset'].split(':')[0]} | {job['workers']} | {job['method']} | "
            f"{base['remote_mb']:.0f} | {base['epoch_s']:.2f} | {lookahead} | {staged:.0f} |"
        )
    return "\n".join(lines) + "\n"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Command: `{report['command']}`",
        "",
        f"Machine: {report['machine']['nproc']} cores, torch {report['machine'].get('torch')}; "
        f"epochs per configuration: {report['epochs']}, steady state = mean of epochs >= 1.",
        "",
    ]
    lines += [
        "### Summary (hit rate / remote bytes vs none / loader epoch vs none)",
        "",
        condensed_markdown(report),
    ]
    rows = [r for job in report["jobs"] for r in summarize(job)]
    for part, title in (
        ("loader", "Loader (sample + fetch, no model): every policy and capacity"),
        ("train", "Training epochs (GraphSAGE) per policy"),
    ):
        sel = [r for r in rows if r["part"] == part]
        if not sel:
            continue
        lines += [f"### {title}", ""]
        lines.append(
            format_table(
                [
                    "dataset",
                    "workers",
                    "partition",
                    "capacity",
                    "policy",
                    "hit rate",
                    "remote MB/epoch",
                    "remote vs none",
                    "epoch s",
                    "epoch vs none",
                    "fetch s",
                    "look-ahead s",
                    "set-up s",
                ],
                [
                    (
                        r["dataset"].split(":")[0],
                        r["workers"],
                        r["method"],
                        r["capacity"],
                        r["policy"],
                        f"{100 * r['hit_rate']:.1f}%",
                        f"{r['remote_mb']:.1f}",
                        "-" if r["remote_vs_none"] is None else f"{r['remote_vs_none']:.3f}",
                        f"{r['epoch_s']:.2f}",
                        f"{r['epoch_vs_none']:.2f}",
                        f"{r['fetch_s']:.2f}",
                        f"{(r['lookahead_s'] or 0):.3f}",
                        f"{r['setup_s']:.2f}",
                    )
                    for r in sel
                ],
            )
        )
        lines.append("")
    lines += ["### Targets", ""]
    for t in report.get("targets", []):
        lines.append(f"- {t}")
    return "\n".join(lines) + "\n"


def targets(report: dict[str, Any]) -> list[str]:
    rows = [r for job in report["jobs"] for r in summarize(job) if r["part"] == "loader"]
    out = []
    groups = sorted(
        {
            (r["dataset"], r["workers"], r["method"], r["capacity"])
            for r in rows
            if r["capacity"] != "-"
        }
    )
    for ds, w, m, cap in groups:
        sel = {
            r["policy"]: r
            for r in rows
            if (r["dataset"], r["workers"], r["method"], r["capacity"]) == (ds, w, m, cap)
        }
        static = [sel[p] for p in ("degree", "presample") if p in sel]
        if not static:
            continue
        best = min(static, key=lambda r: r["remote_vs_none"])
        line = (
            f"{ds.split(':')[0]}, {w} workers, {m}, {cap}: best static = {best['policy']} (remote "
            f"bytes x{best['remote_vs_none']:.3f}, cut {100 * (1 - best['remote_vs_none']):.1f}%)"
        )
        if "belady" in sel:
            b = sel["belady"]
            best_hit = max(r["hit_rate"] for r in static)
            line += (
                f"; belady hit rate {100 * b['hit_rate']:.1f}% vs best static "
                f"{100 * best_hit:.1f}% ({'>=' if b['hit_rate'] >= best_hit else '<'})"
            )
        out.append(line)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--datasets", nargs="+", default=[SYNTHETIC, PHYSICS])
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--methods", nargs="+", default=["random", "metis"])
    p.add_argument(
        "--policies", nargs="+", default=["degree", "presample", "fifo", "lru", "belady"]
    )
    p.add_argument("--capacities", nargs="+", default=["5%", "10%", "20%"])
    p.add_argument("--lookahead", type=int, default=16)
    p.add_argument(
        "--fanouts", type=lambda s: tuple(int(v) for v in s.split(",")), default=(15, 10, 5)
    )
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument(
        "--train-capacity", default="20%", help="capacity of the train part ('' skips it)"
    )
    p.add_argument("--train-workers", type=int, default=2)
    p.add_argument("--train-method", default="metis")
    p.add_argument("--work-dir", default="benchmarks/out/work")
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--out", default="benchmarks/out/cache")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument(
        "--rewrite-md",
        action="store_true",
        help="only re-render the Markdown of an existing --out JSON",
    )
    args = p.parse_args(argv)
    if args.rewrite_md:
        report = json.loads(Path(args.out).with_suffix(".json").read_text())
        with atomic_open(Path(args.out).with_suffix(".md"), "w") as fh:
            fh.write(markdown(report))
        return 0
    os.environ.setdefault("SHARDGNN_DATA", args.data_dir)
    cores = cores_available()
    report: dict[str, Any] = {
        "command": "python " + shlex.join(sys.argv),
        "machine": machine_info(),
        "epochs": args.epochs,
        "jobs": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for spec in args.datasets:
        # Loaded once, and only if a partition has to be written.
        get_graph = functools.cache(functools.partial(load_dataset, spec, args.data_dir))

        for workers in args.workers:
            for method in args.methods:
                parts, _ = ensure_partitions(
                    Path(args.work_dir), spec, workers, method, 0, get_graph
                )
                plan = [("loader", configurations(args))]
                if (
                    args.train_capacity
                    and workers == args.train_workers
                    and method == args.train_method
                ):
                    plan.append(("train", train_configurations(args)))
                for part, configs in plan:
                    threads = threads_for(workers, cores)
                    start = time.perf_counter()
                    runs = launch_local(
                        worker,
                        (str(parts), spec, args, configs, threads, args.timeout),
                        workers,
                        timeout_s=4 * 3600,
                    )[0]
                    report["jobs"].append(
                        {
                            "dataset": spec,
                            "workers": workers,
                            "method": method,
                            "part": part,
                            "runs": runs,
                            "wall_s": time.perf_counter() - start,
                        }
                    )
                    report["targets"] = targets(report)
                    save_json(out.with_suffix(".json"), report)
                    with atomic_open(out.with_suffix(".md"), "w") as fh:
                        fh.write(markdown(report))
                    print(
                        f"{spec} workers={workers} {method} {part}: "
                        f"{time.perf_counter() - start:.0f} s",
                        flush=True,
                    )
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
