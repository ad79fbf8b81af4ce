"""Temporal neighbour sampling against PyG's ``LastNeighborLoader`` (TGN's), same stream, same run.

    python benchmarks/bench_temporal_sampler.py --events 10000000 --nodes 1000000

The synthetic interaction stream (``synthetic-temporal``) is replayed in chronological batches of
``--batch-size`` events, as TGN trains: each batch queries the 10 most recent neighbours (events
before the batch) of its sources, destinations and as many random negative destinations, and
gets the relabelled subgraph (unique node ids, local edge index, event ids).

- PyG: ``LastNeighborLoader(num_nodes, size=10)``: query, then ``insert`` the batch's events
  (its state is the last 10 events per node, kept up to date as the stream goes);
- ours: ``TemporalNeighborSampler(graph, [10]).recent_subgraph(nodes, batch start time)`` over
  the T-CSR built once beforehand (its build time is reported apart): the 10 latest events
  before the batch per node, relabelled, in one compiled pass.

Both return the latest events before the batch; PyG's ``insert`` keeps at most 10 of one batch's
events per node and, past 10, not necessarily the latest (its slots wrap), so a hub that
interacts more than 10 times in one batch can differ: the share of nodes given the same events
is measured on the first ``--check`` batches. Rates are
events of the stream per second; the ratio is ours to PyG's in the same round (``--rounds``
rounds over the first ``--measured`` events). Writes ``benchmarks/out/temporal_sampler.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from machine import publish  # noqa: E402
from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal
from shardgnn.sampling.temporal import TemporalNeighborSampler

K = 10


def batches(graph, batch_size: int, measured: int, seed: int) -> list:
    """``(start, stop, query nodes)`` of every batch, made before any timing (the same for both
    samplers, so not part of either's rate)."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, min(measured, graph.num_events), batch_size):
        stop = min(start + batch_size, graph.num_events)
        src, dst = graph.src[start:stop], graph.dst[start:stop]
        negatives = rng.integers(0, graph.num_nodes, stop - start)
        out.append((start, stop, np.unique(np.concatenate([src, dst, negatives]))))
    return out


def run_pyg(graph, stream, check):
    from torch_geometric.nn.models.tgn import LastNeighborLoader

    loader = LastNeighborLoader(graph.num_nodes, size=K)
    src_t, dst_t = torch.from_numpy(graph.src), torch.from_numpy(graph.dst)
    queries = [torch.from_numpy(nodes) for _, _, nodes in stream]
    seen = []
    begin = time.perf_counter()
    for i, ((start, stop, _), nodes) in enumerate(zip(stream, queries)):
        n_id, edge_index, e_id = loader(nodes)
        if i < check:
            seen.append((n_id[edge_index[1]].numpy(), e_id.numpy()))
        loader.insert(src_t[start:stop], dst_t[start:stop])
    return time.perf_counter() - begin, seen


def run_ours(graph, stream, check):
    sampler = TemporalNeighborSampler(graph, [K], "recent")
    seen = []
    begin = time.perf_counter()
    for i, (start, _stop, nodes) in enumerate(stream):
        n_id, edge_index, e_id = sampler.recent_subgraph(nodes, np.full(nodes.size, graph.t[start]))
        if i < check:
            seen.append((n_id[edge_index[1]], e_id))
    return time.perf_counter() - begin, seen


def agreement(a, b) -> float:
    """The share of queried nodes to which both samplers gave the same set of events."""
    same = total = 0
    for (nodes_a, eids_a), (nodes_b, eids_b) in zip(a, b):
        sets_a, sets_b = {}, {}
        for node, eid in zip(nodes_a.tolist(), eids_a.tolist()):
            sets_a.setdefault(node, set()).add(eid)
        for node, eid in zip(nodes_b.tolist(), eids_b.tolist()):
            sets_b.setdefault(node, set()).add(eid)
        for node in set(sets_a) | set(sets_b):
            total += 1
            same += sets_a.get(node) == sets_b.get(node)
    return same / total if total else 1.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--batch-sizes", default="200,2000")
    p.add_argument("--measured", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--check", type=int, default=50)
    p.add_argument("--out", default="benchmarks/out/temporal_sampler")
    a = p.parse_args()
    start = time.perf_counter()
    graph = generate_temporal(TemporalStreamConfig(nodes=a.nodes, events=a.events))
    build_s = time.perf_counter() - start
    print(f"stream: {graph.num_nodes:,} nodes, {graph.num_events:,} events, generated with its "
          f"T-CSR in {build_s:.1f} s", flush=True)  # fmt: skip
    rows, rounds, agree = [], [], {}
    for batch_size in (int(b) for b in a.batch_sizes.split(",")):
        # compile before timing
        TemporalNeighborSampler(graph, [K]).recent_subgraph(graph.src[:10], graph.t[:10])
        ratios, ours_rates, pyg_rates = [], [], []
        stream = batches(graph, batch_size, a.measured, 0)
        for r in range(a.rounds):
            pyg_s, pyg_seen = run_pyg(graph, stream, a.check if r == 0 else 0)
            ours_s, ours_seen = run_ours(graph, stream, a.check if r == 0 else 0)
            if r == 0:
                agree[batch_size] = agreement(pyg_seen, ours_seen)
            events = min(a.measured, graph.num_events)
            ours_rates.append(events / ours_s)
            pyg_rates.append(events / pyg_s)
            ratios.append(pyg_s / ours_s)
            rounds.append({"batch_size": batch_size, "ours_s": ours_s, "pyg_s": pyg_s})
        ratios = np.array(ratios)
        rows.append([
            batch_size,
            f"{np.mean(pyg_rates) / 1e3:,.0f}",
            f"{np.mean(ours_rates) / 1e3:,.0f}",
            f"{ratios.mean():.1f} ({ratios.min():.1f}-{ratios.max():.1f})",
            f"{100 * agree[batch_size]:.2f}",
        ])  # fmt: skip
    return publish(
        f"{a.out}.json",
        f"{a.out}.md",
        f"Temporal sampling (10 most recent neighbours, relabelled) over the first "
        f"{a.measured:,} events of a {graph.num_events:,}-event synthetic stream "
        f"({graph.num_nodes:,} nodes), ours vs PyG LastNeighborLoader, {a.rounds} rounds; the "
        f"T-CSR (with the stream's generation) took {build_s:.1f} s; same events %: nodes of the "
        f"first {a.check} batches given the same events by both",
        ["batch", "PyG k events/s", "ours k events/s", "x PyG", "same events %"],
        rows,
        build_s=build_s,
        rounds=rounds,
    )


if __name__ == "__main__":
    sys.exit(main())
