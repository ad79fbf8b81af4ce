"""Re-price a ``bench_plan_minibatch.py`` run's options (coauthor-cs, its default settings) from
the rates it calibrated: the 8-bit codec charged one flat rate (its 4,096-row call, as the plan
did before it priced each call at its rows) and at the rows of each call (BENCHMARKS section
32e). Prints both beside the run's recorded prediction and measured epoch.

    python benchmarks/reprice_plan_codec.py benchmarks/out/plan_minibatch_codec.json
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from shardgnn.fullgraph.minibatch_plan import minibatch_costs
from shardgnn.fullgraph.rates import CODEC_ROWS, MachineRates
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.format import read_partitions

GRAPH = "coauthor-cs:split=60-20-20"


def flat_codec(rates: dict) -> MachineRates:
    """``rates`` with the codec timed at its largest call alone, under the old names."""
    flat = MachineRates.from_dict(copy.deepcopy(rates))
    for compute in flat.compute.values():
        for kind in ("encode8", "decode8"):
            timed = {rows: compute.minibatch_s.pop(f"{kind}_value_{rows}") for rows in CODEC_ROWS}
            compute.minibatch_s[f"{kind}_value"] = timed[max(CODEC_ROWS)]
    return flat


def main(path: str) -> None:
    run = json.loads(Path(path).read_text())
    workers = run["runs"][0]["workers"]
    graph = load_dataset(GRAPH)
    settings = dict(model="sage", hidden=256, fanouts=(10, 10), batch_size=512, cache_size="20%")
    with tempfile.TemporaryDirectory() as tmp:
        parts = Path(tmp) / "parts"
        subprocess.run(
            ["shardgnn", "partition", GRAPH, "--parts", str(workers), "--out", str(parts),
             "--quiet"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        pset = read_partitions(parts)
        owner = pset.book.owner(pset.new_id_of_orig())
        priced = {
            name: {
                c.option: c.epoch_s
                for c in minibatch_costs(
                    graph, owner, workers, rates=rates, workers_per_host=workers, **settings
                )
            }
            for name, rates in (
                ("flat", flat_codec(run["rates"])),
                ("per call", MachineRates.from_dict(run["rates"])),
            )
        }
    print("| P | option | epoch s, codec flat | per call | recorded | measured | fetch stage s |")
    print("|---|---|---|---|---|---|---|")
    for r in run["runs"]:
        o = r["option"]
        print(
            f"| {workers} | {o} | {priced['flat'][o]:.2f} | {priced['per call'][o]:.2f} | "
            f"{r['predicted']['epoch_s']:.2f} | {r['measured_epoch_s']:.2f} | "
            f"{r['measured_stages_s']['fetch']:.2f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
