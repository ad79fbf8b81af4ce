"""Hypergraph partitioning of the communication hypergraph (Mt-KaHyPar).

Full-graph message passing sends node ``u``'s row once to every other part that owns one of its
out-neighbours. In the *column-net* model each node ``u`` with out-edges is a net whose pins are
``u`` and its out-neighbours; a partition's connectivity-1 (``km1``) objective, the sum over nets
of (parts the net touches - 1), is then exactly the rows a layer sends
(:func:`shardgnn.partition.metrics.comm_volume`), where an edge-cut partitioner such as METIS
minimises only a proxy of it (Catalyurek & Aykanat; the partitioning survey's vertex- and
hypergraph models). Mt-KaHyPar minimises ``km1`` directly under a node balance constraint.

Mt-KaHyPar's deterministic preset is used: the same seed gives the same partition whatever the
thread count (checked), so a partition directory can be made again exactly.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph


def communication_nets(graph: Graph) -> list[list[int]]:
    """The column-net hypergraph: for every node ``u`` with an out-neighbour other than itself,
    the net ``[u, out-neighbours of u...]`` (pins unique, ``u`` first)."""
    n = graph.num_nodes
    src, dst = (a.astype(np.int64, copy=False) for a in graph.edge_index())
    keep = src != dst  # a self-loop adds no pin: u is in its own net
    src, dst = src[keep], dst[keep]
    # one pin per (u, v): sort by (u, v), drop repeats
    key = np.unique(src * n + dst)
    src, dst = key // n, key % n
    heads = np.flatnonzero(np.r_[True, src[1:] != src[:-1]]) if src.size else np.empty(0, int)
    bounds = np.r_[heads, src.size]
    return [[int(src[a]), *dst[a:b].tolist()] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@functools.cache
def _initializer(threads: int):
    import mtkahypar

    return mtkahypar.initialize(threads, False)


def hypergraph_partition(
    graph: Graph,
    num_parts: int,
    *,
    imbalance: float = 0.03,
    seed: int = 0,
    node_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """``(assignment, km1)``: Mt-KaHyPar's partition of :func:`communication_nets` into
    ``num_parts`` parts, each of at most ``(1 + imbalance)`` times the average weight
    (``node_weights``, positive integers; default one per node), minimising the rows a full-graph
    layer sends (``km1``, as Mt-KaHyPar counts it: equal to
    :func:`~shardgnn.partition.metrics.comm_volume` of the assignment).

    Raises:
        ConfigError: Mt-KaHyPar is not installed.
    """
    try:
        import mtkahypar
    except ImportError:
        raise ConfigError(
            "the hypergraph method needs Mt-KaHyPar: `pip install mtkahypar` (or "
            "`pip install shardgnn[hypergraph]`), or use --method metis"
        ) from None
    n = graph.num_nodes
    if num_parts == 1:
        return np.zeros(n, dtype=np.int32), 0
    nets = communication_nets(graph)
    if not nets:  # no edge leaves its node: every balanced split sends nothing
        return (np.arange(n) % num_parts).astype(np.int32), 0
    init = _initializer(max(1, min(8, os.cpu_count() or 1)))
    context = init.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    context.set_partitioning_parameters(num_parts, imbalance, mtkahypar.Objective.KM1)
    context.logging = False
    mtkahypar.set_seed(seed)
    if node_weights is None:
        hypergraph = init.create_hypergraph(context, n, len(nets), nets)
    else:
        weights = np.asarray(node_weights, dtype=np.int64).tolist()
        hypergraph = init.create_hypergraph(context, n, len(nets), nets, weights, [1] * len(nets))
    partitioned = hypergraph.partition(context)
    return np.asarray(partitioned.get_partition(), dtype=np.int32), int(partitioned.km1())
