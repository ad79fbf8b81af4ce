"""Stages 2 and 3 of the pipeline, and the loader that chains them.

    SeedBatcher -> NeighborSamplingStage -> FeatureFetcher -> (trainer: device copy, model)

Each stage is a small iterable over the previous one; the loader accounts time per stage. The
sampling stage drives any :class:`~shardgnn.sampling.types.Sampler` (homogeneous, typed, device,
distributed), the fetcher any :class:`InputRows` (a :class:`~shardgnn.store.feature.FeatureStore`,
or a typed graph's rows by node type, :mod:`shardgnn.loader.typed`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np
import torch

from shardgnn.loader.batches import SeedBatcher, in_groups
from shardgnn.sampling.types import SampledBlocks, Sampler, SeedInput
from shardgnn.seeding import mix_seed
from shardgnn.store.feature import FeatureStore, SparseRowStore
from shardgnn.store.historical import HistoricalEmbeddings
from shardgnn.timing import StageTimer


@dataclasses.dataclass(frozen=True)
class MiniBatch:
    """Sampled blocks with their input features and the seeds' labels joined."""

    index: int
    sample: SampledBlocks
    x_SF: Any
    """features of ``sample.input_nodes``: a ``[S, F]`` tensor, or what the fetcher's
    :class:`InputRows` gives (typed graphs: rows by node type,
    :class:`~shardgnn.loader.typed.TypedBatchRows`)"""
    y: torch.Tensor | None
    """labels of ``sample.seeds``"""
    history: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    """historical embeddings of ``sample.blocks[l].src_nodes_S[history_S]``, per layer ``l``"""
    edge_attr: tuple[torch.Tensor, ...] | None = None
    """with edge features: the rows of each block's edges (``blocks[l].edge_ids_E``), per
    layer, else None"""
    graphs: tuple[Any, ...] | None = None
    """the training step's message graphs of ``sample.blocks``, made ahead in the pipeline's
    thread with the sparse matrices the step will multiply by (each graph's ``tensors()`` yields
    what it holds on the device), or None: the step makes them
    (:class:`shardgnn.train.minibatch.GraphsAhead`)"""

    def model_history(self, device: torch.device) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """``history`` as the model takes it: ``{layer: (mask_S, rows_HF)}``."""
        blocks = self.sample.blocks
        return {
            layer: (blocks[layer].history_S.to(device), rows.to(device))
            for layer, rows in self.history.items()
        }


class NeighborSamplingStage:
    """Samples each seed batch with any :class:`~shardgnn.sampling.types.Sampler`; batch
    ``index``'s random stream is ``mix_seed(*seed, epoch, index)`` (``seed``: an int, or a tuple
    of ints naming the stream, e.g. ``(base seed, rank)``), or ``mix_seed(*seed, index)`` with
    ``per_epoch=False`` (evaluation, the same draws every epoch)."""

    def __init__(
        self,
        batches: SeedBatcher,
        sampler: Sampler,
        seed: int | tuple[int, ...],
        timer: StageTimer | None = None,
        *,
        per_epoch: bool = True,
    ):
        self.batches, self.sampler, self.seed = batches, sampler, seed
        self.per_epoch = per_epoch
        self.timer = timer or StageTimer()

    def batch_seed(self, epoch: int, index: int) -> int:
        """The seed batch ``index`` of ``epoch`` is sampled with."""
        parts = self.seed if isinstance(self.seed, tuple) else (self.seed,)
        return mix_seed(*parts, epoch, index) if self.per_epoch else mix_seed(*parts, index)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[int, SampledBlocks]]:
        epoch = self.batches.epoch
        bulk = getattr(getattr(self.sampler, "config", None), "batches_per_call", 1)
        if bulk > 1 and hasattr(self.sampler, "sample_many"):
            yield from self._bulk(epoch, bulk)
            return
        for index, seeds in self.batches:
            with self.timer("sample"):
                sample = self.sampler.sample(SeedInput(seeds), self.batch_seed(epoch, index))
            yield index, sample

    def _bulk(self, epoch: int, k: int) -> Iterator[tuple[int, SampledBlocks]]:
        """``k`` batches at a time through the sampler's ``sample_many`` (each batch with its own
        seed, so the blocks are those of one batch at a time)."""
        for group in in_groups(self.batches, k):
            with self.timer("sample"):
                samples = self.sampler.sample_many(
                    [SeedInput(s) for _, s in group], [self.batch_seed(epoch, i) for i, _ in group]
                )
            yield from zip([i for i, _ in group], samples)


