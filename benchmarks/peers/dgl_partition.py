# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# compare.py calls it with that interpreter (dgl 2.1.0, torch 2.2.1).
"""Partition the synthetic graph for DistDGL.

  $HOME/peers/dglvenv/bin/python benchmarks/peers/dgl_partition.py \
      --graph $HOME/peers/g1m.npz --parts 2 --method metis --out $HOME/peers/parts_metis
"""

import argparse
import os
import sys
import time

import dgl
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load_npz  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--graph", required=True)
    p.add_argument("--parts", type=int, default=2)
    p.add_argument("--method", choices=["metis", "random"], default="metis")
    p.add_argument("--name", default="synth")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    d = load_npz(a.graph)
    n = int(d["num_nodes"])
    g = dgl.graph((torch.from_numpy(d["src"]), torch.from_numpy(d["dst"])), num_nodes=n)
    g.ndata["feat"] = torch.from_numpy(d["feat"])
    g.ndata["label"] = torch.from_numpy(d["label"])
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.from_numpy(d["train_idx"])] = True
    g.ndata["train_mask"] = mask
    t = time.perf_counter()
    dgl.distributed.partition_graph(
        g,
        a.name,
        a.parts,
        a.out,
        part_method=a.method,
        balance_ntypes=mask if a.method == "metis" else None,
        balance_edges=a.method == "metis",
    )
    print(
        f"PARTITION method={a.method} parts={a.parts} n={n} m={g.num_edges()} "
        f"time={time.perf_counter() - t:.1f}s out={a.out}",
        flush=True,
    )


if __name__ == "__main__":
    main()
