"""Save and load a graph directory: ``meta.json`` plus one ``.npy`` file per array.

No pickle anywhere: arrays are read with ``allow_pickle=False`` and may be memory-mapped, so a
feature matrix larger than RAM can be opened.
"""

from __future__ import annotations

import json
import os
import tokenize
from pathlib import Path

import numpy as np

from shardgnn.atomic import atomic_directory, save_json, save_npy
from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph

GRAPH_FORMAT = "shardgnn-graph"
GRAPH_FORMAT_VERSION = 1
HETERO_FORMAT = "shardgnn-hetero-graph"
"""The format of typed graph directories (:mod:`shardgnn.graph.hetero`)."""
_ARRAYS = ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx", "edge_weight")


def save_graph(graph: Graph, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``graph`` to directory ``path`` atomically (the directory appears complete or not at
    all)."""
    path = Path(path)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        arrays = {}
        for key in _ARRAYS:
            value = getattr(graph, key)
            if value is None:
                continue
            save_npy(tmp / f"{key}.npy", value)
            arrays[key] = {"dtype": str(np.asarray(value).dtype), "shape": list(np.shape(value))}
        save_json(
            tmp / "meta.json",
            {
                "format": GRAPH_FORMAT,
                "version": GRAPH_FORMAT_VERSION,
                "name": graph.name,
                "num_nodes": graph.num_nodes,
                "num_edges": graph.num_edges,
                "num_classes": graph.num_classes,
                "arrays": arrays,
            },
        )
    return path


def load_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """Load one ``.npy`` array without pickle, with a clear error for missing or broken files."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            "file is missing",
            path,
            "re-create the directory with `save_graph`/`shardgnn partition`",
        )
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    # truncated/empty, damaged header
    except (ValueError, EOFError, SyntaxError, tokenize.TokenError) as exc:
        raise DatasetError(
            f"not a readable .npy array ({type(exc).__name__}: {exc})",
            path,
            "the file is corrupt or truncated; rewrite it",
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read ({exc})", path) from None


def load_graph(path: str | os.PathLike, mmap: bool = False) -> Graph:
    """Load a directory written by :func:`save_graph`; ``mmap=True`` memory-maps the arrays."""
    path = Path(path)
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise DatasetError(
            "no meta.json: this is not a shardgnn graph directory",
            path,
            "point at a directory written by `save_graph`",
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(
            f"meta.json is not valid JSON ({exc})", meta_path, "rewrite the directory"
        ) from None
    if not isinstance(meta, dict):
        raise DatasetError(
            f"meta.json holds a {type(meta).__name__}, not an object",
            meta_path,
            "rewrite the directory",
        )
    if meta.get("format") == HETERO_FORMAT:
        raise DatasetError(
            "this is a typed (heterogeneous) graph directory",
            path,
            f"name it as hetero:{path} (typed graphs train with --model rgcn)",
        )
    if meta.get("format") != GRAPH_FORMAT or meta.get("version") != GRAPH_FORMAT_VERSION:
        raise DatasetError(
            f"format {meta.get('format')!r} version {meta.get('version')!r} is not "
            f"{GRAPH_FORMAT!r} version {GRAPH_FORMAT_VERSION}",
            meta_path,
            "re-create the directory with this version of shardgnn",
        )
    arrays, name, num_classes = (
        meta.get("arrays", {}),
        meta.get("name", path.name),
        meta.get("num_classes", 0),
    )
    if not (
        isinstance(arrays, dict)
        and all(isinstance(v, dict) for v in arrays.values())
        and isinstance(name, str)
        and isinstance(num_classes, int)
        and not isinstance(num_classes, bool)
        and 0 <= num_classes < 2**31
    ):
        raise DatasetError(
            "meta.json is malformed: 'arrays' must map names to {shape, dtype}, 'name' must be a "
            "string and 'num_classes' a non-negative integer",
            meta_path,
            "rewrite the directory",
        )
    fields = {}
    for key, spec in arrays.items():
        if key not in _ARRAYS:
            raise DatasetError(f"unknown array {key!r} in meta.json", meta_path)
        array = load_npy(path / f"{key}.npy", mmap=mmap and key in ("x", "indices"))
        if list(array.shape) != spec.get("shape") or str(array.dtype) != spec.get("dtype"):
            raise DatasetError(
                f"{key}.npy has shape {list(array.shape)} dtype {array.dtype}, meta.json says "
                f"{spec.get('shape')} {spec.get('dtype')}",
                path / f"{key}.npy",
                "the file was replaced or truncated; rewrite it",
            )
        fields[key] = array
    if "indptr" not in fields or "indices" not in fields:
        raise DatasetError("meta.json lists no indptr/indices arrays", meta_path)
    graph = Graph(name=name, num_classes=num_classes, **fields)
    return graph.validate(str(path))
