"""Measured machine rates for epoch-time prediction (the time half of issue 32's cost model).

:func:`calibrate` times, on this machine and at the thread count a worker would get, the
operations a distributed full-graph training step is made of, on the graph being planned:

* **SpMM**: the graph's own adjacency (CSR rows of the graph, all its columns) times a dense block
  of each width the model aggregates at, and its transpose times a block as wide (a backward
  SpMM's product, slower per entry: it scatters): seconds per adjacency entry;
* **dense layers**: ``nn.Linear`` forward and backward (from a dense gradient, as in training: a
  sum's broadcast gradient takes other, slower paths) on each ``in -> out`` shape of the model,
  with and without the input's gradient (a layer on the raw features needs none): seconds per
  row; on sparse features (stored sparse when at most 10 % are non-zero, as training stores them)
  the projection's forward and weight gradient: seconds per non-zero;
* **element-wise work** (bias, ReLU and the models' hashed dropout, forward and backward):
  seconds per element;
* **Adam**: seconds per parameter;
* **the link**: two worker processes exchange 64 KiB to 16 MiB of rows through the project's
  communicator (gloo), both directions at once, each gathered by index before and scattered by
  index after, as halo rows are; latency is the time of an empty exchange, bandwidth the bytes
  one direction carried per second while both were busy. An empty exchange is timed before
  every size, and the two workers are launched :data:`LINK_LAUNCHES` times, their times pooled:
  one launch's empty exchanges once read 2.8 ms where the others read 0.2-0.3 (BENCHMARKS 32zb).
* **distributed sampling** (when mini-batch training is planned): two workers on a 2-part METIS
  partition of the graph sample batches of their own training nodes with the project's distributed
  sampler (each remote frontier row asked of its owner, drawn there, the replies merged; three
  all-to-alls, four collective calls, per hop): seconds per batch (less the calls' latency, which
  the plan adds per call) and per sampled edge. A distributed batch samples several times slower
  than the one-process sampler (measured: 15 ms against 1 ms per batch of 256 seeds, fanouts 10,10,
  on a 20,000-node graph), so the plan takes these for every worker count above one. The probe runs
  in three launches, their rounds pooled: its medians move more from one launch to the next than
  between a launch's rounds (:data:`PROBE_LAUNCHES`, BENCHMARKS 32u).
* **historical tables** (in the same launch, on models of two layers or more): each worker
  runs real :class:`~shardgnn.store.historical.HistoricalEmbeddings` of its halo serving layer
  1, at the model's hidden width, on batches of both sizes: push mode's step end (every computed
  own row a peer watches sent, written into its table), pull mode's lookup (stale entries asked
  of their owners, answered from the rows they kept) and step end (the computed rows kept):
  seconds per exchange and per row sent or received, less the calls' latency and the rows'
  time on the link, which the plan prices with every exchange's. Without them the plan priced
  the exchanges' bytes and calls alone, up to 28 % short of the historical options' measured
  epochs with sharing (BENCHMARKS 32s; at P = 2 their measured ``historical`` stage in push mode
  0.13-0.18 s against the 0.07 s their bytes and calls add); with them, 15 of 15 within 25 %
  there and 24 of 24 without sharing (BENCHMARKS 32t).
* **a presample cache's own work** (in the same launch): each worker fetches its batches'
  input rows through a real :class:`~shardgnn.store.cache.store.CachedFeatureStore` (the rows as
  training holds them, the remote rows the batches read most, as many as ``--cache-size``'s
  default holds, in front of the distributed store): seconds per batch and per remote row
  read of the cache's own work (:attr:`~shardgnn.store.cache.store.CachedFeatureStore.own_s`:
  splitting the ids, looking them up, copying the hits), which saves bytes but is not free: on
  the 2-core machine a 512-seed batch's fetch took 7.34 ms without a cache and 7.61 ms with
  one serving 35 % of its remote reads, 1.30 ms of it the cache's own work (BENCHMARKS 32w).
* **crowding** (only where a plan puts as many workers on a machine as it has cores, or more):
  that many worker processes run rounds of a burst of single-thread work (0.2, 1, 4 and 16 ms)
  and an empty all-to-all, in lockstep as mini-batch workers are, in blocks alternating with
  blocks of the bursts alone (every worker bursting at once, no collective: the cores' fair
  share, measured under the same load); what a round takes beyond the burst alone and the
  link's latency is what each collective call costs them: a worker waits at it for peers the
  OS has descheduled (measured, 5 probes each: 1.9-2.7 ms per call with 4 workers on 2 cores
  between bursts of 0.2-1 ms, 3.9-6.6 ms between bursts of 4-16 ms, where fair sharing
  predicts none; 0.6-1.3 and 0.9-6.8 ms with 2 workers on 2 cores, whose other threads, the
  prefetch thread and gloo's, and the OS's processes take cores from them too; a fair share
  computed from a product time taken before the workers started put the 16 ms bursts' excess
  at 0-27 ms, BENCHMARKS 32n). The workers are launched :data:`CROWD_LAUNCHES` times, their
  rounds pooled.
* **a crowded batch** (where mini-batch training is planned, at the same worker counts): that
  many workers each sample a fresh batch of their seeds and run the planned model's training
  step on it, its gradients all-reduced after it, in lockstep; what a batch takes against one
  worker's batch alone, shared fairly over the cores, is the factor by which crowding stretches
  a batch's work: the median of several rounds, each pairing lone batches with the crowded
  ones right after it, since a single lone reading varied 2x between runs on a 2-core machine
  (BENCHMARKS 32q). The batches are sampled afresh, as training's are, since the plan stretches
  the sampling of workers reading each other's parts by the factor too (it stretched the step
  alone before): five probes at 2, 3 and 4 workers on 2 cores, 1.50-1.61, 1.44-1.70 and
  1.34-1.67, the levels of one batch stepped over and over in a narrower spread (that read
  1.33-1.76, 1.55-1.97, 1.26-1.92; BENCHMARKS 32s).

Run it where the job will run (inside a network namespace whose link is rate-limited, the
namespace's link is measured); between machines, :func:`main` under torchrun measures their link
(``shardgnn plan --calibrate --link FILE``). :mod:`shardgnn.fullgraph.plan` combines these
rates with its per-worker counts into compute and communication seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from shardgnn.errors import ConfigError

LINK_SIZES = (1 << 16, 1 << 20, 1 << 22, 1 << 24)
"""bytes each rank sends per exchange in the link probe"""
_ID_BYTES = 8  # an int64 node id or stamp
CROWD_BURSTS = (2e-4, 1e-3, 4e-3, 1.6e-2)
"""seconds of single-thread work between two collective calls in the crowding probe"""
_TARGET_S = 0.15  # each measurement repeats its operation for about this long
CODEC_ROWS = (64, 512, 4096)
"""rows per call at which the fetch codec is timed: a fetch encodes each peer's rows of a batch
in one call, and a value costs more in a call whose rows outgrow the caches (coauthor-cs's
6,805-wide rows, one thread: 7 ns to encode a value in calls of 100 rows, 15-19 in calls of
700, 29 in calls of 4,096)"""


@dataclasses.dataclass(kw_only=True)
class ComputeRates:
    """Seconds per unit of work at one thread count (see the module docstring)."""

    threads: int
    spmm_s: dict[int, float]
    """width -> seconds per adjacency entry of one SpMM"""
    spmm_t_s: dict[int, float]
    """width -> seconds per adjacency entry of one SpMM by the transpose (the backward's)"""
    linear_s: dict[str, float]
    """``"in,out,grad"`` -> seconds per row of one linear layer, forward and backward (``grad``:
    1 when the input's gradient is computed)"""
    sparse_s: dict[int, float]
    """output width -> seconds per feature non-zero of a sparse projection, forward and weight
    gradient"""
    elementwise_s: float
    adam_s: float
    minibatch_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """a mini-batch training step of the planned model (:class:`StepProbe`; empty when
    only full-graph strategies were calibrated): ``sample_batch`` and ``sample_edge`` (seconds
    per batch and per sampled edge to sample its blocks), ``step_batch``, ``step_input_edge``
    and ``step_edge`` (seconds per batch, per edge of its input layer's block and per edge of
    the upper layers' blocks to gather its input rows, build its graphs, run the model forward
    and backward and step Adam; rates written before ``step_input_edge`` existed charge input
    edges ``step_edge``), ``encode8_value_R`` and ``decode8_value_R`` (seconds per value to
    encode rows of the features' width at 8 bits before a fetch's send, and to decode them on
    arrival, in calls of ``R`` rows, for each ``R`` of :data:`CODEC_ROWS`: :meth:`codec`;
    rates written before timed one call of 4,096 rows, ``encode8_value``); on mostly-zero
    features and a model that takes them sparse, also
    ``sparse_step_batch``, ``sparse_step_input_edge`` and ``sparse_step_edge``: the same step
    with its input rows gathered as a sparse tensor, as workers gather them
    (:func:`~shardgnn.train.setup.sparse_batches_apply`)"""

    def step(self, name: str, sparse: bool) -> float:
        """The step rate ``name`` (``step_batch``, ``step_input_edge``, ``step_edge``) of batches
        gathered sparse (``sparse``, where these rates hold them) or dense."""
        if sparse and f"sparse_{name}" in self.minibatch_s:
            return self.minibatch_s[f"sparse_{name}"]
        return self.minibatch(name)

    def codec(self, name: str, rows):
        """Seconds per value of the fetch codec's ``name`` (``encode8``, ``decode8``) in calls of
        ``rows`` rows each (a number or an array): log-linear in the rows between the calls
        timed (:data:`CODEC_ROWS`), held beyond them; rates of one timed call charge its rate
        at any size."""
        prefix = f"{name}_value_"
        timed = {
            int(key[len(prefix) :]): value
            for key, value in self.minibatch_s.items()
            if key.startswith(prefix)
        }
        if not timed:
            return np.full(np.shape(rows), self.minibatch(f"{name}_value"))
        return _log_interp(timed, np.maximum(rows, 1))

    def minibatch(self, name: str) -> float:
        if name == "step_input_edge" and name not in self.minibatch_s:
            name = "step_edge"  # rates of one per-edge step rate
        if name not in self.minibatch_s:
            raise ConfigError(
                "the machine rates hold no mini-batch step; calibrate again planning mini-batch "
                "training (--calibrate without --strategies full), or plan --strategies full "
                "with them"
            )
        return self.minibatch_s[name]

    def linear(self, a: int, b: int, grad: bool) -> float:
        key = f"{a},{b},{int(grad)}"
        if key not in self.linear_s:
            raise ConfigError(
                f"the machine rates hold no measurement of a {a} -> {b} linear layer; calibrate "
                "again with the model being planned (--calibrate)"
            )
        return self.linear_s[key]

    def spmm(self, width: int, transposed: bool = False) -> float:
        return _lookup(self.spmm_t_s if transposed else self.spmm_s, width, "SpMM")

    def sparse(self, width: int) -> float:
        return _lookup(self.sparse_s, width, "sparse-feature projection")


def _log_interp(table: dict, at):
    """``table`` (a measurement by positive size) at ``at`` (a size or an array of them):
    linear in the sizes' logarithm between the sizes measured, held beyond them."""
    sizes = sorted(table)
    return np.interp(np.log(at), np.log(sizes), [table[size] for size in sizes])


def _lookup(table: dict[int, float], width: int, what: str) -> float:
    if width not in table:
        raise ConfigError(
            f"the machine rates hold no {what} of width {width}; calibrate again with the model "
            "being planned (--calibrate)"
        )
    return table[width]


@dataclasses.dataclass(kw_only=True)
class MachineRates:
    """What :func:`calibrate` measured.

    Attributes:
        cores: CPU cores of the machine (its workers share them).
        compute: per thread count, the compute rates.
        link_bytes_s: bytes per second one direction of the link carries while both are busy
            (a machine's workers together send at most this many; on one machine, its workers'
            loopback traffic shares twice this: both directions of the probe).
        latency_s: seconds of one empty exchange between two workers.
        link_samples: ``[bytes per rank, seconds]`` of each probed exchange size.
    """

    cores: int
    compute: dict[int, ComputeRates]
    link_bytes_s: float
    latency_s: float
    link_samples: list[list[float]]
    dist_sample_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """the distributed sampler's ``batch`` and ``edge`` seconds, and with the workers reading
    each other's parts ``shared_batch`` and ``shared_edge`` (:func:`measure_dist_sampling`;
    empty, or rates from before the shared ones, when not measured: the plan then uses the
    one-process sampler's)"""
    history_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """the historical tables' own work: ``push_call`` and ``pull_call`` per layer and step, ``row``
    per row a worker sends or receives (:func:`measure_dist_sampling`; empty when not measured,
    or rates from before 2026-12-06: the plan then prices their exchanges' bytes and calls
    alone)"""
    cache_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """a presample cache's own work in front of the fetch: ``batch`` seconds per batch, ``row``
    per remote row a batch reads (:func:`measure_dist_sampling`; empty when not measured, or
    rates from before 2026-12-07: the plan then prices a cache by the bytes it saves alone)"""
    crowd_s: dict[int, dict[float, float]] = dataclasses.field(default_factory=dict)
    """workers on one machine (more than its cores) -> burst seconds -> seconds each collective
    call costs beyond the fair share of the cores and the latency (:func:`measure_crowding`)"""
    crowd_step: dict[int, float] = dataclasses.field(default_factory=dict)
    """workers on one machine (as many as its cores or more) -> how many times its fair share
    of the cores a worker's batch (sampled, stepped, its gradients all-reduced) takes
    (:func:`measure_crowded_step`; empty: not measured)"""

    def at(self, threads: int) -> ComputeRates:
        if threads not in self.compute:
            raise ConfigError(
                f"the machine rates hold no measurement at {threads} threads per worker; "
                "calibrate again with these worker counts (--calibrate)"
            )
        return self.compute[threads]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MachineRates":
        compute = {
            int(t): ComputeRates(
                threads=int(c["threads"]),
                spmm_s={int(k): float(v) for k, v in c["spmm_s"].items()},
                spmm_t_s={int(k): float(v) for k, v in c["spmm_t_s"].items()},
                linear_s={str(k): float(v) for k, v in c["linear_s"].items()},
                sparse_s={int(k): float(v) for k, v in c["sparse_s"].items()},
                elementwise_s=float(c["elementwise_s"]),
                adam_s=float(c["adam_s"]),
                minibatch_s={str(k): float(v) for k, v in c.get("minibatch_s", {}).items()},
            )
            for t, c in d["compute"].items()
        }
        return cls(
            cores=int(d["cores"]),
            compute=compute,
            link_bytes_s=float(d["link_bytes_s"]),
            latency_s=float(d["latency_s"]),
            link_samples=[[float(a), float(b)] for a, b in d["link_samples"]],
            dist_sample_s={str(k): float(v) for k, v in d.get("dist_sample_s", {}).items()},
            history_s={str(k): float(v) for k, v in d.get("history_s", {}).items()},
            cache_s={str(k): float(v) for k, v in d.get("cache_s", {}).items()},
            crowd_s={
                int(w): {float(b): float(v) for b, v in by_burst.items()}
                for w, by_burst in d.get("crowd_s", {}).items()
            },
            crowd_step={int(w): float(v) for w, v in d.get("crowd_step", {}).items()},
        )

    def step_crowding(self, per_host: int) -> float | None:
        """How many times their fair share of the cores ``per_host`` workers on this machine
        take for a batch: its sampling, step and all-reduce (:attr:`crowd_step`); None where not
        measured (fewer workers than cores, or rates calibrated before 2026-11-29)."""
        return self.crowd_step.get(per_host)

    def crowding(self, per_host: int, burst_s: float) -> float:
        """Seconds each collective call costs ``per_host`` workers sharing this machine's cores
        when each works ``burst_s`` seconds between calls (interpolated between the probed
        bursts, held at the ends); 0 where every worker has a core to spare, and where it has
        just one but the rates predate that probe (calibrated before 2026-11-29).

        Raises:
            ConfigError: the rates hold no crowding probe at ``per_host`` workers, more than
                the cores.
        """
        if per_host < self.cores or (per_host == self.cores and per_host not in self.crowd_s):
            return 0.0
        if per_host not in self.crowd_s:
            raise ConfigError(
                f"the machine rates hold no crowding probe at {per_host} workers on its "
                f"{self.cores} cores; calibrate again with these worker counts (--calibrate)"
            )
        return float(_log_interp(self.crowd_s[per_host], max(burst_s, 1e-9)))


def read_rates(path: str, flag: str) -> MachineRates:
    """The rates in the JSON that ``shardgnn plan --calibrate --out FILE`` wrote (one line naming
    ``flag`` and the file when it is not one)."""
    try:
        with open(path) as fh:
            rates = json.load(fh)["rates"]
        return MachineRates.from_dict(rates)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{flag} {path}: not the JSON of `shardgnn plan --calibrate --out FILE` "
            f"({type(exc).__name__}: {exc}); write one with `shardgnn plan --calibrate`"
        ) from None


