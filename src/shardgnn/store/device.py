"""Feature rows on the GPU, in two tiers (Quiver, the data-tiering work, BGL).

When the matrix fits the device budget every row lives on the GPU and a batch's rows are gathered
there. Otherwise the hottest rows (highest in-degree, or most often sampled in a pre-sampling pass:
``hot_order``) fill the budget on the GPU and the rest stay in pinned host memory, read in place by
the same gather kernel through unified addressing: no CPU-side gather, only the cold rows' bytes
cross PCIe. Hits, misses and those bytes are counted for the stage report.
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.devicemem import device_budget, uva_view
from shardgnn.store.feature import FeatureStore


class DeviceFeatureStore(FeatureStore):
    """Rows of ``array`` (``[N, ...]``) gathered on ``device`` by ids on ``device``.

    ``resident_rows``: rows kept in device memory (None: as many as half the free memory holds;
    on a CPU device, every row).
    ``hot_order``: node ids, hottest first; its first ``resident_rows`` are the resident ones
    (None: ids in order). Ids may come on any device; rows come back on ``device``.
    """

    def __init__(
        self,
        array: np.ndarray | torch.Tensor,
        device: torch.device,
        resident_rows: int | None = None,
        hot_order: np.ndarray | None = None,
    ):
        host = torch.as_tensor(
            np.ascontiguousarray(array) if isinstance(array, np.ndarray) else array
        )
        self.device = device
        self._shape = tuple(host.shape)
        self._dtype = host.dtype
        n = self._shape[0]
        if resident_rows is None:
            on_gpu = device.type == "cuda"
            resident_rows = device_budget(device) // max(self.row_bytes, 1) if on_gpu else n
        hot_rows = min(n, resident_rows)
        self.hits = self.misses = 0
        if hot_rows == n:
            self._hot = host.to(device)
            self._slot = None
            self._cold = None
            return
        order = np.arange(n) if hot_order is None else np.asarray(hot_order, dtype=np.int64)
        hot_ids = torch.from_numpy(np.ascontiguousarray(order[:hot_rows]))
        is_hot = torch.zeros(n, dtype=torch.bool)
        is_hot[hot_ids] = True
        cold_ids = torch.nonzero(~is_hot).squeeze(1)
        # slot >= 0: position among the hot rows; slot < 0: -(position among the cold rows) - 1
        slot = torch.empty(n, dtype=torch.int64)
        slot[hot_ids] = torch.arange(hot_rows)
        slot[cold_ids] = -torch.arange(cold_ids.shape[0]) - 1
        self._hot = host.index_select(0, hot_ids).to(device)
        cold = host.index_select(0, cold_ids)
        # On a CPU device (the tests' stand-in) the cold tier is plain host memory.
        self._cold = uva_view(cold.pin_memory(), device) if device.type == "cuda" else cold
        self._slot = slot.to(device)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def resident_rows(self) -> int:
        """Rows held in device memory."""
        return int(self._hot.shape[0])

    @property
    def pcie_bytes(self) -> int:
        """Bytes of the cold rows read across PCIe so far."""
        return self.misses * self.row_bytes

    @property
    def hit_rate(self) -> float | None:
        """Share of gathered rows served from device memory (None before any gather)."""
        total = self.hits + self.misses
        return self.hits / total if total else None

    def check_ids(self, ids: torch.Tensor) -> None:
        # The device path checks dtype and shape only: a bounds check is a device-to-host sync
        # per batch; out-of-range ids are a sampler bug, caught by the CPU path's tests.
        self.check_id_shape(ids)

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(self.device, non_blocking=True)
        if self._slot is None:
            self.hits += int(ids.shape[0])
            return self._hot.index_select(0, ids)
        slot = self._slot[ids]
        hot = slot >= 0
        hot_pos = torch.nonzero(hot).squeeze(1)
        cold_pos = torch.nonzero(~hot).squeeze(1)
        out = torch.empty((ids.shape[0], *self._shape[1:]), dtype=self._dtype, device=self.device)
        out[hot_pos] = self._hot.index_select(0, slot[hot_pos])
        out[cold_pos] = self._cold.index_select(0, -slot[cold_pos] - 1)
        self.hits += int(hot_pos.shape[0])
        self.misses += int(cold_pos.shape[0])
        return out

    def stats(self) -> dict[str, float | int | None]:
        """What the stage report shows of the tiers."""
        return {
            "gpu_resident_rows": self.resident_rows,
            "gpu_hit_rate": self.hit_rate,
            "pcie_bytes": self.pcie_bytes,
        }


def degree_order(indptr: np.ndarray) -> np.ndarray:
    """Node ids by in-degree, highest first (ties by id): the degree policy's hot order."""
    degree = np.diff(np.asarray(indptr, dtype=np.int64))
    return np.argsort(-degree, kind="stable")
