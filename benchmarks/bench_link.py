"""Link prediction against published numbers: GAE on Cora and CiteSeer (Kipf & Welling 2016).

    python benchmarks/bench_link.py --data-dir ../shared/data --seeds 3

GAE's setting: 85/5/10 edge split (held-out edges removed from the graph, both directions),
2-layer GCN 32 -> 16 on the raw binary features, inner-product decoder, binary cross-entropy
with one uniform negative per positive, Adam lr 0.01, 200 full-graph epochs, no dropout. The
split and the model both change with the seed. AUC and AP pair every held-out edge with one fixed
non-edge (the paper's protocol); MRR and Hits@K rank it against 100 fixed non-edges. Also runs the
same model in mini-batch mode (edge batches of 512, fanouts 10,10, target edges excluded).
Writes ``benchmarks/out/link.{json,md}``.

``--part workers``: GraphSAGE link prediction (mini-batch, 85/5/10 split, fanouts 10,10, 1024
target edges per step, 5 epochs, ``--feature-norm row``) in one process and on 2 workers
(``--task link --workers 2``) on amazon-photo and coauthor-physics, every seed in both; test AUC /
AP / MRR and epoch time.
Writes ``benchmarks/out/link_workers.{json,md}``.

``--part workers --train-mode full``: the same comparison in full-graph mode (GAE: GCN 32 -> 16,
lr 0.01, ``--epochs`` full-graph steps, one uniform negative per positive; the 2-worker job runs
the distributed SpMM and gathers each pair's rows from their owners).
Writes ``benchmarks/out/link_workers_full.{json,md}``.
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

from machine import write_report  # noqa: E402
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import LinkConfig, OptimConfig, TrainConfig
from shardgnn.train.progress import format_table
from shardgnn.train.single import run_training

# dataset -> (paper AUC %, paper AP %)
PAPER = {"cora": (91.0, 92.0), "citeseer": (89.5, 89.9)}


def config_for(
    dataset: str, mode: str, seed: int, data_dir: str, feature_norm: str = "none"
) -> TrainConfig:
    return TrainConfig(
        dataset=dataset,
        data_dir=data_dir,
        task="link",
        mode=mode,
        model=ModelConfig(model="gcn", hidden=32, num_layers=2, dropout=0.0),
        sampler=SamplerConfig(fanouts=(10, 10)),
        batch_size=512,
        optim=OptimConfig(epochs=200 if mode == "full" else 20, lr=0.01),
        link=LinkConfig(val=0.05, test=0.10, split_seed=seed, out_dim=16),
        feature_norm=feature_norm,  # GAE feeds the raw binary features
        seed=seed,
        progress=False,
    )


def workers_part(a) -> int:
    """Test metrics of 1 process against 2 workers, same split (the launcher splits as one
    process does), same settings, several seeds."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in a.datasets.split(","):
            for seed in range(a.seeds):
                for workers in (1, 2):
                    out = Path(tmp) / f"{dataset}-{workers}-{seed}.json"
                    cmd = [sys.executable, "-m", "shardgnn", "train", dataset, "--task", "link"]
                    cmd += ["--data-dir", a.data_dir, "--dropout", "0"]
                    if a.train_mode == "full":
                        cmd += ["--mode", "full", "--model", "gcn", "--hidden", "32"]
                        cmd += ["--out-dim", "16", "--lr", "0.01"]
                    else:
                        cmd += ["--fanouts", "10,10", "--batch-size", "1024"]
                        cmd += ["--hidden", "128", "--out-dim", "64", "--lr", "0.003"]
                    cmd += ["--epochs", str(a.epochs), "--seed", str(seed), "--link-split-seed"]
                    cmd += [str(seed), "--feature-norm", a.feature_norm, "--quiet"]
                    cmd += ["--results", str(out)]
                    if workers > 1:
                        cmd += ["--workers", str(workers)]
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                    res = json.loads(out.read_text())
                    runs.append(
                        {
                            "dataset": dataset,
                            "workers": workers,
                            "seed": seed,
                            "test": res["link"]["test"],
                            "epoch_s": res["mean_epoch_time_s"],
                        }
                    )
                    print(dataset, workers, seed, res["link"]["test"]["auc"], flush=True)
    rows = []
    for dataset in a.datasets.split(","):
        base = {r["seed"]: r for r in runs if r["dataset"] == dataset and r["workers"] == 1}
        for workers in (1, 2):
            sel = [r for r in runs if r["dataset"] == dataset and r["workers"] == workers]

            def ms(key, sel=sel):
                v = 100 * np.array([r["test"][key] for r in sel])
                return f"{v.mean():.2f} ± {v.std():.2f}"

            delta = 100 * np.array([r["test"]["auc"] - base[r["seed"]]["test"]["auc"] for r in sel])
            rows.append(
                [
                    dataset,
                    str(workers),
                    ms("auc"),
                    ms("ap"),
                    f"{np.mean([r['test']['mrr'] for r in sel]):.3f}",
                    "-" if workers == 1 else f"{delta.mean():+.2f} ± {delta.std():.2f}",
                    f"{np.mean([r['epoch_s'] for r in sel]):.2f}",
                ]
            )
    table = format_table(
        ["dataset", "workers", "test AUC %", "test AP %", "MRR", "paired Δ AUC", "epoch (s)"], rows
    )
    print(table)
    model = "full graph, GCN 32 -> 16" if a.train_mode == "full" else "GraphSAGE 128 -> 64"
    header = (
        f"{a.seeds} seeds (split and model), {a.epochs} epochs, {model}, "
        f"--feature-norm {a.feature_norm}"
    )
    write_report(a.out, a.md, header, table, runs=runs)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--datasets", default="cora,citeseer")
    p.add_argument("--modes", default="full,minibatch")
    p.add_argument("--out", help="default: benchmarks/out/link[_workers].json")
    p.add_argument("--md", help="default: benchmarks/out/link[_workers].md")
    p.add_argument("--feature-norm", default="none", help="none (GAE) or row")
    p.add_argument("--part", default="gae", choices=("gae", "workers"))
    p.add_argument(
        "--epochs", type=int, help="--part workers: epochs per run (5 mini-batch, 200 full)"
    )
    p.add_argument("--train-mode", default="minibatch", choices=("minibatch", "full"))
    a = p.parse_args(argv)
    a.epochs = a.epochs or (200 if a.train_mode == "full" else 5)
    stem = "benchmarks/out/link" + ("_workers" if a.part == "workers" else "")
    stem += "_full" if a.part == "workers" and a.train_mode == "full" else ""
    a.out, a.md = a.out or f"{stem}.json", a.md or f"{stem}.md"
    if not Path(a.data_dir).is_dir():
        print(f"skipped: {a.data_dir} is absent")
        return 0
    if a.part == "workers":
        return workers_part(a)
    runs = []
    for dataset in a.datasets.split(","):
        for mode in a.modes.split(","):
            for seed in range(a.seeds):
                start = time.perf_counter()
                res = run_training(config_for(dataset, mode, seed, a.data_dir, a.feature_norm))
                test = res["link"]["test"]
                runs.append(
                    {
                        "dataset": dataset,
                        "mode": mode,
                        "seed": seed,
                        "test": test,
                        "val": res["link"]["val"],
                        "best_epoch": res["best_epoch"],
                        "wall_s": time.perf_counter() - start,
                    }
                )
                print(
                    f"{dataset} {mode} seed {seed}: test AUC {100 * test['auc']:.2f} "
                    f"AP {100 * test['ap']:.2f} MRR {test['mrr']:.3f}",
                    flush=True,
                )
    rows, summary = [], []
    for dataset in a.datasets.split(","):
        for mode in a.modes.split(","):
            sel = [r for r in runs if r["dataset"] == dataset and r["mode"] == mode]

            def ms(key, sel=sel):
                v = 100 * np.array([r["test"][key] for r in sel])
                return float(v.mean()), float(v.std())

            (auc_m, auc_s), (ap_m, ap_s) = ms("auc"), ms("ap")
            (mrr_m, _), (h10, _) = ms("mrr"), ms("hits@10")
            paper_auc, paper_ap = PAPER.get(dataset, (float("nan"), float("nan")))
            summary.append(
                {
                    "dataset": dataset,
                    "mode": mode,
                    "auc": auc_m,
                    "auc_std": auc_s,
                    "ap": ap_m,
                    "ap_std": ap_s,
                    "paper_auc": paper_auc,
                    "paper_ap": paper_ap,
                }
            )
            rows.append(
                [
                    dataset,
                    mode,
                    f"{auc_m:.2f} ± {auc_s:.2f}",
                    f"{ap_m:.2f} ± {ap_s:.2f}",
                    f"{paper_auc} / {paper_ap}",
                    f"{auc_m - paper_auc:+.2f} / {ap_m - paper_ap:+.2f}",
                    f"{mrr_m / 100:.3f}",
                    f"{h10:.1f}",
                ]
            )
    table = format_table(
        [
            "dataset",
            "mode",
            "test AUC %",
            "test AP %",
            "GAE paper AUC / AP",
            "Δ AUC / AP",
            "MRR (100 neg.)",
            "Hits@10 %",
        ],
        rows,
    )
    print(table)
    header = f"Seeds: {a.seeds} (split and model); features: --feature-norm {a.feature_norm}"
    write_report(a.out, a.md, header, table, runs=runs, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
