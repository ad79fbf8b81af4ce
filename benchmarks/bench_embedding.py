"""A featureless graph trained with learnable node embeddings: MRR against random and degree
baselines, and where a link-prediction step spends its time.

    python benchmarks/bench_embedding.py --data-dir ../shared/data --epochs 2

soc-slashdot (82k nodes, no features) with ``--task link --embedding-dim 64``: GraphSAGE (or
``--model``) 64 -> 64,
fanouts 10,10, 1024 target edges per batch, one uniform negative each, row-wise Adagrad on the
rows. Test MRR and Hits@K rank each held-out edge among its 100 fixed non-edges; the baselines
score the same pairs by chance (``random``) and by the destination's degree in the training
graph (``degree``). Writes ``benchmarks/out/embedding.{json,md}``.

``--part workers``: node classification on a featureless synthetic graph (the generator's graph with
its features dropped: only structure and homophily carry the classes), ``--embedding-dim 64``, in
one process and on 2 workers whose rows are sharded by partition: test accuracy, epoch time, the
rows each worker holds against the whole table, and the bytes the rows and their gradients moved.
Writes ``benchmarks/out/embedding_workers.{json,md}``.

``--part staleness``: the link setting above on 2 workers, peers' rows uncached against cached
(``--cache-policy degree|lru --cache-size 20%``) at several ``--embedding-staleness`` bounds
(``--bounds``): test MRR and AUC, the row cache's hit rate, the age of the rows it served, the
row and gradient bytes per epoch, and epoch time. Writes ``benchmarks/out/embedding_staleness.*``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from machine import publish  # noqa: E402
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.linksplit import split_edges
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.store.config import EmbeddingConfig
from shardgnn.train.config import LinkConfig, OptimConfig, TrainConfig
from shardgnn.train.linkmetrics import link_metrics, split_spec
from shardgnn.train.single import run_training

STAGES = ("negatives", "sample", "fetch", "compute", "embed")


def baselines(config: TrainConfig, hits_at: tuple[int, ...]) -> dict[str, dict[str, float]]:
    """Test metrics of chance and of the destination's training-graph degree on the same split."""
    graph = load_dataset(config.dataset, config.data_dir)
    train_graph, split = split_edges(graph, split_spec(config.link))
    degree = np.diff(train_graph.indptr).astype(np.float64)
    pos, neg = split.test_pos_2P, split.test_neg_PK
    rng = np.random.default_rng(0)
    return {
        "random": link_metrics(rng.random(pos.shape[1]), rng.random(neg.shape), hits_at),
        "degree": link_metrics(degree[pos[1]], degree[neg], hits_at),
    }


