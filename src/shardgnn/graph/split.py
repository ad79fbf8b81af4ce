"""Seeded train/val/test splits and feature sanity checks shared by every loader."""

from __future__ import annotations

import os
import warnings

import numpy as np

from shardgnn.errors import DatasetError


def per_class_split(
    y: np.ndarray, train_per_class: int = 20, val_per_class: int = 30, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Shchur et al. (2018) split: ``train_per_class`` and ``val_per_class`` random nodes of
    every class, the rest test. Classes too small for both keep what they have for training first.
    """
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(y[y >= 0]):
        members = rng.permutation(np.flatnonzero(y == c))
        train.append(members[:train_per_class])
        val.append(members[train_per_class : train_per_class + val_per_class])
    train_idx = np.sort(np.concatenate(train)).astype(np.int64)
    val_idx = np.sort(np.concatenate(val)).astype(np.int64)
    labelled = np.flatnonzero(y >= 0)
    test_idx = np.setdiff1d(labelled, np.concatenate([train_idx, val_idx])).astype(np.int64)
    return train_idx, val_idx, test_idx


def fraction_split(
    num_nodes: int, train: float, val: float, seed: int = 0, labelled: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random ``train``/``val``/rest split of the (labelled) nodes, each part sorted."""
    if not (0 < train and 0 <= val and train + val <= 1):
        raise DatasetError(
            f"split fractions train={train}, val={val} must be positive and sum to at most 1"
        )
    nodes = (
        np.arange(num_nodes, dtype=np.int64) if labelled is None else np.asarray(labelled, np.int64)
    )
    perm = np.random.default_rng(seed).permutation(nodes)
    n_train = int(round(train * perm.size))
    n_val = int(round(val * perm.size))
    return (
        np.sort(perm[:n_train]),
        np.sort(perm[n_train : n_train + n_val]),
        np.sort(perm[n_train + n_val :]),
    )


NONFINITE_POLICIES = ("error", "zero")
FINITE_FIX = "replace them first (e.g. numpy.nan_to_num)"
"""the advice where NaN/inf values come through the Python API, which has no ``nonfinite``"""


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


_FINITE_BLOCK = 1 << 24
"""values :func:`all_finite` tests at a time (a memory-mapped matrix is never read whole)"""


def all_finite(x: np.ndarray) -> bool:
    """Whether every value of ``x`` is a finite number, read in blocks of rows."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":  # integers and booleans are always finite
        return True
    if x.ndim == 0:
        return bool(np.isfinite(x))
    rows = max(1, _FINITE_BLOCK // max(1, int(np.prod(x.shape[1:]))))
    return all(np.isfinite(x[i : i + rows]).all() for i in range(0, max(1, x.shape[0]), rows))


def check_finite_features(
    x: np.ndarray,
    source: str | os.PathLike,
    policy: str = "error",
    what: str = "feature",
    lines: np.ndarray | None = None,
    fix: str | None = None,
) -> np.ndarray:
    """Reject (``policy='error'``) or zero with a warning (``'zero'``) NaN/inf feature values
    (``what``: the kind of values, named in the message; rows are ``x``'s, or, given ``lines``
    (each row's line in a text file), named by their lines; ``fix``: what the message advises,
    where the caller is not a reader with a ``nonfinite`` option)."""
    if policy not in NONFINITE_POLICIES:
        raise DatasetError(
            f"unknown non-finite policy {policy!r}; choose one of {NONFINITE_POLICIES}"
        )
    if all_finite(x):
        return x
    bad = ~np.isfinite(x)
    rows = np.unique(np.nonzero(bad)[0])
    count = f"{_plural(int(bad.sum()), f'non-finite {what} value')} in {_plural(rows.size, 'row')}"
    if policy == "error":
        first = f"line {lines[rows[0]]}" if lines is not None else f"row {rows[0]}, counted from 0"
        raise DatasetError(
            f"{count} (the first: {first})",
            source,
            fix
            or "clean the values, or replace them by 0 with a warning: `--nonfinite zero` "
            "(shardgnn convert) or the dataset option `nonfinite=zero` (cora:nonfinite=zero, "
            "temporal:FILE,nonfinite=zero)",
        )
    warnings.warn(f"{source}: replaced {count} by 0", stacklevel=2)
    x = np.array(x, dtype=np.float32, copy=True)
    x[bad] = 0.0
    return x
