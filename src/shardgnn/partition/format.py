"""Partition directories, format ``shardgnn-partitions`` version 1: writer, reader, verifier.

Layout (``N`` nodes, ``P`` parts; "new" ids are the relabelled ids of
:mod:`shardgnn.partition.book`, part ``p`` owning ``[boundaries[p], boundaries[p + 1])``)::

    DIR/meta.json           format, version, graph name, the dataset's identity (spec and
                            fingerprint of the graph before relabelling), N, E, P, boundaries,
                            feature/label/split schema, partitioner + settings, metrics, per-part
                            counts, and the shape, dtype, size and SHA-256 of every array file
                            (paths relative to DIR)
    DIR/orig_ids.npy        int64 [N]      new id -> original id
    DIR/part-<p>/indptr.npy int64 [n_p+1]  in-edge CSR of the owned nodes (local rows)
                 indices.npy int32|int64 [e_p]  source of every in-edge, in NEW global ids
                 halo.npy   int64 [h_p]    sorted unique new ids of non-owned in-neighbours
                 x.npy      float32 [n_p, F]   (if the graph has features)
                 y.npy      int64 [n_p]    (if the graph has labels; -1 = unlabelled), float32
                                           [n_p, W] for multilabel and regression labels
                                           (NaN = unknown)
                 train_idx.npy, val_idx.npy, test_idx.npy  int64 sorted LOCAL row indices
                                           (0 <= i < n_p) of the owned nodes in each split, one
                                           file per split the graph defines
                 edge_weight.npy float32 [e_p] (if the graph has edge weights)
                 etype.npy  int8|16|32 [e_p]  relation of every in-edge (typed graphs)
                 x_type<t>.npy  float32 [n_p^t, F_t]  features of the part's type-t nodes
                                (typed graphs, types with features; in new-id order)
                 edge_<name>.npy  [e_p, ...]  more per-edge values (edge features: attr, float32
                                [e_p, D]; temporal graphs: times, eids; a vertex-cut's
                                placement: part, int32, the part computing every in-edge)
    DIR/names/node_ids.npy  int64|<U [N]   the user's id of every node by ORIGINAL id (graphs
                            built from ids of their own, e.g. by `shardgnn convert`)
    DIR/names/node_ids_type<t>.npy  int64|<U [N_t]  typed graphs: the user's ids of node type
                            ``t`` by original id within the type

``meta.json["names"]`` (absent when the graph has none) lists those files (``node_ids``; typed
graphs ``type_node_ids``, by type name) and ``class_names``, the name of every class 0..C-1;
``shardgnn infer`` keys its tables by them.

A typed graph (``meta.json["typed"]``: node types, their original id ranges, relations) keeps
each part's rows grouped by node type, because a part's rows are its original ids in ascending
order and every type is an original id range: ``typed.type_bounds[p]`` (``P x (T + 1)`` numbers)
are the first new id of each type in part ``p``, which is the whole (type, id) <-> (part, local
row) book.

Splits are stored as local index arrays (not masks) because they are what a trainer iterates
and they cost 8 bytes per split node instead of one byte per node; ``start + idx`` gives the new
global id. Rows keep the edge order of the source graph.

Writing is atomic: everything is built in a temporary sibling directory (``atomic_directory``)
and renamed into place, so ``DIR`` is either complete or absent. Checksums are computed while the
bytes are written. Reading checks the format and version, the presence and size of every file,
and (``verify=True``) every SHA-256; any mismatch raises :class:`DatasetError` naming the file.
No pickle anywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

import shardgnn
from shardgnn.atomic import atomic_directory, check_output_path, save_json
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import (
    LABEL_KINDS,
    Graph,
    index_dtype,
    label_kind_problem,
    label_problem,
)
from shardgnn.graph.identity import fingerprint
from shardgnn.graph.io import PARTITION_FORMAT, directory_format, load_npy, read_directory_meta
from shardgnn.partition.book import PartitionBook, TypedPartitionBook, inverse_permutation, relabel
from shardgnn.partition.methods import check_assignment
from shardgnn.partition.metrics import PartitionMetrics, compute_metrics
from shardgnn.partition.sections import (
    SPLITS,
    TRIPLES_DIR,
    ArrayWriter,
    PartRows,
    Relabelled,
    Section,
    standard_sections,
    type_features_name,
)

FORMAT = PARTITION_FORMAT  # the public name (shardgnn.partition.FORMAT)
VERSION = 1
_PART_ARRAYS = ("indptr", "indices", "halo", "x", "y", "edge_weight", "etype") + SPLITS
_HASH_BLOCK = 4 << 20
_REMAKE = "re-create the directory with `shardgnn partition ... --overwrite`"


def part_dir_name(part: int) -> str:
    return f"part-{part}"


# ------------------------------------------------------------------------------------------ writing
def _gather_rows(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(local_indptr, edge_positions)``: the CSR slices of ``rows`` concatenated, vectorised."""
    starts = np.asarray(indptr[rows], dtype=np.int64)
    lengths = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    local = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=local[1:])
    positions = np.repeat(starts - local[:-1], lengths) + np.arange(local[-1], dtype=np.int64)
    return local, positions


