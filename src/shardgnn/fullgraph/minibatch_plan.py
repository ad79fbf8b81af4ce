"""What distributed mini-batch training would send and hold at any number of workers, before a
run: the mini-batch rows of ``shardgnn plan`` (issue 32's cost model, beside the full-graph
strategies of :mod:`shardgnn.fullgraph.plan`).

For each worker count the graph is partitioned as for the full-graph strategies, and one training
epoch is sampled here, worker by worker, as the workers would sample it: each worker's seeds as
:class:`~shardgnn.loader.dist_batches.DistSeedBatcher` deals them (its own training nodes, evened
out; ``batch_size`` is the global batch, each worker takes ``ceil(B / P)``), its blocks drawn by
the same sampler and fanouts. Every row another worker owns crosses the all-to-all (as with
``--host-sharing off``, or one worker per machine):

* **sampling** (stage ``sample``): per hop, each frontier node another worker owns is an int64
  request to its owner, which replies with the node's edge count (int64) and its drawn edges
  (neighbour and edge id: two int64); a request carries a 3-int64 header (batch count, layer
  seed, row count). Three all-to-alls per hop.
* **fetching** (stage ``fetch``): each input node another worker owns is an int64 request and a
  row back (``bits``: the codec's payload). Two all-to-alls per batch.
* every all-to-all also sends an 8-byte row count to each peer (the communicator counts it).
* **a presample cache** (``--cache-policy presample --cache-size``): a second epoch on its own
  random stream stands for the pre-sampling epoch; each worker caches the remote rows it read
  most there (up to the capacity, a fraction of all nodes), and the training epoch's reads of
  them are not fetched.

These are the ``sample`` and ``fetch`` byte counters of one training epoch (the results'
``comm``), up to sampling noise: predicted against measured at P = 2, 3, 4 in the tests. Not
counted: evaluation, the labels of seeds dealt to a worker that does not own them (a few), edge
rows (GINE) and same-host reads (``--host-sharing``: those rows skip the all-to-all).

**Epoch time** (with :class:`~shardgnn.fullgraph.rates.MachineRates` whose calibration timed
the planned model's mini-batch step, :func:`~shardgnn.fullgraph.rates.measure_minibatch`): per
worker, its sampling and its steps (seconds per batch plus seconds per edge of its blocks, at
the threads it gets; sampling at the distributed sampler's rates, calibrated on two workers,
when the rates hold them; the workers of a machine share its cores), each batch waiting for its
busiest worker (lockstep), and its exchanges: the bytes
above and the gradient all-reduce over the link, plus the latency of every collective call per
peer (sampling's three per hop, fetching's two, the all-reduce, the stop agreement); the slowest
machine sets the epoch. With 8-bit rows, each worker also encodes the rows it sends and decodes
those it receives (the codec's calibrated seconds per value). Where a machine runs more workers
than it has cores, each of those calls also costs the calibration's crowding probe at the work a
worker does before it (a share of the batch's sampling; its step before the all-reduce)
(:meth:`~shardgnn.fullgraph.rates.MachineRates.crowding`): workers in lockstep wait at every
call for peers the OS has descheduled, which fair sharing of the cores does not price.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from shardgnn.fullgraph.plan import host_seconds, linear_layers, row_bytes
from shardgnn.fullgraph.rates import MachineRates
from shardgnn.graph.csr import Graph
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.partition.book import relabel
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.sampling.types import SeedInput
from shardgnn.seeding import mix_seed
from shardgnn.store.cache.config import resolve_capacity

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
        sample_bytes, fetch_bytes: the ``sample`` and ``fetch`` stages' bytes per epoch, all
            workers; bytes_per_epoch: their sum.
        max_worker_bytes, max_worker_recv: the most one worker sends / receives of those.
        held_mb: the largest worker's feature rows, adjacency and cache, MB.
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
    max_worker_bytes: int
    max_worker_recv: int
    held_mb: float
    sample_s: float | None = None
    compute_s: float | None = None
    comm_s: float | None = None
    epoch_s: float | None = None

    @property
    def bytes_per_epoch(self) -> int:
        return self.sample_bytes + self.fetch_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "bytes_per_epoch": self.bytes_per_epoch}


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
    batches: int
    block_edges: np.ndarray
    """``[P, L]``: per worker, the edges of its layer-``l`` blocks (input layer first)"""
    batch_edges: np.ndarray
    """``[P, batches]``: per worker, the edges of each batch's blocks (0 for a batch it has no
    seeds in): the workers step in lockstep, so each batch waits for its busiest worker"""


def sample_epoch(
    graph: Graph,
    owner: np.ndarray,
    workers: int,
    fanouts: tuple[int, ...],
    batch_size: int,
    seed: int,
) -> _Epoch:
    """Sample one epoch of every worker's batches (see the module docstring)."""
    rel = relabel(owner, workers)
    train_new = np.sort(rel.new_id_of_orig[np.asarray(graph.train_idx, dtype=np.int64)])
    per_rank = max(1, -(-batch_size // workers))
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=fanouts))
    hops = len(fanouts)
    frontier = np.zeros((workers, workers), np.int64)
    edges = np.zeros((workers, workers), np.int64)
    requests = np.zeros((workers, workers), np.int64)
    block_edges = np.zeros((workers, hops), np.int64)
    inputs, count, per_batch = [], 1, []
    for w in range(workers):
        batcher = DistSeedBatcher(
            train_new, rel.book, w, workers, per_rank, shuffle=True, seed=seed
        )
        count = batcher.count
        reads = []
        per_batch.append(np.zeros(count, np.int64))
        for index, seeds_new in enumerate(batcher.batches()):
            seeds = rel.orig_ids[seeds_new]
            if not seeds.size:
                continue
            sample = sampler.sample(SeedInput(seeds), mix_seed(seed, w, index))
            for layer, block in enumerate(sample.blocks):
                dst = block.src_nodes_S[: block.num_dst].numpy()
                drawn = np.diff(block.indptr_D1.numpy())
                dst_owner = owner[dst]
                remote = dst_owner != w
                asked = np.bincount(dst_owner[remote], minlength=workers)
                frontier[w] += asked
                edges[w] += np.bincount(
                    dst_owner[remote], weights=drawn[remote], minlength=workers
                ).astype(np.int64)
                requests[w] += asked > 0
                block_edges[w, layer] += block.num_edges
                per_batch[w][index] += block.num_edges
            read = sample.blocks[0].src_nodes_S.numpy()
            reads.append(read[owner[read] != w])
        inputs.append(np.concatenate(reads) if reads else np.zeros(0, np.int64))
    batch_edges = np.zeros((workers, count), np.int64)
    for w, row in enumerate(per_batch):
        batch_edges[w, : min(count, row.shape[0])] = row[:count]
    return _Epoch(frontier, edges, requests, inputs, count, block_edges, batch_edges)


