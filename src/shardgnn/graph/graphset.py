"""A set of many small graphs with one label each (graph classification and regression), or
with a class or real targets per edge (edge classification and regression over many events, as
Exa.TrkX's track graphs).

Stored as one disjoint union: an in-edge CSR over all nodes (``indptr``, ``indices``: graph
``g`` owns nodes ``graph_ptr[g]:graph_ptr[g + 1]`` and only edges among them), node features
``x`` and edge features ``edge_attr`` (in CSR order, so they follow their edges wherever the CSR
goes), the label of every graph ``y`` and the splits as graph ids. The union is a plain
:class:`~shardgnn.graph.csr.Graph` (:meth:`GraphSet.union`), so partitioning writes it with the
standard sections, whole graphs per part (:mod:`shardgnn.partition.sections`,
``GraphSetSection``).

On disk (:func:`save_graphset`, :func:`load_graphset`): ``meta.json`` (format
``shardgnn-graph-set``) and one ``.npy`` per array, read with ``allow_pickle=False``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_directory, save_json
from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph, concat_ranges, edge_id_arrays, pyg_edge_index
from shardgnn.graph.io import GRAPH_SET_FORMAT
from shardgnn.graph.split import FINITE_FIX, all_finite, check_finite_features

GRAPH_SET_VERSION = 1
GRAPH_LABEL_KINDS = ("class", "regression")
"""what one graph's label is: a class id (int64 ``[G]``) or real targets (float32 ``[G, T]``)"""
_FINITE_ARRAYS = (("x", "feature"), ("edge_attr", "edge feature"))
"""the arrays of real numbers, refused with NaN or infinity when saved and when loaded"""
_ARRAYS = (
    "indptr", "indices", "x", "edge_attr", "edge_y", "graph_ptr", "y", "train_idx", "val_idx",
    "test_idx",
)  # fmt: skip
_OPTIONAL = ("edge_attr", "edge_y", "y")