def is_partition_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a ``shardgnn-partitions`` ``meta.json``."""
    return directory_format(path) == FORMAT


def check_output_dir(out_dir: str | os.PathLike, overwrite: bool) -> Path:
    """Refuse an existing ``out_dir`` unless ``overwrite``; never replace a non-partition directory.

    Raises:
        ConfigError: naming the directory and the fix.
    """
    out_dir = Path(out_dir).expanduser()
    if out_dir.exists():
        if not overwrite:
            raise ConfigError(
                f"{out_dir} already exists; pass --overwrite (overwrite=True) to replace it, "
                "or choose another --out"
            )
        if not out_dir.is_dir() or (any(out_dir.iterdir()) and not is_partition_dir(out_dir)):
            raise ConfigError(
                f"{out_dir} exists and is not a shardgnn partition directory; refusing to replace "
                "it. Choose another --out"
            )
    check_output_path(out_dir, "--out", folder=True)  # before the partitioning, not after it
    return out_dir


def write_partitions(
    graph: Graph,
    assignment: np.ndarray,
    out_dir: str | os.PathLike,
    *,
    method: str,
    settings: dict[str, Any] | None = None,
    overwrite: bool = False,
    num_parts: int | None = None,
    metrics: PartitionMetrics | None = None,
    seconds: float | None = None,
    progress: bool = False,
    dataset_spec: str | None = None,
    dataset_fingerprint: dict[str, Any] | None = None,
    sections: Sequence[Section] = (),
) -> "PartitionSet":
    """Relabel ``graph`` by ``assignment`` and write the partition directory ``out_dir`` atomically.

    Args:
        graph: the global graph (original ids).
        assignment: integer ``[N]``, the part of every original node.
        out_dir: the directory to create.
        method, settings, seconds: recorded in ``meta.json["partitioner"]``.
        overwrite: replace an existing partition directory (never a directory of other content).
        num_parts: ``P`` (default ``max(assignment) + 1``).
        metrics: precomputed metrics of ``(graph, assignment)`` (computed when ``None``).
        progress: a tqdm bar over the parts on stderr (only when it is a terminal).
        dataset_spec: the canonical spec the graph was loaded from (recorded with the graph's
            fingerprint in ``meta.json["dataset"]``, so trainers can tell which graph this is).
        dataset_fingerprint: the fingerprint recorded instead of ``graph``'s own: a link-prediction
            partition holds the training graph (held-out edges removed) but names the dataset it
            was split from, which checkpoints and inference compare against.
        sections: what the data adds to the :func:`~shardgnn.partition.sections.standard_sections`
            every graph is written with (:mod:`shardgnn.partition.sections`: typed graphs,
            temporal events, a link split).

    Returns:
        The written directory, opened with :func:`read_partitions` (without re-hashing).

    Raises: ConfigError: ``out_dir`` exists and ``overwrite`` is false, or it is not a partition
        directory. DatasetError: an invalid assignment.
    """
    out_dir = check_output_dir(out_dir, overwrite)
    assignment = np.asarray(assignment)
    p_count = int(
        num_parts
        if num_parts is not None
        else (int(assignment.max()) + 1 if assignment.size else 1)
    )
    with warnings.catch_warnings():  # empty parts are the caller's decision (partition_graph warns)
        warnings.simplefilter("ignore")
        assignment = check_assignment(
            assignment,
            graph.num_nodes,
            p_count,
            source=f"assignment of {graph.name}",
            allow_empty_parts=True,
        )
    if metrics is None:
        metrics = compute_metrics(graph, assignment, p_count)
    rel = relabel(assignment, p_count)
    data = Relabelled(graph, rel.book, rel.orig_ids, rel.new_id_of_orig)
    every = (*standard_sections(graph), *sections)
    parts_info = []
    with atomic_directory(out_dir, overwrite=True) as tmp:
        out = ArrayWriter(tmp)
        out.write("orig_ids.npy", data.orig_ids)
        for section in every:
            section.write_shared(data, out)
        bar = tqdm(
            range(p_count),
            desc="write parts",
            unit="part",
            leave=False,
            file=sys.stderr,
            disable=not (progress and sys.stderr.isatty()),
        )
        for p in bar:
            start, end = data.book.part_range(p)
            rows = data.orig_ids[start:end]  # original ids owned by p, ascending
            local_indptr, positions = _gather_rows(graph.indptr, rows)
            folder = part_dir_name(p)
            (tmp / folder).mkdir()
            part = PartRows(p, start, end, folder, rows, local_indptr, positions)
            info = {"part": p, "start": start, "end": end, "num_nodes": end - start}
            for section in every:
                section.write_part(data, out, part, info)
            parts_info.append(info)
            del part, positions
        meta: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "graph": graph.name,
            "dataset": {
                "spec": dataset_spec,
                "name": graph.name,
                "fingerprint": dataset_fingerprint or fingerprint(graph),
            },
            "num_parts": p_count,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "boundaries": data.book.boundaries.tolist(),
        }
        for section in every:
            section.describe(data, meta)
        meta.update(
            partitioner={"method": method, "settings": settings or {}, "seconds": seconds},
            metrics=metrics.to_dict(),
            parts=parts_info,
            arrays=out.arrays,
            sha256=out.sha256,
            created_by=f"shardgnn {shardgnn.__version__}",
        )
        for section in every:
            section.write_beside(tmp)
        save_json(tmp / "meta.json", meta)
    return read_partitions(out_dir, verify=False)


# ------------------------------------------------------------------------------------------ reading
@dataclasses.dataclass(kw_only=True)
class LocalPartition:
    """One part, as a rank loads it (arrays are read-only memory maps when ``mmap=True``).

    Attributes:
        part, num_parts: this part's id and ``P``.
        start, end: the new global ids owned here are ``start <= id < end``.
        indptr: int64 ``[n_p + 1]`` local CSR rows (row ``i`` = new id ``start + i``).
        indices: int32/int64 ``[e_p]`` in-neighbours in NEW global ids.
        halo: int64 sorted unique non-owned in-neighbours (new global ids).
        x, y: features ``[n_p, F]`` float32 and labels ``[n_p]`` int64, or ``None``.
        train_idx, val_idx, test_idx: int64 sorted local row indices, or ``None``.
        edge_weight: float32 ``[e_p]`` or ``None``.
        num_classes: label classes of the graph.
        label_kind: what ``y`` holds (``class``: int64 ``[n_p]``; ``multilabel``,
            ``regression``: float32 ``[n_p, W]``, NaN = unknown).
        book: the global :class:`PartitionBook`.
    """

    part: int
    num_parts: int
    start: int
    end: int
    indptr: np.ndarray
    indices: np.ndarray
    halo: np.ndarray
    x: np.ndarray | None
    y: np.ndarray | None
    train_idx: np.ndarray | None
    val_idx: np.ndarray | None
    test_idx: np.ndarray | None
    edge_weight: np.ndarray | None
    num_classes: int
    book: PartitionBook
    label_kind: str = "class"
    etype: np.ndarray | None = None
    """int8/16/32 ``[e_p]`` relation of every in-edge (typed graphs), else ``None``"""
    edge_arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """more per-edge values aligned with ``indices`` (a temporal graph's ``times``, ``eids``)"""
    type_x: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    """typed graphs: node type index -> float32 ``[n_p^t, F_t]`` features of this part's nodes
    of that type (new-id order), for the types with features"""

    @property
    def num_nodes(self) -> int:
        return self.end - self.start

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def edge_attr(self) -> np.ndarray | None:
        """float32 ``[e_p, D]`` features of the in-edges (aligned with ``indices``), or None."""
        return self.edge_arrays.get("attr")

    @property
    def edge_dim(self) -> int:
        """Width of the edge features (0: none)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    @property
    def edge_part(self) -> np.ndarray | None:
        """int32 ``[e_p]`` the part computing every in-edge (a vertex-cut partition, whose
        nodes' owners are their masters: :mod:`shardgnn.partition.vertexcut`), or None."""
        return self.edge_arrays.get("part")

    def global_ids(self) -> np.ndarray:
        """int64 new global ids of the owned nodes (``start .. end - 1``)."""
        return np.arange(self.start, self.end, dtype=np.int64)


@dataclasses.dataclass(kw_only=True)
class PartitionSet:
    """An opened partition directory: its metadata and partition book.

    Attributes:
        path: the directory.
        meta: the parsed ``meta.json``.
        book: the :class:`PartitionBook`.
        orig_ids: int64 ``[N]`` new id -> original id (memory-mapped).
    """

    path: Path
    meta: dict[str, Any]
    book: PartitionBook
    orig_ids: np.ndarray

    @property
    def num_parts(self) -> int:
        return self.book.num_parts

    @property
    def num_nodes(self) -> int:
        return self.book.num_nodes

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def method(self) -> str:
        return str(self.meta["partitioner"]["method"])

    @property
    def dataset(self) -> dict[str, Any]:
        """``{spec, name, fingerprint}`` of the graph this was cut from (directories written by
        shardgnn before 0.2 record only the name)."""
        recorded = self.meta.get("dataset")
        return (
            dict(recorded)
            if recorded
            else {"spec": None, "name": str(self.meta.get("graph")), "fingerprint": None}
        )

    @property
    def metrics(self) -> PartitionMetrics:
        return PartitionMetrics.from_dict(self.meta["metrics"])

    @property
    def kind(self) -> str:
        """The kind of graph the parts hold: ``homogeneous``, ``typed`` or ``temporal``
        (:func:`partition_kind`)."""
        return partition_kind(self.meta)

    @property
    def typed_book(self) -> TypedPartitionBook:
        """The (type, id) book of the parts: a typed graph's types and relations, a homogeneous
        graph's one node type and one relation (:meth:`TypedPartitionBook.one_type`)."""
        typed = self.meta.get("typed")
        if typed:
            return TypedPartitionBook(typed, self.book.boundaries)
        features = self.meta.get("features") or {}
        return TypedPartitionBook.one_type(self.book.boundaries, int(features.get("dim", 0)))

    @property
    def places_edges(self) -> bool:
        """Whether a vertex-cut partitioner placed every edge (each part's ``edge_part.npy``;
        ``--spmm vertex-cut`` follows it, everything else reads the nodes' owners only)."""
        return "part" in (self.meta.get("edge_arrays") or {})

    def shared_array(self, rel: str, *, mmap: bool = True) -> np.ndarray:
        """An array every part reads whole (a temporal graph's event stream,
        :class:`~shardgnn.partition.sections.EventSection`), checked against meta.json."""
        if rel not in self.meta["arrays"]:
            raise DatasetError(f"holds no {rel}", self.path, _REMAKE)
        return _load_array(self.path, self.meta, rel, mmap)

    def triples(self) -> dict[str, np.ndarray]:
        """A knowledge graph's triples by split (``[T, 3]`` int64 rows of head, relation, tail in
        original ids; :class:`~shardgnn.partition.sections.TriplesSection`), empty when the
        directory holds none."""
        splits = (self.meta.get("triples") or {}).get("splits", {})
        return {
            split: np.asarray(self.shared_array(f"{TRIPLES_DIR}/{split}.npy", mmap=False))
            for split in splits
        }

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """The name of every class 0..C-1 (a node table's label values), or ``None``."""
        names = (self.meta.get("names") or {}).get("class_names")
        return None if names is None else tuple(names)

    def node_ids(self, node_type: str | None = None) -> np.ndarray | None:
        """The user's id of every node by original id (int64 or text; a typed graph's
        ``node_type``: by original id within the type), or ``None`` when the graph has none (its
        ids are 0..N-1)."""
        names = self.meta.get("names") or {}
        if node_type is None:
            rel, count = names.get("node_ids"), self.num_nodes
        else:
            hetero = self.meta.get("typed") or {}
            rel = (names.get("type_node_ids") or {}).get(node_type)
            t = list(hetero.get("node_types", [])).index(node_type) if rel else 0
            count = int(hetero["type_offsets"][t + 1] - hetero["type_offsets"][t]) if rel else 0
        if rel is None:
            return None
        ids = self.shared_array(rel)
        if ids.shape != (count,) or ids.dtype.kind not in "iuU":
            raise DatasetError(
                f"holds {ids.dtype} {list(ids.shape)}, not one integer or text id per node "
                f"({count})",
                self.path / rel,
                _REMAKE,
            )
        return ids

    def new_id_of_orig(self) -> np.ndarray:
        """int64 ``[N]`` original id -> new id (computed, O(N))."""
        return inverse_permutation(np.asarray(self.orig_ids))

    def in_degrees_by_orig_id(self) -> np.ndarray:
        """int64 ``[N]``: every node's in-degree in the partitioned graph (self-loops included),
        by original id, read from every part's row pointers."""
        degree_new = np.concatenate(
            [np.diff(np.asarray(self.load_part(p).indptr)) for p in range(self.num_parts)]
        ).astype(np.int64)
        degree_orig = np.empty_like(degree_new)
        degree_orig[np.asarray(self.orig_ids)] = degree_new
        return degree_orig

    def global_split(self, split: str) -> np.ndarray:
        """Every node of ``split`` (``train``, ``val`` or ``test``) in new global ids, ascending,
        read from every part's small index file."""
        ids = []
        for p in range(self.num_parts):
            local = getattr(self.load_part(p, mmap=True, verify=False), f"{split}_idx")
            if local is not None:
                ids.append(np.asarray(local, dtype=np.int64) + int(self.book.part_range(p)[0]))
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)

    def load_part(self, part: int, *, mmap: bool = True, verify: bool = False) -> LocalPartition:
        """Load part ``part`` (``verify`` re-hashes its files; :func:`read_partitions` may have
        already)."""
        return _load_part(self, part, mmap=mmap, verify=verify)

    def reassemble(self) -> Graph:
        """The global graph in NEW ids, concatenated from every part."""
        return _reassemble(self)


def partition_kind(meta: dict[str, Any]) -> str:
    """The kind of graph a partition directory's ``meta.json`` records: ``temporal`` (an event
    stream beside the parts), ``typed`` (node types and relations), ``graphset`` (many graphs,
    whole graphs per part) or ``homogeneous``. The one place that tells them apart by what
    ``meta.json`` holds."""
    if meta.get("graphset"):
        return "graphset"
    if meta.get("temporal"):
        return "temporal"
    return "typed" if meta.get("typed") else "homogeneous"


def partition_labelled(meta: dict[str, Any]) -> bool:
    """Whether a partition directory's ``meta.json`` records labels: its nodes' (a temporal
    graph: its events', the labels of their sources)."""
    if partition_kind(meta) == "temporal":
        return bool(meta["temporal"].get("labelled", False))
    return meta.get("labels") is not None


def _meta_error(meta_path: Path, problem: str) -> DatasetError:
    return DatasetError(problem, meta_path, _REMAKE)


def read_partition_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A partition directory's ``meta.json``, its format and version checked (no array is
    opened)."""
    return _read_meta(Path(path).expanduser())


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / "meta.json"
    meta = read_directory_meta(path, FORMAT, VERSION, _REMAKE)
    if "hetero" in meta and "typed" not in meta:
        # written before typed graphs had one name across packages: same content
        meta["typed"] = meta.pop("hetero")
    required = (
        "num_parts",
        "num_nodes",
        "num_edges",
        "boundaries",
        "arrays",
        "sha256",
        "parts",
        "metrics",
        "partitioner",
    )
    missing = [key for key in required if key not in meta]
    if missing:
        raise _meta_error(meta_path, f"meta.json lacks the key(s) {', '.join(missing)}")
    problem = _schema_problem(meta)
    if problem:
        raise _meta_error(meta_path, f"meta.json is malformed: {problem}")
    return meta


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62


def _schema_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with the types in ``meta`` (None: nothing). Values are checked later."""
    for key in ("num_parts", "num_nodes", "num_edges"):
        if not _is_count(meta[key]):
            return f"{key} must be a non-negative integer, not {meta[key]!r}"
    if not isinstance(meta["boundaries"], list) or not all(
        _is_count(b) for b in meta["boundaries"]
    ):
        return "boundaries must be a list of non-negative integers"
    arrays = meta["arrays"]
    if not isinstance(arrays, dict):
        return "arrays must be an object"
    for rel, spec in arrays.items():
        if not (
            isinstance(spec, dict)
            and isinstance(spec.get("shape"), list)
            and all(_is_count(d) for d in spec["shape"])
            and isinstance(spec.get("dtype"), str)
            and _is_count(spec.get("bytes"))
        ):
            return (
                f"arrays[{rel!r}] must hold shape (list of sizes), dtype (string) and bytes "
                "(integer)"
            )
    if not isinstance(meta["sha256"], dict) or not all(
        isinstance(v, str) for v in meta["sha256"].values()
    ):
        return "sha256 must map file names to hex digests"
    parts = meta["parts"]
    if not (
        isinstance(parts, list)
        and len(parts) == meta["num_parts"]
        and all(isinstance(p, dict) and _is_count(p.get("num_edges")) for p in parts)
    ):
        return "parts must list one object with num_edges per part"
    if not isinstance(meta["metrics"], dict) or not isinstance(meta["partitioner"], dict):
        return "metrics and partitioner must be objects"
    labels = meta.get("labels")
    if labels is not None and not (
        isinstance(labels, dict)
        and _is_count(labels.get("num_classes", 0))
        and isinstance(labels.get("kind", "class"), str)
        and label_kind_problem(labels.get("kind", "class")) is None
        and (labels.get("kind", "class") == "class" or _is_count(labels.get("width")))
    ):
        return (
            "labels must be an object whose num_classes is a non-negative integer, kind one of "
            f"{', '.join(LABEL_KINDS)} or a multitask: spec, and width (for kinds other than "
            "class) a count"
        )
    if meta.get("names") is not None:
        problem = _names_problem(meta["names"], arrays)
        if problem:
            return problem
    dataset = meta.get("dataset")
    if dataset is not None and not (
        isinstance(dataset, dict)
        and isinstance(dataset.get("spec"), (str, type(None)))
        and isinstance(dataset.get("fingerprint"), (dict, type(None)))
    ):
        return (
            "dataset must be an object with a spec (string or null) and a fingerprint (object or "
            "null)"
        )
    return None


