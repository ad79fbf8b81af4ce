"""Distributed full-graph training: bytes per epoch of each SpMM variant, epoch time against
single-process baselines, and accuracy under low-bit communication and bounded staleness.

Two parts (``--part bytes|accuracy``); every distributed run is a fresh job of ``P`` local
processes (``shardgnn.distributed.launch.launch_local``), one
``shardgnn.train.fullgraph.DistFullNodeSteps`` per rank, on METIS partitions (written once into
``--work-dir`` and reused while their recorded settings match).

**bytes** — GCN, 2 layers, hidden 256, for every dataset x ``--workers`` x variant (``1d``,
``1d-sparse``, ``1.5d`` with c = 2 where 4 divides P... i.e. c^2 <= P, and ``2d`` on the most
square grid and ``3d`` on a 1 x 2 x 2 or 2 x 2 x 2 grid where P is not prime) on ``--method``
partitions: ``--epochs`` epochs
(default 3; the steady state is the mean over epochs >= 1). Per run: the SpMM bytes of the training
step per epoch (features forward + feature gradients backward, summed over ranks, and the most one
rank sent / received), weight all-reduce bytes, epoch time split into communication and compute. In
the same invocation and on the same cores, two single-process baselines train the same model
full-batch: shardgnn's own single-process training (``mode=full``) and PyG's ``GCNConv``
(``cached=True``, a ``torch.sparse_csr`` adjacency, which is PyG's fastest CPU path without
torch-sparse). Ratios: each variant's bytes over ``1d``'s per (dataset, P). What ``shardgnn plan``
predicts for these runs: ``benchmarks/bench_plan.py`` on the results file.

**accuracy** — GCN, 2 layers, hidden 256, dropout 0.5, Adam lr 0.01, weight decay 5e-4, ``--epochs``
(default 200) epochs, ``--feature-norm`` (default row) features, ``1d-sparse`` on P = ``--workers``
METIS parts: bits 32/8/4/2/1 at staleness 0, staleness 1/2 at 32 bits, and 1 bit with staleness
1. Test accuracy at the best validation epoch, the final validation accuracy, SpMM bytes per
epoch, and the difference to the fp32 synchronous run (target: 1 bit and staleness 1 within 1
point; 1 bit moves >= 20x fewer bytes).

Outputs (atomic): ``--out`` JSON and the Markdown table beside it, rewritten after every run.

    python benchmarks/bench_fullgraph.py --part bytes --datasets coauthor-physics amazon-computers
    python benchmarks/bench_fullgraph.py --part bytes \
        --datasets synthetic:nodes=1000000,degree=20,features=100,classes=16 \
        --out benchmarks/out/fullgraph_bytes_1m.json
    python benchmarks/bench_fullgraph.py --part bytes --workers 4,8 --method random \
        --datasets coauthor-physics synthetic:nodes=20000,degree=40,features=64,classes=8 \
        --out benchmarks/out/fullgraph_bytes_2d.json
    python benchmarks/bench_fullgraph.py --part accuracy \
        --datasets coauthor-physics amazon-computers
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.launch import launch_local
from shardgnn.fullgraph.config import GRID_VARIANTS
from shardgnn.fullgraph.shard import grid_of
from shardgnn.fullgraph.spmm import FullGraphConfig
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.features import normalize_features
from shardgnn.nn.models import ModelConfig
from shardgnn.partition.format import read_partitions
from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
from shardgnn.train.fullgraph import DistFullNodeSteps
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.progress import format_table
from shardgnn.train.single import run_training

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_distributed import common_report, cores_available, ensure_partitions, threads_for  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MB = 1e6


# ========================================================================================== workers
class BenchFullGraphTrainer(DistFullNodeSteps):
    """Counts the SpMM bytes of every training step (not the validation pass) per rank."""

    def __init__(self, *args, **kwargs):
        self.step_bytes: list[tuple[int, int]] = []
        super().__init__(*args, **kwargs)

    def _spmm_bytes(self) -> tuple[int, int]:
        stats = [c.stats["spmm"] for c in self.comms if "spmm" in c.stats]
        return sum(s.bytes_sent for s in stats), sum(s.bytes_recv for s in stats)

    def train_epoch(self, run):
        before = self._spmm_bytes()
        out = super().train_epoch(run)
        after = self._spmm_bytes()
        self.step_bytes.append((after[0] - before[0], after[1] - before[1]))
        return out

    def fit(self) -> dict[str, Any]:
        results = TrainingLoop(self.config, self).run()
        mine = torch.tensor(self.step_bytes, dtype=torch.float64)
        gathered = [torch.zeros_like(mine) for _ in range(self.ctx.world_size)]
        torch.distributed.all_gather(gathered, mine, group=self.ctx.group)  # raw: not counted
        per_rank = torch.stack(gathered)  # [P, epochs, 2]
        results["train_spmm_bytes"] = {
            "sent_per_epoch": per_rank[:, :, 0].sum(0).tolist(),
            "max_rank_sent_per_epoch": per_rank[:, :, 0].max(0).values.tolist(),
            "max_rank_recv_per_epoch": per_rank[:, :, 1].max(0).values.tolist(),
        }
        return results


def worker_main(config: TrainConfig, partitions: str, timeout_s: float, result_path: str) -> None:
    from shardgnn.distributed.context import init_distributed, shutdown

    config = dataclasses.replace(config, run=RunConfig(partitions=partitions, timeout=timeout_s))
    ctx = init_distributed(device="cpu", timeout_s=timeout_s)
    try:
        results = BenchFullGraphTrainer(config, ctx).fit()
        if ctx.is_main:
            save_json(result_path, results)
    finally:
        shutdown()


def run_job(
    config: TrainConfig, partitions: Path, workers: int, timeout_s: float
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_fullgraph_") as tmp:
        result_path = os.path.join(tmp, "rank0.json")
        launch_local(
            worker_main,
            (config, str(partitions), timeout_s, result_path),
            workers,
            timeout_s=max(600.0, 20 * timeout_s),
        )
        with open(result_path) as fh:
            return json.load(fh)


# ======================================================================================== baselines
def pyg_epoch_time(graph, config: TrainConfig, epochs: int) -> dict[str, float]:
    """Single-process PyG ``GCNConv`` full-batch training of the same model; steady epoch
    seconds."""
    import warnings

    from torch.nn import functional as F
    from torch_geometric.nn import GCNConv

    from shardgnn.nn.functional import to_sparse_if_sparse

    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    torch.manual_seed(config.seed)
    n = graph.num_nodes
    x = to_sparse_if_sparse(torch.from_numpy(normalize_features(graph.x, config.feature_norm)))
    y = torch.from_numpy(graph.y.astype(np.int64))
    dst = np.repeat(np.arange(n), np.diff(graph.indptr))
    # adj_t[dst, src]: PyG's convention for a sparse adjacency (rows aggregate).
    adj_t = torch.sparse_csr_tensor(
        torch.from_numpy(graph.indptr.astype(np.int64)),
        torch.from_numpy(graph.indices.astype(np.int64)),
        torch.ones(len(dst)),
        (n, n),
    )
    hidden, classes = config.model.hidden, graph.num_classes
    convs = torch.nn.ModuleList(
        [GCNConv(graph.num_features, hidden, cached=True), GCNConv(hidden, classes, cached=True)]
    )
    opt = torch.optim.Adam(
        convs.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay
    )
    train = torch.from_numpy(graph.train_idx)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        opt.zero_grad()
        h = F.dropout(F.relu(convs[0](x, adj_t)), 0.5, True)
        loss = F.cross_entropy(convs[1](h, adj_t)[train], y[train])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return {"epoch_time_s": float(np.mean(times[1:] or times)), "epoch0_time_s": times[0]}


def ours_single_epoch_time(graph, config: TrainConfig) -> dict[str, float]:
    results = run_training(config, graph)
    times = [e["time_s"] for e in results["epochs"]]
    return {"epoch_time_s": float(np.mean(times[1:] or times)), "epoch0_time_s": times[0]}


# ============================================================================================ parts
def base_config(
    spec: str, args, full: FullGraphConfig, threads: int, workers: int | None
) -> TrainConfig:
    """The benchmark's model and schedule; ``workers`` None: one process (the baseline)."""
    return TrainConfig(
        dataset=spec,
        mode="full",
        model=ModelConfig(model="gcn", hidden=256, num_layers=2, dropout=0.5),
        optim=OptimConfig(epochs=args.epochs, lr=0.01, weight_decay=5e-4),
        full=full,
        feature_norm=args.feature_norm,
        seed=args.seed,
        progress=False,
        threads=threads,
        data_dir=args.data_dir,
        run=RunConfig(workers=workers),
    )


