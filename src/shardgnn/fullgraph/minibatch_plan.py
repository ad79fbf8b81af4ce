"""What distributed mini-batch training would send and hold at any number of workers, before a
run: the mini-batch rows of ``shardgnn plan`` (issue 32's cost model, beside the full-graph
strategies of :mod:`shardgnn.fullgraph.plan`).

For each worker count the graph is partitioned as for the full-graph strategies, and one training
epoch is sampled here, worker by worker, as the workers would sample it: each worker's seeds as
:class:`~shardgnn.loader.dist_batches.DistSeedBatcher` deals them (its own training nodes, evened
out; ``batch_size`` is the global batch, each worker takes ``ceil(B / P)``), its blocks drawn by
the same sampler and fanouts. Every row another worker owns crosses the all-to-all (as with
``--host-sharing off``, or one worker per machine); with ``--host-sharing auto`` (training's
default) and several workers a machine, rows owned on the reader's machine are read from the
mapped partition files instead, and only rows owned on other machines do (where every owner is
on the reader's machine, no sampling, fetch or label collective runs at all; nor can a cache or
8-bit rows save anything: those options are not planned):

* **sampling** (stage ``sample``): per hop, each frontier node another worker owns is an int64
  request to its owner, which replies with the node's edge count (int64) and its drawn edges
  (neighbour and edge id: two int64); a request carries a 3-int64 header (batch count, layer
  seed, row count). Three all-to-alls per hop.
* **fetching** (stage ``fetch``): each input node another worker owns is an int64 request and a
  row back, as its owner holds it (a mostly-zero part's as the fetched rows' own non-zeros: a
  count a row, a column and a value each; else the dense row), the values float32 or
  (``bits``) the codec's payload (a mostly-zero row's non-zeros quantised on their own range,
  its range in 4 bytes), and a 4-byte form word a reply.
  Two all-to-alls per batch.
* every all-to-all also sends an 8-byte row count to each peer (the communicator counts it).
* **a presample cache** (``--cache-policy presample --cache-size``): a second epoch on its own
  random stream stands for the pre-sampling epoch; each worker caches the remote rows it read
  most there (up to the capacity, a fraction of all nodes), and the training epoch's reads of
  them are not fetched.
* **historical embeddings** (``--historical L:AGE``, each scope, ``remote`` and ``all``, in
  each mode, ``push`` and ``pull``): the workers' batches are sampled in lockstep, batch ``i`` of
  every worker before any batch ``i + 1``, each pruned by its tables as
  :class:`~shardgnn.store.historical.HistoricalEmbeddings` prunes it (a node at layer ``>= L``
  with an entry at most AGE steps old is served, not expanded). Stage ``historical``, per layer
  and batch: in push mode, after each step every owner pushes the rows its batch computed for
  its own nodes to the workers that watch them (an int64 id and a float32 row at the hidden
  width each, each row to each worker at most every AGE steps); in pull mode a worker's
  sampling asks the owners for the watched nodes it holds no fresh entry of (an int64 id out,
  an int64 stamp back, and the row where the owner's latest is at most AGE steps old). A first
  epoch fills the tables; the second is counted: what a run settles to. Fewer expanded nodes
  mean fewer sampled edges and fetched rows (and less compute).

These are the ``sample`` and ``fetch`` byte counters of one training epoch (the results'
``comm``), up to sampling noise: predicted against measured at P = 2, 3, 4 in the tests. Not
counted: evaluation, the labels of seeds dealt to a worker that does not own them (a few bytes;
their exchange's calls are timed) and edge rows (GINE).

**Activations**: what the busiest worker's training step keeps for backward on its largest
batch (the batch's input rows, every layer's saved tensors; weights and the loss's few rows
not counted). The bytes a forward over one batch keeps are linear in the batch's sizes (each
block's source rows, its seeds, each block's edges, and where historical embeddings served
some of a layer's input rows, the rows the layer below computed): :func:`batch_activation_bytes`
measures the coefficients on the planned model itself (one set per layers served), and each
sampled batch's sizes price it. Where workers gather the batches sparse (bag-of-words features
stored as CSR, a model of :data:`~shardgnn.nn.config.SPARSE_INPUT_MODELS`; a cache serves its
dense rows into the sparse batch), the input rows are measured as a sparse tensor of the
density of the rows the sampled batches read (sampling reads well-connected nodes most, whose
rows may be denser than the mean): their non-zeros, not their dense bytes.

**Epoch time** (with :class:`~shardgnn.fullgraph.rates.MachineRates` whose calibration timed
the planned model's mini-batch step, :class:`~shardgnn.fullgraph.rates.StepProbe`): per
worker, its sampling and its steps (seconds per batch plus seconds per edge of its blocks, at
the threads it gets; sampling at the distributed sampler's rates, calibrated on two workers,
when the rates hold them (where every owner is on the worker's machine, those of the
sampler reading its peer's part); the workers of a machine share its cores), each batch
waiting for its busiest worker (lockstep; batches gathered sparse at the rates of the step
timed with sparse input rows), and its exchanges: the bytes above and the gradient all-reduce
over the link, plus the latency of every collective call per peer (sampling's four per hop,
fetching's four, the labels' three (none of these where every owner is on the machine), the
all-reduce, the stop agreement, the historical exchanges' three (push) or four (pull) per
layer; an all-to-all whose receiver does not know the sizes sends them first, a call of its
own: BENCHMARKS 32za); the slowest machine sets the epoch. With 8-bit rows,
each worker also encodes the rows it sends and decodes those it receives (the codec's calibrated
seconds per value, in calls of the rows a peer's share of a batch holds: a call's values cost
more once its rows outgrow the caches). With historical embeddings, each worker's tables also
do their own work per served layer and step (the exchange's bookkeeping) and per row it sends
or receives (lookups, gathers, table writes), at the rates the calibration probed on real
tables (:attr:`~shardgnn.fullgraph.rates.MachineRates.history_s`): in push mode after the
step, in pull mode in the sampling. With a presample cache, each worker's cache does its own
work per batch and per remote row its batches read (splitting and looking the ids up, copying
the hits: :attr:`~shardgnn.fullgraph.rates.MachineRates.cache_s`, probed on a real cache), in
the sampling: on one machine's loopback the bytes a cache saves cost less than that work
(BENCHMARKS 32w). Where a machine runs as many workers as it has cores
or more, each of those calls also costs the calibration's crowding probe at the work a worker
does before it (a share of the batch's sampling; its step before the all-reduce)
(:meth:`~shardgnn.fullgraph.rates.MachineRates.crowding`): workers in lockstep wait at every
call for peers the OS has descheduled, which fair sharing of the cores does not price. Where
the rates hold the crowded-step probe at that many workers
(:meth:`~shardgnn.fullgraph.rates.MachineRates.step_crowding`), each step takes its factor
times its fair share of the cores instead, its all-reduce's wait included (that call is then
not charged the crowding probe): a real batch's memory traffic contends for the cores in a way
the probe's small products do not; where every owner is on the machine, the sampling too (the
workers read each other's parts: no call to wait at, the sampler's work crowded like a step's).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from shardgnn.fullgraph.plan import host_seconds, linear_layers, saved_bytes
from shardgnn.fullgraph.rates import MachineRates, sparse_input
from shardgnn.graph.csr import Graph
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.partition.book import relabel
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.dist_neighbor import CALLS_PER_HOP
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.types import SeedInput
from shardgnn.seeding import mix_seed
from shardgnn.store.cache.config import resolve_capacity
from shardgnn.store.config import HISTORICAL_MODES, split_historical
from shardgnn.store.dist_feature import DENSE_FETCH_CALLS, PACKED_FETCH_CALLS, reply_bytes
from shardgnn.store.feature import CSR_ENTRY_BYTES, SparseRowStore, held_bytes, held_sparse
from shardgnn.store.historical import NEVER, sorted_lookup

_ID = 8  # bytes of one int64 id, count or edge column
_HEADER = 3 * _ID  # a sampling request's header: batch count, layer seed, row count
PRESAMPLE_STREAM = 0x9E5A
"""the pre-sampling epoch's own random stream (the workers' presample caches draw theirs apart
from the training epochs' too; the draws differ, their statistics do not)"""