@dataclasses.dataclass
class GraphSet:
    """Many small graphs as one disjoint union, one label per graph.

    Attributes:
        indptr: int64 ``[N + 1]`` in-edge CSR row pointers of the union.
        indices: int64 ``[E]`` source node of every in-edge (within the same graph).
        x: float32 ``[N, F]`` node features.
        edge_attr: float32 ``[E, D]`` edge features in CSR order, or ``None``.
        graph_ptr: int64 ``[G + 1]`` graph ``g`` owns nodes ``graph_ptr[g]:graph_ptr[g+1]``.
        y: int64 ``[G]`` class ids, or float32 ``[G, T]`` real targets (NaN: unknown), or None
            (a set with edge labels only).
        edge_y: int64 ``[E]`` the class of every edge (CSR order), or float32 ``[E, T]`` its real
            targets (NaN: unknown), or None.
        edge_classes: edge label classes (0 without edge labels, or with real targets).
        edge_label_kind: ``class`` or ``regression`` (what ``edge_y`` holds).
        label_kind: ``class`` or ``regression``.
        num_classes: classes (0 for regression).
        train_idx, val_idx, test_idx: int64 graph ids of each split.
        name: a human-readable name.
        graph_ids: the original ids of the graphs (one part of a partitioned set), or None.
    """

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray
    graph_ptr: np.ndarray
    y: np.ndarray | None
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    edge_attr: np.ndarray | None = None
    edge_y: np.ndarray | None = None
    edge_classes: int = 0
    edge_label_kind: str = "class"
    label_kind: str = "class"
    num_classes: int = 0
    name: str = "graphs"
    graph_ids: np.ndarray | None = None
    """int64 ``[G]`` the original id of every graph (one part of a partitioned set), or None:
    they are 0..G-1"""
    edge_ids: np.ndarray | None = None
    """int64 ``[E]`` each edge's position in the whole set's CSR (one part of a partitioned
    set), or None: they are 0..E-1"""

    @property
    def num_graphs(self) -> int:
        return int(self.graph_ptr.shape[0] - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def edge_dim(self) -> int:
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    @property
    def out_width(self) -> int:
        """Model outputs per graph: classes, or regression targets (0 without graph labels)."""
        if self.y is None:
            return 0
        return self.num_classes if self.label_kind == "class" else int(self.y.shape[1])

    @property
    def edge_out_width(self) -> int:
        """Model outputs per edge: classes, or regression targets (0 without edge labels)."""
        if self.edge_y is None:
            return 0
        return self.edge_classes if self.edge_label_kind == "class" else int(self.edge_y.shape[1])

    def edges_of(self, graph_ids: np.ndarray) -> np.ndarray:
        """int64: the CSR positions of the edges of graphs ``graph_ids``, graph after graph."""
        ids = np.asarray(graph_ids, dtype=np.int64)
        ptr = np.asarray(self.graph_ptr)
        starts = np.asarray(self.indptr)[ptr[ids]]
        return concat_ranges(starts, np.asarray(self.indptr)[ptr[ids + 1]] - starts)

    def union(self) -> Graph:
        """The disjoint union as a :class:`Graph` (no node labels; the graphs' labels and splits
        travel beside it)."""
        return Graph(indptr=self.indptr, indices=self.indices, x=self.x, name=self.name)

    def graph_of_node(self) -> np.ndarray:
        """int64 ``[N]``: the graph every node belongs to."""
        sizes = np.diff(self.graph_ptr)
        return np.repeat(np.arange(self.num_graphs, dtype=np.int64), sizes)

    def fingerprint(self) -> dict[str, Any]:
        """The set's identity: sizes and a SHA-256 over structure, graph bounds and labels."""
        sha = hashlib.sha256()
        for array in (self.indptr, self.indices, self.graph_ptr, self.y, self.edge_y):
            if array is not None:
                sha.update(np.ascontiguousarray(array).tobytes())
        return {
            "num_graphs": self.num_graphs,
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "num_features": self.num_features,
            "num_classes": int(self.num_classes),
            "sha256": sha.hexdigest(),
        }

    def validate(self, source: str | None = None) -> "GraphSet":
        """Check every invariant; raise :class:`DatasetError` naming ``source``."""
        where = source or self.name
        n, e = self.num_nodes, self.num_edges

        def fail(problem: str, fix: str = "rebuild the graph set") -> None:
            raise DatasetError(problem, where, fix)

        ptr = self.graph_ptr
        if ptr.ndim != 1 or ptr.shape[0] < 2 or ptr[0] != 0 or ptr[-1] != n:
            fail(f"graph_ptr must run from 0 to the {n} nodes, one entry per graph boundary")
        if np.any(np.diff(ptr) < 1):
            fail("every graph needs at least one node (graph_ptr must increase strictly)")
        if self.indptr[0] != 0 or self.indptr[-1] != e or np.any(np.diff(self.indptr) < 0):
            fail("indptr must be non-decreasing from 0 to the number of edges")
        if e and (self.indices.min() < 0 or self.indices.max() >= n):
            fail(f"edge sources must lie in [0, {n})")
        graph_of = self.graph_of_node()
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
        if e and np.any(graph_of[np.asarray(self.indices)] != graph_of[dst]):
            fail("an edge joins two different graphs: edges must stay inside their graph")
        if self.x.ndim != 2 or self.x.shape[0] != n:
            fail(f"x must be [{n}, F], got {list(self.x.shape)}")
        if self.edge_attr is not None and (
            self.edge_attr.ndim != 2 or self.edge_attr.shape[0] != e
        ):
            fail(f"edge_attr must be [{e}, D], got {list(self.edge_attr.shape)}")
        for key, _ in _FINITE_ARRAYS:
            if getattr(self, key) is not None and not all_finite(getattr(self, key)):
                fail(f"{key} holds NaN or infinite values", "replace them before building the set")
        g = self.num_graphs
        if self.y is None and self.edge_y is None:
            fail("the set has neither graph labels (y) nor edge labels (edge_y)")
        for what, labels, kind, count, classes in (
            ("edge", self.edge_y, self.edge_label_kind, e, self.edge_classes),
            ("graph", self.y, self.label_kind, g, self.num_classes),
        ):
            if kind not in GRAPH_LABEL_KINDS:
                fail(f"{what} label kind {kind!r} is not one of {GRAPH_LABEL_KINDS}")
            if labels is None:
                continue
            if kind == "class":
                if labels.shape != (count,) or (
                    count and (labels.min() < 0 or labels.max() >= classes)
                ):
                    fail(f"{what} labels must be [{count}] class ids in [0, {classes})")
            elif labels.ndim != 2 or labels.shape[0] != count:
                fail(f"{what} regression targets must be [{count}, T], got {list(labels.shape)}")
        seen = np.zeros(g, dtype=np.int8)
        for key in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(self, key)
            if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= g)):
                fail(f"{key} must hold graph ids in [0, {g})")
            seen[idx] += 1
        if np.any(seen > 1):
            fail("a graph lies in two splits (or twice in one)")
        if self.train_idx.size == 0:
            fail("no training graph", "give the set a training split")
        return self

    @classmethod
    def from_graphs(
        cls,
        graphs: list[tuple[np.ndarray, np.ndarray, int]],
        x: list[np.ndarray],
        y: np.ndarray | None,
        splits: tuple[np.ndarray, np.ndarray, np.ndarray],
        *,
        edge_attr: list[np.ndarray] | None = None,
        edge_y: list[np.ndarray] | None = None,
        label_kind: str = "class",
        num_classes: int | None = None,
        name: str = "graphs",
    ) -> "GraphSet":
        """The set of ``graphs`` (each ``(src, dst, num_nodes)`` in its own ids, edges directed;
        give both directions for an undirected graph), with each graph's node rows ``x[i]``,
        optional edge rows ``edge_attr[i]`` and edge labels ``edge_y[i]`` (one per edge, in the
        order given: integer classes, or real targets ``[e_i]`` or ``[e_i, T]``, NaN unknown)
        and the graphs' labels ``y`` (None: edge labels only)."""
        graphs = [
            (*edge_id_arrays(s, d, f"{name}: graph {i}"), n) for i, (s, d, n) in enumerate(graphs)
        ]
        sizes = np.array([n for _, _, n in graphs], dtype=np.int64)
        graph_ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=graph_ptr[1:])
        src = np.concatenate(
            [np.asarray(s, np.int64) + graph_ptr[i] for i, (s, _, _) in enumerate(graphs)]
        )
        dst = np.concatenate(
            [np.asarray(d, np.int64) + graph_ptr[i] for i, (_, d, _) in enumerate(graphs)]
        )
        num_nodes = int(graph_ptr[-1])
        order = np.argsort(dst, kind="stable")
        indptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
        attr = None
        if edge_attr is not None:
            attr = np.concatenate([np.asarray(a, np.float32) for a in edge_attr])[order]
        labels_E, edge_kind = None, "class"
        if edge_y is not None:
            labels_E = np.concatenate([np.asarray(a) for a in edge_y])[order]
            if np.issubdtype(labels_E.dtype, np.integer) or labels_E.dtype == np.bool_:
                labels_E = labels_E.astype(np.int64)
            else:
                edge_kind = "regression"
                labels_E = labels_E.astype(np.float32).reshape(len(labels_E), -1)
        if y is None:
            num_classes = 0
        elif label_kind == "class":
            y = np.asarray(y)
            y = y.astype(np.int64)
            num_classes = int(y.max()) + 1 if num_classes is None else num_classes
        else:
            y = np.asarray(y).astype(np.float32).reshape(len(graphs), -1)
            num_classes = 0
        return cls(
            indptr=indptr,
            indices=src[order],
            x=np.ascontiguousarray(np.concatenate(x), dtype=np.float32),
            graph_ptr=graph_ptr,
            y=y,
            train_idx=np.asarray(splits[0], np.int64),
            val_idx=np.asarray(splits[1], np.int64),
            test_idx=np.asarray(splits[2], np.int64),
            edge_attr=attr,
            edge_y=labels_E,
            edge_classes=(
                0 if labels_E is None or edge_kind != "class" else int(labels_E.max(initial=0)) + 1
            ),
            edge_label_kind=edge_kind,
            label_kind=label_kind,
            num_classes=int(num_classes),
            name=name,
        ).validate()

    @classmethod
    def from_pyg(
        cls,
        data_list: list[Any],
        *,
        split: tuple[float, float] = (0.8, 0.1),
        seed: int = 0,
        label_kind: str | None = None,
        name: str = "pyg",
    ) -> "GraphSet":
        """A set of PyG ``Data`` objects (``x``, ``edge_index``, optional ``edge_attr``, ``y``
        of one class id or a row of targets each, optional ``edge_y``: one label per edge,
        integer classes or real targets ``[E]`` / ``[E, T]``, which then makes ``y`` optional),
        split at random into train / val / test by ``split`` (the train and val shares)."""
        graphs, xs, attrs, ys, edge_ys = [], [], [], [], []
        for i, data in enumerate(data_list):
            edge_y = getattr(data, "edge_y", None)
            if getattr(data, "x", None) is None or (
                getattr(data, "y", None) is None and edge_y is None
            ):
                raise DatasetError(
                    f"graph {i} of the list lacks x, or both y and edge_y",
                    fix="give every graph x and its labels (y per graph, edge_y per edge)",
                )
            ei = pyg_edge_index(getattr(data, "edge_index", None), f"{name}: graph {i}")
            graphs.append((ei[0], ei[1], int(data.num_nodes)))
            xs.append(data.x.detach().cpu().numpy())
            if getattr(data, "edge_attr", None) is not None:
                attrs.append(data.edge_attr.detach().cpu().numpy().reshape(ei.shape[1], -1))
            if getattr(data, "y", None) is not None:
                ys.append(data.y.detach().cpu().numpy().reshape(-1))
            if edge_y is not None:
                labels = edge_y.detach().cpu().numpy()
                if labels.shape[0] != ei.shape[1]:
                    raise DatasetError(
                        f"graph {i}: edge_y has {labels.shape[0]} rows for {ei.shape[1]} edges",
                        fix="give one label (or row of targets) per edge, in edge_index order",
                    )
                edge_ys.append(labels)
        for what, got in (("edge_attr", attrs), ("y", ys), ("edge_y", edge_ys)):
            if got and len(got) != len(graphs):
                raise DatasetError(f"some graphs have {what} and some not", fix="give all or none")
        y = np.stack(ys) if ys else None
        if y is not None and label_kind is None:
            integral = np.issubdtype(y.dtype, np.integer) and y.shape[1] == 1
            label_kind = "class" if integral else "regression"
        if y is not None and label_kind == "class":
            y = y[:, 0]
        return cls.from_graphs(
            graphs, xs, y, random_split(len(graphs), split, seed),
            edge_attr=attrs or None, edge_y=edge_ys or None, label_kind=label_kind or "class",
            name=name,
        )  # fmt: skip