def variants_for(workers: int) -> list[FullGraphConfig]:
    out = [FullGraphConfig(spmm="1d"), FullGraphConfig(spmm="1d-sparse")]
    if workers >= 4 and workers % 2 == 0:
        out.append(FullGraphConfig(spmm="1.5d", replication=2))
    if any(workers % r == 0 for r in range(2, int(workers**0.5) + 1)):
        out += [FullGraphConfig(spmm="2d"), FullGraphConfig(spmm="3d")]
    return out


def grid_label(full: FullGraphConfig, workers: int) -> str | None:
    """``RxC[xL]`` of a 2D/3D run's process grid (None for the other variants)."""
    return grid_of(full, workers).shape if full.spmm in GRID_VARIANTS else None


def steady(values: list[float]) -> float:
    return float(np.mean(values[1:] or values))


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    epochs = results["epochs"]
    tb = results["train_spmm_bytes"]
    n = len(epochs)
    return {
        "spmm_bytes_per_epoch": steady(tb["sent_per_epoch"]),
        "max_rank_sent_per_epoch": steady(tb["max_rank_sent_per_epoch"]),
        "max_rank_recv_per_epoch": steady(tb["max_rank_recv_per_epoch"]),
        "allreduce_bytes_per_epoch": results["comm"].get("allreduce", {}).get("bytes_sent", 0) / n,
        "epoch_time_s": steady([e["time_s"] for e in epochs]),
        "comm_s": steady([e["stages"].get("comm", 0.0) for e in epochs]),
        "compute_s": steady([e["stages"].get("compute", 0.0) for e in epochs]),
        "val_acc": epochs[-1]["val_acc"],
        "test_acc": results["test_acc"],
        "best_epoch": results["best_epoch"],
        "loss": epochs[-1]["loss"],
    }


