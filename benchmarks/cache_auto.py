"""`shardgnn train --cache-policy auto` against both options it chooses between (issue 32): this
machine's rates calibrated once (`shardgnn plan --calibrate`), one partition of P workers, then in
each round a run with `--cache-policy auto --plan-rates` (what it picked, with the predictions it
printed) and runs of both options it weighs (a presample cache of `--cache-size`, no cache), in
turn, every worker on this machine with `--host-sharing off`. Reports each option's measured
epoch (training only, epochs 2 on, mean over the rounds) beside its prediction, the pick against
the measured fastest, and what `auto` picks on the same partition with the link of the rates
replaced by slower ones (`--link-gbit`: predictions only; the runs here cross the loopback).

    python benchmarks/cache_auto.py --out benchmarks/out/cache_auto.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_plan_minibatch import mean, relative_error, training_seconds
from machine import publish  # noqa: E402
from shardgnn.cli.plan import machine_rates
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.graph.datasets import load_dataset

REPO = Path(__file__).resolve().parents[1]
SAID = re.compile(r"^--cache-policy auto: (.*)$", re.MULTILINE)


def add_planned_run(parser: argparse.ArgumentParser) -> None:
    """The flags of the planned run (one partition of P workers on this machine)."""
    parser.add_argument("--graph", default="synthetic:nodes=20000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--cache-size", default="20%")


def planned_run(args: argparse.Namespace) -> PlanConfig:
    """The mini-batch plan of :func:`add_planned_run`'s run, calibrated on this machine (every
    worker on it, ``--host-sharing off``)."""
    p, fanouts = args.workers, tuple(int(k) for k in args.fanouts.split(","))
    return PlanConfig(
        dataset=args.graph, workers=(p,), model=args.model, hidden=args.hidden,
        layers=len(fanouts), fanouts=fanouts, batch_size=args.batch_size,
        cache_size=args.cache_size, calibrate=True, workers_per_host=p, host_sharing="off",
        strategies="minibatch",
    )  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_planned_run(parser)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slower-links", default="1,0.1", help="Gbit/s each way to replan at")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "cache_auto.json"))
    args = parser.parse_args(argv)
    p = args.workers
    graph = load_dataset(args.graph)
    print("calibrating", file=sys.stderr, flush=True)
    rates = machine_rates(planned_run(args), graph, args.batch_size)
    exe = str(Path(sys.executable).parent / "shardgnn")
    size = ["--cache-size", args.cache_size]
    options = {
        "presample": ["--cache-policy", "presample", *size],
        "none": ["--cache-policy", "none"],
    }
    measured: dict[str, list[float]] = {name: [] for name in options}
    picks = []
    with tempfile.TemporaryDirectory() as tmp:
        parts, rates_path = Path(tmp) / "parts", Path(tmp) / "rates.json"
        rates_path.write_text(json.dumps({"rates": rates.to_dict()}))
        subprocess.run(
            [exe, "partition", args.graph, "--parts", str(p), "--out", str(parts), "--quiet"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        common = [
            exe, "train", "--partitions", str(parts), "--model", args.model, "--hidden",
            str(args.hidden), "--fanouts", args.fanouts, "--batch-size", str(args.batch_size),
            "--host-sharing", "off", "--epochs",
            str(args.epochs), "--quiet",
        ]  # fmt: skip

        def train(*flags: str) -> tuple[str, dict]:
            out = Path(tmp) / "run.json"
            run = subprocess.run(
                [*common, "--results", str(out), *flags], check=True, capture_output=True,
                text=True,
            )  # fmt: skip
            return run.stdout, json.loads(out.read_text())

        def auto(rates_file: Path) -> tuple[str, str]:
            """What `auto` picks with ``rates_file`` (a one-epoch run) and the line it said."""
            stdout, results = train(
                "--cache-policy", "auto", *size, "--plan-rates", str(rates_file), "--epochs", "1"
            )
            return results["config"]["cache"]["policy"], SAID.search(stdout).group(1)

        for round_ in range(args.rounds):
            picks.append(auto(rates_path))
            # both options in turn, their order alternating between rounds
            for name in list(options)[:: 1 if round_ % 2 == 0 else -1]:
                print(f"round {round_ + 1}: {name}", file=sys.stderr, flush=True)
                _, results = train(*options[name])
                late = results["epochs"][1:]
                measured[name].append(mean(training_seconds(e) for e in late))
        replanned = []
        for gbit in (float(g) for g in args.slower_links.split(",") if g):
            slower = dataclasses.replace(rates, link_bytes_s=gbit * 1e9 / 8)
            path = Path(tmp) / f"rates-{gbit:g}.json"
            path.write_text(json.dumps({"rates": slower.to_dict()}))
            replanned.append((gbit, *auto(path)))
    predicted = {}
    for policy, said in picks:
        numbers = [float(s) for s in re.findall(r"(\d+\.\d+) s", said)]
        pick_s, other_s = numbers[0], numbers[1]
        other = "none" if policy == "presample" else "presample"
        predicted = {policy: pick_s, other: other_s}
    epoch = {name: mean(values) for name, values in measured.items()}
    fastest = min(epoch, key=epoch.get)
    rows = [
        [
            name,
            f"{predicted[name]:.3f}",
            f"{epoch[name]:.3f}",
            relative_error(predicted[name], epoch[name]),
            " ".join(f"{v:.3f}" for v in measured[name]),
            sum(policy == name for policy, _ in picks),
        ]
        for name in options
    ]
    pick = picks[-1][0]
    print(
        f"auto picked {', '.join(policy for policy, _ in picks)}; measured fastest {fastest}; "
        f"the pick {epoch[pick] / epoch[fastest]:.3f}x the fastest"
    )
    for gbit, _policy, said in replanned:
        print(f"at {gbit:g} Gbit/s: {said}")
    return publish(
        args.out,
        str(Path(args.out).with_suffix(".md")),
        f"`--cache-policy auto` on {args.graph}, P = {p} (`{' '.join(sys.argv)}`)",
        [
            "option", "predicted epoch s", "measured epoch s", "error", "rounds (s)",
            "times auto picked it",
        ],
        rows,
        picks=[{"policy": policy, "said": said} for policy, said in picks],
        measured=measured,
        pick_ratio=epoch[pick] / epoch[fastest],
        replanned=[{"link_gbit": g, "policy": policy, "said": s} for g, policy, s in replanned],
        rates=rates.to_dict(),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
