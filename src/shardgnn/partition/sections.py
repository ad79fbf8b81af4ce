"""The parts a partition directory is written from, one :class:`Section` each.

:func:`~shardgnn.partition.format.write_partitions` relabels a graph and walks its parts once;
for every part it hands each section the original ids the part owns and the positions of their
in-edges in the graph's CSR (:class:`PartRows`), and each section writes its own arrays, adds
its counts to the part's record and its entries to ``meta.json``. Every graph is written with
:func:`standard_sections` (structure, features, labels and splits, the user's ids); what a kind
of data adds is one more section: :class:`TypedSection` (each edge's relation, per-type
features and ids, the types' bounds per part), :class:`EventSection` (a temporal graph's
per-edge times and its event stream), :class:`LinkSplitSection` (the held-out edges of link
prediction), :class:`TriplesSection` (a knowledge graph's train/valid/test triples). The layout
the sections write together is described in
:mod:`shardgnn.partition.format`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_open
from shardgnn.graph.csr import Graph, index_dtype, label_dtype
from shardgnn.graph.linksplit import LINK_SPLIT_DIR, LinkSplit, save_link_split
from shardgnn.partition.book import PartitionBook

SPLITS = ("train_idx", "val_idx", "test_idx")
NAMES_DIR = "names"
TRIPLES_DIR = "triples"


class _HashingWriter:
    """A write-only file wrapper that feeds every byte to SHA-256 (np.save writes through it)."""

    def __init__(self, fh) -> None:
        self.fh, self.sha, self.size = fh, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += memoryview(data).nbytes
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class ArrayWriter:
    """Writes ``.npy`` files under ``root`` (the directory being built), recording the shape,
    dtype, size and SHA-256 of each for ``meta.json`` (``arrays``, ``sha256``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.arrays: dict[str, dict[str, Any]] = {}
        self.sha256: dict[str, str] = {}

    def write(self, rel: str, array: np.ndarray) -> None:
        """Write ``array`` as ``root/rel`` (its folder created), checksummed as it is written."""
        array = np.ascontiguousarray(array)
        assert not array.dtype.hasobject
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.root / rel, "wb") as fh:
            writer = _HashingWriter(fh)
            np.save(writer, array, allow_pickle=False)
        self.arrays[rel] = {
            "shape": list(array.shape),
            "dtype": str(array.dtype),
            "bytes": writer.size,
        }
        self.sha256[rel] = writer.sha.hexdigest()

    def write_rows(
        self, rel: str, source: np.ndarray, rows: np.ndarray, dtype: Any, chunk_bytes: int = 1 << 26
    ) -> None:
        """Write ``source[rows]`` as ``dtype`` to ``root/rel``, ``chunk_bytes`` of rows at a time
        (a memory-mapped ``source`` larger than memory is never read whole); the file is the one
        :meth:`write` makes of the same rows."""
        dtype = np.dtype(dtype)
        shape = (int(rows.shape[0]), *source.shape[1:])
        row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, chunk_bytes // row_bytes)
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.root / rel, "wb") as fh:
            writer = _HashingWriter(fh)
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
            np.lib.format.write_array_header_1_0(writer, {**header, "shape": shape})
            for start in range(0, shape[0], step):
                block = np.ascontiguousarray(source[rows[start : start + step]], dtype=dtype)
                writer.write(block.tobytes())
        self.arrays[rel] = {"shape": list(shape), "dtype": str(dtype), "bytes": writer.size}
        self.sha256[rel] = writer.sha.hexdigest()


@dataclasses.dataclass(frozen=True)
class Relabelled:
    """What every section sees of the graph being written: the graph (original ids) and its
    relabelling (part ``p`` owns the new ids ``book.part_range(p)``)."""

    graph: Graph
    book: PartitionBook
    orig_ids: np.ndarray
    """``[N]`` new id -> original id"""
    new_of_orig: np.ndarray
    """``[N]`` original id -> new id"""


