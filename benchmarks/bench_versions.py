"""Two checkouts of shardgnn side by side: the same training command, alternated A B A B, the
epoch time each run reports (``mean_epoch_time_s`` of its results JSON: epochs after the first)
and the whole-process wall time, with the ratio new / old pair by pair.

Used for issue 13 (the rebuilt top floor must not slow training down). The old checkout is any
commit, e.g. ``git worktree add /tmp/old ff3c3a1``; both are imported from their ``src``
(``PYTHONPATH``), so neither needs installing. Every invocation appends one comparison to
``--out`` (JSON) and rewrites its Markdown table next to it:

    python benchmarks/bench_versions.py --old /tmp/old --new . --runs 3 --label "1 process" \\
        -- train synthetic:nodes=200000,degree=20 --fanouts 10,10,10 --epochs 4 --quiet

``--`` separates the ``shardgnn`` arguments (the same for both; ``--results`` is added). The
first pair is a warm-up (numba's caches, the page cache) and is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine_info
from shardgnn.atomic import atomic_open, save_json
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]


def run_once(tree: Path, args: list[str], results: Path) -> tuple[float, float]:
    """``(mean epoch seconds, wall seconds)`` of one run of ``shardgnn ARGS`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    # Before 0.2 the CLI is the module shardgnn.cli; since, also `python -m shardgnn`.
    module = "shardgnn.cli" if (tree / "src" / "shardgnn" / "cli.py").exists() else "shardgnn"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", module, *args, "--results", str(results)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    return float(json.loads(results.read_text())["mean_epoch_time_s"]), wall


def commit_of(tree: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return out.stdout.strip() or "?"


def summarize(pairs: list[dict]) -> dict:
    out = {}
    for label, index in (("epoch", 0), ("wall", 1)):
        ratios = [p["new"][index] / p["old"][index] for p in pairs]
        out[label] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "old_median_s": statistics.median(p["old"][index] for p in pairs),
            "new_median_s": statistics.median(p["new"][index] for p in pairs),
        }
    return out


def markdown(report: dict) -> str:
    rows = []
    for c in report["comparisons"]:
        e, w = c["summary"]["epoch"], c["summary"]["wall"]
        rows.append(
            (
                c["label"],
                f"{e['old_median_s']:.2f}",
                f"{e['new_median_s']:.2f}",
                f"{e['median']:.3f} ({e['min']:.3f}–{e['max']:.3f})",
                f"{w['median']:.3f}",
                len(c["pairs"]),
            )
        )
    table = format_table(
        ["run", "old epoch s", "new epoch s", "new/old epoch (min–max)", "new/old wall", "pairs"],
        rows,
    )
    commands = "\n".join(
        f"- {c['label']}: `shardgnn {' '.join(c['command'])}` (old {c['old_commit']}, "
        f"new {c['new_commit']})"
        for c in report["comparisons"]
    )
    return f"{table}\n\n{commands}\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="checkout A (the baseline)")
    p.add_argument("--new", type=Path, required=True, help="checkout B")
    p.add_argument("--runs", type=int, default=3, help="counted pairs (after one warm-up pair)")
    p.add_argument("--label", required=True, help="the row's name in the table")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "versions.json")
    args = p.parse_args(argv[:split])
    command = argv[split + 1 :]
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs + 1):
            pair = {
                name: run_once(tree.resolve(), command, Path(tmp) / f"{name}.json")
                for name, tree in (("old", args.old), ("new", args.new))
            }
            if i:
                pairs.append(pair)
                print(
                    f"pair {i}: epoch old {pair['old'][0]:.3f} s new {pair['new'][0]:.3f} s; "
                    f"wall old {pair['old'][1]:.1f} s new {pair['new'][1]:.1f} s",
                    flush=True,
                )
    report = json.loads(args.out.read_text()) if args.out.exists() else {"comparisons": []}
    report["machine"] = machine_info()
    report["comparisons"] = [c for c in report["comparisons"] if c["label"] != args.label]
    report["comparisons"].append(
        {
            "label": args.label,
            "command": command,
            "old_commit": commit_of(args.old),
            "new_commit": commit_of(args.new),
            "pairs": pairs,
            "summary": summarize(pairs),
            "argv": [sys.executable, *sys.argv],
        }
    )
    save_json(args.out, report)
    text = markdown(report)
    with atomic_open(args.out.with_suffix(".md"), "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
