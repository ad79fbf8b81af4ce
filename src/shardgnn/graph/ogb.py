"""OGB node-property datasets (ogbn-arxiv, ogbn-products) from OGB's raw ``csv.gz`` layout.

The folder ``data_dir/<name with - replaced by _>/`` (``ogbn_arxiv/``, as the ``ogb`` package
names it) holds::

    raw/edge.csv.gz            "src,dst" per line, no header
    raw/num-node-list.csv.gz   the node count
    raw/num-edge-list.csv.gz   the edge count (optional; checked when present)
    raw/node-feat.csv.gz       one comma-separated float row per node
    raw/node-label.csv.gz      one class id per node (``nan`` = unlabelled)
    split/<split>/{train,valid,test}.csv.gz   one node id per line

When the folder is missing it is downloaded from the OGB site (unless ``download=False``) and
extracted atomically. No pandas and no ``ogb`` package are needed: the CSVs go through the
vectorised reader of :mod:`shardgnn.graph.edgelist`. Edges are symmetrised (the common practice
for both datasets; products is undirected), coalesced and stripped of self-loops.
"""

from __future__ import annotations

import dataclasses
import http.client
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.edgelist import read_numeric_table
from shardgnn.graph.split import check_finite_features

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_S = 30
_SPLIT_PARTS = ("train", "valid", "test")


@dataclasses.dataclass(frozen=True)
class OgbDataset:
    """What the loader needs to know about one OGB node-property dataset."""

    url: str
    split: str
    num_classes: int
    symmetrize: bool = True


OGB_DATASETS: dict[str, OgbDataset] = {
    "ogbn-arxiv": OgbDataset(
        "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip", "time", 40
    ),
    "ogbn-products": OgbDataset(
        "http://snap.stanford.edu/ogb/data/nodeproppred/products.zip", "sales_ranking", 47
    ),
}


def ogb_folder(data_dir: Path, name: str) -> Path:
    """Where the dataset ``name`` lives under ``data_dir`` (``ogbn-arxiv`` -> ``ogbn_arxiv``)."""
    return Path(data_dir) / name.replace("-", "_")


def expected_files(folder: Path, info: OgbDataset) -> dict[str, Path]:
    """The files the loader reads, by role (``edge``, ``num-node-list``, ..., ``train``, ``valid``,
    ``test``)."""
    files = {
        role: folder / "raw" / f"{role}.csv.gz"
        for role in ("edge", "num-node-list", "node-feat", "node-label")
    }
    files.update({part: folder / "split" / info.split / f"{part}.csv.gz" for part in _SPLIT_PARTS})
    return files


def _manual_fix(name: str, info: OgbDataset, folder: Path, mention_flag: bool = True) -> str:
    """How to provide the files by hand (and, when a download was attempted, how to skip it)."""
    listing = "\n    ".join(str(p) for p in expected_files(folder, info).values())
    fix = f"download {info.url} yourself and unzip it so that these files exist:\n    {listing}"
    if mention_flag:
        fix += (
            f"\n  or add `:download=0` to the dataset spec (`{name}:download=0`) to skip the "
            "download attempt"
        )
    return fix


