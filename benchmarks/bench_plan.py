"""`shardgnn plan`'s predictions against measured runs (issue 32): for every run of
``bench_fullgraph.py --part bytes`` results files, the bytes per epoch and the most one worker
sent, predicted from the graph and the run's partition (``shardgnn.fullgraph.plan.costs_at``)
beside what the run's counters measured.

    python benchmarks/bench_plan.py benchmarks/out/fullgraph_bytes_2d.json \
        benchmarks/out/fullgraph_bytes_2d_metis.json --work-dir /tmp/bw \
        --out benchmarks/out/plan_vs_measured.json

``--work-dir``: where the bench wrote its partition directories (re-created by the bench's own
command when missing).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path

import numpy as np

from shardgnn.atomic import atomic_open, save_json
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import costs_at
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import read_partitions
from shardgnn.train.progress import format_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_distributed import ensure_partitions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="bench_fullgraph.py --part bytes JSON files")
    parser.add_argument("--work-dir", default=str(REPO / "benchmarks" / "out" / "work"))
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "plan_vs_measured.json"))
    args = parser.parse_args(argv)
    rows, records = [], []
    for path in args.results:
        report = json.loads(Path(path).read_text())
        model = report["runs"][0]["results"]["config"]["model"]
        plan = PlanConfig(model=model["model"], hidden=model["hidden"], layers=model["num_layers"])
        seed = int(report["args"]["seed"])
        for run in report["runs"]:
            spec, workers, method = run["dataset"], run["workers"], run["method"]
            graph = functools.cache(lambda s=spec: load_dataset(s, args.data_dir))
            part_dir, _ = ensure_partitions(Path(args.work_dir), spec, workers, method, seed, graph)
            pset = read_partitions(part_dir, verify=False)
            assignment = np.empty(pset.book.num_nodes, dtype=np.int64)
            assignment[np.asarray(pset.orig_ids)] = pset.book.owner(np.arange(pset.book.num_nodes))
            layout = f"c={run['replication']}" if run["spmm"] == "1.5d" else run.get("grid") or ""
            cost = next(
                c
                for c in costs_at(graph(), assignment, workers, plan)
                if c.strategy == run["spmm"] and c.layout == layout
            )
            s = run["summary"]
            measured = (s["spmm_bytes_per_epoch"], s["max_rank_sent_per_epoch"])
            records.append(
                {
                    "dataset": spec, "workers": workers, "method": method, "spmm": run["spmm"],
                    "layout": layout, "predicted_bytes": cost.bytes_per_epoch,
                    "measured_bytes": measured[0], "predicted_max_worker_bytes":
                    cost.max_worker_bytes, "measured_max_worker_bytes": measured[1],
                }
            )  # fmt: skip
            rows.append(
                [
                    spec.split(",")[0][:24], method, workers, f"{run['spmm']} {layout}".strip(),
                    f"{cost.bytes_per_epoch:,}", f"{measured[0]:,.0f}",
                    f"{cost.bytes_per_epoch / measured[0]:.4f}",
                    f"{cost.max_worker_bytes:,}", f"{measured[1]:,.0f}",
                    f"{cost.max_worker_bytes / measured[1]:.4f}",
                ]
            )  # fmt: skip
            print(rows[-1], flush=True)
    table = format_table(
        ["dataset", "partition", "P", "spmm", "predicted B/epoch", "measured", "ratio",
         "predicted max B (1 worker)", "measured", "ratio"],
        rows,
    )  # fmt: skip
    save_json(args.out, {"command": " ".join(sys.argv), "runs": records})
    with atomic_open(Path(args.out).with_suffix(".md"), "w") as fh:
        fh.write(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
