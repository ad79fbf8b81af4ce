"""Counter-based dropout: whether element ``(v, c)`` of node ``v``'s row is dropped depends only
on ``(seed, v, c)``, where ``v`` is the node's key, its id in the original graph (the seed changes
per step and layer).

A rank that holds any rows of a partitioned matrix therefore draws exactly the mask rows a single
process draws for those nodes, whatever the partitioning relabelled them to, which is what lets
distributed full-graph training equal single-process training (loss within 1e-5) with dropout on.
The mask is made by a parallel numba kernel, also cheaper than torch's single-threaded Bernoulli
sampling on CPU.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from shardgnn.nn.functional import is_sparse
from shardgnn.nn.kernels import numba_threads_like_torch
from shardgnn.sampling.device import splitmix64 as device_splitmix64
from shardgnn.sampling.kernels import KERNEL_LOCK, splitmix64


@numba.njit(parallel=True, cache=True)
def _dense_mask(row_ids, num_cols, seed, threshold, scale):
    out = np.empty((row_ids.shape[0], num_cols), dtype=np.float32)
    for i in numba.prange(row_ids.shape[0]):
        base = splitmix64(np.uint64(seed) ^ splitmix64(np.uint64(row_ids[i])))
        for c in range(num_cols):
            keep = (splitmix64(base + np.uint64(c)) >> np.uint64(32)) >= threshold
            out[i, c] = scale if keep else np.float32(0.0)
    return out


@numba.njit(parallel=True, cache=True)
def _sparse_mask(rows, cols, seed, threshold, scale):
    out = np.empty(rows.shape[0], dtype=np.float32)
    for i in numba.prange(rows.shape[0]):
        base = splitmix64(np.uint64(seed) ^ splitmix64(np.uint64(rows[i])))
        keep = (splitmix64(base + np.uint64(cols[i])) >> np.uint64(32)) >= threshold
        out[i] = scale if keep else np.float32(0.0)
    return out


def _device_mask(
    h: torch.Tensor,
    seed: int | torch.Tensor,
    threshold: np.uint64,
    scale: np.float32,
    row_offset: int,
    row_ids: torch.Tensor | None,
) -> torch.Tensor:
    """The kernels' dense mask, computed on ``h``'s device (the same bits: no host round trip)."""
    if row_ids is None:
        row_ids = torch.arange(row_offset, row_offset + h.shape[0], device=h.device)
    elif row_ids.shape[0] != h.shape[0]:
        raise ValueError(f"{row_ids.shape[0]} row ids for {h.shape[0]} rows")
    base = device_splitmix64(seed ^ device_splitmix64(row_ids.to(h.device, torch.int64)))
    cols = torch.arange(h.shape[1] if h.dim() > 1 else 1, device=h.device)
    draws = device_splitmix64(base.unsqueeze(1) + cols)
    keep = ((draws >> 32) & 0xFFFFFFFF) >= int(threshold)
    return (keep.to(h.dtype) * float(scale)).reshape(h.shape)


def _threshold(p: float) -> np.uint64:
    return np.uint64(min(int(round(p * 2.0**32)), 2**32))


def hashed_dropout(
    h: torch.Tensor,
    p: float,
    seed: int | torch.Tensor,
    row_offset: int = 0,
    row_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dropout of ``h`` (dense ``[R, F]`` or sparse COO) whose rows are nodes
    ``row_offset .. row_offset + R - 1`` (or the global ids ``row_ids``, e.g. a sampled block's
    source nodes); kept entries are scaled by ``1 / (1 - p)``.

    Differentiable (the gradient is masked the same way). ``seed`` should differ per call
    (e.g. ``mix_seed(base, step, layer)``); it must be below 2**63. It may be a 0-dim int64
    tensor on ``h``'s device (a captured CUDA graph's, filled before each replay).
    """
    if p == 0.0:
        return h
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability {p} must lie in [0, 1)")
    scale = np.float32(1.0 / (1.0 - p))
    threshold = _threshold(p)
    if h.device.type != "cpu" and not is_sparse(h):
        return h * _device_mask(h, seed, threshold, scale, row_offset, row_ids)
    seed = int(seed)  # a tensor's read here: the host kernels take a number
    ids = None if row_ids is None else row_ids.detach().cpu().numpy().astype(np.int64, copy=False)
    if ids is not None and ids.shape[0] != h.shape[0]:
        raise ValueError(f"{ids.shape[0]} row ids for {h.shape[0]} rows")
    if is_sparse(h):
        h = h.coalesce()
        idx = h.indices().cpu().numpy()
        rows = ids[idx[0]] if ids is not None else idx[0].astype(np.int64) + row_offset
        with KERNEL_LOCK, numba_threads_like_torch():
            mask = _sparse_mask(rows, idx[1].astype(np.int64), seed, threshold, scale)
        values = h.values() * torch.from_numpy(mask).to(h.device, h.dtype)
        return torch.sparse_coo_tensor(
            h.indices(), values, h.shape, is_coalesced=True, check_invariants=False
        )
    if ids is None:
        ids = np.arange(row_offset, row_offset + h.shape[0], dtype=np.int64)
    with KERNEL_LOCK, numba_threads_like_torch():
        mask = _dense_mask(ids, h.shape[1] if h.dim() > 1 else 1, seed, threshold, scale)
    return h * torch.from_numpy(mask).reshape(h.shape).to(h.device, h.dtype)