@dataclasses.dataclass(frozen=True)
class PartRows:
    """One part, as the sections write it."""

    part: int
    start: int
    end: int
    folder: str
    rows: np.ndarray
    """original ids the part owns, ascending (its rows in new-id order)"""
    local_indptr: np.ndarray
    """``[n_p + 1]`` the in-edge CSR row pointers of those rows"""
    positions: np.ndarray
    """``[e_p]`` the positions of their in-edges in the graph's CSR (per-edge values follow)"""


class Section:
    """One part of a partition directory. Each hook does nothing unless a section overrides it;
    they run in this order: :meth:`write_shared` once, :meth:`write_part` for every part,
    :meth:`describe` once, :meth:`write_beside` once (after every checksummed array)."""

    def write_shared(self, data: Relabelled, out: ArrayWriter) -> None:
        """Write the arrays every part reads whole."""

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        """Write part ``part``'s arrays; add its counts to ``info`` (``meta.json["parts"][p]``)."""

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        """Add this section's entries to ``meta.json``."""

    def write_beside(self, root: Path) -> None:
        """Write what lives in its own folder of the directory, outside the checksummed arrays."""


class Structure(Section):
    """Each part's in-edge CSR in new ids, its halo and its edge weights."""

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        graph, (start, end) = data.graph, (part.start, part.end)
        ids_dtype = index_dtype(graph.num_nodes)
        indices = data.new_of_orig[np.asarray(graph.indices[part.positions])].astype(ids_dtype)
        remote = indices[(indices < start) | (indices >= end)]
        halo = np.unique(remote).astype(np.int64)
        del remote
        out.write(f"{part.folder}/indptr.npy", part.local_indptr)
        out.write(f"{part.folder}/indices.npy", indices)
        out.write(f"{part.folder}/halo.npy", halo)
        if graph.edge_weight is not None:
            weights = np.asarray(graph.edge_weight[part.positions], dtype=np.float32)
            out.write(f"{part.folder}/edge_weight.npy", weights)
        info.update(num_edges=int(part.local_indptr[-1]), num_halo=int(halo.shape[0]))

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        meta["edge_weight"] = data.graph.edge_weight is not None
        meta["indices_dtype"] = str(np.dtype(index_dtype(data.graph.num_nodes)))


class Features(Section):
    """Each part's feature rows (``x.npy``), when the graph has features."""

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        if data.graph.x is not None:
            out.write_rows(f"{part.folder}/x.npy", data.graph.x, part.rows, np.float32)

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        graph = data.graph
        meta["features"] = (
            None if graph.x is None else {"dim": graph.num_features, "dtype": "float32"}
        )


def labels_meta(graph: Graph) -> dict[str, Any]:
    """``meta.json["labels"]``: classes as before; other kinds (:mod:`shardgnn.nn.targets`) add
    their name and width (``num_classes`` 0: an older reader sees no classes)."""
    if graph.label_kind == "class":
        return {"num_classes": int(graph.num_classes), "dtype": "int64"}
    return {
        "num_classes": 0,
        "dtype": "float32",
        "kind": graph.label_kind,
        "width": int(graph.y.shape[1]),
    }


class LabelsAndSplits(Section):
    """Each part's labels (``y.npy``) and its local rows in each split the graph defines."""

    def __init__(self) -> None:
        self._masks: dict[str, np.ndarray] | None = None

    def _split_masks(self, graph: Graph) -> dict[str, np.ndarray]:
        if self._masks is None:
            self._masks = {}
            for key in SPLITS:
                idx = getattr(graph, key)
                if idx is not None:
                    mask = np.zeros(graph.num_nodes, dtype=bool)
                    mask[np.asarray(idx)] = True
                    self._masks[key] = mask
        return self._masks

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        graph = data.graph
        if graph.y is not None:
            labels = np.asarray(graph.y[part.rows], dtype=label_dtype(graph.label_kind))
            out.write(f"{part.folder}/y.npy", labels)
        for key, mask in self._split_masks(data.graph).items():
            local = np.flatnonzero(mask[part.rows]).astype(np.int64)
            out.write(f"{part.folder}/{key}.npy", local)
            info[f"num_{key[:-4]}"] = int(local.shape[0])

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        graph = data.graph
        meta["labels"] = None if graph.y is None else labels_meta(graph)
        meta["splits"] = {
            key[:-4]: None
            if getattr(graph, key) is None
            else int(np.asarray(getattr(graph, key)).shape[0])
            for key in SPLITS
        }


