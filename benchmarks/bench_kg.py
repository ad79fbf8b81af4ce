"""Relational link prediction on knowledge graphs against PyKEEN's DistMult, in the same run.

    python benchmarks/bench_kg.py --data-dir ../shared/data --seeds 3 \
        --pykeen-python /work/venvs/pykeen/bin/python

Ours: ``shardgnn train kg-<name> --task link --model rgcn`` (R-GCN encoder over the training
triples with inverse edges, DistMult decoder with reciprocal relations, 1-N scoring with
cross-entropy, the best validation epoch's weights). Reference: PyKEEN's DistMult
(``benchmarks/kg_reference_pykeen.py``, run with the PyKEEN venv's python; LCWA, cross-entropy,
reciprocal relations, dim 256, the settings its author chose by validation MRR). Both report the
filtered test MRR and Hits@1/3/10 over head and tail queries with ties counted half (PyKEEN's
"realistic" rank). Every seed runs both. Without ``--pykeen-python`` only ours runs.

``--predictors distmult,transe,rotate,complex`` runs ours with each decoder (every seed, every
dataset); ``--epochs N`` overrides the datasets' epoch counts (a quicker comparison);
``--workers N`` also trains DistMult with ``shardgnn train ... --workers N`` (every seed).

Writes ``benchmarks/out/kg.{json,md}`` (``--out`` names another stem).
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

from machine import publish  # noqa: E402
from shardgnn.nn.models import ModelConfig
from shardgnn.train.config import LinkConfig, OptimConfig, TrainConfig
from shardgnn.train.single import run_training

METRICS = ("mrr", "hits@1", "hits@3", "hits@10")
# dataset -> (our settings, the reference's settings chosen by validation MRR)
SETTINGS = {
    "umls": (
        {"layers": 2, "hidden": 128, "lr": 0.005, "epochs": 30},
        ["--dim", "256", "--epochs", "25", "--lr", "0.01", "--batch-size", "256"],
    ),
    "kinships": (
        {"layers": 2, "hidden": 128, "lr": 0.005, "epochs": 20},
        ["--dim", "256", "--epochs", "30", "--lr", "0.003", "--batch-size", "256"],
    ),
}


DECODER_NAMES = {
    "distmult": "DistMult",
    "transe": "TransE",
    "rotate": "RotatE",
    "complex": "ComplEx",
}


def ours_on_workers(name: str, seed: int, data_dir: str, workers: int, tmp: Path) -> dict:
    """The same training as :func:`ours` (DistMult) with ``--workers N``: the command a user
    runs (N worker processes over a METIS partition of the entities)."""
    s = SETTINGS[name][0]
    out = tmp / f"workers-{name}-{seed}.json"
    cmd = [sys.executable, "-m", "shardgnn", "train", f"kg-{name}", "--data-dir", data_dir]
    cmd += ["--task", "link", "--model", "rgcn", "--layers", str(s["layers"])]
    cmd += ["--hidden", str(s["hidden"]), "--out-dim", str(s["hidden"]), "--dropout", "0.2"]
    cmd += ["--link-loss", "softmax", "--epochs", str(s["epochs"]), "--lr", str(s["lr"])]
    cmd += ["--batch-size", "256", "--seed", str(seed), "--workers", str(workers), "--quiet"]
    start = time.perf_counter()
    subprocess.run([*cmd, "--results", str(out)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    results = json.loads(out.read_text())
    return {
        "test": results["relational"]["test"],
        "valid": results["relational"]["valid"],
        "train_seconds": seconds,
        "best_epoch": results.get("best_epoch"),
        "epoch_losses": [e["loss"] for e in results["epochs"]],
    }


def ours(name: str, seed: int, data_dir: str, predictor: str = "distmult", epochs=None) -> dict:
    s = SETTINGS[name][0]
    config = TrainConfig(
        dataset=f"kg-{name}",
        data_dir=data_dir,
        task="link",
        model=ModelConfig(model="rgcn", hidden=s["hidden"], num_layers=s["layers"], dropout=0.2),
        link=LinkConfig(out_dim=s["hidden"], loss="softmax", predictor=predictor),
        optim=OptimConfig(epochs=epochs or s["epochs"], lr=s["lr"]),
        batch_size=256,
        seed=seed,
        progress=False,
    )
    start = time.perf_counter()
    results = run_training(config)
    return {
        "test": results["relational"]["test"],
        "valid": results["relational"]["valid"],
        "train_seconds": time.perf_counter() - start,
        "best_epoch": results.get("best_epoch"),
        "epoch_losses": [e["loss"] for e in results["epochs"]],
    }


def reference(python: str, name: str, seed: int, data_dir: str, tmp: Path) -> dict:
    out = tmp / f"ref-{name}-{seed}.json"
    here = Path(__file__).resolve().parent
    cmd = [python, str(here / "kg_reference_pykeen.py"), "--dataset-dir"]
    cmd += [str(Path(data_dir) / "kg" / name), "--seed", str(seed), "--out", str(out)]
    subprocess.run(cmd + SETTINGS[name][1], check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def mean_std(values: list[float]) -> str:
    a = 100 * np.asarray(values)
    return f"{a.mean():.1f} ± {a.std():.1f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--datasets", default="umls,kinships")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--pykeen-python", default=None, help="the PyKEEN venv's python")
    p.add_argument("--out", default="benchmarks/out/kg")
    p.add_argument("--predictors", default="distmult", help="our decoders, comma-separated")
    p.add_argument("--epochs", type=int, default=None, help="instead of each dataset's")
    p.add_argument("--workers", type=int, default=0, help="also train DistMult on N workers")
    a = p.parse_args()
    if a.workers and a.epochs:
        p.error("--workers runs each dataset's epochs: drop --epochs")
    predictors = a.predictors.split(",")
    runs, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.datasets.split(","):
            for seed in range(a.seeds):
                run = {"dataset": name, "seed": seed}
                for predictor in predictors:
                    key = "ours" if predictor == predictors[0] else f"ours-{predictor}"
                    run[key] = ours(name, seed, a.data_dir, predictor, a.epochs)
                if a.workers:
                    run["workers"] = ours_on_workers(name, seed, a.data_dir, a.workers, Path(tmp))
                if a.pykeen_python:
                    run["pykeen"] = reference(a.pykeen_python, name, seed, a.data_dir, Path(tmp))
                runs.append(run)
                print(json.dumps(run), flush=True)
    for name in a.datasets.split(","):
        mine = [r for r in runs if r["dataset"] == name]
        systems = [
            (
                f"shardgnn R-GCN + {DECODER_NAMES[pr]}",
                "ours" if pr == predictors[0] else f"ours-{pr}",
            )
            for pr in predictors
        ]
        if a.workers:
            systems += [(f"shardgnn R-GCN + DistMult, {a.workers} workers", "workers")]
        systems += [("PyKEEN DistMult", "pykeen")] if a.pykeen_python else []
        for label, key in systems:
            cells = [mean_std([r[key]["test"][m] for r in mine]) for m in METRICS]
            ours_mrr = np.mean([r["ours"]["test"]["mrr"] for r in mine])
            delta = (
                f"{100 * (ours_mrr - np.mean([r[key]['test']['mrr'] for r in mine])):+.1f}"
                if not key.startswith("ours")
                else ""
            )
            seconds = np.mean([r[key]["train_seconds"] for r in mine])
            rows.append([name, label, *cells, delta, f"{seconds:.1f}"])
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"Filtered test ranks on knowledge graphs, {a.seeds} seeds (mean ± std, %); "
        "'ours - ref MRR' is shardgnn's mean MRR minus the row's.",
        ["dataset", "system", "MRR", "Hits@1", "Hits@3", "Hits@10", "ours - ref MRR", "train s"],
        rows,
        settings={
            **{k: {"ours": v[0], "pykeen": v[1]} for k, v in SETTINGS.items()},
            "predictors": predictors,
            "epochs": a.epochs,
            "workers": a.workers,
        },
        runs=runs,
    )


if __name__ == "__main__":
    sys.exit(main())
