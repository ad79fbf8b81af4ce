"""Partitioning typed graphs: all node types together, each type balanced on its own, and the
(type, id) <-> (part, local row) book in ``P x (T + 1)`` numbers.

A :class:`~shardgnn.graph.typed.TypedGraph` is one CSR over global ids plus a relation per
edge, so it partitions as a homogeneous graph (METIS, streaming, random) whose vertex weights
have one column per node type (METIS multi-constraint: no part gets all the papers and none of
the authors). The partition directory is the ordinary format plus ``etype.npy`` per part and
``meta.json["typed"]``; :class:`TypedPartitionBook` reads it back.
"""

from __future__ import annotations

import os

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.identity import typed_fingerprint
from shardgnn.graph.typed import TypedGraph, reverse_relations
from shardgnn.partition.book import TypedPartitionBook
from shardgnn.partition.format import PartitionSet, read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, PartitionResult, partition_graph
from shardgnn.partition.sections import TriplesSection, TypedSection


def homogeneous_view(graph: TypedGraph) -> Graph:
    """The typed graph's CSR as a plain graph (no copy of the edges): the target type's labels
    (``-1``, or a row of NaN, on every other node) and splits in global ids (METIS's ``train``
    balance constraint; the splits and labels each part stores)."""
    fields: dict = {}
    if graph.target_type is not None:
        offset = int(graph.type_offsets[graph.node_types.index(graph.target_type)])
        for key in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(graph, key)
            if idx is not None:
                fields[key] = np.asarray(idx, dtype=np.int64) + offset
        if graph.y is not None:
            y_target = np.asarray(graph.y)
            unknown = -1 if graph.label_kind == "class" else np.nan
            y = np.full((graph.num_nodes, *y_target.shape[1:]), unknown, dtype=y_target.dtype)
            y[offset : offset + len(y_target)] = y_target
            fields.update(
                y=y,
                num_classes=int(graph.num_classes),
                label_kind=graph.label_kind,
                class_names=graph.class_names,
            )
    return Graph(indptr=graph.indptr, indices=graph.indices, name=graph.name, **fields)


def partition_typed_graph(graph: TypedGraph, config: PartitionConfig) -> PartitionResult:
    """Partition every node type together; METIS balances each type separately."""
    node_type = graph.node_type_of(np.arange(graph.num_nodes)).astype(np.int64)
    result = partition_graph(homogeneous_view(graph), config, node_type=node_type)
    result.settings["node_types"] = list(graph.node_types)
    return result


def typed_metrics(graph: TypedGraph, assignment: np.ndarray, num_parts: int) -> dict:
    """Partition quality by relation (edges, cut edges and their share) and by node type (nodes
    per part and balance, max over mean): what the homogeneous metrics sum up."""
    assignment = np.asarray(assignment)
    src, dst, etype = graph.edge_arrays()
    cut = assignment[src] != assignment[dst]
    edges_R = np.bincount(etype, minlength=graph.num_relations)
    cut_R = np.bincount(etype[cut], minlength=graph.num_relations)
    node_type = graph.node_type_of(np.arange(graph.num_nodes))
    relations = {
        "/".join(rel): {
            "edges": int(edges_R[r]),
            "cut_edges": int(cut_R[r]),
            "edge_cut": float(cut_R[r] / edges_R[r]) if edges_R[r] else 0.0,
        }
        for r, rel in enumerate(graph.relations)
    }
    node_types = {}
    for t, name in enumerate(graph.node_types):
        per_part = np.bincount(assignment[node_type == t], minlength=num_parts)
        mean = per_part.mean() if num_parts else 0.0
        node_types[name] = {
            "part_nodes": per_part.tolist(),
            "balance": float(per_part.max() / mean) if mean else None,
        }
    return {"relations": relations, "node_types": node_types}


def write_typed_partitions(
    graph: TypedGraph,
    assignment: np.ndarray,
    out_dir: str | os.PathLike,
    *,
    method: str,
    settings: dict | None = None,
    overwrite: bool = False,
    dataset_spec: str | None = None,
    **write_options,
) -> PartitionSet:
    """Write the partition directory of a typed graph: the ordinary parts (with the target
    type's labels and splits) plus each edge's relation, each featured type's rows, and the
    types' bounds per part, the user's ids of every type that has them and the class names, and
    the quality by relation and node type (:func:`typed_metrics`), and a knowledge graph's triples
    (:class:`TriplesSection`; relations named as in ``graph`` without its reverses).
    ``write_options``: more of :func:`write_partitions`' arguments (metrics, progress...)."""
    num_parts = write_options.get("num_parts") or int(np.max(assignment)) + 1
    typed = TypedSection(
        edge_type=graph.etype,
        node_types=tuple(graph.node_types),
        type_offsets=np.asarray(graph.type_offsets),
        relations=tuple(graph.relations),
        target_type=graph.target_type,
        type_features={graph.node_types.index(t): x for t, x in graph.x.items()},
        type_node_ids={
            t: ids
            for t, name in enumerate(graph.node_types)
            if (ids := graph.original_ids(name)) is not None
        },
        metrics=typed_metrics(graph, assignment, num_parts),
    )
    return write_partitions(
        homogeneous_view(graph),
        assignment,
        out_dir,
        method=method,
        settings=settings,
        overwrite=overwrite,
        dataset_spec=dataset_spec,
        sections=(typed, *_triples_section(graph)),
        **write_options,
    )