def _names_problem(names: Any, arrays: dict[str, Any]) -> str | None:
    """What is wrong with ``meta.json["names"]`` (None: nothing)."""
    if not isinstance(names, dict):
        return "names must be an object"
    typed = names.get("type_node_ids") or {}
    if not isinstance(typed, dict):
        return "names.type_node_ids must map node types to array files"
    for rel in (names.get("node_ids"), *typed.values()):
        if rel is not None and not (isinstance(rel, str) and rel in arrays):
            return f"names lists {rel!r}, which is not a listed array"
    classes = names.get("class_names")
    if classes is not None and not (
        isinstance(classes, list) and all(isinstance(c, str) for c in classes)
    ):
        return "names.class_names must be a list of strings"
    return None


def _sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            sha.update(block)
    return sha.hexdigest()


def _check_files(path: Path, meta: dict[str, Any], rels: Iterable[str], verify: bool) -> None:
    """Presence, size and (``verify``) SHA-256 of the listed array files."""
    for rel in rels:
        spec = meta["arrays"].get(rel)
        digest = meta["sha256"].get(rel)
        if spec is None or digest is None:
            raise _meta_error(path / "meta.json", f"meta.json records no shape/checksum for {rel}")
        file = path / rel
        if not file.is_file():
            raise DatasetError("file is missing", file, _REMAKE)
        size = file.stat().st_size
        if size != spec["bytes"]:
            raise DatasetError(
                f"file is {size} bytes but meta.json records {spec['bytes']}: it is truncated or "
                "was replaced",
                file,
                _REMAKE,
            )
        if verify and _sha256_file(file) != digest:
            raise DatasetError(
                "SHA-256 checksum mismatch: the file is corrupt (its content changed after it was "
                "written)",
                file,
                _REMAKE,
            )