@dataclasses.dataclass(kw_only=True)
class Workload:
    """What to measure: the graph's CSR and features, and the model's shapes."""

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray
    spmm_widths: tuple[int, ...]
    linears: tuple[tuple[int, int, bool], ...]
    sparse_widths: tuple[int, ...]
    minibatch: "MiniBatchWork | None" = None
    """the mini-batch step to time (None: full-graph strategies only)"""


@dataclasses.dataclass(kw_only=True)
class MiniBatchWork:
    """A mini-batch training step of the planned model: its sampler's fanouts, the model
    (``model``, ``hidden``, layers = fanouts), its output width, the training nodes to draw
    seeds from and the batch sizes to time (the planned workers' ``ceil(B / P)``)."""

    fanouts: tuple[int, ...]
    model: str
    hidden: int
    out_dim: int
    train_idx: np.ndarray
    batch_sizes: tuple[int, ...]


def _seconds(fn: Callable[[], Any]) -> float:
    """Median seconds of ``fn`` (after one warm-up call), repeated for about ``_TARGET_S``."""
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    times = []
    for _ in range(max(3, min(20, int(_TARGET_S / max(once, 1e-6))))):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _sample_rows(indptr: np.ndarray, max_entries: int) -> int:
    """How many leading rows hold at most ``max_entries`` entries (at least 1)."""
    return max(1, int(np.searchsorted(indptr, max_entries, side="right")) - 1)


