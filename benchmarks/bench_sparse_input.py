"""Bag-of-words features trained as sparse input rows against the tree before, side by side
(BENCHMARKS sections 32c, 32f): one process, mini-batch and full-graph, node classification or
(``--task link``) link prediction, on the real graphs whose features are mostly zero.

    git worktree add /tmp/before <commit before the change>
    python benchmarks/bench_sparse_input.py --before /tmp/before/src --after src \\
        --data-dir ../shared/data --out benchmarks/out/sparse_input.json
    python benchmarks/bench_sparse_input.py --before /tmp/before/src --after src --task link \
        --modes minibatch --data-dir ../shared/data --out benchmarks/out/sparse_input_link.json

Each (dataset, mode) runs ``--rounds`` times per tree, the trees in turn (before, after, before,
after...), each run a fresh process (``PYTHONPATH`` at that tree's ``src``). Per run: the mean
epoch time over epochs 2 and on (``mean_epoch_time_s``), the evaluation seconds per epoch, the
process's peak memory and the test metric (accuracy; link prediction's AUC); the table gives
each tree's median and the ratio after/before of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

DATASETS = ("cora", "citeseer", "coauthor-cs", "coauthor-physics", "coauthor-cs:split=60-20-20",
            "coauthor-physics:split=60-20-20")  # fmt: skip
"""the real graphs here whose features are mostly zero (the amazon ones are a third non-zero),
with their standard splits (20 training nodes a class) and with 60 % of the nodes training"""
MODES = ("minibatch", "full")


def run(src: str, dataset: str, mode: str, args, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    cmd = [sys.executable, "-m", "shardgnn", "train", dataset, "--data-dir", args.data_dir]
    cmd += ["--epochs", str(args.epochs), "--seed", "1", "--quiet", "--results", str(out)]
    cmd += ["--task", args.task]
    if mode == "full":
        cmd += ["--mode", "full"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} (PYTHONPATH={src}) failed:\n{done.stderr[-2000:]}")
    results = json.loads(out.read_text())
    evals = [e["stages"].get("eval", 0.0) for e in results["epochs"][1:]]
    return {
        "epoch_s": results["mean_epoch_time_s"],
        "eval_s": statistics.mean(evals),
        "peak_mb": max(results["peak_memory_mb"]["rss"]),
        "test_acc": results["test_acc"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="src folder of the tree before")
    parser.add_argument("--after", required=True, help="src folder of the tree after")
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--task", default="node", choices=("node", "link"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="write the runs and the table's figures as JSON")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets:
            for mode in args.modes:
                runs: dict[str, list[dict]] = {"before": [], "after": []}
                for r in range(args.rounds):
                    for tree, src in (("before", args.before), ("after", args.after)):
                        out = Path(tmp) / f"{tree}.json"
                        runs[tree].append(run(src, dataset, mode, args, out))
                        print(f"{dataset} {mode} round {r + 1} {tree}: {runs[tree][-1]}",
                              file=sys.stderr)  # fmt: skip
                med = {
                    tree: {k: statistics.median(x[k] for x in got) for k in got[0]}
                    for tree, got in runs.items()
                }
                rows.append({"dataset": dataset, "task": args.task, "mode": mode, "median": med,
                             "runs": runs})  # fmt: skip
    print("| dataset | mode | epoch s before | after | ratio | eval s before | after | ratio "
          "| peak MB before | after | test metric before | after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        b, a = row["median"]["before"], row["median"]["after"]
        print(
            f"| {row['dataset']} | {row['mode']} | {b['epoch_s']:.3f} | {a['epoch_s']:.3f} | "
            f"{a['epoch_s'] / b['epoch_s']:.2f}x | {b['eval_s']:.3f} | {a['eval_s']:.3f} | "
            f"{a['eval_s'] / b['eval_s']:.2f}x | {b['peak_mb']:,.0f} | {a['peak_mb']:,.0f} | "
            f"{b['test_acc']:.4f} | {a['test_acc']:.4f} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
