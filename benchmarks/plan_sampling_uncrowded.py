"""The mini-batch plan of a `bench_plan_minibatch.py --host-sharing auto` table priced again with
its own calibrated rates, with and without the crowded-batch factor on the sampling of workers
reading each other's parts (BENCHMARKS 32s: what that one change moves, on the same rates and
runs), against the table's measured epochs:

    python benchmarks/plan_sampling_uncrowded.py \\
        benchmarks/out/plan_minibatch_crowded_batch_host_sharing_train50.json

It partitions the graph again as the table did (METIS, deterministic), reads the table's
settings from its command (the benchmark's defaults where it gave none) and prints one line a
run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from shardgnn.fullgraph import minibatch_plan
from shardgnn.fullgraph.rates import MachineRates
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import read_partitions


def main(path: str) -> int:
    table = json.loads(Path(path).read_text())
    args = dict(zip(table["command"].split()[2::2], table["command"].split()[3::2]))
    spec, rates = args["--graph"], MachineRates.from_dict(table["rates"])
    assert args.get("--host-sharing") == "auto", "a --host-sharing auto table"
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
            for crowded in (True, False):
                minibatch_plan._lockstep_seconds = lambda *a, c=crowded, **k: lockstep(
                    *a, **{**k, "crowded_sampling": c}
                )
                costs = minibatch_plan.minibatch_costs(
                    graph, owner, p, model=args.get("--model", "sage"),
                    hidden=int(args.get("--hidden", 256)),
                    fanouts=tuple(int(k) for k in args.get("--fanouts", "10,10").split(",")),
                    batch_size=int(args.get("--batch-size", 512)),
                    cache_size=args.get("--cache-size", "20%"), rates=rates,
                    workers_per_host=p, historical=args.get("--historical", "1:4") or None,
                    host_sharing=True,
                )  # fmt: skip
                epoch[crowded] = {c.option: c.epoch_s for c in costs}
            minibatch_plan._lockstep_seconds = lockstep
            for option, on in epoch[True].items():
                got, off = measured[(p, option)], epoch[False][option]
                for crowded, s in ((True, on), (False, off)):
                    counts[crowded] += abs(s / got - 1) <= 0.25
                print(
                    f"P={p} {option:24s} sampling crowded {on:.3f} ({on / got - 1:+.0%}), "
                    f"uncrowded {off:.3f} ({off / got - 1:+.0%}), measured {got:.3f}"
                )
    print(f"within 25 %: sampling crowded {counts[True]}, uncrowded {counts[False]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
