"""TGN on CollegeMsg: shardgnn against PyG's TGN example setup, same events, same run.

    python benchmarks/bench_tgn.py --seeds 0,1,2 --epochs 10

Both train TGN (memory 100, time encoding 100, embedding 100, 10 most recent neighbours, one
attention layer with 2 heads and dropout 0.1, Adam 1e-4, batches of 200 events, one uniform
negative per positive) on the chronological 70/15/15 split of SNAP CollegeMsg, and are scored
on identical evaluation negatives (one uniform node per event, drawn once). PyG's side is
``benchmarks/pyg_tgn_reference.py`` (its ``examples/tgn.py`` as a function). Per seed, PyG runs,
then ours, in this process; AP is over all test events (pooled), ``ap_batch_mean`` the mean of
per-batch APs (what the example prints). Epoch time is training only (no evaluation), the mean
over epochs 2 and later; the ratio is ours to PyG's per seed. Writes
``benchmarks/out/tgn.{json,md}``; needs ``../shared/data`` (CollegeMsg) and torch_geometric.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from machine import publish  # noqa: E402
from pyg_tgn_reference import train_pyg_tgn  # noqa: E402
from shardgnn.graph.datasets import load_temporal_dataset
from shardgnn.train.config import TrainConfig
from shardgnn.train.single import run_training
from shardgnn.train.temporal import evaluation_negatives


def ours(data_dir: str, seed: int, epochs: int) -> dict:
    config = TrainConfig.from_dict(
        {
            "dataset": "collegemsg",
            "data_dir": data_dir,
            "task": "link",
            "model": {"model": "tgn", "heads": 2, "dropout": 0.1},
            "batch_size": 200,
            "optim": {"epochs": epochs, "lr": 1e-4},
            "link": {"val": 0.15, "test": 0.15, "out_dim": 100},
            "temporal": {"memory_dim": 100, "time_dim": 100, "neighbors": [10]},
            "seed": seed,
            "progress": False,
        }
    )
    results = run_training(config)
    return {
        "epoch_s": [e["time_s"] for e in results["epochs"]],
        "val_ap": [e["val_acc"] for e in results["epochs"]],
        "test": results["link"]["test"],
        "best_epoch": results["best_epoch"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--out", default="benchmarks/out/tgn")
    a = p.parse_args()
    g = load_temporal_dataset("collegemsg", a.data_dir)
    val_start, _ = g.split_points(0.15, 0.15)
    eval_neg, _ = evaluation_negatives(g.src, g.dst, g.num_nodes, val_start, 0)
    rows, runs = [], []
    for seed in (int(s) for s in a.seeds.split(",")):
        pyg = train_pyg_tgn(
            g.src, g.dst, g.t, g.num_nodes, seed=seed, epochs=a.epochs, eval_neg_dst=eval_neg
        )
        mine = ours(a.data_dir, seed, a.epochs)
        pyg_s = float(np.mean([e["train_s"] for e in pyg["epochs"]][1:] or [0.0]))
        ours_s = float(np.mean(mine["epoch_s"][1:] or mine["epoch_s"]))
        run = {"seed": seed, "pyg": pyg, "ours": mine, "pyg_epoch_s": pyg_s, "ours_epoch_s": ours_s}
        runs.append(run)
        print(
            f"seed {seed}: AP ours {mine['test']['ap']:.4f} PyG {pyg['test']['ap']:.4f}; epoch "
            f"{ours_s:.2f} s vs {pyg_s:.2f} s ({ours_s / pyg_s:.2f}x)",
            flush=True,
        )
        rows.append([
            seed,
            f"{100 * pyg['test']['ap']:.2f}",
            f"{100 * mine['test']['ap']:.2f}",
            f"{100 * pyg['test']['ap_batch_mean']:.2f}",
            f"{100 * mine['test']['ap_batch_mean']:.2f}",
            f"{100 * pyg['test']['new_node_ap']:.2f}",
            f"{100 * mine['test']['ap_new_nodes']:.2f}",
            f"{pyg_s:.2f}",
            f"{ours_s:.2f}",
            f"{ours_s / pyg_s:.2f}",
        ])  # fmt: skip
    gap = [100 * (r["ours"]["test"]["ap"] - r["pyg"]["test"]["ap"]) for r in runs]
    ratio = [r["ours_epoch_s"] / r["pyg_epoch_s"] for r in runs]
    rows.append([
        "mean",
        f"{np.mean([100 * r['pyg']['test']['ap'] for r in runs]):.2f}",
        f"{np.mean([100 * r['ours']['test']['ap'] for r in runs]):.2f}",
        f"{np.mean([100 * r['pyg']['test']['ap_batch_mean'] for r in runs]):.2f}",
        f"{np.mean([100 * r['ours']['test']['ap_batch_mean'] for r in runs]):.2f}",
        f"{np.mean([100 * r['pyg']['test']['new_node_ap'] for r in runs]):.2f}",
        f"{np.mean([100 * r['ours']['test']['ap_new_nodes'] for r in runs]):.2f}",
        f"{np.mean([r['pyg_epoch_s'] for r in runs]):.2f}",
        f"{np.mean([r['ours_epoch_s'] for r in runs]):.2f}",
        f"{np.mean(ratio):.2f}",
    ])  # fmt: skip
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"TGN on CollegeMsg (70/15/15 chronological, {a.epochs} epochs, batch 200), test AP % "
        f"(pooled; batch mean; new-node events) and training seconds per epoch, PyG example setup "
        f"vs shardgnn; AP difference ours - PyG {np.mean(gap):+.2f} points (per seed "
        f"{', '.join(f'{x:+.2f}' for x in gap)}); epoch time {np.mean(ratio):.2f}x PyG's",
        [
            "seed",
            "PyG AP",
            "ours AP",
            "PyG batch AP",
            "ours batch AP",
            "PyG new AP",
            "ours new AP",
            "PyG s/epoch",
            "ours s/epoch",
            "ours / PyG",
        ],  # fmt: skip
        rows,
        runs=runs,
    )


if __name__ == "__main__":
    sys.exit(main())
