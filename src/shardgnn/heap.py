"""Keep the C heap's freed memory for reuse, so large batch tensors do not page-fault afresh.

glibc serves every allocation over its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and
returns it to the kernel on ``free``. A mini-batch step allocates and frees many tensors that big
(the input layer's feature rows, the sampled blocks, activations and their gradients), so every
batch touches hundreds of MiB of new pages: on the 1M-node benchmark graph that was 53 million
minor page faults and a third of the epoch in the kernel (issue 12).

:func:`configure_heap` with ``"reuse"`` (the default of every ``shardgnn`` process) tells glibc to
serve large blocks from the heap and to keep up to ``trim_threshold`` bytes of free memory at the
top of the heap instead of returning it. The next batch then reuses pages that are already mapped.
What this costs: the process keeps its high-water mark of heap memory, plus at most
``trim_threshold`` of free top-of-heap memory, until it exits (measured in BENCHMARKS.md).
``"system"`` leaves glibc's defaults. Other C libraries (musl, macOS) are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import platform
from typing import Iterator

HEAP_MODES = ("reuse", "system")

# glibc's malloc.h, and glibc's defaults (restored by "system")
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_GLIBC_DEFAULTS = {_M_MMAP_MAX: 65536, _M_TRIM_THRESHOLD: 128 * 1024}

# mallopt takes an int: the largest free top-of-heap size glibc may keep is 2 GiB - 1.
DEFAULT_TRIM_THRESHOLD = 2**31 - 1

_applied: str | None = None
_applied_trim = DEFAULT_TRIM_THRESHOLD  # the trim threshold "reuse" was applied with


def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def configure_heap(mode: str = "reuse", trim_threshold: int = DEFAULT_TRIM_THRESHOLD) -> bool:
    """Set how this process's C heap treats large blocks (see the module docstring).

    Returns True when glibc runs in ``mode`` afterwards, False where the C library is not glibc.
    Safe to call more than once; it affects allocations made after it (``"system"`` restores
    glibc's defaults, not settings made through ``GLIBC_TUNABLES``).
    """
    global _applied, _applied_trim
    if mode not in HEAP_MODES:
        raise ValueError(f"unknown heap mode {mode!r}; expected one of {HEAP_MODES}")
    if not 0 <= trim_threshold <= 2**31 - 1:
        raise ValueError(f"trim_threshold {trim_threshold} is outside [0, 2**31 - 1]")
    libc = _libc()
    if libc is None:
        return False
    if mode == "system":
        if _applied == "reuse":
            for param, value in _GLIBC_DEFAULTS.items():
                libc.mallopt(param, value)
        _applied = None
        return True
    ok = libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, trim_threshold) == 1
    if ok:
        _applied, _applied_trim = mode, trim_threshold
    return ok


@contextlib.contextmanager
def stock_heap() -> Iterator[None]:
    """Inside: glibc's own treatment of large blocks (each its own ``mmap``, returned on
    ``free``), whatever the process's mode; after: the mode before, with the free memory the heap
    kept returned to the kernel (glibc's ``malloc_trim(0)``). For phases whose blocks are few and
    large and of varying size, such as evaluation batches, whose input rows reach a GB: under
    ``"reuse"``, a block freed below a live one stays resident and a larger one takes fresh
    pages, so each new size added a GB to a worker's peak on coauthor-physics (BENCHMARKS.md 32b),
    where the page faults ``"reuse"`` saves are a small share of such a batch's time."""
    before, trim = _applied, _applied_trim
    if before == "reuse":
        configure_heap("system")
    try:
        yield
    finally:
        if before == "reuse":
            configure_heap("reuse", trim)
            libc = _libc()
            if libc is not None:
                libc.malloc_trim(0)


__all__ = ["DEFAULT_TRIM_THRESHOLD", "HEAP_MODES", "configure_heap", "stock_heap"]
