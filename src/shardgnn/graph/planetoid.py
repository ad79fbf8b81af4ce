"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the ``ind.<name>.*`` files.

Reproduces Kipf & Welling's ``load_data``: features and labels are ``vstack(allx, tx)`` /
``vstack(ally, ty)`` where row ``j`` of ``tx``/``ty`` belongs to node ``test.index[j]`` (the file
order); test-range ids listed in no ``test.index`` line (CiteSeer's 15 isolated nodes) get a zero
feature row and label ``-1``. The adjacency dict is symmetrised, coalesced and stripped of
self-loops. The public split is train ``range(len(y))``, val ``range(len(y), len(y) + 500)`` and
test the sorted ``test.index``.

The pickles are read with :mod:`shardgnn.graph.safe_pickle`, never with plain ``pickle.load``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.edgelist import read_numeric_table
from shardgnn.graph.safe_pickle import dense_float32, safe_load

_PICKLED = ("x", "y", "tx", "ty", "allx", "ally", "graph")
_FILES = _PICKLED + ("test.index",)
_NUM_VAL = 500
_SOURCE = "https://github.com/kimiyoung/planetoid/tree/master/data"


def _check_present(folder: Path, name: str) -> None:
    missing = [
        folder / f"ind.{name}.{part}"
        for part in _FILES
        if not (folder / f"ind.{name}.{part}").is_file()
    ]
    if not missing:
        return
    listed = ", ".join(p.name for p in missing)
    message = f"missing Planetoid file(s) {listed}"
    if name == "pubmed" and [p.name for p in missing] == ["ind.pubmed.allx"]:
        message += (
            " (ind.pubmed.allx, the 18,717 x 500 feature block, is known to be missing from the "
            "shared offline copy; PubMed has complete structure and labels but features for 1,060 "
            "nodes only)"
        )
    raise DatasetError(
        message,
        missing[0],
        f"put all eight ind.{name}.{{x,y,tx,ty,allx,ally,graph,test.index}} files from {_SOURCE} "
        f"into {folder}",
    )


def _onehot_labels(obj: object, path: Path) -> tuple[np.ndarray, int]:
    """One-hot rows -> ``(class ids, number of classes)``; an all-zero row gives ``-1``
    (unlabelled)."""
    onehot = dense_float32(obj, path, "one-hot label", nonfinite=None)
    labels = onehot.argmax(axis=1).astype(np.int64)
    labels[~onehot.any(axis=1)] = -1
    return labels, onehot.shape[1]


def _adjacency_edges(obj: object, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``src, dst`` arrays of a ``{node: [neighbours]}`` adjacency dict."""
    if not isinstance(obj, Mapping):
        raise DatasetError(
            f"expected an adjacency dict, found {type(obj).__name__}",
            path,
            "the file is corrupt; re-download it",
        )
    try:
        keys = np.fromiter(obj.keys(), dtype=np.int64, count=len(obj))
        degrees = np.fromiter((len(v) for v in obj.values()), dtype=np.int64, count=len(obj))
        dst = np.fromiter(
            itertools.chain.from_iterable(obj.values()), dtype=np.int64, count=int(degrees.sum())
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise DatasetError(
            f"adjacency dict must map node ids to lists of node ids ({exc})",
            path,
            "the file is corrupt; re-download it",
        ) from None
    return np.repeat(keys, degrees), dst


def load_planetoid(folder: Path, name: str, nonfinite: str = "error") -> Graph:
    """Load a Planetoid dataset (``cora``, ``citeseer``, ``pubmed``) with its public split.

    Args:
        folder: the directory holding ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}``.
        name: the dataset name used in the file names.
        nonfinite: ``"error"`` rejects NaN/inf features, ``"zero"`` replaces them with a warning.

    Returns:
        A symmetric :class:`Graph` without self-loops, dense float32 features, int64 labels
        (``-1`` = unlabelled) and the public train/val/test split.

    Raises:
        DatasetError: a file is missing (naming it), truncated, corrupt or inconsistent.
    """
    folder = Path(folder)
    _check_present(folder, name)
    paths = {part: folder / f"ind.{name}.{part}" for part in _FILES}
    objects = {part: safe_load(paths[part]) for part in _PICKLED}

    test_ids, _ = read_numeric_table(paths["test.index"], np.int64, comments=False)
    if test_ids.size == 0 or test_ids.shape[1] != 1:
        raise DatasetError(
            "expected one node id per line", paths["test.index"], "re-download the file"
        )
    test_ids = test_ids[:, 0]

    allx = dense_float32(objects["allx"], paths["allx"], "feature", nonfinite)
    tx = dense_float32(objects["tx"], paths["tx"], "feature", nonfinite)
    ally, num_classes = _onehot_labels(objects["ally"], paths["ally"])
    ty, ty_classes = _onehot_labels(objects["ty"], paths["ty"])
    num_train = _onehot_labels(objects["y"], paths["y"])[0].shape[0]
    num_features = allx.shape[1]
    index_name = paths["test.index"].name
    for part, shape, expected in (
        ("tx", tx.shape, (test_ids.size, num_features)),
        ("ty", (ty.shape[0], ty_classes), (test_ids.size, num_classes)),
        ("ally", (ally.shape[0], num_classes), (allx.shape[0], num_classes)),
    ):
        if shape != expected:
            raise DatasetError(
                f"has shape {shape}, expected {expected} to match allx/ally and the "
                f"{test_ids.size} ids of {index_name}",
                paths[part],
                "a file is truncated or from another dataset; re-download all eight files",
            )

    src, dst = _adjacency_edges(objects["graph"], paths["graph"])
    num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    if src.size and min(src.min(), dst.min()) < 0:
        raise DatasetError(
            "adjacency holds negative node ids", paths["graph"], "re-download the file"
        )
    if (
        np.unique(test_ids).size != test_ids.size
        or test_ids.min() < allx.shape[0]
        or test_ids.max() + 1 != num_nodes
    ):
        raise DatasetError(
            f"test ids must be distinct, >= len(allx) = {allx.shape[0]} and end at the last "
            f"node {num_nodes - 1} of {paths['graph'].name}; found range "
            f"[{test_ids.min()}, {test_ids.max()}]",
            paths["test.index"],
            "a file is truncated or from another dataset; re-download all eight files",
        )
    if num_train + _NUM_VAL > allx.shape[0]:
        raise DatasetError(
            f"{num_train} training + {_NUM_VAL} validation nodes exceed the {allx.shape[0]} "
            "rows of allx",
            paths["y"],
            "re-download the dataset files",
        )

    x = np.zeros((num_nodes, num_features), dtype=np.float32)
    x[: allx.shape[0]] = allx
    x[test_ids] = tx
    y = np.full(num_nodes, -1, dtype=np.int64)
    y[: ally.shape[0]] = ally
    y[test_ids] = ty
    graph = Graph.from_edge_index(
        src,
        dst,
        num_nodes,
        x=x,
        y=y,
        train_idx=np.arange(num_train, dtype=np.int64),
        val_idx=np.arange(num_train, num_train + _NUM_VAL, dtype=np.int64),
        test_idx=np.sort(test_ids),
        num_classes=num_classes,
        name=name,
    )
    return graph.symmetrize().remove_self_loops().validate(str(folder))


__all__ = ["load_planetoid"]
