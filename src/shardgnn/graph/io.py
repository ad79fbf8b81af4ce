"""Save and load a graph directory: ``meta.json`` plus one ``.npy`` file per array.

No pickle anywhere: arrays are read with ``allow_pickle=False`` and may be memory-mapped, so a
feature matrix larger than RAM can be opened.

A graph built from the user's own ids (``shardgnn convert``) also keeps them: ``node_ids.npy``
(``[N]``, int64 or text ``<U``: the id of every node, in node order), recorded in
``meta.json["node_ids"]`` (file, dtype, shape), and ``meta.json["class_names"]`` (the name of
every class 0..C-1). Both lie outside ``meta.json["arrays"]`` and the graph's fingerprint: a
graph without them is written exactly as before, and an older shardgnn ignores them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tokenize
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_directory, save_json, save_npy
from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph, label_kind_problem
from shardgnn.graph.split import FINITE_FIX, check_finite_features

GRAPH_FORMAT = "shardgnn-graph"
GRAPH_FORMAT_VERSION = 1
TYPED_GRAPH_FORMAT = "shardgnn-hetero-graph"  # the on-disk name of directories users have written
"""The format of typed graph directories (:mod:`shardgnn.graph.typed`)."""
GRAPH_SET_FORMAT = "shardgnn-graph-set"
"""The format of graph-set directories (:mod:`shardgnn.graph.graphset`)."""
PARTITION_FORMAT = "shardgnn-partitions"
"""The format of partition directories (:mod:`shardgnn.partition.format`)."""
CHECKPOINT_FORMAT = "shardgnn-checkpoint"
"""The format of a checkpoint's epoch folder (:mod:`shardgnn.train.checkpoint`)."""


@dataclasses.dataclass(frozen=True)
class DirectoryKind:
    """One kind of directory shardgnn writes, known by the format its ``meta.json`` names."""

    name: str
    """what it is called in messages, e.g. ``partition directory``"""
    use: str
    """how it is used, ``{path}`` standing for its path"""
    writer: str
    """what writes one"""


DIRECTORY_KINDS = {
    GRAPH_FORMAT: DirectoryKind(
        "graph directory",
        "train it as the dataset graph:{path} (with --workers N it is partitioned on the fly), or "
        "partition it: `shardgnn partition graph:{path} --parts N --out DIR`",
        "`shardgnn convert`",
    ),
    TYPED_GRAPH_FORMAT: DirectoryKind(
        "typed (heterogeneous) graph directory",
        "train it as the dataset hetero:{path} (with --model rgcn), or partition it: "
        "`shardgnn partition hetero:{path} --parts N --out DIR`",
        "`shardgnn convert --node-tables ... --edge-tables ...`",
    ),
    GRAPH_SET_FORMAT: DirectoryKind(
        "graph-set directory",
        "train it as the dataset graphset:{path}",
        "`shardgnn convert --molecules`",
    ),
    PARTITION_FORMAT: DirectoryKind(
        "partition directory", "train it with --partitions {path}", "`shardgnn partition`"
    ),
    CHECKPOINT_FORMAT: DirectoryKind(
        "checkpoint",
        "infer or export from it with --checkpoint {path}",
        "`shardgnn train --checkpoint-dir`",
    ),
}
"""Every kind of directory shardgnn writes, by format: one given where another is expected is
named, with its own use."""


REMAKE_GRAPH = "re-create the directory with this version of shardgnn"
"""the fix for a damaged or outdated graph, typed-graph or graph-set directory"""


def directory_format(path: str | os.PathLike) -> str | None:
    """The format the ``meta.json`` of directory ``path`` names; ``None`` when it has none (or it
    cannot be read)."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    found = meta.get("format") if isinstance(meta, dict) else None
    return found if isinstance(found, str) else None


def holds_checkpoints(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a ``--checkpoint-dir``: a folder of checkpoints (``epoch-N``)."""
    return any(Path(path).glob("epoch-*/meta.json"))


