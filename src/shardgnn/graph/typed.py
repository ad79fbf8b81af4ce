"""Heterogeneous graphs: typed nodes, typed edges, and relational (knowledge-graph) triples.

Storage: one in-edge CSR over *global* node ids plus a relation id per edge (``etype``), the
layout DistDGL partitions. A node ``(type t, local id i)`` has global id ``type_offsets[t] + i``,
so every type is a contiguous id range and the (type, id) <-> global map costs ``T + 1``
integers. Within a row the edges are sorted by relation, so "the in-neighbours of ``v`` under
relation ``r``" is a contiguous slice found by a binary search over a row's few relation ids.

Why one CSR and not one per relation: the partitioner, the partition book, the feature store and
the distributed sampler all work on one id space and one CSR, so a heterogeneous graph reuses
them unchanged (a relation is an edge label, a node type an id range); one CSR per relation would
need ``R`` row-pointer arrays over all destinations (or R id maps) and R lookups per seed even
when a fanout covers every relation.

Relational triples (``head, relation, tail``, the knowledge-graph form) are the edge list:
``src = head``, ``dst = tail``, ``etype = relation``. Held-out triples (``valid``/``test``) are
kept beside the graph, never in its CSR.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_directory, save_json, save_npy
from shardgnn.errors import DatasetError
from shardgnn.graph.csr import (
    edge_id_arrays,
    index_dtype,
    label_problem,
    pyg_edge_index,
    pyg_node_labels,
)
from shardgnn.graph.io import (
    REMAKE_GRAPH,
    TYPED_GRAPH_FORMAT,
    check_stored_finite,
    load_node_ids,
    load_npy,
    read_class_names,
    read_directory_meta,
    save_node_ids,
)
from shardgnn.graph.split import FINITE_FIX, check_finite_features

TYPED_GRAPH_FORMAT_VERSION = 1
TRIPLE_SPLITS = ("train", "valid", "test")
_LABEL_ARRAYS = ("y", "train_idx", "val_idx", "test_idx")

Relation = tuple[str, str, str]
"""A canonical edge type ``(source node type, relation name, destination node type)``."""


def reverse_relations(relations) -> tuple[Relation, ...]:
    """``(d, rev_r, s)`` for every relation ``(s, r, d)``: the relations of the reversed edges
    (:meth:`TypedGraph.with_reverse_relations` appends them, relation ``r`` reversed is
    ``r + R``)."""
    return tuple((d, f"rev_{name}", s) for s, name, d in relations)


def relation_ids(relations, name: str) -> list[int]:
    """The relations of ``relations`` that ``name`` may mean: ``src/rel/dst`` names one; a bare
    relation name every relation called so (callers refuse none or several)."""
    full = ["/".join(rel) for rel in relations]
    if name in full:
        return [full.index(name)]
    return [r for r, rel in enumerate(relations) if rel[1] == name]


def with_reverse_edges(
    src: np.ndarray, dst: np.ndarray, etype: np.ndarray, num_relations: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges plus one reversed edge each, under relation ``r + num_relations`` (R-GCN's
    inverse relations, PyG's ``rev_`` edge types)."""
    return (
        np.concatenate([src, dst]),
        np.concatenate([dst, src]),
        np.concatenate([etype, np.asarray(etype) + num_relations]),
    )


def _etype_dtype(num_relations: int) -> np.dtype:
    """The narrowest integer that holds every relation id: a sampler reads a row's relations
    before it draws, so a byte per edge (up to 127 relations) halves that read."""
    for dtype in (np.int8, np.int16):
        if num_relations <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int32)


