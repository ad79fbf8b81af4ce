"""Synthetic generator cost: wall time and peak RSS, each size in a fresh process.

    python benchmarks/bench_synthetic.py --sizes 100000,1000000 --degree 20 --features 100

Targets (issue 2): 1M nodes / 20M edges in <= 60 s and <= 6 GB peak on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from machine import machine_info  # noqa: E402
from shardgnn.atomic import atomic_open, save_json
from shardgnn.train.progress import format_table

CHILD = r""" import json, resource, sys, time from shardgnn.graph.synthetic import SyntheticConfig,
generate cfg = SyntheticConfig(nodes=int(sys.argv[1]), degree=float(sys.argv[2]),
features=int(sys.argv[3])) start = time.perf_counter() g = generate(cfg) elapsed =
time.perf_counter() - start print(json.dumps({"nodes": g.num_nodes, "edges": g.num_edges,
"features": g.num_features, "time_s": elapsed,
                  "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "edge_homophily": g.edge_homophily(), "max_degree": int(g.in_degree().max())}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--degree", type=float, default=20.0)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--out", default="benchmarks/out/synthetic.json")
    parser.add_argument("--md", default="benchmarks/out/synthetic.md")
    args = parser.parse_args()
    records = []
    for nodes in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(nodes), str(args.degree), str(args.features)],
            check=True,
            capture_output=True,
            text=True,
        )
        records.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(records[-1], flush=True)
    table = format_table(
        ["nodes", "edges", "features", "time (s)", "peak RSS (GB)", "edge homophily", "max degree"],
        [
            (
                r["nodes"],
                r["edges"],
                r["features"],
                r["time_s"],
                r["peak_rss_gb"],
                r["edge_homophily"],
                r["max_degree"],
            )
            for r in records
        ],
    )
    print(table)
    save_json(
        args.out,
        {"command": " ".join(["python"] + sys.argv), "machine": machine_info(), "runs": records},
    )
    with atomic_open(args.md, "w") as fh:
        fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