def cache_misses(
    train: _Epoch, presample: _Epoch, owner: np.ndarray, workers: int, capacity: int
) -> tuple[np.ndarray, float]:
    """``([P, P] rows fetched from each owner, hit rate)`` of the training epoch ``train``
    with a presample cache of ``capacity`` rows per worker picked from ``presample``'s reads
    (0: no cache; the cache holds at most the rows of other workers)."""
    fetched = np.zeros((workers, workers), np.int64)
    reads = hits = 0
    n = owner.shape[0]
    for w in range(workers):
        ids = train.inputs[w]
        miss = ids
        if capacity:
            counts = np.bincount(presample.inputs[w], minlength=n)
            remote_rows = n - int((owner == w).sum())
            k = min(capacity, remote_rows)
            candidates = np.flatnonzero(counts)
            order = np.lexsort((candidates, -counts[candidates]))
            cached = np.zeros(n, dtype=bool)
            cached[candidates[order[:k]]] = True
            miss = ids[~cached[ids]]
        reads += ids.size
        hits += ids.size - miss.size
        fetched[w] = np.bincount(owner[miss], minlength=workers)
    return fetched, (hits / reads if reads else 0.0)


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
    seed: int = 0,
    rates: MachineRates | None = None,
    workers_per_host: int = 1,
) -> list[MiniBatchCost]:
    """The mini-batch options' costs at ``workers`` on one partition (``assignment``: each
    node's part): exact rows, 8-bit rows, a presample cache of ``cache_size`` (as
    ``--cache-size``), both (see the module docstring)."""
    owner = np.asarray(assignment, dtype=np.int64)
    train = sample_epoch(graph, owner, workers, fanouts, batch_size, seed)
    presample = sample_epoch(
        graph, owner, workers, fanouts, batch_size, mix_seed(seed, PRESAMPLE_STREAM)
    )
    in_dim, n = int(graph.x.shape[1]), graph.num_nodes
    capacity = resolve_capacity(cache_size, n, 4 * in_dim)
    hops = len(fanouts)
    peers = workers - 1
    # sampling: requests (ids and headers) out, counts and drawn edges back
    sample_sent = (
        _ID * train.frontier.sum(1) + _HEADER * train.requests.sum(1)  # as requester
        + _ID * train.frontier.sum(0) + 2 * _ID * train.edges.sum(0)  # as owner
    )  # fmt: skip
    sample_recv = (
        _ID * train.frontier.sum(0) + _HEADER * train.requests.sum(0)
        + _ID * train.frontier.sum(1) + 2 * _ID * train.edges.sum(1)
    )  # fmt: skip
    metadata = _ID * peers * train.batches
    sample_sent = sample_sent + 3 * hops * metadata
    sample_recv = sample_recv + 3 * hops * metadata
    own_rows = np.bincount(owner, minlength=workers)
    own_edges = np.bincount(owner, weights=np.diff(graph.indptr), minlength=workers)
    options = [
        ("exact", 32, 0),
        ("8-bit", 8, 0),
        (f"cache {cache_size}", 32, capacity),
        (f"8-bit + cache {cache_size}", 8, capacity),
    ]
    out = []
    misses: dict[int, tuple[np.ndarray, float]] = {0: cache_misses(train, train, owner, workers, 0)}
    for option, bits, cap in options:
        if cap not in misses:
            misses[cap] = cache_misses(train, presample, owner, workers, cap)
        fetched, hit_rate = misses[cap]
        rb = row_bytes(in_dim, bits)
        fetch_sent = _ID * fetched.sum(1) + rb * fetched.sum(0) + 2 * metadata
        fetch_recv = _ID * fetched.sum(0) + rb * fetched.sum(1) + 2 * metadata
        sent, recv = sample_sent + fetch_sent, sample_recv + fetch_recv
        cache_rows = np.minimum(cap, n - own_rows)
        held = own_rows * in_dim * 4 + own_edges * _ID + (own_rows + 1) * _ID
        held = held + cache_rows * in_dim * 4
        flags = (["--fetch-bits", str(bits)] if bits < 32 else []) + (
            ["--cache-policy", "presample", "--cache-size", cache_size] if cap else []
        )
        cost = MiniBatchCost(
            workers=workers,
            option=option,
            flags=tuple(flags),
            batch_size=batch_size,
            batches=train.batches,
            fetch_rows=int(fetched.sum()),
            hit_rate=hit_rate if cap else None,
            sample_bytes=int(sample_sent.sum()),
            fetch_bytes=int(fetch_sent.sum()),
            max_worker_bytes=int(sent.max()),
            max_worker_recv=int(recv.max()),
            held_mb=float(held.max()) / 1e6,
        )
        if rates is not None:
            # values each worker encodes (the rows it sends) and decodes (those it receives)
            coded = (fetched.sum(0) * in_dim, fetched.sum(1) * in_dim) if bits < 32 else None
            times = _epoch_seconds(
                train, sent, recv, rates, model=model, hidden=hidden, in_dim=in_dim,
                out_dim=graph.num_classes, hops=hops, workers_per_host=workers_per_host,
                coded=coded,
            )  # fmt: skip
            cost = dataclasses.replace(cost, **times)
        out.append(cost)
    return out


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
    coded: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """Predicted seconds of one epoch (see the module docstring); ``coded``: the values each
    worker encodes and decodes at 8 bits per epoch (None: rows travel as float32)."""
    from shardgnn.fullgraph.config import PlanConfig

    workers = sent.shape[0]
    per_host = min(workers, workers_per_host)
    r = rates.at(max(1, rates.cores // per_host))
    edges = train.block_edges.sum(1)
    sample_batch, sample_edge = _sampling_rates(rates, r, workers)
    sample = train.batches * sample_batch + edges * sample_edge
    compute = train.batches * r.minibatch("step_batch") + edges * r.minibatch("step_edge")
    if coded is not None:  # the fetch codec's work, on the worker's own cores
        sample = sample + coded[0] * r.minibatch("encode8_value")
        sample = sample + coded[1] * r.minibatch("decode8_value")
    config = PlanConfig(model=model, hidden=hidden, layers=hops)
    params = sum(a * b + b for a, b, _, _ in linear_layers(config, in_dim, out_dim, False))
    # the gradient all-reduce (a ring) of every batch
    ring = 2 * (workers - 1) * params * 4 // workers * train.batches
    # sampling and compute share the host's cores alike
    _, comm = host_seconds(sample + compute, sent + ring, recv + ring, rates, per_host)
    busy_s = _lockstep_seconds(train, r, rates.cores, per_host, coded, (sample_batch, sample_edge))
    # per batch: three all-to-alls per hop, two to fetch, the gradient all-reduce and the stop
    # agreement (a tiny all-reduce after every batch but the last; the epoch's sums after the
    # last): each per peer
    moves = 3 * hops + 2
    calls = moves + 2
    comm += rates.latency_s * train.batches * calls * (workers - 1)
    if per_host > rates.cores:
        # more workers than cores: at each call a worker waits for peers the OS descheduled
        # (the crowding probe's cost per call, at the work done since the previous call): the
        # sampling and fetching calls follow a share of the sampling and coding, the gradient
        # all-reduce follows the step, the stop agreement next to nothing
        batches = max(1, train.batches)
        between_s = float(sample.max()) / (batches * moves)
        step_s = float(compute.max()) / batches
        per_batch = moves * rates.crowding(per_host, between_s)
        per_batch += rates.crowding(per_host, step_s) + rates.crowding(per_host, 0.0)
        comm += per_batch * train.batches
    return {
        "sample_s": float(sample.max()),
        "compute_s": float(compute.max()),
        "comm_s": comm,
        "epoch_s": busy_s + comm,
    }


def _sampling_rates(rates: MachineRates, r, workers: int) -> tuple[float, float]:
    """Seconds per batch and per sampled edge to sample a batch's blocks: the distributed
    sampler's (calibrated on two workers) with workers, where the rates hold them; the
    one-process sampler's otherwise."""
    if workers > 1 and rates.dist_sample_s:
        return rates.dist_sample_s["batch"], rates.dist_sample_s["edge"]
    return r.minibatch("sample_batch"), r.minibatch("sample_edge")


def _lockstep_seconds(
    train: _Epoch,
    r,
    cores: int,
    per_host: int,
    coded: tuple[np.ndarray, np.ndarray] | None,
    sampling: tuple[float, float],
) -> float:
    """The epoch's sampling, coding and steps as the workers run them, in lockstep: each batch
    ends when the busiest host's workers are done with it (a worker's own cores, or their
    thread-seconds over the host's cores when they share them), and the epoch adds the
    batches up: a sum of per-batch maxima, not the busiest worker's total."""
    sample_batch, sample_edge = sampling
    per_edge = sample_edge + r.minibatch("step_edge")
    per_batch = sample_batch + r.minibatch("step_batch")
    work_PB = (train.batch_edges > 0) * per_batch + train.batch_edges * per_edge
    if coded is not None:  # each worker's coding, spread evenly over its batches
        codec_P = coded[0] * r.minibatch("encode8_value") + coded[1] * r.minibatch("decode8_value")
        work_PB = work_PB + codec_P[:, None] / max(1, train.batches)
    threads = max(1, cores // per_host)
    workers = work_PB.shape[0]
    host_B = np.zeros(work_PB.shape[1])
    for first in range(0, workers, per_host):
        mine = work_PB[first : first + per_host]
        shared = mine.sum(0) * threads / max(cores, threads)
        host_B = np.maximum(host_B, np.maximum(mine.max(0), shared))
    return float(host_B.sum())
