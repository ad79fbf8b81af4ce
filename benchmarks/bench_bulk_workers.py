"""Bulk sampling with workers (issue 32): `--bulk-batches k` on P workers whose every request
crosses a collective (`--host-sharing off`), over this machine's loopback and inside a network
namespace whose loopback is limited by `tc` to a rate (bench_plan_time's `link`; this kernel has
no `netem` to add rate). Per k: the epoch time, the sample and fetch stages' seconds, and
their bytes. Every run trains the same batches (k changes how many travel together, not what is
drawn: tested loss for loss).

    python benchmarks/bench_bulk_workers.py --out benchmarks/out/bulk_workers.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench_plan_time import link  # noqa: E402
from machine import run_logged, write_report  # noqa: E402
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=200000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ks", default="1,4,16")
    parser.add_argument("--links", default="host,1gbit", help="loopback rates (host: unlimited)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bulk_workers.json"))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in args.links.split(","):
            with link(rate, "shardgnn-bulk") as prefix:
                for k in (int(v) for v in args.ks.split(",")):
                    out = Path(tmp) / f"{rate}-{k}.json"
                    cmd = [
                        *prefix, str(Path(sys.executable).parent / "shardgnn"), "train", args.graph,
                        "--workers", str(args.workers), "--host-sharing", "off",
                        "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
                        "--epochs", str(args.epochs), "--bulk-batches", str(k), "--quiet",
                        "--results", str(out),
                    ]  # fmt: skip
                    run_logged(cmd, Path(tmp) / f"{rate}-{k}.log")
                    r = json.loads(out.read_text())
                    late = r["epochs"][1:] or r["epochs"]  # the first epoch warms up
                    stages = {
                        s: sum(e["stages"].get(s, 0.0) for e in late) / len(late)
                        for s in ("sample", "fetch")
                    }
                    rows.append(
                        {
                            "link": rate,
                            "k": k,
                            "epoch_s": sum(e["time_s"] for e in late) / len(late),
                            "sample_s": stages["sample"],
                            "fetch_s": stages["fetch"],
                            "sample_mb": r["comm"]["sample"]["bytes_sent"] / 1e6,
                            "fetch_mb": r["comm"]["fetch"]["bytes_sent"] / 1e6,
                            "losses": [e["loss"] for e in r["epochs"]],
                        }
                    )
                    print(rows[-1], file=sys.stderr, flush=True)
    for row in rows:  # every k trains the same batches
        base = next(r for r in rows if r["link"] == row["link"] and r["k"] == rows[0]["k"])
        row["same_losses"] = row["losses"] == base["losses"]
    table = format_table(
        ["link", "k", "epoch s", "sample s", "fetch s", "sample MB", "fetch MB", "same losses"],
        [
            [r["link"], r["k"], f"{r['epoch_s']:.2f}", f"{r['sample_s']:.2f}",
             f"{r['fetch_s']:.2f}", f"{r['sample_mb']:.1f}", f"{r['fetch_mb']:.1f}",
             r["same_losses"]]
            for r in rows
        ],
    )  # fmt: skip
    write_report(
        args.out, str(Path(args.out).with_suffix(".md")),
        f"--bulk-batches k on {args.workers} workers, {args.graph}", table,
        graph=args.graph, workers=args.workers, runs=rows,
    )  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
