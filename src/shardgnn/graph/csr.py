"""The graph container: a CSR over in-edges plus node data.

Convention: messages flow ``src -> dst``. For a destination node ``v`` its in-neighbours are
``indices[indptr[v]:indptr[v + 1]]``. ``indptr`` is int64; ``indices`` is int32 while the node
count fits (halving the memory of the largest array), int64 otherwise.

Node features are float32 ``[N, F]`` and may be a read-only memory map; labels are int64 ``[N]``
(``-1`` marks an unlabelled node); splits are sorted int64 index arrays.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.split import FINITE_FIX, check_finite_features

INT32_MAX = np.iinfo(np.int32).max


def index_dtype(num_nodes: int) -> np.dtype:
    """The compact dtype that can hold every node id of a graph with ``num_nodes`` nodes."""
    return np.dtype(np.int32) if num_nodes <= INT32_MAX else np.dtype(np.int64)


def edge_id_arrays(
    src: Any, dst: Any, where: str | None = None, what: str = "edge"
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` as arrays (their integer dtype kept: no copy of a large int32 edge list),
    checked: both 1-D, of one length, of an integer dtype (empty ones become int64); anything
    else is refused in one line (floats were truncated to ids, text and unequal lengths were
    numpy tracebacks). ``where`` names the graph, ``what`` the arrays (``edge``, ``event``)."""
    src, dst = (a if a.size else a.astype(np.int64) for a in (np.asarray(src), np.asarray(dst)))
    if src.shape != dst.shape or src.ndim != 1:
        raise DatasetError(
            f"{what} arrays must be 1-D and of equal length, got {list(src.shape)} and "
            f"{list(dst.shape)}",
            where,
        )
    for ids in (src, dst):
        if ids.size and ids.dtype.kind not in "iu":
            raise DatasetError(
                f"{what} ids must be integers, got {ids.dtype}",
                where,
                "give integer node ids (e.g. ids.astype(numpy.int64), after checking they are "
                "whole numbers)",
            )
    return src, dst


