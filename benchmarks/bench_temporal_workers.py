"""TGN on a 10M-event synthetic stream: 2 workers against 1, same events, same global batches.

    python benchmarks/bench_temporal_workers.py --events 10000000 --nodes 100000

The stream (``synthetic-temporal``: power-law activity, recurring partners) is partitioned once
per worker count with ``shardgnn partition`` (METIS on the T-CSR for 2 parts; one part for 1
worker) and trained with ``shardgnn train --partitions DIR --task link --model tgn`` (70/15/15
chronological split, the global batch split into one share per worker). Node memory is sharded
by owner: a worker reads the memory rows and pending events of its subgraph's nodes from their
owners, and sends the owners what it read for its events' nodes and the events themselves.

Reported per worker count: test AP (random negatives; historical and new-node AP beside), the
difference to 1 worker (target: within 1 point), the epoch time, and the bytes of every stage
summed over workers and the run: ``memory`` (memory reads and updates), ``sample`` (recent
neighbourhoods drawn by owners), ``grad`` (the gradient all-reduce), ``eval`` (the scores
gathered for the metrics). Writes ``benchmarks/out/temporal_workers.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from machine import publish, shardgnn  # noqa: E402


def sent_mb(comm: dict, stage: str) -> str:
    return f"{comm.get(stage, {}).get('bytes_sent', 0) / 1e6:,.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--dim", type=int, default=100, help="memory, time and embedding width")
    p.add_argument("--work-dir", default=None, help="partition directories (default: a temp dir)")
    p.add_argument("--out", default="benchmarks/out/temporal_workers")
    a = p.parse_args()
    spec = f"synthetic-temporal:nodes={a.nodes},events={a.events}"
    workers = [int(w) for w in a.workers.split(",")]
    runs = {}
    with tempfile.TemporaryDirectory(prefix="temporal-workers-", dir=a.work_dir) as scratch:
        for w in workers:
            parts = Path(scratch) / f"p{w}"
            method = "metis" if w > 1 else "random"
            shardgnn("partition", spec, "--parts", str(w), "--method", method, "--out", str(parts),
                     "--quiet")  # fmt: skip
            out = Path(scratch) / f"r{w}.json"
            d = str(a.dim)
            shardgnn(
                "train", "--partitions", str(parts), "--task", "link", "--model", "tgn",
                "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
                "--link-val", "0.15", "--link-test", "0.15", "--memory-dim", d, "--time-dim", d,
                "--out-dim", d, "--heads", "2", "--dropout", "0.1", "--results", str(out),
                "--quiet",
            )  # fmt: skip
            runs[w] = json.loads(out.read_text())
            print(f"workers {w}: test AP {runs[w]['link']['test']['ap']:.4f}", flush=True)
    base = runs[workers[0]]["link"]["test"]["ap"]
    rows = []
    for w in workers:
        r = runs[w]
        test, comm = r["link"]["test"], r.get("comm") or {}

        rows.append([
            w,
            f"{100 * test['ap']:.2f}",
            f"{100 * (test['ap'] - base):+.2f}",
            f"{100 * test['ap_historical']:.2f}",
            f"{100 * test['ap_new_nodes']:.2f}" if test["ap_new_nodes"] is not None else "-",
            f"{r['epochs'][-1]['time_s']:.0f}",
            sent_mb(comm, "memory"),
            sent_mb(comm, "sample"),
            sent_mb(comm, "grad"),
            sent_mb(comm, "eval"),
        ])  # fmt: skip
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"TGN link prediction on {spec} ({a.epochs} epoch(s), batch {a.batch_size}, lr {a.lr}): "
        "test AP % by worker count, its difference to 1 worker, training seconds per epoch and "
        "MB sent per stage (summed over workers, whole run incl. evaluation)",
        [
            "workers",
            "AP",
            "vs 1 worker",
            "historical AP",
            "new-node AP",
            "s/epoch",
            "memory MB",
            "sample MB",
            "grad MB",
            "eval MB",
        ],  # fmt: skip
        rows,
        runs={str(w): r for w, r in runs.items()},
    )


if __name__ == "__main__":
    sys.exit(main())