@dataclasses.dataclass(kw_only=True)
class TypedGraph:
    """Typed nodes and edges as one in-edge CSR over global ids with a relation id per edge.

    Attributes:
        node_types: the node type names, in id-range order.
        type_offsets: int64 ``[T + 1]``; type ``t`` owns global ids
            ``type_offsets[t] .. type_offsets[t + 1] - 1``.
        relations: the canonical edge types ``(src type, relation, dst type)``; ``etype`` indexes
            them.
        indptr: int64 ``[N + 1]`` in-edge row pointers over global ids.
        indices: int32/int64 ``[E]`` global source id of every in-edge.
        etype: int8/int16/int32 ``[E]`` relation of every in-edge; ascending within each row.
        x: node features per type (float32 ``[N_t, F_t]``); a type without an entry has none.
        node_names: per type, the original name of each node (ingested ids), when known.
        triples: relational splits ``{train, valid, test}``: int64 ``[T, 3]`` rows of
            (head global id, relation id, tail global id); ``train`` is the CSR's edge list.
        target_type: the node type whose nodes carry labels (node classification), or None.
        y: the target type's labels by local id, or None: int64 ``[N_target]`` classes
            (``-1`` = unlabelled), or float32 ``[N_target, W]`` for the other ``label_kind`` s
            (NaN = unknown).
        num_classes: label classes (0 without labels, and for labels other than classes).
        label_kind: what a label is, as a homogeneous graph's (:mod:`shardgnn.nn.targets`):
            ``class``, ``multilabel``, ``regression`` or ``multitask:...``.
        train_idx, val_idx, test_idx: int64 local ids of labelled target nodes per split.
        name: a human-readable dataset name.
        node_ids: per type, ``[N_t]`` the user's own id of each node (int64 or text ``<U``), by
            local id, when the graph was built from ids of its own (``shardgnn convert``).
        class_names: the name of every class 0..C-1 of the target type, or ``None``.
    """

    node_types: tuple[str, ...]
    type_offsets: np.ndarray
    relations: tuple[Relation, ...]
    indptr: np.ndarray
    indices: np.ndarray
    etype: np.ndarray
    x: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    node_names: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    triples: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    target_type: str | None = None
    y: np.ndarray | None = None
    num_classes: int = 0
    label_kind: str = "class"
    train_idx: np.ndarray | None = None
    val_idx: np.ndarray | None = None
    test_idx: np.ndarray | None = None
    name: str = "hetero-graph"
    node_ids: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    class_names: tuple[str, ...] | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_typed_edges(
        cls,
        num_nodes: dict[str, int],
        edges: dict[Relation, tuple[np.ndarray, np.ndarray]],
        **fields: Any,
    ) -> "TypedGraph":
        """Build from per-type node counts and per-relation ``(src, dst)`` arrays of *local* ids
        (the form of PyG's ``HeteroData`` and of typed edge tables)."""
        node_types = tuple(num_nodes)
        for node_type, count in num_nodes.items():
            if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
                raise DatasetError(
                    f"node type {node_type!r} has count {count!r}",
                    fix="give every node type a whole number of nodes >= 0",
                )
        offsets = np.zeros(len(node_types) + 1, dtype=np.int64)
        np.cumsum([int(num_nodes[t]) for t in node_types], out=offsets[1:])
        relations = tuple(edges)
        srcs, dsts, rels = [], [], []
        for r, (rel, arrays) in enumerate(edges.items()):
            if not (
                isinstance(rel, tuple) and len(rel) == 3 and all(isinstance(p, str) for p in rel)
            ):
                raise DatasetError(
                    f"relation {rel!r} is not (source type, name, destination type)",
                    fix="key every edge array pair by a (str, str, str) triple",
                )
            if not (isinstance(arrays, (tuple, list)) and len(arrays) == 2):
                raise DatasetError(
                    f"relation {rel}: expected a (src, dst) pair of id arrays",
                    fix="give each relation (src, dst): two 1-D arrays of local ids",
                )
            src, dst = edge_id_arrays(*arrays, f"relation {'/'.join(rel)}")
            src_type, _, dst_type = rel
            for node_type in (src_type, dst_type):
                if node_type not in num_nodes:
                    raise DatasetError(
                        f"relation {rel} names node type {node_type!r}, which has no node count",
                        fix=f"give a count for every node type; known: {list(node_types)}",
                    )
            src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
            for ids, node_type, end in ((src, src_type, "source"), (dst, dst_type, "destination")):
                count = int(num_nodes[node_type])
                if ids.size and (ids.min() < 0 or ids.max() >= count):
                    raise DatasetError(
                        f"relation {rel}: {end} ids span [{ids.min()}, {ids.max()}] but node type "
                        f"{node_type!r} has {count} nodes",
                        fix="ids of a type must be local ids in [0, its count)",
                    )
            srcs.append(src + offsets[node_types.index(src_type)])
            dsts.append(dst + offsets[node_types.index(dst_type)])
            rels.append(np.full(src.size, r, dtype=np.int64))
        cat = (lambda parts: np.concatenate(parts)) if srcs else (lambda _: np.zeros(0, np.int64))
        return cls.from_global_edges(
            node_types, offsets, relations, cat(srcs), cat(dsts), cat(rels), **fields
        )

    @classmethod
    def from_global_edges(
        cls,
        node_types: tuple[str, ...],
        type_offsets: np.ndarray,
        relations: tuple[Relation, ...],
        src: np.ndarray,
        dst: np.ndarray,
        etype: np.ndarray,
        **fields: Any,
    ) -> "TypedGraph":
        """Build from global-id edge arrays and their relation ids (order kept within a
        (destination, relation) group)."""
        num_nodes = int(type_offsets[-1])
        order = np.lexsort((etype, dst))  # by destination, then relation; stable
        counts = np.bincount(dst, minlength=num_nodes)
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        graph = cls(
            node_types=tuple(node_types),
            type_offsets=np.asarray(type_offsets, dtype=np.int64),
            relations=tuple(tuple(r) for r in relations),
            indptr=indptr,
            indices=np.asarray(src)[order].astype(index_dtype(num_nodes)),
            etype=np.asarray(etype)[order].astype(_etype_dtype(len(relations))),
            **fields,
        )
        return graph.validate()

    @classmethod
    def from_pyg(
        cls, data: Any, name: str = "pyg-hetero", target_type: str | None = None
    ) -> "TypedGraph":
        """Convert a ``torch_geometric.data.HeteroData``: every node type with its count (and
        ``x`` when present), every edge type with its ``edge_index``; the labels ``y`` (classes,
        multi-label or regression as :func:`~shardgnn.graph.csr.labels_of` reads them) and
        ``train_mask``/``val_mask``/``test_mask`` of ``target_type``, or of the one node type
        that has ``y``."""
        num_nodes = {t: int(data[t].num_nodes) for t in data.node_types}
        for rel in data.edge_types:
            for key in ("edge_attr", "edge_weight"):
                if getattr(data[rel], key, None) is not None:
                    raise DatasetError(
                        f"edge type {'/'.join(rel)} has {key}, and a typed graph carries no "
                        "edge features or weights (its layers would not read them)",
                        fix=f"delete them to train on the edges alone (del data[{tuple(rel)}]."
                        f"{key}), or convert the graph as one homogeneous Data "
                        "(Graph.from_pyg: --model gine reads edge features)",
                    )
        edges = {
            tuple(rel): tuple(
                pyg_edge_index(getattr(data[rel], "edge_index", None), name, "/".join(rel))
            )
            for rel in data.edge_types
        }
        x = {
            t: np.ascontiguousarray(data[t].x.detach().cpu().numpy(), dtype=np.float32)
            for t in data.node_types
            if getattr(data[t], "x", None) is not None
        }
        labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
        if target_type is None and len(labelled) > 1:
            raise DatasetError(
                f"node types {labelled} all have labels y",
                fix="name the one to learn: TypedGraph.from_pyg(data, target_type=...)",
            )
        target = target_type if target_type is not None else next(iter(labelled), None)
        fields: dict[str, Any] = {}
        if target is not None:
            if target not in num_nodes:
                raise DatasetError(
                    f"target type {target!r} is not a node type of the HeteroData",
                    fix=f"name one of {list(num_nodes)}",
                )
            fields = {
                "target_type": target,
                **pyg_node_labels(data[target], num_nodes[target], f"{name} ({target!r} nodes)"),
            }
        return cls.from_typed_edges(num_nodes, edges, x=x, name=name, **fields)

    def to_pyg(self) -> Any:
        """A ``torch_geometric.data.HeteroData`` with local ids per type (the inverse of
        :meth:`from_pyg`)."""
        import torch
        from torch_geometric.data import HeteroData

        data = HeteroData()
        for t in self.node_types:
            data[t].num_nodes = self.num_nodes_of(t)
            if t in self.x:
                data[t].x = torch.from_numpy(np.asarray(self.x[t]))
        if self.target_type is not None and self.y is not None:
            store = data[self.target_type]
            y = np.asarray(self.y)
            if self.label_kind == "multilabel" and not np.isnan(y).any():
                y = y.astype(np.int64)  # as OGB gives 0/1 labels (from_pyg reads them back)
            store.y = torch.from_numpy(y)
            for split in ("train", "val", "test"):
                idx = getattr(self, f"{split}_idx")
                if idx is not None:
                    mask = np.zeros(self.num_nodes_of(self.target_type), dtype=bool)
                    mask[np.asarray(idx)] = True
                    store[f"{split}_mask"] = torch.from_numpy(mask)
        src, dst, etype = self.edge_arrays()
        for r, rel in enumerate(self.relations):
            keep = etype == r
            s = src[keep] - self.type_offsets[self.node_types.index(rel[0])]
            d = dst[keep] - self.type_offsets[self.node_types.index(rel[2])]
            data[rel].edge_index = torch.from_numpy(np.stack([s, d]).astype(np.int64))
        return data

    def with_reverse_relations(self) -> "TypedGraph":
        """This graph plus, for every relation ``(s, r, d)``, a relation ``(d, rev_r, s)`` holding
        each edge reversed (PyG's ``ToUndirected`` on typed graphs): messages, and sampled
        neighbourhoods, then reach every node type from every side of its relations."""
        reverse = reverse_relations(self.relations)
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("node_types", "type_offsets", "relations", "indptr", "indices", "etype"):
            del fields[key]
        return TypedGraph.from_global_edges(
            self.node_types,
            self.type_offsets,
            self.relations + reverse,
            *with_reverse_edges(*self.edge_arrays(), self.num_relations),
            **fields,
        )

    def relation_ids(self, name: str) -> list[int]:
        """The relations ``name`` may mean (:func:`relation_ids`)."""
        return relation_ids(self.relations, name)

    # ------------------------------------------------------------------ queries
    @property
    def num_nodes(self) -> int:
        return int(self.type_offsets[-1])

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def num_nodes_of(self, node_type: str) -> int:
        t = self.node_types.index(node_type)
        return int(self.type_offsets[t + 1] - self.type_offsets[t])

    def node_type_of(self, ids: np.ndarray) -> np.ndarray:
        """The type index of every global id in ``ids``."""
        return np.searchsorted(self.type_offsets, np.asarray(ids), side="right") - 1

    def edge_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, etype)`` of every edge, in CSR order (int64)."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))
        return self.indices.astype(np.int64), dst, self.etype.astype(np.int64)

    def edges_per_relation(self) -> dict[str, int]:
        counts = np.bincount(self.etype.astype(np.int64), minlength=self.num_relations)
        return {"/".join(rel): int(c) for rel, c in zip(self.relations, counts)}

    def summary(self) -> dict[str, Any]:
        """Per-type counts (``shardgnn info``, results files)."""
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "nodes_per_type": {t: self.num_nodes_of(t) for t in self.node_types},
            "features_per_type": {t: int(self.x[t].shape[1]) for t in self.x},
            "edges_per_relation": self.edges_per_relation(),
            "num_relations": self.num_relations,
            "triples": {k: int(v.shape[0]) for k, v in self.triples.items()},
            "target_type": self.target_type,
            "num_classes": self.num_classes,
            "label_kind": self.label_kind,
            "splits": {
                key: int(len(getattr(self, f"{key}_idx")))
                for key in ("train", "val", "test")
                if getattr(self, f"{key}_idx") is not None
            },
        }

    def original_ids(self, node_type: str) -> np.ndarray | None:
        """The user's ids of ``node_type``'s nodes by local id (``node_ids``, else the ingested
        ``node_names``), or ``None`` when the graph has none (ids are 0..N_t-1)."""
        if node_type in self.node_ids:
            return self.node_ids[node_type]
        if node_type in self.node_names:
            return np.array(self.node_names[node_type], dtype=np.str_)
        return None

    def global_ids(self, node_type: str, local: np.ndarray) -> np.ndarray:
        """Global ids of ``node_type``'s nodes ``local``."""
        return (
            np.asarray(local, dtype=np.int64) + self.type_offsets[self.node_types.index(node_type)]
        )

    # ------------------------------------------------------------------ checks
    def validate(self, source: str | os.PathLike | None = None) -> "TypedGraph":
        """Check every invariant; raise :class:`DatasetError` naming ``source`` otherwise."""

        def fail(problem: str) -> None:
            raise DatasetError(problem, source, "rebuild the graph (ingest again)")

        offsets = self.type_offsets
        if len(self.node_types) != len(set(self.node_types)) or not self.node_types:
            fail(f"node types {list(self.node_types)} must be non-empty and distinct")
        if offsets.shape != (len(self.node_types) + 1,) or offsets[0] != 0:
            fail(f"type_offsets {offsets.tolist()} must start at 0 with one entry per type + 1")
        if np.any(np.diff(offsets) < 0):
            fail(f"type_offsets {offsets.tolist()} decrease")
        if len(set(self.relations)) != len(self.relations):
            fail("relations repeat")
        for rel in self.relations:
            if len(rel) != 3 or rel[0] not in self.node_types or rel[2] not in self.node_types:
                fail(f"relation {rel} is not (src type, name, dst type) over known node types")
        n, e = self.num_nodes, self.num_edges
        if self.indptr.shape != (n + 1,) or self.indptr[0] != 0 or self.indptr[-1] != e:
            fail(f"indptr must have {n + 1} entries from 0 to {e}")
        if np.any(np.diff(self.indptr) < 0):
            fail("indptr decreases")
        if self.etype.shape != (e,):
            fail(f"etype has shape {self.etype.shape}, expected ({e},)")
        if e:
            if self.indices.min() < 0 or self.indices.max() >= n:
                fail(f"edge sources must lie in [0, {n})")
            if self.etype.min() < 0 or self.etype.max() >= self.num_relations:
                fail(f"edge relation ids must lie in [0, {self.num_relations})")
            src, dst, etype = self.edge_arrays()
            rel_src = np.array([self.node_types.index(r[0]) for r in self.relations])
            rel_dst = np.array([self.node_types.index(r[2]) for r in self.relations])
            if np.any(self.node_type_of(src) != rel_src[etype]) or np.any(
                self.node_type_of(dst) != rel_dst[etype]
            ):
                fail("an edge's endpoint types do not match its relation")
            same_row = dst[1:] == dst[:-1]
            if np.any(same_row & (etype[1:] < etype[:-1])):
                fail("relation ids are not ascending within a row")
        for t, x in self.x.items():
            if t not in self.node_types:
                fail(f"features for unknown node type {t!r}")
            if x.ndim != 2 or x.shape[0] != self.num_nodes_of(t):
                fail(
                    f"features of {t!r} have shape {x.shape}, expected ({self.num_nodes_of(t)}, F)"
                )
        for t, names in self.node_names.items():
            if t not in self.node_types or len(names) != self.num_nodes_of(t):
                fail(f"node names of {t!r} do not match its node count")
        for t, ids in self.node_ids.items():
            if (
                t not in self.node_types
                or ids.shape != (self.num_nodes_of(t),)
                or ids.dtype.kind not in "iuU"
            ):
                fail(f"node ids of {t!r} are not one integer or text id per node of the type")
        if self.class_names is not None and len(self.class_names) != self.num_classes:
            fail(f"{len(self.class_names)} class names for {self.num_classes} classes")
        if self.target_type is not None or self.y is not None:
            if self.target_type not in self.node_types:
                fail(f"target type {self.target_type!r} is not a node type")
            count = self.num_nodes_of(self.target_type)
            if self.y is None or self.y.shape[:1] != (count,):
                fail(f"labels must have one entry per {self.target_type!r} node ({count})")
            problem = label_problem(self.y, self.label_kind, self.num_classes, count)
            if problem is not None:
                fail(f"labels of {self.target_type!r}: {problem[0]} ({problem[1]})")
            for key in ("train_idx", "val_idx", "test_idx"):
                idx = getattr(self, key)
                if idx is not None and idx.size and (idx.min() < 0 or idx.max() >= count):
                    fail(f"{key} must hold local {self.target_type!r} ids in [0, {count})")
        for split, triples in self.triples.items():
            if split not in TRIPLE_SPLITS or triples.ndim != 2 or triples.shape[1] != 3:
                fail(f"triples {split!r} must be one of {TRIPLE_SPLITS} with shape (T, 3)")
            if triples.size and (
                triples[:, [0, 2]].min() < 0
                or triples[:, [0, 2]].max() >= n
                or triples[:, 1].min() < 0
                or triples[:, 1].max() >= self.num_relations
            ):
                fail(f"triples {split!r} name nodes or relations outside the graph")
        return self