def _download(name: str, info: OgbDataset, folder: Path) -> None:
    """Fetch and unzip ``info.url`` into ``folder`` atomically (extract to a temp dir, then
    rename)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s from %s", name, info.url)
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent) as tmp:
        archive = Path(tmp) / "download.zip"
        try:
            with (
                urllib.request.urlopen(info.url, timeout=DOWNLOAD_TIMEOUT_S) as response,
                open(archive, "wb") as out,
            ):
                shutil.copyfileobj(response, out, 1 << 20)
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(Path(tmp) / "extracted")  # extractall drops absolute paths and '..'
        except (
            urllib.error.URLError,
            http.client.HTTPException,
            TimeoutError,
            OSError,
            zipfile.BadZipFile,
            EOFError,
        ) as exc:
            raise DatasetError(
                f"the download of {name} from {info.url} failed ({exc})",
                folder,
                _manual_fix(name, info, folder),
            ) from None
        # OGB zips hold one top folder (arxiv/, products/) with raw/ and split/ inside.
        extracted = Path(tmp) / "extracted"
        roots = [extracted] + sorted(p for p in extracted.iterdir() if p.is_dir())
        root = next((p for p in roots if (p / "raw").is_dir()), None)
        if root is None:
            raise DatasetError(
                f"the archive {info.url} holds no raw/ folder",
                folder,
                _manual_fix(name, info, folder),
            )
        try:
            os.replace(root, folder)
        except OSError:
            if not folder.is_dir():  # another process may have finished first; that copy is fine
                raise


def _column(path: Path, dtype: type, what: str) -> np.ndarray:
    """A one-column csv.gz as a 1-D array."""
    table, _ = read_numeric_table(path, dtype)
    if table.ndim != 2 or (table.size and table.shape[1] != 1):
        raise DatasetError(
            f"expected one {what} per line, found {table.shape[1]} columns",
            path,
            "the file is corrupt; re-download the dataset",
        )
    return table.reshape(-1)


def _check_ids(
    ids: np.ndarray, num_nodes: int, path: Path, lines: np.ndarray | None = None
) -> None:
    """Reject node ids outside ``[0, num_nodes)``, naming the first offending line."""
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        first = int(np.flatnonzero(bad.reshape(len(ids), -1).any(axis=1))[0])
        line = int(lines[first]) if lines is not None else first + 1
        raise DatasetError(
            f"line {line}: node id {ids.reshape(len(ids), -1)[first].tolist()} is out of range "
            f"[0, {num_nodes})",
            path,
            "the file is corrupt or from another dataset; re-download it",
        )


def load_ogb_nodeprop(
    data_dir: Path, name: str, download: bool = True, nonfinite: str = "error"
) -> Graph:
    """Load an OGB node-property dataset from its raw ``csv.gz`` layout (see the module docstring).

    Args:
        data_dir: the data directory; the dataset lives in ``data_dir/<name with - -> _>``.
        name: ``ogbn-arxiv`` or ``ogbn-products``.
        download: download and extract the dataset when its folder is missing.
        nonfinite: ``"error"`` rejects NaN/inf features, ``"zero"`` replaces them with a warning.

    Returns:
        A symmetric :class:`Graph` without self-loops, float32 features, int64 labels (``-1`` =
        unlabelled) and the official train/valid/test split.

    Raises:
        DatasetError: unknown name, failed download, missing files (each named), ragged rows,
        out-of-range ids, count mismatches, overlapping splits or non-finite features.
    """
    info = OGB_DATASETS.get(name)
    if info is None:
        raise DatasetError(
            f"unknown OGB dataset {name!r}", fix=f"choose one of {sorted(OGB_DATASETS)}"
        )
    folder = ogb_folder(Path(data_dir), name)
    if not folder.is_dir():
        if not download:
            raise DatasetError(
                f"{name} is not in the data directory and download=0 forbids fetching it",
                folder,
                _manual_fix(name, info, folder, mention_flag=False),
            )
        _download(name, info, folder)
    files = expected_files(folder, info)
    missing = [p for p in files.values() if not p.is_file()]
    if missing:
        raise DatasetError(
            f"missing OGB file(s): {', '.join(str(p) for p in missing)}",
            missing[0],
            _manual_fix(name, info, folder, mention_flag=False),
        )

    counts = _column(files["num-node-list"], np.int64, "node count")
    if counts.size != 1 or counts[0] <= 0:
        raise DatasetError(
            f"expected one positive node count, found {counts.tolist()[:5]}",
            files["num-node-list"],
            "re-download the dataset",
        )
    num_nodes = int(counts[0])

    edges, edge_lines = read_numeric_table(files["edge"], np.int64)
    if edges.shape[0] == 0 or edges.shape[1] != 2:
        raise DatasetError(
            f"expected `src,dst` rows, found shape {edges.shape}", files["edge"], "re-download it"
        )
    _check_ids(edges, num_nodes, files["edge"], edge_lines)
    num_edge_file = folder / "raw" / "num-edge-list.csv.gz"
    if num_edge_file.is_file():
        declared = _column(num_edge_file, np.int64, "edge count")
        if declared.size == 1 and declared[0] != edges.shape[0]:
            raise DatasetError(
                f"holds {edges.shape[0]} edges but {num_edge_file.name} declares {declared[0]}",
                files["edge"],
                "the file is truncated; re-download the dataset",
            )

    x, _ = read_numeric_table(files["node-feat"], np.float32)
    if x.shape[0] != num_nodes:
        raise DatasetError(
            f"{x.shape[0]} feature rows for {num_nodes} nodes",
            files["node-feat"],
            "the file is truncated; re-download the dataset",
        )
    x = check_finite_features(x, files["node-feat"], nonfinite)

    raw_labels = _column(files["node-label"], np.float64, "label")
    if raw_labels.size != num_nodes:
        raise DatasetError(
            f"{raw_labels.size} labels for {num_nodes} nodes (label count != node count)",
            files["node-label"],
            "the file is truncated; re-download the dataset",
        )
    labelled = ~np.isnan(raw_labels)
    bad = labelled & (
        (raw_labels != np.floor(raw_labels)) | (raw_labels < 0) | (raw_labels >= info.num_classes)
    )
    if bad.any():
        raise DatasetError(
            f"label {raw_labels[bad][0]} of node {np.flatnonzero(bad)[0]} is not a class id in "
            f"[0, {info.num_classes})",
            files["node-label"],
            "re-download the dataset",
        )
    y = np.where(labelled, raw_labels, -1).astype(np.int64)

    splits: dict[str, np.ndarray] = {}
    for part in _SPLIT_PARTS:
        ids = _column(files[part], np.int64, "node id")
        _check_ids(ids, num_nodes, files[part])
        if np.unique(ids).size != ids.size:
            raise DatasetError("lists a node twice", files[part], "re-download the dataset")
        for other, other_ids in splits.items():
            both = np.intersect1d(ids, other_ids)
            if both.size:
                raise DatasetError(
                    f"overlapping splits: {both.size} nodes (e.g. {both[0]}) are in both "
                    f"{files[other].name} and {files[part].name}",
                    files[part],
                    "make the split files disjoint (re-download the dataset)",
                )
        splits[part] = ids

    graph = Graph.from_edge_index(
        edges[:, 0],
        edges[:, 1],
        num_nodes,
        x=x,
        y=y,
        train_idx=np.sort(splits["train"]),
        val_idx=np.sort(splits["valid"]),
        test_idx=np.sort(splits["test"]),
        num_classes=info.num_classes,
        name=name,
    )
    graph = graph.symmetrize() if info.symmetrize else graph.coalesce()
    return graph.remove_self_loops().validate(str(folder))


__all__ = ["OGB_DATASETS", "OgbDataset", "expected_files", "load_ogb_nodeprop", "ogb_folder"]
