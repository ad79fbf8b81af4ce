"""Partitioning temporal graphs: the T-CSR's rows by owner, each part holding its nodes' rows
with the event times and ids beside the neighbours (the ordinary partition directory plus
``edge_times.npy`` and ``edge_eids.npy`` per part and ``meta.json["temporal"]``)."""

from __future__ import annotations

import os

import numpy as np

from shardgnn.graph.csr import Graph
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.partition.format import PartitionSet, write_partitions


def static_view(graph: TemporalGraph) -> Graph:
    """The T-CSR as a plain graph (no copy): what partitioners cut (one edge per event and
    direction, so frequent pairs weigh more)."""
    return Graph(indptr=graph.indptr, indices=graph.indices, name=graph.name)


def write_temporal_partitions(
    graph: TemporalGraph,
    assignment: np.ndarray,
    out_dir: str | os.PathLike,
    *,
    method: str,
    settings: dict | None = None,
    overwrite: bool = False,
) -> PartitionSet:
    """Write the partition directory of a temporal graph (rows keep their time order: a part's
    rows are the T-CSR's rows of its nodes, neighbours relabelled to new ids)."""
    return write_partitions(
        static_view(graph),
        assignment,
        out_dir,
        method=method,
        settings=settings,
        overwrite=overwrite,
        edge_arrays={"times": graph.times, "eids": graph.eids},
        extra_meta={"temporal": {"num_events": graph.num_events, "directed": graph.directed}},
    )
