r"""``--dependencies communicate``, ``cache`` and ``hybrid`` side by side (issue 32: NeutronStar's
hybrid against both pure choices), on one machine's loopback and over rate-limited links.

Per link (``--links``: ``host``, or a rate such as ``500mbit`` for a network namespace whose
loopback a token-bucket filter limits, as in ``bench_plan_time.py``): ``shardgnn plan
--calibrate`` measures the machine's rates there (what ``hybrid`` prices with, ``--plan-rates``);
then per worker count, on one METIS partition, GCN full-graph training (``--layers``, default 2;
hidden 256) with each ``--dependencies``: steady epoch time (epochs 2 onwards, training step and
evaluation), the bytes exchanged per epoch (training step and the evaluation's forward pass),
the remote rows computed and received per layer, the set-up's bytes, the busiest worker's peak
memory and the test accuracy (the three must agree: each is exact); beside each, the training
step ``shardgnn plan`` predicts for it on the same partition with the same rates
(:func:`~shardgnn.fullgraph.plan.partition_costs`; ``--predict`` adds the predictions to the runs
of an earlier ``--out`` from its ``--work-dir``).

    python benchmarks/bench_dependencies.py --datasets coauthor-physics --workers 2,4 \
        --links host,500mbit --out benchmarks/out/dependencies.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_plan_time import SHARDGNN, link, run  # noqa: E402
from shardgnn.atomic import atomic_open, save_json  # noqa: E402

MODES = ("communicate", "cache", "hybrid")


def measure(results: Path) -> dict[str, Any]:
    r = json.loads(results.read_text())
    epochs = r["epochs"]
    steady = [e["time_s"] + e["stages"].get("eval", 0.0) for e in epochs[1:]]
    comm = r["comm"]
    spmm = comm.get("spmm", {})
    return {
        "epoch_s": float(np.mean(steady)),
        "step_s": float(np.mean([e["time_s"] for e in epochs[1:]])),
        "spmm_mb_per_epoch": spmm.get("bytes_sent", 0) / 1e6 / len(epochs),
        "spmm_s_per_epoch": spmm.get("time_s", 0.0) / len(epochs),
        "setup_mb": comm.get("setup", {}).get("bytes_sent", 0) / 1e6,
        "peak_memory_mb": max(r["peak_memory_mb"]["rss"]),  # the busiest worker
        "test_acc": r["test_acc"],
        "dependencies": r["dependencies"],
    }


def predict(work: Path, tag: str, rate: str, p: int, layers: int, hidden: int) -> dict[str, Any]:
    """The plan's training step of each ``--dependencies`` on the partition the runs used, with
    the rates they priced with (GCN, all workers on this machine)."""
    from shardgnn.fullgraph.config import PlanConfig
    from shardgnn.fullgraph.plan import partition_costs
    from shardgnn.fullgraph.rates import read_rates
    from shardgnn.partition.format import read_partitions

    rates_path = work / f"{tag}-{rate}-rates.json"
    pset = read_partitions(work / f"{tag}-p{p}", verify=False)
    config = PlanConfig(
        model="gcn", hidden=hidden, layers=layers, workers=(p,), workers_per_host=p,
        rates=str(rates_path),
    )  # fmt: skip
    out_dim = pset.load_part(0, mmap=True, verify=False).num_classes
    costs = partition_costs(pset, config, out_dim, read_rates(str(rates_path), "--rates"))
    return {
        c.config.dependencies: {
            "predicted_step_s": c.epoch_s,
            "predicted_mb": c.bytes_per_epoch / 1e6,
        }
        for c in costs
        if c.strategy == "1d-sparse"
    }


def add_predictions(report: dict[str, Any], work: Path, layers: int, hidden: int) -> None:
    for r in report["runs"]:
        tag = re.sub(r"[^A-Za-z0-9]+", "_", r["dataset"])
        r.update(predict(work, tag, r["link"], r["workers"], layers, hidden)[r["mode"]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["coauthor-physics"])
    parser.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data")
    )
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--links", default="host,500mbit")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--work-dir", default="/tmp/bench_dependencies")
    parser.add_argument("--out", default="benchmarks/out/dependencies.json")
    parser.add_argument("--table", action="store_true", help="only write --out's table")
    parser.add_argument(
        "--predict", action="store_true", help="add the plan's predictions to --out's runs"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.table or args.predict:
        report = json.loads(out.read_text())
        if args.predict:
            add_predictions(report, Path(args.work_dir), args.layers, args.hidden)
            save_json(out, report)
        write_table(out, report)
        return 0
    workers = [int(p) for p in args.workers.split(",")]
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"command": " ".join([sys.executable, *sys.argv]), "runs": []}
    data = ["--data-dir", args.data_dir]
    model = ["--model", "gcn", "--hidden", str(args.hidden), "--layers", str(args.layers)]
    for dataset in args.datasets:
        tag = re.sub(r"[^A-Za-z0-9]+", "_", dataset)
        for p in workers:
            parts = work / f"{tag}-p{p}"
            if not (parts / "meta.json").exists():
                run(
                    SHARDGNN + ["partition", dataset, *data, "--parts", str(p), "--method", "metis"]
                    + ["--out", str(parts), "--overwrite", "--quiet"],
                    work / f"{tag}-p{p}.log",
                )  # fmt: skip
        for rate in [r for r in args.links.split(",") if r]:
            with link(rate, f"sgdeps{os.getpid()}") as prefix:
                rates = work / f"{tag}-{rate}-rates.json"
                run(
                    prefix + SHARDGNN + ["plan", dataset, *data, *model, "--calibrate"]
                    + ["--strategies", "full", "--workers", args.workers]
                    + ["--workers-per-host", str(max(workers)), "--out", str(rates)],
                    work / f"{tag}-{rate}-calibrate.log",
                )  # fmt: skip
                for p in workers:
                    for mode in MODES:
                        results = work / f"{tag}-{rate}-p{p}-{mode}.json"
                        start = time.perf_counter()
                        run(
                            prefix + SHARDGNN + ["train", dataset, *data, "--mode", "full"]
                            + model + ["--epochs", str(args.epochs), "--quiet"]
                            + ["--partitions", str(work / f"{tag}-p{p}"), "--workers", str(p)]
                            + ["--dependencies", mode, "--results", str(results)]
                            + (["--plan-rates", str(rates)] if mode == "hybrid" else []),
                            results.with_suffix(".log"),
                        )  # fmt: skip
                        row = {
                            "dataset": dataset, "link": rate, "workers": p, "mode": mode,
                            **measure(results), "run_s": time.perf_counter() - start,
                            **predict(work, tag, rate, p, args.layers, args.hidden)[mode],
                        }  # fmt: skip
                        report["runs"].append(row)
                        print(
                            f"{dataset} {rate} P={p} {mode}: {row['epoch_s']:.3f} s/epoch, "
                            f"{row['spmm_mb_per_epoch']:.1f} MB/epoch, {row['dependencies']}",
                            flush=True,
                        )
                        save_json(out, report)
    write_table(out, report)
    return 0


def write_table(out: Path, report: dict[str, Any]) -> None:
    lines = [
        "| dataset | link | P | dependencies | epoch s | step s | plan's step s (x measured) | "
        "MB exchanged / epoch | remote rows computed here (per layer) | received (per layer) | "
        "set-up MB | peak MB | test acc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        deps = r["dependencies"]
        planned = "-"
        if r.get("predicted_step_s") is not None:
            planned = f"{r['predicted_step_s']:.3f} ({r['predicted_step_s'] / r['step_s']:.2f}x)"
        if isinstance(r["peak_memory_mb"], dict):  # runs recorded before the busiest was taken
            r["peak_memory_mb"] = max(r["peak_memory_mb"]["rss"])
        lines.append(
            f"| {r['dataset']} | {r['link']} | {r['workers']} | {r['mode']} | "
            f"{r['epoch_s']:.3f} | {r['step_s']:.3f} | {planned} | {r['spmm_mb_per_epoch']:.1f} | "
            f"{deps.get('recomputed_rows', '-')} | {deps.get('received_rows', '-')} | "
            f"{r['setup_mb']:.1f} | {r['peak_memory_mb']:,.0f} | "
            f"{100 * r['test_acc']:.2f} |"
        )
    with atomic_open(out.with_suffix(".md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
