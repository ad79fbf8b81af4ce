"""SUREL against GAE on the same edge splits: Cora and CiteSeer, link prediction.

    python benchmarks/bench_surel.py --data-dir ../shared/data --seeds 3

Both train on the GAE paper's 85/5/10 split (``--link-split-seed`` = the seed, so each seed is a
new split and both models see the same one) and are scored on the same held-out edges against
the same fixed negatives: AUC and AP against the first negative of each edge (GAE's protocol),
MRR and Hits@K against all 100 (OGB's). GAE: ``benchmarks/bench_link.py``'s full-graph setting
(GCN 32 -> 16 on the raw features, 200 epochs). SUREL: ``--model surel`` with its recipe's
defaults (16 walks of 4 steps per node, hidden 64, 20 epochs of 128 edges a batch, one uniform
negative each); it reads no features. ``--workers N`` also trains SUREL with ``shardgnn train
... --workers N`` (every seed). Writes ``benchmarks/out/surel.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_link import config_for
from machine import publish  # noqa: E402
from shardgnn.nn.models import ModelConfig
from shardgnn.train.config import LinkConfig, TrainConfig
from shardgnn.train.recipe_settings import SUREL_DEFAULTS
from shardgnn.train.single import run_training

METRICS = ("auc", "ap", "mrr", "hits@10")


def surel_config(dataset: str, seed: int, data_dir: str) -> TrainConfig:
    from shardgnn.train.config import OptimConfig

    d = SUREL_DEFAULTS
    return TrainConfig(
        dataset=dataset,
        data_dir=data_dir,
        task="link",
        model=ModelConfig(model="surel", hidden=d["model.hidden"], dropout=d["model.dropout"]),
        link=LinkConfig(val=0.05, test=0.10, split_seed=seed),
        optim=OptimConfig(epochs=d["optim.epochs"], lr=d["optim.lr"]),
        batch_size=d["batch_size"],
        seed=seed,
        progress=False,
    )


def run_on_workers(dataset: str, seed: int, data_dir: str, workers: int, tmp: str) -> dict:
    """:func:`surel_config`'s training with ``shardgnn train ... --workers N``."""
    d = SUREL_DEFAULTS
    out = Path(tmp) / f"surel-{dataset}-{seed}.json"
    cmd = [sys.executable, "-m", "shardgnn", "train", dataset, "--data-dir", data_dir]
    cmd += ["--task", "link", "--model", "surel", "--link-val", "0.05", "--link-test", "0.1"]
    cmd += ["--link-split-seed", str(seed), "--seed", str(seed), "--workers", str(workers)]
    cmd += ["--hidden", str(d["model.hidden"]), "--dropout", str(d["model.dropout"])]
    cmd += ["--lr", str(d["optim.lr"]), "--batch-size", str(d["batch_size"])]
    cmd += ["--epochs", str(d["optim.epochs"]), "--quiet", "--results", str(out)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return {**json.loads(out.read_text())["link"]["test"], "seconds": seconds}


def run(config: TrainConfig) -> dict:
    start = time.perf_counter()
    results = run_training(config)
    return {**results["link"]["test"], "seconds": time.perf_counter() - start}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--datasets", default="cora,citeseer")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", default="benchmarks/out/surel")
    p.add_argument("--workers", type=int, default=0, help="also train SUREL on N workers")
    a = p.parse_args(argv)
    systems = ["gae", "surel"] + (["surel-workers"] if a.workers else [])
    runs, rows = [], []
    tmp = tempfile.mkdtemp()
    for dataset in a.datasets.split(","):
        for seed in range(a.seeds):
            run_ = {
                "dataset": dataset,
                "seed": seed,
                "gae": run(config_for(dataset, "full", seed, a.data_dir)),
                "surel": run(surel_config(dataset, seed, a.data_dir)),
            }
            if a.workers:
                run_["surel-workers"] = run_on_workers(dataset, seed, a.data_dir, a.workers, tmp)
            runs.append(run_)
            print(run_, flush=True)
        mine = [r for r in runs if r["dataset"] == dataset]
        for system in systems:
            cells = []
            for m in METRICS:
                v = np.array([r[system][m] for r in mine]) * (1 if m == "mrr" else 100)
                digits = 3 if m == "mrr" else 1
                cells.append(f"{v.mean():.{digits}f} ± {v.std():.{digits}f}")
            seconds = np.mean([r[system]["seconds"] for r in mine])
            label = {"surel-workers": f"SUREL, {a.workers} workers"}.get(system, system.upper())
            rows.append([dataset, label, *cells, f"{seconds:.0f}"])
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"SUREL against GAE, same splits, {a.seeds} seeds (mean ± std)",
        ["dataset", "model", "test AUC %", "test AP %", "MRR", "Hits@10 %", "train s"],
        rows,
        runs=runs,
        surel_defaults=SUREL_DEFAULTS,
    )


if __name__ == "__main__":
    sys.exit(main())
