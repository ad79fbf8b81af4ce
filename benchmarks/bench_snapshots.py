"""Snapshot storage (base + deltas) and preparation overlap for T-GCN (PiPAD's two ideas).

    python benchmarks/bench_snapshots.py --data-dir ../shared/data

1. Storage: the snapshots of CollegeMsg and of a synthetic stream (``--events``), for sliding
   windows of 1, 3 and 5 periods, stored as a base graph plus per-snapshot deltas (int64 edge
   keys) against one symmetric CSR per snapshot (int64 ``indptr`` + ``indices``): the memory
   the shared topology saves, and the seconds to rebuild every snapshot from the deltas.
2. Overlap: T-GCN link prediction on the synthetic stream's snapshots with the preparation of
   snapshot t+1 (apply its delta, build its CSR and message graph) in a background thread
   during the compute of snapshot t, against preparing it inline: training seconds per epoch,
   preparation seconds and how long the compute waited for them, same run, alternating rounds.
Writes ``benchmarks/out/snapshots.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

from machine import publish  # noqa: E402
from shardgnn.graph.datasets import load_temporal_dataset
from shardgnn.graph.snapshots import build_snapshots
from shardgnn.train.config import TrainConfig
from shardgnn.train.single import run_training


def storage_rows(name: str, graph, snapshots: int) -> list[list]:
    rows = []
    for window in (1, 3, 5):
        seq = build_snapshots(graph, snapshots, window)
        start = time.perf_counter()
        keys = None
        for t in range(seq.num_snapshots):
            keys = seq.edges(t, keys)
            seq.csr(keys)
        rebuild_s = time.perf_counter() - start
        s = seq.storage()
        rows.append([
            name, snapshots, window, f"{s['full_bytes'] / 2**20:,.1f}",
            f"{s['stored_bytes'] / 2**20:,.1f}", f"{100 * s['saved_fraction']:.1f}",
            f"{rebuild_s:.2f}",
        ])  # fmt: skip
    return rows


def train(spec: str, overlap: str, epochs: int, snapshots: int, window: int) -> dict:
    config = TrainConfig.from_dict(
        {
            "dataset": spec,
            "task": "link",
            "model": {"model": "tgcn", "dropout": 0.1},
            "optim": {"epochs": epochs, "lr": 0.01},
            "link": {"val": 0.15, "test": 0.15, "out_dim": 64},
            "temporal": {"snapshots": snapshots, "snapshot_window": window},
            "run": {"overlap": overlap},
            "progress": False,
        }
    )
    return run_training(config)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--snapshots", type=int, default=50)
    p.add_argument("--train-events", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out", default="benchmarks/out/snapshots")
    a = p.parse_args()
    rows = []
    try:
        rows += storage_rows("collegemsg", load_temporal_dataset("collegemsg", a.data_dir), 20)
    except Exception as exc:  # the shared data folder is absent: the synthetic stream only
        print(f"collegemsg skipped: {exc}", file=sys.stderr)
    spec = f"synthetic-temporal:nodes={a.nodes},events={a.events}"
    rows += storage_rows(spec, load_temporal_dataset(spec), a.snapshots)
    train_spec = f"synthetic-temporal:nodes={a.nodes},events={a.train_events}"
    overlap_rows, runs = [], []
    for r in range(a.rounds):
        for overlap in ("off", "on"):
            res = train(train_spec, overlap, a.epochs, a.snapshots, 3)
            snap = res["snapshots"]
            runs.append({"round": r, "overlap": overlap, "results": res})
            overlap_rows.append([
                r, overlap, f"{res['mean_epoch_time_s']:.2f}", f"{snap['prep_s']:.2f}",
                f"{snap['waited_s']:.2f}", f"{100 * res['link']['test']['ap']:.2f}",
            ])  # fmt: skip
    from shardgnn.train.progress import format_table

    overlap_table = format_table(
        ["round", "overlap", "s/epoch", "prep s (all)", "waited s (all)", "test AP"],
        overlap_rows,
    )
    print(overlap_table)
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        "Snapshots stored as a base graph plus deltas against one symmetric CSR per snapshot "
        "(MiB), and the seconds to rebuild every snapshot's CSR from them; then T-GCN on "
        f"{train_spec} ({a.snapshots} snapshots, window 3, {a.epochs} epochs) with snapshot "
        "preparation overlapped or inline:\n\n" + overlap_table + "\n\nStorage:",
        [
            "dataset",
            "snapshots",
            "window",
            "one CSR each MiB",
            "base+deltas MiB",
            "saved %",
            "rebuild all s",
        ],  # fmt: skip
        rows,
        runs=runs,
    )


if __name__ == "__main__":
    sys.exit(main())
