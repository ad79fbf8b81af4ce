"""Partitioning temporal graphs: the T-CSR's rows by owner, each part holding its nodes' rows
with the event times and ids beside the neighbours (the ordinary partition directory plus
``edge_times.npy`` and ``edge_eids.npy`` per part and ``meta.json["temporal"]``)."""

from __future__ import annotations

import os

import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.graph.identity import temporal_fingerprint
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.partition.book import relabel
from shardgnn.partition.config import VERTEX_CUT_METHODS
from shardgnn.partition.format import PartitionSet, write_partitions
from shardgnn.partition.methods import (
    PartitionConfig,
    PartitionResult,
    partition_graph,
    vertex_cut_refusal,
)
from shardgnn.partition.metrics import PartitionMetrics, compute_metrics
from shardgnn.partition.sections import EventSection


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
    **written,
) -> PartitionSet:
    """Write the partition directory of a temporal graph (rows keep their time order: a part's
    rows are the T-CSR's rows of its nodes, neighbours relabelled to new ids), with the event
    stream in new ids beside the parts (``events/src.npy``, ``dst``, ``t``, ``feat`` when the
    events have features, ``label`` when they carry labels): every worker reads the events of
    its share of each batch.
    ``written``: more :func:`write_partitions` arguments (metrics, seconds, dataset_spec...)."""
    new_id = relabel(assignment, int(np.max(assignment, initial=0)) + 1).new_id_of_orig
    events = {
        "events/src.npy": new_id[graph.src],
        "events/dst.npy": new_id[graph.dst],
        "events/t.npy": graph.t,
    }
    if graph.edge_feat is not None:
        events["events/feat.npy"] = graph.edge_feat
    if graph.labels is not None:
        events["events/label.npy"] = graph.labels
    written.setdefault("dataset_fingerprint", temporal_fingerprint(graph))
    return write_partitions(
        static_view(graph),
        assignment,
        out_dir,
        method=method,
        settings=settings,
        overwrite=overwrite,
        sections=(
            EventSection(
                edge_arrays={"times": graph.times, "eids": graph.eids},
                shared=events,
                temporal={
                    "num_events": graph.num_events,
                    "directed": graph.directed,
                    "labelled": graph.labels is not None,
                },
            ),
        ),
        **written,
    )


def partition_temporal(
    graph: TemporalGraph,
    config: PartitionConfig,
    out_dir: str | os.PathLike,
    *,
    progress: bool = False,
    **written,
) -> tuple[PartitionResult, PartitionMetrics, PartitionSet]:
    """Partition a temporal graph's T-CSR (one edge per event and direction, so frequent pairs
    weigh more) and write it: ``(result, metrics, the written directory)``."""
    if config.method in VERTEX_CUT_METHODS:
        raise ConfigError(vertex_cut_refusal(config.method, "a temporal graph"))
    static = static_view(graph)
    result = partition_graph(static, config, progress=progress)
    metrics = compute_metrics(static, result.assignment, config.num_parts)
    pset = write_temporal_partitions(
        graph, result.assignment, out_dir, method=result.method, settings=result.settings,
        num_parts=config.num_parts, metrics=metrics, seconds=result.seconds, **written,
    )  # fmt: skip
    return result, metrics, pset
