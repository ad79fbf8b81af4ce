"""Seeds: every random stream in shardgnn is named by a tuple of integers (base seed, epoch,
batch, layer, rank...) mixed into one 63-bit seed, so the same tuple gives the same stream on any
rank, thread count or machine.
"""

from __future__ import annotations


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