def _load_array(path: Path, meta: dict[str, Any], rel: str, mmap: bool) -> np.ndarray:
    spec = meta["arrays"][rel]
    array = load_npy(path / rel, mmap=mmap)
    if list(array.shape) != spec["shape"] or str(array.dtype) != spec["dtype"]:
        raise DatasetError(
            f"holds {array.dtype} {list(array.shape)}, meta.json records {spec['dtype']} "
            f"{spec['shape']}",
            path / rel,
            _REMAKE,
        )
    return array


def read_partitions(
    path: str | os.PathLike, verify: bool = True, *, progress: bool = False
) -> PartitionSet:
    """Open a partition directory: check format/version and every file (size; SHA-256 if
    ``verify``).

    Raises:
        DatasetError: not a partition directory, an unsupported version, or a missing, truncated,
        corrupt or mismatched file (the message names it and the fix).
    """
    path = Path(path).expanduser()
    meta = _read_meta(path)
    rels = list(meta["arrays"])
    if verify:
        rels = tqdm(
            rels,
            desc="verify checksums",
            unit="file",
            leave=False,
            file=sys.stderr,
            disable=not (progress and sys.stderr.isatty()),
        )
    _check_files(path, meta, rels, verify)
    try:
        book = PartitionBook(np.asarray(meta["boundaries"], dtype=np.int64))
    except (ValueError, TypeError) as exc:
        raise _meta_error(path / "meta.json", f"bad boundaries ({exc})") from None
    if book.num_parts != meta["num_parts"] or book.num_nodes != meta["num_nodes"]:
        raise _meta_error(
            path / "meta.json",
            f"boundaries describe {book.num_parts} parts / {book.num_nodes} nodes "
            f"but meta.json says {meta['num_parts']} / {meta['num_nodes']}",
        )
    if "orig_ids.npy" not in meta["arrays"]:
        raise _meta_error(path / "meta.json", "meta.json lists no orig_ids.npy")
    orig_ids = _load_array(path, meta, "orig_ids.npy", mmap=True)
    if orig_ids.shape != (book.num_nodes,):
        raise DatasetError(
            f"has shape {orig_ids.shape}, expected ({book.num_nodes},)",
            path / "orig_ids.npy",
            _REMAKE,
        )
    return PartitionSet(path=path, meta=meta, book=book, orig_ids=orig_ids)


