"""One hop of uniform neighbour sampling as one Triton kernel (the GPU sampler's fast path).

The tensor code of :mod:`shardgnn.sampling.device` draws a hop with a dozen elementwise kernels
per hash and one small step per Floyd draw: on a GPU that is hundreds of launches per hop, and the
GPU idled between them (BENCHMARKS section 18: sampling 66 % of the epoch, 1.3x the CPU
sampler). Here one launch does the hop: each program takes ``BLOCK`` frontier rows, hashes every
draw, runs Floyd's algorithm with the row's earlier picks held in registers (a ``[BLOCK, K]``
tile), and writes the edge ids and neighbour ids.

The draws are the numba kernels' bit for bit (the same splitmix64 counters, the same Floyd steps,
the same multiply-shift map to ``[0, n)``), so a block is the same whichever sampler drew it.
Without a GPU the kernel runs under Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1`` set
before this module is imported; how it is tested on CPUs).

This module needs Triton; :mod:`shardgnn.sampling.device` imports it only where it draws.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from shardgnn.sampling.config import FUSED_MAX_FANOUT

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _splitmix64(x):
    """The kernels' splitmix64 on uint64 (products wrap, shifts are logical)."""
    z = x + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _below(h, n):
    """The kernels' multiply-shift map of a hash to ``[0, n)`` (top 32 bits times n, top 32)."""
    return (((h >> 32) * n.to(tl.uint64)) >> 32).to(tl.int64)


# Seeds and sizes vary per call: specialising on them (Triton does for 1 and multiples of 16)
# would compile a kernel per value.
@triton.jit(do_not_specialize=["n_rows", "seed", "id_offset"])
def _fill_hop(
    indptr_ptr, indices_ptr, frontier_ptr, offsets_ptr, nbr_ptr, eid_ptr, seed_ptr,
    n_rows, seed, id_offset,
    REPLACE: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr, PER_ROW: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = rows < n_rows
    v = tl.load(frontier_ptr + rows, mask=live, other=0)
    start = tl.load(indptr_ptr + v, mask=live, other=0)
    deg = tl.load(indptr_ptr + v + 1, mask=live, other=0) - start
    lo = tl.load(offsets_ptr + rows, mask=live, other=0)
    k = tl.load(offsets_ptr + rows + 1, mask=live, other=0) - lo
    if PER_ROW:  # several batches' frontiers stacked, each row drawn with its batch's seed
        row_seed = tl.load(seed_ptr + rows, mask=live, other=0).to(tl.uint64, bitcast=True)
    else:
        row_seed = seed.to(tl.uint64)
    key = _splitmix64(row_seed ^ _splitmix64((v + id_offset).to(tl.uint64)))
    cols = tl.arange(0, K)
    pos = tl.zeros((BLOCK, K), dtype=tl.int64) + cols[None, :]
    if REPLACE:
        h = _splitmix64(key[:, None] + cols[None, :].to(tl.uint64))
        pos = _below(h, tl.maximum(deg, 1)[:, None] + tl.zeros((BLOCK, K), dtype=tl.int64))
    else:
        # Floyd: pick q comes from [0, top], top = deg - k + q; a repeat of an earlier pick takes
        # top instead. A draw's hash does not depend on earlier picks, so all are hashed at once.
        top = (deg - k)[:, None] + cols[None, :]
        draws = _below(_splitmix64(key[:, None] + top.to(tl.uint64)), top + 1)
        picks = tl.zeros((BLOCK, K), dtype=tl.int64) - 1
        for q in range(0, K):  # a loop, not unrolled: K is up to FUSED_MAX_FANOUT
            at = cols[None, :] == q
            pick = tl.max(tl.where(at, draws, -1), axis=1)
            seen = tl.max(((picks == pick[:, None]) & (cols[None, :] < q)).to(tl.int32), axis=1)
            pick = tl.where(seen > 0, deg - k + q, pick)
            picks = tl.where(at, pick[:, None], picks)
        pos = tl.where((k == deg)[:, None], pos, picks)  # rows that keep every neighbour
    write = live[:, None] & (cols[None, :] < k[:, None])
    eid = start[:, None] + pos
    nbr = tl.load(indices_ptr + eid, mask=write, other=0).to(tl.int64)
    slot = lo[:, None] + cols[None, :]
    tl.store(eid_ptr + slot, eid, mask=write)
    tl.store(nbr_ptr + slot, nbr, mask=write)


def fill_hop(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    frontier: torch.Tensor,
    offsets: torch.Tensor,
    size: int,
    fanout: int,
    replace: bool,
    seed: int | torch.Tensor,
    id_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Neighbour ids and edge ids of one hop, ``offsets`` (the row counts' running sum, ``size``
    its last entry) already known: ``(nbr, eid)``, row ``i``'s draws at ``[offsets[i], offsets[i
    + 1])``, as the numba kernel ``sample_fill`` writes them. ``0 <= fanout <=
    FUSED_MAX_FANOUT``; ``seed`` an int64, or one per frontier row (an int64 tensor beside
    ``frontier``: stacked batches, each row drawn as with its batch's seed)."""
    if not 0 <= fanout <= FUSED_MAX_FANOUT:
        raise ValueError(f"fused sampling draws fanouts 0..{FUSED_MAX_FANOUT}, not {fanout}")
    if frontier.device.type != "cuda" and not INTERPRETED:
        raise ValueError(
            f"fused sampling runs on a CUDA device, or on {frontier.device} with TRITON_INTERPRET=1"
            " set before shardgnn.sampling.fused is imported"
        )
    nbr = torch.empty(size, dtype=torch.int64, device=frontier.device)
    eid = torch.empty(size, dtype=torch.int64, device=frontier.device)
    rows = int(frontier.shape[0])
    if rows and size:
        width = 1 << max(0, (fanout - 1).bit_length())  # the tile: a power of two >= fanout
        # about 1024 tile entries a program: a few int64 tiles stay in registers at 4 warps
        block = max(1, min(128, 1024 // width))
        per_row = isinstance(seed, torch.Tensor)
        _fill_hop[(-(-rows // block),)](
            indptr, indices, frontier, offsets, nbr, eid, seed if per_row else frontier,
            rows, 0 if per_row else seed, id_offset,
            REPLACE=replace, K=width, BLOCK=block, PER_ROW=per_row,
        )  # fmt: skip
    return nbr, eid