def random_split(
    num_graphs: int, shares: tuple[float, float], seed: int, strata: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Graph ids split at random into train / val / test by ``shares`` (train, val; test the
    rest), within each stratum (class) when ``strata`` is given."""
    rng = np.random.default_rng(seed)
    groups = (
        [np.arange(num_graphs)]
        if strata is None
        else [np.flatnonzero(strata == s) for s in np.unique(strata)]
    )
    parts: list[list[np.ndarray]] = [[], [], []]
    for ids in groups:
        ids = rng.permutation(ids)
        n_train = int(round(shares[0] * len(ids)))
        n_val = int(round(shares[1] * len(ids)))
        for k, piece in enumerate(np.split(ids, [n_train, n_train + n_val])):
            parts[k].append(piece)
    train, val, test = (np.sort(np.concatenate(p)).astype(np.int64) for p in parts)
    return train, val, test


def save_graphset(graphs: GraphSet, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``graphs`` to directory ``path`` atomically."""
    path = Path(path)
    from shardgnn.graph.io import save_arrays

    for key, what in _FINITE_ARRAYS:  # refused here, not as a NaN loss an epoch later
        if getattr(graphs, key) is not None:
            check_finite_features(getattr(graphs, key), path, what=what, fix=FINITE_FIX)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        arrays = save_arrays(tmp, graphs, _ARRAYS)
        save_json(
            tmp / "meta.json",
            {
                "format": GRAPH_SET_FORMAT,
                "version": GRAPH_SET_VERSION,
                "name": graphs.name,
                "label_kind": graphs.label_kind,
                "num_classes": graphs.num_classes,
                "edge_classes": graphs.edge_classes,
                "edge_label_kind": graphs.edge_label_kind,
                "num_graphs": graphs.num_graphs,
                "arrays": arrays,
            },
        )
    return path


def load_graphset(path: str | os.PathLike, mmap: bool = False) -> GraphSet:
    """Load a directory written by :func:`save_graphset` (``mmap``: arrays memory-mapped)."""
    from shardgnn.graph.io import REMAKE_GRAPH, check_stored_finite, load_npy, read_directory_meta

    path = Path(path).expanduser()
    meta_path = path / "meta.json"
    meta = read_directory_meta(path, GRAPH_SET_FORMAT, GRAPH_SET_VERSION, REMAKE_GRAPH)
    arrays = meta.get("arrays") or {}
    missing = [k for k in _ARRAYS if k not in _OPTIONAL and k not in arrays]
    if missing:
        raise DatasetError(f"meta.json lacks the array(s) {missing}", meta_path, "rewrite it")
    fields = {k: load_npy(path / f"{k}.npy", mmap=mmap) for k in _ARRAYS if k in arrays}
    for key, what in _FINITE_ARRAYS:
        if key in fields:
            check_stored_finite(fields[key], path / f"{key}.npy", what)
    counts = {k: meta.get(k, 0) for k in ("num_classes", "edge_classes")}
    if not all(isinstance(v, int) and v >= 0 for v in counts.values()):
        raise DatasetError(
            "num_classes and edge_classes must be non-negative integers", meta_path, "rewrite it"
        )
    return GraphSet(
        **{"y": None, **fields},
        label_kind=str(meta.get("label_kind", "class")),
        edge_label_kind=str(meta.get("edge_label_kind", "class")),
        **counts,
        name=str(meta.get("name", path.name)),
    ).validate(str(path))


@dataclasses.dataclass
class GraphBatch:
    """Several graphs of a set as one disjoint union, in batch-local ids."""

    indptr: np.ndarray
    """int64 ``[n + 1]`` in-edge CSR of the batch"""
    indices: np.ndarray
    x: np.ndarray
    """float32 ``[n, F]``"""
    edge_attr: np.ndarray | None
    edge_y: np.ndarray | None
    """the batch's edge labels (CSR order: int64 ``[e]`` classes or float32 ``[e, T]``), when
    the set has them"""
    graph_index: np.ndarray
    """int64 ``[n]``: each node's graph, 0..B-1 in the order asked"""
    y: np.ndarray | None
    """the labels of the B graphs (None: the set has none)"""
    num_graphs: int


def take_graphs(graphs: Any, ids: np.ndarray) -> GraphBatch:
    """The graphs ``ids`` of ``graphs`` (anything with ``indptr``, ``indices``, ``x``,
    ``edge_attr``, ``graph_ptr`` and ``y``: a :class:`GraphSet` or one part of one) as one
    batch: every array sliced with whole-range copies, no per-graph Python loop."""
    ids = np.asarray(ids, dtype=np.int64)
    ptr = graphs.graph_ptr
    node_start, node_end = ptr[ids], ptr[ids + 1]
    sizes = node_end - node_start
    nodes = concat_ranges(node_start, sizes)
    edge_start, edge_end = graphs.indptr[node_start], graphs.indptr[node_end]
    edges = concat_ranges(edge_start, edge_end - edge_start)
    # new id of every old source id: its offset inside its graph plus the graph's batch offset
    batch_start = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(sizes, out=batch_start[1:])
    edge_graph = np.repeat(np.arange(len(ids)), edge_end - edge_start)
    src = np.asarray(graphs.indices[edges], dtype=np.int64)
    indices = src - node_start[edge_graph] + batch_start[edge_graph]
    degree = np.diff(np.asarray(graphs.indptr))[nodes]
    indptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    attr, labels_E = graphs.edge_attr, graphs.edge_y
    return GraphBatch(
        indptr=indptr,
        indices=indices,
        x=np.asarray(graphs.x[nodes], dtype=np.float32),
        edge_attr=None if attr is None else np.asarray(attr[edges], dtype=np.float32),
        edge_y=None if labels_E is None else np.asarray(labels_E[edges]),
        graph_index=np.repeat(np.arange(len(ids), dtype=np.int64), sizes),
        y=None if graphs.y is None else np.asarray(graphs.y[ids]),
        num_graphs=len(ids),
    )
