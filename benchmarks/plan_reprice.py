"""A `bench_plan_minibatch.py` table's mini-batch plan priced again with its own calibrated
rates, with and without one term of the plan, against the table's measured epochs: what that one
term moves, on the same rates and runs.

    python benchmarks/plan_reprice.py TABLE.json --without crowded-sampling
    python benchmarks/plan_reprice.py TABLE.json --without history-work

``crowded-sampling`` (BENCHMARKS 32s; a ``--host-sharing auto`` table): the crowded-batch
factor on the sampling of workers reading each other's parts; ``history-work`` (32t): the
historical tables' own work (the rates' ``history_s``), their bytes and calls still priced.

It partitions the graph again as the table did (METIS, deterministic), reads the table's
settings from its command (the benchmark's defaults where it gave none) and prints one line a
run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from shardgnn.fullgraph import minibatch_plan
from shardgnn.fullgraph.rates import MachineRates
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import read_partitions

TERMS = ("crowded-sampling", "history-work")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", help="the JSON a bench_plan_minibatch.py run wrote (--out)")
    parser.add_argument("--without", choices=TERMS, required=True, help="the term left out")
    opts = parser.parse_args(argv)
    table = json.loads(Path(opts.table).read_text())
    args = dict(zip(table["command"].split()[2::2], table["command"].split()[3::2]))
    spec, rates = args["--graph"], MachineRates.from_dict(table["rates"])
    sharing = args.get("--host-sharing", "off") == "auto"
    if opts.without == "crowded-sampling" and not sharing:
        parser.error("crowded-sampling: a --host-sharing auto table (only shared sampling is)")
    graph = load_dataset(spec)
    measured = {(r["workers"], r["option"]): r["measured_epoch_s"] for r in table["runs"]}
    lockstep = minibatch_plan._lockstep_seconds
    exe = str(Path(sys.executable).parent / "shardgnn")
    counts = {True: 0, False: 0}
    with tempfile.TemporaryDirectory() as tmp:
        for p in sorted({w for w, _ in measured}):
            parts = Path(tmp) / f"p{p}"
            cmd = [exe, "partition", spec, "--parts", str(p), "--out", str(parts), "--quiet"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            pset = read_partitions(parts)
            owner = pset.book.owner(pset.new_id_of_orig())
            epoch = {}
            for on in (True, False):
                priced = rates
                if opts.without == "crowded-sampling":
                    minibatch_plan._lockstep_seconds = lambda *a, c=on, **k: lockstep(
                        *a, **{**k, "crowded_sampling": c}
                    )
                elif not on:
                    priced = dataclasses.replace(rates, history_s={})
                costs = minibatch_plan.minibatch_costs(
                    graph, owner, p, model=args.get("--model", "sage"),
                    hidden=int(args.get("--hidden", 256)),
                    fanouts=tuple(int(k) for k in args.get("--fanouts", "10,10").split(",")),
                    batch_size=int(args.get("--batch-size", 512)),
                    cache_size=args.get("--cache-size", "20%"), rates=priced,
                    workers_per_host=p, historical=args.get("--historical", "1:4") or None,
                    host_sharing=sharing,
                )  # fmt: skip
                minibatch_plan._lockstep_seconds = lockstep
                epoch[on] = {c.option: c.epoch_s for c in costs}
            for option, with_s in epoch[True].items():
                got, without_s = measured[(p, option)], epoch[False][option]
                for on, s in ((True, with_s), (False, without_s)):
                    counts[on] += abs(s / got - 1) <= 0.25
                print(
                    f"P={p} {option:24s} with {with_s:.3f} ({with_s / got - 1:+.0%}), "
                    f"without {without_s:.3f} ({without_s / got - 1:+.0%}), measured {got:.3f}"
                )
            # the pick (predicted fastest) against the measured fastest, with and without
            fastest = min(s for (w, _), s in measured.items() if w == p)
            ratios = [measured[(p, min(epoch[on], key=epoch[on].get))] / fastest for on in epoch]
            print(f"P={p} pick / measured fastest: with {ratios[0]:.3f}, without {ratios[1]:.3f}")
    print(f"within 25 %: with {opts.without} {counts[True]}, without {counts[False]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
