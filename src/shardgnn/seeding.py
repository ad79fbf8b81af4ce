"""Seeds: every random stream in shardgnn is named by a tuple of integers (base seed, epoch,
batch, layer, rank...) mixed into one 63-bit seed, so the same tuple gives the same stream on any
rank, thread count or machine.
"""

from __future__ import annotations

import numpy as np


def mix_seed(*parts: int) -> int:
    """Combine integers (base seed, epoch, batch, layer...) into one 63-bit seed, in Python."""
    mask = (1 << 64) - 1
    h = 0x2545F4914F6CDD1D
    for part in parts:
        h = (h ^ (int(part) & mask)) & mask
        h = (h + 0x9E3779B97F4A7C15) & mask
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
        h ^= h >> 31
    return h & ((1 << 63) - 1)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """Vectorised splitmix64 finaliser on uint64 (wrapping arithmetic)."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def hashed_uniform(row_ids: np.ndarray, dim: int, seed: int, chunk_rows: int = 65536) -> np.ndarray:
    """``float32 [len(row_ids), dim]`` uniform in ``[-1, 1)`` where entry ``(v, c)`` depends only on
    ``(seed, v, c)``: any process computes the rows it owns exactly as one process computes all."""
    row_ids = np.asarray(row_ids, dtype=np.int64)
    out = np.empty((row_ids.shape[0], dim), dtype=np.float32)
    salt = splitmix64_array(np.array([seed & (2**64 - 1)], dtype=np.uint64))[0]
    cols = np.arange(dim, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, row_ids.shape[0], chunk_rows):
            rows = row_ids[start : start + chunk_rows].astype(np.uint64)
            base = splitmix64_array(splitmix64_array(rows) ^ salt)
            bits = splitmix64_array(base[:, None] + cols[None, :]) >> np.uint64(40)  # 24 bits
            out[start : start + rows.shape[0]] = bits.astype(np.float32) * np.float32(2.0**-23) - 1
    return out