def _load_part(pset: PartitionSet, part: int, *, mmap: bool, verify: bool) -> LocalPartition:
    if not 0 <= part < pset.num_parts:
        raise ConfigError(
            f"part {part} does not exist: {pset.path} has parts 0..{pset.num_parts - 1}"
        )
    folder = part_dir_name(part)
    meta, path = pset.meta, pset.path
    typed = {
        type_features_name(int(t)): int(t) for t in (meta.get("typed") or {}).get("features", {})
    }
    per_edge = {f"edge_{name}": name for name in meta.get("edge_arrays") or {}}
    rels = {
        name: f"{folder}/{name}.npy"
        for name in (*_PART_ARRAYS, *typed, *per_edge)
        if f"{folder}/{name}.npy" in meta["arrays"]
    }
    for name in ("indptr", "indices", "halo"):
        if name not in rels:
            raise _meta_error(path / "meta.json", f"meta.json lists no {folder}/{name}.npy")
    _check_files(path, meta, rels.values(), verify)
    arrays = {name: _load_array(path, meta, rel, mmap) for name, rel in rels.items()}
    start, end = pset.book.part_range(part)
    if arrays["indptr"].shape != (end - start + 1,):
        raise DatasetError(
            f"has {arrays['indptr'].shape[0]} entries, expected {end - start + 1} (part owns "
            f"{end - start} nodes)",
            path / rels["indptr"],
            _REMAKE,
        )
    _check_part_structure(path, rels, arrays, end - start, pset.book.num_nodes)
    for name in per_edge:
        if name in arrays and arrays[name].shape[0] != arrays["indices"].shape[0]:
            raise DatasetError(
                f"has {arrays[name].shape[0]} rows, expected {arrays['indices'].shape[0]} (one "
                "per edge)",
                path / rels[name],
                _REMAKE,
            )
    placement = arrays.get("edge_part")
    if (
        placement is not None
        and placement.size
        and (int(placement.min()) < 0 or int(placement.max()) >= pset.num_parts)
    ):
        raise DatasetError(
            f"holds parts outside [0, {pset.num_parts})",
            path / rels["edge_part"],
            "the file is corrupt; run `shardgnn verify` on the directory and " + _REMAKE,
        )
    for name, t in typed.items():
        bounds = meta["typed"]["type_bounds"][part]
        expected = int(bounds[t + 1]) - int(bounds[t])
        if name in arrays and arrays[name].shape[0] != expected:
            raise DatasetError(
                f"has {arrays[name].shape[0]} rows, expected {expected} (the part's nodes of "
                f"type {meta['hetero']['node_types'][t]!r})",
                path / rels[name],
                _REMAKE,
            )
    labels = meta.get("labels") or {}
    return LocalPartition(
        part=part,
        num_parts=pset.num_parts,
        start=start,
        end=end,
        indptr=arrays["indptr"],
        indices=arrays["indices"],
        halo=arrays["halo"],
        x=arrays.get("x"),
        y=arrays.get("y"),
        train_idx=arrays.get("train_idx"),
        val_idx=arrays.get("val_idx"),
        test_idx=arrays.get("test_idx"),
        edge_weight=arrays.get("edge_weight"),
        num_classes=int(labels.get("num_classes", 0)),
        label_kind=labels.get("kind", "class"),
        book=pset.book,
        etype=arrays.get("etype"),
        type_x={t: arrays[name] for name, t in typed.items() if name in arrays},
        edge_arrays={short: arrays[name] for name, short in per_edge.items() if name in arrays},
    )


