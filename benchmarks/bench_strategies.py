"""Communication-avoiding strategies side by side (issue 16): remote feature bytes, epoch time and
accuracy of distributed mini-batch training, exact against each strategy, in one run.

    python benchmarks/bench_strategies.py --data-dir ../shared/data --datasets amazon-computers \\
        --workers 2 --epochs 10 --seeds 1

Each dataset is partitioned once (METIS, P parts); every run is ``shardgnn train --partitions
DIR --host-sharing off`` (so every row a worker does
not own crosses the network, as between machines), GraphSAGE, fanouts 10,10, global batch 1024,
``--feature-norm none``; the strategies only add flags (``--strategies`` picks them):

* ``exact``: random seed batches, float32 rows;
* ``cluster``: ``--batching cluster`` (METIS clusters of each part per batch);
* ``cluster-halo0`` / ``cluster-halo1``: with ``--cluster-halo 0`` / ``1``;
* ``cache``: ``--cache-policy degree --cache-size 20%``;
* ``fetch-1bit`` / ``fetch-1bit-ef``: ``--fetch-bits 1``, without / with ``--error-feedback``;
* ``fetch-8bit``: ``--fetch-bits 8``;
* ``cluster+cache``: both;
* ``hist-A``: ``--historical 1:A`` (remote nodes' layer-1 embeddings pushed by their owners, at
  most A steps old, instead of expanding them);
* ``hist-A+cache``: with the degree cache;
* ``pull-A``, ``pull-A+cache``: the same with ``--historical-mode pull``;
* ``all-A``, ``all-pull-A``, ``all-pull-A+cache``: ``--historical-scope all`` (own nodes served
  from the worker's own table too, GNNAutoScale), pushed or pulled.

Feature MB is what the feature fetch received per epoch; remote MB adds the sampling requests and
replies and the historical pushes (everything a strategy trades; ``shardgnn plot`` draws accuracy
against it), both summed over workers. Writes
``benchmarks/out/strategies.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from machine import publish  # noqa: E402
from shardgnn.cli.plot import remote_mb_per_epoch

STRATEGIES = {
    "exact": [],
    "cluster": ["--batching", "cluster"],
    "cluster-halo0": ["--batching", "cluster", "--cluster-halo", "0"],
    "cluster-halo1": ["--batching", "cluster", "--cluster-halo", "1"],
    "cache": ["--cache-policy", "degree", "--cache-size", "20%"],
    "fetch-1bit": ["--fetch-bits", "1"],
    "fetch-8bit": ["--fetch-bits", "8"],
    "fetch-1bit-ef": ["--fetch-bits", "1", "--error-feedback"],
    "cluster+cache": ["--batching", "cluster", "--cache-policy", "degree", "--cache-size", "20%"],
    "hist-4": ["--historical", "1:4"],
    "hist-16": ["--historical", "1:16"],
    "hist-64": ["--historical", "1:64"],
    "hist-4+cache": ["--historical", "1:4", "--cache-policy", "degree", "--cache-size", "20%"],
    "pull-4": ["--historical", "1:4", "--historical-mode", "pull"],
    "pull-16": ["--historical", "1:16", "--historical-mode", "pull"],
    "pull-64": ["--historical", "1:64", "--historical-mode", "pull"],
    "pull-4+cache": ["--historical", "1:4", "--historical-mode", "pull"]
    + ["--cache-policy", "degree", "--cache-size", "20%"],
    "pull-16+cache": ["--historical", "1:16", "--historical-mode", "pull"]
    + ["--cache-policy", "degree", "--cache-size", "20%"],
    "all-16": ["--historical", "1:16", "--historical-scope", "all"],
    "all-64": ["--historical", "1:64", "--historical-scope", "all"],
    "all-pull-16": ["--historical", "1:16", "--historical-scope", "all"]
    + ["--historical-mode", "pull"],
    "all-pull-64": ["--historical", "1:64", "--historical-scope", "all"]
    + ["--historical-mode", "pull"],
    "all-pull-64+cache": ["--historical", "1:64", "--historical-scope", "all"]
    + ["--historical-mode", "pull", "--cache-policy", "degree", "--cache-size", "20%"],
}


def partition(a, dataset: str, tmp: Path) -> Path:
    """The dataset partitioned once (METIS) for every run of it."""
    out = tmp / f"parts-{abs(hash(dataset))}"
    cmd = [sys.executable, "-m", "shardgnn", "partition", dataset, "--data-dir", a.data_dir]
    cmd += ["--parts", str(a.workers), "--method", "metis", "--out", str(out), "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def run(a, dataset: str, parts: Path, strategy: str, seed: int, tmp: Path) -> dict:
    out = tmp / f"{strategy}-{seed}.json"
    cmd = [sys.executable, "-m", "shardgnn", "train", "--partitions", str(parts)]
    cmd += ["--host-sharing", "off", "--model", "sage"]
    cmd += ["--fanouts", "10,10", "--batch-size", "1024", "--hidden", "128"]
    cmd += ["--epochs", str(a.epochs), "--seed", str(seed), "--feature-norm", "none"]
    cmd += ["--quiet", "--results", str(out), *STRATEGIES[strategy]]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    res = json.loads(out.read_text())
    measured = res["epochs"][1:] or res["epochs"]
    return {
        "dataset": dataset,
        "strategy": strategy,
        "seed": seed,
        "test_acc": res["test_acc"],
        "feature_mb": float(np.mean([e["cache"]["remote_feature_mb"] for e in measured])),
        "remote_mb": remote_mb_per_epoch(res),
        "historical": res.get("historical"),
        "local_edge_share": res.get("local_edge_share"),
        "kept_edge_share": res.get("kept_edge_share"),
        "sampled_edges": res.get("sampled_edges_per_epoch"),
        "epoch_s": float(np.mean([e["time_s"] for e in measured])),
    }


def _percent(values) -> str:
    values = [v for v in values if v is not None]
    return f"{100 * np.mean(values):.1f} %" if values else "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    p.add_argument("--datasets", default="amazon-computers")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--out", default="benchmarks/out/strategies.json")
    p.add_argument("--md", default="benchmarks/out/strategies.md")
    a = p.parse_args(argv)
    if not Path(a.data_dir).is_dir():
        print(f"skipped: {a.data_dir} is absent")
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in a.datasets.split(","):
            parts = partition(a, dataset, Path(tmp))
            for seed in range(a.seeds):
                for strategy in a.strategies.split(","):
                    runs.append(run(a, dataset, parts, strategy, seed, Path(tmp)))
                    print(runs[-1], flush=True)
    rows = []
    for dataset in a.datasets.split(","):
        exact = {r["seed"]: r for r in runs if r["dataset"] == dataset and r["strategy"] == "exact"}
        for strategy in a.strategies.split(","):
            sel = [r for r in runs if r["dataset"] == dataset and r["strategy"] == strategy]
            acc = 100 * np.array([r["test_acc"] for r in sel])
            delta = [100 * (r["test_acc"] - exact[r["seed"]]["test_acc"]) for r in sel if exact]
            mb = np.mean([r["remote_mb"] for r in sel])
            feature_mb = np.mean([r["feature_mb"] for r in sel])
            base_mb = np.mean([r["remote_mb"] for r in exact.values()]) if exact else np.nan
            epoch_s = np.mean([r["epoch_s"] for r in sel])
            base_s = np.mean([r["epoch_s"] for r in exact.values()]) if exact else np.nan
            edges = [r.get("sampled_edges") for r in sel]
            base_edges = [r.get("sampled_edges") for r in exact.values()]
            has_edges = exact and None not in edges + base_edges
            rows.append(
                [
                    dataset,
                    strategy,
                    f"{acc.mean():.2f} ± {acc.std():.2f}",
                    f"{np.mean(delta):+.2f}" if exact else "-",
                    f"{feature_mb:,.1f}",
                    f"{mb:,.1f}",
                    f"{mb / base_mb:.2f}x" if exact else "-",
                    f"{epoch_s:.2f}",
                    f"{epoch_s / base_s:.2f}x" if exact else "-",
                    f"{np.mean(edges) / np.mean(base_edges):.2f}x" if has_edges else "-",
                    _percent([r.get("local_edge_share") for r in sel]),
                    _percent([r.get("kept_edge_share") for r in sel]),
                ]
            )
    columns = ["dataset", "strategy", "test acc %", "Δ vs exact", "feature MB / epoch"]
    columns += ["remote MB / epoch"]
    header = (
        f"{a.workers} workers, --host-sharing off, GraphSAGE 128, fanouts 10,10, batch 1024, "
        f"{a.epochs} epochs, {a.seeds} seed(s)"
    )
    columns += ["vs exact bytes", "epoch (s)", "vs exact epoch", "sampled edges vs exact"]
    columns += ["edges from own part", "drawn edges kept"]
    return publish(a.out, a.md, header, columns, rows, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
