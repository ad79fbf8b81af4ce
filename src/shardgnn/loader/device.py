"""Feeding a GPU: batches made on the device, or made on the CPU and staged to it one batch ahead.

Two ways a mini-batch reaches the model on ``--device cuda``:

* **device-resident** (``--sampler-device gpu``): :class:`~shardgnn.sampling.device.
  DeviceNeighborSampler` samples on the GPU and :class:`~shardgnn.store.device.DeviceFeatureStore`
  gathers the rows there (hot rows in GPU memory, cold rows read in place from pinned host memory);
  nothing is copied per batch but the seeds. With ``--gpu-overlap`` (the default) batch k+1 is
  made in a background thread on a second stream while batch k computes: the sampler's host syncs
  (each hop's size) then wait for its own kernels only, not for the training step's.
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
from shardgnn.sampling.config import GPU_BULK_BATCHES, SamplerConfig
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
            edge_weight_E=opt(b.edge_weight_E),
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
        edge_attr=None if batch.edge_attr is None else tuple(fn(t) for t in batch.edge_attr),
    )


@dataclasses.dataclass
class StagedBatch:
    """A batch made (or copied to the device) on a side stream, with events around that work."""

    batch: MiniBatch
    start: torch.cuda.Event
    done: torch.cuda.Event


class DeviceStaging:
    """Makes each batch of ``batches`` on a side stream of ``device`` (run it inside the prefetch
    thread: the side stream's work then overlaps the caller's compute). ``copy``: the batches are
    host tensors, pinned and copied to the device there; else they are made on the device (GPU
    sampling and gathering, whose kernels then run on the side stream). ``prepare``, when given,
    runs there too, on each batch once it is on the device (the training step's message graphs
    made ahead: :class:`shardgnn.train.minibatch.GraphsAhead`)."""

    def __init__(
        self,
        batches: Iterable[MiniBatch],
        device: torch.device,
        timer: StageTimer,
        copy: bool = True,
        after: torch.cuda.Stream | None = None,
        prepare: Callable[[MiniBatch], MiniBatch] | None = None,
    ):
        self.batches, self.device, self.timer, self.copy = batches, device, timer, copy
        self.after, self.prepare = after, prepare

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[StagedBatch]:
        stream = torch.cuda.Stream(self.device)
        if self.after is not None:
            # what the caller enqueued before this pass (an evaluation that used the same
            # sampler's buffers, say) comes first
            stream.wait_stream(self.after)
        # The current stream is per thread: everything this generator enqueues (in the prefetch
        # thread) goes to the side stream.
        with torch.cuda.stream(stream):
            batches = iter(self.batches)
            while True:
                start = torch.cuda.Event(enable_timing=True)
                done = torch.cuda.Event(enable_timing=True)
                if not self.copy:
                    start.record(stream)
                batch = next(batches, None)
                if batch is None:
                    return
                if self.copy:
                    with self.timer("pin"):
                        batch = map_batch(batch, lambda t: t.pin_memory())
                    start.record(stream)
                    batch = map_batch(batch, lambda t: t.to(self.device, non_blocking=True))
                if self.prepare is not None:
                    batch = self.prepare(batch)
                done.record(stream)
                yield StagedBatch(batch, start, done)


def _used_on(stream: torch.cuda.Stream) -> Callable[[torch.Tensor], torch.Tensor]:
    def mark(t: torch.Tensor) -> torch.Tensor:
        t.record_stream(stream)
        return t

    return mark


class DeviceReady:
    """The training side of staging: each batch's tensors once the side stream is done with them,
    as seen by the current stream (a device-side wait: the host never blocks on it). Adds the
    side stream's device time as stage ``stage`` when the pass ends."""

    def __init__(self, staged: Iterable[StagedBatch], timer: StageTimer, stage: str = "h2d"):
        self.staged, self.timer, self.stage = staged, timer, stage

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
                # before this stream is done with them (the graphs made ahead: theirs too).
                mark = _used_on(stream)
                map_batch(item.batch, mark)
                for graph in item.batch.graphs or ():
                    for t in graph.tensors():
                        if t.is_cuda:  # dropout keys may stay on the host
                            mark(t)
                copies.append(item)
                yield item.batch
        finally:
            if copies:
                copies[-1].done.synchronize()
                spans = sum(c.start.elapsed_time(c.done) for c in copies)
                self.timer.add(self.stage, spans / 1e3)
            close = getattr(iterator, "close", None)
            if close is not None:
                close()


class Staged:
    """``batches`` made in a background thread on a side stream, one batch ahead (``depth``:
    batches ready beyond the one computing): host batches copied to ``device`` there (``copy``;
    stage ``h2d``: the copies' device time), or batches made on the device (stage ``side``: the
    side stream's device time for sampling and gathering); ``prepare`` runs on each batch there
    too (:class:`DeviceStaging`)."""

    def __init__(
        self,
        batches: Iterable[MiniBatch],
        device: torch.device,
        timer: StageTimer,
        depth: int = 1,
        copy: bool = True,
        prepare: Callable[[MiniBatch], MiniBatch] | None = None,
    ):
        self.batches, self.device, self.timer, self.depth = batches, device, timer, depth
        self.copy, self.prepare = copy, prepare

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[MiniBatch]:
        after = torch.cuda.current_stream(self.device)
        staging = DeviceStaging(
            self.batches, self.device, self.timer, self.copy, after, self.prepare
        )
        stage = "h2d" if self.copy else "side"
        return iter(DeviceReady(Prefetcher(staging, self.depth), self.timer, stage))


@dataclasses.dataclass
class DevicePipeline:
    """The parts of a device-resident pipeline: training and evaluation samplers over one CSR on
    the device, and the feature and label stores there (with edge features, their store too:
    rows by edge id, gathered on the device for every block)."""

    sampler: DeviceNeighborSampler
    eval_sampler: DeviceNeighborSampler
    features: DeviceFeatureStore
    labels: DeviceFeatureStore
    edges: DeviceFeatureStore | None = None

    def stats(self) -> dict[str, object]:
        """What the results record of it: where the CSR and rows live, the hit rate, PCIe bytes."""
        return {
            "sampler_device": str(self.sampler.device),
            "sampler_kernel": self.sampler.kernel,
            "bulk_batches": self.sampler.config.batches_per_call,
            "csr_resident": self.sampler.resident,
            **self.features.stats(),
            **({} if self.edges is None else {
                f"edge_{key}": value for key, value in self.edges.stats().items()
            }),
        }  # fmt: skip


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
    edge_attr: np.ndarray | None = None,
) -> DevicePipeline:
    """Samplers and stores on ``device``; feature rows in two tiers when they do not all fit
    (``config.feature_memory``), the hot ones chosen by ``config.hot_policy``. Training batches
    are sampled ``GPU_BULK_BATCHES`` at a time where ``--bulk-batches`` is unset. ``edge_attr``
    (``[E, D]``, CSR order): the edge rows a model reads, on the device as far as the memory
    left after the node rows holds them (the rest in host memory, by edge id)."""
    if sampler_config.bulk is None:
        sampler_config = dataclasses.replace(sampler_config, bulk=GPU_BULK_BATCHES)
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
    edges = None if edge_attr is None else DeviceFeatureStore(edge_attr, device)
    labels = DeviceFeatureStore(y, device)
    return DevicePipeline(sampler, eval_sampler, features, labels, edges)


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