def _check_part_structure(
    path: Path, rels: dict[str, str], arrays: dict[str, np.ndarray], num_rows: int, num_nodes: int
) -> None:
    """Cheap structural invariants, checked on every load (also without SHA-256 verification), so
    a same-size corruption cannot become a silently wrong graph: CSR offsets, id ranges, split
    ranges and row counts. O(part size), no hashing."""

    def bad(name: str, problem: str) -> DatasetError:
        return DatasetError(
            problem,
            path / rels[name],
            "the file is corrupt; run `shardgnn verify` on the directory and " + _REMAKE,
        )

    indptr, indices = arrays["indptr"], arrays["indices"]
    if (
        indptr.ndim != 1
        or indptr.shape[0] < 1
        or indptr[0] != 0
        or indptr[-1] != indices.shape[0]
        or (indptr.shape[0] > 1 and np.any(np.diff(indptr) < 0))
    ):
        raise bad(
            "indptr",
            f"is not a CSR offset array for {indices.shape[0]} edges (must start at 0, never "
            f"decrease and end at the edge count)",
        )
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= num_nodes):
        raise bad("indices", f"holds node ids outside [0, {num_nodes})")
    halo = arrays["halo"]
    if halo.size and (
        int(halo.min()) < 0 or int(halo.max()) >= num_nodes or np.any(np.diff(halo) <= 0)
    ):
        raise bad("halo", f"is not a sorted list of unique node ids in [0, {num_nodes})")
    for name in ("x", "y", "edge_weight", "etype"):
        if name in arrays:
            expected = indices.shape[0] if name in ("edge_weight", "etype") else num_rows
            if arrays[name].shape[0] != expected:
                raise bad(name, f"has {arrays[name].shape[0]} rows, expected {expected}")
    for name in SPLITS:
        split = arrays.get(name)
        if (
            split is not None
            and split.size
            and (int(split.min()) < 0 or int(split.max()) >= num_rows)
        ):
            raise bad(name, f"holds local rows outside [0, {num_rows})")