def write_report(out: Path, report: dict[str, Any], table: str) -> None:
    save_json(out, report)
    with atomic_open(out.with_suffix(".md"), "w") as fh:
        fh.write(f"<!-- written by: {report['command']} -->\n\n{table}\n")


def run_bytes(args, report: dict[str, Any]) -> str:
    cores = cores_available()
    runs, baselines = report.setdefault("runs", []), report.setdefault("baselines", {})
    table = ""

    def render() -> str:
        rows = []
        for r in runs:
            s = r.get("summary")
            head = [
                r["dataset"][:40],
                r["workers"],
                r["spmm"]
                + (f" c={r['replication']}" if r["replication"] > 1 else "")
                + (f" {r['grid']}" if r.get("grid") else ""),
            ]
            if s is None:
                rows.append(head + ["FAILED"] + [""] * 8)
                continue
            ref = next(
                (
                    x
                    for x in runs
                    if x["dataset"] == r["dataset"]
                    and x["workers"] == r["workers"]
                    and x["spmm"] == "1d"
                    and x.get("summary")
                ),
                None,
            )
            ratio = (
                s["spmm_bytes_per_epoch"] / ref["summary"]["spmm_bytes_per_epoch"] if ref else None
            )
            base = baselines.get(r["dataset"], {})
            rows.append(
                head
                + [
                    f"{s['spmm_bytes_per_epoch'] / MB:,.1f}",
                    "-" if ratio is None else f"{ratio:.3f}",
                    f"{s['max_rank_sent_per_epoch'] / MB:,.1f}",
                    f"{s['max_rank_recv_per_epoch'] / MB:,.1f}",
                    f"{s['epoch_time_s']:.3f}",
                    f"{s['comm_s']:.3f}",
                    f"{s['compute_s']:.3f}",
                    "-" if "pyg" not in base else f"{base['pyg']['epoch_time_s']:.3f}",
                    "-" if "ours" not in base else f"{base['ours']['epoch_time_s']:.3f}",
                ]
            )
        return format_table(
            [
                "dataset",
                "P",
                "spmm",
                "SpMM MB/epoch",
                "vs 1d",
                "max sent MB (1 rank)",
                "max recv MB (1 rank)",
                "epoch s",
                "comm s",
                "compute s",
                "PyG GCNConv 1-proc s",
                "shardgnn 1-proc s",
            ],
            rows,
        )

    for spec in args.datasets:
        # Loaded once, and only if a partition has to be written.
        get_graph = functools.cache(functools.partial(load_dataset, spec, args.data_dir))

        for workers in args.workers:
            path, _ = ensure_partitions(
                Path(args.work_dir), spec, workers, args.method, args.seed, get_graph
            )
            meta = read_partitions(path, verify=False).meta
            for full in variants_for(workers):
                label = f"{spec} P={workers} {full.spmm} c={full.replication}"
                print(f"== {label}", flush=True)
                config = base_config(spec, args, full, threads_for(workers, cores), workers)
                record = {
                    "dataset": spec,
                    "workers": workers,
                    "spmm": full.spmm,
                    "replication": full.replication,
                    "grid": grid_label(full, workers),
                    "method": args.method,
                    "comm_volume_rows": meta["metrics"]["comm_volume"],
                    "threads": config.threads,
                }
                try:
                    t0 = time.perf_counter()
                    results = run_job(config, path, workers, args.timeout)
                    record.update(
                        summary=summarize(results), results=results, wall_s=time.perf_counter() - t0
                    )
                    s = record["summary"]
                    print(
                        f"   {s['spmm_bytes_per_epoch'] / MB:,.1f} MB/epoch, epoch "
                        f"{s['epoch_time_s']:.3f} s (comm {s['comm_s']:.3f} s)",
                        flush=True,
                    )
                except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                    record["error"] = repr(exc)
                    print(f"   FAILED: {exc!r}", flush=True)
                runs.append(record)
                table = render()
                write_report(args.out, report, table)
        g = get_graph()
        single = base_config(spec, args, FullGraphConfig(), cores, None)
        torch.set_num_threads(cores)
        print(f"== {spec}: single-process baselines ({cores} threads)", flush=True)
        baselines[spec] = {
            "pyg": pyg_epoch_time(g, single, args.epochs),
            "ours": ours_single_epoch_time(g, single),
        }
        print(
            f"   PyG {baselines[spec]['pyg']['epoch_time_s']:.3f} s, shardgnn "
            f"{baselines[spec]['ours']['epoch_time_s']:.3f} s",
            flush=True,
        )
        table = render()
        write_report(args.out, report, table)
        get_graph.cache_clear()  # free this dataset before the next one
    return table