@dataclasses.dataclass(kw_only=True)
class MiniBatchCost:
    """Mini-batch training at one worker count with one set of options.

    Attributes:
        workers: ``P``; option: what it runs with (``exact``, ``8-bit``, ``cache 20%``, ...);
            flags: the ``shardgnn train`` flags that run it.
        batch_size: seed nodes per step over all workers; batches: per worker per epoch.
        fetch_rows: rows fetched from other workers per epoch, all workers.
        hit_rate: the share of remote reads the cache serves (``None``: no cache).
        sample_bytes, fetch_bytes, history_bytes: the ``sample``, ``fetch`` and
            ``historical`` stages' bytes per epoch, all workers; bytes_per_epoch: their sum.
        history_hit_rate: historical embeddings: the share of looked-up nodes a table serves
            (``None``: none planned).
        max_worker_bytes, max_worker_recv: the most one worker sends / receives of those.
        held_mb: the largest worker's feature rows, adjacency and cache, MB.
        cache_mb: the largest worker's cached rows, MB (in ``held_mb``): dense, or as CSR
            where batches are sparse and the cached rows mostly zero (their non-zeros).
        activation_mb: what the busiest worker's step keeps for backward on its largest batch
            (its input rows and every layer's saved tensors), MB.
        sparse_batches: the workers gather each batch's input rows as a sparse tensor (features
            stored as CSR, a model that takes them; with a cache too), which the step's input
            layer multiplies by their non-zeros.
        sample_s, compute_s: the busiest worker's sampling and compute seconds of one epoch
            (with rates); comm_s: its exchanges'; epoch_s: the slowest host's sampling and
            compute (its workers sharing its cores) and exchanges.
    """

    workers: int
    option: str
    flags: tuple[str, ...]
    batch_size: int
    batches: int
    fetch_rows: int
    hit_rate: float | None
    sample_bytes: int
    fetch_bytes: int
    history_bytes: int = 0
    history_hit_rate: float | None = None
    max_worker_bytes: int
    max_worker_recv: int
    held_mb: float
    cache_mb: float = 0.0
    activation_mb: float = 0.0
    sparse_batches: bool = False
    sample_s: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    epoch_s: float | None = None

    @property
    def bytes_per_epoch(self) -> int:
        return self.sample_bytes + self.fetch_bytes + self.history_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "bytes_per_epoch": self.bytes_per_epoch}


@dataclasses.dataclass(frozen=True)
class HistoryPlan:
    """Historical embeddings as ``shardgnn train --historical L:AGE`` runs them.

    Attributes:
        layers: the block layers served from the tables (``L .. hops - 1``).
        max_age: an entry serves at most this many steps after the step that computed it.
        push_every: push mode: an owner re-sends a node's row to a worker at most every this
            many steps.
        scope: ``remote`` (DistGNN-MB) or ``all`` (own nodes too, GNNAutoScale).
        mode: ``push`` (owners send what they computed after each step) or ``pull`` (a worker
            asks the owners for the entries its sampling needs).
    """

    layers: range
    max_age: int
    push_every: int
    scope: str = "remote"
    mode: str = "push"

    @classmethod
    def of(cls, spec: str, hops: int, scope: str = "remote", mode: str = "push") -> HistoryPlan:
        """From ``--historical L:AGE`` (checked by the config) with the training default
        ``--historical-push-every`` (AGE)."""
        layer, age = split_historical(spec)
        return cls(range(layer, hops), age, max(1, age), scope, mode)

    @property
    def option(self) -> str:
        words = [f"historical {self.layers.start}:{self.max_age}"]
        words += ["all"] if self.scope == "all" else []
        return " ".join(words + (["pull"] if self.mode == "pull" else []))

    @property
    def flags(self) -> tuple[str, ...]:
        flags = ("--historical", f"{self.layers.start}:{self.max_age}")
        flags += ("--historical-scope", "all") if self.scope == "all" else ()
        return flags + (("--historical-mode", "pull") if self.mode == "pull" else ())

    @property
    def calls(self) -> int:
        """The collective calls per historical layer and batch: push, ids (their sizes first)
        and rows after the step; pull, ids out (their sizes first), stamps and rows back while
        sampling."""
        return 4 if self.mode == "pull" else 3


