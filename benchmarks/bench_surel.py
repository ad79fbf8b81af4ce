"""SUREL against GAE on the same edge splits: Cora and CiteSeer, link prediction.

    python benchmarks/bench_surel.py --data-dir ../shared/data --seeds 3

Both train on the GAE paper's 85/5/10 split (``--link-split-seed`` = the seed, so each seed is a
new split and both models see the same one) and are scored on the same held-out edges against
the same fixed negatives: AUC and AP against the first negative of each edge (GAE's protocol),
MRR and Hits@K against all 100 (OGB's). GAE: ``benchmarks/bench_link.py``'s full-graph setting
(GCN 32 -> 16 on the raw features, 200 epochs). SUREL: ``--model surel`` with its recipe's
defaults (16 walks of 4 steps per node, hidden 64, 20 epochs of 128 edges a batch, one uniform
negative each); it reads no features. Writes ``benchmarks/out/surel.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

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
    a = p.parse_args(argv)
    runs, rows = [], []
    for dataset in a.datasets.split(","):
        for seed in range(a.seeds):
            run_ = {
                "dataset": dataset,
                "seed": seed,
                "gae": run(config_for(dataset, "full", seed, a.data_dir)),
                "surel": run(surel_config(dataset, seed, a.data_dir)),
            }
            runs.append(run_)
            print(run_, flush=True)
        mine = [r for r in runs if r["dataset"] == dataset]
        for system in ("gae", "surel"):
            cells = []
            for m in METRICS:
                v = np.array([r[system][m] for r in mine]) * (1 if m == "mrr" else 100)
                digits = 3 if m == "mrr" else 1
                cells.append(f"{v.mean():.{digits}f} ± {v.std():.{digits}f}")
            seconds = np.mean([r[system]["seconds"] for r in mine])
            rows.append([dataset, system.upper(), *cells, f"{seconds:.0f}"])
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
