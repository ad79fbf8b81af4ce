"""Amazon / Coauthor graphs from the gnn-benchmark (Shchur et al. 2018) ``.npz`` files.

Two layouts are accepted:

* GraphGallery (the shared copies): ``adj_matrix`` and ``node_attr`` are 0-d object arrays holding
  scipy CSR matrices, ``node_label`` is an int array, ``metadata`` a dict (ignored);
* the original shchur/gnn-benchmark layout of plain arrays: ``adj_data/adj_indices/adj_indptr/
  adj_shape``, ``attr_data/attr_indices/attr_indptr/attr_shape`` (or a dense ``attr_matrix``)
  and ``labels``.

The adjacency is symmetrised (the Amazon matrices are not symmetric), coalesced and stripped of
self-loops; stored values are ignored (every stored nonzero is an edge). Features become dense
float32. Object members are read with :func:`shardgnn.graph.safe_pickle.load_npz_safely`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.safe_pickle import check_sparse, dense_float32, load_npz_safely
from shardgnn.graph.split import fraction_split, per_class_split

SPLITS = ("per-class", "60-20-20")
_FIX = (
    "re-download the .npz (GraphGallery: github.com/EdisonLeeeee/GraphData, or "
    "shchur/gnn-benchmark)"
)


def _require(arrays: dict[str, Any], key: str, path: Path) -> Any:
    if key not in arrays:
        raise DatasetError(f"missing key {key!r} (found {sorted(arrays)})", path, _FIX)
    return arrays[key]


def _sparse_from_parts(arrays: dict[str, Any], prefix: str, path: Path) -> sp.csr_matrix:
    """A CSR matrix from the shchur ``<prefix>_data/_indices/_indptr/_shape`` members."""
    parts = [
        _require(arrays, f"{prefix}_{part}", path)
        for part in ("data", "indices", "indptr", "shape")
    ]
    try:
        return sp.csr_matrix(tuple(parts[:3]), shape=tuple(int(s) for s in parts[3]))
    except (ValueError, TypeError) as exc:
        raise DatasetError(f"inconsistent {prefix}_* arrays ({exc})", path, _FIX) from None


def _read_arrays(path: Path) -> tuple[Any, Any, Any]:
    """``(adjacency, attributes, labels)`` from either npz layout."""
    arrays = load_npz_safely(path)
    if "adj_matrix" in arrays:  # GraphGallery
        return (
            _require(arrays, "adj_matrix", path),
            _require(arrays, "node_attr", path),
            _require(arrays, "node_label", path),
        )
    if "adj_data" in arrays:  # shchur/gnn-benchmark
        adj = _sparse_from_parts(arrays, "adj", path)
        attr = (
            arrays["attr_matrix"]
            if "attr_matrix" in arrays
            else _sparse_from_parts(arrays, "attr", path)
        )
        return adj, attr, _require(arrays, "labels", path)
    raise DatasetError(
        f"missing key 'adj_matrix' (GraphGallery) or 'adj_data' (gnn-benchmark); found "
        f"{sorted(arrays)}",
        path,
        _FIX,
    )


def load_gnn_benchmark(
    path: Path, name: str, split: str = "per-class", seed: int = 0, nonfinite: str = "error"
) -> Graph:
    """Load a gnn-benchmark ``.npz`` (Amazon Computers/Photo, Coauthor CS/Physics).

    Args:
        path: the ``.npz`` file.
        name: the dataset name stored on the graph.
        split: ``"per-class"`` (20 train / 30 val random nodes per class, rest test; Shchur et al.)
            or ``"60-20-20"`` (random node fractions).
        seed: the split's random seed.
        nonfinite: ``"error"`` rejects NaN/inf features, ``"zero"`` replaces them with a warning.

    Raises:
        DatasetError: missing file or key, corrupt archive, mismatched shapes or label count,
        non-finite features, or an unknown split.
    """
    path = Path(path)
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r} for {name}", path, f"choose one of {SPLITS}")
    adj, attr, labels = _read_arrays(path)

    if not sp.issparse(adj) or adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
        raise DatasetError(
            f"the adjacency must be a square sparse matrix, found {type(adj).__name__} "
            f"{getattr(adj, 'shape', '')}",
            path,
            _FIX,
        )
    check_sparse(adj, path, "adjacency")
    num_nodes = adj.shape[0]
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise DatasetError(
            f"labels must be a 1-D integer array, found {labels.dtype} {labels.shape}", path, _FIX
        )
    if labels.shape[0] != num_nodes:
        raise DatasetError(
            f"{labels.shape[0]} labels for {num_nodes} nodes (label count != node count)",
            path,
            _FIX,
        )
    if labels.size and labels.min() < -1:
        raise DatasetError(
            f"label {labels.min()} is negative (only -1 may mark an unlabelled node)", path, _FIX
        )
    x = dense_float32(attr, path, "feature", nonfinite)
    if x.shape[0] != num_nodes:
        raise DatasetError(f"features have shape {x.shape}, expected ({num_nodes}, F)", path, _FIX)

    y = labels.astype(np.int64)
    if split == "per-class":
        train_idx, val_idx, test_idx = per_class_split(y, 20, 30, seed)
    else:
        train_idx, val_idx, test_idx = fraction_split(
            num_nodes, 0.6, 0.2, seed, labelled=np.flatnonzero(y >= 0)
        )
    coo = sp.coo_matrix(adj)
    coo.eliminate_zeros()
    graph = Graph.from_edge_index(
        coo.row.astype(np.int64),
        coo.col.astype(np.int64),
        num_nodes,
        x=x,
        y=y,
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=test_idx,
        num_classes=int(y.max()) + 1 if y.size else 0,
        name=name,
    )
    return graph.symmetrize().remove_self_loops().validate(str(path))


__all__ = ["SPLITS", "load_gnn_benchmark"]
