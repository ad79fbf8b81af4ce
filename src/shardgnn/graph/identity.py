"""Which graph is this? A fingerprint that partitions, checkpoints and results record, so a
partition, a checkpoint or an inference run is never silently paired with another graph.

The fingerprint is the graph's size (nodes, edges, feature width, classes) and the SHA-256 of its
in-edge CSR in original node ids (``indptr`` and ``indices`` as little-endian int64, whatever
their stored dtype). Two loads of the same dataset give the same fingerprint; a partition
directory records the fingerprint of the graph it was cut from, before relabelling.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from shardgnn.errors import ConfigError

_CHUNK = 1 << 22  # entries hashed at a time: bounded scratch memory for any graph size


def csr_sha256(indptr: np.ndarray, indices: np.ndarray) -> str:
    """SHA-256 of ``indptr`` then ``indices``, both as little-endian int64."""
    digest = hashlib.sha256()
    for array in (indptr, indices):
        for start in range(0, array.shape[0], _CHUNK):
            digest.update(
                np.ascontiguousarray(array[start : start + _CHUNK], dtype="<i8").tobytes()
            )
    return digest.hexdigest()


def events_sha256(src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> str:
    """SHA-256 of the events (sources, destinations, times): a checkpoint's graph identity."""
    digest = hashlib.sha256()
    for array, dtype in ((src, "<i8"), (dst, "<i8"), (t, "<f8")):
        digest.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return digest.hexdigest()


def temporal_fingerprint(events: Any) -> dict[str, Any]:
    """The fingerprint of an event stream (a :class:`~shardgnn.graph.temporal.TemporalGraph` or
    anything with its ``src``, ``dst``, ``t``, ``num_nodes``, ``labels`` and ``edge_feat`` or
    ``feat``) in original node ids: sizes as :func:`fingerprint`'s (an event counts as an
    edge, its feature width as the features) and the SHA-256 of the events."""
    feat = events.edge_feat if hasattr(events, "edge_feat") else events.feat
    labels = events.labels
    return {
        "num_nodes": int(events.num_nodes),
        "num_edges": int(np.asarray(events.t).shape[0]),
        "num_features": 0 if feat is None else int(np.asarray(feat).shape[1]),
        "num_classes": 0 if labels is None else int(np.max(labels, initial=-1)) + 1,
        "events_sha256": events_sha256(events.src, events.dst, events.t),
    }


def fingerprint(graph: Any) -> dict[str, Any]:
    """``{num_nodes, num_edges, num_features, num_classes, csr_sha256}`` of a
    :class:`~shardgnn.graph.csr.Graph`."""
    return {
        "num_nodes": int(graph.num_nodes),
        "num_edges": int(graph.num_edges),
        "num_features": int(graph.num_features),
        "num_classes": int(graph.num_classes),
        "csr_sha256": csr_sha256(graph.indptr, graph.indices),
    }


def typed_fingerprint(graph: Any) -> dict[str, Any]:
    """:func:`fingerprint` of a :class:`~shardgnn.graph.typed.TypedGraph`: its features summed
    over node types, and the SHA-256 of its CSR with every edge's relation after the sources.
    A typed partition records the fingerprint of the graph as loaded (before the reverse
    relations are added), so one process's checkpoints and the workers' name the same graph."""
    widths = [int(np.asarray(x).shape[1]) for x in graph.x.values()]
    return {
        "num_nodes": int(graph.num_nodes),
        "num_edges": int(graph.num_edges),
        "num_features": sum(widths),
        "num_classes": int(graph.num_classes),
        "csr_sha256": csr_sha256(
            graph.indptr,
            np.concatenate([graph.indices, graph.etype.astype(graph.indices.dtype)]),
        ),
    }


def describe(identity: dict[str, Any]) -> str:
    """``coauthor-cs (18,333 nodes, 163,788 edges, 6,805 features, 15 classes)`` of a dataset
    record (``{spec, name, fingerprint}``)."""
    fp = identity.get("fingerprint") or {}
    name = identity.get("spec") or identity.get("name") or "an unnamed graph"
    try:
        return (
            f"{name} ({fp['num_nodes']:,} nodes, {fp['num_edges']:,} edges, "
            f"{fp['num_features']:,} features, {fp['num_classes']:,} classes)"
        )
    except (KeyError, TypeError, ValueError):  # no fingerprint, or a damaged one
        return str(name)


def check_same_graph(
    expected: dict[str, Any] | None,
    actual: dict[str, Any] | None,
    *,
    expected_from: str,
    actual_from: str,
    fix: str,
) -> None:
    """Refuse to pair two things made from different graphs.

    ``expected`` and ``actual`` are dataset records (``{spec, name, fingerprint}``); a record
    without a fingerprint, or with another kind of one (an event stream's partition written by
    an older shardgnn fingerprinted its static view), cannot be checked and passes.

    Raises:
        ConfigError: the fingerprints differ; the message names both graphs and ``fix``.
    """
    fp_expected = (expected or {}).get("fingerprint")
    fp_actual = (actual or {}).get("fingerprint")
    if not fp_expected or not fp_actual or fp_expected == fp_actual:
        return
    if set(fp_expected) != set(fp_actual):
        return
    raise ConfigError(
        f"{expected_from} was made from {describe(expected or {})}, but {actual_from} is "
        f"{describe(actual or {})}; {fix}"
    )
