"""Edge splits for link prediction: training, validation and test edges, reproducible from a seed.

Held-out (validation and test) edges leave the message-passing graph, both directions when the
graph is symmetric, so a model never sees an edge it is scored on. Every held-out positive gets
a fixed set of negatives drawn once (OGB's protocol): pairs ``(u, w)`` with the positive's source
``u`` and a node ``w`` that is not a neighbour of ``u`` in the full graph. The split is a pure
function of the graph and :class:`LinkSplitSpec`, so every worker and every resumed run that
computes it gets the same one.

Shape legend: ``P`` positive pairs, ``K`` negatives per positive.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from shardgnn.atomic import atomic_directory, save_json, save_npy
from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.io import load_npy


@dataclasses.dataclass(frozen=True)
class LinkSplitSpec:
    """How to split: the held-out fractions of the (undirected, for symmetric graphs) edges, the
    fixed negatives per held-out positive, and the seed."""

    val: float = 0.05
    test: float = 0.10
    eval_negatives: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("val", "test"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise DatasetError(
                    f"link split: the {name} fraction {value} must lie in (0, 1); e.g. "
                    "--link-val 0.05 --link-test 0.1"
                )
        if self.val + self.test >= 1.0:
            raise DatasetError(
                f"link split: val {self.val} + test {self.test} leave no training edges; keep "
                "their sum below 1"
            )
        if self.eval_negatives < 1:
            raise DatasetError(
                f"link split: eval_negatives={self.eval_negatives} must be >= 1 (AUC and AP use "
                "the first negative of every positive, MRR and Hits@K all of them)"
            )


@dataclasses.dataclass
class LinkSplit:
    """Target edges of a link-prediction run.

    Attributes:
        train_pos_2P: int64 ``[2, P]`` training target pairs ``(src, dst)``: every edge of the
            message-passing graph once (one direction of each undirected edge when ``symmetric``),
            self-loops excluded.
        val_pos_2P, test_pos_2P: int64 held-out positive pairs (absent from the training graph).
        val_neg_PK, test_neg_PK: int64 ``[P, K]`` negative destinations of each held-out positive
            (its negatives are ``(src, neg)``); never an edge of the full graph.
        symmetric: the graph stores every edge in both directions (a target edge then stands
            for both, and both are removed or excluded).
    """

    train_pos_2P: np.ndarray
    val_pos_2P: np.ndarray
    test_pos_2P: np.ndarray
    val_neg_PK: np.ndarray
    test_neg_PK: np.ndarray
    symmetric: bool
    spec: LinkSplitSpec

    def sizes(self) -> dict[str, int]:
        return {
            "train_edges": int(self.train_pos_2P.shape[1]),
            "val_edges": int(self.val_pos_2P.shape[1]),
            "test_edges": int(self.test_pos_2P.shape[1]),
            "eval_negatives": int(self.val_neg_PK.shape[1]),
        }


def edge_arrays(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` int64 of every edge, in CSR order."""
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    return np.asarray(graph.indices, dtype=np.int64), dst