def measure_compute(work: Workload, threads: int, max_entries: int = 1_000_000) -> ComputeRates:
    """Time the operations of a full-graph training step at ``threads`` torch threads (the
    mini-batch step: :class:`StepProbe`, timed by :func:`calibrate` at several moments)."""
    from shardgnn.nn.dropout import hashed_dropout
    from shardgnn.nn.functional import sparse_matmul
    from shardgnn.nn.message_graph import _csr, transpose_csr

    gen = torch.Generator().manual_seed(0)
    num_nodes = len(work.indptr) - 1
    rows = _sample_rows(work.indptr, max_entries)
    nnz = int(work.indptr[rows])
    adj = _csr(
        torch.from_numpy(np.asarray(work.indptr[: rows + 1], dtype=np.int64)),
        torch.from_numpy(np.asarray(work.indices[:nnz], dtype=np.int64)),
        torch.rand(nnz, generator=gen),
        (rows, num_nodes),
    )
    adj_t = transpose_csr(adj)
    with _threads(threads):
        spmm_s, spmm_t_s = {}, {}
        for width in work.spmm_widths:
            h = torch.randn(num_nodes, width, generator=gen)
            g = torch.randn(rows, width, generator=gen)
            spmm_s[width] = _seconds(lambda h=h: adj @ h) / max(nnz, 1)
            spmm_t_s[width] = _seconds(lambda g=g: adj_t @ g) / max(nnz, 1)
        dense_rows = 4096
        linear_s = {}
        for a, b, grad in work.linears:
            lin = torch.nn.Linear(a, b)
            h = torch.randn(dense_rows, a, generator=gen, requires_grad=grad)
            g = torch.randn(dense_rows, b, generator=gen)  # a dense gradient, as in training

            def step(lin=lin, h=h, g=g):
                lin(h).backward(g)

            linear_s[f"{a},{b},{int(grad)}"] = _seconds(step) / dense_rows
        sparse_s = {}
        if work.sparse_widths:
            x_rows = _sample_rows(np.r_[0, np.cumsum((work.x != 0).sum(1))], 2_000_000)
            x = torch.from_numpy(np.ascontiguousarray(work.x[:x_rows], dtype=np.float32))
            x = x.to_sparse().coalesce()
            x_nnz = max(int(x._nnz()), 1)
            for width in work.sparse_widths:
                weight = torch.randn(width, x.shape[1], generator=gen, requires_grad=True)
                g = torch.randn(x.shape[0], width, generator=gen)

                def project(weight=weight, g=g):
                    sparse_matmul(x, weight.t()).backward(g)

                sparse_s[width] = _seconds(project) / x_nnz
        h = torch.randn(dense_rows, 256, generator=gen, requires_grad=True)
        bias = torch.zeros(256, requires_grad=True)
        g = torch.randn(dense_rows, 256, generator=gen)
        keys = torch.arange(dense_rows)

        def elementwise():
            # the models' dropout: the hashed kernel, keyed by node id
            hashed_dropout((h + bias).relu(), 0.5, 1, row_ids=keys).backward(g)

        elementwise_s = _seconds(elementwise) / h.numel()
        params = [torch.nn.Parameter(torch.randn(1 << 20, generator=gen))]
        params[0].grad = torch.randn(1 << 20, generator=gen)
        adam = torch.optim.Adam(params, lr=1e-3)
        adam_s = _seconds(adam.step) / (1 << 20)
    return ComputeRates(
        threads=threads,
        spmm_s=spmm_s,
        spmm_t_s=spmm_t_s,
        linear_s=linear_s,
        sparse_s=sparse_s,
        elementwise_s=elementwise_s,
        adam_s=adam_s,
    )


def sparse_input(model: str, nonzeros: int, size: int) -> bool:
    """Whether workers gather batches of features with ``nonzeros`` of ``size`` entries non-zero
    for ``model`` as sparse tensors (:func:`~shardgnn.train.setup.sparse_batches_apply`): a model of
    :data:`~shardgnn.nn.config.SPARSE_INPUT_MODELS` and features stored as CSR."""
    from shardgnn.graph.features import stored_sparse
    from shardgnn.nn.config import SPARSE_INPUT_MODELS

    return model in SPARSE_INPUT_MODELS and stored_sparse(nonzeros, size)


