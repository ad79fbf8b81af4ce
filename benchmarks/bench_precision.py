"""Mixed precision (issue 30, ``--precision bf16``) against fp32 on CPU: epoch time and accuracy.

Part ``epoch``: single-process mini-batch GraphSAGE epochs on a synthetic graph (default 1M nodes,
average degree 20, 100 features; 3 layers, hidden 256, fanouts 15,10,5, batch 1024), fp32 and
bf16 alternated in the same invocation (``--repeats`` runs of each, each a fresh trainer on the
same graph). Epoch 1 includes numba compilation, so each run trains ``--epochs`` (>= 2) and the
headline is the median over runs of the last epoch's training time; the ratio is bf16 / fp32.
``--profile-steps N`` then profiles N training steps of each precision (torch.profiler) and
records the operators' self CPU time, to show what in a bf16 step is not GEMM.

Part ``accuracy``: ``shardgnn train NAME --precision P --seed S`` with each dataset's defaults
(the recipe's, as the command line resolves them), test accuracy at the best validation epoch,
fp32 and bf16 per seed.

    python benchmarks/bench_precision.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import ModelConfig
from shardgnn.precision import bf16_is_fast, precision_context
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.minibatch import node_objective
from shardgnn.train.progress import format_table
from shardgnn.train.single import LocalSteps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

PRECISIONS = ("fp32", "bf16")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--parts", default="epoch,accuracy", help="comma-separated: epoch, accuracy")
    p.add_argument("--nodes", type=int, default=1_000_000, help="synthetic graph nodes")
    p.add_argument("--degree", type=float, default=20.0, help="synthetic graph average degree")
    p.add_argument("--features", type=int, default=100, help="feature dimension")
    p.add_argument("--classes", type=int, default=16, help="label classes")
    p.add_argument(
        "--train", type=float, default=0.1, help="share of nodes that are training seeds"
    )
    p.add_argument(
        "--val", type=float, default=0.01, help="share of validation nodes (evaluated every epoch)"
    )
    p.add_argument("--fanouts", default="15,10,5", help="comma-separated fanouts")
    p.add_argument("--hidden", type=int, default=256, help="hidden width")
    p.add_argument("--batch-size", type=int, default=1024, help="training seeds per batch")
    p.add_argument("--epochs", type=int, default=2, help="epochs per run (the last is timed)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each precision, alternated")
    p.add_argument("--threads", type=int, default=2, help="torch and numba threads")
    p.add_argument("--profile-steps", type=int, default=3, help="steps profiled per precision")
    p.add_argument("--data-dir", default="../shared/data", help="folder of the real datasets")
    p.add_argument(
        "--datasets", default="cora,amazon-computers,coauthor-cs", help="accuracy datasets"
    )
    p.add_argument("--seeds", default="0,1,2", help="accuracy seeds")
    p.add_argument("--out", default="benchmarks/out/precision.json", help="results JSON")
    p.add_argument("--md", default="benchmarks/out/precision.md", help="results Markdown")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be >= 2: the first epoch includes numba compilation")
    return args


def _config(args, graph_spec: str, precision: str) -> TrainConfig:
    fanouts = tuple(int(f) for f in args.fanouts.split(","))
    return TrainConfig(
        dataset=graph_spec,
        model=ModelConfig(model="sage", hidden=args.hidden, num_layers=len(fanouts)),
        sampler=SamplerConfig(fanouts=fanouts, num_threads=args.threads),
        optim=OptimConfig(epochs=args.epochs),
        batch_size=args.batch_size,
        threads=args.threads,
        progress=False,
        precision=precision,
    )


def _profile(steps: LocalSteps, precision: str, count: int) -> list[dict]:
    """Self CPU time per operator over ``count`` training steps (after one warm-up step)."""
    from torch.profiler import ProfilerActivity, profile

    loader = steps.train_loader
    loader.set_epoch(0)
    batches = iter(loader)
    model, optimizer, device = steps.model, steps.optimizer, steps.device

    def step() -> None:
        batch = next(batches)
        graphs = [MessageGraph.from_block(b, device) for b in batch.sample.blocks]
        optimizer.zero_grad(set_to_none=True)
        with precision_context(precision, device):
            loss = node_objective(steps.target)(model, graphs, batch, device).loss
        loss.backward()
        optimizer.step()

    model.train()
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(count):
            step()
    total = sum(e.self_cpu_time_total for e in prof.key_averages())
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    return [
        {
            "op": e.key,
            "self_s_per_step": e.self_cpu_time_total / 1e6 / count,
            "share": e.self_cpu_time_total / max(total, 1),
            "calls_per_step": e.count / count,
        }
        for e in rows
    ]


def epoch_part(args) -> dict:
    t0 = time.perf_counter()
    gcfg = SyntheticConfig(
        nodes=args.nodes,
        degree=args.degree,
        features=args.features,
        classes=args.classes,
        train=args.train,
        val=args.val,
        seed=0,
    )
    graph = generate(gcfg)
    print(
        f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, "
        f"{len(graph.train_idx):,} training seeds ({time.perf_counter() - t0:.1f} s)",
        flush=True,
    )
    runs: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    for repeat in range(args.repeats):
        for precision in PRECISIONS:  # alternated: drift on a shared machine hits both alike
            config = _config(args, gcfg.spec(), precision)
            results = TrainingLoop(config, LocalSteps(config, graph)).run()
            last = results["epochs"][-1]
            stages = last["stages"]
            run = {
                "repeat": repeat,
                "epoch_s": last["time_s"],
                "epochs_s": [e["time_s"] for e in results["epochs"]],
                "compute_s": stages.get("compute", 0.0),
                "sample_s": stages.get("sample", 0.0),
                "fetch_s": stages.get("fetch", 0.0),
                "val_acc": results["val_acc"],
                "test_acc": results["test_acc"],
            }
            runs[precision].append(run)
            print(
                f"{precision} run {repeat}: epochs {[round(t, 1) for t in run['epochs_s']]} s "
                f"(compute {run['compute_s']:.1f} s), test {run['test_acc']:.4f}",
                flush=True,
            )
    median = {
        p: {
            k: statistics.median(r[k] for r in runs[p])
            for k in ("epoch_s", "compute_s", "sample_s", "fetch_s", "test_acc")
        }
        for p in PRECISIONS
    }
    profiles = {}
    if args.profile_steps > 0:
        for precision in PRECISIONS:
            config = _config(args, gcfg.spec(), precision)
            profiles[precision] = _profile(LocalSteps(config, graph), precision, args.profile_steps)
    return {
        "graph": {
            "spec": gcfg.spec(),
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "train": len(graph.train_idx),
        },
        "runs": runs,
        "median": median,
        "ratio_epoch": median["bf16"]["epoch_s"] / median["fp32"]["epoch_s"],
        "ratio_compute": median["bf16"]["compute_s"] / median["fp32"]["compute_s"],
        "profile": profiles,
    }


def accuracy_part(args) -> dict:
    from shardgnn.cli import build_parser
    from shardgnn.cli.train import train_config
    from shardgnn.train.single import run_training

    rows = []
    for name in args.datasets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for precision in PRECISIONS:
                argv = ["train", name, "--data-dir", args.data_dir, "--seed", str(seed)]
                argv += ["--precision", precision, "--threads", str(args.threads), "--quiet"]
                config = train_config(build_parser().parse_args(argv))
                start = time.perf_counter()
                results = run_training(config)
                row = {
                    "dataset": name,
                    "seed": seed,
                    "precision": precision,
                    "test_acc": results["test_acc"],
                    "val_acc": results["val_acc"],
                    "mean_epoch_s": results["mean_epoch_time_s"],
                    "run_s": time.perf_counter() - start,
                    "command": "shardgnn " + " ".join(shlex.quote(a) for a in argv),
                }
                rows.append(row)
                print(
                    f"{name} seed {seed} {precision}: test {row['test_acc']:.4f} "
                    f"({row['run_s']:.1f} s)",
                    flush=True,
                )
    summary = {}
    for name in args.datasets.split(","):
        summary[name] = {}
        for p in PRECISIONS:
            accs = [r["test_acc"] for r in rows if r["dataset"] == name and r["precision"] == p]
            summary[name][p] = {
                "mean": statistics.mean(accs),
                "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            }
    return {"runs": rows, "summary": summary}


def markdown(report: dict) -> str:
    out = []
    epoch = report.get("epoch")
    if epoch:
        g = epoch["graph"]
        out.append(
            f"Epoch, synthetic {g['num_nodes']:,} nodes / {g['num_edges']:,} edges "
            f"({g['train']:,} training seeds), last of {report['args']['epochs']} epochs per run, "
            f"median of {report['args']['repeats']} alternated runs per precision\n"
        )
        rows = []
        for p in PRECISIONS:
            m = epoch["median"][p]
            times = ", ".join(f"{r['epoch_s']:.1f}" for r in epoch["runs"][p])
            rows.append(
                [
                    p,
                    f"{m['epoch_s']:.1f}",
                    times,
                    f"{m['compute_s']:.1f}",
                    f"{m['sample_s']:.1f}",
                    f"{m['fetch_s']:.1f}",
                    f"{m['test_acc']:.4f}",
                ]
            )
        headers = ["precision", "epoch s", "runs", "compute s", "sample s", "fetch s", "test acc"]
        out.append(format_table(headers, rows))
        ratios = f"epoch {epoch['ratio_epoch']:.3f}x, compute {epoch['ratio_compute']:.3f}x"
        out.append(f"\nbf16 / fp32: {ratios}")
        for p, ops in epoch["profile"].items():
            out.append(f"\nProfile, {p}: top operators by self CPU time per step\n")
            out.append(
                format_table(
                    ["op", "s / step", "share", "calls / step"],
                    [
                        [
                            o["op"],
                            f"{o['self_s_per_step']:.3f}",
                            f"{100 * o['share']:.1f}%",
                            f"{o['calls_per_step']:.0f}",
                        ]
                        for o in ops
                    ],
                )
            )
    acc = report.get("accuracy")
    if acc:
        out.append("\nTest accuracy (each dataset's defaults), mean ± std over seeds\n")
        rows = []
        for name, by in acc["summary"].items():
            runs = {
                p: ", ".join(
                    f"{r['test_acc']:.3f}"
                    for r in acc["runs"]
                    if r["dataset"] == name and r["precision"] == p
                )
                for p in PRECISIONS
            }
            rows.append(
                [
                    name,
                    f"{100 * by['fp32']['mean']:.1f} ± {100 * by['fp32']['std']:.1f}",
                    f"{100 * by['bf16']['mean']:.1f} ± {100 * by['bf16']['std']:.1f}",
                    runs["fp32"],
                    runs["bf16"],
                ]
            )
        out.append(format_table(["dataset", "fp32 %", "bf16 %", "fp32 runs", "bf16 runs"], rows))
    out.append(f"\nCommand: `{report['command']}`\n")
    return "\n".join(out)


def main(argv=None) -> dict:
    args = parse_args(argv)
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    torch.set_num_threads(args.threads)
    parts = set(args.parts.split(","))
    report: dict = {
        "benchmark": "precision",
        "command": command,
        "args": vars(args),
        "machine": dict(machine_info(), bf16_native=bf16_is_fast("cpu")),
    }
    if "epoch" in parts:
        report["epoch"] = epoch_part(args)
        save_json(args.out, report)
    if "accuracy" in parts:
        report["accuracy"] = accuracy_part(args)
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    save_json(args.out, report)
    text = markdown(report)
    with atomic_open(args.md, "w") as fh:
        fh.write(text)
    print("\n" + text + f"\nwrote {args.out} and {args.md}")
    return report


if __name__ == "__main__":
    main()