class _HistoryTables:
    """Every worker's historical-embedding stamps, as :class:`~shardgnn.store.historical.
    HistoricalEmbeddings` keeps them (rows are not needed to count): which halo node has an
    entry fresh enough to serve, which own node its owner computed lately (what scope ``all``
    serves and pull mode answers from), and the rows each owner sends each watcher (push: after
    each step; pull: in reply to the ids the watcher's sampling asks for).

    One entry per (watcher, node) pair of the halos, watcher-major (a worker's halo is a slice);
    ``by_node`` orders them node-major, so a step's pushes gather the watchers of the nodes it
    computed without a pass per worker."""

    def __init__(self, graph: Graph, owner: np.ndarray, workers: int, history: HistoryPlan):
        self.owner, self.history, self.step, n = owner, history, 0, graph.num_nodes
        indices = np.asarray(graph.indices, dtype=np.int64)
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr))
        cross = owner[indices] != owner[dst]
        # each worker's halo: the remote in-neighbours of its nodes (halo_of its part)
        pairs = np.unique(owner[dst[cross]] * n + indices[cross])
        self.watcher, self.node = pairs // n, pairs % n
        self.start = np.searchsorted(self.watcher, np.arange(workers + 1))
        self.by_node = np.argsort(self.node, kind="stable")
        self.node_ptr = np.searchsorted(self.node[self.by_node], np.arange(n + 1))
        self.stamps = {layer: np.full(pairs.shape[0], NEVER) for layer in history.layers}
        # push mode: when each owner last sent each entry (pull mode answers from own_stamps)
        pushes = history.mode == "push"
        self.sent = {layer: np.full(pairs.shape[0], NEVER) for layer in history.layers if pushes}
        self.own_stamps = {layer: np.full(n, NEVER) for layer in history.layers}
        self.workers = workers
        self.reset()

    def reset(self) -> None:
        """Zero the epoch's counters."""
        self.lookups = self.hits = 0
        self.pushed = np.zeros((self.workers, self.workers), np.int64)  # rows owner -> watcher
        self.asked = np.zeros((self.workers, self.workers), np.int64)  # pull: ids watcher -> owner

    def prune(self, worker: int):
        """``prune(layer, src nodes, num dst)`` of ``worker``'s sampler at this step."""
        history = self.history
        first, last = int(self.start[worker]), int(self.start[worker + 1])

        def prune(layer: int, src_nodes: np.ndarray, num_dst: int) -> np.ndarray | None:
            if layer not in history.layers:
                return None
            mask = np.zeros(src_nodes.shape[0], dtype=bool)
            others = src_nodes[num_dst:]
            own = self.owner[others] == worker
            remote = np.flatnonzero(~own)
            self.lookups += int(others.shape[0] if history.scope == "all" else remote.shape[0])
            watched, pos = sorted_lookup(self.node[first:last], others[remote])
            entry = first + pos
            fresh = watched & (self.step - self.stamps[layer][entry] <= history.max_age)
            if history.mode == "pull":
                # ask the owners; each answers with its latest row when fresh enough
                need = np.flatnonzero(watched & ~fresh)
                nodes = others[remote[need]]
                self.asked[worker] += np.bincount(self.owner[nodes], minlength=self.workers)
                stamp = self.own_stamps[layer][nodes]
                got = self.step - stamp <= history.max_age
                self.stamps[layer][entry[need[got]]] = stamp[got]
                self.pushed[:, worker] += np.bincount(
                    self.owner[nodes[got]], minlength=self.workers
                )
                fresh[need[got]] = True
            mask[num_dst + remote] = fresh
            if history.scope == "all":
                own_at = np.flatnonzero(own)
                age = self.step - self.own_stamps[layer][others[own_at]]
                mask[num_dst + own_at] = age <= history.max_age
            self.hits += int(mask.sum())
            return mask

        return prune

    def after_step(self, computed: list[dict[int, np.ndarray]]) -> None:
        """The step's pushes: ``computed[w][l]``, the nodes whose ``h^l`` worker ``w``'s batch
        computed; each owner sends its own ones to the workers that watch them, each row to each
        worker at most once every ``push_every`` steps."""
        step, workers = self.step, self.workers
        for layer in self.history.layers:
            mine = [c[layer][self.owner[c[layer]] == w] for w, c in enumerate(computed)]
            nodes = np.concatenate(mine) if mine else np.zeros(0, np.int64)
            self.own_stamps[layer][nodes] = step
            if self.history.mode == "pull":
                continue
            # every (watcher, node) entry of the computed nodes
            lo, hi = self.node_ptr[nodes], self.node_ptr[nodes + 1]
            size = hi - lo
            offsets = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
            entry = self.by_node[np.repeat(lo, size) + offsets]
            due = entry[step - self.sent[layer][entry] >= self.history.push_every]
            self.sent[layer][due] = step
            self.stamps[layer][due] = step
            pair = self.owner[self.node[due]] * workers + self.watcher[due]
            self.pushed += np.bincount(pair, minlength=workers * workers).reshape(workers, -1)
        self.step += 1


@dataclasses.dataclass
class _Epoch:
    """One sampled epoch, per worker ``w`` and owner ``o`` (``[P, P]`` int64 each)."""

    frontier: np.ndarray
    """remote frontier rows ``w`` asks ``o`` to sample"""
    edges: np.ndarray
    """edges ``o`` draws for them"""
    requests: np.ndarray
    """(batch, hop) requests from ``w`` to ``o`` that ask for any row"""
    inputs: list[np.ndarray]
    """per worker: every remote input node it reads, one entry per read (original ids)"""
    input_reads: list[np.ndarray]
    """per worker: every input node of its batches, own and remote, one entry per batch that
    reads it (original ids): whose rows the batches' input rows are"""
    batches: int
    block_edges: np.ndarray
    """``[P, L]``: per worker, the edges of its layer-``l`` blocks (input layer first)"""
    batch_edges: np.ndarray
    """``[P, batches]``: per worker, the edges of each batch's blocks (0 for a batch it has no
    seeds in): the workers step in lockstep, so each batch waits for its busiest worker"""
    batch_input_edges: np.ndarray
    """``[P, batches]``: of those, the input layer's block's"""
    batch_sizes: np.ndarray
    """``[P, batches, 3L]``: per worker and batch, its sizes (:func:`batch_shape`; zeros for a
    batch it has no seeds in)"""
    pushed: np.ndarray | None = None
    """historical embeddings: rows each owner sends each watcher (pushed or pulled), summed"""
    asked: np.ndarray | None = None
    """historical embeddings in pull mode: ids each watcher asks each owner for, summed"""
    boundary_rows: np.ndarray | None = None
    """historical embeddings: ``[P]`` each worker's own nodes that another worker watches"""
    history_hit_rate: float | None = None
    """historical embeddings: the share of looked-up nodes served from a table"""
    halo_rows: np.ndarray | None = None
    """historical embeddings: ``[P]`` the nodes each worker's tables watch"""


def sample_epoch(
    graph: Graph,
    owner: np.ndarray,
    workers: int,
    fanouts: tuple[int, ...],
    batch_size: int,
    seed: int,
    history: HistoryPlan | None = None,
    host_P: np.ndarray | None = None,
) -> _Epoch:
    """Sample one epoch of every worker's batches (see the module docstring), the workers in
    lockstep; with ``history``, after a first epoch that fills the tables (the counted epoch is
    the second: what a run settles to). ``host_P``: each worker's machine where the workers of
    one read each other's rows (:func:`sharing_hosts`; None: each worker on its own): a node
    owned on the reader's machine is read there, neither requested nor fetched."""
    rel = relabel(owner, workers)
    train_new = np.sort(rel.new_id_of_orig[np.asarray(graph.train_idx, dtype=np.int64)])
    per_rank = max(1, -(-batch_size // workers))
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=fanouts))
    batchers = [
        DistSeedBatcher(train_new, rel.book, w, workers, per_rank, shuffle=True, seed=seed)
        for w in range(workers)
    ]
    count = batchers[0].count
    tables = None if history is None else _HistoryTables(graph, owner, workers, history)
    host_P = np.arange(workers) if host_P is None else host_P
    if tables is not None:  # the first epoch fills the tables
        _sample_lockstep(sampler, batchers, rel, owner, host_P, seed, tables, 0)
        tables.reset()
        for batcher in batchers:
            batcher.set_epoch(1)
    first = count if tables else 0
    epoch = _sample_lockstep(sampler, batchers, rel, owner, host_P, seed, tables, first)
    if tables is not None:
        epoch.pushed, epoch.asked = tables.pushed, tables.asked
        epoch.boundary_rows = np.bincount(owner[np.unique(tables.node)], minlength=workers).astype(
            np.int64
        )
        epoch.history_hit_rate = tables.hits / tables.lookups if tables.lookups else 0.0
        epoch.halo_rows = np.diff(tables.start)
    return epoch