class LocalityCounter:
    """Passes sampled batches through, counting their sampled edges, those whose source node
    ``owned(global ids) -> bool mask`` says this worker owns (how local a batching keeps its
    neighbourhoods), and the drawn edges a bounded halo dropped."""

    def __init__(self, samples: Iterable[tuple[int, SampledBlocks]], owned):
        self.samples, self.owned = samples, owned
        self.local_edges = self.edges = self.dropped = 0

    def __len__(self) -> int:
        return len(self.samples)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[tuple[int, SampledBlocks]]:
        for index, sample in self.samples:
            for block in sample.blocks:
                sources = block.src_nodes_S.numpy()[block.indices_E.numpy()]
                self.local_edges += int(self.owned(sources).sum())
                self.edges += int(sources.shape[0])
            self.dropped += sample.num_dropped_edges
            yield index, sample


class InputRows(Protocol):
    """What :class:`FeatureFetcher` reads a batch's input rows from: a
    :class:`~shardgnn.store.feature.FeatureStore` (rows by global id, local or distributed, with
    an optional look-ahead), or a typed graph's rows by node type
    (:mod:`shardgnn.loader.typed`)."""

    @property
    def lookahead(self) -> int: ...

    def plan(self, window: list[torch.Tensor]) -> None: ...

    def prefetch(self) -> None: ...

    def gather(self, ids: torch.Tensor) -> Any: ...


class WindowedRows:
    """Input rows fetched a window of batches at a time: ``plan`` takes the window's input ids,
    ``prefetch`` gathers their union from ``rows`` in one call (one exchange of a distributed
    store: the ``k`` batches of a bulk-sampled group fetch their rows in one all-to-allv, rows
    they share once), ``gather`` serves each batch from it. Read-only rows only (not learnable
    rows, whose gathers carry gradients back by batch)."""

    def __init__(self, rows: FeatureStore, window: int):
        self.rows, self.window = rows, window
        self._ids: torch.Tensor | None = None
        self._table: torch.Tensor | SparseRowStore | None = None

    @property
    def lookahead(self) -> int:
        return self.window

    @property
    def shape(self) -> tuple[int, ...]:
        return self.rows.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.rows.dtype

    def plan(self, window: list[torch.Tensor]) -> None:
        self._ids = torch.unique(torch.cat(window))  # sorted
        self._table = None

    def prefetch(self) -> None:
        assert self._ids is not None, "plan a window first"
        table = self.rows.gather(self._ids)
        # sparse batch rows: held as CSR once a window, each batch's gathered from it sparse
        self._table = SparseRowStore.of_batch(table) if table.is_sparse else table

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        assert self._ids is not None and self._table is not None, "prefetch the window first"
        positions = torch.searchsorted(self._ids, ids)
        if isinstance(self._table, SparseRowStore):
            return self._table.gather(positions)
        return self._table[positions]


class FeatureFetcher:
    """Joins input-node features and seed labels (both from stores, local or distributed) to each
    sampled batch, and with ``edge_rows`` (a store of edge features by global edge id: the
    position of the edge in the graph's CSR) the features of every block's edges, fetched like
    node rows (one gather per batch for all its blocks; a cache or a low-bit codec in the store
    applies to them alike).

    A store with a look-ahead (``features.lookahead == W > 0``: the belady cache, or
    :class:`WindowedRows` of bulk-sampled groups) is served a window at a time, the batches whose
    index ``// W`` is the same (windows lie at fixed batch indices, wherever an epoch starts): the
    fetcher samples the window's batches, announces their ids (``plan``: the inspector, timed as
    ``lookahead``), lets the store bring the window's missing rows in one exchange
    (``prefetch``), then gathers each batch in order.

    ``before_fetch(index)``, when given, runs before the rows of batch ``index`` (or of a window
    starting there, before it is planned) are fetched, on the thread that fetches them (low-bit
    fetches key their rounding by the batch; caches and error-feedback residuals open a journal
    entry there that a mid-epoch checkpoint rewinds to).

    ``trains_from()``, when given, is the first batch of the epoch to yield: an epoch resumed
    inside a window is sampled from the window's start (the batcher's ``window``) and the whole
    window fetched again, as the uninterrupted run fetched it (one exchange, rounded alike); its
    batches before ``trains_from()``, trained before the checkpoint, are gathered and dropped.
    """

    def __init__(
        self,
        samples: Iterable[tuple[int, SampledBlocks]],
        features: InputRows,
        labels: FeatureStore | None,
        timer: StageTimer | None = None,
        before_fetch: Callable[[int], None] | None = None,
        edge_rows: FeatureStore | None = None,
        trains_from: Callable[[], int] | None = None,
    ):
        self.samples, self.features, self.labels = samples, features, labels
        self.edge_rows = edge_rows
        self.timer = timer or StageTimer()
        self.before_fetch = before_fetch or (lambda index: None)
        self.trains_from = trains_from or (lambda: 0)

    def __len__(self) -> int:
        return len(self.samples)  # type: ignore[arg-type]

    def _windows(self) -> Iterator[list[tuple[int, SampledBlocks]]]:
        window = self.features.lookahead
        edge_window = 0 if self.edge_rows is None else self.edge_rows.lookahead
        assert edge_window in (0, window), "edge and node rows are fetched in the same windows"
        chunk: list[tuple[int, SampledBlocks]] = []
        for index, sample in self.samples:
            chunk.append((index, sample))
            if window and (index + 1) % window:
                continue  # the window goes on
            yield self._fetch_window(chunk, window, edge_window)
            chunk = []
        if chunk:  # the epoch's last window, cut short
            yield self._fetch_window(chunk, window, edge_window)

    def _fetch_window(
        self, chunk: list[tuple[int, SampledBlocks]], window: int, edge_window: int
    ) -> list[tuple[int, SampledBlocks]]:
        """Plan and prefetch ``chunk``'s rows (a look-ahead store); the chunk."""
        if window:
            with self.timer("fetch"):
                self.before_fetch(chunk[0][0])
            with self.timer("lookahead"):
                self.features.plan([sample.input_nodes for _, sample in chunk])
                if edge_window:
                    self.edge_rows.plan([edge_ids(sample) for _, sample in chunk])
            with self.timer("fetch"):
                self.features.prefetch()
                if edge_window:
                    self.edge_rows.prefetch()
        return chunk

    def __iter__(self) -> Iterator[MiniBatch]:
        first = self.trains_from()
        for chunk in self._windows():
            for index, sample in chunk:
                batch = self._fetch(index, sample)
                if index >= first:  # before it: a resumed window's head, trained already
                    yield batch
                # Let go of the batch before fetching the next one: a consumer that drops it too
                # holds one batch's rows at a time, not two (an evaluation batch's can be a GB).
                del batch

    def _fetch(self, index: int, sample: SampledBlocks) -> MiniBatch:
        """Batch ``index``'s rows joined to ``sample``."""
        with self.timer("fetch"):
            self.before_fetch(index)
            x = self.features.gather(sample.input_nodes)
            y = None if self.labels is None else self.labels.gather(sample.seeds)
            edge_attr = None
            if self.edge_rows is not None:
                rows = self.edge_rows.gather(edge_ids(sample))
                sizes = [block.num_edges for block in sample.blocks]
                edge_attr = tuple(torch.split(rows, sizes))
        return MiniBatch(index=index, sample=sample, x_SF=x, y=y, edge_attr=edge_attr)