class Names(Section):
    """The user's id of every node (``names/node_ids.npy``, by original id) and the class
    names: ``meta.json["names"]``, absent when the graph has neither."""

    def write_shared(self, data: Relabelled, out: ArrayWriter) -> None:
        if data.graph.node_ids is not None:
            out.write(f"{NAMES_DIR}/node_ids.npy", data.graph.node_ids)

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        names: dict[str, Any] = {}
        if data.graph.node_ids is not None:
            names["node_ids"] = f"{NAMES_DIR}/node_ids.npy"
        if data.graph.class_names is not None:
            names["class_names"] = [str(c) for c in data.graph.class_names]
        if names:
            meta.setdefault("names", {}).update(names)


def standard_sections(graph: Graph) -> tuple[Section, ...]:
    """The sections every partition directory of ``graph`` is written with (its edge features,
    when it has them, as the per-edge array ``attr``: ``edge_attr.npy``, a loaded part's
    ``edge_attr``)."""
    edge_rows = () if graph.edge_attr is None else (EdgeArraysSection({"attr": graph.edge_attr}),)
    return (Structure(), Features(), LabelsAndSplits(), Names(), *edge_rows)


def type_features_name(t: int) -> str:
    """The array name of node type ``t``'s features in a typed partition."""
    return f"x_type{t}"


@dataclasses.dataclass(frozen=True)
class TypedSection(Section):
    """A typed graph's part: the relation of every edge (``etype.npy``), each featured type's
    rows (``x_type<t>.npy``), the user's ids of each type that has them
    (``names/node_ids_type<t>.npy``), and ``meta.json["typed"]`` (the types and relations,
    their bounds per part, the quality by relation and node type).

    Attributes:
        edge_type: the relation of every edge of the graph's CSR.
        node_types, type_offsets, relations, target_type: the graph's types (``type_offsets``:
            the original id range of each node type).
        type_features: node type index -> ``[N_t, F_t]`` features (rows by original id minus
            the type's offset).
        type_node_ids: node type index -> ``[N_t]`` the user's ids of that type's nodes.
        metrics: the quality by relation and node type
            (:func:`~shardgnn.partition.typed.typed_metrics`), recorded as it is.
    """

    edge_type: np.ndarray
    node_types: tuple[str, ...]
    type_offsets: np.ndarray
    relations: tuple
    target_type: str | None = None
    type_features: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    type_node_ids: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    metrics: dict[str, Any] | None = None

    def write_shared(self, data: Relabelled, out: ArrayWriter) -> None:
        for t, ids in sorted(self.type_node_ids.items()):
            out.write(f"{NAMES_DIR}/node_ids_type{t}.npy", ids)

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        out.write(f"{part.folder}/etype.npy", np.asarray(self.edge_type)[part.positions])
        for t, x_t in self.type_features.items():
            # a part's rows ascend in original id and a type is an original id range, so its
            # type-t rows are one slice, in the new-id order of the part
            lo, hi = self.type_offsets[t], self.type_offsets[t + 1]
            typed_rows = part.rows[(part.rows >= lo) & (part.rows < hi)] - lo
            rows = np.asarray(x_t[typed_rows], dtype=np.float32)
            out.write(f"{part.folder}/{type_features_name(t)}.npy", rows)

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        meta["typed"] = self.typed_meta(data.orig_ids, data.book)
        meta["typed"]["features"] = {
            str(t): int(np.asarray(x_t).shape[1]) for t, x_t in self.type_features.items()
        }
        if self.type_node_ids:
            meta.setdefault("names", {})["type_node_ids"] = {
                str(self.node_types[t]): f"{NAMES_DIR}/node_ids_type{t}.npy"
                for t in sorted(self.type_node_ids)
            }

    def typed_meta(self, orig_ids: np.ndarray, book: PartitionBook) -> dict[str, Any]:
        """``meta.json["typed"]``: the types and relations, and ``type_bounds[p][t]``, the first
        new id of node type ``t`` in part ``p`` (rows of a part ascend in original id, so its
        nodes come type by type)."""
        offsets = np.asarray(self.type_offsets, dtype=np.int64)
        bounds = []
        for p in range(book.num_parts):
            start, end = book.part_range(p)
            first = np.searchsorted(np.asarray(orig_ids[start:end]), offsets, side="left")
            bounds.append((first + start).tolist())
        return {
            "node_types": list(self.node_types),
            "type_offsets": offsets.tolist(),
            "relations": [list(r) for r in self.relations],
            "target_type": self.target_type,
            "type_bounds": bounds,
            "metrics": self.metrics,
        }


