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


class LocalFeatureStore(FeatureStore):
    """A store over one in-process array: in RAM, or a read-only memory map read on demand."""

    def __init__(self, array: np.ndarray | torch.Tensor):
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

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        if self._tensor is not None:
            return self._tensor.index_select(0, ids)
        return torch.from_numpy(np.take(self._array, ids.numpy(), axis=0))
