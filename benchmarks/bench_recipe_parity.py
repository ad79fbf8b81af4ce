"""The same small run of every recipe under two source trees gives the same results, bit for bit
(issue 29: the registry changed who decides the kind of training, not what training does).

    git worktree add /tmp/before <commit before the change>
    python benchmarks/bench_recipe_parity.py --before /tmp/before/src --after src

Each command runs once per tree (``PYTHONPATH`` pointing at that tree's ``src``); every epoch's
loss, training and validation metric and the final test metric are compared exactly. Prints a
table and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = "synthetic:nodes=2000,degree=8,classes=4,features=16"
TYPED = "synthetic-hetero:papers=2000,authors=1500,institutions=20,fields=30"
EVENTS = "synthetic-temporal:nodes=500,events=5000"
COMMON = ["--epochs", "2", "--seed", "1", "--quiet"]
RUNS = {
    "node, 2 workers": [SMALL, "--workers", "2", "--fanouts", "5,5", "--batch-size", "128",
                        "--hidden", "16"],
    "node-full, 2 workers": [SMALL, "--mode", "full", "--workers", "2", "--hidden", "16"],
    "link, one process": [SMALL, "--task", "link", "--fanouts", "5,5", "--batch-size", "256",
                          "--hidden", "16"],
    "typed-node, 2 workers": [TYPED, "--model", "rgcn", "--workers", "2", "--fanouts", "5,5",
                              "--batch-size", "128", "--hidden", "16"],
    "temporal-link (tgn), 2 workers": [EVENTS, "--task", "link", "--model", "tgn", "--workers",
                                       "2", "--batch-size", "200"],
    "snapshot-link (tgcn), one process": [EVENTS, "--task", "link", "--model", "tgcn"],
}  # fmt: skip
KEYS = ("loss", "train_acc", "val_acc")


def run(src: str, argv: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "shardgnn", "train", *argv, *COMMON, "--results", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} (PYTHONPATH={src}) failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())


def signature(results: dict) -> list:
    epochs = [[e.get(k) for k in KEYS] for e in results["epochs"]]
    return [epochs, results.get("test_acc"), results.get("best_epoch")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="src folder of the tree before")
    parser.add_argument("--after", required=True, help="src folder of the tree after")
    args = parser.parse_args()
    rows, same_all = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, argv) in enumerate(RUNS.items()):
            before = run(args.before, argv, Path(tmp) / f"b{i}.json")
            after = run(args.after, argv, Path(tmp) / f"a{i}.json")
            same = signature(before) == signature(after)
            same_all &= same
            last = after["epochs"][-1]
            rows.append((name, f"{last['loss']:.6f}", after.get("test_acc"), same))
    print("| run | last loss | test metric | bit-identical |")
    print("|---|---|---|---|")
    for name, loss, test, same in rows:
        print(f"| {name} | {loss} | {test} | {'yes' if same else '**no**'} |")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
