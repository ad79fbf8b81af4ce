"""One `shardgnn train` command's epochs with this tree's package and with another tree's, in
turn (A B B A ...: the pairs' order alternates so the machine's drift falls on both): the mean
training epoch (epochs 2 on, evaluation excluded) of each run, and the ratio this tree / the
baseline pair by pair. The baseline is a checkout of an earlier commit (its `src` folder, put
first on PYTHONPATH for its runs and its workers).

    git worktree add /tmp/base 533c33f
    python benchmarks/ab_epochs.py --baseline /tmp/base/src --out benchmarks/out/ab_calls.json \\
        -- --workers 2 --batch-size 512 --host-sharing off --epochs 20
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

from machine import publish  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def mean_epoch(flags: list[str], pythonpath: str | None) -> float:
    """The mean training epoch (epochs 2 on) of ``shardgnn train FLAGS`` run with the package
    found first on ``pythonpath`` (None: this tree's)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "shardgnn", "train", *flags, "--quiet", "--results", str(out)]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        epochs = json.loads(out.read_text())["epochs"][1:]
    return statistics.mean(e["time_s"] for e in epochs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the earlier tree's src folder")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "ab_epochs.json"))
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="-- then `shardgnn train` flags")
    args = parser.parse_args(argv)
    flags = args.flags[1:] if args.flags[:1] == ["--"] else args.flags
    if not (Path(args.baseline) / "shardgnn").is_dir():
        parser.error(f"--baseline {args.baseline}: no shardgnn package in it (give a tree's src)")
    runs: dict[str, list[float]] = {"this tree": [], "baseline": []}
    for pair in range(args.pairs):
        order = ["this tree", "baseline"][:: 1 if pair % 2 == 0 else -1]
        for name in order:
            runs[name].append(mean_epoch(flags, args.baseline if name == "baseline" else None))
        print(f"pair {pair + 1}: " + ", ".join(f"{n} {runs[n][-1]:.4f} s" for n in runs),
              file=sys.stderr, flush=True)  # fmt: skip
    ratios = [a / b for a, b in zip(runs["this tree"], runs["baseline"])]
    rows = [
        [name, f"{statistics.median(v):.4f}", " ".join(f"{x:.4f}" for x in v)]
        for name, v in runs.items()
    ]
    rows.append(["ratio (pair by pair)", f"{statistics.median(ratios):.3f}",
                 " ".join(f"{r:.3f}" for r in ratios)])  # fmt: skip
    return publish(
        args.out,
        str(Path(args.out).with_suffix(".md")),
        f"`shardgnn train {' '.join(flags)}`: this tree against {args.baseline} "
        f"(`{' '.join(sys.argv)}`)",
        ["", "median mean epoch s", "each pair's"],
        rows,
        flags=flags,
        runs=runs,
        ratios=ratios,
        median_ratio=statistics.median(ratios),
    )


if __name__ == "__main__":
    sys.exit(main())