# ---------------------------------------------------------------------- graph directory
def save_typed_graph(graph: TypedGraph, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``graph`` to directory ``path`` atomically: ``meta.json`` (types, relations, names,
    class names) and one ``.npy`` per array; the user's ids of type ``t`` (the ``t``-th node
    type) in ``node_ids.<t>.npy``, recorded in ``meta.json["node_ids"]`` by type name."""
    path = Path(path)
    for node_type, x in graph.x.items():  # refused here, not as a NaN loss an epoch later
        check_finite_features(x, path, what=f"{node_type!r} feature", fix=FINITE_FIX)
    arrays: dict[str, np.ndarray] = {
        "type_offsets": graph.type_offsets,
        "indptr": graph.indptr,
        "indices": graph.indices,
        "etype": graph.etype,
    }
    arrays.update({f"x.{graph.node_types.index(t)}": x for t, x in graph.x.items()})
    arrays.update({f"triples.{k}": v for k, v in graph.triples.items()})
    arrays.update(
        {key: getattr(graph, key) for key in _LABEL_ARRAYS if getattr(graph, key) is not None}
    )
    with atomic_directory(path, overwrite=overwrite) as tmp:
        for key, value in arrays.items():
            save_npy(tmp / f"{key}.npy", value)
        meta = {
            "format": TYPED_GRAPH_FORMAT,
            "version": TYPED_GRAPH_FORMAT_VERSION,
            "name": graph.name,
            "node_types": list(graph.node_types),
            "relations": [list(r) for r in graph.relations],
            "node_names": graph.node_names,
            "target_type": graph.target_type,
            "num_classes": graph.num_classes,
            "label_kind": graph.label_kind,
            "arrays": {
                k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()
            },
        }
        # the user's ids per type (outside "arrays": a graph without them is written as before)
        if graph.node_ids:
            meta["node_ids"] = {
                t: save_node_ids(tmp, f"node_ids.{graph.node_types.index(t)}.npy", ids)
                for t, ids in graph.node_ids.items()
            }
        if graph.class_names is not None:
            meta["class_names"] = list(graph.class_names)
        save_json(tmp / "meta.json", meta)
    return path


def load_typed_graph(path: str | os.PathLike) -> TypedGraph:
    """Load a directory written by :func:`save_typed_graph`, checking every array against
    ``meta.json`` and every graph invariant."""
    path = Path(path)
    meta_path = path / "meta.json"
    meta = read_directory_meta(path, TYPED_GRAPH_FORMAT, TYPED_GRAPH_FORMAT_VERSION, REMAKE_GRAPH)
    try:
        node_types = tuple(str(t) for t in meta["node_types"])
        relations = tuple(tuple(str(p) for p in r) for r in meta["relations"])
        specs = dict(meta["arrays"])
        names = {str(t): [str(s) for s in v] for t, v in dict(meta.get("node_names", {})).items()}
        target_type = meta.get("target_type")
        target_type = None if target_type is None else str(target_type)
        num_classes = int(meta.get("num_classes", 0))
        label_kind = str(meta.get("label_kind", "class"))
        id_specs = dict(meta.get("node_ids", {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"meta.json is malformed ({exc!r})", meta_path) from None
    node_ids = {str(t): load_node_ids(path, spec, meta_path) for t, spec in id_specs.items()}
    class_names = read_class_names(meta.get("class_names"), meta_path)
    arrays = {}
    for key, spec in specs.items():
        array = load_npy(path / f"{key}.npy")
        if not isinstance(spec, dict) or (list(array.shape), str(array.dtype)) != (
            spec.get("shape"),
            spec.get("dtype"),
        ):
            raise DatasetError(
                f"{key}.npy has shape {list(array.shape)} dtype {array.dtype}, meta.json says "
                f"{spec}",
                path / f"{key}.npy",
                "the file was replaced or truncated; rewrite the directory",
            )
        arrays[key] = array
    missing = {"type_offsets", "indptr", "indices", "etype"} - set(arrays)
    if missing:
        raise DatasetError(f"meta.json lists no {sorted(missing)} arrays", meta_path)
    x, triples = {}, {}
    for key, array in arrays.items():
        kind, _, which = key.partition(".")
        if kind == "x":
            if not which.isdigit() or int(which) >= len(node_types):
                raise DatasetError(f"array {key!r} names no node type", meta_path)
            check_stored_finite(array, path / f"{key}.npy", f"{node_types[int(which)]!r} feature")
            x[node_types[int(which)]] = array
        elif kind == "triples":
            triples[which] = array
        elif key not in _LABEL_ARRAYS + ("type_offsets", "indptr", "indices", "etype"):
            raise DatasetError(f"unknown array {key!r} in meta.json", meta_path)
    graph = TypedGraph(
        node_types=node_types,
        type_offsets=arrays["type_offsets"],
        relations=relations,
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        etype=arrays["etype"],
        x=x,
        node_names=names,
        triples=triples,
        target_type=target_type,
        num_classes=num_classes,
        label_kind=label_kind,
        **{key: arrays.get(key) for key in _LABEL_ARRAYS},
        name=str(meta.get("name", path.name)),
        node_ids=node_ids,
        class_names=class_names,
    )
    return graph.validate(path)