def _sample_lockstep(sampler, batchers, rel, owner, host_P, seed, tables, first_index) -> _Epoch:
    """One epoch of every worker's batches, batch by batch (each worker's batch ``i`` is
    sampled before any worker's ``i + 1``, as the workers run; with ``tables``, pruned by the
    historical tables, which every step's computed rows then refresh); a node is remote where
    its owner's machine (``host_P``) is not the worker's."""
    workers, count = len(batchers), batchers[0].count
    hops = sampler.num_layers
    frontier = np.zeros((workers, workers), np.int64)
    edges = np.zeros((workers, workers), np.int64)
    requests = np.zeros((workers, workers), np.int64)
    block_edges = np.zeros((workers, hops), np.int64)
    batch_edges = np.zeros((workers, count), np.int64)
    batch_input_edges = np.zeros((workers, count), np.int64)
    batch_sizes = np.zeros((workers, count, 3 * hops), np.int64)
    reads: list[list[np.ndarray]] = [[] for _ in range(workers)]
    all_reads: list[list[np.ndarray]] = [[] for _ in range(workers)]
    dealt = [b.batches() for b in batchers]
    for index in range(count):
        computed = []
        for w in range(workers):
            seeds_new = dealt[w][index] if index < len(dealt[w]) else np.zeros(0, np.int64)
            computed.append({})
            if not seeds_new.size:
                for layer in tables.history.layers if tables else ():
                    computed[w][layer] = np.zeros(0, np.int64)
                continue
            sampler.prune = None if tables is None else tables.prune(w)
            seeds = rel.orig_ids[seeds_new]
            sample = sampler.sample(SeedInput(seeds), mix_seed(seed, w, first_index + index))
            for layer, block in enumerate(sample.blocks):
                dst = block.src_nodes_S[: block.num_dst].numpy()
                drawn = np.diff(block.indptr_D1.numpy())
                dst_owner = owner[dst]
                remote = host_P[dst_owner] != host_P[w]
                asked = np.bincount(dst_owner[remote], minlength=workers)
                frontier[w] += asked
                edges[w] += np.bincount(
                    dst_owner[remote], weights=drawn[remote], minlength=workers
                ).astype(np.int64)
                requests[w] += asked > 0
                block_edges[w, layer] += block.num_edges
                batch_edges[w, index] += block.num_edges
                if tables is not None and layer + 1 in tables.history.layers:
                    computed[w][layer + 1] = dst  # h^{l+1}: this block's outputs
            batch_input_edges[w, index] = sample.blocks[0].num_edges
            batch_sizes[w, index] = batch_shape(sample.blocks)
            read = sample.blocks[0].src_nodes_S.numpy()
            reads[w].append(read[host_P[owner[read]] != host_P[w]])
            all_reads[w].append(read)
        if tables is not None:
            tables.after_step(computed)
    sampler.prune = None
    inputs = [np.concatenate(r) if r else np.zeros(0, np.int64) for r in reads]
    input_reads = [np.concatenate(r) if r else np.zeros(0, np.int64) for r in all_reads]
    return _Epoch(
        frontier, edges, requests, inputs, input_reads, count, block_edges, batch_edges,
        batch_input_edges, batch_sizes,
    )  # fmt: skip


def batch_shape(blocks) -> list[int]:
    """A batch's sizes as :func:`batch_activation_bytes` prices them (``3L``): every block's
    source rows ``S_0 .. S_{L-1}`` (input layer first), the last block's destination rows (the
    seeds, ``S_L``), every block's edges ``E_0 .. E_{L-1}``, and the rows each layer below
    computed for layers ``1 .. L-1`` (``C_l``: block ``l - 1``'s destinations; ``C_l < S_l``
    where historical embeddings served the others)."""
    return [
        *(b.num_src for b in blocks), blocks[-1].num_dst, *(b.num_edges for b in blocks),
        *(b.num_dst for b in blocks[:-1]),
    ]  # fmt: skip


def served_layers(sizes: np.ndarray, layers: int) -> tuple[int, ...]:
    """The layers of a batch of :func:`batch_shape` ``sizes`` some of whose input rows
    historical embeddings served (``C_l < S_l``)."""
    return tuple(
        layer for layer in range(1, layers) if sizes[2 * layers + layer] < sizes[layer]
    )  # fmt: skip