def _planned_model(work: Workload, step: MiniBatchWork) -> tuple[Any, torch.nn.Module, Any]:
    """``(sampler, model, Adam)``: a sampler of the planned fanouts and the planned model as the
    workers train it, from the torch generator seeded 0."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.models import build_model
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.neighbor import NeighborSampler

    sampler = NeighborSampler(work.indptr, work.indices, SamplerConfig(fanouts=step.fanouts))
    config = ModelConfig(model=step.model, hidden=step.hidden, num_layers=len(step.fanouts))
    torch.manual_seed(0)
    model = build_model(config, int(work.x.shape[1]), step.out_dim)
    # as the workers train: dropout masks hashed from node ids (torch's Bernoulli draws took
    # ~40 % of this step, single-threaded, and training never runs them)
    model.use_hashed_dropout(0)
    return sampler, model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _train_step(
    work: Workload,
    model: torch.nn.Module,
    adam: Any,
    sample: Any,
    labels: torch.Tensor,
    history: dict | None = None,
    reduce: Callable[[], None] | None = None,
    rows: Any = None,
) -> Callable[[], None]:
    """One training step over ``sample`` (its input rows read from ``work.x``, or gathered from
    the store ``rows``: a sparse batch's), as a function; ``reduce``: run between the backward
    and the optimiser's step (the gradient all-reduce)."""
    from shardgnn.nn.message_graph import MessageGraph

    def train_step() -> None:
        if rows is None:
            x_SF = torch.from_numpy(np.asarray(work.x[sample.input_nodes.numpy()], np.float32))
        else:
            x_SF = rows.gather(sample.input_nodes)
        graphs = [MessageGraph.from_block(b) for b in sample.blocks]
        adam.zero_grad(set_to_none=True)
        logits = model(graphs, x_SF, history)[0] if history else model(graphs, x_SF)
        torch.nn.functional.cross_entropy(logits, labels).backward()
        if reduce is not None:
            reduce()
        adam.step()

    return train_step


def probe_sizes(step: MiniBatchWork) -> list[int]:
    """The two batch sizes (seeds) the mini-batch probes time: the smallest and the largest of
    the planned per-worker ``step.batch_sizes`` (at most the training nodes), or where one size
    is planned, a quarter of it and itself. A run's batches are at most the planned size (an
    epoch's last is smaller), and a step costs more per edge the larger its batch (its rows
    outgrow the caches: 4.7x the time for 3.1x the input edges from 256 to 1,024 seeds,
    BENCHMARKS 32za), so a larger probe batch fits rates the run's batches never show."""
    sizes = sorted({max(1, min(b, len(step.train_idx))) for b in step.batch_sizes})
    return [sizes[0], sizes[-1]] if len(sizes) > 1 else [max(1, sizes[0] // 4), sizes[0]]


class StepProbe:
    """Sampling and a training step of the planned model at the two :func:`probe_sizes` of
    ``step`` (seeds drawn from the training nodes), at ``threads`` torch threads:
    the batches sampled (and their sampling timed) once, the steps timed in rounds by
    :meth:`time_rounds`, which a calibration calls at several of its moments (a 2-core
    machine's speed moves between them: BENCHMARKS 32v), and :meth:`rates` fits each as
    seconds per batch plus seconds per edge (:attr:`ComputeRates.minibatch_s`) on the medians
    of every round.

    A step's edges do not all cost alike: the input layer's (``step_input_edge``) carry the
    narrow input rows, the upper layers' (``step_edge``) the hidden ones, and each upper layer's
    src rows are activated and dropped out. Batches of one sampler scale both together, but
    historical embeddings shrink the input layer alone (they stop expansion above it), so a
    third point, the largest batch with every outside src node of its upper layers served from
    a table, separates the two (models of one layer: one rate for both).

    Where workers would gather the batches sparse (:func:`sparse_input`), the same batches'
    steps with sparse input rows are timed too, in the same rounds, and fitted alike
    (``sparse_step_*``): on bag-of-words features the input layer's product over the non-zeros
    costs a fraction of the dense one."""

    def __init__(self, work: Workload, step: MiniBatchWork, threads: int) -> None:
        from shardgnn.sampling.types import SeedInput
        from shardgnn.store.feature import csr_rows

        self.threads = threads
        rng = np.random.default_rng(0)
        sampler, model, adam = _planned_model(work, step)
        sparse_rows = None
        if sparse_input(step.model, int(np.count_nonzero(work.x)), work.x.size):
            sparse_rows = csr_rows(work.x, "none", sparse_batches=True)
        self.kinds = 1 if sparse_rows is None else 2
        sizes = probe_sizes(step)

        def serve_all(layer: int, src_nodes: np.ndarray, num_dst: int) -> np.ndarray:
            mask = np.zeros(src_nodes.shape[0], dtype=bool)
            mask[num_dst:] = True
            return mask

        served = [False, False] + ([True] if len(step.fanouts) > 1 else [])
        self.points: list[tuple[int, int, float]] = []
        """per batch: its input layer's edges, its upper layers', seconds to sample it"""
        self.steps: list[Callable[[], None]] = []
        with _threads(threads):
            for size, serve in zip([*sizes, sizes[-1]], served):
                if not serve:  # the served batch has the largest batch's seeds
                    take = min(size, len(step.train_idx))
                    seeds = np.sort(rng.choice(step.train_idx, take, False))
                sampler.prune = serve_all if serve else None
                sample_s = _seconds(lambda seeds=seeds: sampler.sample(SeedInput(seeds), 0))
                sample = sampler.sample(SeedInput(seeds), 0)
                sampler.prune = None
                edges = [block.num_edges for block in sample.blocks]
                labels = torch.from_numpy(rng.integers(0, step.out_dim, seeds.size))
                history = {
                    layer: (block.history_S, torch.randn(int(block.history_S.sum()), step.hidden))
                    for layer, block in enumerate(sample.blocks)
                    if block.history_S is not None
                }
                self.points.append((edges[0], sum(edges[1:]), sample_s))
                self.steps.append(_train_step(work, model, adam, sample, labels, history))
                if sparse_rows is not None:
                    self.steps.append(
                        _train_step(work, model, adam, sample, labels, history, rows=sparse_rows)
                    )
            self.codec = _codec_seconds(int(work.x.shape[1]), 8)
        self.rounds: list[list[float]] = []
        """per round, each step's seconds"""

    def time_rounds(self, rounds: int = 5) -> None:
        """Time ``rounds`` more rounds of every step (the steps alternate, so the machine's
        drift between them does not tell them apart)."""
        with _threads(self.threads):
            self.rounds += [[_seconds(fn) for fn in self.steps] for _ in range(rounds)]

    def rates(self) -> dict[str, float]:
        """The fitted rates, on the medians of every round timed so far."""
        medians = [statistics.median(t) for t in zip(*self.rounds)]
        points = self.points
        sample_batch, sample_edge = _line([(i + u, s) for i, u, s in points[:2]])
        out = {"sample_batch": sample_batch, "sample_edge": sample_edge}
        for kind, prefix in enumerate(["", "sparse_"][: self.kinds]):
            fitted = _fit_step([(i, u) for i, u, _ in points], medians[kind :: self.kinds])
            out.update({f"{prefix}{name}": value for name, value in fitted.items()})
        return {**out, **self.codec}


def measure_minibatch(work: Workload, step: MiniBatchWork) -> dict[str, float]:
    """:class:`StepProbe`'s rates from one moment's rounds, at the current threads."""
    probe = StepProbe(work, step, torch.get_num_threads())
    probe.time_rounds()
    return probe.rates()


LINE_MIN_SPREAD = 0.1
"""two probe points whose units differ by less than this share of the larger tell no slope"""


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(seconds fixed, seconds per unit)`` of the line through two ``(units, seconds)``
    points, neither negative: a smaller time at more units is the machine's noise, not a
    negative cost, so it reads as no cost per unit; a time growing faster than the units (the
    line through both would have a fixed cost below nought) reads as no fixed cost and the rate
    nearest both readings in relative terms (:func:`_fit_nonnegative`). Where the units are too
    close to tell a slope (within :data:`LINE_MIN_SPREAD`: on a small graph the larger probe
    batch runs out of seeds and samples no more edges, or fewer), the time is taken as
    proportional to the units (the mean point's rate, nothing fixed), which holds at the units
    measured: the slope of the noise between two readings of the same work priced an edge at
    0.55 ms there."""
    (x1, t1), (x2, t2) = sorted(points)
    if x2 - x1 <= LINE_MIN_SPREAD * x2:
        units, seconds = (x1 + x2) / 2, (t1 + t2) / 2
        return (seconds, 0.0) if units <= 0 else (0.0, seconds / units)
    per_unit = max(t2 - t1, 0.0) / (x2 - x1)
    if t1 - per_unit * x1 >= 0:
        return t1 - per_unit * x1, per_unit
    # the time grows faster than the units: no line of costs at least zero passes through
    # both; the one through nought nearest both in relative terms
    fixed, per_unit = _fit_nonnegative(np.array([[1.0, x1], [1.0, x2]]), np.array([t1, t2]))
    return float(fixed), float(per_unit)


def _fit_nonnegative(units: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Costs, none below zero, that best give ``seconds`` (K) from the ``units`` (K x M) of K
    readings, in relative terms (each reading's error over its time: a short batch's counts as
    much as a long one's): the exact solution where it has no negative cost, else the best of
    the fits with some costs held at nought (every such set tried; M is at most 3)."""
    weights = 1.0 / np.maximum(seconds, 1e-12)
    a, b = units * weights[:, None], seconds * weights
    best, best_error = np.zeros(units.shape[1]), float(np.sum(b**2))
    for held in range(1 << units.shape[1]):
        free = [m for m in range(units.shape[1]) if not held >> m & 1]
        if not free:
            continue
        costs = np.zeros(units.shape[1])
        costs[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        error = float(np.sum((a @ costs - b) ** 2))
        if costs.min() >= 0 and error < best_error:
            best, best_error = costs, error
    return best


def _fit_step(edges: list[tuple[int, int]], seconds: list[float]) -> dict[str, float]:
    """``step_batch``, ``step_input_edge``, ``step_edge`` fitted to steps of ``edges`` (input
    layer's, upper layers') taking ``seconds``: two batches of one sampler, and a third (where
    the model has upper layers) of the second's seeds with its upper layers served, fewer input
    edges and the same upper ones. Three costs from three readings: exact where none of them
    comes out below zero, else the nearest fit in relative terms with none below zero
    (:func:`_fit_nonnegative`; a step's time grows faster than its edges, and a fixed cost held
    at nought after an exact solve had priced the planned 256-seed step a third above its
    reading, BENCHMARKS 32za)."""
    (i1, u1), (i2, u2) = edges[:2]
    step_batch, step_edge = _line([(i1 + u1, seconds[0]), (i2 + u2, seconds[1])])
    step_input_edge = step_edge
    if len(edges) == 3 and edges[2][0] < i2:
        units = np.array([[1.0, i, u] for i, u in edges])
        fitted = [float(cost) for cost in _fit_nonnegative(units, np.array(seconds))]
        if min(fitted[1:]) > 0:  # else noise: one rate for both
            step_batch, step_input_edge, step_edge = fitted
    return {
        "step_batch": step_batch,
        "step_edge": step_edge,
        "step_input_edge": step_input_edge,
    }


def _codec_seconds(width: int, bits: int, calls=CODEC_ROWS) -> dict[str, float]:
    """Seconds per value of the fetch codec at ``bits``, encoding (the sender: range, rounding
    stream, packing) and decoding (the receiver), on rows of the features' ``width``, in calls
    of each of ``calls`` rows (``encode8_value_512``: 8 bits, calls of 512 rows)."""
    from shardgnn.distributed.codec import make_codec

    codec = make_codec(bits, seed=0)
    assert codec is not None
    out = {}
    x_RF = torch.randn(max(calls), width, generator=torch.Generator().manual_seed(0))
    for rows in calls:
        x = x_RF[:rows]
        payload = codec.encode(x)
        encode_s = _seconds(lambda x=x: codec.encode(x))
        decode_s = _seconds(lambda payload=payload: codec.decode(payload, width))
        out[f"encode{bits}_value_{rows}"] = encode_s / x.numel()
        out[f"decode{bits}_value_{rows}"] = decode_s / x.numel()
    return out


_Rounds = list[tuple[float, float]]
"""a probe's rounds at one batch size: ``(units, seconds)`` each"""


def _probe_link(sizes: tuple[int, ...], repeats: int) -> list[_Rounds]:
    """Worker of the link probe: per size, rank 0's ``repeats`` rounds ``(bytes per rank,
    seconds)`` of an exchange of that size, the empty exchange's (size 0) first: timed
    ``repeats`` times before each size, so a moment of a busy machine moves one of its groups,
    not the latency. Each exchange moves rows as a halo exchange does: 1 KiB rows gathered from a
    table by index, sent, and scattered into a table by index on arrival."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.distributed.context import init_distributed, shutdown

    ctx = init_distributed(device="cpu", backend="gloo", timeout_s=120)
    try:
        comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        gen = torch.Generator().manual_seed(ctx.rank)
        times: dict[int, list[float]] = {size: [] for size in (0, *sizes)}
        # a first pass warms every size up (gloo sets connections and buffers up lazily: the
        # first exchanges took ~2 ms where later ones take ~0.3); the second is measured
        passes = [(False, n) for n in (0, *sizes)] + [(True, n) for s in sizes for n in (0, s)]
        for measured, size in passes:
            rows = size // 1024
            table = torch.randn(2 * rows, 256, generator=gen)
            rows_N = torch.randperm(2 * rows, generator=gen)[:rows]
            counts = [rows if p != ctx.rank else 0 for p in range(ctx.world_size)]
            for repeat in range(repeats + 1):
                ctx.barrier("probe")
                start = time.perf_counter()
                send = [table.index_select(0, rows_N) if c else table[:0] for c in counts]
                received = comm.all_to_all(send, "probe", recv_counts=counts)
                for block in received:
                    if block.shape[0]:
                        table.index_copy_(0, rows_N, block)
                if measured and repeat:  # the first of each group warms its buffers
                    times[size].append(time.perf_counter() - start)
        return [[(float(size), t) for t in seconds] for size, seconds in times.items()]
    finally:
        shutdown()


def link_samples(launches: list[list[_Rounds]]) -> list[list[float]]:
    """``[bytes per rank, median seconds]`` per size (the empty exchange first) of the link
    probe's rounds, pooled over its ``launches`` (each :func:`_probe_link`'s) as every probe's
    (:func:`_pooled_medians`)."""
    return [[units, seconds] for units, seconds in _pooled_medians([[one] for one in launches])[0]]


def _probe_dist_sampling(
    path: str,
    fanouts: tuple[int, ...],
    sizes: list[int],
    repeats: int,
    hidden: int,
    sparse: bool = False,
) -> tuple[list[list[_Rounds]], list[list[_Rounds]], list[list[_Rounds]]]:
    """Worker of the distributed-sampling probe: per way of sampling (requests through the
    collectives; the peer's part read from its mapped files, as ``--host-sharing auto`` on one
    machine) and per batch size, ``repeats`` rounds' ``(sampled edges, seconds)`` of sampling a
    batch of this worker's own training nodes (after one round that warms up); and, on models
    of two layers or more, the historical tables' exchanges (:func:`_probe_history`); and the
    fetch's presample cache (:func:`_probe_cache`; ``sparse``: batches gathered sparse)."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.partition.format import read_partitions
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.sampling.types import SeedInput
    from shardgnn.store.dist_graph import DistGraphStore

    torch.set_num_threads(1)
    ctx = init_distributed(device="cpu", backend="gloo", timeout_s=120)
    try:
        comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        train = read_partitions(path).global_split("train")
        out, history, cache = [], [], []
        for host_ranks in ((), ctx.host_ranks):
            graph = DistGraphStore.open(
                path, ctx.rank, ctx.world_size, comm, verify=False, host_ranks=host_ranks
            )
            sampler = DistNeighborSampler(graph, SamplerConfig(fanouts=fanouts), comm, "probe")
            start, end = graph.book.part_range(ctx.rank)
            own = train[(train >= start) & (train < end)]
            rng = np.random.default_rng(ctx.rank)
            takes = [min(size, len(own)) for size in sizes]
            edges, times = [[] for _ in sizes], [[] for _ in sizes]
            # the sizes alternate, so the machine's drift between them does not read as a
            # cost per edge
            for i in range(repeats + 1):
                for k, take in enumerate(takes):
                    seeds = np.sort(rng.choice(own, take, replace=False))
                    ctx.barrier("probe")
                    begin = time.perf_counter()
                    sample = sampler.sample(SeedInput(seeds), i * len(takes) + k)
                    times[k].append(time.perf_counter() - begin)
                    edges[k].append(sum(block.num_edges for block in sample.blocks))
            out.append([list(zip(e[1:], t[1:])) for e, t in zip(edges, times)])
            if not host_ranks:
                # the tables' and the cache's work is short and noisy: twice the repeats
                batches = [
                    [
                        sampler.sample(SeedInput(np.sort(rng.choice(own, take, False))), i)
                        for take in takes
                    ]
                    for i in range(2 * repeats + 1)
                ]
                if len(fanouts) > 1:
                    history = _probe_history(graph, comm, ctx, batches, hidden)
                cache = _probe_cache(graph, comm, ctx, batches, sparse)
        return out, history, cache
    finally:
        shutdown()


def _probe_history(graph, comm, ctx, batches: list[list], hidden: int) -> list[list[_Rounds]]:
    """Worker of the historical tables' probe: per mode (push, pull) and batch size, the rounds'
    ``(rows this worker sent, seconds)`` of one layer's exchange at the ``hidden`` width over
    sampled ``batches`` (rounds of one batch of each size, the sizes alternating; the first
    round warms up), on real :class:`~shardgnn.store.historical.HistoricalEmbeddings` of this
    worker's halo serving layer 1: push, the step's end (every computed own row a peer watches
    sent to it, written into its table there); pull, the sampler's lookup of the layer's
    outside nodes (the stale ones asked of their owners, answered from the rows they kept,
    written into the table) and the step's end (the rows computed kept). Entries serve one step
    (``max_age`` 1), so each batch pulls what its peer's previous batch computed, as runs of a
    longer age pull what a peer computed since the entry aged."""
    from shardgnn.store.historical import HistoricalEmbeddings, halo_of

    start, end = graph.book.part_range(ctx.rank)
    halo = halo_of(np.asarray(graph.part.indices), start, end)
    out = []
    for mode in ("push", "pull"):
        tables = HistoricalEmbeddings(
            graph.book, ctx.rank, comm, halo, range(1, 2), 1, stage="probe_history", mode=mode
        )
        rows, times = [[] for _ in batches[0]], [[] for _ in batches[0]]
        for samples in batches:
            for k, sample in enumerate(samples):
                blocks = sample.blocks
                h_DF = torch.randn(blocks[0].num_dst, hidden)
                computed = {1: (blocks[0].dst_nodes_D.numpy(), h_DF)}
                sent = tables.sent_rows
                ctx.barrier("probe")
                begin = time.perf_counter()
                if tables.pull:
                    tables.prune(1, blocks[1].src_nodes_S.numpy(), blocks[1].num_dst)
                tables.after_step(computed)
                times[k].append(time.perf_counter() - begin)
                rows[k].append(tables.sent_rows - sent)
        out.append([list(zip(r[1:], t[1:])) for r, t in zip(rows, times)])
    return out


def presample_cache(graph, comm, inputs: list[torch.Tensor], sparse: bool):
    """``(store, cached)``: this worker's rows of ``graph`` (a
    :class:`~shardgnn.store.dist_graph.DistGraphStore`) as training holds them (dense, or CSR
    with ``sparse`` batches) behind the distributed store of ``comm`` (through the collectives),
    and a presample cache in front of it holding the remote rows ``inputs`` (the batches' input
    ids) read most, as many as ``--cache-size``'s default holds (the plan's default too).
    Collective: every worker builds its own at once."""
    from shardgnn.store.cache.build import cacheable_rows, top_ids
    from shardgnn.store.cache.config import CacheConfig
    from shardgnn.store.cache.policies import make_policy
    from shardgnn.store.cache.store import CachedFeatureStore
    from shardgnn.store.dist_feature import DistFeatureStore
    from shardgnn.store.feature import SparseRowStore, rows_in_memory

    local = rows_in_memory(np.asarray(graph.part.x), "none", allow_sparse=sparse)
    store = DistFeatureStore(
        local, graph.book, comm.rank, comm, "probe_cache",
        sparse_batches=isinstance(local, SparseRowStore), sparse_replies=True,
    )  # fmt: skip
    n = graph.book.num_nodes
    counts = np.bincount(np.concatenate([ids.numpy() for ids in inputs]), minlength=n)
    cacheable = cacheable_rows(store)
    capacity = min(CacheConfig().capacity_rows(n, store.row_bytes), int(cacheable.sum()))
    static = top_ids(counts, cacheable, capacity)
    policy = make_policy("presample", num_nodes=n, lookahead=0, static_ids=static)
    return store, CachedFeatureStore(store, policy, capacity)


def _probe_cache(graph, comm, ctx, batches: list[list], sparse: bool) -> list[list[_Rounds]]:
    """Worker of the cache probe: per batch size, the rounds' ``(remote rows the batch reads,
    seconds of the cache's own work)`` fetching sampled ``batches``' input rows (rounds of one
    batch of each size, the first warming up) through :func:`presample_cache`
    (:attr:`~shardgnn.store.cache.store.CachedFeatureStore.own_s`)."""
    inputs = [sample.blocks[0].src_nodes_S for samples in batches for sample in samples]
    store, cached = presample_cache(graph, comm, inputs, sparse)
    reads, times = [[] for _ in batches[0]], [[] for _ in batches[0]]
    for samples in batches:
        for k, sample in enumerate(samples):
            ids = sample.blocks[0].src_nodes_S
            ctx.barrier("probe")
            before = cached.own_s
            cached.gather(ids)
            times[k].append(cached.own_s - before)
            reads[k].append(int((~store.local_mask(ids.numpy())).sum()))
    return [[list(zip(r[1:], t[1:])) for r, t in zip(reads, times)]]


def measure_dist_sampling(
    graph, step: MiniBatchWork, latency_s: float, link_bytes_s: float = float("inf")
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """The distributed sampler's seconds per batch (less its calls' latency,
    :data:`~shardgnn.sampling.dist_neighbor.CALLS_PER_HOP` a hop) and
    per sampled edge, on two local workers over a 2-part METIS partition of ``graph`` (see the
    module docstring; the rounds of :data:`PROBE_LAUNCHES` launches pooled), at the two
    :func:`probe_sizes` of ``step``: ``batch`` and ``edge`` with every request through the
    collectives, ``shared_batch`` and ``shared_edge`` with each worker reading the other's part
    from its mapped files (``--host-sharing auto`` on one machine: no collective; the per-owner
    work still apart from one process's).

    And, on models of two layers or more, the historical tables' own work (:func:`_probe_history`,
    on batches of the same sizes, through the collectives): ``push_call`` and ``pull_call``,
    seconds per layer and step, and ``row``, per row a worker sends or receives (fitted on the
    pushes: a pull moves too few rows to fit its own; the calls' latency and the rows' and ids'
    time on the link, at ``latency_s`` and ``link_bytes_s``, taken off: the plan adds them as it
    does every exchange's).

    And a presample cache's own work in front of the fetch (:func:`_probe_cache`): ``batch``,
    seconds per batch, and ``row``, per remote row a batch reads."""
    import tempfile

    from shardgnn.distributed.launch import launch_local
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph
    from shardgnn.sampling.dist_neighbor import CALLS_PER_HOP

    result = partition_graph(graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    sizes = probe_sizes(step)
    x = np.asarray(graph.x)
    sparse = sparse_input(step.model, int(np.count_nonzero(x)), x.size)
    with tempfile.TemporaryDirectory(prefix="shardgnn-probe-") as tmp:
        path = str(Path(tmp) / "parts")
        write_partitions(graph, result.assignment, path, method=result.method)
        launches = [
            launch_local(
                _probe_dist_sampling,
                (path, step.fanouts, sizes, 9, step.hidden, sparse),
                nprocs=2,
                timeout_s=300,
            )
            for _ in range(PROBE_LAUNCHES)
        ]

    def pooled(part: int) -> list[list[list[tuple[float, float]]]]:
        """Per rank, per way of sampling (part 0), mode of the tables (part 1) or the cache
        (part 2, one group) and per size: the median units and seconds of every launch's
        rounds."""
        return [_pooled_medians([launch[rank][part] for launch in launches]) for rank in (0, 1)]

    sampled, history, cached = pooled(0), pooled(1), pooled(2)
    cache_batch, cache_row = _line(cached[0][0])
    cache = {"batch": cache_batch, "row": cache_row}
    calls = CALLS_PER_HOP * len(step.fanouts) * latency_s
    out = {}
    for prefix, points, latency in zip(("", "shared_"), sampled[0], (calls, 0.0)):
        # the calls' latency off each reading first: the plan charges it per call, and a
        # proportional fit (points too close for a line) would spread it over the edges
        net = [(units, max(seconds - latency, 0.0)) for units, seconds in points]
        out[f"{prefix}batch"], out[f"{prefix}edge"] = _line(net)
    if not history[0]:
        return out, {}, cache
    own = []  # per mode and size: (rows rank 0 sent and received, seconds of its own work)
    # push: ids (their sizes first), then rows; pull: ids asked (their sizes first), stamps
    # back, then rows: collective calls
    for m, (exchanges, ids) in enumerate(((3, 1), (4, 2))):
        own.append([])
        for (mine, seconds), (theirs, _) in zip(history[0][m], history[1][m]):
            # each row float32 at the hidden width with its ids; the link carries both
            # directions at once
            link = max(mine, theirs) * (4 * step.hidden + ids * _ID_BYTES) / link_bytes_s
            own[m].append((mine + theirs, seconds - exchanges * latency_s - link))
    # a row costs alike pushed or pulled (looked up, gathered, written into a table); a pull
    # moves few rows (those the owner computed since the entry aged), too few to fit its own
    # rate against the noise: its exchanges' bookkeeping is the rest
    push_call, row = _line(own[0])
    pull_call = statistics.median(max(t - row * r, 0.0) for r, t in own[1])
    return out, {"row": row, "push_call": push_call, "pull_call": pull_call}, cache


PROBE_LAUNCHES = 3
"""launches of the distributed-sampling probe, their rounds pooled. Its times move between
launches more than between one launch's rounds: on the 2-core machine of BENCHMARKS 32u the
median of a launch's 9 rounds (each way of sampling, each mode of the tables, each batch size)
fell -27 ... +47 % from that of all 18 launches, of 60 rounds still -29 ... +28 % over 9
launches; 3 launches' rounds pooled, -14 ... +20 %"""


def _pooled_medians(launches: list[list[list[_Rounds]]]) -> list[list[tuple[float, float]]]:
    """Per group (a way of sampling, a mode of the tables) and batch size, ``(median units,
    median seconds)`` of the rounds of every launch (each ``[group][size]`` a list of ``(units,
    seconds)`` rounds)."""
    pooled = []
    for g, group in enumerate(launches[0]):
        pooled.append([])
        for k in range(len(group)):
            rounds = [point for launch in launches for point in launch[g][k]]
            units = float(statistics.median(u for u, _ in rounds))
            pooled[g].append((units, statistics.median(t for _, t in rounds)))
    return pooled


def _burst(matmuls: int, a_KK: torch.Tensor) -> None:
    for _ in range(matmuls):
        torch.mm(a_KK, a_KK)


CROWD_TRIALS = 4
"""trials per burst of the crowding probe, each a block of rounds in lockstep and one of the
bursts alone, in turn"""


def _probe_crowd(matmuls: list[int], rounds: list[int]) -> list[float]:
    """Worker of the crowding probe: per burst (a number of 64 x 64 products on one thread),
    what a round (the burst, then an empty all-to-all) takes rank 0 beyond the burst alone,
    every worker bursting at once without the collective (the cores' fair share, as measured
    there and then), in seconds; the two timed in :data:`CROWD_TRIALS` alternating blocks."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.distributed.context import init_distributed, shutdown

    torch.set_num_threads(1)
    ctx = init_distributed(device="cpu", backend="gloo", timeout_s=120)
    try:
        comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        a_KK = torch.randn(64, 64)
        empty, counts = [a_KK[:0]] * ctx.world_size, [0] * ctx.world_size
        out = []
        for n, repeats in zip(matmuls, rounds):
            ctx.barrier("probe")
            for _ in range(3):  # warm-up rounds
                _burst(n, a_KK)
                comm.all_to_all(empty, "probe", recv_counts=counts)
            per_trial = max(1, repeats // CROWD_TRIALS)
            lockstep = alone = 0.0
            # Both timed here, in alternating blocks: the fair share a round's burst gets is
            # measured under the same load, clock and cores as the rounds in lockstep, so the
            # machine's drift between calibrations (and within one) cancels out of the excess;
            # a fair share computed from a product time taken elsewhere varied by more than
            # the excess itself (a 16 ms burst's excess read 1.6-16 ms with 2 workers on 2
            # cores, 0-27 ms with 4; BENCHMARKS 32n).
            for _ in range(CROWD_TRIALS):
                ctx.barrier("probe")
                start = time.perf_counter()
                for _ in range(per_trial):
                    _burst(n, a_KK)
                    comm.all_to_all(empty, "probe", recv_counts=counts)
                lockstep += time.perf_counter() - start
                ctx.barrier("probe")
                start = time.perf_counter()
                for _ in range(per_trial):
                    _burst(n, a_KK)
                alone += time.perf_counter() - start
            out.append((lockstep - alone) / (per_trial * CROWD_TRIALS))
        return out
    finally:
        shutdown()


def measure_crowding(per_host: int, cores: int, latency_s: float) -> dict[float, float]:
    """Burst seconds -> what each collective call costs ``per_host`` workers on this machine's
    ``cores`` beyond the bursts' fair share of the cores (``burst * per_host / cores``) and the
    latency (see the module docstring)."""
    from shardgnn.distributed.launch import launch_local

    a_KK = torch.randn(64, 64)
    with _threads(1):
        product_s = _seconds(lambda: _burst(200, a_KK)) / 200
    matmuls = [max(1, round(burst / product_s)) for burst in CROWD_BURSTS]
    rounds = [max(20, min(200, round(0.3 / (burst * per_host / cores)))) for burst in CROWD_BURSTS]
    # each burst about 0.3 s of rounds in lockstep a launch (20 at least; as long again alone):
    # the short bursts' rounds vary most
    launches = [
        launch_local(_probe_crowd, (matmuls, rounds), nprocs=per_host, timeout_s=300)[0]
        for _ in range(CROWD_LAUNCHES)
    ]
    excess = np.mean(launches, axis=0)  # as many rounds each: the mean of them all
    return {float(n * product_s): max(0.0, float(t) - latency_s) for n, t in zip(matmuls, excess)}


CROWD_LAUNCHES = 3
"""launches of the crowding probe, their rounds' excess averaged: one launch's reading at a
0.2 ms burst moved 0.15-0.62 ms between calibrations, its blocks 0.25-2.3 ms within one, and it
drove most of the predictions' spread (BENCHMARKS 32zb). The mean, not a median: a run pays
every call's wait, its rare long ones too"""


CROWDED_STEP_ROUNDS = 7
"""rounds of the crowded-step probe, each a step alone then the steps together: a lone step's
time moved 7-16 ms between single readings on a 2-core machine, which moved the factor between
1.0 (clamped) and 2.4 at 4 workers; a round's pair shares the machine's moment, and the plan
takes their ratios' median (BENCHMARKS 32q)"""


def _probe_crowded_step(path: str, step: MiniBatchWork, size: int, repeats: int) -> list[float]:
    """Worker of the crowded-batch probe: in each of :data:`CROWDED_STEP_ROUNDS` rounds, rank
    0's mean seconds per batch of ``size`` seeds, sampled afresh from its training nodes and
    stepped, alone (every other rank waiting at a barrier), then with every rank sampling and
    stepping its own batches, the gradients all-reduced after each backward, in lockstep
    (``repeats`` batches each); and the model's parameter count: ``[alone_1, crowded_1, alone_2,
    crowded_2, ..., parameters]``."""
    import torch.distributed as dist

    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.sampling.types import SeedInput

    torch.set_num_threads(1)
    ctx = init_distributed(device="cpu", backend="gloo", timeout_s=120)
    try:
        root = Path(path)
        work = Workload(
            indptr=np.load(root / "indptr.npy", mmap_mode="r"),
            indices=np.load(root / "indices.npy", mmap_mode="r"),
            x=np.load(root / "x.npy", mmap_mode="r"),
            spmm_widths=(), linears=(), sparse_widths=(),
        )  # fmt: skip
        sampler, model, adam = _planned_model(work, step)
        rng = np.random.default_rng(ctx.rank)
        params = [p for p in model.parameters() if p.requires_grad]

        def all_reduce() -> None:  # as DDP's bucket: flattened, summed, averaged, copied back
            flat = torch.cat([p.grad.flatten() for p in params])
            dist.all_reduce(flat, group=ctx.group)
            flat /= ctx.world_size
            for p, reduced in zip(params, flat.split([p.numel() for p in params])):
                p.grad.copy_(reduced.view_as(p))

        def mean_seconds(fn: Callable[[], None]) -> float:
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            return (time.perf_counter() - start) / repeats

        def batch(reduce: Callable[[], None] | None) -> Callable[[], None]:
            def sample_and_step() -> None:
                # a fresh batch each time: its rows come from memory, not the caches
                seeds = np.sort(rng.choice(step.train_idx, min(size, len(step.train_idx)), False))
                sample = sampler.sample(SeedInput(seeds), ctx.rank)
                labels = torch.from_numpy(rng.integers(0, step.out_dim, seeds.size))
                _train_step(work, model, adam, sample, labels, reduce=reduce)()

            return sample_and_step

        alone_step, crowded_step = batch(None), batch(all_reduce)
        if ctx.rank == 0:
            alone_step()  # warm-up
        for _ in range(3):  # warm-up steps
            crowded_step()
        out: list[float] = []
        for _ in range(CROWDED_STEP_ROUNDS):
            ctx.barrier("probe")
            out.append(mean_seconds(alone_step) if ctx.rank == 0 else 0.0)
            ctx.barrier("probe")
            out.append(mean_seconds(crowded_step))
        return [*out, float(sum(p.numel() for p in params))]
    finally:
        shutdown()


def crowded_step_factor(
    rounds: list[tuple[float, float]], per_host: int, cores: int, extra_s: float = 0.0
) -> float:
    """The median over the probe's ``rounds`` (``(alone, crowded)`` seconds a step) of how many
    times its fair share of the ``cores`` (the round's lone step times ``per_host / cores``) the
    crowded step took, less ``extra_s`` (the all-reduce's latency and bytes, which the plan
    counts apart); at least 1."""
    factors = [
        (crowded - extra_s) / max(alone * per_host / cores, 1e-12) for alone, crowded in rounds
    ]
    return max(1.0, statistics.median(factors))


def measure_crowded_step(
    work: Workload, per_host: int, cores: int, latency_s: float, link_bytes_s: float
) -> float:
    """How many times their fair share of this machine's ``cores`` (one worker's batch alone,
    times ``per_host / cores``) a batch takes ``per_host`` workers sampling it afresh and
    running the planned training step and its gradient all-reduce together, less the
    all-reduce's latency and bytes (the plan counts those); at least 1:
    :func:`crowded_step_factor` of the probe's rounds. The batch: the smallest of the planned
    per-worker sizes."""
    import tempfile

    from shardgnn.distributed.launch import launch_local

    step = work.minibatch
    assert step is not None
    size = max(1, min(step.batch_sizes))
    with tempfile.TemporaryDirectory(prefix="shardgnn-probe-") as tmp:
        for name in ("indptr", "indices", "x"):
            np.save(Path(tmp) / f"{name}.npy", np.asarray(getattr(work, name)))
        *seconds, params = launch_local(
            _probe_crowded_step, (tmp, step, size, 6), nprocs=per_host, timeout_s=300
        )[0]
    ring_s = 2 * (per_host - 1) / per_host * params * 4 / link_bytes_s
    rounds = list(zip(seconds[0::2], seconds[1::2]))
    return crowded_step_factor(rounds, per_host, cores, latency_s + ring_s)


def fit_link(samples: list[list[float]]) -> tuple[float, float]:
    """``(bytes per second, latency seconds)`` from the probe's ``[bytes per rank, seconds]``:
    the latency is the empty exchange's time, the rate (one direction's, both busy) a
    least-squares line through the origin of the bytes each rank sent against the time beyond
    the latency."""
    latency = samples[0][1]
    sent = np.array([s for s, _ in samples[1:]], dtype=np.float64)
    seconds = np.maximum(np.array([t for _, t in samples[1:]], dtype=np.float64) - latency, 1e-9)
    return float((sent * sent).sum() / max((sent * seconds).sum(), 1e-12)), float(latency)


LINK_LAUNCHES = 3
"""launches of the link probe, their times pooled: an empty exchange's median moved between
launches of this machine (0.17-0.26 ms over 201 exchanges each) more than within one"""


def measure_link(
    sizes: tuple[int, ...] = LINK_SIZES, repeats: int = 9
) -> tuple[float, float, list]:
    """``(bytes per second, latency seconds, samples)`` of the link between two local workers
    (:data:`LINK_LAUNCHES` launches pooled)."""
    from shardgnn.distributed.launch import launch_local

    samples = link_samples(
        [
            launch_local(_probe_link, (sizes, repeats), nprocs=2, timeout_s=300)[0]
            for _ in range(LINK_LAUNCHES)
        ]
    )
    return (*fit_link(samples), samples)


def read_link(path: str) -> tuple[float, float, list]:
    """``(bytes per second, latency seconds, samples)`` of a link measured between machines by
    ``torchrun --nnodes 2 --nproc-per-node 1 ... -m shardgnn.fullgraph.rates --out FILE``."""
    try:
        with open(path) as fh:
            samples = [[float(a), float(b)] for a, b in json.load(fh)["link_samples"]]
        if len(samples) < 2:
            raise ValueError("fewer than two exchange sizes")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"--link {path}: not the JSON of `python -m shardgnn.fullgraph.rates --out FILE` "
            f"({type(exc).__name__}: {exc}); measure the link with it under torchrun"
        ) from None
    return (*fit_link(samples), samples)


def calibrate(
    work: Workload,
    thread_counts: tuple[int, ...],
    cores: int,
    link: str | None = None,
    crowded: tuple[int, ...] = (),
    graph=None,
) -> MachineRates:
    """Measure every rate :mod:`shardgnn.fullgraph.plan` needs (about 15-45 s); ``link``: the
    file of a link measured between machines (:func:`read_link`) instead of two local workers;
    ``crowded``: numbers of workers one machine would run, as many as its cores or more, to probe
    the crowding at (:func:`measure_crowding`, and with mini-batch training
    :func:`measure_crowded_step`); ``graph``: the planned graph, whose distributed
    sampling is timed when mini-batch training is planned (:func:`measure_dist_sampling`)."""
    measured = None if link is None else read_link(link)  # a bad file: refused before timing
    threads = sorted(set(thread_counts))
    compute = {t: measure_compute(work, t) for t in threads}
    # the mini-batch step's rounds at three moments of the calibration, fitted on them all
    minibatch = work.minibatch
    steps = {} if minibatch is None else {t: StepProbe(work, minibatch, t) for t in threads}
    for probe in steps.values():
        probe.time_rounds()
    rate, latency, samples = measure_link() if measured is None else measured
    crowd = {w: measure_crowding(w, cores, latency) for w in sorted(set(crowded)) if w >= cores}
    for probe in steps.values():
        probe.time_rounds()
    dist_sample, history, cache, crowd_step = {}, {}, {}, {}
    if graph is not None and minibatch is not None:
        dist_sample, history, cache = measure_dist_sampling(graph, minibatch, latency, rate)
    if minibatch is not None:
        crowd_step = {
            w: measure_crowded_step(work, w, cores, latency, rate)
            for w in sorted(set(crowded))
            if w >= cores
        }
    for t, probe in steps.items():
        probe.time_rounds()
        compute[t] = dataclasses.replace(compute[t], minibatch_s=probe.rates())
    return MachineRates(
        cores=cores,
        compute=compute,
        link_bytes_s=rate,
        latency_s=latency,
        link_samples=samples,
        dist_sample_s=dist_sample,
        history_s=history,
        cache_s=cache,
        crowd_s=crowd,
        crowd_step=crowd_step,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m shardgnn.fullgraph.rates --out FILE`` under torchrun with one worker on each
    of two machines: measure the link between them (rank 0 writes the samples, bandwidth and
    latency); ``shardgnn plan --calibrate --link FILE`` plans with it."""
    import argparse
    import os

    from shardgnn.atomic import save_json

    parser = argparse.ArgumentParser(prog="python -m shardgnn.fullgraph.rates", description=(
        main.__doc__ or "").split("\n\n")[0])  # fmt: skip
    parser.add_argument("--out", required=True, help="the link's JSON (written by rank 0)")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    if int(os.environ.get("WORLD_SIZE", "0")) != 2:
        raise SystemExit(
            "python -m shardgnn.fullgraph.rates: run it under torchrun with 2 workers in all "
            "(--nnodes 2 --nproc-per-node 1), one per machine"
        )
    samples = link_samples([_probe_link(LINK_SIZES, args.repeats)])
    if os.environ.get("RANK") == "0":
        rate, latency = fit_link(samples)
        save_json(args.out, {"link_samples": samples, "link_bytes_s": rate, "latency_s": latency})
        print(f"link: {rate * 8 / 1e9:.3f} Gbit/s, latency {latency * 1e6:.0f} us -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
