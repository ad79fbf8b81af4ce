"""Dynamic node classification on timestamped events (issue 31): each event's source's label at
that time, predicted from its embedding before the event (TGN, JODIE, TGAT), on the synthetic
stream with drifting communities (`synthetic-temporal:classes=K`: a `drift` share of the nodes
moves to another community once; the events' features carry the community their destination was
drawn from). Per seed: every stream model in one process, TGN with the labels alone
(`--temporal-link-weight 0`), TGN on 2 workers; test accuracy, macro F1, epoch time. Beside
them two estimators that know how the stream was made (no learning): the nearest class mean
(from the training events) of the mean features of each source's earlier events, all of them or
its last 10, which says how much of the drift a model follows.

    python benchmarks/bench_temporal_node.py --seeds 0,1,2

Writes ``benchmarks/out/temporal_node.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from machine import run_logged, write_report  # noqa: E402
from shardgnn.graph.datasets import load_temporal_dataset
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
GRAPH = "synthetic-temporal:nodes=2000,events=40000,classes=4,features=16"
RUNS = {
    "tgn": ("tgn", 1, []),
    "tgn, labels alone": ("tgn", 1, ["--temporal-link-weight", "0"]),
    "jodie": ("jodie", 1, []),
    "tgat (learnt rows)": ("tgat", 1, ["--temporal-neighbors", "10", "--embedding-dim", "64"]),
    "tgn, 2 workers": ("tgn", 2, []),
}  # fmt: skip
RECENT = 10
"""the earlier events the 'recent' estimator averages per source"""


def feature_estimators(spec: str, val: float, test: float) -> dict[str, float]:
    """Test accuracy of the nearest class mean of each test event's source's earlier events'
    mean features: over all of them, and over the last :data:`RECENT` (an event whose source has
    none counts as wrong)."""
    g = load_temporal_dataset(spec)
    val_start, test_start = g.split_points(val, test)
    means = np.stack(
        [g.edge_feat[:val_start][g.labels[:val_start] == c].mean(axis=0)
         for c in range(int(g.labels.max()) + 1)]
    )  # fmt: skip
    history: dict[int, list[int]] = {}
    right = {"all earlier events": 0, f"last {RECENT} events": 0}
    for e in range(g.num_events):
        s = int(g.src[e])
        past = history.setdefault(s, [])
        if e >= test_start and past:
            for name, rows in (
                ("all earlier events", past),
                (f"last {RECENT} events", past[-RECENT:]),
            ):
                mean = g.edge_feat[rows].mean(axis=0)
                guess = int(np.argmin(((means - mean) ** 2).sum(axis=1)))
                right[name] += guess == int(g.labels[e])
        past.append(e)  # an event is in both endpoints' histories, as in the models' T-CSR
        history.setdefault(int(g.dst[e]), []).append(e)
    return {name: count / (g.num_events - test_start) for name, count in right.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default=GRAPH)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "temporal_node.json"))
    args = parser.parse_args(argv)
    exe = str(Path(sys.executable).parent / "shardgnn")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            graph = f"{args.graph},seed={seed}"
            for name, (model, workers, flags) in RUNS.items():
                out = Path(tmp) / f"{seed}-{len(rows)}.json"
                cmd = [
                    exe, "train", graph, "--task", "node", "--model", model,
                    "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                    "--seed", str(seed), "--quiet", "--results", str(out), *flags,
                ]  # fmt: skip
                if workers > 1:
                    cmd += ["--workers", str(workers)]
                run_logged(cmd, out.with_suffix(".log"))
                r = json.loads(out.read_text())
                late = r["epochs"][1:] or r["epochs"]
                test = r["event_labels"]["test"]
                rows.append({
                    "run": name, "seed": seed, "acc": test["acc"], "macro_f1": test["macro_f1"],
                    "epoch_s": sum(e["time_s"] for e in late) / len(late),
                })  # fmt: skip
                print(rows[-1], file=sys.stderr, flush=True)
            for name, acc in feature_estimators(graph, 0.15, 0.15).items():
                rows.append({"run": f"estimator: {name}", "seed": seed, "acc": acc})
    table_rows = []
    for name in [*RUNS, "estimator: all earlier events", f"estimator: last {RECENT} events"]:
        mine = [r for r in rows if r["run"] == name]
        acc = np.array([r["acc"] for r in mine])
        f1 = [r["macro_f1"] for r in mine if "macro_f1" in r]
        epoch = [r["epoch_s"] for r in mine if "epoch_s" in r]
        table_rows.append([
            name, " / ".join(f"{a:.4f}" for a in acc),
            f"{acc.mean():.4f} ± {acc.std(ddof=1) if acc.size > 1 else 0.0:.4f}",
            f"{np.mean(f1):.4f}" if f1 else "-", f"{np.mean(epoch):.2f}" if epoch else "-",
        ])  # fmt: skip
    table = format_table(
        ["run", "test accuracy per seed", "mean ± std", "macro F1", "epoch s"], table_rows
    )
    write_report(
        args.out, str(Path(args.out).with_suffix(".md")),
        f"Dynamic node classification, {args.graph}, seeds {args.seeds}, {args.epochs} epochs",
        table, graph=args.graph, runs=rows,
    )  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
