"""Feeding a GPU: batches made on the device, or made on the CPU and staged to it one batch ahead.

Two ways a mini-batch reaches the model on ``--device cuda``:

* **device-resident** (``--sampler-device gpu``): :class:`~shardgnn.sampling.device.
  DeviceNeighborSampler` samples on the GPU and :class:`~shardgnn.store.device.DeviceFeatureStore`
  gathers the rows there (hot rows in GPU memory, cold rows read in place from pinned host memory);
  nothing is copied per batch but the seeds.
* **staged** (``--sampler-device cpu``): the CPU pipeline runs in a background thread
  (:class:`~shardgnn.loader.prefetch.Prefetcher`), which also pins each batch and enqueues its
  host-to-device copy on a side stream (:class:`DeviceStaging`); the training thread makes its
  stream wait for that copy's event (:class:`DeviceReady`), so batch k+1's copy runs under batch
  k's compute (double buffering: one batch computing, one in flight).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from shardgnn.devicemem import device_budget
from shardgnn.loader.batches import SeedBatcher
from shardgnn.loader.config import DeviceConfig
from shardgnn.loader.pipeline import MiniBatch
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.types import SampledBlocks, SeedInput
from shardgnn.seeding import mix_seed
from shardgnn.store.device import DeviceFeatureStore, degree_order
from shardgnn.timing import StageTimer


def map_batch(batch: MiniBatch, fn: Callable[[torch.Tensor], torch.Tensor]) -> MiniBatch:
    """``batch`` with ``fn`` applied to every tensor it holds (blocks, rows, labels, history)."""

    def opt(t):
        return None if t is None else fn(t)

    sample = batch.sample
    blocks = [
        dataclasses.replace(
            b,
            src_nodes_S=fn(b.src_nodes_S),
            indptr_D1=fn(b.indptr_D1),
            indices_E=fn(b.indices_E),
            edge_ids_E=opt(b.edge_ids_E),
            src_degree_S=opt(b.src_degree_S),
            history_S=opt(b.history_S),
            edge_type_E=opt(b.edge_type_E),
        )
        for b in sample.blocks
    ]
    moved = SampledBlocks(
        seeds=fn(sample.seeds), blocks=blocks, num_dropped_edges=sample.num_dropped_edges
    )
    return dataclasses.replace(
        batch,
        sample=moved,
        x_SF=fn(batch.x_SF),
        y=opt(batch.y),
        history={layer: fn(rows) for layer, rows in batch.history.items()},
    )


@dataclasses.dataclass
class StagedBatch:
    """A batch whose copy to the device was enqueued on a side stream, with the copy's events."""

    batch: MiniBatch
    start: torch.cuda.Event
    done: torch.cuda.Event


class DeviceStaging:
    """Pins each batch of ``batches`` and enqueues its copy to ``device`` on a side stream
    (run it inside the prefetch thread: the copy then overlaps the caller's compute)."""

    def __init__(self, batches: Iterable[MiniBatch], device: torch.device, timer: StageTimer):
        self.batches, self.device, self.timer = batches, device, timer

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[StagedBatch]:
        stream = torch.cuda.Stream(self.device)
        for batch in self.batches:
            with self.timer("pin"):
                pinned = map_batch(batch, lambda t: t.pin_memory())
            with torch.cuda.stream(stream):
                start = torch.cuda.Event(enable_timing=True)
                done = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                moved = map_batch(pinned, lambda t: t.to(self.device, non_blocking=True))
                done.record(stream)
            yield StagedBatch(moved, start, done)


def _used_on(stream: torch.cuda.Stream) -> Callable[[torch.Tensor], torch.Tensor]:
    def mark(t: torch.Tensor) -> torch.Tensor:
        t.record_stream(stream)
        return t

    return mark


