"""Distributed training: epoch time and communication volume, and accuracy against one worker.

Two parts (``--part epoch|accuracy|all``); every run is a fresh job of ``--workers`` local processes
(``shardgnn.distributed.launch.launch_local``), one
``shardgnn.train.dist_node.DistMiniBatchSteps`` per rank (in the shared training loop).

**epoch** — GraphSAGE (3 layers, hidden 256, global batch 1024) on the synthetic graph
(default ``synthetic:nodes=1000000,degree=20,features=100,classes=16``) for every combination of
``--fanouts`` x ``--workers`` x ``--methods`` x ``--overlap``. One worker runs once per
(fanouts, overlap): with a single part every partitioner gives the same partition. Each worker
gets ``max(1, cores // workers)`` torch and numba threads. The graph is generated once and each
(parts, method) partition is written once into ``--work-dir`` (reused by later invocations when
its recorded settings match). ``--epochs`` (default 2) epochs run; epoch 0 includes numba JIT and
first-touch page faults, so the steady state reported is the mean over epochs >= 1 (with 2
epochs: epoch 1). Reported per run: steady epoch time (training loop only, ranks averaged), its
per-stage seconds (sample, fetch, compute, wait = main thread waiting for the next batch; with
overlap, sample/fetch run in a background thread and overlap compute, so stages do not add up
to the epoch), the validation pass after the epoch (eval, not part of the epoch time), and the
bytes crossing ranks per epoch, summed over ranks (received = sent for all-to-all):

* ``remote feature bytes/epoch`` = ``comm["fetch"]["bytes_recv"] / epochs``: remote feature rows,
  labels and the id requests, of the training loop AND the per-epoch validation pass (the numbers
  in BENCHMARKS.md sections 3 were measured so; since issue 5 the ``fetch`` stage counts training
  features only, labels and evaluation have stages of their own);
* ``train fetch bytes/epoch``: the same, training loop only, steady epochs (measured by this
  benchmark around ``train_epoch``);
* ``sample bytes/epoch`` (``comm["sample"]``, training + validation sampling) and
  ``allreduce bytes/epoch`` (DDP gradients, counted as a ring all-reduce).

The final test-set evaluation that the training loop runs is skipped (``--eval-test`` keeps
it): at 1M nodes the test split is 800k nodes, several times the cost of the benchmark itself.
Derived tables: METIS / random remote-feature-bytes ratio per (fanouts, workers, overlap) and
overlap on / off epoch-time ratio per (fanouts, workers, method).

**accuracy** — GraphSAGE (2 layers, fanouts 10,10, hidden 64, dropout 0.5, Adam lr 0.01, global
batch 64, row-normalised features, up to ``--epochs`` 100 epochs with patience 20) on
``coauthor-physics:seed=S`` (per-class split of 20 train / 30 val nodes per class drawn from S,
so every seed has its own split) for S in ``0 .. --seeds - 1`` and every worker count: METIS
partitions (random for one worker), partition seed = training seed = S. Reports test accuracy
mean ± sample std over seeds per worker count and the difference to one worker (target: within
0.5 points). Features are dense (34,493 x 8,415 float32, 1.16 GB per partition directory), so
with ``--cleanup`` a seed's partition directories are deleted once its runs are done.

Outputs (atomic): ``benchmarks/out/distributed_epoch.{json,md}`` and
``benchmarks/out/distributed_accuracy.{json,md}``; the JSON holds the exact command line, the
machine, every run's full results and the derived numbers, and is rewritten after every run.

    python benchmarks/bench_distributed.py --part epoch
    python benchmarks/bench_distributed.py --part accuracy --seeds 3 --cleanup
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.launch import launch_local
from shardgnn.errors import DatasetError
from shardgnn.graph.datasets import load_dataset
from shardgnn.nn.models import ModelConfig
from shardgnn.partition.format import is_partition_dir, read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
from shardgnn.train.dist_node import DistMiniBatchSteps
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.progress import format_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_GRAPH = "synthetic:nodes=1000000,degree=20,features=100,classes=16"
COMM_STAGES = ("sample", "fetch", "allreduce")
TIME_STAGES = ("sample", "fetch", "compute", "wait", "eval")
MB = 1e6

# The accuracy part's fixed setting (see the module docstring).
ACC_DATASET = "coauthor-physics"
ACC_HIDDEN, ACC_FANOUTS, ACC_DROPOUT, ACC_LR, ACC_BATCH, ACC_PATIENCE = (
    64,
    (10, 10),
    0.5,
    0.01,
    64,
    20,
)


# ========================================================================================== workers
class BenchDistTrainer(DistMiniBatchSteps):
    """``DistMiniBatchSteps`` plus training-loop-only communication counts per epoch, and an
    optional skip of the final test evaluation (every rank skips it, so the collectives still
    match)."""

    def __init__(self, *args, skip_test: bool = False, **kwargs):
        self.skip_test = skip_test
        self.train_comm: list[list[float]] = []
        super().__init__(*args, **kwargs)

    def _comm_snapshot(self) -> list[float]:
        totals = {stage: [0.0, 0.0] for stage in COMM_STAGES}
        for comm in (self.data_comm, self.main_comm):
            for name, st in list(comm.stats.items()):
                if name in totals:
                    totals[name][0] += st.bytes_sent
                    totals[name][1] += st.bytes_recv
        return [v for stage in COMM_STAGES for v in totals[stage]]

    def train_epoch(self, run):
        # The loop resets the counters after each epoch's validation pass; the prefetch thread has
        # finished when train_epoch returns, so the difference is exactly the training loop's.
        before = self._comm_snapshot()
        out = super().train_epoch(run)
        after = self._comm_snapshot()
        self.train_comm.append([a - b for a, b in zip(after, before)])
        return out

    def evaluate(self, split: str) -> float:
        if split == "test" and self.skip_test:
            return float("nan")
        return super().evaluate(split)

    def fit(self) -> dict[str, Any]:
        results = TrainingLoop(self.config, self).run()
        counts = torch.tensor(self.train_comm, dtype=torch.float64).reshape(
            len(self.train_comm), 2 * len(COMM_STAGES)
        )
        if self.ctx.world_size > 1:  # raw collective: not counted in any stage
            torch.distributed.all_reduce(counts, group=self.ctx.group)
        results["train_comm_per_epoch"] = [
            {
                stage: {"bytes_sent": int(row[2 * i]), "bytes_recv": int(row[2 * i + 1])}
                for i, stage in enumerate(COMM_STAGES)
            }
            for row in counts.tolist()
        ]
        if self.skip_test:
            results["test_acc"] = None
        return results


def worker_main(
    config: TrainConfig,
    partitions: str,
    overlap: bool,
    skip_test: bool,
    timeout_s: float,
    result_path: str,
) -> dict[str, Any] | None:
    """One rank: join the job, train, return (and on rank 0 also write) the reduced results."""
    import dataclasses

    from shardgnn.distributed.context import init_distributed, shutdown

    config = dataclasses.replace(
        config,
        run=RunConfig(partitions=partitions, overlap="on" if overlap else "off", timeout=timeout_s),
    )
    ctx = init_distributed(device=config.device, timeout_s=timeout_s)
    try:
        results = BenchDistTrainer(config, ctx, skip_test=skip_test).fit()
        if not ctx.is_main:
            return None
        save_json(result_path, results)
        return results
    finally:
        shutdown()


def run_job(
    config: TrainConfig,
    partitions: Path,
    workers: int,
    *,
    overlap: bool,
    skip_test: bool,
    timeout_s: float,
    job_timeout_s: float | None,
) -> dict[str, Any]:
    """A fresh ``workers``-process job; rank 0's results."""
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as tmp:
        result_path = os.path.join(tmp, "rank0.json")
        args = (config, str(partitions), overlap, skip_test, timeout_s, result_path)
        launch_local(worker_main, args, workers, timeout_s=job_timeout_s)
        # Rank 0 wrote its results.
        with open(result_path) as fh:
            return json.load(fh)