def edge_ids(sample: SampledBlocks) -> torch.Tensor:
    """The global edge ids of every block of ``sample``, input layer first, concatenated."""
    ids = [block.edge_ids_E for block in sample.blocks]
    assert all(i is not None for i in ids), "this sampler's blocks name no edge ids"
    return torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)


class HistoryReader:
    """Joins each batch's historical embeddings (the rows its sampler chose to take from
    ``tables`` instead of expanding, :class:`~shardgnn.store.historical.HistoricalEmbeddings`).
    Rows are read right after their batch is sampled, before the step that may replace them."""

    def __init__(
        self,
        batches: Iterable[MiniBatch],
        tables: HistoricalEmbeddings,
        timer: StageTimer | None = None,
    ):
        self.batches, self.tables = batches, tables
        self.timer = timer or StageTimer()

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[MiniBatch]:
        for batch in self.batches:
            with self.timer("historical"):
                history = {
                    layer: self.tables.read(layer, block.src_nodes_S[block.history_S].numpy())
                    for layer, block in enumerate(batch.sample.blocks)
                    if block.history_S is not None
                }
            yield dataclasses.replace(batch, history=history)


def count_accesses(
    samples: Iterable[tuple[int, SampledBlocks]],
    num_nodes: int,
    edge_counts: np.ndarray | None = None,
) -> np.ndarray:
    """How often each node is an input node over ``samples`` (GNNLab's pre-sampling epoch);
    with ``edge_counts`` (``[E]``), how often each edge is in a block is added to it."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    for _, sample in samples:
        counts += np.bincount(sample.input_nodes.numpy(), minlength=num_nodes)
        if edge_counts is not None:
            edge_counts += np.bincount(edge_ids(sample).numpy(), minlength=edge_counts.shape[0])
    return counts


class MiniBatchLoader:
    """The whole single-process pipeline for one set of seeds; iterate once per epoch."""

    def __init__(
        self,
        seeds,
        sampler: Sampler,
        features: InputRows,
        labels: FeatureStore | None,
        *,
        batch_size: int,
        shuffle: bool,
        seed: int,
        timer: StageTimer | None = None,
        edge_rows: FeatureStore | None = None,
    ):
        self.timer = timer or StageTimer()
        self.batches = SeedBatcher(seeds, batch_size, shuffle=shuffle, seed=seed)
        self.stages = FeatureFetcher(
            NeighborSamplingStage(self.batches, sampler, seed, self.timer),
            features,
            labels,
            self.timer,
            edge_rows=edge_rows,
        )

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Iterate epoch ``epoch`` from batch ``start`` on."""
        self.batches.set_epoch(epoch, start)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[MiniBatch]:
        return iter(self.stages)
