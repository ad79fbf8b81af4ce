# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# compare.py calls it with that interpreter. Copied from the peer-baseline scripts.
"""Make a synthetic node-classification graph and save it as .npz.

Shared by the DGL peer baselines and compare.py (which converts the same .npz for shardgnn),
so both train on the very same graph.

  $HOME/peers/dglvenv/bin/python benchmarks/peers/gen_graph.py --nodes 1000000 \
      --edges 20000000 --feat 128 --classes 40 --train-frac 0.1 --kind powerlaw \
      --out $HOME/peers/g1m.npz

--edges is the number of directed edges kept after symmetrising
(edges/2 random pairs are drawn, both directions are stored, self loops and
duplicates are dropped, so the final count is a little below --edges).
kind=powerlaw draws both endpoints from a Chung-Lu style weight w_i ~ (i+1)^-a
(node ids are shuffled afterwards); kind=uniform is Erdos-Renyi like
dgl.rand_graph.
"""

import argparse
import time

import numpy as np


def make_graph(n, m, kind="powerlaw", alpha=0.8, seed=0):
    rng = np.random.default_rng(seed)
    half = m // 2
    if kind == "uniform":
        src = rng.integers(0, n, half, dtype=np.int64)
        dst = rng.integers(0, n, half, dtype=np.int64)
    else:
        w = (np.arange(n, dtype=np.float64) + 1.0) ** (-alpha)
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        src = np.searchsorted(cdf, rng.random(half)).astype(np.int64)
        dst = np.searchsorted(cdf, rng.random(half)).astype(np.int64)
        perm = rng.permutation(n).astype(np.int64)  # hide the id/degree order
        src, dst = perm[src], perm[dst]
    s = np.concatenate([src, dst])
    d = np.concatenate([dst, src])
    keep = s != d
    key = np.unique(s[keep] * n + d[keep])
    return key // n, key % n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000)
    p.add_argument("--feat", type=int, default=128)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--train-frac", type=float, default=0.1)
    p.add_argument("--kind", choices=["powerlaw", "uniform"], default="powerlaw")
    p.add_argument("--alpha", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    t = time.time()
    src, dst = make_graph(a.nodes, a.edges, a.kind, a.alpha, a.seed)
    rng = np.random.default_rng(a.seed + 1)
    feat = rng.standard_normal((a.nodes, a.feat), dtype=np.float32)
    label = rng.integers(0, a.classes, a.nodes, dtype=np.int64)
    train_idx = np.sort(rng.choice(a.nodes, int(a.nodes * a.train_frac), replace=False))
    np.savez(
        a.out,
        src=src,
        dst=dst,
        feat=feat,
        label=label,
        train_idx=train_idx,
        num_nodes=np.int64(a.nodes),
        num_classes=np.int64(a.classes),
    )
    deg = np.bincount(dst, minlength=a.nodes)
    print(
        f"nodes={a.nodes} edges={len(src)} kind={a.kind} max_in_deg={deg.max()} "
        f"mean_deg={deg.mean():.1f} zero_deg={(deg == 0).sum()} train={len(train_idx)} "
        f"time={time.time() - t:.1f}s -> {a.out}"
    )


if __name__ == "__main__":
    main()