# ========================================================================================== helpers
def parse_list(text: str, kind=str) -> list:
    return [kind(x.strip()) for x in text.split(",") if x.strip()]


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "=.-" else "_" for c in text)


def cores_available() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def threads_for(workers: int, cores: int) -> int:
    import numba

    return max(1, min(cores // workers, numba.config.NUMBA_NUM_THREADS))


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Eta:
    """Remaining-time estimate from the durations of finished runs with the same key (else the
    same coarse key, else all runs)."""

    def __init__(self) -> None:
        self.done: list[tuple[tuple, tuple, float]] = []
        self.start = time.perf_counter()

    def add(self, key: tuple, coarse: tuple, seconds: float) -> None:
        self.done.append((key, coarse, seconds))

    def estimate(self, key: tuple, coarse: tuple) -> float | None:
        for match in (lambda k, c: k == key, lambda k, c: c == coarse, lambda k, c: True):
            found = [s for k, c, s in self.done if match(k, c)]
            if found:
                return float(np.mean(found))
        return None

    def line(self, index: int, total: int, label: str, remaining: list[tuple[tuple, tuple]]) -> str:
        estimates = [self.estimate(k, c) for k, c in remaining]
        this = estimates[0] if estimates else None
        left = None if any(e is None for e in estimates) else sum(estimates)
        elapsed = time.perf_counter() - self.start
        return (
            f"[{index}/{total}] {label} | elapsed {fmt_s(elapsed)}, this run ~{fmt_s(this)}, "
            f"ETA ~{fmt_s(left)} for {len(remaining)} run(s) left"
            + (" (known after the first run)" if left is None else "")
        )


def ensure_partitions(
    work_dir: Path, spec: str, num_parts: int, method: str, seed: int, get_graph: Callable[[], Any]
) -> tuple[Path, bool]:
    """The partition directory of ``(spec, P, method, seed)`` in ``work_dir``, written unless a
    directory with the same recorded settings is already there. Returns ``(path, reused)``."""
    key = {"dataset": spec, "num_parts": num_parts, "method": method, "seed": seed}
    path = work_dir / f"{slug(spec)}__{method}-p{num_parts}-s{seed}"
    if is_partition_dir(path):
        try:
            meta = read_partitions(path, verify=False).meta
        except DatasetError as exc:
            print(f"  {path} is unusable ({exc}); re-partitioning", flush=True)
        else:
            if (
                meta["partitioner"].get("settings", {}).get("bench") == key
                and meta["num_parts"] == num_parts
            ):
                return path, True
            print(f"  {path} holds other settings; re-partitioning", flush=True)
    graph = get_graph()
    t0 = time.perf_counter()
    result = partition_graph(graph, PartitionConfig(num_parts=num_parts, method=method, seed=seed))
    part_s = time.perf_counter() - t0
    write_partitions(
        graph,
        result.assignment,
        path,
        method=result.method,
        settings={**result.settings, "bench": key},
        overwrite=True,
        num_parts=num_parts,
        seconds=result.seconds,
    )
    print(
        f"  partitioned {spec} into {num_parts} ({method}) in {part_s:.1f} s, written in "
        f"{time.perf_counter() - t0 - part_s:.1f} s -> {path}",
        flush=True,
    )
    return path, False


def remove_partition_dir(path: Path, work_dir: Path) -> None:
    path = Path(path)
    if is_partition_dir(path) and path.resolve().parent == work_dir.resolve():
        shutil.rmtree(path)
        print(f"  removed {path}", flush=True)


def partition_summary(path: Path) -> dict[str, Any]:
    meta = read_partitions(path, verify=False).meta
    m = meta["metrics"]
    return {
        "path": str(path),
        "method": meta["partitioner"]["method"],
        "num_parts": meta["num_parts"],
        "seconds": meta["partitioner"].get("seconds"),
        "metrics": m,
    }


def cut_fraction(metrics: dict[str, Any], num_edges: int) -> float | None:
    cut = metrics.get("cut_edges")
    return None if cut is None or not num_edges else cut / num_edges


def common_report(args: argparse.Namespace, command: str, load_before: tuple) -> dict[str, Any]:
    cores = cores_available()
    return {
        "command": command,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "args": vars(args),
        "launcher": "shardgnn.distributed.launch.launch_local",
        "machine": dict(
            machine_info(),
            cores=cores,
            loadavg_before=list(load_before),
            loadavg_now=list(os.getloadavg()),
        ),
    }


# ======================================================================================= epoch part
def epoch_plan(args) -> list[tuple[tuple[int, ...], int, str, bool]]:
    plan = []
    for fanouts in args.fanouts_list:
        for workers in args.workers_list:
            for method in ["random"] if workers == 1 else args.methods_list:
                for overlap in args.overlap_list:
                    plan.append((fanouts, workers, method, overlap))
    return plan


def summarize_epoch_run(results: dict[str, Any]) -> dict[str, Any]:
    epochs = results["epochs"]
    steady = epochs[1:] or epochs
    n_epochs = len(epochs)
    comm = results.get("comm", {})
    per_epoch = lambda stage: comm.get(stage, {}).get("bytes_recv", 0) / n_epochs  # noqa: E731
    train_comm = (
        (results.get("train_comm_per_epoch") or [])[1:] or results.get("train_comm_per_epoch") or []
    )
    train_fetch = (
        float(np.mean([e["fetch"]["bytes_recv"] for e in train_comm])) if train_comm else None
    )
    train_sample = (
        float(np.mean([e["sample"]["bytes_recv"] for e in train_comm])) if train_comm else None
    )
    return {
        "epoch_time_s": float(np.mean([e["time_s"] for e in steady])),
        "epoch0_time_s": epochs[0]["time_s"],
        "stages_s": {
            s: float(np.mean([e["stages"].get(s, 0.0) for e in steady])) for s in TIME_STAGES
        },
        "remote_feature_bytes_per_epoch": per_epoch("fetch"),
        "sample_bytes_per_epoch": per_epoch("sample"),
        "allreduce_bytes_per_epoch": per_epoch("allreduce"),
        "train_fetch_bytes_per_epoch": train_fetch,
        "train_sample_bytes_per_epoch": train_sample,
        "comm_time_s_per_epoch": {
            s: comm.get(s, {}).get("time_s", 0.0) / n_epochs for s in COMM_STAGES
        },
        "val_acc": steady[-1]["val_acc"],
        "val_acc_best": results.get("val_acc"),
        "loss": steady[-1]["loss"],
        "sampled_edges_per_s": results.get("sampled_edges_per_s"),
        "epochs_run": n_epochs,
    }


def epoch_tables(runs: list[dict[str, Any]], graph_info: dict[str, Any]) -> tuple[str, str, str]:
    ok = [r for r in runs if "error" not in r]
    mb = lambda v: "-" if v is None else f"{v / MB:,.1f}"  # noqa: E731
    headers = [
        "fanouts",
        "workers",
        "method",
        "overlap",
        "threads",
        "epoch s",
        "sample s",
        "fetch s",
        "compute s",
        "wait s",
        "eval s",
        "remote feat MB/ep",
        "train fetch MB/ep",
        "sample MB/ep",
        "allreduce MB/ep",
        "val acc",
    ]
    rows = []
    for r in runs:
        head = [
            ",".join(map(str, r["fanouts"])),
            r["workers"],
            r["method"] if r["workers"] > 1 else "- (1 part)",
            "on" if r["overlap"] else "off",
            r["threads"],
        ]
        if "error" in r:
            rows.append(head + ["FAILED"] + [""] * (len(headers) - 6))
            continue
        s = r["summary"]
        st = s["stages_s"]
        rows.append(
            head
            + [f"{s['epoch_time_s']:.2f}"]
            + [f"{st[k]:.2f}" for k in TIME_STAGES]
            + [
                mb(s["remote_feature_bytes_per_epoch"]),
                mb(s["train_fetch_bytes_per_epoch"]),
                mb(s["sample_bytes_per_epoch"]),
                mb(s["allreduce_bytes_per_epoch"]),
                f"{s['val_acc']:.4f}",
            ]
        )
    main = format_table(headers, rows)

    ratio_rows = []
    for fo, w, ov in sorted(
        {(tuple(r["fanouts"]), r["workers"], r["overlap"]) for r in ok if r["workers"] > 1}
    ):
        by = {
            r["method"]: r
            for r in ok
            if (tuple(r["fanouts"]), r["workers"], r["overlap"]) == (fo, w, ov)
        }
        if "metis" in by and "random" in by:
            m, rnd = by["metis"]["summary"], by["random"]["summary"]
            cut = {k: by[k].get("partition", {}).get("cut_fraction") for k in ("metis", "random")}
            ratio = lambda a, b: "-" if not b or a is None else f"{a / b:.3f}"  # noqa: E731
            ratio_rows.append(
                [
                    ",".join(map(str, fo)),
                    w,
                    "on" if ov else "off",
                    "-" if cut["random"] is None else f"{100 * cut['random']:.1f}",
                    "-" if cut["metis"] is None else f"{100 * cut['metis']:.1f}",
                    mb(rnd["remote_feature_bytes_per_epoch"]),
                    mb(m["remote_feature_bytes_per_epoch"]),
                    ratio(
                        m["remote_feature_bytes_per_epoch"], rnd["remote_feature_bytes_per_epoch"]
                    ),
                    ratio(m["train_fetch_bytes_per_epoch"], rnd["train_fetch_bytes_per_epoch"]),
                    ratio(m["sample_bytes_per_epoch"], rnd["sample_bytes_per_epoch"]),
                    ratio(m["epoch_time_s"], rnd["epoch_time_s"]),
                ]
            )
    ratios = (
        format_table(
            [
                "fanouts",
                "workers",
                "overlap",
                "random cut %",
                "metis cut %",
                "random feat MB/ep",
                "metis feat MB/ep",
                "metis/random feat bytes",
                "metis/random train fetch",
                "metis/random sample bytes",
                "metis/random epoch time",
            ],
            ratio_rows,
        )
        if ratio_rows
        else "(no METIS/random pair)"
    )

    ov_rows = []
    for fo, w, meth in sorted({(tuple(r["fanouts"]), r["workers"], r["method"]) for r in ok}):
        by = {
            r["overlap"]: r
            for r in ok
            if (tuple(r["fanouts"]), r["workers"], r["method"]) == (fo, w, meth)
        }
        if True in by and False in by:
            on, off = by[True]["summary"]["epoch_time_s"], by[False]["summary"]["epoch_time_s"]
            ov_rows.append(
                [
                    ",".join(map(str, fo)),
                    w,
                    meth if w > 1 else "- (1 part)",
                    f"{on:.2f}",
                    f"{off:.2f}",
                    f"{on / off:.3f}" if off else "-",
                ]
            )
    overlap = (
        format_table(
            ["fanouts", "workers", "method", "overlap on s", "overlap off s", "on/off time"],
            ov_rows,
        )
        if ov_rows
        else "(no overlap on/off pair)"
    )
    return main, ratios, overlap


def derived_epoch(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {"metis_over_random": [], "overlap_on_over_off": []}
    for fo, w, ov in sorted(
        {(tuple(r["fanouts"]), r["workers"], r["overlap"]) for r in ok if r["workers"] > 1}
    ):
        by = {
            r["method"]: r["summary"]
            for r in ok
            if (tuple(r["fanouts"]), r["workers"], r["overlap"]) == (fo, w, ov)
        }
        if "metis" in by and "random" in by:
            rec = {"fanouts": list(fo), "workers": w, "overlap": ov}
            for key in (
                "remote_feature_bytes_per_epoch",
                "train_fetch_bytes_per_epoch",
                "sample_bytes_per_epoch",
                "epoch_time_s",
            ):
                a, b = by["metis"][key], by["random"][key]
                rec[key + "_ratio"] = a / b if a is not None and b else None
            out["metis_over_random"].append(rec)
    for fo, w, meth in sorted({(tuple(r["fanouts"]), r["workers"], r["method"]) for r in ok}):
        by = {
            r["overlap"]: r["summary"]
            for r in ok
            if (tuple(r["fanouts"]), r["workers"], r["method"]) == (fo, w, meth)
        }
        if True in by and False in by:
            on, off = by[True]["epoch_time_s"], by[False]["epoch_time_s"]
            out["overlap_on_over_off"].append(
                {
                    "fanouts": list(fo),
                    "workers": w,
                    "method": meth,
                    "on_s": on,
                    "off_s": off,
                    "ratio": on / off if off else None,
                }
            )
    return out


def run_epoch_part(args: argparse.Namespace, base: dict[str, Any]) -> bool:
    epochs = args.epochs if args.epochs is not None else 2
    if epochs < 2:
        sys.exit(
            "--epochs must be >= 2 for --part epoch: epoch 0 includes JIT compilation, the steady "
            "state is epochs >= 1"
        )
    spec, work_dir, cores = (
        args.graph,
        Path(args.work_dir),
        cores_available() if args.cores is None else args.cores,
    )
    plan = epoch_plan(args)
    print(
        f"== epoch part: {spec}; {len(plan)} runs, {epochs} epochs each, {cores} cores, launcher "
        "shardgnn.distributed.launch.launch_local",
        flush=True,
    )

    graph_holder: dict[str, Any] = {}
    graph_info: dict[str, Any] = {"spec": spec}

    def get_graph():
        if "graph" not in graph_holder:
            t0 = time.perf_counter()
            g = load_dataset(spec, args.data_dir)
            graph_info.update(generate_s=time.perf_counter() - t0)
            print(
                f"  graph {spec}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, built in "
                f"{graph_info['generate_s']:.1f} s",
                flush=True,
            )
            graph_holder["graph"] = g
        return graph_holder["graph"]

    parts: dict[tuple[int, str], dict[str, Any]] = {}
    for workers, method in sorted({(w, m) for _, w, m, _ in plan}):
        t0 = time.perf_counter()
        path, reused = ensure_partitions(work_dir, spec, workers, method, args.seed, get_graph)
        info = partition_summary(path)
        info.update(reused=reused, prepare_s=time.perf_counter() - t0)
        parts[(workers, method)] = info
        if reused:
            print(f"  reusing {path}", flush=True)
    graph_holder.clear()  # free the global graph before the workers start
    meta = read_partitions(parts[next(iter(parts))]["path"], verify=False).meta
    graph_info.update(
        num_nodes=meta["num_nodes"],
        num_edges=meta["num_edges"],
        num_features=(meta.get("features") or {}).get("dim"),
        num_classes=(meta.get("labels") or {}).get("num_classes"),
        splits=meta.get("splits"),
    )
    for info in parts.values():
        info["cut_fraction"] = cut_fraction(info["metrics"], graph_info["num_edges"])

    report = dict(
        base,
        benchmark="distributed_epoch",
        graph=graph_info,
        epochs=epochs,
        cores=cores,
        partitions={f"{w}-{m}": info for (w, m), info in parts.items()},
        runs=[],
        complete=False,
    )
    eta = Eta()
    runs: list[dict[str, Any]] = []
    out_json = Path(args.epoch_out)
    out_md = out_json.with_suffix(".md")
    title = (
        f"Distributed GraphSAGE epoch on `{spec}` ({graph_info['num_nodes']:,} nodes, "
        f"{graph_info['num_edges']:,} edges): {len(args.fanouts_list[0])}-layer GraphSAGE, hidden "
        f"{args.hidden}, global batch {args.batch_size}, {cores} cores, max(1, {cores} // "
        f"workers) threads per worker; steady state = mean of epochs >= 1 of {epochs}"
    )

    def write(final: bool) -> tuple[str, str, str]:
        report.update(runs=runs, derived=derived_epoch(runs), complete=final)
        report["machine"]["loadavg_now"] = list(os.getloadavg())
        save_json(out_json, report)
        tables = epoch_tables(runs, graph_info)
        with atomic_open(out_md, "w") as fh:
            fh.write(
                f"{title}\n\n{tables[0]}\n\n**METIS vs random** (remote feature bytes per epoch; "
                f"edge cut = fraction of edges between parts)\n\n{tables[1]}\n\n**Overlap on vs "
                f"off** (steady epoch time)\n\n{tables[2]}\n\n{EPOCH_NOTES}\n\nCommand: "
                f"`{report['command']}`\n\nMachine: {cores} cores, "
                f"{report['machine'].get('platform')}, torch {report['machine'].get('torch')}; "
                f"launcher {report['launcher']}"
                + (
                    ""
                    if final
                    else "\n\n(incomplete: the benchmark is still running or stopped early)"
                )
                + "\n"
            )
        return tables

    keys = [((tuple(fo), w), (tuple(fo),)) for fo, w, _, _ in plan]
    for i, (fanouts, workers, method, overlap) in enumerate(plan):
        threads = threads_for(workers, cores)
        label = (
            f"fanouts={','.join(map(str, fanouts))} workers={workers} "
            f"method={method if workers > 1 else '-'} overlap={'on' if overlap else 'off'} "
            f"threads={threads}"
        )
        print(eta.line(i + 1, len(plan), label, keys[i:]), flush=True)
        config = TrainConfig(
            dataset=spec,
            mode="minibatch",
            model=ModelConfig(model="sage", hidden=args.hidden, num_layers=len(fanouts)),
            sampler=SamplerConfig(fanouts=fanouts, replace=False, num_threads=threads),
            optim=OptimConfig(epochs=epochs),
            batch_size=args.batch_size,
            threads=threads,
            seed=args.seed,
            progress=False,
        )
        record: dict[str, Any] = {
            "fanouts": list(fanouts),
            "workers": workers,
            "method": method,
            "overlap": overlap,
            "threads": threads,
            "partition": {k: parts[(workers, method)][k] for k in ("path", "cut_fraction")},
        }
        t0 = time.perf_counter()
        try:
            results = run_job(
                config,
                Path(parts[(workers, method)]["path"]),
                workers,
                overlap=overlap,
                skip_test=not args.eval_test,
                timeout_s=args.timeout,
                job_timeout_s=args.job_timeout,
            )
            record["summary"] = summarize_epoch_run(results)
            record["results"] = results
        except Exception as exc:  # noqa: BLE001 - recorded, the other runs go on
            record["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        record["wall_s"] = time.perf_counter() - t0
        eta.add(*keys[i], record["wall_s"])
        runs.append(record)
        if "error" in record:
            print(f"  FAILED after {record['wall_s']:.1f} s: {record['error']}", flush=True)
        else:
            s = record["summary"]
            print(
                f"  epoch {s['epoch_time_s']:.2f} s (epoch 0: {s['epoch0_time_s']:.2f} s), remote "
                f"features {s['remote_feature_bytes_per_epoch'] / MB:,.1f} MB/epoch, val acc "
                f"{s['val_acc']:.4f}; run took {record['wall_s']:.1f} s",
                flush=True,
            )
        write(final=False)

    tables = write(final=True)
    if args.cleanup:
        for info in parts.values():
            remove_partition_dir(Path(info["path"]), work_dir)
    print(
        f"\n{title}\n\n{tables[0]}\n\nMETIS vs random:\n\n{tables[1]}\n\nOverlap on vs "
        f"off:\n\n{tables[2]}\n\nwrote {out_json} and {out_md}",
        flush=True,
    )
    return all("error" not in r for r in runs)


EPOCH_NOTES = (
    "`epoch s`: training loop of the steady epoch(s), averaged over ranks; stage columns are "
    "seconds per rank (averaged): sample and fetch run in the prefetch thread when overlap is on, "
    "so they overlap compute and the columns do not add up to the epoch; `wait` is the main "
    "thread waiting for the next batch; `eval s` is the validation pass after the epoch (not in "
    "`epoch s`). Bytes are summed over ranks (one worker: none cross). `remote feat MB/ep` = "
    "comm[fetch].bytes_recv / epochs: remote feature rows + labels + id requests of training and "
    "the per-epoch validation pass; `train fetch MB/ep`: the training loop only (steady epochs). "
    "`sample MB/ep` likewise includes validation sampling; `allreduce MB/ep` is DDP's gradient "
    "traffic counted as a ring all-reduce. MB = 10^6 bytes. One worker runs once per (fanouts, "
    "overlap): with one part every partitioner gives the same partition. `val acc` is after the "
    "last epoch (a 2-epoch run is a timing run, not a trained model)."
)


# ==================================================================================== accuracy part
def run_accuracy_part(args: argparse.Namespace, base: dict[str, Any]) -> bool:
    epochs = args.epochs if args.epochs is not None else 100
    data_dir = Path(args.data_dir)
    out_json = Path(args.accuracy_out)
    out_md = out_json.with_suffix(".md")
    if not data_dir.is_dir():
        print(
            f"accuracy part skipped: data dir {data_dir} is absent ({ACC_DATASET} is needed; pass "
            "--data-dir)"
        )
        return True
    work_dir, cores = Path(args.work_dir), cores_available() if args.cores is None else args.cores
    seeds = list(range(args.seeds))
    workers_list = args.workers_list
    total = len(seeds) * len(workers_list)
    print(
        f"== accuracy part: {ACC_DATASET}, seeds {seeds}, workers {workers_list}, up to {epochs} "
        f"epochs (patience {ACC_PATIENCE}), {cores} cores, launcher "
        "shardgnn.distributed.launch.launch_local",
        flush=True,
    )
    report = dict(
        base,
        benchmark="distributed_accuracy",
        dataset=ACC_DATASET,
        epochs=epochs,
        cores=cores,
        setting={
            "model": "sage",
            "layers": 2,
            "fanouts": list(ACC_FANOUTS),
            "hidden": ACC_HIDDEN,
            "dropout": ACC_DROPOUT,
            "lr": ACC_LR,
            "weight_decay": args.weight_decay,
            "global_batch": ACC_BATCH,
            "patience": ACC_PATIENCE,
            "feature_norm": "row",
            "partitioner": "metis (random for 1 worker)",
            "overlap": True,
        },
        runs=[],
        complete=False,
    )
    runs: list[dict[str, Any]] = []
    previous: dict[tuple[int, int], dict[str, Any]] = {}
    if args.resume and out_json.is_file():
        # Keep the successful runs of an earlier invocation with the same output; redo the rest.
        for r in json.loads(out_json.read_text()).get("runs", []):
            if "error" not in r:
                previous[(r["seed"], r["workers"])] = r
        print(f"  --resume: {len(previous)} finished run(s) kept from {out_json}", flush=True)
    eta = Eta()
    plan_keys = [((w,), (w,)) for _ in seeds for w in workers_list]
    index = 0

    def write(final: bool) -> str:
        summary = accuracy_summary(runs, workers_list, args.target)
        report.update(runs=runs, summary=summary, complete=final)
        report["machine"]["loadavg_now"] = list(os.getloadavg())
        save_json(out_json, report)
        text = accuracy_markdown(runs, summary, report, epochs, final)
        with atomic_open(out_md, "w") as fh:
            fh.write(text)
        return text

    for seed in seeds:
        spec = f"{ACC_DATASET}:seed={seed}"
        holder: dict[str, Any] = {}

        def get_graph(spec=spec, holder=holder):
            if "graph" not in holder:
                t0 = time.perf_counter()
                holder["graph"] = load_dataset(spec, data_dir)
                print(f"  loaded {spec} in {time.perf_counter() - t0:.1f} s", flush=True)
            return holder["graph"]

        paths: dict[int, Path] = {}
        try:
            for workers in workers_list:
                if (seed, workers) in previous:
                    continue
                method = "random" if workers == 1 else "metis"
                paths[workers], reused = ensure_partitions(
                    work_dir, spec, workers, method, seed, get_graph
                )
                if reused:
                    print(f"  reusing {paths[workers]}", flush=True)
        except DatasetError as exc:
            print(f"accuracy part skipped: cannot load {spec} from {data_dir}: {exc}", flush=True)
            return True
        holder.clear()
        for workers in workers_list:
            index += 1
            if (seed, workers) in previous:
                runs.append(previous[(seed, workers)])
                print(
                    f"[{index}/{total}] {spec} workers={workers}: kept from the earlier run",
                    flush=True,
                )
                continue
            method = "random" if workers == 1 else "metis"
            threads = threads_for(workers, cores)
            label = f"{spec} workers={workers} method={method} threads={threads}"
            print(eta.line(index, total, label, plan_keys[index - 1 :]), flush=True)
            config = TrainConfig(
                dataset=spec,
                mode="minibatch",
                model=ModelConfig(
                    model="sage",
                    hidden=ACC_HIDDEN,
                    num_layers=len(ACC_FANOUTS),
                    dropout=ACC_DROPOUT,
                ),
                sampler=SamplerConfig(fanouts=ACC_FANOUTS, replace=False, num_threads=threads),
                optim=OptimConfig(
                    epochs=epochs, lr=ACC_LR, weight_decay=args.weight_decay, patience=ACC_PATIENCE
                ),
                batch_size=ACC_BATCH,
                feature_norm="row",
                seed=seed,
                threads=threads,
                data_dir=str(data_dir),
                progress=False,
            )
            record: dict[str, Any] = {
                "seed": seed,
                "workers": workers,
                "method": method,
                "threads": threads,
                "partition": str(paths[workers]),
            }
            t0 = time.perf_counter()
            try:
                results = run_job(
                    config,
                    paths[workers],
                    workers,
                    overlap=True,
                    skip_test=False,
                    timeout_s=args.timeout,
                    job_timeout_s=args.job_timeout,
                )
                record.update(
                    test_acc=results["test_acc"],
                    val_acc=results["val_acc"],
                    best_epoch=results["best_epoch"],
                    epochs_run=len(results["epochs"]),
                    mean_epoch_time_s=results["mean_epoch_time_s"],
                    results=results,
                )
            except Exception as exc:  # noqa: BLE001 - recorded, the other runs go on
                record["error"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            record["wall_s"] = time.perf_counter() - t0
            eta.add((workers,), (workers,), record["wall_s"])
            runs.append(record)
            if "error" in record:
                print(f"  FAILED after {record['wall_s']:.1f} s: {record['error']}", flush=True)
            else:
                print(
                    f"  test {100 * record['test_acc']:.2f}%, val {100 * record['val_acc']:.2f}% "
                    f"(best epoch {record['best_epoch']} of {record['epochs_run']}); run took "
                    f"{record['wall_s']:.1f} s",
                    flush=True,
                )
            write(final=False)
        if args.cleanup:
            for path in paths.values():
                remove_partition_dir(path, work_dir)

    text = write(final=True)
    print("\n" + text + f"\nwrote {out_json} and {out_md}", flush=True)
    return all("error" not in r for r in runs)


def accuracy_summary(
    runs: list[dict[str, Any]], workers_list: list[int], target: float
) -> list[dict[str, Any]]:
    ok = [r for r in runs if "error" not in r]
    base = {r["seed"]: 100 * r["test_acc"] for r in ok if r["workers"] == 1}
    base_mean = float(np.mean(list(base.values()))) if base else None
    out = []
    for w in workers_list:
        rs = [r for r in ok if r["workers"] == w]
        if not rs:
            continue
        acc = np.array([100 * r["test_acc"] for r in rs])
        paired = [100 * r["test_acc"] - base[r["seed"]] for r in rs if r["seed"] in base]
        diff = float(acc.mean()) - base_mean if base_mean is not None else None
        out.append(
            {
                "workers": w,
                "seeds": [r["seed"] for r in rs],
                "test_acc": acc.tolist(),
                "mean": float(acc.mean()),
                "std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
                "val_acc_mean": float(np.mean([100 * r["val_acc"] for r in rs])),
                "diff_vs_1_worker": diff,
                "paired_diffs": paired,
                "within_target": None if diff is None else abs(diff) <= target,
                "best_epoch_mean": float(np.mean([r["best_epoch"] for r in rs])),
                "epochs_run_mean": float(np.mean([r["epochs_run"] for r in rs])),
                "epoch_time_s_mean": float(np.mean([r["mean_epoch_time_s"] for r in rs])),
                "wall_s_mean": float(np.mean([r["wall_s"] for r in rs])),
            }
        )
    return out


def accuracy_markdown(runs, summary, report, epochs: int, final: bool) -> str:
    rows = []
    for s in summary:
        diff = s["diff_vs_1_worker"]
        rows.append(
            [
                s["workers"],
                len(s["seeds"]),
                f"{s['mean']:.2f} ± {s['std']:.2f}",
                "-" if diff is None else f"{diff:+.2f}",
                "-"
                if not s["paired_diffs"] or s["workers"] == 1
                else (
                    f"{np.mean(s['paired_diffs']):+.2f} ± "
                    f"{np.std(s['paired_diffs'], ddof=1) if len(s['paired_diffs']) > 1 else 0:.2f}"
                ),
                "-"
                if s["workers"] == 1 or s["within_target"] is None
                else ("yes" if s["within_target"] else "NO"),
                f"{s['val_acc_mean']:.2f}",
                f"{s['best_epoch_mean']:.1f}",
                f"{s['epochs_run_mean']:.1f}",
                f"{s['epoch_time_s_mean']:.2f}",
                f"{s['wall_s_mean']:.1f}",
            ]
        )
    table = format_table(
        [
            "workers",
            "seeds",
            "test acc % (mean ± std)",
            "Δ vs 1 worker",
            "paired Δ (mean ± std)",
            f"|Δ| <= {report['args']['target']}",
            "val acc %",
            "best epoch",
            "epochs run",
            "s/epoch",
            "s/run",
        ],
        rows,
    )
    per_seed = format_table(
        [
            "seed",
            "workers",
            "method",
            "test acc %",
            "val acc %",
            "best epoch",
            "epochs run",
            "s/run",
        ],
        [
            [r["seed"], r["workers"], r["method"]]
            + (
                ["FAILED", "", "", "", f"{r['wall_s']:.1f}"]
                if "error" in r
                else [
                    f"{100 * r['test_acc']:.2f}",
                    f"{100 * r['val_acc']:.2f}",
                    r["best_epoch"],
                    r["epochs_run"],
                    f"{r['wall_s']:.1f}",
                ]
            )
            for r in runs
        ],
    )
    st = report["setting"]
    title = (
        f"Distributed accuracy on {report['dataset']} (per-class split 20/30 per class from the "
        f"seed): GraphSAGE {st['layers']} layers, fanouts {','.join(map(str, st['fanouts']))}, "
        f"hidden {st['hidden']}, dropout {st['dropout']}, lr {st['lr']}, weight decay "
        f"{st['weight_decay']}, global batch {st['global_batch']}, up to {epochs} epochs with "
        f"patience {st['patience']}, row-normalised features; METIS partitions (random for 1 "
        f"worker); {report['cores']} cores, max(1, cores // workers) threads per worker"
    )
    notes = (
        "Mean ± sample std (ddof=1) over seeds; seed S sets the split, the partition seed and the "
        "training seed. Δ = mean(W workers) - mean(1 worker), in points; the paired Δ compares "
        "the same seed (same split). Test accuracy of the model with the best validation "
        "accuracy."
    )
    return (
        f"{title}\n\n{table}\n\nPer run:\n\n{per_seed}\n\n{notes}\n\nCommand: "
        f"`{report['command']}`\n\nMachine: {report['cores']} cores, "
        f"{report['machine'].get('platform')}, torch {report['machine'].get('torch')}; launcher "
        f"{report['launcher']}"
        + ("" if final else "\n\n(incomplete: the benchmark is still running or stopped early)")
        + "\n"
    )


# ============================================================================================ main
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--part", choices=("epoch", "accuracy", "all"), default="all", help="which part to run"
    )
    p.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (both parts)")
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs per run (default: 2 for the epoch part, 100 with patience 20 for accuracy)",
    )
    p.add_argument(
        "--cores",
        type=int,
        default=None,
        help="cores to share among the workers (default: the CPUs this process may use)",
    )
    p.add_argument("--work-dir", default="benchmarks/out/work", help="partition cache directory")
    p.add_argument(
        "--cleanup", action="store_true", help="delete the partition directories after use"
    )
    p.add_argument(
        "--timeout", type=float, default=1800.0, help="collective timeout (s) inside a job"
    )
    p.add_argument(
        "--job-timeout",
        type=float,
        default=None,
        help="wall-clock limit (s) per job (launch_local)",
    )
    p.add_argument(
        "--data-dir",
        default=str(REPO.parent / "shared" / "data"),
        help="dataset folder (coauthor-physics for the accuracy part)",
    )
    g = p.add_argument_group("epoch part")
    g.add_argument("--graph", default=DEFAULT_GRAPH, help="dataset spec of the graph")
    g.add_argument(
        "--fanouts",
        nargs="+",
        default=["10,10,10", "15,10,5"],
        help="one or more comma-separated fanout lists (output layer first); layers = fanouts",
    )
    g.add_argument(
        "--methods", default="random,metis", help="comma-separated partitioners for >= 2 workers"
    )
    g.add_argument("--overlap", default="on,off", help="comma-separated: on, off")
    g.add_argument("--hidden", type=int, default=256, help="hidden width")
    g.add_argument(
        "--batch-size", type=int, default=1024, help="global training batch (seed nodes)"
    )
    g.add_argument("--seed", type=int, default=0, help="training and partition seed")
    g.add_argument(
        "--eval-test", action="store_true", help="also run the final test-set evaluation"
    )
    g.add_argument(
        "--epoch-out", default="benchmarks/out/distributed_epoch.json", help="JSON (.md next to it)"
    )
    a = p.add_argument_group("accuracy part")
    a.add_argument(
        "--seeds", type=int, default=3, help="seeds 0 .. N-1 (each its own split and partition)"
    )
    a.add_argument(
        "--resume",
        action="store_true",
        help=(
            "keep the successful runs already in --accuracy-out and run only the missing or "
            "failed ones"
        ),
    )
    a.add_argument("--weight-decay", type=float, default=0.0, help="Adam weight decay")
    a.add_argument("--target", type=float, default=0.5, help="allowed |Δ| to one worker, in points")
    a.add_argument(
        "--accuracy-out",
        default="benchmarks/out/distributed_accuracy.json",
        help="JSON (.md next to it)",
    )
    args = p.parse_args(argv)
    try:
        args.workers_list = parse_list(args.workers, int)
        args.fanouts_list = [tuple(parse_list(f, int)) for f in args.fanouts]
    except ValueError as exc:
        p.error(f"bad integer list: {exc}")
    args.methods_list = parse_list(args.methods)
    overlaps = parse_list(args.overlap)
    if not args.workers_list or any(w < 1 for w in args.workers_list):
        p.error("--workers must list counts >= 1")
    if any(o not in ("on", "off") for o in overlaps) or not overlaps:
        p.error("--overlap takes on, off or on,off")
    args.overlap_list = [o == "on" for o in dict.fromkeys(overlaps)]
    bad = [m for m in args.methods_list if m not in ("random", "metis", "ldg", "fennel")]
    if bad or not args.methods_list:
        p.error(f"--methods: unknown {bad}; use random, metis, ldg or fennel")
    if args.seeds < 1:
        p.error("--seeds must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = " ".join(
        shlex.quote(a) for a in [sys.executable, *(sys.argv if argv is None else [__file__, *argv])]
    )
    base = common_report(args, command, os.getloadavg())
    ok = True
    if args.part in ("epoch", "all"):
        ok &= run_epoch_part(args, base)
    if args.part in ("accuracy", "all"):
        ok &= run_accuracy_part(args, dict(base, machine=dict(base["machine"])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