def pair_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """One int64 per ``(src, dst)`` pair: ``dst * N + src`` (exact for ``N < 3e9``)."""
    return np.asarray(dst, dtype=np.int64) * np.int64(num_nodes) + np.asarray(src, dtype=np.int64)


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique(keys)`` by one sort (numpy 2.4's hashed ``unique`` took 1.3 s, against 0.08 s,
    for soc-slashdot's 948k edge keys)."""
    keys = np.sort(keys)
    return keys[np.r_[True, keys[1:] != keys[:-1]]] if keys.size else keys


def in_sorted(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_keys)`` for sorted ``sorted_keys``, by binary search (no sort
    of ``values``, no temporaries of the size of both)."""
    if not sorted_keys.size:
        return np.zeros(np.shape(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_keys, values), sorted_keys.size - 1)
    return sorted_keys[at] == values


def is_symmetric(graph: Graph) -> bool:
    """Whether every edge ``u -> v`` has its reverse ``v -> u``."""
    src, dst = edge_arrays(graph)
    n = graph.num_nodes
    forward = sorted_unique(pair_keys(src, dst, n))
    return bool(np.array_equal(forward, sorted_unique(pair_keys(dst, src, n))))


def split_edges(graph: Graph, spec: LinkSplitSpec) -> tuple[Graph, LinkSplit]:
    """The training graph (held-out edges removed) and the split; node data is kept as is."""
    n = graph.num_nodes
    src, dst = edge_arrays(graph)
    symmetric = is_symmetric(graph)
    keys = pair_keys(src, dst, n)
    # Candidate target pairs: unique, no self-loops, one direction per undirected edge.
    cand = (src < dst) if symmetric else (src != dst)
    cand_keys = sorted_unique(keys[cand])
    num = cand_keys.shape[0]
    rng = np.random.default_rng(spec.seed)
    n_val = int(round(spec.val * num))
    n_test = int(round(spec.test * num))
    if num == 0 or n_val < 1 or n_test < 1 or num - n_val - n_test < 1:
        raise DatasetError(
            f"link split of {graph.name!r}: {num} candidate edges (self-loops excluded"
            + (", one per undirected pair" if symmetric else "")
            + f") cannot give val {spec.val}, test {spec.test} and at least one training edge; "
            "use a graph with more edges or other fractions"
        )
    perm = rng.permutation(num)
    val_keys = cand_keys[perm[:n_val]]
    test_keys = cand_keys[perm[n_val : n_val + n_test]]
    train_keys = np.sort(cand_keys[perm[n_val + n_test :]])

    held = np.concatenate([val_keys, test_keys])
    if symmetric:
        hs, hd = held % n, held // n
        held = np.concatenate([held, pair_keys(hd, hs, n)])
    keep = ~in_sorted(keys, np.sort(held))
    rows = {name: a[keep] for name, a in graph.edge_rows().items()}
    train_graph = graph.with_edges(src[keep], dst[keep], rows)

    # Negatives are non-edges of the FULL graph (held-out edges included), in either direction
    # for symmetric graphs (the keys already hold both).
    all_keys = sorted_unique(keys)

    def pairs(k: np.ndarray) -> np.ndarray:
        return np.stack([k % n, k // n]).astype(np.int64)

    val_pos, test_pos = pairs(np.sort(val_keys)), pairs(np.sort(test_keys))
    val_neg = _eval_negatives(val_pos[0], all_keys, n, spec.eval_negatives, rng)
    test_neg = _eval_negatives(test_pos[0], all_keys, n, spec.eval_negatives, rng)
    split = LinkSplit(
        train_pos_2P=pairs(train_keys),
        val_pos_2P=val_pos,
        test_pos_2P=test_pos,
        val_neg_PK=val_neg,
        test_neg_PK=test_neg,
        symmetric=symmetric,
        spec=spec,
    )
    return train_graph, split


def _eval_negatives(
    src_P: np.ndarray, edge_keys: np.ndarray, n: int, k: int, rng: np.random.Generator
) -> np.ndarray:
    """``[P, K]`` uniform destinations ``w != src`` with ``(src, w)`` not an edge (rejection;
    ``edge_keys``: sorted unique :func:`pair_keys` of the edges).

    Each round redraws the rejected entries, in row-major order, and checks only those: a kept
    entry stays valid, so this is the rejection loop over the whole ``[P, K]`` array with the
    same draws, without its ``P * K`` keys per round (13M on soc-slashdot's test split)."""
    neg = rng.integers(0, n, size=(src_P.shape[0], k), dtype=np.int64)
    flat = neg.reshape(-1)
    # Flat positions to redraw (ascending): at first, of every entry, checked in chunks of rows.
    rows = max(1, _CHECK_CHUNK // k)
    parts = [np.zeros(0, dtype=np.int64)]
    for start in range(0, neg.shape[0], rows):
        src_R1 = src_P[start : start + rows, None]
        bad_RK = _rejected(src_R1, neg[start : start + rows], edge_keys, n)
        parts.append(start * k + np.flatnonzero(bad_RK))
    todo = np.concatenate(parts)
    for round_ in range(100):
        if round_:
            todo = todo[_rejected(src_P[todo // k], flat[todo], edge_keys, n)]
        if not todo.size:
            return neg
        flat[todo] = rng.integers(0, n, size=todo.size, dtype=np.int64)
    raise DatasetError(
        "link split: could not draw negatives that are not edges in 100 rounds; the graph is "
        "too dense for sampled negatives (some nodes are linked to almost every other node)"
    )


_CHECK_CHUNK = 1 << 20
"""Entries per chunk of the first rejection check (bounds its temporaries)."""


def _rejected(src: np.ndarray, dst: np.ndarray, edge_keys: np.ndarray, n: int) -> np.ndarray:
    """Whether each ``(src, dst)`` (broadcast) is a self-loop or an edge (``edge_keys`` sorted,
    unique): ``np.isin`` by binary search, without sorting the queries."""
    bad = src == dst
    bad |= in_sorted(pair_keys(src, dst, n), edge_keys)
    return bad


LINK_SPLIT_DIR = "link"
"""Where a partition directory keeps the link split of the graph it was made from."""

_SPLIT_ARRAYS = ("train_pos_2P", "val_pos_2P", "test_pos_2P", "val_neg_PK", "test_neg_PK")


def save_link_split(split: LinkSplit, directory: str | os.PathLike) -> Path:
    """Write ``split`` (node ids of the graph it was made from) as ``DIR/meta.json`` plus one
    ``.npy`` per array; the directory appears complete or not at all. A partition directory keeps
    it in ``link/`` so that every worker, and every resumed run, reads the same split."""
    directory = Path(directory)
    with atomic_directory(directory, overwrite=True) as tmp:
        for name in _SPLIT_ARRAYS:
            save_npy(tmp / f"{name}.npy", np.ascontiguousarray(getattr(split, name)))
        save_json(
            tmp / "meta.json",
            {"symmetric": split.symmetric, "spec": dataclasses.asdict(split.spec)},
        )
    return directory


_FIX = (
    "partition again with `shardgnn partition DATASET --task link --parts N --out DIR` (or "
    "`shardgnn train DATASET --task link --workers N`)"
)


def _read_split_meta(directory: Path) -> tuple[LinkSplitSpec, bool]:
    meta_path = directory / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        return LinkSplitSpec(**meta["spec"]), bool(meta["symmetric"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        message = f"no readable link split ({type(exc).__name__}: {exc})"
        raise DatasetError(message, meta_path, _FIX) from None


def read_link_split_spec(directory: str | os.PathLike) -> LinkSplitSpec:
    """How the split in ``directory`` was made (its arrays are not read).

    Raises:
        DatasetError: ``meta.json`` is missing or unreadable.
    """
    return _read_split_meta(Path(directory))[0]


def load_link_split(directory: str | os.PathLike) -> LinkSplit:
    """The split :func:`save_link_split` wrote, checked for shape.

    Raises:
        DatasetError: a file is missing, unreadable or of the wrong shape.
    """
    directory = Path(directory)
    spec, symmetric = _read_split_meta(directory)
    arrays = {name: load_npy(directory / f"{name}.npy") for name in _SPLIT_ARRAYS}
    for name, array in arrays.items():
        wanted_rows = 2 if name.endswith("_2P") else None
        if array.ndim != 2 or (wanted_rows and array.shape[0] != 2):
            raise DatasetError(f"{name}.npy has shape {array.shape}", directory, _FIX)
    return LinkSplit(**arrays, symmetric=symmetric, spec=spec)
