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