def load_part(
    path: str | os.PathLike, part: int, mmap: bool = True, *, verify: bool = True
) -> LocalPartition:
    """Load one part of a partition directory (what a rank does at start-up).

    Only this part's files are checked (size always; SHA-256 when ``verify``), so start-up cost
    is proportional to the part, not the graph.

    Raises:
        DatasetError: see :func:`read_partitions`. ConfigError: ``part`` is out of range.
    """
    path = Path(path).expanduser()
    meta = _read_meta(path)
    try:
        book = PartitionBook(np.asarray(meta["boundaries"], dtype=np.int64))
    except (ValueError, TypeError) as exc:
        raise _meta_error(path / "meta.json", f"bad boundaries ({exc})") from None
    pset = PartitionSet(path=path, meta=meta, book=book, orig_ids=np.zeros(0, dtype=np.int64))
    return _load_part(pset, part, mmap=mmap, verify=verify)


def _reassemble(pset: PartitionSet) -> Graph:
    parts = [pset.load_part(p, mmap=True) for p in range(pset.num_parts)]
    meta = pset.meta
    n = pset.num_nodes
    indptr = np.zeros(n + 1, dtype=np.int64)
    offsets = np.cumsum([0] + [lp.num_edges for lp in parts])
    for lp, off in zip(parts, offsets[:-1]):
        indptr[lp.start + 1 : lp.end + 1] = np.asarray(lp.indptr[1:]) + off
    indices = (
        np.concatenate([np.asarray(lp.indices) for lp in parts]) if parts else np.zeros(0, np.int32)
    )
    indices = indices.astype(index_dtype(n), copy=False)
    fields: dict[str, Any] = {}
    if meta.get("features") is not None:
        fields["x"] = np.concatenate([np.asarray(lp.x) for lp in parts])
    if meta.get("labels") is not None:
        fields["y"] = np.concatenate([np.asarray(lp.y) for lp in parts])
    if meta.get("edge_weight"):
        fields["edge_weight"] = np.concatenate([np.asarray(lp.edge_weight) for lp in parts])
    if "attr" in (meta.get("edge_arrays") or {}):
        fields["edge_attr"] = np.concatenate([np.asarray(lp.edge_attr) for lp in parts])
    for key in SPLITS:
        if (meta.get("splits") or {}).get(key[:-4]) is not None:
            fields[key] = np.concatenate(
                [np.asarray(getattr(lp, key)) + lp.start for lp in parts]
            ).astype(np.int64)
    labels = meta.get("labels") or {}
    return Graph(
        indptr=indptr,
        indices=indices,
        num_classes=int(labels.get("num_classes", 0)),
        label_kind=labels.get("kind", "class"),
        name=str(meta.get("graph", pset.path.name)),
        **fields,
    )


def reassemble(path: str | os.PathLike, *, verify: bool = True) -> Graph:
    """The global graph in NEW ids (``orig_ids[new]`` maps back), rebuilt from the parts."""
    return read_partitions(path, verify=verify).reassemble()


