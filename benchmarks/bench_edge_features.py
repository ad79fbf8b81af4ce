"""Edge features on one large graph with workers (issue 31): GINE on `synthetic:edge_features=D`
(the class signal on the edges only) at P workers whose every remote row crosses a collective
(`--host-sharing off`), over this machine's loopback and inside a network namespace whose
loopback `tc` limits to a rate (bench_plan_time's `link`, `--links host,200mbit`). Per link and
configuration (exact rows; `--fetch-bits 8`; a presample cache of node and edge rows; both):
the epoch time, the fetch stage's seconds and bytes (node and edge rows travel together), the
edge cache's hit rate, the edge rows each epoch requests from other workers, and the test
accuracy.

    python benchmarks/bench_edge_features.py --out benchmarks/out/edge_features.json

``--part link``: link prediction on such a graph (the classes, carried by the edges, decide
which nodes link: homophily), per seed: GraphSAGE and GINE in one process, GINE on 2 workers
(exact rows; 8-bit rows through presample caches), mini-batch and full-graph (GAE); test AUC,
MRR and the mean epoch time. Writes ``benchmarks/out/edge_link.{json,md}``.

    python benchmarks/bench_edge_features.py --part link --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_plan_time import link  # noqa: E402
from machine import run_logged, write_report  # noqa: E402
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
FETCH_GRAPH = "synthetic:nodes=100000,edge_features=16,train=0.5"
LINK_GRAPH = "synthetic:nodes=6000,degree=12,edge_features=8"
FULL_EPOCHS = 200
"""full-graph (GAE) steps of ``--part link``: one step per epoch"""
CONFIGS = {
    "exact": [],
    "8-bit": ["--fetch-bits", "8"],
    "cache": ["--cache-policy", "presample", "--cache-size", "20%"],
    "8-bit + cache": ["--fetch-bits", "8", "--cache-policy", "presample", "--cache-size", "20%"],
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", help=f"default: {FETCH_GRAPH} (link: {LINK_GRAPH})")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, help="default: 4 (link: 15 mini-batch epochs)")
    parser.add_argument("--links", default="host", help="loopback rates (host: unlimited)")
    parser.add_argument("--out", help="default: benchmarks/out/edge_features.json (edge_link)")
    parser.add_argument("--part", default="fetch", choices=("fetch", "link"))
    parser.add_argument("--seeds", default="0,1,2", help="--part link: seeds, comma-separated")
    args = parser.parse_args(argv)
    name = "edge_link" if args.part == "link" else "edge_features"
    args.out = args.out or str(REPO / "benchmarks" / "out" / f"{name}.json")
    links_task = args.part == "link"
    args.graph = args.graph or (LINK_GRAPH if links_task else FETCH_GRAPH)
    args.epochs = args.epochs or (15 if links_task else 4)
    if links_task:
        return link_part(args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        parts = str(Path(tmp) / "parts")
        exe = str(Path(sys.executable).parent / "shardgnn")
        subprocess.run(
            [exe, "partition", args.graph, "--parts", str(args.workers), "--out", parts],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for rate in args.links.split(","):
            with link(rate, "shardgnn-edges") as prefix:
                for name, flags in CONFIGS.items():
                    rows.append(_run(args, exe, parts, prefix, rate, name, flags, Path(tmp)))
                    print(rows[-1], file=sys.stderr, flush=True)
    table = format_table(
        ["link", "config", "epoch s", "fetch s", "fetch MB / epoch",
         "edge rows requested MB / epoch", "edge cache hit", "test acc"],
        [
            [r["link"], r["config"], f"{r['epoch_s']:.2f}", f"{r['fetch_s']:.2f}",
             f"{r['fetch_mb_per_epoch']:.1f}", f"{r['edge_requested_mb']:.1f}",
             "-" if r["edge_hit_rate"] is None else f"{100 * r['edge_hit_rate']:.1f}%",
             f"{r['test_acc']:.4f}"]
            for r in rows
        ],
    )  # fmt: skip
    write_report(
        args.out, str(Path(args.out).with_suffix(".md")),
        f"GINE over edge features on {args.workers} workers, {args.graph}, fanouts "
        f"{args.fanouts}, batch {args.batch_size}, {args.epochs} epochs", table,
        graph=args.graph, workers=args.workers, links=args.links, runs=rows,
    )  # fmt: skip
    print(table)
    return 0


def _run(args, exe: str, parts: str, prefix: list, rate: str, name: str, flags: list, tmp: Path):
    """One training run (``prefix``: the link's namespace), as one table row."""
    out = tmp / f"{rate}-{len(flags)}-{name.replace(' ', '')}.json"
    cmd = [
        *prefix, exe, "train", args.graph, "--model", "gine", "--workers", str(args.workers),
        "--partitions", parts, "--host-sharing", "off", "--fanouts", args.fanouts,
        "--batch-size", str(args.batch_size), "--epochs", str(args.epochs), *flags,
        "--quiet", "--results", str(out),
    ]  # fmt: skip
    run_logged(cmd, out.with_suffix(".log"))
    r = json.loads(out.read_text())
    late = r["epochs"][1:] or r["epochs"]  # the first epoch warms up
    caches = [e.get("cache") or {} for e in late]
    edge_hits = [c.get("edge_hit_rate") for c in caches if c.get("edge_hit_rate")]
    return {
        "link": rate,
        "config": name,
        "flags": " ".join(flags),
        "epoch_s": sum(e["time_s"] for e in late) / len(late),
        "fetch_s": sum(e["stages"].get("fetch", 0.0) for e in late) / len(late),
        "fetch_mb_per_epoch": r["comm"]["fetch"]["bytes_sent"] / 1e6 / args.epochs,
        "edge_requested_mb": sum(c.get("edge_requested_mb", 0.0) for c in caches) / len(late),
        "edge_hit_rate": sum(edge_hits) / len(edge_hits) if edge_hits else None,
        "test_acc": r["test_acc"],
    }


LINK_RUNS = {
    # name: (model, mode, workers, flags)
    "sage, one process": ("sage", "minibatch", 1, []),
    "gine, one process": ("gine", "minibatch", 1, []),
    "gine, 2 workers": ("gine", "minibatch", 2, []),
    "gine, 2 workers, 8-bit + cache": (
        "gine", "minibatch", 2,
        ["--fetch-bits", "8", "--cache-policy", "presample", "--cache-size", "20%"],
    ),
    "sage, full graph, one process": ("sage", "full", 1, []),
    "gine, full graph, one process": ("gine", "full", 1, []),
    "gine, full graph, 2 workers": ("gine", "full", 2, []),
}  # fmt: skip


def link_part(args) -> int:
    """``--part link``: every run of :data:`LINK_RUNS` per seed, one table row each, and the
    mean and standard deviation of the test AUC per run over the seeds."""
    graph = args.graph
    exe = str(Path(sys.executable).parent / "shardgnn")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            for name, (model, mode, workers, flags) in LINK_RUNS.items():
                out = Path(tmp) / f"{seed}-{len(rows)}.json"
                epochs = args.epochs if mode == "minibatch" else FULL_EPOCHS
                cmd = [
                    exe, "train", graph, "--task", "link", "--model", model, "--mode", mode,
                    "--hidden", "64", "--dropout", "0", "--epochs", str(epochs),
                    "--seed", str(seed), "--link-split-seed", str(seed), "--quiet",
                    "--results", str(out), *flags,
                ]  # fmt: skip
                if mode == "minibatch":
                    cmd += ["--fanouts", args.fanouts, "--batch-size", "256"]
                if workers > 1:  # mini-batch: the other part's rows cross the all-to-all
                    cmd += ["--workers", str(workers)]
                    cmd += ["--host-sharing", "off"] if mode == "minibatch" else []
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                r = json.loads(out.read_text())
                late = r["epochs"][1:] or r["epochs"]
                rows.append({
                    "run": name, "seed": seed, "epochs": epochs,
                    "auc": r["link"]["test"]["auc"], "mrr": r["link"]["test"]["mrr"],
                    "epoch_s": sum(e["time_s"] for e in late) / len(late),
                })  # fmt: skip
                print(rows[-1], file=sys.stderr, flush=True)
    table_rows = []
    for name in LINK_RUNS:
        mine = [r for r in rows if r["run"] == name]
        auc = [r["auc"] for r in mine]
        mean = sum(auc) / len(auc)
        std = (sum((a - mean) ** 2 for a in auc) / max(len(auc) - 1, 1)) ** 0.5
        table_rows.append([
            name, str(mine[0]["epochs"]), " / ".join(f"{a:.4f}" for a in auc),
            f"{mean:.4f} ± {std:.4f}", f"{sum(r['mrr'] for r in mine) / len(mine):.4f}",
            f"{sum(r['epoch_s'] for r in mine) / len(mine):.2f}",
        ])  # fmt: skip
    table = format_table(
        ["run", "epochs", "test AUC per seed", "mean ± std", "mean MRR", "epoch s"], table_rows
    )
    write_report(
        args.out, str(Path(args.out).with_suffix(".md")),
        f"Link prediction over edge features, {graph}, seeds {args.seeds}", table,
        graph=graph, runs=rows,
    )  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