def batch_bytes(
    sizes: np.ndarray, layers: int, coefficients: Callable[[tuple[int, ...]], np.ndarray]
) -> np.ndarray:
    """``sizes[..., 3L]`` (:func:`batch_shape`; all zeros: no batch, 0 bytes) -> ``[...]``
    the bytes each batch's training forward keeps for backward, each priced by
    ``coefficients(layers served)`` (:func:`batch_activation_bytes` of the model, all but its
    ``served``)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    flat = sizes.reshape(-1, sizes.shape[-1])
    out = np.zeros(flat.shape[0], np.int64)
    patterns = [served_layers(row, layers) for row in flat]
    for served in set(patterns):
        rows = np.array([p == served for p in patterns]) & flat.any(1)
        per_batch = coefficients(served)
        out[rows] = flat[rows] @ per_batch[:-1] + per_batch[-1]
    return out.reshape(sizes.shape[:-1])


def batch_activation_bytes(
    model: str,
    hidden: int,
    layers: int,
    dropout: float,
    input_dropout: float,
    in_dim: int,
    out_dim: int,
    served: tuple[int, ...] = (),
    input_density: float = 0.0,
) -> np.ndarray:
    """``[3L + 1]``: the bytes a training forward of the model :mod:`shardgnn.nn` builds
    (``--model``, ``--hidden``, ``layers`` blocks, ``--dropout``, ``--input-dropout``; dropout
    hashed, as training draws it) keeps for backward over one batch, as coefficients of the
    batch's sizes (:func:`batch_shape`) and a constant last; ``served``: the layers whose
    input rows historical embeddings served in part (:func:`served_layers`; the others' ``C_l``
    equal ``S_l`` and weigh 0); ``input_density`` (above 0): the input rows are a sparse tensor
    of that share of non-zeros, as sparse batches gather them. Measured: the forward over random
    blocks of a base shape and of that shape with each size grown, every saved tensor's storage
    counted once (:func:`~shardgnn.fullgraph.plan.saved_bytes`; the input rows are, the weights
    are not)."""
    return np.array(
        _batch_coefficients(
            model,
            hidden,
            layers,
            dropout,
            input_dropout,
            tuple(served),
            input_density,
            in_dim,
            out_dim,
        ),
        dtype=np.int64,
    )


def _random_blocks(sizes: np.ndarray, layers: int, rng: np.random.Generator) -> list:
    """Blocks of the batch shape ``sizes`` (:func:`batch_shape`), random edges and degrees."""
    from shardgnn.nn.message_graph import MessageGraph

    graphs = []
    for layer in range(layers):
        num_src, num_edges = sizes[layer], sizes[layers + 1 + layer]
        num_dst = sizes[layers] if layer == layers - 1 else sizes[2 * layers + 1 + layer]
        dst = np.sort(rng.integers(0, num_dst, num_edges))
        indptr = np.r_[0, np.cumsum(np.bincount(dst, minlength=num_dst))]
        graphs.append(
            MessageGraph(
                torch.from_numpy(indptr),
                torch.from_numpy(rng.integers(0, num_src, num_edges)),
                int(num_src),
                src_degree_S=torch.from_numpy(rng.integers(1, 12, num_src)),
                node_keys_S=torch.from_numpy(rng.permutation(4 * int(num_src))[:num_src]),
            )
        )
    return graphs


def measured_batch_bytes(
    net: torch.nn.Module, graphs: list, x_SF: torch.Tensor, history: dict | None = None
) -> int:
    """What ``net``'s forward over the blocks ``graphs`` from the input rows ``x_SF`` (with
    ``history``: the rows served, as training passes them) keeps for backward (its weights not
    counted)."""
    return saved_bytes(functools.partial(net, graphs, x_SF, history=history), net)


def _sparse_rows(rows: int, width: int, density: float) -> torch.Tensor:
    """A sparse batch's input rows, ``density`` of them non-zero, gathered as workers gather them
    (:class:`~shardgnn.store.feature.SparseRowStore`), spread so that every prefix of rows holds
    that share of its entries to within one: the sizes grown by a few rows add their exact share
    (random rows would add a share varying by the square root of their count)."""
    indptr = np.round(density * width * np.arange(rows + 1)).astype(np.int64)
    nonzeros_R = np.diff(indptr)
    row_K = np.repeat(np.arange(rows), nonzeros_R)
    within_K = np.arange(indptr[-1]) - np.repeat(indptr[:-1], nonzeros_R)
    # each row's columns ascending from an offset that leaves room for them
    col_K = (7 * row_K) % np.maximum(1, width - nonzeros_R[row_K] + 1) + within_K
    values_K = np.random.default_rng(0).standard_normal(indptr[-1]).astype(np.float32)
    store = SparseRowStore(indptr, col_K.astype(np.int32), values_K, width, sparse_batches=True)
    return store.gather(torch.arange(rows))


@functools.lru_cache(maxsize=32)
def _batch_coefficients(
    model: str,
    hidden: int,
    layers: int,
    dropout: float,
    input_dropout: float,
    served: tuple[int, ...],
    input_density: float,
    *dims: int,
) -> tuple[int, ...]:
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.models import build_model

    settings = ModelConfig(
        model=model, hidden=hidden, num_layers=layers, dropout=dropout, input_dropout=input_dropout
    )
    # source rows halve layer by layer (S_l - S_{l+1} >= 48 > the step), edges 5 per
    # destination; a served layer's computed rows 24 fewer than its source rows (the step 16)
    rows = [48 * 2 ** (layers - layer) + 16 for layer in range(layers + 1)]
    computed = [rows[layer] - (24 if layer in served else 0) for layer in range(1, layers)]
    base = np.array(rows + [5 * r for r in rows[1:]] + computed, dtype=np.int64)
    steps = np.array([16] * (layers + 1) + [64] * layers + [16] * (layers - 1), dtype=np.int64)
    grown = np.eye(len(base), dtype=np.int64) * steps
    for layer in range(1, layers):
        if layer not in served:  # C_l is S_l: grown with it, weighs 0 itself
            grown[layer, 2 * layers + layer] = steps[layer]
            grown[2 * layers + layer] = 0
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = build_model(settings, *dims).train()
        net.use_hashed_dropout(0)

        def saved(sizes: np.ndarray) -> int:
            graphs = _random_blocks(sizes, layers, np.random.default_rng(0))
            history = {}
            for layer in served:  # the last rows served (their places do not change the bytes)
                mask_S = torch.arange(int(sizes[layer])) >= sizes[2 * layers + layer]
                history[layer] = (mask_S, torch.randn(int(mask_S.sum()), hidden))
            x_SF = torch.randn(int(sizes[0]), dims[0])
            if input_density > 0:
                x_SF = _sparse_rows(int(sizes[0]), dims[0], input_density)
            return measured_batch_bytes(net, graphs, x_SF, history or None)

        at_base = saved(base)
        slopes = [
            (saved(base + step) - at_base) // int(step[step > 0].min()) if step.any() else 0
            for step in grown
        ]
    constant = at_base - int(np.dot(slopes, base))
    return (*map(int, slopes), constant)


def presample_cached(
    presample: _Epoch,
    owner: np.ndarray,
    worker: int,
    capacity: int,
    host_P: np.ndarray | None = None,
) -> np.ndarray:
    """``[N]`` whether worker ``worker``'s presample cache of ``capacity`` rows holds each node:
    the remote rows ``presample`` reads most often (ties: lower id first), at most as many as
    there are (``host_P``: as :func:`sample_epoch`'s; rows owned on the worker's machine are
    read there, not cached)."""
    n = owner.shape[0]
    counts = np.bincount(presample.inputs[worker], minlength=n)
    here = owner == worker if host_P is None else host_P[owner] == host_P[worker]
    k = min(capacity, n - int(here.sum()))
    candidates = np.flatnonzero(counts)
    order = np.lexsort((candidates, -counts[candidates]))
    cached = np.zeros(n, dtype=bool)
    cached[candidates[order[:k]]] = True
    return cached


class Misses(NamedTuple):
    """What a training epoch's workers fetch (:func:`cache_misses`)."""

    rows: np.ndarray
    """``[P, P]``: the rows worker ``w`` fetches from owner ``o`` (one per read)"""
    hit_rate: float
    """the share of remote reads the caches served"""
    nonzeros: np.ndarray | None
    """``[P, P]``: those rows' non-zeros in all (None: not asked)"""


def cache_misses(
    train: _Epoch,
    cached: list[np.ndarray] | None,
    owner: np.ndarray,
    workers: int,
    nonzeros_N: np.ndarray | None = None,
) -> Misses:
    """The rows the training epoch ``train``'s workers fetch from each owner, each worker's
    cache holding the nodes ``cached[w]`` marks (``[N]`` bool, as :func:`presample_cached`;
    None: no cache), and the caches' hit rate; with ``nonzeros_N`` (each node's row's non-zero
    count) also the fetched rows' non-zeros."""
    fetched = np.zeros((workers, workers), np.int64)
    fetched_nonzeros = None if nonzeros_N is None else np.zeros((workers, workers), np.int64)
    reads = hits = 0
    for w in range(workers):
        ids = train.inputs[w]
        miss = ids
        if cached is not None:
            miss = ids[~cached[w][ids]]
        reads += ids.size
        hits += ids.size - miss.size
        fetched[w] = np.bincount(owner[miss], minlength=workers)
        if fetched_nonzeros is not None:
            weights = nonzeros_N[miss].astype(np.float64)
            fetched_nonzeros[w] = np.bincount(owner[miss], weights, minlength=workers)
    return Misses(fetched, hits / reads if reads else 0.0, fetched_nonzeros)


def sharing_hosts(workers: int, workers_per_host: int, host_sharing: bool) -> np.ndarray:
    """``[P]`` each worker's machine as far as reading rows goes: ``workers_per_host``
    consecutive ranks a machine (as torchrun and the local launcher number them) with
    ``host_sharing`` (``--host-sharing auto``: they read each other's mapped partition files),
    else every worker on its own (``off``: every remote row crosses the collectives)."""
    return np.arange(workers) // (workers_per_host if host_sharing else 1)


