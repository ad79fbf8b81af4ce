"""Feature preprocessing shared by every trainer and by inference (``--feature-norm``).

``row`` makes every row sum to one (Planetoid practice); ``standard`` z-scores every column. A
distributed run normalises each part's rows where they live: ``row`` needs nothing global, and
:func:`row_sums` gives the divisors of a memory-mapped matrix without reading it into RAM.
"""

from __future__ import annotations

import numpy as np

FEATURE_NORMS = ("none", "row", "standard")

SPARSE_MAX_DENSITY = 0.1
"""features with at most this share of non-zero entries are stored sparse (and, full-graph,
multiplied sparse)"""


def stored_sparse(nonzeros: int, entries: int, max_density: float = SPARSE_MAX_DENSITY) -> bool:
    """Whether features with ``nonzeros`` of their ``entries`` non-zero are stored sparse."""
    return entries > 0 and nonzeros <= max_density * entries


def normalize_features(x: np.ndarray, how: str) -> np.ndarray:
    """``row``: rows sum to one; ``standard``: per-column z-score; ``none``: ``x`` unchanged."""
    assert how in FEATURE_NORMS, how
    if how == "none":
        return x
    x = np.asarray(x, dtype=np.float32)
    if how == "row":
        sums = x.sum(axis=1, keepdims=True)
        return x / np.where(sums == 0, 1.0, sums).astype(np.float32)
    mean, std = x.mean(axis=0, keepdims=True), x.std(axis=0, keepdims=True)
    return (x - mean) / np.where(std == 0, 1.0, std).astype(np.float32)


def row_sums(array: np.ndarray, chunk_rows: int = 65536) -> np.ndarray:
    """Row sums (1 for all-zero rows: a divisor) of a possibly memory-mapped matrix, read in
    chunks; dividing by them equals ``normalize_features(x, "row")`` bit for bit."""
    out = np.empty(array.shape[0], dtype=np.float32)
    for start in range(0, array.shape[0], chunk_rows):
        sums = np.asarray(array[start : start + chunk_rows], dtype=np.float32).sum(axis=1)
        out[start : start + chunk_rows] = np.where(sums == 0, 1.0, sums)
    return out
