"""Partitioning typed graphs: all node types together, each type balanced on its own, and the
(type, id) <-> (part, local row) book in ``P x (T + 1)`` numbers.

A :class:`~shardgnn.graph.hetero.HeteroGraph` is one CSR over global ids plus a relation per
edge, so it partitions as a homogeneous graph (METIS, streaming, random) whose vertex weights
have one column per node type (METIS multi-constraint: no part gets all the papers and none of
the authors). The partition directory is the ordinary format plus ``etype.npy`` per part and
``meta.json["hetero"]``; :class:`TypedPartitionBook` reads it back.
"""

from __future__ import annotations

import os

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.hetero import HeteroGraph
from shardgnn.partition.format import PartitionSet, read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, PartitionResult, partition_graph


def homogeneous_view(graph: HeteroGraph) -> Graph:
    """The typed graph's CSR as a plain graph (no copy), with the target type's training nodes
    as global ids (METIS's ``train`` balance constraint)."""
    train = None
    if graph.target_type is not None and graph.train_idx is not None:
        train = graph.global_ids(graph.target_type, graph.train_idx)
    return Graph(indptr=graph.indptr, indices=graph.indices, train_idx=train, name=graph.name)


def partition_hetero(graph: HeteroGraph, config: PartitionConfig) -> PartitionResult:
    """Partition every node type together; METIS balances each type separately."""
    node_type = graph.node_type_of(np.arange(graph.num_nodes)).astype(np.int64)
    result = partition_graph(homogeneous_view(graph), config, node_type=node_type)
    result.settings["node_types"] = list(graph.node_types)
    return result


def write_hetero_partitions(
    graph: HeteroGraph,
    assignment: np.ndarray,
    out_dir: str | os.PathLike,
    *,
    method: str,
    settings: dict | None = None,
    overwrite: bool = False,
    dataset_spec: str | None = None,
) -> PartitionSet:
    """Write the partition directory of a typed graph: the ordinary parts plus each edge's
    relation and the types' bounds per part."""
    return write_partitions(
        homogeneous_view(graph),
        assignment,
        out_dir,
        method=method,
        settings=settings,
        overwrite=overwrite,
        dataset_spec=dataset_spec,
        edge_type=graph.etype,
        hetero={
            "node_types": graph.node_types,
            "type_offsets": graph.type_offsets,
            "relations": graph.relations,
        },
    )


class TypedPartitionBook:
    """Which part holds ``(type, id)``, and which type a new id has: ``P x (T + 1)`` bounds.

    Inside part ``p`` the new ids of type ``t`` are ``[type_bounds[p, t], type_bounds[p, t + 1])``
    (the last bound of a part is its end). A node's rank among its type's nodes in new-id order
    (part by part) is its *typed new id*; ``(type, typed new id) -> global new id`` is a search
    over ``P`` cumulative counts."""

    def __init__(self, hetero: dict, boundaries: np.ndarray):
        self.node_types = tuple(hetero["node_types"])
        self.relations = tuple(tuple(r) for r in hetero["relations"])
        bounds = np.asarray(hetero["type_bounds"], dtype=np.int64)  # [P, T + 1]
        num_types = len(self.node_types)
        if bounds.shape != (len(boundaries) - 1, num_types + 1):
            raise DatasetError(
                f"meta.json hetero.type_bounds has shape {bounds.shape}, expected "
                f"({len(boundaries) - 1}, {num_types + 1})"
            )
        self.type_bounds = bounds
        counts = np.diff(bounds, axis=1)  # [P, T] nodes of each type per part
        # typed_start[p, t]: typed new id of the first type-t node of part p
        self.typed_start = np.vstack([np.zeros((1, num_types), np.int64), np.cumsum(counts, 0)])

    def type_of(self, new_ids: np.ndarray) -> np.ndarray:
        """The type index of every new id."""
        flat = self.type_bounds[:, :-1].reshape(-1)  # ascending: parts, then types
        return (np.searchsorted(flat, np.asarray(new_ids), side="right") - 1) % len(self.node_types)

    def new_id(self, node_type: str, typed_ids: np.ndarray) -> np.ndarray:
        """Global new ids of ``node_type``'s nodes by typed new id."""
        t = self.node_types.index(node_type)
        typed_ids = np.asarray(typed_ids, dtype=np.int64)
        part = np.searchsorted(self.typed_start[1:, t], typed_ids, side="right")
        return self.type_bounds[part, t] + typed_ids - self.typed_start[part, t]


def typed_book(path: str | os.PathLike) -> TypedPartitionBook:
    """The typed partition book of a partition directory written by
    :func:`write_hetero_partitions`."""
    pset = read_partitions(path, verify=False)
    hetero = pset.meta.get("hetero")
    if not hetero:
        raise DatasetError(
            "holds an untyped graph (no hetero section in meta.json)",
            pset.path,
            "partition a typed graph with write_hetero_partitions",
        )
    return TypedPartitionBook(hetero, pset.book.boundaries)


def reassemble_hetero(path: str | os.PathLike, *, verify: bool = True) -> HeteroGraph:
    """The typed graph in ORIGINAL ids, rebuilt from the parts (the inverse of
    :func:`write_hetero_partitions`: a round trip gives back the same CSR and relations)."""
    pset = read_partitions(path, verify=verify)
    hetero = pset.meta.get("hetero")
    if not hetero:
        raise DatasetError("holds an untyped graph (no hetero section in meta.json)", pset.path)
    new = pset.reassemble()
    etype = np.concatenate(
        [np.asarray(pset.load_part(p, mmap=True).etype) for p in range(pset.num_parts)]
    )
    orig = np.asarray(pset.orig_ids)
    dst_new = np.repeat(np.arange(new.num_nodes, dtype=np.int64), np.diff(new.indptr))
    return HeteroGraph.from_global_edges(
        tuple(hetero["node_types"]),
        np.asarray(hetero["type_offsets"], dtype=np.int64),
        tuple(tuple(r) for r in hetero["relations"]),
        orig[np.asarray(new.indices, dtype=np.int64)],
        orig[dst_new],
        etype,
        name=new.name,
    )