def minibatch_costs(
    graph: Graph,
    assignment: np.ndarray,
    workers: int,
    *,
    model: str,
    hidden: int,
    fanouts: tuple[int, ...],
    batch_size: int,
    cache_size: str,
    historical: str | None = None,
    seed: int = 0,
    rates: MachineRates | None = None,
    workers_per_host: int = 1,
    host_sharing: bool = False,
    dropout: float = 0.5,
    input_dropout: float = 0.0,
) -> list[MiniBatchCost]:
    """The mini-batch options' costs at ``workers`` on one partition (``assignment``: each
    node's part): exact rows, 8-bit rows, a presample cache of ``cache_size`` (as
    ``--cache-size``), both; with ``historical`` (``L:AGE``) also historical embeddings serving
    remote nodes and serving every node (see the module docstring). ``host_sharing``: the
    ``workers_per_host`` workers of a machine read each other's rows (``--host-sharing auto``):
    rows owned on the reader's machine cost no bytes, and where every owner is on it no
    collective either (no 8-bit rows or cache then: nothing is fetched). ``dropout``
    and ``input_dropout`` shape the activations (what dropout keeps for backward)."""
    owner = np.asarray(assignment, dtype=np.int64)
    host_P = sharing_hosts(workers, workers_per_host, host_sharing)
    # the sampling, fetch and label exchanges are collectives only where an owner is elsewhere
    collective = bool(host_P[-1] != host_P[0])
    train = sample_epoch(graph, owner, workers, fanouts, batch_size, seed, host_P=host_P)
    presample = sample_epoch(
        graph, owner, workers, fanouts, batch_size, mix_seed(seed, PRESAMPLE_STREAM), host_P=host_P
    )
    in_dim, n = int(graph.x.shape[1]), graph.num_nodes
    capacity = resolve_capacity(cache_size, n, 4 * in_dim)
    hops = len(fanouts)
    own_rows = np.bincount(owner, minlength=workers)
    own_edges = np.bincount(owner, weights=np.diff(graph.indptr), minlength=workers)
    nonzeros_N = np.count_nonzero(graph.x, axis=1)
    own_nonzeros = np.bincount(owner, weights=nonzeros_N, minlength=workers)
    held_base = held_bytes(own_rows, in_dim, own_nonzeros) + own_edges * _ID + (own_rows + 1) * _ID
    sparse = sparse_input(model, int(nonzeros_N.sum()), graph.x.size)
    # which owners hold their rows as CSR, so reply with their non-zeros (pack_reply)
    owner_sparse = held_sparse(own_rows, in_dim, own_nonzeros)

    def coded_values(fetched: np.ndarray, fetched_nonzeros: np.ndarray) -> np.ndarray:
        """The values the codec encodes per requester and owner: a mostly-zero part's
        non-zeros, a dense part's every value."""
        return np.where(owner_sparse[None, :], fetched_nonzeros, fetched * in_dim)

    def coefficients(epoch: _Epoch):
        """The activations' coefficients of ``epoch``'s batches: where they are gathered sparse,
        at their input rows' share of non-zeros (not the graph's: sampling reads well-connected
        nodes most, and on coauthor-cs their rows hold 1.6x the mean row's non-zeros)."""
        density = 0.0
        if sparse:
            reads = np.concatenate(epoch.input_reads)
            density = float(nonzeros_N[reads].sum()) / max(1, reads.size * in_dim)
            # batch_activation_bytes takes a density of 0 for dense rows: rows read all zero
            # are still a sparse tensor (of no non-zeros)
            density = max(density, 1e-12)
        return functools.partial(
            batch_activation_bytes, model, hidden, hops, dropout, input_dropout, in_dim,
            graph.num_classes, input_density=density,
        )  # fmt: skip

    @functools.cache
    def cached(cap: int) -> list[np.ndarray] | None:
        """Each worker's presample cache of ``cap`` rows: the nodes it holds (None: no cache)."""
        if not cap:
            return None
        return [presample_cached(presample, owner, w, cap, host_P) for w in range(workers)]

    @functools.cache
    def cache_bytes(cap: int) -> np.ndarray:
        """Each worker's presample cache of ``cap`` rows: dense, or as CSR (its rows' non-zeros,
        each slot's offset) where the batches are sparse and the cached rows mostly zero."""
        dense = np.minimum(cap, n - own_rows) * in_dim * 4
        if not cap or not sparse:
            return dense
        slots = min(cap, n)  # CachedFeatureStore.capacity
        cached_nonzeros = np.array([nonzeros_N[held].sum() for held in cached(cap)])
        csr = held_sparse(np.full(workers, slots), in_dim, cached_nonzeros)
        return np.where(csr, cached_nonzeros * CSR_ENTRY_BYTES + (slots + 1) * 8, dense)

    options = [("exact", 32, 0, train, None)]
    if collective:  # else no row is fetched: nothing to code or cache
        options += [
            ("8-bit", 8, 0, train, None),
            (f"cache {cache_size}", 32, capacity, train, None),
            (f"8-bit + cache {cache_size}", 8, capacity, train, None),
        ]
    for scope, mode in itertools.product(("remote", "all"), HISTORICAL_MODES):
        if historical is None:
            break
        history = HistoryPlan.of(historical, hops, scope, mode)
        epoch = sample_epoch(graph, owner, workers, fanouts, batch_size, seed, history, host_P)
        options.append((history.option, 32, 0, epoch, history))
    out = []
    misses: dict[tuple[int, int], Misses] = {}
    for option, bits, cap, epoch, history in options:
        if (id(epoch), cap) not in misses:
            misses[id(epoch), cap] = cache_misses(epoch, cached(cap), owner, workers, nonzeros_N)
        fetched, hit_rate, fetched_nonzeros = misses[id(epoch), cap]
        sample_sent, sample_recv = _sampling_bytes(epoch, hops, collective)
        peers = workers - 1 if collective else 0  # each all-to-all's row counts go to every peer
        metadata = _ID * peers * epoch.batches
        # each owner replies as it holds its rows, a form word a reply (a mostly-zero part's
        # replies: the fetched rows' own non-zeros, not its mean row's: sampling reaches
        # well-connected nodes more often, and on coauthor-cs their rows hold more non-zeros)
        replies = reply_bytes(in_dim, fetched, fetched_nonzeros, owner_sparse[None, :], bits)
        form = 4 * peers * epoch.batches
        # replies[w, o]: the bytes owner o replies to worker w's requests
        fetch_sent = _ID * fetched.sum(1) + replies.sum(0) + 2 * metadata + form
        fetch_recv = _ID * fetched.sum(0) + replies.sum(1) + 2 * metadata + form
        sent, recv = sample_sent + fetch_sent, sample_recv + fetch_recv
        held = held_base + cache_bytes(cap)
        history_sent = np.zeros(workers, np.int64)
        if history is not None:
            # per layer and step, push: the ids (with the row counts) and the rows, float32 at
            # the hidden width; pull: ids out (with the counts), a stamp back per id, the fresh
            # rows
            pushed, asked = epoch.pushed, epoch.asked
            rows_sent, rows_recv = 4 * hidden * pushed.sum(1), 4 * hidden * pushed.sum(0)
            # the ids' row counts (every other exchange's sizes are known to its receiver)
            metadata = _ID * (workers - 1) * len(history.layers) * epoch.batches
            if history.mode == "pull":
                ids_sent = _ID * (asked.sum(1) + asked.sum(0))  # asks out, stamps back
                ids_recv = ids_sent
            else:
                ids_sent, ids_recv = _ID * pushed.sum(1), _ID * pushed.sum(0)
            history_sent = rows_sent + ids_sent + metadata
            sent = sent + history_sent
            recv = recv + rows_recv + ids_recv + metadata
            # tables of the halo (rows, stamps; push: the sent steps), the own rows kept (scope
            # all: every own node; pull: those another worker watches) with their stamps
            halo = epoch.halo_rows
            kept = 0 if history.mode == "push" else epoch.boundary_rows
            kept = own_rows if history.scope == "all" else kept
            stamps = halo * (1 if history.mode == "pull" else 2) + kept
            held = held + len(history.layers) * ((halo + kept) * 4 * hidden + stamps * _ID)
        activations = batch_bytes(epoch.batch_sizes, hops, coefficients(epoch))
        flags = (["--fetch-bits", str(bits)] if bits < 32 else []) + (
            ["--cache-policy", "presample", "--cache-size", cache_size] if cap else []
        )
        cost = MiniBatchCost(
            workers=workers,
            option=option,
            flags=tuple(flags) + (history.flags if history else ()),
            batch_size=batch_size,
            batches=epoch.batches,
            fetch_rows=int(fetched.sum()),
            hit_rate=hit_rate if cap else None,
            sample_bytes=int(sample_sent.sum()),
            fetch_bytes=int(fetch_sent.sum()),
            history_bytes=int(history_sent.sum()),
            history_hit_rate=None if history is None else epoch.history_hit_rate,
            max_worker_bytes=int(sent.max()),
            max_worker_recv=int(recv.max()),
            held_mb=float(held.max()) / 1e6,
            cache_mb=float(cache_bytes(cap).max()) / 1e6,
            activation_mb=float(activations.max()) / 1e6,
            sparse_batches=sparse,
        )
        if rates is not None:
            times = _epoch_seconds(
                epoch, sent, recv, rates, model=model, hidden=hidden, in_dim=in_dim,
                out_dim=graph.num_classes, hops=hops, workers_per_host=workers_per_host,
                coded=coded_values(fetched, fetched_nonzeros) if bits < 32 else None,
                sparse_batches=sparse, collective=collective, history=history,
                cache_reads=np.array([ids.size for ids in epoch.inputs]) if cap else None,
            )  # fmt: skip
            cost = dataclasses.replace(cost, **times)
        out.append(cost)
    return out


