"""R-GCN node classification on the synthetic academic graph: 2 workers against 1, 3 seeds.

    python benchmarks/bench_hetero_workers.py --papers 550000 --seeds 3
    python benchmarks/bench_hetero_workers.py --papers 20000 --labels multilabel --workers 0,1,2

The graph (``synthetic-hetero``, papers : authors : institutions : fields as set below, about
1M nodes at the defaults; every relation also reversed, so 8 relations) is partitioned once per
worker count with ``shardgnn partition`` (METIS with one balance constraint per node type for 2
parts; one part for 1 worker), then trained with ``shardgnn train --partitions DIR --model
rgcn`` for each seed (the seed changes the initial weights, the batches and the draws; the
graph is the same). Papers have features (a linear projection per featured type); authors,
institutions and fields get sharded learnt rows. Both worker counts run the same global batch
and number of steps. Worker count 0 is one process without partitions (``shardgnn train SPEC
--model rgcn``: its learnt rows held and stepped as one worker holds them). ``--labels``
(``multilabel``, ``regression``, ``multitask``) gives the papers a label table derived from their
topics instead of the topic (``synthetic-hetero:labels=...``); the metric is then that label
kind's (mean ROC-AUC, mean R², the tasks' weighted mean).

Reported per worker count: test accuracy (at the best validation epoch) mean ± sample std over
seeds, the difference to 1 worker (target: within 1 point), the steady epoch time (epochs >= 2)
and, for 2 workers, the bytes per epoch by relation (sampled edges drawn by the other worker's
owner: neighbour, edge id and relation, 24 bytes each) and by node type (input rows owned by
the other worker: feature rows, or learnt rows and their gradients back), summed over workers.
Writes ``benchmarks/out/hetero_workers.{json,md}``; the JSON holds every run's results.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from machine import publish, shardgnn  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--papers", type=int, default=550_000)
    p.add_argument("--authors", type=int, default=440_000)
    p.add_argument("--institutions", type=int, default=6_000)
    p.add_argument("--fields", type=int, default=4_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--workers", default="1,2", help="worker counts; 0: one process")
    p.add_argument("--labels", default="class", help="synthetic-hetero's labels= option")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--fanouts", default="8,8")
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--work-dir", default=None, help="partition directories (default: a temp dir)")
    p.add_argument("--out", default="benchmarks/out/hetero_workers")
    a = p.parse_args()
    spec = (
        f"synthetic-hetero:papers={a.papers},authors={a.authors},"
        f"institutions={a.institutions},fields={a.fields}"
        + ("" if a.labels == "class" else f",labels={a.labels}")
    )
    workers = [int(w) for w in a.workers.split(",")]
    runs: dict[int, list[dict]] = {w: [] for w in workers}
    with tempfile.TemporaryDirectory(prefix="hetero-workers-", dir=a.work_dir) as scratch:
        for w in workers:
            parts = Path(scratch) / f"p{w}"
            method = "metis" if w > 1 else "random"
            source = [spec]
            if w:
                shardgnn("partition", spec, "--parts", str(w), "--method", method, "--out",
                         str(parts), "--quiet")  # fmt: skip
                source = ["--partitions", str(parts)]
            for seed in range(a.seeds):
                out = Path(scratch) / f"r{w}_{seed}.json"
                shardgnn(
                    "train", *source, "--model", "rgcn", "--fanouts", a.fanouts,
                    "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--hidden",
                    str(a.hidden), "--lr", str(a.lr), "--seed", str(seed), "--results", str(out),
                    "--quiet",
                )  # fmt: skip
                runs[w].append(json.loads(out.read_text()))
                print(f"workers {w} seed {seed}: test {runs[w][-1]['test_acc']:.4f}", flush=True)
    base = np.array([r["test_acc"] for r in runs[workers[0]]]) * 100
    metric = runs[workers[0]][0].get("metric", "acc")
    rows = []
    for w in workers:
        acc = np.array([r["test_acc"] for r in runs[w]]) * 100
        epoch = np.array([r["mean_epoch_time_s"] for r in runs[w]])
        rows.append(
            [
                w or "one process",
                f"{acc.mean():.2f} ± {acc.std(ddof=1) if len(acc) > 1 else 0:.2f}",
                f"{acc.mean() - base.mean():+.2f}",
                f"{epoch.mean():.1f}",
            ]
        )
    last = runs[workers[-1]]
    if "relational" not in last[0]:
        last = []
    by_relation = {
        name: float(
            np.mean([r["relational"]["relations"][name]["remote_mb_per_epoch"] for r in last])
        )
        for name in (last[0]["relational"]["relations"] if last else ())
    }
    by_type = {
        name: float(
            np.mean([r["relational"]["node_types"][name]["remote_mb_per_epoch"] for r in last])
        )
        for name in (last[0]["relational"]["node_types"] if last else ())
    }
    first = runs[workers[-1]][0]
    print("MB per epoch by relation:", json.dumps(by_relation, indent=1))
    print("MB per epoch by node type:", json.dumps(by_type, indent=1))
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"R-GCN on {spec} ({first['dataset']['num_nodes']:,} nodes, "
        f"{first['dataset']['num_edges']:,} edges), fanouts {a.fanouts}, global "
        f"batch {a.batch_size}, {a.epochs} epochs, {a.seeds} seeds; test {metric} at the best "
        f"validation epoch (mean ± sample std), difference to {workers[0] or 'one process'} "
        "(workers), steady epoch time",
        ["workers", f"test {metric} %", "difference (points)", "epoch s"],
        rows,
        remote_mb_per_epoch_by_relation=by_relation,
        remote_mb_per_epoch_by_node_type=by_type,
        runs={str(w): r for w, r in runs.items()},
    )


if __name__ == "__main__":
    sys.exit(main())