@dataclasses.dataclass(frozen=True)
class EdgeArraysSection(Section):
    """Per-edge values aligned with the graph's CSR, written with their edges into each part
    (``edge_<name>.npy`` in their own dtype, listed in ``meta.json["edge_arrays"]``; a loaded
    part's ``edge_arrays``)."""

    edge_arrays: dict[str, np.ndarray]

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        for name, values in self.edge_arrays.items():
            # a chunk of rows at a time: edge features may be a memory map larger than memory
            out.write_rows(f"{part.folder}/edge_{name}.npy", values, part.positions, values.dtype)

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        meta.setdefault("edge_arrays", {}).update(
            {name: str(np.asarray(v).dtype) for name, v in self.edge_arrays.items()}
        )


@dataclasses.dataclass(frozen=True)
class EventSection(EdgeArraysSection):
    """A temporal graph's part: per-edge event times and ids (:class:`EdgeArraysSection`), the
    event stream every part reads whole (``shared``: relative path -> array, e.g.
    ``events/src.npy``; :meth:`~shardgnn.partition.format.PartitionSet.shared_array` loads one)
    and ``meta.json["temporal"]``."""

    shared: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    temporal: dict[str, Any] = dataclasses.field(default_factory=dict)

    def write_shared(self, data: Relabelled, out: ArrayWriter) -> None:
        for rel, array in self.shared.items():
            out.write(rel, array)

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        super().describe(data, meta)
        meta["temporal"] = self.temporal


@dataclasses.dataclass(frozen=True)
class LinkSplitSection(Section):
    """The edge split (original ids) the written graph is the training graph of, in ``link/``
    (written before the directory appears, so it never lacks its split)."""

    split: LinkSplit

    def write_beside(self, root: Path) -> None:
        save_link_split(self.split, root / LINK_SPLIT_DIR)


@dataclasses.dataclass(frozen=True)
class TriplesSection(Section):
    """A knowledge graph's ``(head, relation, tail)`` triples by split (``train``, ``valid``,
    ``test``; original entity ids, the relations of the graph before its reverses), read whole by
    every rank: ``triples/<split>.npy``, checksummed, and ``meta.json["triples"]`` (each split's
    count and the number of relations they name;
    :meth:`~shardgnn.partition.format.PartitionSet.triples` loads them)."""

    triples: dict[str, np.ndarray]
    num_relations: int

    def write_shared(self, data: Relabelled, out: ArrayWriter) -> None:
        for split, rows in self.triples.items():
            out.write(f"{TRIPLES_DIR}/{split}.npy", np.asarray(rows, dtype=np.int64))

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        meta["triples"] = {
            "splits": {split: int(len(rows)) for split, rows in self.triples.items()},
            "num_relations": int(self.num_relations),
        }