def train_link(config: TrainConfig, workers: int, extra: tuple[str, ...] = ()) -> dict:
    """The results of ``config`` in this process, or on ``workers`` workers (the command line,
    with the same settings, plus ``extra`` flags)."""
    if workers == 1:
        return run_training(config)
    e, m = config.embedding, config.model
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "shardgnn", "train", config.dataset, "--task", "link"]
        cmd += ["--data-dir", str(config.data_dir), "--model", m.model, "--hidden", str(m.hidden)]
        cmd += ["--dropout", "0", "--fanouts", ",".join(map(str, config.sampler.fanouts))]
        cmd += ["--batch-size", str(config.item_batch_size), "--epochs", str(config.optim.epochs)]
        cmd += ["--lr", str(config.optim.lr), "--out-dim", str(config.link.out_dim)]
        cmd += ["--hits-at", ",".join(map(str, config.link.hits_at))]
        cmd += ["--embedding-dim", str(e.dim), "--embedding-optimizer", e.optimizer]
        cmd += ["--embedding-lr", str(e.lr), "--workers", str(workers), "--quiet"]
        cmd += ["--seed", str(config.seed), *extra]
        subprocess.run([*cmd, "--results", str(out)], check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def link_config(a, optimizer: str, hits_at: tuple[int, ...]) -> TrainConfig:
    return TrainConfig(
        dataset=a.dataset,
        data_dir=a.data_dir,
        task="link",
        model=ModelConfig(model=a.model, hidden=a.dim, dropout=0.0),
        sampler=SamplerConfig(fanouts=(10, 10)),
        batch_size=1024,
        optim=OptimConfig(epochs=a.epochs, lr=0.003),
        link=LinkConfig(out_dim=a.dim, hits_at=hits_at),
        embedding=EmbeddingConfig(
            dim=a.dim, optimizer=optimizer, lr=0.1 if optimizer == "adagrad" else 0.01
        ),
        progress=False,
    )


def staleness_part(a, config: TrainConfig) -> int:
    """2 workers: peers' rows uncached, then cached at each staleness bound."""
    variants = [("no row cache", ())]
    for policy in a.policies.split(","):
        for bound in a.bounds.split(","):
            flags = ("--cache-policy", policy, "--cache-size", "20%")
            variants.append(
                (f"{policy} 20%, s = {bound}", (*flags, "--embedding-staleness", bound))
            )
    rows, runs = [], []
    for name, extra in variants:
        res = train_link(config, 2, extra)
        rows_cache = (res.get("cache") or {}).get("rows") or {}
        measured = res["epochs"][1:] or res["epochs"]
        embed_mb = res["comm"]["embed"]["bytes_recv"] / 1e6 / len(res["epochs"])
        test = res["link"]["test"]
        ages = rows_cache.get("mean_served_age")
        runs.append({"variant": name, "test": test, "cache": rows_cache, "embed_mb": embed_mb})
        rows.append(
            [
                name,
                f"{test['mrr']:.3f}",
                f"{100 * test['auc']:.1f}",
                "-" if not rows_cache else f"{100 * (rows_cache['hit_rate'] or 0):.1f}",
                "-" if ages is None else f"{ages:.2f} / {rows_cache['max_served_age']}",
                f"{embed_mb:.1f}",
                f"{np.mean([e['time_s'] for e in measured]):.1f}",
            ]
        )
        print(rows[-1], flush=True)
    columns = ["rows of peers", "test MRR", "AUC %", "row cache hit %"]
    columns += ["age served (mean / max)", "row + gradient MB / epoch", "epoch (s)"]
    header = (
        f"{config.dataset}, 2 workers, --embedding-dim {a.dim} (row-wise Adagrad), "
        f"{a.epochs} epochs, seed {config.seed}"
    )
    return publish(a.out, a.md, header, columns, rows, runs=runs)


def workers_part(a) -> int:
    """1 process against 2 workers with sharded rows, same featureless graph and settings."""
    from shardgnn.graph.io import save_graph
    from shardgnn.graph.synthetic import SyntheticConfig, generate

    graph = generate(SyntheticConfig(nodes=a.nodes, degree=10, classes=8, features=1, seed=0))
    graph = dataclasses.replace(graph, x=None)
    rows = []
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        save_graph(graph, Path(tmp) / "g")
        spec = f"graph:{Path(tmp) / 'g'}"
        for seed in range(a.seeds):
            for workers in (1, 2):
                out = Path(tmp) / f"r{workers}_{seed}.json"
                cmd = [sys.executable, "-m", "shardgnn", "train", spec, "--fanouts", "10,10"]
                cmd += ["--hidden", "64", "--batch-size", "1024", "--epochs", str(a.epochs)]
                cmd += ["--embedding-dim", str(a.dim), "--embedding-lr", "0.1", "--seed", str(seed)]
                cmd += ["--quiet", "--results", str(out)]
                if workers > 1:
                    cmd += ["--workers", str(workers)]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                res = json.loads(out.read_text())
                embed = res.get("comm", {}).get("embed", {})
                runs.append(
                    {
                        "workers": workers,
                        "seed": seed,
                        "test_acc": res["test_acc"],
                        "epoch_s": res["mean_epoch_time_s"],
                        "embed_mb": embed.get("bytes_sent", 0) / 1e6,
                        "epochs": res["epochs"],
                    }
                )
    table_mb = a.nodes * a.dim * 4 / 1e6
    for workers in (1, 2):
        sel = [r for r in runs if r["workers"] == workers]
        acc = 100 * np.array([r["test_acc"] for r in sel])
        held = table_mb / workers  # METIS parts are balanced in nodes
        rows.append(
            [
                str(workers),
                f"{acc.mean():.2f} ± {acc.std():.2f}",
                f"{np.mean([r['epoch_s'] for r in sel]):.2f}",
                f"{held:.1f} of {table_mb:.1f}",
                f"{np.mean([r['embed_mb'] for r in sel]) / a.epochs:.1f}",
            ]
        )
    columns = ["workers", "test acc %", "epoch (s)", "rows per worker (MB)"]
    header = (
        f"featureless synthetic graph, {a.nodes:,} nodes, 8 classes, --embedding-dim {a.dim}, "
        f"{a.epochs} epochs, {a.seeds} seed(s)"
    )
    return publish(a.out, a.md, header, [*columns, "row bytes per epoch (MB)"], rows, runs=runs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data"))
    p.add_argument("--dataset", default="soc-slashdot")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--model", default="sage")
    p.add_argument("--part", default="link", choices=("link", "workers", "staleness"))
    p.add_argument("--bounds", default="0,4,16", help="--part staleness: staleness bounds")
    p.add_argument("--policies", default="degree,lru", help="--part staleness: cache policies")
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--optimizers", default="adagrad,adam")
    p.add_argument("--workers", type=int, default=1, help="link part: train on this many workers")
    p.add_argument("--out", help="default: benchmarks/out/embedding[_workers].json")
    p.add_argument("--md", help="default: benchmarks/out/embedding[_workers].md")
    a = p.parse_args(argv)
    stem = "benchmarks/out/embedding" + {"workers": "_workers", "staleness": "_staleness"}.get(
        a.part, ""
    )
    a.out, a.md = a.out or f"{stem}.json", a.md or f"{stem}.md"
    if a.part == "workers":
        return workers_part(a)
    if not Path(a.data_dir).is_dir():
        print(f"skipped: {a.data_dir} is absent")
        return 0
    hits_at = (10, 50)
    runs, rows = [], []
    if a.part == "staleness":
        return staleness_part(a, link_config(a, "adagrad", hits_at))
    for optimizer in a.optimizers.split(","):
        config = link_config(a, optimizer, hits_at)
        start = time.perf_counter()
        res = train_link(config, a.workers)
        wall = time.perf_counter() - start
        last = res["epochs"][-1]
        stages = {k: last["stages"].get(k, 0.0) for k in STAGES}
        total = sum(stages.values())
        runs.append(
            {
                "optimizer": optimizer,
                "test": res["link"]["test"],
                "epochs": res["epochs"],
                "wall_s": wall,
                "train_edges_per_s": res["dataset"]["train_edges"] / last["time_s"],
                "stage_share": {k: v / total for k, v in stages.items()},
            }
        )
        t = res["link"]["test"]
        rows.append(
            [
                f"shardgnn, {a.workers} worker(s), --embedding-optimizer {optimizer}",
                f"{t['mrr']:.3f}",
                f"{100 * t['hits@10']:.1f}",
                f"{100 * t['hits@50']:.1f}",
                f"{100 * t['auc']:.1f}",
                f"{runs[-1]['train_edges_per_s']:,.0f}",
                " / ".join(f"{100 * runs[-1]['stage_share'][k]:.0f}" for k in STAGES),
            ]
        )
    for name, t in baselines(config, hits_at).items():
        runs.append({"baseline": name, "test": t})
        row = [name, f"{t['mrr']:.3f}", f"{100 * t['hits@10']:.1f}", f"{100 * t['hits@50']:.1f}"]
        rows.append([*row, f"{100 * t['auc']:.1f}", "-", "-"])
    columns = ["scorer", "test MRR", "Hits@10 %", "Hits@50 %", "AUC %", "train edges/s"]
    header = (
        f"{a.dataset}, --model {a.model}, --embedding-dim {a.dim}, {a.epochs} epoch(s), "
        f"{a.workers} worker(s); edges/s and stage shares of the last epoch"
    )
    columns.append("% " + " / ".join(STAGES))
    return publish(a.out, a.md, header, columns, rows, runs=runs)


if __name__ == "__main__":
    sys.exit(main())