# ---------------------------------------------------------------------------------------- verifying
def verify_partitions(
    path: str | os.PathLike, *, checksums: bool = True, progress: bool = False
) -> PartitionMetrics:
    """Check everything about a partition directory and return its recomputed metrics.

    Checks: format, version, files, sizes and (``checksums``) SHA-256; ``orig_ids`` is a
    permutation; per part: CSR structure, neighbour ids in range, halo = sorted unique remote
    neighbours, feature/label/split shapes and ranges, counts equal to ``meta.json``; finally the
    metrics recomputed from the reassembled graph equal the recorded ones.

    Raises:
        DatasetError: the first violated invariant, naming the file and the fix.
    """
    pset = read_partitions(path, verify=checksums, progress=progress)
    meta, root, n = pset.meta, pset.path, pset.num_nodes

    def fail(rel: str, problem: str) -> None:
        raise DatasetError(problem, root / rel, _REMAKE)

    orig = np.asarray(pset.orig_ids)
    if orig.size and (
        orig.min() < 0 or orig.max() >= n or np.bincount(orig, minlength=n).max() != 1
    ):
        fail("orig_ids.npy", "is not a permutation of 0..N-1 (a node is missing or owned twice)")
    features, labels = meta.get("features"), meta.get("labels")
    for node_type in (None, *((meta.get("names") or {}).get("type_node_ids") or {})):
        pset.node_ids(node_type)  # one id per node (raises naming the file)
    num_classes = (labels or {}).get("num_classes", 0)
    if pset.class_names is not None and len(pset.class_names) != num_classes:
        fail("meta.json", f"names {len(pset.class_names)} classes; the labels have {num_classes}")
    for p in range(pset.num_parts):
        lp = pset.load_part(p, mmap=True)
        folder = part_dir_name(p)
        indptr, indices = np.asarray(lp.indptr), np.asarray(lp.indices)
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.shape[0]:
            fail(
                f"{folder}/indptr.npy",
                "is not a valid CSR row pointer (must start at 0, never decrease and end "
                f"at the {indices.shape[0]} edges of indices.npy)",
            )
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            fail(f"{folder}/indices.npy", f"holds neighbour ids outside [0, {n})")
        remote = indices[(indices < lp.start) | (indices >= lp.end)]
        if not np.array_equal(np.unique(remote), np.asarray(lp.halo)):
            fail(f"{folder}/halo.npy", "is not the sorted unique set of non-owned in-neighbours")
        if features is not None and (lp.x is None or lp.x.shape != (lp.num_nodes, features["dim"])):
            fail(f"{folder}/x.npy", f"must have shape ({lp.num_nodes}, {features['dim']})")
        if labels is not None:
            y = None if lp.y is None else np.asarray(lp.y)
            kind = labels.get("kind", "class")
            problem = (
                ("is missing", "")
                if y is None
                else label_problem(y, kind, labels["num_classes"], lp.num_nodes)
            )
            if problem is None and kind != "class" and y.shape[1] != labels["width"]:
                problem = (f"has {y.shape[1]} columns; meta.json says {labels['width']}", "")
            if problem is not None:
                fail(f"{folder}/y.npy", f"{problem[0]} ({kind} labels of {lp.num_nodes} nodes)")
        for key in SPLITS:
            idx = getattr(lp, key)
            if idx is None:
                continue
            idx = np.asarray(idx)
            if idx.size and (
                idx.min() < 0 or idx.max() >= lp.num_nodes or np.any(np.diff(idx) <= 0)
            ):
                fail(
                    f"{folder}/{key}.npy",
                    f"must hold sorted unique local rows in [0, {lp.num_nodes})",
                )
        info = meta["parts"][p]
        if (info["num_nodes"], info["num_edges"], info["num_halo"]) != (
            lp.num_nodes,
            lp.num_edges,
            lp.halo.shape[0],
        ):
            fail("meta.json", f"part {p} counts in meta.json disagree with its arrays")
    graph = pset.reassemble()
    if graph.num_edges != pset.num_edges:
        fail(
            "meta.json", f"the parts hold {graph.num_edges} edges, meta.json says {pset.num_edges}"
        )
    recomputed = compute_metrics(
        graph, pset.book.owner(np.arange(n, dtype=np.int64)), pset.num_parts
    )
    stored = pset.metrics
    for field in (
        "cut_edges",
        "comm_volume",
        "max_send_volume",
        "send_volume",
        "recv_volume",
        "part_nodes",
        "part_edges",
        "part_train",
    ):
        if getattr(recomputed, field) != getattr(stored, field):
            fail(
                "meta.json",
                f"metric {field} recorded as {getattr(stored, field)!r} but the arrays give "
                f"{getattr(recomputed, field)!r}",
            )
    halo_sizes = [info["num_halo"] for info in meta["parts"]]
    if halo_sizes != recomputed.recv_volume:
        fail("meta.json", "halo sizes disagree with the receive volumes")
    return recomputed


__all__ = [
    "FORMAT",
    "VERSION",
    "LocalPartition",
    "PartitionSet",
    "write_partitions",
    "read_partitions",
    "load_part",
    "reassemble",
    "verify_partitions",
    "part_dir_name",
    "is_partition_dir",
    "check_output_dir",
]