def csr_from_edges(
    src: np.ndarray, dst: np.ndarray, num_nodes: int, edge_weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Build an in-edge CSR (rows = dst) from edge arrays; keeps edge order stable within a row."""
    indptr, indices, order = csr_with_order(src, dst, num_nodes)
    weight = None if edge_weight is None else np.asarray(edge_weight, dtype=np.float32)[order]
    return indptr, indices, weight


def first_outside(ids: np.ndarray, count: int) -> int | None:
    """The first of ``ids`` outside ``[0, count)`` (numba kernels index rows unchecked: such an id
    reads another array's memory or ends the process), or ``None``."""
    if not ids.size or (ids.min() >= 0 and ids.max() < count):
        return None
    return int(ids[(ids < 0) | (ids >= count)][0])


def check_edge_range(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> None:
    """Refuse an edge whose source or destination is not in ``[0, num_nodes)``."""
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise DatasetError(
            f"edge ids must lie in [0, {num_nodes}), found range "
            f"[{min(src.min(), dst.min())}, {max(src.max(), dst.max())}]"
        )


def csr_with_order(
    src: np.ndarray, dst: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, order)`` of the in-edge CSR of ``src -> dst``: edge ``order[i]`` is
    the CSR's edge ``i`` (per-edge arrays follow their edges as ``array[order]``)."""
    src = np.asarray(src)
    dst = np.asarray(dst)
    check_edge_range(src, dst, num_nodes)  # or the CSR would hold ids of nodes that do not exist
    order = np.argsort(dst, kind="stable")
    counts = np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, src[order].astype(index_dtype(num_nodes), copy=False), order


LABEL_KINDS = ("class", "multilabel", "regression")
"""every kind of one node label (:mod:`shardgnn.nn.targets` trains and scores each); several
at once are a multi-task kind, ``multitask:NAME=KIND/WIDTH*WEIGHT,...`` (:func:`label_tasks`)"""

MULTITASK = "multitask:"


@dataclasses.dataclass(frozen=True)
class LabelTask:
    """One task of a multi-task label kind: its label columns and the model outputs it reads."""

    name: str
    kind: str
    """``class``, ``multilabel`` or ``regression``"""
    width: int
    """model outputs: classes, labels or targets"""
    weight: float = 1.0
    """its loss's weight in the sum the model is trained on"""

    @property
    def columns(self) -> int:
        """label columns: one class id (NaN: unknown), else one per output"""
        return 1 if self.kind == "class" else self.width


def label_tasks(label_kind: str) -> list[LabelTask] | None:
    """The tasks of ``multitask:NAME=KIND/WIDTH*WEIGHT,...`` (``/WIDTH``: classes or labels,
    required for them, targets for regression, default 1; ``*WEIGHT``: default 1), in label
    column order; None for one kind of label.

    Raises:
        ValueError: a malformed spec (the message says what is wrong).
    """
    if not label_kind.startswith(MULTITASK):
        return None
    tasks = []
    for entry in label_kind[len(MULTITASK) :].split(","):
        name, _, rest = entry.strip().partition("=")
        rest, _, weight = rest.partition("*")
        kind, _, width = rest.partition("/")
        if not name.isidentifier() or kind not in LABEL_KINDS:
            raise ValueError(
                f"task {entry.strip()!r} is not NAME=KIND/WIDTH*WEIGHT with KIND one of "
                f"{', '.join(LABEL_KINDS)}"
            )
        if not width and kind != "regression":
            raise ValueError(f"task {name!r}: a {kind} task names its width ({name}={kind}/W)")
        try:
            task = LabelTask(name, kind, int(width or 1), float(weight or 1.0))
        except ValueError:
            raise ValueError(f"task {name!r}: width and weight must be numbers") from None
        if task.width < 1 or not task.weight > 0:
            raise ValueError(f"task {name!r}: width must be >= 1 and weight > 0")
        tasks.append(task)
    if len({t.name for t in tasks}) != len(tasks):
        raise ValueError("two tasks have the same name")
    return tasks


def label_kind_problem(label_kind: str) -> str | None:
    """Why ``label_kind`` names no kind of label, or None."""
    if label_kind in LABEL_KINDS:
        return None
    if not label_kind.startswith(MULTITASK):
        return (
            f"label_kind {label_kind!r} is not one of {', '.join(LABEL_KINDS)} or "
            "multitask:NAME=KIND/WIDTH*WEIGHT,..."
        )
    try:
        label_tasks(label_kind)
    except ValueError as exc:
        return f"label_kind {label_kind!r}: {exc}"
    return None


def label_dtype(label_kind: str) -> type:
    """The dtype of labels of ``label_kind``: int64 classes, float32 tables."""
    return np.int64 if label_kind == "class" else np.float32


def labels_of(y: np.ndarray, num_nodes: int) -> dict[str, Any]:
    """``y``, ``num_classes`` and ``label_kind`` of a label array as PyG and OGB give them:
    integers ``[N]`` (or ``[N, 1]``) are classes, integers or booleans ``[N, L]`` are multi-label
    0/1 (as ``ogbn-proteins``), floats are regression targets (``[N]`` becomes ``[N, 1]``)."""
    y = np.asarray(y)
    if y.dtype.kind in "iub" and (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
        y = y.astype(np.int64).reshape(-1)
        return {"y": y, "num_classes": int(y.max()) + 1 if y.size else 0, "label_kind": "class"}
    kind = "multilabel" if y.dtype.kind in "iub" else "regression"
    y = np.ascontiguousarray(y.reshape(num_nodes, -1) if y.ndim == 1 else y, dtype=np.float32)
    return {"y": y, "num_classes": 0, "label_kind": kind}


def as_node_ids(values: Any) -> np.ndarray:
    """The user's ids as an array stored without pickle: int64 when every id is an integer, else
    text (each id as ``str``; a tuple, as networkx's grid graphs key their nodes, is one id)."""
    dtype = getattr(values, "dtype", None)  # an array or a table's column: typed already
    if isinstance(dtype, np.dtype) and dtype.kind in "iu" and np.ndim(values) == 1:
        return np.asarray(values, dtype=np.int64)
    items = list(values)
    ids = np.empty(len(items), dtype=object)
    ids[:] = items  # element by element: a tuple stays one id, not a row
    if items and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        return ids.astype(np.int64)
    return np.array([str(v) for v in items], dtype=np.str_)


def _stacked_rows(values: list, attr: str, where: str, flat: bool = False) -> np.ndarray:
    """Per-node (per-edge) attribute values as one float32 array: ``[N]`` for ``flat``, else a
    row each ``[N, D]``; values of other lengths, or not numbers, refused naming ``attr``."""
    try:
        array = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise DatasetError(
            f"the {attr!r} attributes are not numbers{'' if flat else ' of one length'}",
            where,
            f"give each {attr!r} "
            + ("a number" if flat else "a sequence of numbers, all of one length"),
        ) from None
    if flat and array.ndim != 1 or not flat and array.ndim not in (1, 2):
        raise DatasetError(f"the {attr!r} attributes are {list(array.shape)[1:]}-shaped", where)
    return array if flat or array.ndim == 2 else array[:, None]


def pyg_edge_index(edge_index: Any, where: str, edge_type: str | None = None) -> np.ndarray:
    """``edge_index`` (a PyG ``[2, E]`` integer tensor; of ``edge_type`` in a ``HeteroData``) as
    int64 numpy; anything else (none, an ``[E, 2]`` array, floats) is refused in one line naming
    ``where``: a transposed ``[E, 2]`` would otherwise be read as two edges."""
    what = "edge_index" if edge_type is None else f"edge type {edge_type}'s edge_index"
    if edge_index is None:
        raise DatasetError(f"has no {what}", where, "give edge_index: a [2, E] tensor of node ids")
    array = np.asarray(edge_index.detach().cpu() if hasattr(edge_index, "detach") else edge_index)
    if array.ndim != 2 or array.shape[0] != 2 or array.dtype.kind not in "iu":
        raise DatasetError(
            f"{what} is {array.dtype} {list(array.shape)}, not [2, E] integers (a row of sources "
            "and a row of destinations)",
            where,
            "give a [2, E] integer tensor (.t() if it holds a (src, dst) pair per row)",
        )
    return array.astype(np.int64, copy=False)


def pyg_node_labels(store: Any, num_nodes: int, where: str = "pyg") -> dict[str, Any]:
    """The labels (:func:`labels_of`) and the splits (``train_mask``... as ids) of a PyG node
    store (a ``Data``, or one node type of a ``HeteroData``; or any object with those
    attributes as tensors or arrays: :meth:`Graph.from_networkx`'s); what it lacks is left
    out. A mask is one true/false per node: an index list in its place would be read as a mask
    of its values, so it is refused (``where`` names the graph); 0/1 integers (PyG's old uint8
    masks) are a mask."""
    fields: dict[str, Any] = {}
    if getattr(store, "y", None) is not None:
        y = store.y
        fields.update(
            labels_of(np.asarray(y.detach().cpu() if hasattr(y, "detach") else y), num_nodes)
        )
    for split in ("train", "val", "test"):
        mask = getattr(store, f"{split}_mask", None)
        if mask is None:
            continue
        mask = np.asarray(mask.detach().cpu() if hasattr(mask, "detach") else mask)
        binary = mask.dtype.kind == "b" or (mask.dtype.kind in "iu" and np.isin(mask, (0, 1)).all())
        if mask.shape != (num_nodes,) or not binary:
            raise DatasetError(
                f"{split}_mask is {mask.dtype} {list(mask.shape)}, not one bool per node "
                f"([{num_nodes}])",
                where,
                f"give a bool mask (an index list idx: mask = torch.zeros({num_nodes}, "
                "dtype=torch.bool); mask[idx] = True)",
            )
        fields[f"{split}_idx"] = np.flatnonzero(mask).astype(np.int64)
    return fields


def label_problem(
    y: np.ndarray, label_kind: str, num_classes: int, num_nodes: int
) -> tuple[str, str] | None:
    """``(problem, fix)`` when ``y`` is not a valid label array of ``label_kind`` for
    ``num_nodes`` nodes, else None."""
    problem = label_kind_problem(label_kind)
    if problem is not None:
        return problem, "name one of them"
    rows = y.shape[0] if y.ndim else 0
    if label_kind == "class":
        if y.ndim != 1 or rows != num_nodes:
            return f"{rows} labels for {num_nodes} nodes", "give one label per node"
        if y.dtype.kind not in "iu":
            return f"class labels are {y.dtype}, not integers", "give class ids 0..C-1"
        if y.size and y.max() >= max(num_classes, 1):
            return (
                f"label {y.max()} is not below num_classes={num_classes}",
                "set num_classes to max(label) + 1",
            )
        if y.size and y.min() < -1:
            return (
                f"label {y.min()} is negative (only -1 may mark an unlabelled node)",
                "relabel classes as 0..C-1",
            )
        return None
    if y.ndim != 2 or rows != num_nodes or y.shape[1] < 1 or y.dtype != np.float32:
        return (
            f"{label_kind} labels are {y.dtype} {list(y.shape)}, not float32 [{num_nodes}, W]",
            "give one row of W >= 1 columns per node (NaN = unknown)",
        )
    tasks = label_tasks(label_kind) or [LabelTask(label_kind, label_kind, y.shape[1])]
    if sum(t.columns for t in tasks) != y.shape[1]:
        return (
            f"the labels have {y.shape[1]} columns; {label_kind} reads "
            f"{sum(t.columns for t in tasks)}",
            "give one column per class task, one per label and one per target",
        )
    start = 0
    for task in tasks:
        cols = y[:, start : start + task.columns]
        start += task.columns
        known = ~np.isnan(cols)
        if task.kind == "multilabel":
            bad = known & (cols != 0) & (cols != 1)
            if bad.any():
                return (
                    f"multi-label entry {cols[bad][0]} is neither 0 nor 1",
                    "give 0 or 1 per label (NaN = unknown)",
                )
        elif task.kind == "class":
            bad = known & ((cols != np.floor(cols)) | (cols < 0) | (cols >= task.width))
            if bad.any():
                return (
                    f"task {task.name!r}: class {cols[bad][0]} is not an id in [0, {task.width})",
                    "give class ids 0..C-1 (NaN = unknown)",
                )
        elif np.isinf(cols).any():
            return "a regression target is infinite", "give finite targets (NaN = unknown)"
    return None


@dataclasses.dataclass(kw_only=True)
class Graph:
    """A homogeneous graph with optional node features, labels and splits.

    Attributes:
        indptr: int64 ``[N + 1]`` row pointers of the in-edge CSR.
        indices: int32/int64 ``[E]`` source node of every in-edge.
        x: float32 ``[N, F]`` node features, or ``None``.
        y: node labels, or ``None``: int64 ``[N]`` classes (``-1`` = unlabelled), or float32
            ``[N, W]`` for the other ``label_kind`` s (NaN = unknown).
        train_idx, val_idx, test_idx: int64 node index arrays, or ``None``.
        edge_weight: float32 ``[E]`` aligned with ``indices``, or ``None``.
        edge_attr: float32 ``[E, D]`` edge features aligned with ``indices`` (CSR order, so they
            follow their edges through partitioning and sampling), or ``None``.
        num_classes: number of label classes (``0`` without labels or for labels other than
            classes).
        label_kind: what a label is: ``class`` (one class per node), ``multilabel`` (0/1 per
            label, ``W`` labels) or ``regression`` (``W`` real targets); see
            :mod:`shardgnn.nn.targets` for how each is trained and scored.
        name: a human-readable dataset name.
        node_ids: ``[N]`` the user's own id of every node (int64, or text ``<U``), when the graph
            was built from ids of its own (``shardgnn convert``); ``None``: ids are 0..N-1.
        class_names: the name of every class 0..C-1 (a node table's label values), or ``None``:
            a class is its number.
    """

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_idx: np.ndarray | None = None
    val_idx: np.ndarray | None = None
    test_idx: np.ndarray | None = None
    edge_weight: np.ndarray | None = None
    num_classes: int = 0
    name: str = "graph"
    node_ids: np.ndarray | None = None
    class_names: tuple[str, ...] | None = None
    label_kind: str = "class"
    edge_attr: np.ndarray | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edge_index(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        num_nodes: int | None = None,
        *,
        edge_weight: np.ndarray | None = None,
        edge_attr: np.ndarray | None = None,
        **node_data: Any,
    ) -> "Graph":
        """Build a graph from ``src -> dst`` edge arrays (any integer dtype), with optional
        per-edge weights ``[E]`` and features ``[E, D]`` in the order of the edge arrays."""
        src, dst = edge_id_arrays(src, dst)
        if num_nodes is None:
            num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
        check_edge_range(src, dst, num_nodes)  # before the edge rows' checks
        for values, what in ((edge_weight, "edge weight"), (edge_attr, "edge feature")):
            if values is not None:  # in the caller's edge order, before the CSR's
                check_finite_features(np.asarray(values), "edges", what=what, fix=FINITE_FIX)
        if edge_attr is not None:
            edge_attr = np.asarray(edge_attr, dtype=np.float32)
            if edge_attr.ndim == 1:
                edge_attr = edge_attr[:, None]
            if edge_attr.ndim != 2 or edge_attr.shape[0] != src.shape[0]:
                raise DatasetError(
                    f"edge features must be [{src.shape[0]}, D] (one row per edge), got "
                    f"{list(edge_attr.shape)}"
                )
        rows = {"edge_weight": edge_weight, "edge_attr": edge_attr}
        graph = cls(indptr=np.zeros(num_nodes + 1, np.int64), indices=src[:0], **node_data)
        return graph.with_edges(src, dst, {k: v for k, v in rows.items() if v is not None})

    @classmethod
    def from_pyg(cls, data: Any, name: str = "pyg") -> "Graph":
        """Convert a ``torch_geometric.data.Data`` (``edge_index`` is ``[2, E]`` src, dst)."""
        if not hasattr(data, "edge_index") or not hasattr(data, "num_nodes"):
            raise DatasetError(
                f"expected a torch_geometric.data.Data, got {type(data).__name__}",
                name,
                "give Data(edge_index=..., x=..., ...)",
            )
        edge_index = pyg_edge_index(data.edge_index, name)
        num_nodes = int(data.num_nodes)
        node_data: dict[str, Any] = {"name": name}
        if getattr(data, "x", None) is not None:
            node_data["x"] = np.ascontiguousarray(data.x.detach().cpu().numpy(), dtype=np.float32)
        node_data.update(pyg_node_labels(data, num_nodes, name))
        weight = getattr(data, "edge_weight", None)
        weight = None if weight is None else weight.cpu().numpy()
        attr = getattr(data, "edge_attr", None)
        attr = None if attr is None else attr.detach().cpu().numpy()
        graph = cls.from_edge_index(
            edge_index[0], edge_index[1], num_nodes, edge_weight=weight, edge_attr=attr,
            **node_data,
        )  # fmt: skip
        graph.validate()
        return graph

    @classmethod
    def from_networkx(cls, graph: Any, name: str = "networkx") -> "Graph":
        """Convert a networkx graph, read as PyG's ``to_networkx`` writes one: its nodes in
        iteration order, their keys kept as node ids (integers, or text); its edges (both ways
        for an undirected graph; a multigraph's parallel edges once, with the first one's
        rows); node attributes ``x`` (a feature row), ``y`` (a label: a class id, -1 or absent
        for none; or a row of targets) and ``train_mask``/``val_mask``/``test_mask`` (true or
        false); edge attributes ``weight`` and ``edge_attr`` (a feature row). An attribute is
        carried by every node (edge) or by none (``y``: or absent for the unlabelled); a
        mixture is refused, naming the first node (edge) without it."""
        if not hasattr(graph, "nodes") or not hasattr(graph, "is_directed"):
            raise DatasetError(
                f"expected a networkx graph, got {type(graph).__name__}",
                name,
                "give a networkx.Graph, DiGraph, MultiGraph or MultiDiGraph",
            )
        keys = list(graph.nodes)
        index = {key: i for i, key in enumerate(keys)}
        nodes = [graph.nodes[key] for key in keys]
        edges = list(graph.edges(data=True))
        src = np.fromiter((index[u] for u, _, _ in edges), np.int64, len(edges))
        dst = np.fromiter((index[v] for _, v, _ in edges), np.int64, len(edges))

        def column(items: list, ids: list, attr: str, what: str, absent_ok: bool = False):
            """Every item's ``attr`` (None: no item has it); with some items lacking it,
            refused naming the first, unless ``absent_ok``."""
            present = [attr in data for data in items]
            if not any(present):
                return None
            if not absent_ok and not all(present):
                raise DatasetError(
                    f"{what} {ids[present.index(False)]!r} has no {attr!r} attribute, and others "
                    "have one",
                    name,
                    f"give every {what} its {attr!r}, or none",
                )
            return [data.get(attr) for data in items]

        store = types.SimpleNamespace()
        y = column(nodes, keys, "y", "node", absent_ok=True)
        if y is not None:
            classes = all(v is None or isinstance(v, (int, np.integer)) for v in y)
            store.y = np.asarray([-1 if v is None else v for v in y]) if classes else np.asarray(y)
            if not classes and any(v is None for v in y):
                first = keys[[v is None for v in y].index(True)]
                raise DatasetError(
                    f"node {first!r} has no 'y' attribute, and the others' are not class ids",
                    name,
                    "give every node its targets (absent labels are for class ids: -1)",
                )
        for split in ("train", "val", "test"):
            mask = column(nodes, keys, f"{split}_mask", "node")
            if mask is not None:
                setattr(store, f"{split}_mask", np.asarray(mask))
        node_data: dict[str, Any] = {"name": name, "node_ids": as_node_ids(keys)}
        x = column(nodes, keys, "x", "node")
        if x is not None:
            node_data["x"] = _stacked_rows(x, "x", name)
        node_data.update(pyg_node_labels(store, len(keys), name))
        pairs = [(u, v) for u, v, _ in edges]
        rows = {}
        for attr, key in (("weight", "edge_weight"), ("edge_attr", "edge_attr")):
            values = column([data for _, _, data in edges], pairs, attr, "edge")
            if values is not None:
                rows[key] = _stacked_rows(values, attr, name, flat=attr == "weight")
        if not graph.is_directed():  # both ways: coalescing drops a self-loop's second copy
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
            rows = {k: np.concatenate([v, v]) for k, v in rows.items()}
        built = cls.from_edge_index(src, dst, len(keys), **rows, **node_data)
        built.validate()
        return built

    def to_pyg(self) -> Any:
        """Convert to ``torch_geometric.data.Data`` (requires torch_geometric)."""
        import torch
        from torch_geometric.data import Data

        src, dst = self.edge_index()
        data = Data(
            edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
            num_nodes=self.num_nodes,
        )
        if self.x is not None:
            data.x = torch.from_numpy(np.asarray(self.x, dtype=np.float32))
        if self.y is not None:
            data.y = torch.from_numpy(np.asarray(self.y))
        if self.edge_weight is not None:
            data.edge_weight = torch.from_numpy(np.asarray(self.edge_weight))
        if self.edge_attr is not None:
            data.edge_attr = torch.from_numpy(np.asarray(self.edge_attr, dtype=np.float32))
        for key, mask_name in (
            ("train_idx", "train_mask"),
            ("val_idx", "val_mask"),
            ("test_idx", "test_mask"),
        ):
            idx = getattr(self, key)
            if idx is not None:
                mask = torch.zeros(self.num_nodes, dtype=torch.bool)
                mask[torch.from_numpy(np.asarray(idx))] = True
                setattr(data, mask_name, mask)
        return data

    # ------------------------------------------------------------------ properties
    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def edge_dim(self) -> int:
        """Width of the edge features (0: none)."""
        return 0 if self.edge_attr is None else int(self.edge_attr.shape[1])

    def in_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def out_degree(self) -> np.ndarray:
        return np.bincount(self.indices, minlength=self.num_nodes).astype(np.int64)

    def edge_index(self) -> tuple[np.ndarray, np.ndarray]:
        """``(src, dst)`` arrays in CSR order."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=self.indices.dtype), self.in_degree())
        return np.asarray(self.indices), dst

    def edge_homophily(self) -> float:
        """Fraction of edges (between labelled nodes) whose endpoints share a label."""
        if self.y is None or self.label_kind != "class":
            return float("nan")
        src, dst = self.edge_index()
        ys, yd = self.y[src], self.y[dst]
        keep = (ys >= 0) & (yd >= 0)
        return float(np.mean(ys[keep] == yd[keep])) if keep.any() else float("nan")

    # ------------------------------------------------------------------ transforms
    def edge_rows(self) -> dict[str, np.ndarray]:
        """The per-edge arrays (weights, features) by field name, in CSR order: what every edge
        transform carries along with its edges."""
        rows = {"edge_weight": self.edge_weight, "edge_attr": self.edge_attr}
        return {name: np.asarray(a) for name, a in rows.items() if a is not None}

    def with_edges(self, src: np.ndarray, dst: np.ndarray, rows: dict[str, np.ndarray]) -> "Graph":
        """This graph with edges ``src -> dst`` and their per-edge ``rows`` (in edge order)."""
        indptr, indices, order = csr_with_order(src, dst, self.num_nodes)
        fields = {name: np.asarray(a, dtype=np.float32)[order] for name, a in rows.items()}
        fields = {"edge_weight": None, "edge_attr": None} | fields
        return dataclasses.replace(self, indptr=indptr, indices=indices, **fields)

    def coalesce(self) -> "Graph":
        """Remove duplicate edges (keeping the first one's weight and features) and sort each row
        by source id."""
        src, dst = self.edge_index()
        key = dst.astype(np.int64) * self.num_nodes + src
        uniq, first = np.unique(key, return_index=True)
        rows = {name: a[first] for name, a in self.edge_rows().items()}
        return self.with_edges(uniq % self.num_nodes, uniq // self.num_nodes, rows)

    def symmetrize(self) -> "Graph":
        """Add the reverse of every edge (with the same weight and features), then coalesce
        (the result is undirected)."""
        src, dst = self.edge_index()
        rows = {name: np.concatenate([a, a]) for name, a in self.edge_rows().items()}
        both = self.with_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), rows)
        return both.coalesce()

    def remove_self_loops(self) -> "Graph":
        src, dst = self.edge_index()
        keep = src != dst
        rows = {name: a[keep] for name, a in self.edge_rows().items()}
        return self.with_edges(src[keep], dst[keep], rows)

    def add_self_loops(self, fill_weight: float = 1.0) -> "Graph":
        """Remove existing self-loops, then add exactly one per node (weight ``fill_weight``,
        features zero)."""
        g = self.remove_self_loops()
        src, dst = g.edge_index()
        loops = np.arange(self.num_nodes, dtype=src.dtype)
        rows = {}
        for name, a in g.edge_rows().items():
            value = fill_weight if name == "edge_weight" else 0.0
            fill = np.full((self.num_nodes, *a.shape[1:]), value, dtype=np.float32)
            rows[name] = np.concatenate([a, fill])
        return g.with_edges(np.concatenate([src, loops]), np.concatenate([dst, loops]), rows)

    def is_symmetric(self) -> bool:
        src, dst = self.edge_index()
        n = self.num_nodes
        fwd = np.sort(dst.astype(np.int64) * n + src)
        bwd = np.sort(src.astype(np.int64) * n + dst)
        return bool(np.array_equal(fwd, bwd))

    # ------------------------------------------------------------------ validation
    def validate(self, source: str | None = None) -> "Graph":
        """Check every structural invariant; raise :class:`DatasetError` naming ``source``."""
        where = source or self.name
        n = self.num_nodes

        def fail(problem: str, fix: str) -> None:
            raise DatasetError(problem, where, fix)

        if self.indptr.ndim != 1 or self.indptr.shape[0] < 1 or self.indptr[0] != 0:
            fail(
                "indptr must be a 1-D array starting at 0",
                "rebuild the CSR with Graph.from_edge_index",
            )
        if self.indptr[-1] != self.indices.shape[0]:
            fail(
                f"indptr ends at {self.indptr[-1]} but there are {self.indices.shape[0]} indices",
                "the CSR is truncated; rebuild it",
            )
        if n and np.any(np.diff(self.indptr) < 0):
            fail("indptr is not non-decreasing", "rebuild the CSR with Graph.from_edge_index")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= n):
            fail(
                f"neighbour ids must lie in [0, {n}), found [{self.indices.min()}, "
                f"{self.indices.max()}]",
                "drop or renumber the offending edges",
            )
        if self.edge_weight is not None and self.edge_weight.shape != self.indices.shape:
            fail(
                f"{self.edge_weight.shape[0]} edge weights for {self.indices.shape[0]} edges",
                "give exactly one weight per edge",
            )
        if self.edge_attr is not None and (
            self.edge_attr.ndim != 2 or self.edge_attr.shape[0] != self.indices.shape[0]
        ):
            fail(
                f"edge features have shape {list(self.edge_attr.shape)}, expected "
                f"[{self.indices.shape[0]}, D]",
                "give one feature row per edge, in CSR order",
            )
        if self.x is not None:
            if self.x.ndim != 2 or self.x.shape[0] != n:
                fail(
                    f"features have shape {self.x.shape}, expected ({n}, F)",
                    "give one feature row per node",
                )
        if self.y is not None:
            problem = label_problem(self.y, self.label_kind, self.num_classes, n)
            if problem is not None:
                fail(*problem)
        if self.node_ids is not None and (
            self.node_ids.shape != (n,) or self.node_ids.dtype.kind not in "iuU"
        ):
            fail(
                f"node_ids holds {self.node_ids.dtype} {list(self.node_ids.shape)}, not one "
                f"integer or text id per node ({n})",
                "give one original id per node",
            )
        if self.class_names is not None and len(self.class_names) != self.num_classes:
            fail(
                f"{len(self.class_names)} class names for {self.num_classes} classes",
                "name every class 0..C-1 once",
            )
        seen: dict[str, np.ndarray] = {}
        for key in ("train_idx", "val_idx", "test_idx"):
            idx = getattr(self, key)
            if idx is None:
                continue
            if idx.ndim != 1:
                fail(f"{key} must be 1-D", "store split indices as a flat array")
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                fail(f"{key} holds ids outside [0, {n})", "drop split ids that name no node")
            if np.unique(idx).size != idx.size:
                fail(f"{key} holds duplicate node ids", "list every split node once")
            for other, other_idx in seen.items():
                both = np.intersect1d(idx, other_idx)
                if both.size:
                    fail(
                        f"{key} and {other} overlap in {both.size} nodes (e.g. node {both[0]})",
                        "make the splits disjoint",
                    )
            seen[key] = idx
        return self


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, s + n)`` for every ``(s, n)`` (int64): the positions of
    a CSR's rows' entries, say."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total, dtype=np.int64) + offsets
