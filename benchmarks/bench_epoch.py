"""Single-process mini-batch GraphSAGE epoch time on the synthetic graph.

Builds the graph with ``shardgnn.graph.synthetic.generate``, trains with
``shardgnn.train.single.LocalSteps`` (in the shared ``TrainingLoop``) and reports, per epoch, the
training time split into the trainer's stages (sample / fetch / compute / other), batches, seconds
per batch, sampled edges/s and the validation accuracy. The validation pass the trainer runs after
every epoch is reported separately (``eval_s``); it is not part of the epoch time. Epoch 0 includes
numba JIT compilation (unless cached) and first-touch costs, so the headline is the mean over epochs
>= 1. Run ``python benchmarks/bench_epoch.py --help``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import numpy as np

from shardgnn.atomic import atomic_open, save_json
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.progress import format_table
from shardgnn.train.single import LocalSteps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=1_000_000, help="synthetic graph nodes")
    p.add_argument("--degree", type=float, default=20.0, help="synthetic graph average degree")
    p.add_argument("--features", type=int, default=100, help="feature dimension")
    p.add_argument("--classes", type=int, default=16, help="label classes")
    p.add_argument(
        "--fanouts", default="10,10,10", help="comma-separated fanouts, output layer first"
    )
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--batch-size", type=int, default=1024, help="training seed nodes per batch")
    p.add_argument(
        "--epochs", type=int, default=2, help="training epochs (>= 2: epoch 0 includes JIT)"
    )
    p.add_argument(
        "--threads", type=int, default=2, help="torch intra-op and numba sampling threads"
    )
    p.add_argument("--seed", type=int, default=0, help="training seed")
    p.add_argument("--graph-seed", type=int, default=0, help="synthetic graph seed")
    p.add_argument(
        "--dropout",
        choices=("hashed", "torch", "both"),
        default="hashed",
        help="dropout masks: shardgnn's parallel counter-based kernel (the default), torch's "
        "F.dropout, or both one after the other on the same graph (ratio in the same run)",
    )
    p.add_argument("--out", default="benchmarks/out/epoch.json", help="results JSON")
    p.add_argument("--md", default="benchmarks/out/epoch.md", help="results Markdown table")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be >= 2: epoch 0 includes JIT compilation and is not the headline")
    return args


class _CountingSampler:
    """Wraps the training sampler to count sampled edges and input nodes per epoch."""

    def __init__(self, inner):
        self.inner = inner
        self.edges = self.input_nodes = self.batches = 0

    def sample(self, seeds, seed):
        out = self.inner.sample(seeds, seed)
        self.edges += out.num_sampled_edges
        self.input_nodes += int(out.input_nodes.shape[0])
        self.batches += 1
        return out

    def take(self) -> tuple[int, int, int]:
        counts = (self.edges, self.input_nodes, self.batches)
        self.edges = self.input_nodes = self.batches = 0
        return counts


class BenchTrainer(LocalSteps):
    """The stock trainer plus per-epoch counts of sampled edges, input nodes and batches."""

    def __init__(self, config: TrainConfig, graph):
        super().__init__(config, graph)
        stage = self.train_loader.stages.samples  # the NeighborSamplingStage of the training loader
        self.counter = _CountingSampler(stage.sampler)
        stage.sampler = self.counter
        self.epoch_counts: list[tuple[int, int, int]] = []

    def train_epoch(self, run):
        out = super().train_epoch(run)
        self.epoch_counts.append(self.counter.take())
        return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    load_before = os.getloadavg()

    t0 = time.perf_counter()
    gcfg = SyntheticConfig(
        nodes=args.nodes,
        degree=args.degree,
        features=args.features,
        classes=args.classes,
        seed=args.graph_seed,
    )
    graph = generate(gcfg)
    gen_s = time.perf_counter() - t0
    print(
        f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, {graph.num_features} "
        f"features, {len(graph.train_idx):,} train / {len(graph.val_idx):,} val seeds; generated "
        f"in {gen_s:.1f} s",
        flush=True,
    )

    config = TrainConfig(
        dataset=gcfg.spec(),
        mode="minibatch",
        model=ModelConfig(model="sage", hidden=args.hidden, num_layers=len(fanouts)),
        sampler=SamplerConfig(fanouts=fanouts, replace=False, num_threads=args.threads),
        optim=OptimConfig(epochs=args.epochs),
        batch_size=args.batch_size,
        threads=args.threads,
        seed=args.seed,
        progress=False,
    )
    runs = {}
    for impl in ("hashed", "torch") if args.dropout == "both" else (args.dropout,):
        t0 = time.perf_counter()
        trainer = BenchTrainer(config, graph)
        if impl == "torch":
            trainer.model.dropout_seed = None  # GNN falls back to torch's F.dropout
        setup_s = time.perf_counter() - t0
        results = TrainingLoop(config, trainer).run()
        epochs = []
        for record, (edges, inputs, batches) in zip(results["epochs"], trainer.epoch_counts):
            st = record["stages"]
            sample, fetch, compute = (
                st.get("sample", 0.0),
                st.get("fetch", 0.0),
                st.get("compute", 0.0),
            )
            epochs.append(
                {
                    "epoch": record["epoch"],
                    "time_s": record["time_s"],
                    "sample_s": sample,
                    "fetch_s": fetch,
                    "compute_s": compute,
                    "other_s": record["time_s"] - sample - fetch - compute,
                    "eval_s": st.get("eval", 0.0),
                    "batches": batches,
                    "s_per_batch": record["time_s"] / max(batches, 1),
                    "sampled_edges": edges,
                    "sampled_edges_per_s": edges / sample if sample > 0 else None,
                    "mean_input_nodes": inputs / max(batches, 1),
                    "loss": record["loss"],
                    "train_acc": record["train_acc"],
                    "val_acc": record["val_acc"],
                }
            )
        runs[impl] = {"epochs": epochs, "results": results, "setup_s": setup_s}
        print(f"dropout={impl}: epochs {[round(e['time_s'], 1) for e in epochs]} s", flush=True)
    keys = (
        "time_s",
        "sample_s",
        "fetch_s",
        "compute_s",
        "other_s",
        "eval_s",
        "s_per_batch",
        "sampled_edges_per_s",
    )
    for run in runs.values():
        run["headline"] = {k: float(np.mean([e[k] for e in run["epochs"][1:]])) for k in keys}
    impl = next(iter(runs))
    epochs, results, setup_s, headline = (
        runs[impl][k] for k in ("epochs", "results", "setup_s", "headline")
    )

    headers = [
        "epoch",
        "epoch s",
        "sample s",
        "fetch s",
        "compute s",
        "other s",
        "batches",
        "s/batch",
        "M sampled edges/s",
        "input nodes/batch",
        "val acc",
        "eval s (separate)",
    ]

    def row(e, label):
        return [
            label,
            f"{e['time_s']:.1f}",
            f"{e['sample_s']:.1f}",
            f"{e['fetch_s']:.1f}",
            f"{e['compute_s']:.1f}",
            f"{e['other_s']:.2f}",
            e["batches"],
            f"{e['s_per_batch']:.3f}",
            f"{(e['sampled_edges_per_s'] or 0) / 1e6:.1f}",
            round(e["mean_input_nodes"]),
            f"{e['val_acc']:.4f}",
            f"{e['eval_s']:.1f}",
        ]

    rows = []
    for impl, run in runs.items():
        tag = f"{impl} dropout: " if len(runs) > 1 else ""
        rows += [
            row(e, tag + str(e["epoch"]) + (" (JIT)" if e["epoch"] == 0 else ""))
            for e in run["epochs"]
        ]
        st = run["epochs"][1:]
        rows.append(
            row(
                dict(
                    run["headline"],
                    batches=st[0]["batches"],
                    val_acc=st[-1]["val_acc"],
                    mean_input_nodes=float(np.mean([e["mean_input_nodes"] for e in st])),
                ),
                tag + "mean >= 1",
            )
        )
    table = format_table(headers, rows)
    if len(runs) > 1:
        ratio = runs["hashed"]["headline"]["time_s"] / runs["torch"]["headline"]["time_s"]
        compute = runs["hashed"]["headline"]["compute_s"] / runs["torch"]["headline"]["compute_s"]
        table += (
            f"\n\nhashed / torch dropout, same run: epoch time {ratio:.3f}x, "
            f"compute time {compute:.3f}x"
        )
    title = (
        f"Mini-batch GraphSAGE epoch on synthetic {graph.num_nodes:,} nodes / {graph.num_edges:,} "
        f"edges, {graph.num_features} features, {graph.num_classes} classes; {len(fanouts)} "
        f"layers, hidden {args.hidden}, fanouts {','.join(map(str, fanouts))}, batch "
        f"{args.batch_size}, {args.threads} threads"
    )
    report = {
        "benchmark": "epoch",
        "command": command,
        "argv": sys.argv,
        "args": vars(args),
        "machine": dict(machine_info(), loadavg_before=load_before, loadavg_after=os.getloadavg()),
        "graph": {
            "name": graph.name,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "generate_s": gen_s,
        },
        "trainer_setup_s": setup_s,
        "headline_epochs_ge_1": headline,
        "epochs": epochs,
        "dropout_runs": {
            impl: {"headline_epochs_ge_1": run["headline"], "epochs": run["epochs"]}
            for impl, run in runs.items()
        },
        "final": {k: results[k] for k in ("best_epoch", "val_acc", "test_acc", "total_time_s")},
        "train_config": results["config"],
    }
    save_json(args.out, report)
    with atomic_open(args.md, "w") as fh:
        fh.write(
            f"{title}\n\n{table}\n\n`epoch s` is the training loop only; `other` = epoch - sample "
            "- fetch - compute (loop overhead, loss/accuracy bookkeeping). `eval s` is the "
            "validation pass after each epoch, not included in `epoch s`. Sampled edges/s = "
            "sampled edges / sample seconds. Epoch 0 includes numba JIT compilation (unless "
            f"cached); the headline is the mean over epochs >= 1.\n\nCommand: `{command}`\n"
        )
    print(
        f"\n{title}\n\n{table}\n\nfinal: val {results['val_acc']:.4f}, test "
        f"{results['test_acc']:.4f} (best epoch {results['best_epoch']})\nwrote {args.out} and "
        f"{args.md}"
    )
    return report


if __name__ == "__main__":
    main()