def read_directory_meta(
    path: str | os.PathLike, fmt: str, version: int, remake: str
) -> dict[str, Any]:
    """The ``meta.json`` of a directory of format ``fmt`` (a key of :data:`DIRECTORY_KINDS`) and
    ``version``, or one line saying what ``path`` is instead: missing, a file, a folder of
    checkpoints, another kind of shardgnn directory (with that kind's use), none, or another
    version (a newer one: upgrade shardgnn); ``remake``: the fix for an unreadable ``meta.json``,
    an unknown format or an older version.

    Raises:
        DatasetError: ``path`` is not a directory of format ``fmt`` and ``version``.
    """
    path, want = Path(path), DIRECTORY_KINDS[fmt]
    fix = f"give a {want.name}, written by {want.writer}"
    if not path.exists():
        raise DatasetError(f"no such {want.name}", path, fix)
    if not path.is_dir():
        raise DatasetError(f"is a file, not a {want.name}", path, fix)
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        if fmt != CHECKPOINT_FORMAT and holds_checkpoints(path):
            raise DatasetError(
                f"holds checkpoints (epoch-N folders), not a {want.name}",
                path,
                f"{fix}; resume the run that wrote them with --checkpoint-dir {path} --resume",
            )
        raise DatasetError(
            f"no meta.json: not a shardgnn {want.name} (or an interrupted copy)", path, fix
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(
            f"not valid JSON ({type(exc).__name__}: {exc})", meta_path, remake
        ) from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != fmt and isinstance(found, str) and found in DIRECTORY_KINDS:
        other = DIRECTORY_KINDS[found]
        raise DatasetError(
            f"is a {other.name}, not a {want.name}",
            path,
            f"{other.use.format(path=path)}; a {want.name} is written by {want.writer}",
        )
    if not isinstance(meta, dict) or found != fmt:
        raise DatasetError(
            f"names format {found!r}, not {fmt!r}"
            if isinstance(meta, dict)
            else f"holds a {type(meta).__name__}, not an object",
            meta_path,
            remake,
        )
    found_version = meta.get("version")
    if found_version != version:
        newer = isinstance(found_version, int) and found_version > version
        raise DatasetError(
            f"format {fmt!r} version {found_version!r} is not supported (this shardgnn reads "
            f"version {version})",
            meta_path,
            "upgrade shardgnn" if newer else remake,
        )
    return meta


_ARRAYS = (
    "indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx", "edge_weight", "edge_attr",
)  # fmt: skip
_FINITE_ARRAYS = {
    "x": "feature",
    "edge_weight": "edge weight (CSR order)",
    "edge_attr": "edge feature (CSR order)",
}
"""the arrays :func:`save_graph` refuses NaN or inf in (labels may hold NaN: "unknown")"""


def save_arrays(folder: Path, holder: Any, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Write each array attribute ``names`` of ``holder`` that is not None as
    ``folder/<name>.npy``; return ``meta.json["arrays"]`` for them (dtype and shape)."""
    arrays = {}
    for key in names:
        value = getattr(holder, key)
        if value is None:
            continue
        save_npy(folder / f"{key}.npy", value)
        arrays[key] = {"dtype": str(np.asarray(value).dtype), "shape": list(np.shape(value))}
    return arrays


def save_graph(graph: Graph, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write ``graph`` to directory ``path`` atomically (the directory appears complete or not at
    all)."""
    path = Path(path)
    graph.validate(str(path))  # what load_graph would refuse is not written
    for key, what in _FINITE_ARRAYS.items():  # refused here, not as a NaN loss an epoch later
        if getattr(graph, key) is not None:
            check_finite_features(getattr(graph, key), path, what=what, fix=FINITE_FIX)
    with atomic_directory(path, overwrite=overwrite) as tmp:
        arrays = save_arrays(tmp, graph, _ARRAYS)
        meta = {
            "format": GRAPH_FORMAT,
            "version": GRAPH_FORMAT_VERSION,
            "name": graph.name,
            "num_nodes": graph.num_nodes,
            "num_edges": graph.num_edges,
            "num_classes": graph.num_classes,
            "arrays": arrays,
        }
        if graph.node_ids is not None:
            meta["node_ids"] = save_node_ids(tmp, "node_ids.npy", graph.node_ids)
        if graph.class_names is not None:
            meta["class_names"] = list(graph.class_names)
        if graph.label_kind != "class":  # a class-labelled graph is written as before
            meta["label_kind"] = graph.label_kind
        save_json(tmp / "meta.json", meta)
    return path


def save_node_ids(folder: Path, file: str, ids: np.ndarray) -> dict[str, Any]:
    """Write ``folder/file`` (int64 or text ids) and return its ``meta.json`` record."""
    ids = np.ascontiguousarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iuU":
        raise DatasetError(
            f"node ids must be a 1-D integer or text array, not {ids.dtype} {list(ids.shape)}"
        )
    save_npy(folder / file, ids)
    return {"file": file, "dtype": str(ids.dtype), "shape": list(ids.shape)}


def load_node_ids(folder: Path, spec: Any, meta_path: Path, mmap: bool = False) -> np.ndarray:
    """The ids a :func:`save_node_ids` record names, checked against it."""
    file = spec.get("file") if isinstance(spec, dict) else None
    if not isinstance(file, str) or Path(file).name != file or file.startswith("."):
        raise DatasetError(
            f"meta.json is malformed: node ids {spec!r} must be {{file, dtype, shape}}",
            meta_path,
            "rewrite the directory",
        )
    array = load_npy(folder / file, mmap=mmap)
    if (
        list(array.shape) != spec.get("shape")
        or str(array.dtype) != spec.get("dtype")
        or array.ndim != 1
        or array.dtype.kind not in "iuU"
    ):
        raise DatasetError(
            f"holds {array.dtype} {list(array.shape)}, meta.json says {spec.get('dtype')} "
            f"{spec.get('shape')} (node ids: 1-D integers or text)",
            folder / file,
            "the file was replaced or truncated; rewrite the directory",
        )
    return array


def read_class_names(value: Any, meta_path: Path) -> tuple[str, ...] | None:
    """``meta.json["class_names"]``: a list of strings, or absent."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DatasetError(
            "meta.json is malformed: 'class_names' must be a list of strings",
            meta_path,
            "rewrite the directory",
        )
    return tuple(value)


def load_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """Load one ``.npy`` array without pickle, with a clear error for missing or broken files."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(
            "file is missing",
            path,
            "re-create the directory with `save_graph`/`shardgnn partition`",
        )
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic[:2] == b"\x1f\x8b":
        raise DatasetError(
            "is gzip-compressed, and an .npy array is read as it is (memory-mapped)",
            path,
            f"decompress it: gunzip {path}",
        )
    if magic[:1] == b"\x80":
        raise DatasetError(
            "is a Python pickle, which shardgnn never runs on a file",
            path,
            "save the array with numpy.save(path, array) (numbers: float32 features, int64 ids)",
        )
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    # truncated/empty, damaged header; or an object array (numpy's ValueError without pickle)
    except (ValueError, EOFError, SyntaxError, tokenize.TokenError) as exc:
        if "allow_pickle" in str(exc) or "Python objects" in str(exc):
            raise DatasetError(
                "holds Python objects (an object-dtype array: read only through pickle, which "
                "shardgnn never runs on a file)",
                path,
                "save numbers: numpy.save(path, np.asarray(values, dtype=np.float32)) (or int64 "
                "ids)",
            ) from None
        raise DatasetError(
            f"not a readable .npy array ({type(exc).__name__}: {exc})",
            path,
            "the file is corrupt or truncated; rewrite it",
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read ({exc})", path) from None


STORED_FINITE_FIX = (
    "the saving call refuses NaN and infinity, so the file was written another way after it: "
    "rewrite it with finite values (e.g. numpy.nan_to_num)"
)


def check_stored_finite(array: np.ndarray, file: Path, what: str) -> None:
    """Refuse NaN/inf values ``what`` in the stored ``file`` (read in blocks where memory-mapped):
    one line naming the file and the first row, when loaded, not a NaN loss an epoch later."""
    check_finite_features(array, file, what=what, fix=STORED_FINITE_FIX)


def load_graph(path: str | os.PathLike, mmap: bool = False) -> Graph:
    """Load a directory written by :func:`save_graph`; ``mmap=True`` memory-maps the arrays."""
    path = Path(path)
    meta_path = path / "meta.json"
    meta = read_directory_meta(path, GRAPH_FORMAT, GRAPH_FORMAT_VERSION, REMAKE_GRAPH)
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
        array = load_npy(path / f"{key}.npy", mmap=mmap and key in ("x", "indices", "edge_attr"))
        if list(array.shape) != spec.get("shape") or str(array.dtype) != spec.get("dtype"):
            raise DatasetError(
                f"{key}.npy has shape {list(array.shape)} dtype {array.dtype}, meta.json says "
                f"{spec.get('shape')} {spec.get('dtype')}",
                path / f"{key}.npy",
                "the file was replaced or truncated; rewrite it",
            )
        if key in _FINITE_ARRAYS:
            check_stored_finite(array, path / f"{key}.npy", _FINITE_ARRAYS[key])
        fields[key] = array
    if "indptr" not in fields or "indices" not in fields:
        raise DatasetError("meta.json lists no indptr/indices arrays", meta_path)
    if "node_ids" in meta:
        fields["node_ids"] = load_node_ids(path, meta["node_ids"], meta_path, mmap=mmap)
    fields["class_names"] = read_class_names(meta.get("class_names"), meta_path)
    label_kind = meta.get("label_kind", "class")
    problem = label_kind_problem(label_kind) if isinstance(label_kind, str) else "not a string"
    if problem is not None:
        raise DatasetError(f"label_kind: {problem}", meta_path, "rewrite the directory")
    graph = Graph(name=name, num_classes=num_classes, label_kind=label_kind, **fields)
    return graph.validate(str(path))
