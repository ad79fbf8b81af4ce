"""The spread of `shardgnn plan --calibrate`'s mini-batch step probe (``fullgraph.rates.StepProbe``,
BENCHMARKS 32v): ``--runs`` probes one after another, each timing its rounds at three moments
``--gap`` seconds apart (the calibration's other probes stand between them), on the workload 32o's
table calibrates (synthetic 20,000 nodes, half of them training nodes, GraphSAGE hidden 256,
fanouts 10,10, batch 512 over P = 2, 3, 4: steps of 128 and 256 seeds). Per batch size, the
median step seconds of the first moment's rounds alone (the probe before) and of all three
moments' (the probe now), and how far each run's falls from the median of all runs.

    python benchmarks/step_probe_spread.py --runs 10 --gap 15 --out out/step_probe_spread.json
    python benchmarks/step_probe_spread.py --summary out/step_probe_spread.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sampling_probe_spread import spread  # benchmarks/: beside this script
from shardgnn.atomic import save_json
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import workload
from shardgnn.fullgraph.rates import StepProbe
from shardgnn.graph.datasets import load_dataset


def deviation(values: list[float]) -> float:
    """The standard deviation of ``values`` over their mean."""
    return statistics.pstdev(values) / statistics.mean(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=20000,train=0.5")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between the moments")
    parser.add_argument("--out", default=None, help="every run's rounds, JSON")
    parser.add_argument("--summary", default=None, help="print the summary of a saved --out")
    opts = parser.parse_args(argv)
    if opts.summary:
        saved = json.loads(Path(opts.summary).read_text())
        summarize(saved["runs"], argparse.Namespace(**saved["settings"]))
        return 0
    graph = load_dataset(opts.graph)
    config = PlanConfig(workers=(2, 3, 4), fanouts=(10, 10), batch_size=512)
    work = workload(graph, config, 512)
    runs = []
    for r in range(opts.runs):
        probe = StepProbe(work, work.minibatch, threads=1)
        for moment in range(3):
            if moment:
                time.sleep(opts.gap)
            probe.time_rounds()
        runs.append({"points": probe.points, "rounds": probe.rounds})
        print(f"run {r + 1} of {opts.runs}", file=sys.stderr, flush=True)
    if opts.out:
        save_json(opts.out, {"settings": vars(opts), "runs": runs})
    summarize(runs, opts)
    return 0


def summarize(runs: list[dict], opts: argparse.Namespace) -> None:
    """Per step, the spread of the probes' medians: one moment's rounds against three's."""
    print(
        f"{opts.graph}: {opts.runs} step probes, moments {opts.gap:g} s apart; median ms of a "
        "step, and how far each probe's falls from the median of all probes"
    )
    # the steps: the two batch sizes, then the largest with its upper layers served
    for k, name in enumerate(("128 seeds", "256 seeds", "256 seeds, upper layers served")):
        first = [statistics.median(r[k] for r in run["rounds"][:5]) for run in runs]
        pooled = [statistics.median(r[k] for r in run["rounds"]) for run in runs]
        centre = statistics.median(r[k] for run in runs for r in run["rounds"])
        print(
            f"  {name:31s} {1e3 * centre:6.2f} ms; one moment {spread(first, centre)} "
            f"(deviation {deviation(first):.0%}); three {spread(pooled, centre)} "
            f"({deviation(pooled):.0%})"
        )


if __name__ == "__main__":
    raise SystemExit(main())
