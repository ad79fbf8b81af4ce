"""Edge features on one large graph with workers (issue 31): GINE on `synthetic:edge_features=D`
(the class signal on the edges only) at P workers whose every remote row crosses a collective
(`--host-sharing off`), over this machine's loopback and inside a network namespace whose
loopback `tc` limits to a rate (bench_plan_time's `link`, `--links host,200mbit`). Per link and
configuration (exact rows; `--fetch-bits 8`; a presample cache of node and edge rows; both):
the epoch time, the fetch stage's seconds and bytes (node and edge rows travel together), the
edge cache's hit rate, the edge rows each epoch requests from other workers, and the test
accuracy.

    python benchmarks/bench_edge_features.py --out benchmarks/out/edge_features.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_plan_time import link  # noqa: E402
from machine import write_report  # noqa: E402
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "exact": [],
    "8-bit": ["--fetch-bits", "8"],
    "cache": ["--cache-policy", "presample", "--cache-size", "20%"],
    "8-bit + cache": ["--fetch-bits", "8", "--cache-policy", "presample", "--cache-size", "20%"],
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=100000,edge_features=16,train=0.5")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--links", default="host", help="loopback rates (host: unlimited)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "edge_features.json"))
    args = parser.parse_args(argv)
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
    log = out.with_suffix(".log")
    with open(log, "w") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
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


if __name__ == "__main__":
    sys.exit(main())