def _triples_section(graph: TypedGraph) -> tuple[TriplesSection, ...]:
    """The triples of a knowledge graph (none for other typed graphs). Their relations are the
    graph's own: half of them when the graph holds every relation's reverse too."""
    if not graph.triples:
        return ()
    reverse = reverse_relations(graph.relations[: graph.num_relations // 2])
    halves = graph.num_relations % 2 == 0 and graph.relations[graph.num_relations // 2 :] == reverse
    num = graph.num_relations // 2 if halves else graph.num_relations
    return (TriplesSection(dict(graph.triples), num),)


def partition_for_training(
    graph: TypedGraph, config: PartitionConfig, out_dir: str | os.PathLike, **write_options
) -> tuple[TypedGraph, PartitionResult, PartitionSet]:
    """Partition ``graph`` as typed training reads it and write the directory: every relation
    and its reverse (R-GCN and heterogeneous SAGE pass messages both ways along a relation, so
    each part holds its nodes' in-edges of both directions), every node type balanced.
    The directory records the identity of ``graph`` as given (:func:`typed_fingerprint`: one
    process's checkpoints of it resume on the parts). Returns the graph that was partitioned
    (with the reverses), the partition and the
    directory (``write_options``: :func:`write_typed_partitions`' keyword arguments)."""
    typed = graph.with_reverse_relations()
    result = partition_typed_graph(typed, config)
    pset = write_typed_partitions(
        typed, result.assignment, out_dir, method=result.method, settings=result.settings,
        seconds=result.seconds, dataset_fingerprint=typed_fingerprint(graph), **write_options,
    )  # fmt: skip
    return typed, result, pset


def typed_book(path: str | os.PathLike) -> TypedPartitionBook:
    """The typed partition book of a partition directory written by
    :func:`write_typed_partitions`."""
    pset = read_partitions(path, verify=False)
    hetero = pset.meta.get("typed")
    if not hetero:
        raise DatasetError(
            "holds an untyped graph (no hetero section in meta.json)",
            pset.path,
            "partition a typed graph with write_typed_partitions",
        )
    return TypedPartitionBook(hetero, pset.book.boundaries)


def reassemble_typed(path: str | os.PathLike, *, verify: bool = True) -> TypedGraph:
    """The typed graph in ORIGINAL ids, rebuilt from the parts (the inverse of
    :func:`write_typed_partitions`: a round trip gives back the same CSR and relations)."""
    pset = read_partitions(path, verify=verify)
    hetero = pset.meta.get("typed")
    if not hetero:
        raise DatasetError("holds an untyped graph (no hetero section in meta.json)", pset.path)
    new = pset.reassemble()
    etype = np.concatenate(
        [np.asarray(pset.load_part(p, mmap=True).etype) for p in range(pset.num_parts)]
    )
    orig = np.asarray(pset.orig_ids)
    dst_new = np.repeat(np.arange(new.num_nodes, dtype=np.int64), np.diff(new.indptr))
    node_types = tuple(hetero["node_types"])
    offsets = np.asarray(hetero["type_offsets"], dtype=np.int64)
    fields: dict = {"x": {}}
    for key, dim in hetero.get("features", {}).items():
        t = int(key)
        x_t = np.zeros((int(offsets[t + 1] - offsets[t]), dim), dtype=np.float32)
        for p in range(pset.num_parts):
            lo, hi = (int(b) for b in pset.meta["typed"]["type_bounds"][p][t : t + 2])
            x_t[orig[lo:hi] - offsets[t]] = pset.load_part(p, mmap=True).type_x[t]
        fields["x"][node_types[t]] = x_t
    target = hetero.get("target_type")
    if target is not None and new.y is not None:
        t = node_types.index(target)
        y_new = np.asarray(new.y)
        y = np.empty((int(offsets[t + 1] - offsets[t]), *y_new.shape[1:]), dtype=y_new.dtype)
        new_of_type = np.flatnonzero((orig >= offsets[t]) & (orig < offsets[t + 1]))
        y[orig[new_of_type] - offsets[t]] = y_new[new_of_type]
        fields.update(
            target_type=target, y=y, num_classes=new.num_classes, label_kind=new.label_kind
        )
        for key in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(new, key)
            if idx is not None:
                fields[key] = np.sort(orig[np.asarray(idx)] - offsets[t])
    return TypedGraph.from_global_edges(
        node_types,
        offsets,
        tuple(tuple(r) for r in hetero["relations"]),
        orig[np.asarray(new.indices, dtype=np.int64)],
        orig[dst_new],
        etype,
        name=new.name,
        triples=pset.triples(),
        **fields,
    )
