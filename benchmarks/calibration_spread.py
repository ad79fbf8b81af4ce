"""How much `shardgnn plan --calibrate`'s mini-batch rates, and the epochs it predicts with them,
move from one calibration to the next (issue 32): the same machine calibrated ``--calibrations``
times in a row for one planned run, each calibration's latency, link rate, crowded-step factor,
crowding per collective call and the predicted epoch of every option it weighs (on one partition
and one sampled epoch). With ``--baseline DIR`` (another tree's ``src``) the two trees calibrate
in turn, each in a process of its own, so both meet the same drift of the machine.

    python benchmarks/calibration_spread.py --calibrations 5 --baseline /tmp/base/src \
        --out benchmarks/out/calibration_spread.json
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

REPO = Path(__file__).resolve().parents[1]


def one_calibration(args: argparse.Namespace) -> dict:
    """Calibrate once with the tree this process imports; the rates that move and the
    predictions made with them."""
    import numpy as np

    from cache_auto import planned_run
    from shardgnn.cli.plan import machine_rates
    from shardgnn.fullgraph.minibatch_plan import minibatch_costs
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.partition import PartitionConfig, partition_graph

    p, plan = args.workers, planned_run(args)
    graph = load_dataset(args.graph)
    rates = machine_rates(plan, graph, args.batch_size)
    owner = partition_graph(graph, PartitionConfig(num_parts=p, method="metis")).assignment
    costs = minibatch_costs(
        graph, np.asarray(owner), p, model=args.model, hidden=args.hidden, fanouts=plan.fanouts,
        batch_size=args.batch_size, cache_size=args.cache_size, rates=rates,
        workers_per_host=p,
    )  # fmt: skip
    return {
        "latency_ms": rates.latency_s * 1e3,
        "link_gbit": rates.link_bytes_s * 8 / 1e9,
        "crowded_step_factor": rates.step_crowding(p),
        # each collective call's cost to crowded workers, 0.2 ms of work apart (the smallest
        # probed burst)
        "crowded_call_ms": 1e3 * min(rates.crowd_s[p].items())[1] if p in rates.crowd_s else 0.0,
        "epoch_s": {c.option: c.epoch_s for c in costs},
        "rates": rates.to_dict(),
    }


def spread(values: list[float]) -> str:
    """``min … max (max/min)``."""
    lo, hi = min(values), max(values)
    return f"{lo:.3f} … {hi:.3f} ({hi / lo:.2f}x)"


def main(argv=None) -> int:
    from cache_auto import add_planned_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_planned_run(parser)
    parser.add_argument("--calibrations", type=int, default=5)
    parser.add_argument("--baseline", help="another tree's src: calibrated in turn with this one")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: write one calibration here
    parser.add_argument("--out", default=str(REPO / "benchmarks/out/calibration_spread.json"))
    args = parser.parse_args(argv)
    if args.one:
        Path(args.one).write_text(json.dumps(one_calibration(args)))
        return 0
    trees = {"this tree": str(REPO / "src")}
    if args.baseline:
        trees = {"baseline": args.baseline, **trees}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    forward = [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in ("graph", "workers", "model", "hidden", "fanouts", "batch_size", "cache_size")
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.calibrations):
            for name, src in trees.items():
                out = Path(tmp) / "one.json"
                env = {**os.environ, "PYTHONPATH": src}
                subprocess.run(
                    [sys.executable, __file__, *forward, "--one", str(out)], env=env, check=True,
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                runs[name].append(json.loads(out.read_text()))
                row = runs[name][-1]
                print(
                    f"{k + 1} {name}: latency {row['latency_ms']:.3f} ms, crowded step "
                    f"{row['crowded_step_factor']:.2f}, crowded call {row['crowded_call_ms']:.3f} "
                    "ms, epochs " + ", ".join(f"{o} {s:.3f}" for o, s in row["epoch_s"].items()),
                    flush=True,
                )
    summary = {}
    for name, rows in runs.items():
        summary[name] = {
            "latency_ms": spread([r["latency_ms"] for r in rows]),
            "link_gbit": spread([r["link_gbit"] for r in rows]),
            "crowded_step_factor": spread([r["crowded_step_factor"] for r in rows]),
            "crowded_call_ms": spread([r["crowded_call_ms"] for r in rows]),
            **{
                f"epoch_s {option}": spread([r["epoch_s"][option] for r in rows])
                for option in rows[0]["epoch_s"]
            },
        }
        for what, text in summary[name].items():
            print(
                f"{name}: {what} {text} (sd/mean {_cv(rows, what):.1%})"
                if what != "link_gbit"
                else f"{name}: {what} {text}"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"argv": sys.argv, "runs": runs, "summary": summary}, indent=1)
    )
    return 0


def _cv(rows: list[dict], what: str) -> float:
    if what.startswith("epoch_s "):
        values = [r["epoch_s"][what[len("epoch_s ") :]] for r in rows]
    else:
        values = [r[what] for r in rows]
    return statistics.pstdev(values) / statistics.mean(values)


if __name__ == "__main__":
    sys.exit(main())
