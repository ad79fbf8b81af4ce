"""`shardgnn plan`'s mini-batch rows against measured runs (issue 32): for P = 2, 3, 4 workers on
one partition each and every mini-batch option (exact rows, `--fetch-bits 8`, a presample cache,
both, historical embeddings serving remote nodes and serving every node, each pushed and
pulled), the sampling, fetch and
historical bytes per epoch, the cache's and the tables' hit rates and the epoch time the plan
predicts (rates calibrated here first, every worker on this machine) beside what a run with
`--host-sharing off` measures (its per-epoch counters and epoch time without evaluation, epochs 2
on); then per P the plan's pick against the measured fastest option. `--host-sharing auto`
(training's default) plans and runs the workers reading each other's rows instead: no sampling
or fetch collective, so exact rows and the historical options only.

    python benchmarks/bench_plan_minibatch.py --out benchmarks/out/plan_minibatch.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import publish  # noqa: E402
from shardgnn.cli.plan import machine_rates
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.minibatch_plan import minibatch_costs
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import read_partitions
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=20000")
    parser.add_argument("--workers", default="2,3,4")
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--cache-size", default="20%")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--historical", default="1:4", help="also plan and run --historical L:AGE ('': not)"
    )
    parser.add_argument("--host-sharing", default="off", choices=("off", "auto"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "plan_minibatch.json"))
    args = parser.parse_args(argv)
    workers = [int(p) for p in args.workers.split(",")]
    fanouts = tuple(int(k) for k in args.fanouts.split(","))
    graph = load_dataset(args.graph)
    plan = PlanConfig(
        dataset=args.graph, workers=tuple(workers), model=args.model, hidden=args.hidden,
        layers=len(fanouts), fanouts=fanouts, batch_size=args.batch_size,
        cache_size=args.cache_size, calibrate=True, workers_per_host=max(workers),
        historical=args.historical or None, host_sharing=args.host_sharing,
    )  # fmt: skip
    print("calibrating", file=sys.stderr, flush=True)
    rates = machine_rates(plan, graph, args.batch_size)
    exe = str(Path(sys.executable).parent / "shardgnn")
    rows, records = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for p in workers:
            parts = Path(tmp) / f"p{p}"
            subprocess.run(
                [exe, "partition", args.graph, "--parts", str(p), "--out", str(parts), "--quiet"],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            pset = read_partitions(parts)
            owner = pset.book.owner(pset.new_id_of_orig())
            costs = {
                c.option: c
                for c in minibatch_costs(
                    graph, owner, p, model=args.model, hidden=args.hidden, fanouts=fanouts,
                    batch_size=args.batch_size, cache_size=args.cache_size, rates=rates,
                    workers_per_host=p, historical=plan.historical,
                    host_sharing=args.host_sharing == "auto",
                )
            }  # fmt: skip
            for name, cost in costs.items():
                flags = list(cost.flags)
                out = Path(tmp) / f"{p}-{len(records)}.json"
                subprocess.run(
                    [exe, "train", args.graph, "--model", args.model, "--hidden", str(args.hidden),
                     "--workers", str(p), "--partitions", str(parts),
                     "--host-sharing", args.host_sharing, "--fanouts", args.fanouts,
                     "--batch-size", str(args.batch_size),
                     "--eval-fanouts", ",".join("-1" for _ in fanouts), "--epochs",
                     str(args.epochs), "--quiet", "--results", str(out), *flags],
                    check=True, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                r = json.loads(out.read_text())
                # epochs 2 on: the plan predicts the epoch a run settles to (historical tables
                # filled by the first)
                late = r["epochs"][1:]
                epoch_s = mean(training_seconds(e) for e in late)
                traffic = [e["cache"] for e in late]
                got = {
                    "sample": mean(t["remote_sample_mb"] for t in traffic),
                    "fetch": mean(t["remote_feature_mb"] for t in traffic),
                    "history": mean(
                        t.get("historical", {}).get("traffic_mb", 0.0) for t in traffic
                    ),
                }  # fmt: skip
                c = cost
                hit = mean(t["hit_rate"] for t in traffic) if c.hit_rate is not None else None
                history_hit = None
                if c.history_hit_rate is not None:
                    history_hit = mean(t["historical"]["hit_rate"] for t in traffic)
                record = {
                    "workers": p, "option": name, "flags": flags,
                    "predicted": c.to_dict(), "measured_sample_mb": got["sample"],
                    "measured_fetch_mb": got["fetch"], "measured_history_mb": got["history"],
                    "measured_hit_rate": hit, "measured_history_hit_rate": history_hit,
                    "measured_epoch_s": epoch_s,
                    "measured_eval_s": mean(e["stages"].get("eval", 0.0) for e in late),
                    # the ranks' mean seconds per stage (epochs 2 on), beside the predicted
                    # sample_s / compute_s / comm_s: where a time miss comes from
                    "measured_stages_s": {
                        stage: mean(e["stages"][stage] for e in late)
                        for stage in late[0]["stages"] if stage != "eval"
                    },
                }  # fmt: skip
                records.append(record)
                print(record, file=sys.stderr, flush=True)
                rows.append([
                    p, name,
                    f"{c.sample_bytes / 1e6:.2f} / {got['sample']:.2f}",
                    f"{c.fetch_bytes / 1e6:.2f} / {got['fetch']:.2f}",
                    f"{c.history_bytes / 1e6:.2f} / {got['history']:.2f}"
                    if history_hit is not None else "-",
                    relative_error(c.bytes_per_epoch / 1e6, sum(got.values())),
                    "-" if hit is None else f"{100 * c.hit_rate:.1f}% / {100 * hit:.1f}%",
                    "-" if history_hit is None
                    else f"{100 * c.history_hit_rate:.1f}% / {100 * history_hit:.1f}%",
                    f"{c.epoch_s:.2f} / {epoch_s:.2f}",
                    f"{100 * (c.epoch_s / epoch_s - 1):+.0f}%",
                ])  # fmt: skip
    picks = pick_against_fastest(records)
    md = Path(args.out).with_suffix(".md")
    publish(
        args.out, str(md),
        f"`shardgnn plan` mini-batch rows, predicted / measured: {args.graph}, {args.model} "
        f"hidden {args.hidden}, fanouts {args.fanouts}, batch {args.batch_size}, "
        f"--host-sharing {args.host_sharing}, every worker on this machine",
        ["P", "option", "sample MB", "fetch MB", "history MB", "bytes error", "cache hit",
         "history hit", "epoch s", "time error"],
        rows, runs=records, rates=rates.to_dict(), picks=picks,
    )  # fmt: skip
    table = format_table(
        ["P", "pick (predicted fastest)", "measured fastest", "pick / fastest (measured s)"],
        [[p["workers"], p["pick"], p["fastest"], f"{p['ratio']:.3f}"] for p in picks],
    )
    print(table)
    md.write_text(md.read_text() + "\nThe plan's pick against the measured fastest option:\n\n"
                  + table + "\n")  # fmt: skip
    return 0


def training_seconds(epoch: dict) -> float:
    """An epoch's training seconds, what the plan predicts: the results' ``time_s``, which
    excludes evaluation already (``EpochRecord.time_s``; taking the ``eval`` stage off it again
    made every measured epoch short by its evaluation, BENCHMARKS 32k)."""
    return epoch["time_s"]


def relative_error(predicted: float, measured: float) -> str:
    """``predicted`` against ``measured`` in percent ("0 / 0" where both are nothing, as with
    every owner on the workers' machine)."""
    if measured == 0:
        return "0 / 0" if predicted == 0 else "inf"
    return f"{100 * (predicted / measured - 1):+.1f}%"


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def pick_against_fastest(records: list[dict]) -> list[dict]:
    """Per worker count: the option the plan predicts fastest, the one measured fastest, and the
    pick's measured epoch over the fastest's."""
    out = []
    for p in sorted({r["workers"] for r in records}):
        mine = [r for r in records if r["workers"] == p]
        pick = min(mine, key=lambda r: r["predicted"]["epoch_s"])
        fastest = min(mine, key=lambda r: r["measured_epoch_s"])
        out.append({
            "workers": p, "pick": pick["option"], "fastest": fastest["option"],
            "ratio": pick["measured_epoch_s"] / fastest["measured_epoch_s"],
        })  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
