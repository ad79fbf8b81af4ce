# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# compare.py calls it with that interpreter (dgl 2.1.0, torch 2.2.1).
"""Single-process DGL GraphSAGE mini-batch training (NeighborSampler + DataLoader).

  $HOME/peers/dglvenv/bin/python benchmarks/peers/dgl_sage.py --graph $HOME/peers/g1m.npz \
      --fanouts 10,10,10 --batch 1024 --hidden 256 --epochs 3 [--max-batches N] [--sample-only]

Prints per-epoch time, sampled edges (sum of block edges) and edges/s, then a
RESULT line with the median over epochs.  --sample-only times the sampler +
feature gather alone (no model).
"""

import argparse
import os
import sys
import time

import dgl
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import load_npz, summarize  # noqa: E402
from dgl_model import SAGE  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--graph", required=True)
    p.add_argument("--fanouts", default="10,10,10")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-batches", type=int, default=0, help="0 = full epoch")
    p.add_argument("--sample-only", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    fanouts = [int(x) for x in a.fanouts.split(",")]

    t = time.time()
    d = load_npz(a.graph)
    n = int(d["num_nodes"])
    g = dgl.graph((torch.from_numpy(d["src"]), torch.from_numpy(d["dst"])), num_nodes=n)
    g.create_formats_()
    feat = torch.from_numpy(d["feat"])
    label = torch.from_numpy(d["label"])
    train_idx = torch.from_numpy(d["train_idx"])
    ncls = int(d["num_classes"])
    print(
        f"dgl {dgl.__version__} torch {torch.__version__} threads {torch.get_num_threads()} "
        f"graph n={n} m={g.num_edges()} load {time.time() - t:.1f}s",
        flush=True,
    )

    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(
        g, train_idx, sampler, batch_size=a.batch, shuffle=True, drop_last=False, num_workers=0
    )
    model = SAGE(feat.shape[1], a.hidden, ncls, len(fanouts))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    times, edges_per_epoch = [], []
    for ep in range(a.epochs):
        nedges = nbatch = 0
        t0 = time.perf_counter()
        for input_nodes, seeds, blocks in loader:
            x = feat[input_nodes]
            y = label[seeds]
            nedges += sum(b.num_edges() for b in blocks)
            if not a.sample_only:
                out = model(blocks, x)
                loss = F.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            nbatch += 1
            if a.max_batches and nbatch >= a.max_batches:
                break
        dt = time.perf_counter() - t0
        times.append(dt)
        edges_per_epoch.append(nedges)
        print(
            f"epoch {ep}: {dt:.2f}s batches={nbatch} sampled_edges={nedges} "
            f"edges/s={nedges / dt:.3e}" + ("" if a.sample_only else f" loss={loss.item():.3f}"),
            flush=True,
        )
    med = float(np.median(times))
    summarize(
        "dgl_sage_sample_only" if a.sample_only else "dgl_sage_train",
        times,
        {
            "fanouts": fanouts,
            "batch": a.batch,
            "hidden": a.hidden,
            "batches": nbatch,
            "sampled_edges": int(np.median(edges_per_epoch)),
            "edges_per_s": round(float(np.median(edges_per_epoch)) / med),
            "threads": torch.get_num_threads(),
        },
    )


if __name__ == "__main__":
    main()