class DeviceReady:
    """The training side of staging: each batch's tensors once its copy is done, as seen by the
    current stream (a device-side wait: the host never blocks on the copy). Adds the copies'
    device time as stage ``h2d`` when the pass ends."""

    def __init__(self, staged: Iterable[StagedBatch], timer: StageTimer):
        self.staged, self.timer = staged, timer

    def __len__(self) -> int:
        return len(self.staged)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[MiniBatch]:
        copies: list[StagedBatch] = []
        iterator = iter(self.staged)
        try:
            for item in iterator:
                stream = torch.cuda.current_stream(item.batch.x_SF.device)
                stream.wait_event(item.done)
                # The copies were allocated on the side stream: their memory must not be reused
                # before this stream is done with them.
                map_batch(item.batch, _used_on(stream))
                copies.append(item)
                yield item.batch
        finally:
            if copies:
                copies[-1].done.synchronize()
                self.timer.add("h2d", sum(c.start.elapsed_time(c.done) for c in copies) / 1e3)
            close = getattr(iterator, "close", None)
            if close is not None:
                close()


class Staged:
    """``batches`` made in a background thread and copied to ``device`` one batch ahead (``depth``:
    batches ready beyond the one computing)."""

    def __init__(
        self, batches: Iterable[MiniBatch], device: torch.device, timer: StageTimer, depth: int = 1
    ):
        self.batches, self.device, self.timer, self.depth = batches, device, timer, depth

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[MiniBatch]:
        source = Prefetcher(DeviceStaging(self.batches, self.device, self.timer), self.depth)
        return iter(DeviceReady(source, self.timer))


@dataclasses.dataclass
class DevicePipeline:
    """The parts of a device-resident pipeline: training and evaluation samplers over one CSR on
    the device, and the feature and label stores there."""

    sampler: DeviceNeighborSampler
    eval_sampler: DeviceNeighborSampler
    features: DeviceFeatureStore
    labels: DeviceFeatureStore

    def stats(self) -> dict[str, object]:
        """What the results record of it: where the CSR and rows live, the hit rate, PCIe bytes."""
        return {
            "sampler_device": str(self.sampler.device),
            "csr_resident": self.sampler.resident,
            **self.features.stats(),
        }


def device_pipeline(
    indptr: np.ndarray,
    indices: np.ndarray,
    x: np.ndarray,
    y: torch.Tensor,
    train_idx: np.ndarray,
    *,
    device: torch.device,
    config: DeviceConfig,
    sampler_config: SamplerConfig,
    eval_sampler_config: SamplerConfig,
    batch_size: int,
    seed: int,
) -> DevicePipeline:
    """Samplers and stores on ``device``; feature rows in two tiers when they do not all fit
    (``config.feature_memory``), the hot ones chosen by ``config.hot_policy``."""
    sampler = DeviceNeighborSampler(indptr, indices, sampler_config, device)
    eval_sampler = sampler.with_config(eval_sampler_config)
    num_nodes = int(x.shape[0])
    row_bytes = int(np.prod(x.shape[1:])) * x.dtype.itemsize
    rows = config.resident_rows(num_nodes, row_bytes, device_budget(device))
    hot_order = None
    if rows < num_nodes:
        if config.hot_policy == "presample":
            hot_order = presample_order(sampler, train_idx, batch_size, seed, num_nodes)
        else:
            hot_order = degree_order(indptr)
    features = DeviceFeatureStore(x, device, rows, hot_order)
    return DevicePipeline(sampler, eval_sampler, features, DeviceFeatureStore(y, device))


def presample_order(
    sampler: DeviceNeighborSampler, seeds: np.ndarray, batch_size: int, seed: int, num_nodes: int
) -> np.ndarray:
    """Node ids by how often one pre-sampling epoch needs them as input rows, most first (GNNLab's
    pre-sampling, counted on the device)."""
    counts = torch.zeros(num_nodes, dtype=torch.int64, device=sampler.device)
    batches = SeedBatcher(seeds, batch_size, shuffle=True, seed=seed)
    batches.set_epoch(0)
    for index, batch_seeds in batches:
        sample = sampler.sample(SeedInput(batch_seeds), mix_seed(seed, 0, index))
        counts += torch.bincount(sample.input_nodes, minlength=num_nodes)
    return torch.argsort(counts, descending=True, stable=True).cpu().numpy()
