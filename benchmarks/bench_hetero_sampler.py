"""Typed (per-relation) neighbour sampling against the homogeneous sampler, same graph, same run.

    python benchmarks/bench_hetero_sampler.py --papers 500000 --rounds 3

The synthetic academic graph (``synthetic-hetero``, papers : authors = 5 : 4, with every relation
also reversed) is sampled from
batches of paper seeds, 2 layers, by:

- ``homogeneous``: :class:`~shardgnn.sampling.neighbor.NeighborSampler` on the same CSR with the
  relations ignored (fanouts 10,10);
- ``typed``: :class:`~shardgnn.sampling.typed.TypedNeighborSampler`, a fanout per relation
  (4 per relation and layer);
- ``typed meta-path``: layer 1 writes + cites only (5 each), layer 2 every relation (4);
- ``typed + filter``: the typed fanouts among edges whose attribute (a uniform "year") lies in a
  window holding about half of them (Euler's conditional sampling).

Each sampler runs the same seed batches (warm: numba compiled before timing); the rates are
sampled edges per second of sampling time, and the ratio is to the homogeneous rate of the same
round. Writes ``benchmarks/out/hetero_sampler.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from machine import publish  # noqa: E402
from shardgnn.graph.synthetic_hetero import AcademicConfig, generate_academic
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.typed import TypedNeighborSampler, relation_fanouts


def rate(sampler, batches: list[np.ndarray]) -> tuple[float, int]:
    """Sampled edges per second over ``batches`` (after one warm-up batch)."""
    sampler.sample(batches[0], seed=0)
    edges, start = 0, time.perf_counter()
    for i, batch in enumerate(batches):
        edges += sampler.sample(batch, seed=i + 1).num_sampled_edges
    return edges / (time.perf_counter() - start), edges


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--papers", type=int, default=500_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="benchmarks/out/hetero_sampler")
    a = p.parse_args()
    start = time.perf_counter()
    # both directions of every relation (rev_*), so every node type has in-neighbours to sample
    g = generate_academic(
        AcademicConfig(papers=a.papers, authors=a.papers * 4 // 5)
    ).with_reverse_relations()
    print(
        f"graph: {g.num_nodes:,} nodes, {g.num_edges:,} edges "
        f"in {time.perf_counter() - start:.1f} s"
    )
    rng = np.random.default_rng(0)
    batches = [np.sort(rng.choice(a.papers, a.batch_size, replace=False)) for _ in range(a.batches)]
    year = rng.uniform(1990, 2030, g.num_edges)
    samplers = {
        "homogeneous": NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(10, 10))),
        "typed": TypedNeighborSampler(g, relation_fanouts(g.relations, [4, 4])),
        "typed meta-path": TypedNeighborSampler(
            g, relation_fanouts(g.relations, [{"writes": 5, "cites": 5}, 4])
        ),
        "typed + filter": TypedNeighborSampler(
            g, relation_fanouts(g.relations, [4, 4]), edge_attr=year, attr_window=(2000, 2020)
        ),
    }
    rounds: list[dict[str, tuple[float, int]]] = []
    for _ in range(a.rounds):
        rounds.append({name: rate(s, batches) for name, s in samplers.items()})
    rows = []
    for name in samplers:
        rates = np.array([r[name][0] for r in rounds])
        ratios = np.array([r[name][0] / r["homogeneous"][0] for r in rounds])
        rows.append(
            [
                name,
                f"{rounds[0][name][1] / a.batches:,.0f}",
                f"{rates.mean() / 1e6:.2f} ± {rates.std() / 1e6:.2f}",
                f"{ratios.mean():.2f} ({ratios.min():.2f}-{ratios.max():.2f})",
            ]
        )
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"Typed vs homogeneous sampling, synthetic-hetero {g.num_nodes:,} nodes / "
        f"{g.num_edges:,} edges, {a.batches} batches of {a.batch_size} paper seeds, 2 layers, "
        f"{a.rounds} rounds (ratio: to homogeneous in the same round; mean (min-max))",
        ["sampler", "edges / batch", "M edges / s", "x homogeneous"],
        rows,
        graph=g.summary(),
        rounds=[{k: {"edges_per_s": v[0], "edges": v[1]} for k, v in r.items()} for r in rounds],
    )


if __name__ == "__main__":
    sys.exit(main())