def parse_setting(item: str) -> tuple[int, int, bool]:
    """``bits:staleness`` or ``bits:staleness:ef`` (error feedback)."""
    parts = item.split(":")
    return int(parts[0]), int(parts[1]), len(parts) > 2 and parts[2] == "ef"


def run_accuracy(args, report: dict[str, Any]) -> str:
    cores = cores_available()
    runs = report.setdefault("runs", [])
    settings = [parse_setting(item) for item in args.settings.split(",")]
    seeds = [int(v) for v in args.seeds.split(",")] if args.seeds else [args.seed]

    def key(r):
        return (
            r["dataset"],
            r["workers"],
            r["bits"],
            r["staleness"],
            r.get("error_feedback", False),
        )

    def render() -> str:
        groups: dict[tuple, list] = {}
        for r in runs:
            groups.setdefault(key(r), []).append(r)
        rows = []
        for k, group in groups.items():
            head = [k[0][:30], k[1], k[2], k[3], "on" if k[4] else "off"]
            done = [r for r in group if "summary" in r]
            if not done:
                rows.append(head + ["FAILED", "", "", "", "", ""])
                continue
            reference = {
                r.get("seed", 0): r["summary"]
                for r in groups.get((k[0], k[1], 32, 0, False), [])
                if "summary" in r
            }
            acc = 100 * np.array([r["summary"]["test_acc"] for r in done])
            deltas = 100 * np.array(
                [
                    r["summary"]["test_acc"] - reference[r.get("seed", 0)]["test_acc"]
                    for r in done
                    if r.get("seed", 0) in reference
                ]
            )
            mb = np.mean([r["summary"]["spmm_bytes_per_epoch"] for r in done])
            ref_mb = np.mean([s["spmm_bytes_per_epoch"] for s in reference.values()] or [np.nan])
            residual = np.mean([r["results"].get("residual_mb", 0.0) for r in done])
            rows.append(
                head
                + [
                    len(done),
                    f"{acc.mean():.2f} ± {acc.std():.2f}",
                    "-" if not deltas.size else f"{deltas.mean():+.2f} ± {deltas.std():.2f}",
                    f"{mb / MB:,.2f}",
                    "-" if np.isnan(ref_mb) else f"{ref_mb / mb:.1f}x",
                    f"{residual:.1f}",
                ]
            )
        return format_table(
            [
                "dataset",
                "P",
                "bits",
                "staleness",
                "error feedback",
                "seeds",
                "test acc %",
                "vs fp32 sync (paired)",
                "SpMM MB/epoch",
                "fewer bytes than fp32",
                "residual MB",
            ],
            rows,
        )

    table = ""
    for spec in args.datasets:
        get_graph = functools.cache(functools.partial(load_dataset, spec, args.data_dir))
        for workers in args.workers:
            path, _ = ensure_partitions(
                Path(args.work_dir),
                spec,
                workers,
                "metis",
                args.seed,
                get_graph,
            )
            for seed in seeds:
                for bits, staleness, feedback in settings:
                    full = FullGraphConfig(spmm="1d-sparse", bits=bits, staleness=staleness)
                    print(
                        f"== {spec} P={workers} bits={bits} staleness={staleness} "
                        f"error feedback={feedback} seed={seed}",
                        flush=True,
                    )
                    config = dataclasses.replace(
                        base_config(spec, args, full, threads_for(workers, cores), workers),
                        seed=seed,
                        error_feedback=feedback,
                    )
                    record = {
                        "dataset": spec,
                        "workers": workers,
                        "bits": bits,
                        "staleness": staleness,
                        "error_feedback": feedback,
                        "seed": seed,
                    }
                    try:
                        results = run_job(config, path, workers, args.timeout)
                        record.update(summary=summarize(results), results=results)
                        print(f"   test {100 * record['summary']['test_acc']:.2f}%", flush=True)
                    except Exception as exc:  # noqa: BLE001
                        record["error"] = repr(exc)
                        print(f"   FAILED: {exc!r}", flush=True)
                    runs.append(record)
                    table = render()
                    write_report(args.out, report, table)
        get_graph.cache_clear()
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("bytes", "accuracy"), required=True)
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=["coauthor-physics", "amazon-computers"],
        help="dataset specs, space-separated (a spec may hold commas)",
    )
    parser.add_argument(
        "--workers", default=None, help="comma-separated P values (bytes: 2,4; accuracy: 2)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="bytes: 3, accuracy: 200")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--method", default="metis", choices=("metis", "random"), help="bytes part: partitioner"
    )
    parser.add_argument(
        "--settings",
        default="32:0,8:0,4:0,2:0,1:0,32:1,32:2,1:1",
        help="accuracy part: comma-separated bits:staleness pairs, bits:staleness:ef with error "
        "feedback (32:0 is the reference)",
    )
    parser.add_argument(
        "--seeds", default=None, help="accuracy part: comma-separated model seeds (default --seed)"
    )
    parser.add_argument(
        "--feature-norm",
        default="row",
        choices=("none", "row"),
        help=(
            "feature preprocessing (row suits bag-of-words features; amazon-* train better with "
            "none)"
        ),
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="collective timeout (s)")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work-dir", default=str(REPO / "benchmarks" / "out" / "work"))
    parser.add_argument(
        "--out", default=None, help="JSON output (default: benchmarks/out/fullgraph_<part>.json)"
    )
    args = parser.parse_args(argv)
    args.workers = [
        int(w) for w in (args.workers or ("2,4" if args.part == "bytes" else "2")).split(",")
    ]
    args.epochs = args.epochs or (3 if args.part == "bytes" else 200)
    args.out = Path(args.out or REPO / "benchmarks" / "out" / f"fullgraph_{args.part}.json")
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/bench_fullgraph.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    report = common_report(args, command, tuple(os.getloadavg()))
    report["args"] = {k: str(v) for k, v in vars(args).items()}
    table = run_bytes(args, report) if args.part == "bytes" else run_accuracy(args, report)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
