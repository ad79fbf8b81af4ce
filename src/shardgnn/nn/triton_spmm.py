"""CSR SpMM on a GPU as one Triton kernel: the numba kernels' row loop (:mod:`shardgnn.nn.kernels`)
for CUDA tensors.

torch's sparse CSR product costs about 0.8 ms of host time a call on a GPU (descriptors,
cuSPARSE's buffer query, the values array built per call) and its backward as much again; a
sampled batch of a 3-layer model makes five of them, so the SpMMs alone were near half of a
GPU batch's host time (BENCHMARKS section 18b's profile). Here a call is one launch: each
program takes one CSR row and ``BLOCK_F`` feature columns, gathers the rows of ``BLOCK_E`` edges
at once (their loads in flight together), weighs them and adds the tile's sum, tile after tile in
CSR order. Every output element is summed in one fixed order: deterministic, whatever the
launch's scheduling (no atomics); it equals :func:`shardgnn.nn.kernels.csr_spmm` (edge after
edge) to float32 rounding. The backward pass runs the same kernel over the cached transpose.

Without a GPU the kernel runs under Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``
set before this module is imported; how it is tested on CPUs). This module needs Triton;
:mod:`shardgnn.nn.message_graph` imports it only for CUDA tensors.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# Edges a program gathers at once: a sampled block's rows (fanouts up to 15) take one step, a
# whole graph's (average degree ~20 on the peers graph) two, with every row's load in flight.
BLOCK_E = 16


@triton.jit
def _csr_spmm(
    indptr_ptr, indices_ptr, values_ptr, h_ptr, out_ptr, width,
    HAS_VALUES: tl.constexpr, MEAN: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    live = cols < width
    lo = tl.load(indptr_ptr + row)
    hi = tl.load(indptr_ptr + row + 1)
    acc = tl.zeros((BLOCK_F,), dtype=tl.float32)
    if MEAN:  # 1 / deg rounded as the numba kernels and the values path round it
        w = 1.0 / tl.maximum(hi - lo, 1).to(tl.float32)
    else:
        w = 1.0
    for start in range(lo, hi, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        edge = e < hi
        s = tl.load(indices_ptr + e, mask=edge, other=0).to(tl.int64)
        h = tl.load(
            h_ptr + s[:, None] * width + cols[None, :],
            mask=edge[:, None] & live[None, :],
            other=0.0,
        )
        if HAS_VALUES:
            h = h * tl.load(values_ptr + e, mask=edge, other=0.0)[:, None]
        else:
            h = h * w
        acc += tl.sum(h, axis=0)  # a fixed tree over the tile: the same bits every call
    tl.store(out_ptr + row * width + cols, acc, mask=live)


def csr_spmm(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    values: torch.Tensor | None,
    mean: bool,
    h_SF: torch.Tensor,
) -> torch.Tensor:
    """``out[d] = sum_e w_e * h_SF[indices[e]]`` over the edges ``e`` of row ``d`` of the CSR
    ``(indptr, indices)``: ``w_e = values[e]``, or with ``values`` None ``1 / deg(d)`` if
    ``mean`` else 1 (the arguments of :func:`shardgnn.nn.kernels.csr_spmm`). float32 rows, int64
    indices; rows without edges are zero."""
    if h_SF.device.type != "cuda" and not INTERPRETED:
        raise ValueError(
            f"the Triton SpMM runs on a CUDA device, or on {h_SF.device} with TRITON_INTERPRET=1"
            " set before shardgnn.nn.triton_spmm is imported"
        )
    h_SF = h_SF.contiguous()
    rows, width = int(indptr.shape[0]) - 1, int(h_SF.shape[1])
    out = torch.empty((rows, width), dtype=h_SF.dtype, device=h_SF.device)
    if rows and width:
        block = min(128, triton.next_power_of_2(width))  # a [16, 128] tile: 16 floats a thread
        _csr_spmm[(rows, triton.cdiv(width, block))](
            indptr, indices, indices if values is None else values, h_SF, out, width,
            HAS_VALUES=values is not None, MEAN=mean, BLOCK_E=BLOCK_E, BLOCK_F=block,
            num_warps=max(1, min(4, block // 32)),
        )  # fmt: skip
    return out