def _codec_epoch_seconds(r, values: np.ndarray, batches: int, in_dim: int) -> np.ndarray:
    """Each worker's seconds per epoch, at its rates ``r``, to encode the values it sends and
    decode those it receives at 8 bits (``values[i, j]``: those worker ``i`` fetches from ``j``
    per epoch): one call per peer and batch, each at the rate of its share of the values (in
    rows of the features' width ``in_dim``, as the rates were timed; a mostly-zero part's
    non-zeros at that rate too, though they are quantised as ragged rows)."""
    call_rows = values / in_dim / max(1, batches)
    encode = (values * r.codec("encode8", call_rows)).sum(0)  # the owner encodes
    decode = (values * r.codec("decode8", call_rows)).sum(1)  # the requester decodes
    return encode + decode


def _sampling_bytes(
    epoch: _Epoch, hops: int, collective: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Each worker's sent and received bytes of the ``sample`` stage: requests (ids and
    headers) out, counts and drawn edges back, and (``collective``: some owner is on another
    machine) the requests' row counts."""
    sent = (
        _ID * epoch.frontier.sum(1) + _HEADER * epoch.requests.sum(1)  # as requester
        + _ID * epoch.frontier.sum(0) + 2 * _ID * epoch.edges.sum(0)  # as owner
    )  # fmt: skip
    recv = (
        _ID * epoch.frontier.sum(0) + _HEADER * epoch.requests.sum(0)
        + _ID * epoch.frontier.sum(1) + 2 * _ID * epoch.edges.sum(1)
    )  # fmt: skip
    peers = epoch.frontier.shape[0] - 1 if collective else 0
    metadata = hops * _ID * peers * epoch.batches  # the requests' sizes (the replies' known)
    return sent + metadata, recv + metadata


