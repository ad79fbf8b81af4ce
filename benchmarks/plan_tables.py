"""BENCHMARKS.md's tables of a ``shardgnn plan --out FILE`` with times (section 25b): per worker
count, each full-graph strategy's predicted epoch (compute + communication; 1.5D its fastest
replication, 2D and 3D their grids), the sparse 1D plan with ``--dependencies cache`` and
``hybrid``, the fastest and the strategy the plan picks without rates (the fewest bytes from the
busiest worker, among the strategies it weighs then).

    python benchmarks/plan_tables.py benchmarks/out/plan_time_coauthor_physics_10gbit.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shardgnn.cli.plot import plan_dependencies
from shardgnn.fullgraph.config import strategy_label

COLUMNS = ("1d", "1d-sparse", "vertex-cut", "1.5d", "2d", "3d", "cache", "hybrid")


def label(cost: dict) -> str:
    return strategy_label(cost["strategy"], cost["layout"], plan_dependencies(cost))


def column(cost: dict) -> str:
    dependencies = plan_dependencies(cost)
    return cost["strategy"] if dependencies == "communicate" else dependencies


def table(plan: dict) -> str:
    costs = plan["costs"]
    head = ["P", "1d", "1d-sparse", "vertex-cut", "best 1.5d", "2d", "3d", "1d-sparse, cache",
            "1d-sparse, hybrid", "fastest", "fewest bytes (busiest worker)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in sorted({c["workers"] for c in costs}):
        mine = [c for c in costs if c["workers"] == p]
        cells = []
        for name in COLUMNS:
            options = [c for c in mine if column(c) == name]
            if not options:
                cells.append("-")
                continue
            best = min(options, key=lambda c: c["epoch_s"])
            layout = f" {best['layout']}" if name in ("1.5d", "2d", "3d") else ""
            cells.append(
                f"{best['epoch_s']:.3f} ({best['compute_s']:.3f} + {best['comm_s']:.3f}){layout}"
            )
        fastest = min(mine, key=lambda c: c["epoch_s"])
        by_bytes = min(
            (c for c in mine if column(c) not in ("cache", "hybrid")),
            key=lambda c: (c["max_worker_bytes"], c["held_mb"]),
        )
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {label(fastest)} | {label(by_bytes)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="+", type=Path)
    for path in parser.parse_args().plans:
        print(f"{path}:\n\n{table(json.loads(path.read_text()))}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
