"""The C heap mode: with "reuse", a large block freed and allocated again does not fault its
pages in afresh (glibc only; measured in a fresh interpreter so this process is not changed)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from shardgnn.heap import configure_heap

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

_FAULTS = """
import resource, sys
import numpy as np
from shardgnn.heap import configure_heap
print(configure_heap(sys.argv[1]), file=sys.stderr)
np.ones(1 << 20)  # warm up numpy's own allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = np.ones(8 << 20)  # 64 MiB: over glibc's largest mmap threshold
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@glibc
def test_reuse_faults_a_large_block_in_once():
    # Under "system" every allocation is a fresh mmap, faulted in again (in 4 KiB pages, or in
    # 2 MiB ones where transparent huge pages apply); under "reuse" only the first one is.
    system, reuse = _faults("system"), _faults("reuse")
    assert reuse * 5 < system, (system, reuse)


_KEPT = """
import sys
import numpy as np
from shardgnn.heap import configure_heap, stock_heap

def anon_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) >> 10

def grow():
    # evaluation batches: a block freed below a live one, then a larger block
    first = np.ones(32 << 20)  # 256 MiB
    live = np.ones(1 << 14)  # allocated after it, above it in the heap
    del first
    second = np.ones(40 << 20)  # 320 MiB: no room in the freed block
    return anon_mb() - base, live, second

configure_heap("reuse")
base = anon_mb()
if sys.argv[1] == "stock":
    with stock_heap():
        held = grow()[0]
else:
    held = grow()[0]
after = anon_mb() - base
print(held, after)
"""


def _kept(how: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _KEPT, how], capture_output=True, text=True, check=True
    )
    held, after = out.stdout.split()
    return int(held), int(after)


@glibc
def test_stock_heap_returns_a_freed_block_that_reuse_keeps():
    # Under "reuse" the freed 256 MiB block stays resident beside the 320 MiB one; inside
    # stock_heap it goes back to the kernel, and leaving it returns what the heap kept.
    held_reuse, after_reuse = _kept("reuse")
    held_stock, after_stock = _kept("stock")
    assert held_reuse > 540 and 300 < held_stock < 360, (held_reuse, held_stock)
    assert after_reuse > 500 and after_stock < 40, (after_reuse, after_stock)


@glibc
def test_stock_heap_restores_reuse():
    script = _FAULTS.replace(
        "print(configure_heap(sys.argv[1]), file=sys.stderr)",
        "from shardgnn.heap import stock_heap\n"
        "configure_heap(sys.argv[1])\n"
        "with stock_heap():\n"
        "    np.ones(8 << 20)",
    )
    out = subprocess.run(
        [sys.executable, "-c", script, "reuse"], capture_output=True, text=True, check=True
    )
    assert int(out.stdout.strip()) * 5 < _faults("system")


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown heap mode 'fast'"):
        configure_heap("fast")
    with pytest.raises(ValueError, match="trim_threshold"):
        configure_heap("reuse", trim_threshold=-1)


def test_train_config_validates_heap():
    from shardgnn.errors import ConfigError
    from shardgnn.train.config import TrainConfig

    assert TrainConfig(dataset="cora").heap == "reuse"
    with pytest.raises(ConfigError, match="heap"):
        TrainConfig(dataset="cora", heap="fast")
