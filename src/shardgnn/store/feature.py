"""Feature stores: ``gather(ids) -> rows``. A local, a partitioned and a cached store all
implement this interface, so every consumer (the loader, inference, tests) works with any.
"""

from __future__ import annotations

import abc

import numpy as np
import torch


class FeatureStore(abc.ABC):
    """Rows of a ``[num_nodes, dim]`` matrix, gathered by global node id."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """``(num_nodes, dim...)`` of the stored matrix."""

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (int64, any order, repeats allowed) as a new tensor."""
        if ids.dtype != torch.int64 or ids.dim() != 1:
            raise ValueError(f"ids must be a 1-D int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.shape[0]):
            raise IndexError(f"node ids must lie in [0, {self.shape[0]}), got [{int(ids.min())}, {int(ids.max())}]")
        return self._gather(ids)

    @abc.abstractmethod
    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Gather validated ids."""

    @property
    def dtype(self) -> torch.dtype:
        """The element type of the rows."""
        raise NotImplementedError

    @property
    def on_disk(self) -> bool:
        """Whether this process's own rows are read from a memory-mapped file (a slow tier a
        cache may front) rather than RAM."""
        return False

    def local_mask(self, ids: np.ndarray) -> np.ndarray:
        """For each id, whether this process reads it without communication."""
        return np.ones(ids.shape[0], dtype=bool)

    def read_local(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of ids that :meth:`local_mask` marks local (never communicates)."""
        return self.gather(ids)


class LocalFeatureStore(FeatureStore):
    """A store over one in-process array: in RAM, or a read-only memory map read on demand
    (``np.load(mmap_mode="r")``: only the requested rows are read, so the matrix may exceed RAM).

    ``row_divisor`` (``[N]``, optional) divides each gathered row, e.g. by its sum for row
    normalisation of a memory map without rewriting it.
    """

    def __init__(self, array: np.ndarray | torch.Tensor, row_divisor: np.ndarray | None = None):
        self._row_divisor = None if row_divisor is None else torch.from_numpy(np.asarray(row_divisor, dtype=np.float32))
        if isinstance(array, torch.Tensor):
            self._tensor: torch.Tensor | None = array
            self._array = None
        elif isinstance(array, np.memmap) or not array.flags.writeable:
            # A memory map: read only the requested rows (np.take) instead of paging it all in.
            self._tensor, self._array = None, array
        else:
            self._tensor, self._array = torch.from_numpy(np.ascontiguousarray(array)), None

    @property
    def shape(self) -> tuple[int, ...]:
        source = self._tensor if self._tensor is not None else self._array
        return tuple(source.shape)

    @property
    def dtype(self) -> torch.dtype:
        if self._tensor is not None:
            return self._tensor.dtype
        return torch.from_numpy(np.zeros(0, dtype=self._array.dtype)).dtype

    @property
    def on_disk(self) -> bool:
        return self._array is not None

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        if self._tensor is not None:
            rows = self._tensor.index_select(0, ids)
        else:
            rows = torch.from_numpy(np.take(self._array, ids.numpy(), axis=0))
        if self._row_divisor is not None:
            rows = rows / self._row_divisor[ids].view(-1, *([1] * (rows.dim() - 1)))
        return rows


def row_sums(array: np.ndarray, chunk_rows: int = 65536) -> np.ndarray:
    """Row sums (1 for all-zero rows: a divisor) of a possibly memory-mapped matrix, read in
    chunks; dividing by them equals ``normalize_features(x, "row")`` bit for bit."""
    out = np.empty(array.shape[0], dtype=np.float32)
    for start in range(0, array.shape[0], chunk_rows):
        sums = np.asarray(array[start:start + chunk_rows], dtype=np.float32).sum(axis=1)
        out[start:start + chunk_rows] = np.where(sums == 0, 1.0, sums)
    return out
