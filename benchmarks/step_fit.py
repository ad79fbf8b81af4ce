"""The mini-batch step's fitted rates against the steps a run takes (issue 32): for each planned
batch, the step probe at the sizes it times now (`probe_sizes`: a quarter of the worker's batch
and the batch) and at the sizes it timed before (the batch and four times it), and a run's own
batches (a worker's full batches and its epoch's last, shorter one), every step timed in the same
rounds, in turn. Each fit's prediction of the run's steps against their measured medians: the
fit before (an exact solve of three costs, the fixed cost then held at nought where it came out
below) on the earlier sizes, and the fit now (the nearest costs none below nought,
`_fit_nonnegative`) on both.

    python benchmarks/step_fit.py --out benchmarks/out/step_fit.json
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from machine import publish  # noqa: E402
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import workload
from shardgnn.fullgraph.rates import StepProbe, _planned_model, _seconds, _train_step
from shardgnn.graph.datasets import load_dataset
from shardgnn.sampling.types import SeedInput

REPO = Path(__file__).resolve().parents[1]


def fit_before(edges: list[tuple[int, int]], seconds: list[float]) -> dict[str, float]:
    """The step fit as it was before BENCHMARKS 32za (kept here to measure against): the line
    through the two batches' readings, its fixed cost held at nought where it came out below,
    or the exact solve of all three readings, its fixed cost likewise."""
    (i1, u1), (i2, u2) = edges[:2]
    per_edge = max(seconds[1] - seconds[0], 0.0) / (i2 + u2 - i1 - u1)
    fixed = max(seconds[0] - per_edge * (i1 + u1), 0.0)
    fit = {"step_batch": fixed, "step_input_edge": per_edge, "step_edge": per_edge}
    if len(edges) < 3:  # a model of one layer: one rate
        return fit
    a = np.array([[1.0, i, u] for i, u in edges])
    _, input_edge, upper_edge = np.linalg.lstsq(a, np.array(seconds), rcond=None)[0]
    if min(input_edge, upper_edge) >= 0 and edges[2][0] < i2:
        fixed = max(seconds[0] - input_edge * i1 - upper_edge * u1, 0.0)
        fit = {"step_batch": fixed, "step_input_edge": input_edge, "step_edge": upper_edge}
    return fit


def predict(rates: dict[str, float], input_edges: int, upper_edges: int) -> float:
    """A step's seconds at ``rates`` for its blocks' input-layer and upper-layer edges."""
    return (
        rates["step_batch"]
        + input_edges * rates["step_input_edge"]
        + upper_edges * rates["step_edge"]
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="synthetic:nodes=20000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-sizes", default="512,100", help="planned (global) batch sizes")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "step_fit.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a worker's share of this machine's cores at P workers a machine
    fanouts = tuple(int(k) for k in args.fanouts.split(","))
    graph = load_dataset(args.graph)
    rows, records = [], []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        plan = PlanConfig(
            dataset=args.graph, workers=(args.workers,), model=args.model, hidden=args.hidden,
            layers=len(fanouts), fanouts=fanouts, batch_size=batch_size, strategies="minibatch",
        )  # fmt: skip
        work = workload(graph, plan, batch_size)
        step = work.minibatch
        size = step.batch_sizes[0]
        probes = {
            "now": StepProbe(work, step, 1),
            "before": StepProbe(work, dataclasses.replace(step, batch_sizes=(size, 4 * size)), 1),
        }
        # a run's steps: a worker's share of the training nodes in batches of its size
        share = len(step.train_idx) // args.workers
        last = share % size or size
        sampler, model, adam = _planned_model(work, step)
        rng = np.random.default_rng(1)
        runs = []
        for seeds_n in (size, size, last):
            seeds = np.sort(rng.choice(step.train_idx, seeds_n, False))
            sample = sampler.sample(SeedInput(seeds), 0)
            edges = [block.num_edges for block in sample.blocks]
            labels = torch.from_numpy(rng.integers(0, step.out_dim, seeds_n))
            runs.append((seeds_n, edges[0], sum(edges[1:]), _train_step(
                work, model, adam, sample, labels)))  # fmt: skip
        steps = [*probes["now"].steps, *probes["before"].steps, *(r[3] for r in runs)]
        print(f"batch {batch_size}: {len(steps)} steps x {args.rounds} rounds", file=sys.stderr)
        timed = [[] for _ in steps]
        for _ in range(args.rounds):  # every step once a round, in turn, as the probe times
            for k, fn in enumerate(steps):
                timed[k].append(_seconds(fn))
        medians = [statistics.median(t) for t in timed]
        n_now = len(probes["now"].steps)
        probes["now"].rounds = [list(r) for r in zip(*timed[:n_now])]
        probes["before"].rounds = [list(r) for r in zip(*timed[n_now : 2 * n_now])]
        fits = {
            "before (sizes x1, x4; clamped solve)": fit_before(
                [(i, u) for i, u, _ in probes["before"].points], medians[n_now : 2 * n_now]
            ),
            "sizes x1, x4; fit now": probes["before"].rates(),
            "now (sizes x1/4, x1; fit now)": probes["now"].rates(),
        }
        for k, (seeds_n, input_edges, upper_edges, _) in enumerate(runs):
            measured = medians[2 * n_now + k]
            record = {
                "batch_size": batch_size, "worker_seeds": seeds_n, "input_edges": input_edges,
                "upper_edges": upper_edges, "measured_s": measured,
                "predicted_s": {name: predict(r, input_edges, upper_edges)
                                for name, r in fits.items()},
            }  # fmt: skip
            records.append(record)
            rows.append([
                batch_size, seeds_n, input_edges, upper_edges, f"{1e3 * measured:.2f}",
                *(f"{1e3 * p:.2f} ({100 * (p / measured - 1):+.0f}%)"
                  for p in record["predicted_s"].values()),
            ])  # fmt: skip
        records[-1]["fits"] = {
            name: {k: float(v) for k, v in r.items()} for name, r in fits.items()
        }
    names = list(records[0]["predicted_s"])
    return publish(
        args.out,
        str(Path(args.out).with_suffix(".md")),
        f"the step fit against a run's steps on {args.graph} ({' '.join(sys.argv)})",
        ["batch", "worker seeds", "input edges", "upper edges", "measured ms",
         *(f"{n} ms" for n in names)],
        rows,
        records=records,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