def _epoch_seconds(
    train: _Epoch,
    sent: np.ndarray,
    recv: np.ndarray,
    rates: MachineRates,
    *,
    model: str,
    hidden: int,
    in_dim: int,
    out_dim: int,
    hops: int,
    workers_per_host: int,
    coded: np.ndarray | None = None,
    history: HistoryPlan | None = None,
    sparse_batches: bool = False,
    collective: bool = True,
    cache_reads: np.ndarray | None = None,
) -> dict[str, float]:
    """Predicted seconds of one epoch (see the module docstring); ``coded``: the values each
    worker fetches from each other per epoch, sent at 8 bits (None: as float32);
    ``history``: the historical embeddings run (their exchanges' calls after each step, or in
    the sampling, and the tables' own work: :func:`_history_seconds`); ``sparse_batches``:
    the steps' input rows are sparse (their rates: :meth:`ComputeRates.step`);
    ``collective``: sampling, fetching and labels exchange through collectives (False: every
    owner is on the workers' machine and they read each other's rows, sampling at the rates
    of the distributed sampler reading its peer's part); ``cache_reads``: each worker's remote
    reads per epoch, through a presample cache (None: no cache; its own work:
    :func:`_cache_seconds`)."""
    from shardgnn.fullgraph.config import PlanConfig

    workers = sent.shape[0]
    per_host = min(workers, workers_per_host)
    r = rates.at(max(1, rates.cores // per_host))
    edges = train.block_edges.sum(1)
    sample_batch, sample_edge = _sampling_rates(rates, r, workers, collective)
    sample = train.batches * sample_batch + edges * sample_edge
    compute = train.batches * r.step("step_batch", sparse_batches) + _step_edge_seconds(
        r, train.block_edges[:, 0], edges - train.block_edges[:, 0], sparse_batches
    )
    codec_s = None if coded is None else _codec_epoch_seconds(r, coded, train.batches, in_dim)
    if codec_s is not None:  # the fetch codec's work, on the worker's own cores
        sample = sample + codec_s
    history_s = None if history is None else _history_seconds(train, rates, history)
    if history_s is not None:  # pull: in the sampling; push: after the step
        if history.mode == "pull":
            sample = sample + history_s
        else:
            compute = compute + history_s
    cache_s = None if cache_reads is None else _cache_seconds(train, rates, cache_reads)
    if cache_s is not None:  # the fetch's, on the worker's own cores
        sample = sample + cache_s
    own_work_s = [work for work in (codec_s, history_s, cache_s) if work is not None]
    config = PlanConfig(model=model, hidden=hidden, layers=hops)
    params = sum(a * b + b for a, b, _, _ in linear_layers(config, in_dim, out_dim, False))
    # the gradient all-reduce (a ring) of every batch
    ring = 2 * (workers - 1) * params * 4 // workers * train.batches
    # sampling and compute share the host's cores alike
    _, comm = host_seconds(sample + compute, sent + ring, recv + ring, rates, per_host)
    # crowded: each step (its all-reduce's wait included) stretched as the probe measured
    crowded_step = rates.step_crowding(per_host)
    busy_s = _lockstep_seconds(
        train, r, rates.cores, per_host, sum(own_work_s) if own_work_s else None,
        (sample_batch, sample_edge), crowded_step or 1.0, sparse_batches,
        crowded_sampling=not collective,
    )  # fmt: skip
    # per batch, each a wait for every peer: the sampler's calls of every hop, the input rows'
    # (packed replies) and the seeds' labels' (a collective every batch, however few move;
    # their replies' sizes known) calls, the gradient all-reduce and the stop agreement (a
    # tiny all-reduce after every batch but the last; the epoch's sums after the last). An
    # all-to-all whose sizes are not known is two calls: counted as one, the calls of a batch
    # were 10 where the workers made 20 (BENCHMARKS 32za)
    moves = CALLS_PER_HOP * hops + PACKED_FETCH_CALLS + DENSE_FETCH_CALLS if collective else 0
    history_calls = 0 if history is None else history.calls * len(history.layers)
    calls = moves + 2 + history_calls
    comm += rates.latency_s * train.batches * calls * (workers - 1)
    if per_host >= rates.cores:
        # no core to spare: at each call a worker waits for peers the OS descheduled
        # (the crowding probe's cost per call, at the work done since the previous call): the
        # sampling and fetching calls follow a share of the sampling and coding, the gradient
        # all-reduce follows the step, the stop agreement next to nothing
        batches = max(1, train.batches)
        between_s = float(sample.max()) / (batches * max(1, moves))
        step_s = float(compute.max()) / batches
        per_batch = moves * rates.crowding(per_host, between_s)
        if crowded_step is None:  # else the crowded step holds its all-reduce's wait
            per_batch += rates.crowding(per_host, step_s)
        per_batch += (1 + history_calls) * rates.crowding(per_host, 0.0)
        comm += per_batch * train.batches
    return {
        "sample_s": float(sample.max()),
        "compute_s": float(compute.max()),
        "comm_s": comm,
        "epoch_s": busy_s + comm,
    }


def _history_seconds(train: _Epoch, rates: MachineRates, history: HistoryPlan) -> np.ndarray | None:
    """Each worker's seconds per epoch of its historical tables' own work, at the probed rates
    (:attr:`~shardgnn.fullgraph.rates.MachineRates.history_s`; None where the rates predate
    them): per served layer and step an exchange's bookkeeping, and per row it sends or
    receives, pushed or pulled, the lookups, the gather and the table write (their bytes and
    calls are priced with every exchange's)."""
    if "row" not in rates.history_s:
        return None
    rows = train.pushed.sum(0) + train.pushed.sum(1)
    calls = len(history.layers) * train.batches
    return calls * rates.history_s[f"{history.mode}_call"] + rows * rates.history_s["row"]


def _cache_seconds(train: _Epoch, rates: MachineRates, reads: np.ndarray) -> np.ndarray | None:
    """Each worker's seconds per epoch of its presample cache's own work (splitting and looking
    up its batches' ids, copying the hits), at the probed rates per batch and per remote row
    read (``reads``: each worker's per epoch; :attr:`~shardgnn.fullgraph.rates.MachineRates.
    cache_s`); None where the rates predate them."""
    if "row" not in rates.cache_s:
        return None
    return train.batches * rates.cache_s["batch"] + reads * rates.cache_s["row"]


def _step_edge_seconds(
    r, input_edges: np.ndarray, upper_edges: np.ndarray, sparse_batches: bool
) -> np.ndarray:
    """The steps' seconds for their blocks' edges: the input layer's and the upper layers' at
    their own rates (historical embeddings shrink the input layer alone), of batches gathered
    sparse (``sparse_batches``) or dense."""
    return input_edges * r.step("step_input_edge", sparse_batches) + upper_edges * r.step(
        "step_edge", sparse_batches
    )


def _sampling_rates(
    rates: MachineRates, r, workers: int, collective: bool = True
) -> tuple[float, float]:
    """Seconds per batch and per sampled edge to sample a batch's blocks: the distributed
    sampler's (calibrated on two workers) with workers, through the collectives or
    (``collective`` False) reading each other's parts, where the rates hold them; the
    one-process sampler's otherwise."""
    prefix = "" if collective else "shared_"
    if workers > 1 and f"{prefix}batch" in rates.dist_sample_s:
        return rates.dist_sample_s[f"{prefix}batch"], rates.dist_sample_s[f"{prefix}edge"]
    return r.minibatch("sample_batch"), r.minibatch("sample_edge")


def _lockstep_seconds(
    train: _Epoch,
    r,
    cores: int,
    per_host: int,
    own_work_s: np.ndarray | None,
    sampling: tuple[float, float],
    crowded_step: float = 1.0,
    sparse_batches: bool = False,
    crowded_sampling: bool = False,
) -> float:
    """The epoch's sampling, coding and steps as the workers run them, in lockstep: each batch
    ends when the busiest host's workers are done with it (a worker's own cores, or their
    thread-seconds over the host's cores when they share them), and the epoch adds the
    batches up: a sum of per-batch maxima, not the busiest worker's total. ``crowded_step``:
    how many times its fair share of the cores a batch takes where the workers crowd them
    (:meth:`~shardgnn.fullgraph.rates.MachineRates.step_crowding`): it stretches the steps and,
    with ``crowded_sampling``, the sampling (where the workers read each other's parts, whose
    sampling is work on the cores alone; through the collectives its rate holds the calls' waits,
    which the crowding probe prices per call); ``own_work_s``: each worker's seconds per epoch
    outside the sampler and the step (the fetch codec's, the historical tables'), spread evenly
    over its batches; ``sparse_batches``: the steps' input rows are sparse."""
    sample_batch, sample_edge = sampling
    step_PB = (train.batch_edges > 0) * r.step("step_batch", sparse_batches) + _step_edge_seconds(
        r, train.batch_input_edges, train.batch_edges - train.batch_input_edges, sparse_batches
    )
    work_PB = (train.batch_edges > 0) * sample_batch + train.batch_edges * sample_edge
    if crowded_sampling:
        work_PB = crowded_step * work_PB
    work_PB = work_PB + crowded_step * step_PB
    if own_work_s is not None:  # each worker's coding and tables, spread evenly over its batches
        work_PB = work_PB + own_work_s[:, None] / max(1, train.batches)
    threads = max(1, cores // per_host)
    workers = work_PB.shape[0]
    host_B = np.zeros(work_PB.shape[1])
    for first in range(0, workers, per_host):
        mine = work_PB[first : first + per_host]
        shared = mine.sum(0) * threads / max(cores, threads)
        host_B = np.maximum(host_B, np.maximum(mine.max(0), shared))
    return float(host_B.sum())
