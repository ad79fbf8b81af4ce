"""What every distributed full-graph strategy would send and hold at any number of workers, before
a run: ``shardgnn plan`` (the byte and memory half of issue 32's cost model).

For each worker count ``P`` the graph is partitioned in memory (``--method``) and, for every
strategy (``1d``; ``1d-sparse``; ``vertex-cut``; ``1.5d`` with each replication ``c > 1``,
``c^2 <= P``; ``2d`` and ``3d`` on their default grids), the rows each worker sends per SpMM are
counted from the edges, as the exchanges of :mod:`shardgnn.fullgraph.spmm` send them: the results
equal the byte counters of a training epoch, worker by worker (tested for every strategy at P = 4).
Bytes per epoch = per SpMM of the training step (forward, and backward where the input needs a
gradient) rows x the bytes of one row at its width (``--bits``: the codec's payload; 1.5D's
all-reduce of partial products stays fp32). *Held* memory is what a worker keeps for the whole run:
its feature rows (1.5D: its row group's) and its adjacency block with the transpose (int64 index and
fp32 value per entry, self-loops included). *Activations* are what the training step keeps for
backward beyond that: its held rows x the bytes the model saves per row
(:func:`activation_bytes_per_row`, measured on the model itself; the SpMMs save nothing, the loss's
few rows are left out), the step's transient buffers (received rows, gradients) not.

**Epoch time** (with measured :class:`~shardgnn.fullgraph.rates.MachineRates`, ``--calibrate``):
per worker, compute = its SpMM entries x each aggregation width's seconds per entry (forward and
backward; 3D: the slice width) + its dense rows x each linear layer's seconds per row (on sparse
features: its non-zeros x the projection's seconds per non-zero) + element-wise work + Adam;
workers of one host share its cores (``--workers-per-host``; each gets ``cores // workers``
threads, and a host's compute takes at least the sum of its workers' thread-seconds over its
cores). Communication = the bytes through each host's link over the link's measured bandwidth:
the busier of its two directions (a full-duplex link sends its workers' bytes while it receives
theirs: exact with one worker per host; a worker receives forward the rows it returns as
gradients backward, and the reverse), on one host every worker's bytes over the loopback's (both
directions of the probe), plus the latency of every collective call
of the training step, per peer. The step's exchanges are synchronous, so epoch = compute +
communication of the slowest host. The recommendation is then the strategy with the shortest
predicted epoch; without rates, the one whose busiest worker sends the fewest bytes
(network-bound epochs).

**Remote dependencies** (with rates; GCN, GraphSAGE, GIN): ``1d-sparse`` is weighed with
``--dependencies cache`` and ``hybrid`` too (:mod:`shardgnn.fullgraph.dependencies`), each
worker's rows selected here as the workers select them (the hybrid with each worker's costs from
the same rates), then priced layer by layer (:func:`dependency_cost`): a layer's bytes are the
rows it receives, its compute its own entries and rows (the recomputed ones included), its held
memory the cached feature rows and every layer's block. Without rates they are left out: no row
exchanged, caching would always send the fewest bytes, whatever it recomputes.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import numpy as np
import torch

from shardgnn.distributed.codec import RowCodec
from shardgnn.fullgraph.config import (
    DEPENDENCIES,
    DEPENDENCY_MODELS,
    FullGraphConfig,
    PlanConfig,
    strategy_label,
)
from shardgnn.fullgraph.dependencies import (
    DependencyCosts,
    DependencySets,
    select_dependencies,
)
from shardgnn.fullgraph.rates import MachineRates, MiniBatchWork, Workload, read_rates
from shardgnn.fullgraph.shard import BlockGrid, grid_of
from shardgnn.graph.csr import Graph, concat_ranges
from shardgnn.graph.features import stored_sparse
from shardgnn.nn.config import ModelConfig
from shardgnn.partition.cover import cut_rows
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.partition.metrics import recv_volumes, send_volumes

_INDEX_VALUE_BYTES = 12  # one CSR entry: int64 index + fp32 value
_SPARSE_FEATURE_BYTES = 20  # one non-zero of features stored sparse (COO): 2 int64 indices + fp32


@dataclasses.dataclass(kw_only=True)
class StrategyCost:
    """One strategy at one worker count.

    Attributes:
        workers: ``P``; strategy: the ``--spmm`` variant; layout: its replication or grid.
        rows: rows one forward SpMM sends, summed over workers (3D: ``ceil(width / L)`` wide
            slices; 1.5D's all-reduce of partial products not included; ``--dependencies``:
            every layer's, which differ).
        bytes_per_epoch: SpMM bytes of one training step, summed over workers.
        max_worker_bytes: the most one worker sends of those.
        max_worker_recv: the most one worker receives (what a worker is sent forward, it
            returns gradients for backward, and the reverse: its received rows are its sent
            rows with the directions swapped).
        held_mb: the largest worker's feature rows and adjacency (with its transpose), MB.
        activation_mb: the most one worker's training step keeps for backward besides, MB.
        empty_parts: parts the partitioner left without a node (such a worker holds nothing;
            training refuses them unless the partition allows it).
        config: the settings that run it (``--spmm``, ``--replication`` / ``--grid-*``).
        compute_s, comm_s, epoch_s: the predicted seconds of one training step (its compute,
            its communication, their sum on the slowest host); ``None`` without machine rates.
    """

    workers: int
    strategy: str
    layout: str
    rows: int
    bytes_per_epoch: int
    max_worker_bytes: int
    max_worker_recv: int
    held_mb: float
    activation_mb: float
    empty_parts: int
    config: FullGraphConfig
    compute_s: float | None = None
    comm_s: float | None = None
    epoch_s: float | None = None

    @property
    def label(self) -> str:
        """The strategy as the plan's table and ``--spmm auto`` name it: its ``--spmm``, then
        its replication or grid, or how it gets remote dependencies."""
        return strategy_label(self.strategy, self.layout, self.config.dependencies)

    def flags(self, rates: str | None = None) -> list[str]:
        """The ``shardgnn train`` flags that run it (``rates``: the ``--plan-rates`` file
        ``--dependencies hybrid`` prices with)."""
        full = self.config
        flags = ["--spmm", full.spmm]
        if full.spmm == "1.5d":
            flags += ["--replication", str(full.replication)]
        if full.spmm in ("2d", "3d"):
            grid = grid_of(full, self.workers)
            flags += ["--grid-rows", str(grid.rows)]
            if full.spmm == "3d":
                flags += ["--grid-layers", str(grid.layers)]
        if full.dependencies != "communicate":
            flags += ["--dependencies", full.dependencies]
            if full.dependencies == "hybrid" and rates is not None:
                flags += ["--plan-rates", rates]
        return flags

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = {k: v for k, v in dataclasses.asdict(self.config).items() if k != "bits"}
        return out


def spmm_widths(config: PlanConfig, in_dim: int, out_dim: int) -> tuple[list[int], list[int]]:
    """Widths of the SpMMs of one training step, ``(forward, backward)``, as the layers of
    :mod:`shardgnn.nn` run them: GCN, GraphSAGE and GIN aggregate at the narrower of a layer's
    input and output width (a dense input; sparse features are projected first), and aggregating
    the raw features (layer 0 when they are the narrower) needs no backward; APPNP and SGC
    propagate ``layers`` times at the output width, after a layer that needs its gradient."""
    if config.model in ("appnp", "sgc"):
        steps = [out_dim] * config.layers
        return steps, steps
    dims = [in_dim] + [config.hidden] * (config.layers - 1) + [out_dim]
    widths = [min(a, b) for a, b in zip(dims[:-1], dims[1:])]
    return widths, (widths[1:] if dims[0] <= dims[1] else widths)


def linear_layers(
    config: PlanConfig, in_dim: int, out_dim: int, sparse: bool
) -> list[tuple[int, int, bool, bool]]:
    """The linear layers of one training step on a worker's rows, ``(in, out, input_grad,
    sparse_input)`` each, as :mod:`shardgnn.nn` builds the model: GCN one per layer, GraphSAGE two
    (self and neighbours), GIN its two-layer MLP, APPNP a two-layer MLP, SGC one layer. The raw
    features need no gradient; stored sparse (``sparse``), they are multiplied as sparse."""
    if config.model in ("appnp", "sgc"):
        dims = [in_dim, out_dim] if config.model == "sgc" else [in_dim, config.hidden, out_dim]
    else:
        dims = [in_dim] + [config.hidden] * (config.layers - 1) + [out_dim]
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        first = (a, b, i > 0, sparse and i == 0)
        out.append(first)
        if config.model == "sage":
            out.append(first)
        elif config.model == "gin":
            out.append((b, b, True, False))
    return out


def activation_bytes_per_row(config: PlanConfig, in_dim: int, out_dim: int) -> int:
    """Bytes the model's training forward keeps for backward per node row (weights and the
    input features, held anyway, not counted), measured: the model :mod:`shardgnn.nn` builds
    (``--model``, ``--hidden``, ``--layers``, ``--dropout``, ``--input-dropout``) runs forward
    over random graphs of 64 and 128 nodes, every saved tensor's storage counted once
    (``torch.autograd.graph.saved_tensors_hooks``); the difference is 64 rows' worth."""
    return _saved_per_row(
        config.model, config.hidden, config.layers, config.dropout, config.input_dropout,
        in_dim, out_dim,
    )  # fmt: skip


@functools.lru_cache(maxsize=16)
def _saved_per_row(
    model: str, hidden: int, layers: int, dropout: float, input_dropout: float, *dims: int
) -> int:
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model

    settings = ModelConfig(
        model=model, hidden=hidden, num_layers=layers, dropout=dropout, input_dropout=input_dropout
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = build_model(settings, *dims).train()
        rng = np.random.default_rng(0)
        saved = []
        for n in (64, 128):
            dst = np.sort(rng.integers(0, n, 4 * n))
            indptr = np.r_[0, np.cumsum(np.bincount(dst, minlength=n))]
            graph = MessageGraph.from_csr(indptr, rng.integers(0, n, 4 * n))
            x_NF = torch.randn(n, dims[0])
            run = functools.partial(net, [graph] * net.num_layers, x_NF)
            saved.append(saved_bytes(run, x_NF, net))
    return (saved[1] - saved[0]) // 64


def saved_bytes(forward, *held: torch.Tensor | torch.nn.Module) -> int:
    """Bytes of the tensors autograd keeps for backward while ``forward()`` runs, each storage
    once, those of ``held`` (tensors, modules' parameters: memory held anyway) not counted."""
    skip = set()
    for item in held:
        tensors = item.parameters() if isinstance(item, torch.nn.Module) else [item]
        skip.update(t.untyped_storage().data_ptr() for t in tensors)
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        for part in _dense_parts(t):
            storage = part.untyped_storage()
            if storage.data_ptr() not in skip:
                storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(storages.values())


def _dense_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The strided tensors holding ``t``: itself, or a sparse tensor's indices and values."""
    if t.layout == torch.sparse_coo:
        return t._indices(), t._values()
    if t.layout == torch.sparse_csr:
        return t.crow_indices(), t.col_indices(), t.values()
    return (t,)


def row_bytes(width: int, bits: int) -> int:
    """Bytes of one exchanged row ``width`` wide at ``bits`` (32: fp32; below: the codec's)."""
    return 4 * width if bits == 32 else RowCodec(bits).payload_bytes(width)


def strategies(workers: int) -> list[FullGraphConfig]:
    """Every strategy :func:`plan` weighs at ``workers``."""
    out = [
        FullGraphConfig(spmm="1d"),
        FullGraphConfig(spmm="1d-sparse"),
        FullGraphConfig(spmm="vertex-cut"),
    ]
    out += [
        FullGraphConfig(spmm="1.5d", replication=c)
        for c in range(2, workers + 1)
        if workers % c == 0 and c * c <= workers
    ]
    out.append(FullGraphConfig(spmm="2d"))
    if grid_of(FullGraphConfig(spmm="3d"), workers).layers > 1 and workers > 2:
        out.append(FullGraphConfig(spmm="3d"))
    return out


@dataclasses.dataclass
class _Edges:
    """The graph's edges and one partition, as every count needs them."""

    dst: np.ndarray
    src: np.ndarray
    owner: np.ndarray
    sizes: np.ndarray
    send_volume: np.ndarray
    recv_volume: np.ndarray
    row_nnz: np.ndarray | None = None
    """each node's feature non-zeros where the features are stored sparse (``None``: dense)"""
    edge_part: np.ndarray | None = None
    """a vertex-cut partition's part computing each edge (``--spmm vertex-cut`` follows it)"""

    @functools.cached_property
    def feature_nnz(self) -> np.ndarray | None:
        """per part, its rows' feature non-zeros (``None``: dense features)"""
        if self.row_nnz is None:
            return None
        nnz = np.bincount(self.owner, weights=self.row_nnz, minlength=len(self.sizes))
        return nnz.astype(np.int64)


def _worker_rows(
    full: FullGraphConfig, e: _Edges, workers: int, loops: bool
) -> tuple[np.ndarray, ...]:
    """Per worker: rows sent by a forward and by a backward SpMM (int64 ``[P]`` each, 3D: slices),
    rows it all-reduces (1.5D's partial products) and its adjacency entries (``loops``: the
    normalisation adds a self-loop per row, GCN's)."""
    sizes, owner = e.sizes, e.owner
    zero = np.zeros(workers, np.int64)
    if full.spmm == "1d-sparse":
        entries = np.bincount(owner[e.dst], minlength=workers) + loops * sizes
        # backward: every worker returns the gradients of the halo rows it received
        return e.send_volume, e.recv_volume, zero, entries
    if full.spmm == "vertex-cut":
        computed_by, pull_pairs, push_pairs = cut_rows(e.src, e.dst, owner, workers, e.edge_part)
        # forward, a part sends its pulled rows and its pushed partial sums; backward, each
        # comes back to it as a gradient from the part it went to
        forward = np.bincount(owner[pull_pairs // workers], minlength=workers)
        forward += np.bincount(push_pairs % workers, minlength=workers)
        backward = np.bincount(pull_pairs % workers, minlength=workers)
        backward += np.bincount(owner[push_pairs // workers], minlength=workers)
        # entries: the edges a part computes
        entries = np.bincount(computed_by, minlength=workers) + loops * sizes
        return forward, backward, zero, entries
    if full.spmm in ("1d", "1.5d"):
        c = full.replication
        ranks = np.arange(workers)
        group = sizes.reshape(-1, c).sum(1)[ranks // c]  # its row group's rows
        column = np.bincount(ranks % c, weights=sizes, minlength=c).astype(np.int64)[ranks % c]
        forward = sizes * (workers // c - 1)  # its part to the other row groups of its column
        backward = column - sizes  # a dense gradient block of every other part of its column
        # a replica's entries: its row group's in-edges from its column's parts (its own part's
        # self-loops are in its columns)
        entries = np.bincount((owner[e.dst] // c) * c + owner[e.src] % c, minlength=workers)
        return forward, backward, (group if c > 1 else zero), entries + loops * sizes
    grid = grid_of(full, workers)
    assert isinstance(grid, BlockGrid)
    L, C = grid.layers, grid.cols
    unit_dst, unit_src = owner[e.dst] // L, owner[e.src] // L
    row_dst, col_dst = unit_dst // C, unit_dst % C
    row_src, col_src = unit_src // C, unit_src % C
    units = workers // L
    # (row, unit) pairs: sent forward by the first unit, their gradients back by the second
    pairs = np.unique((e.src * grid.rows + row_dst)[row_dst != row_src])
    src_unit = owner[pairs // grid.rows] // L
    expand = np.bincount(src_unit, minlength=units)
    expand_back = np.bincount(pairs % grid.rows * C + src_unit % C, minlength=units)
    pairs = np.unique((e.dst * C + col_src)[col_src != col_dst])
    dst_unit = owner[pairs // C] // L
    fold = np.bincount(dst_unit // C * C + pairs % C, minlength=units)
    fold_back = np.bincount(dst_unit, minlength=units)
    unit_rows = sizes.reshape(units, L).sum(1)
    ranks = np.arange(workers)
    fiber = sizes * (L - 1) + (unit_rows[ranks // L] - sizes)  # to columns, back to rows
    block = np.bincount(row_dst * C + col_src, minlength=units)  # held by each layer
    entries = (block + loops * unit_rows)[ranks // L]  # its unit's self-loops are its columns
    # every layer of a unit sends its slices
    forward = (expand + fold)[ranks // L] + fiber
    return forward, (expand_back + fold_back)[ranks // L] + fiber, zero, entries


def strategy_cost(
    full: FullGraphConfig,
    e: _Edges,
    workers: int,
    widths: tuple[list[int], list[int]],
    config: PlanConfig,
    in_dim: int,
    out_dim: int = 0,
    rates: MachineRates | None = None,
) -> StrategyCost:
    """The bytes and memory of one strategy, and with ``rates`` its epoch time (see the module
    docstring)."""
    forward, backward, allreduce, entries = _worker_rows(full, e, workers, config.model == "gcn")
    grid = grid_of(full, workers)
    layers = grid.layers if isinstance(grid, BlockGrid) else 1
    c = full.replication
    worker_bytes = np.zeros(workers, np.int64)
    worker_recv = np.zeros(workers, np.int64)
    # each SpMM's received rows are the other direction's sent rows (forward rows come back as
    # gradients): forward, a worker receives what it returns backward, and backward the reverse
    for rows, back_rows, group in zip((forward, backward), (backward, forward), widths):
        for w in group:
            worker_bytes += rows * row_bytes(-(-w // layers), config.bits)
            worker_recv += back_rows * row_bytes(-(-w // layers), config.bits)
            # the ring all-reduce of fp32 partial products (1.5D), as the communicator counts it
            ring = 2 * (c - 1) * allreduce * w * 4 // c
            worker_bytes += ring
            worker_recv += ring
    held_rows = allreduce if full.spmm == "1.5d" and c > 1 else e.sizes
    held_nnz = None if e.feature_nnz is None else held_sums(e.feature_nnz, full, workers)
    held = feature_bytes(held_rows, in_dim, held_nnz) + 2 * entries * _INDEX_VALUE_BYTES
    activations = held_rows * activation_bytes_per_row(config, in_dim, out_dim)
    layout = f"c={c}" if full.spmm == "1.5d" else grid.shape if isinstance(grid, BlockGrid) else ""
    times: dict[str, float] = {}
    if rates is not None:
        times = step_seconds(
            full, e, workers, widths, config, (in_dim, out_dim), rates,
            held_rows=held_rows, entries=entries, worker_bytes=worker_bytes,
            worker_recv=worker_recv,
        )  # fmt: skip
    return _summed(full, layout, int(forward.sum()), e, worker_bytes, worker_recv, held,
                   activations, times)  # fmt: skip


def _summed(
    full: FullGraphConfig,
    layout: str,
    rows: int,
    e: _Edges,
    worker_bytes: np.ndarray,
    worker_recv: np.ndarray,
    held: np.ndarray,
    activations: np.ndarray,
    times: dict[str, float],
) -> StrategyCost:
    """A strategy's :class:`StrategyCost` from its per-worker counts (bytes, memory)."""
    return StrategyCost(
        workers=len(e.sizes),
        strategy=full.spmm,
        layout=layout,
        rows=rows,
        bytes_per_epoch=int(worker_bytes.sum()),
        max_worker_bytes=int(worker_bytes.max()),
        max_worker_recv=int(worker_recv.max()),
        held_mb=float(held.max()) / 1e6,
        activation_mb=float(activations.max()) / 1e6,
        empty_parts=int((e.sizes == 0).sum()),
        config=full,
        **times,
    )


def dependency_costs(
    rates: MachineRates,
    threads: int,
    model: str,
    dims: list[int],
    bits: int,
    feature_nnz: float | None = None,
) -> DependencyCosts:
    """``--dependencies hybrid``'s prices (:class:`~shardgnn.fullgraph.dependencies.
    DependencyCosts`) for ``model`` (``gcn``, ``sage``, ``gin``) with layer widths ``dims``
    (input, hidden ..., output), from ``rates`` at the measured thread count nearest
    ``threads``; ``feature_nnz``: non-zeros per feature row where the features are stored
    sparse. Rows cross the link at its measured one-way rate."""
    r = rates.at(min(rates.compute, key=lambda t: (abs(t - threads), t)))
    layers = len(dims) - 1
    plan = PlanConfig(model=model, hidden=dims[1] if layers > 1 else 1, layers=layers)
    forward, backward = spmm_widths(plan, dims[0], dims[-1])
    raw_first = len(backward) < len(forward)  # layer 0 aggregates the features themselves
    linears = linear_layers(plan, dims[0], dims[-1], sparse=feature_nnz is not None)
    per_layer = len(linears) // layers  # GCN one, GraphSAGE and GIN two

    def linear_s(a: int, b: int, grad: bool, sparse: bool) -> float:
        return float(feature_nnz) * r.sparse(b) if sparse else r.linear(a, b, grad)

    communicate, entry, row = [], [], []
    for i, width in enumerate(forward):
        grad = i > 0 or not raw_first
        sent = row_bytes(width, bits) * (2 if grad else 1)
        communicate.append(sent / rates.link_bytes_s)
        entry.append(r.spmm(width) + (r.spmm(width, transposed=True) if grad else 0.0))
        mine = linears[i * per_layer : (i + 1) * per_layer]
        row.append(
            sum(linear_s(*lin) for lin in mine) + sum(b for _, b, _, _ in mine) * r.elementwise_s
        )
    input_s = 0.0 if raw_first else linear_s(*linears[0])
    # sparse features projected first: a cached row costs its own non-zeros' projection
    per_nonzero = r.sparse(linears[0][1]) if linears[0][3] and not raw_first else None
    return DependencyCosts(tuple(communicate), tuple(entry), tuple(row), input_s, per_nonzero)


def dependency_sets(
    e: _Edges,
    workers: int,
    num_layers: int,
    mode: str,
    costs: list[DependencyCosts] | None = None,
) -> list[DependencySets]:
    """Every worker's :class:`~shardgnn.fullgraph.dependencies.DependencySets` for ``--spmm
    1d-sparse --dependencies mode`` (``cache`` or ``hybrid``, with each worker's
    :class:`~shardgnn.fullgraph.dependencies.DependencyCosts` in ``costs``), selected as the
    workers select them, here from the whole graph's edges (its in-edges served from memory,
    not by their owners)."""
    num_nodes = len(e.owner)
    assert np.all(e.dst[1:] >= e.dst[:-1]), "the edges in destination order"
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(e.dst, minlength=num_nodes), out=indptr[1:])

    def fetch(nodes: np.ndarray) -> tuple[np.ndarray, ...]:
        counts = indptr[nodes + 1] - indptr[nodes]
        sources = e.src[concat_ranges(indptr[nodes], counts)]
        # the selection reads the in-edges alone (the degrees normalise the blocks it builds)
        zeros = np.zeros(len(nodes), np.int64), np.zeros(len(sources), np.int64)
        return (np.r_[0, np.cumsum(counts)], sources, *zeros)

    order = np.argsort(e.owner, kind="stable")
    bounds = np.r_[0, np.cumsum(e.sizes)]
    out = []
    for q in range(workers):
        own = order[bounds[q] : bounds[q + 1]]
        own_indptr, own_sources, own_degree, _ = fetch(own)
        mine = None if costs is None else costs[q]
        nonzeros = None if e.row_nnz is None else functools.partial(np.take, e.row_nnz)
        sets = select_dependencies(
            own_indptr, own_sources, own, own, own_degree, num_layers, mode, fetch, mine, nonzeros
        )
        out.append(sets)
    return out


def dependency_cost(
    mode: str,
    e: _Edges,
    workers: int,
    widths: tuple[list[int], list[int]],
    config: PlanConfig,
    in_dim: int,
    out_dim: int,
    rates: MachineRates,
) -> StrategyCost:
    """``--spmm 1d-sparse --dependencies mode`` (``cache`` or ``hybrid``): its rows selected as
    the workers select them (:func:`dependency_sets`, hybrid with each worker's costs from
    ``rates``), then its bytes (each layer's received rows, and their gradients where its input
    has one), memory (the cached feature rows, every layer's block and its transpose; the step's
    activations at the most rows a layer reads) and, from ``rates``, epoch time: each layer's
    entries and rows at their widths (:func:`step_seconds`, :class:`LayerRows`). A hybrid that
    recomputes nothing is predicted as ``1d-sparse`` itself."""
    full = FullGraphConfig(spmm="1d-sparse", bits=config.bits)
    full.dependencies = mode  # hybrid runs with the plan's rates: --plan-rates, set by its user
    layers = config.layers
    forward, backward = widths
    first_grad = layers - len(backward)
    costs = None
    if mode == "hybrid":
        threads = max(1, rates.cores // min(workers, config.workers_per_host))
        dims = [in_dim] + [config.hidden] * (layers - 1) + [out_dim]
        nnz = e.feature_nnz
        # each worker prices with its own rows' mean non-zeros, as it does in training
        means = [
            None if nnz is None else float(nnz[q]) / max(1, int(e.sizes[q])) for q in range(workers)
        ]
        costs = [
            dependency_costs(rates, threads, config.model, dims, config.bits, mean)
            for mean in means
        ]
    sets = dependency_sets(e, workers, layers, mode, costs)
    recv_LP = np.array([[len(s.received[i]) for s in sets] for i in range(layers)], np.int64)
    sent_LP = np.array(
        [
            sum(np.bincount(e.owner[s.received[i]], minlength=workers) for s in sets)
            for i in range(layers)
        ],
        dtype=np.int64,
    ).reshape(layers, workers)
    worker_bytes = np.zeros(workers, np.int64)
    worker_recv = np.zeros(workers, np.int64)
    exchanges = 0
    for i, w in enumerate(forward):
        grad = i >= first_grad
        # forward a worker sends the rows others receive from it; backward their gradients
        # come back to it, and it returns those of the rows it received
        worker_bytes += (sent_LP[i] + grad * recv_LP[i]) * row_bytes(w, config.bits)
        worker_recv += (recv_LP[i] + grad * sent_LP[i]) * row_bytes(w, config.bits)
        exchanges += (1 + grad) * bool(recv_LP[i].any())
    loops = config.model == "gcn"
    src = np.array([s.src_rows for s in sets], np.int64).T.reshape(layers, workers)
    dst = np.array([s.dst_rows for s in sets], np.int64).T.reshape(layers, workers)
    entries = (
        np.array([[s.indptr[s.dst_rows[i]] for s in sets] for i in range(layers)], np.int64)
        + loops * dst
    )
    feature_nnz = None
    if e.row_nnz is not None:
        feature_nnz = np.array(
            [[e.row_nnz[s.nodes[: s.src_rows[0]]].sum() for s in sets],
             [e.row_nnz[s.nodes[: s.dst_rows[0]]].sum() for s in sets]], dtype=np.int64,
        )  # fmt: skip
    rows = LayerRows(src, dst, entries, exchanges, feature_nnz)
    held_nnz = None if feature_nnz is None else feature_nnz[0]
    held = feature_bytes(src[0], in_dim, held_nnz) + 2 * entries.sum(0) * _INDEX_VALUE_BYTES
    activations = src.max(0) * activation_bytes_per_row(config, in_dim, out_dim)
    times = step_seconds(
        full, e, workers, widths, config, (in_dim, out_dim), rates, held_rows=e.sizes,
        entries=entries[0], worker_bytes=worker_bytes, worker_recv=worker_recv,
        layer_rows=rows,
    )  # fmt: skip
    return _summed(full, mode, int(recv_LP.sum()), e, worker_bytes, worker_recv, held,
                   activations, times)  # fmt: skip


def _round_peers(full: FullGraphConfig, workers: int) -> int:
    """The peers one SpMM (forward or backward) talks to, summed over its collective calls (each
    costs the link's latency per peer): 1d-sparse one all-to-all; 1d and 1.5d one broadcast per
    part of the grid column (forward; one all-to-all backward: counted alike), 1.5d an
    all-reduce over the row group; vertex-cut two all-to-alls; 2d an all-to-all over the grid
    column and one over the grid row, 3d two more over the fiber."""
    if full.spmm == "1d-sparse":
        return workers - 1
    if full.spmm == "vertex-cut":  # the pulled rows, then the pushed sums
        return 2 * (workers - 1)
    grid = grid_of(full, workers)
    if not isinstance(grid, BlockGrid):
        col = workers // full.replication
        return col * (col - 1) + full.replication - 1
    return grid.rows - 1 + grid.cols - 1 + 2 * (grid.layers - 1)


@dataclasses.dataclass
class LayerRows:
    """Per layer, the rows each worker's layers run on where they are not all its held rows
    (``--dependencies``: a layer computes its own rows and the remote rows recomputed for the
    layers above from those and the rows recomputed for it).

    Attributes:
        src: ``[L, P]`` rows a layer reads here (its local input rows).
        dst: ``[L, P]`` rows it computes.
        entries: ``[L, P]`` adjacency entries it aggregates (self-loops included).
        exchanges: SpMMs of the step that exchange rows (forward and backward; a layer no
            worker receives rows at runs none).
        feature_nnz: sparse features: ``[2, P]``, the feature non-zeros of layer 0's ``src``
            and ``dst`` rows (the rows it reads are not the mean row where the hybrid caches
            rows by their own non-zeros).
    """

    src: np.ndarray
    dst: np.ndarray
    entries: np.ndarray
    exchanges: int
    feature_nnz: np.ndarray | None = None


def step_seconds(
    full: FullGraphConfig,
    e: _Edges,
    workers: int,
    widths: tuple[list[int], list[int]],
    config: PlanConfig,
    dims: tuple[int, int],
    rates: MachineRates,
    *,
    held_rows: np.ndarray,
    entries: np.ndarray,
    worker_bytes: np.ndarray,
    worker_recv: np.ndarray | None = None,
    layer_rows: LayerRows | None = None,
) -> dict[str, float]:
    """The predicted ``compute_s``, ``comm_s`` and ``epoch_s`` of one training step (see the
    module docstring); ``dims``: the model's input and output widths; ``layer_rows``: each
    layer's rows and entries where they differ from ``held_rows`` and ``entries``."""
    per_host = min(workers, config.workers_per_host)
    threads = max(1, rates.cores // per_host)
    r = rates.at(threads)
    grid = grid_of(full, workers)
    slices = grid.layers if isinstance(grid, BlockGrid) else 1
    forward, backward = widths
    first_grad = len(forward) - len(backward)  # the layers before it aggregate without gradient
    layer_entries = [entries] * len(forward) if layer_rows is None else layer_rows.entries
    compute = np.zeros(workers)
    for i, w in enumerate(forward):
        per_entry = r.spmm(-(-w // slices))
        if i >= first_grad:
            per_entry += r.spmm(-(-w // slices), transposed=True)
        compute = compute + layer_entries[i] * per_entry
    linears = linear_layers(config, *dims, sparse=e.feature_nnz is not None)
    rows_K = [held_rows] * len(linears)
    projected_nnz = None  # the first linear's rows' feature non-zeros, where known
    if layer_rows is not None:
        rows_K, projected_nnz = _linear_rows(config, dims, layer_rows, len(linears) // len(forward))
    params = 0
    for k, ((a, b, grad, sparse), rows) in enumerate(zip(linears, rows_K)):
        params += a * b + b
        if sparse:  # the non-zeros of the rows it projects, else at the rows' mean
            nnz = held_sums(e.feature_nnz, full, workers) * (rows / np.maximum(held_rows, 1))
            if k == 0 and projected_nnz is not None:
                nnz = projected_nnz
            compute = compute + nnz * r.sparse(b)
        else:
            compute = compute + rows * r.linear(a, b, grad)
        compute = compute + rows * b * r.elementwise_s
    compute = compute + params * r.adam_s
    # every worker all-reduces the weight gradients (counted as a ring) and two loss scalars
    ring = 2 * (workers - 1) * params * 4 // workers
    sent = (worker_bytes + ring).astype(np.float64)
    recv = sent if worker_recv is None else (worker_recv + ring).astype(np.float64)
    peers = _round_peers(full, workers)
    spmms = len(forward) + len(backward) if layer_rows is None else layer_rows.exchanges
    latency = rates.latency_s * (spmms * peers + 2 * 2 * (workers - 1))
    compute_s, comm = host_seconds(compute, sent, recv, rates, per_host)
    comm += latency
    return {"compute_s": compute_s, "comm_s": comm, "epoch_s": compute_s + comm}


def _linear_rows(
    config: PlanConfig, dims: tuple[int, int], rows: LayerRows, per_layer: int
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Per linear layer of :func:`linear_layers` (GCN, GraphSAGE, GIN), the rows it multiplies:
    a layer's first projects its input rows where the layer narrows (it aggregates after
    projecting), its output rows otherwise; the others (GraphSAGE's root, GIN's second) its
    output rows; ``per_layer``: the linear layers of each. Second, the feature non-zeros of
    the first one's rows (``rows.feature_nnz``'s)."""
    num_layers = rows.src.shape[0]
    widths = [dims[0]] + [config.hidden] * (num_layers - 1) + [dims[1]]
    out = []
    for i in range(num_layers):
        narrows = widths[i] > widths[i + 1]
        out.append(rows.src[i] if narrows else rows.dst[i])
        out += [rows.dst[i]] * (per_layer - 1)
    first_nnz = None
    if rows.feature_nnz is not None:
        first_nnz = rows.feature_nnz[0 if widths[0] > widths[1] else 1]
    return out, first_nnz


def host_seconds(
    compute: np.ndarray, sent: np.ndarray, recv: np.ndarray, rates: MachineRates, per_host: int
) -> tuple[float, float]:
    """``(compute, exchange)`` seconds of the slowest host, from each worker's compute seconds
    and bytes sent and received, ``per_host`` consecutive workers per machine (each with
    ``cores // per_host`` threads), latency not included."""
    workers = compute.shape[0]
    threads = max(1, rates.cores // per_host)
    hosts = -(-workers // per_host)
    host_compute = np.zeros(hosts)
    host_bytes = np.zeros(hosts)
    host_recv = np.zeros(hosts)
    for h in range(hosts):
        mine = slice(h * per_host, min(workers, (h + 1) * per_host))
        # the host's workers share its cores: it takes at least their thread-seconds over them
        host_compute[h] = max(
            compute[mine].max(), compute[mine].sum() * threads / max(rates.cores, threads)
        )
        host_bytes[h] = sent[mine].sum()
        host_recv[h] = recv[mine].sum()
    # one machine: every byte crosses its loopback, both directions of the probe's link shared;
    # several: each machine's link (full duplex: each direction at the measured rate) carries
    # what its workers send out and, at the same time, what they receive: the busier direction
    # of the busiest link bounds the exchange (counting all bytes as crossing it)
    if hosts == 1:
        comm = float(host_bytes.max() / (2 * rates.link_bytes_s))
    else:
        comm = float(max(host_bytes.max(), host_recv.max()) / rates.link_bytes_s)
    return float(host_compute.max()), comm


def feature_bytes(rows: np.ndarray, in_dim: int, nnz: np.ndarray | None) -> np.ndarray:
    """Per worker, the bytes of the feature rows it holds as training stores them: ``rows`` x
    ``in_dim`` fp32, or where the graph's features are stored sparse (``nnz``: the non-zeros of
    those rows) a COO tensor's indices and values (a dense count overstated a worker's
    coauthor-physics features 51 times)."""
    if nnz is None:
        return rows * in_dim * 4
    return np.asarray(nnz, np.int64) * _SPARSE_FEATURE_BYTES


def held_sums(per_part: np.ndarray, full: FullGraphConfig, workers: int) -> np.ndarray:
    """Per worker, the sum of a per-part count over the parts whose rows it holds (1.5D: its row
    group's ``c`` parts; otherwise its own)."""
    c = full.replication if full.spmm == "1.5d" else 1
    return per_part.reshape(-1, c).sum(1)[np.arange(workers) // c]


def costs_at(
    graph: Graph,
    assignment: np.ndarray,
    workers: int,
    config: PlanConfig,
    rates: MachineRates | None = None,
    edge_part: np.ndarray | None = None,
) -> list[StrategyCost]:
    """Every strategy's cost on one partition of an in-memory graph (``assignment``: each node's
    part; ``rates``: predict epoch times too; ``edge_part``: a vertex-cut's placement of the
    edges, in CSR order)."""
    owner = np.asarray(assignment, dtype=np.int64)
    e = _Edges(
        dst=np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr)),
        src=np.asarray(graph.indices, dtype=np.int64),
        owner=owner,
        sizes=np.bincount(owner, minlength=workers).astype(np.int64),
        send_volume=send_volumes(graph, owner, workers).astype(np.int64),
        recv_volume=recv_volumes(graph, owner, workers).astype(np.int64),
        row_nnz=_row_nnz(graph.x),
        edge_part=edge_part,
    )
    return _costs(e, workers, config, int(graph.x.shape[1]), graph.num_classes, rates)


def _row_nnz(x: np.ndarray) -> np.ndarray | None:
    """Each row's non-zero features when training stores the features sparse
    (:func:`~shardgnn.graph.features.stored_sparse`), else ``None``."""
    row_nnz = np.count_nonzero(x, axis=1).astype(np.int64)
    return row_nnz if stored_sparse(int(row_nnz.sum()), x.size) else None


def partition_costs(
    pset, config: PlanConfig, out_dim: int, rates: MachineRates | None = None
) -> list[StrategyCost]:
    """Every strategy's cost on a partition directory (a
    :class:`~shardgnn.partition.format.PartitionSet`) at its part count (:func:`partition_edges`);
    ``out_dim``: the model's output width; ``rates``: predict epoch times too."""
    e, in_dim = partition_edges(pset)
    return _costs(e, pset.num_parts, config, in_dim, out_dim, rates)


def partition_edges(pset) -> tuple[_Edges, int]:
    """A partition directory's edges as the plan counts them, and its feature width: the edges
    from every part's in-edges (new ids), the volumes from its recorded metrics, each part's
    features read to count their non-zeros (whether and how sparse training stores them)."""
    book = pset.book
    workers = pset.num_parts
    dst, src, row_nnz, edge_part = [], [], [], []
    for q in range(workers):
        part = pset.load_part(q, mmap=True, verify=False)
        dst.append(np.repeat(np.arange(part.start, part.end, dtype=np.int64), np.diff(part.indptr)))
        src.append(np.asarray(part.indices, dtype=np.int64))
        if part.edge_part is not None:
            edge_part.append(np.asarray(part.edge_part))
        if part.x is not None:
            row_nnz.append(np.count_nonzero(part.x, axis=1))
    metrics = pset.metrics
    in_dim = int((pset.meta.get("features") or {}).get("dim", 0))
    sizes = np.diff(np.asarray(book.boundaries)).astype(np.int64)
    nnz = np.concatenate(row_nnz).astype(np.int64) if row_nnz else None
    if nnz is not None and not stored_sparse(int(nnz.sum()), int(sizes.sum()) * in_dim):
        nnz = None
    e = _Edges(
        dst=np.concatenate(dst),
        src=np.concatenate(src),
        owner=book.owner(np.arange(book.num_nodes)).astype(np.int64),
        sizes=sizes,
        send_volume=np.asarray(metrics.send_volume, dtype=np.int64),
        recv_volume=np.asarray(metrics.recv_volume, dtype=np.int64),
        row_nnz=nnz,
        edge_part=np.concatenate(edge_part) if edge_part else None,
    )
    return e, in_dim


def _costs(
    e: _Edges,
    workers: int,
    config: PlanConfig,
    in_dim: int,
    out_dim: int,
    rates: MachineRates | None = None,
) -> list[StrategyCost]:
    widths = spmm_widths(config, in_dim, out_dim)
    out = [
        strategy_cost(
            dataclasses.replace(full, bits=config.bits),
            e,
            workers,
            widths,
            config,
            in_dim,
            out_dim,
            rates,
        )
        for full in strategies(workers)
    ]
    # recomputing remote rows is weighed by time only: by bytes alone, caching every remote
    # dependency (no rows exchanged) would always win, however much it recomputes
    if rates is not None and config.model in DEPENDENCY_MODELS:
        out += [
            dependency_cost(mode, e, workers, widths, config, in_dim, out_dim, rates)
            for mode in DEPENDENCIES[1:]
        ]
    return out


def workload(graph: Graph, config: PlanConfig, batch_size: int = 1024) -> Workload:
    """What :func:`~shardgnn.fullgraph.rates.calibrate` times for ``config``'s model on
    ``graph``: its adjacency, features, every aggregation width (3D's slices at every planned
    worker count included) and every linear layer; unless only full-graph strategies are
    planned, a mini-batch step at each planned worker count's share of ``batch_size``."""
    in_dim, out_dim = int(graph.x.shape[1]), graph.num_classes
    forward, backward = spmm_widths(config, in_dim, out_dim)
    slices = {1}
    for workers in config.workers:
        for full in strategies(workers):
            grid = grid_of(full, workers)
            slices.add(grid.layers if isinstance(grid, BlockGrid) else 1)
    widths = sorted({-(-w // s) for w in forward + backward for s in slices})
    sparse = _row_nnz(graph.x) is not None
    linears = linear_layers(config, in_dim, out_dim, sparse)
    minibatch = None
    if config.strategies != "full":
        batch = batch_size
        minibatch = MiniBatchWork(
            fanouts=config.minibatch_fanouts,
            model=config.model,
            hidden=config.hidden,
            out_dim=out_dim,
            train_idx=np.asarray(graph.train_idx, dtype=np.int64),
            batch_sizes=tuple(max(1, -(-batch // p)) for p in config.workers),
        )
    return Workload(
        minibatch=minibatch,
        indptr=np.asarray(graph.indptr),
        indices=np.asarray(graph.indices),
        x=graph.x,
        spmm_widths=tuple(widths),
        linears=tuple(sorted({(a, b, g) for a, b, g, sp in linears if not sp})),
        sparse_widths=tuple(sorted({b for _, b, _, sp in linears if sp})),
    )


def thread_counts(config: PlanConfig, cores: int) -> tuple[int, ...]:
    """The torch threads a worker gets at each planned worker count (``cores`` shared by the
    workers of a host)."""
    return tuple(sorted({max(1, cores // min(p, config.workers_per_host)) for p in config.workers}))


def plan(
    graph: Graph,
    config: PlanConfig,
    progress=None,
    rates: MachineRates | None = None,
    on_partition=None,
) -> list[StrategyCost]:
    """Every strategy's cost at every ``config.workers``, each on a partition made in memory
    with ``config.method`` (empty parts allowed and counted); ``progress(P)`` is called before
    each; with ``rates``, epoch times too; ``on_partition(P, assignment)`` sees each partition
    (what else is planned on it: mini-batch training)."""
    out = []
    for workers in config.workers:
        if progress is not None:
            progress(workers)
        # METIS balances node counts alone: with the training nodes and edges as constraints too
        # it leaves parts empty from about 128 parts on a 34k-node graph
        balance = {"balance": ("nodes",)} if config.method == "metis" else {}
        part = PartitionConfig(
            num_parts=workers,
            method=config.method,
            seed=config.seed,
            allow_empty_parts=True,
            **balance,
        )
        with warnings.catch_warnings():  # empty parts are reported with the costs
            warnings.simplefilter("ignore")
            result = partition_graph(graph, part)
        assignment = result.assignment
        if config.strategies != "minibatch":
            out += costs_at(graph, assignment, workers, config, rates, result.edge_part)
        if on_partition is not None:
            on_partition(workers, assignment)
    return out


def worker_memory_mb(cost) -> float:
    """What ``cost``'s busiest worker keeps: its held rows, adjacency and caches and its
    step's activations, MB."""
    return cost.held_mb + cost.activation_mb


def recommend(costs: list, memory_mb: float | None = None) -> dict[int, Any]:
    """Per worker count: the strategy with the shortest predicted epoch when the costs have
    times, else the one whose busiest worker sends the fewest bytes (ties: the least held
    memory); with ``memory_mb``, among those whose busiest worker keeps no more
    (:func:`worker_memory_mb`; a worker count where none fits has no pick). ``costs``:
    full-graph strategies (:class:`StrategyCost`) or the mini-batch options'
    (:class:`~shardgnn.fullgraph.minibatch_plan.MiniBatchCost`: the same fields)."""
    best: dict[int, StrategyCost] = {}

    def key(cost: StrategyCost) -> tuple:
        first = cost.epoch_s if cost.epoch_s is not None else 0.0
        return (first, cost.max_worker_bytes, cost.held_mb)

    for cost in costs:
        if memory_mb is not None and worker_memory_mb(cost) > memory_mb:
            continue
        incumbent = best.get(cost.workers)
        if incumbent is None or key(cost) < key(incumbent):
            best[cost.workers] = cost
    return best


def auto_spmm(
    pset,
    model: ModelConfig,
    full: FullGraphConfig,
    out_dim: int,
    workers_per_host: int = 1,
    memory_mb: float | None = None,
    plan_rates: str | None = None,
) -> tuple[FullGraphConfig, StrategyCost, list[StrategyCost]]:
    """``--spmm auto``: ``full`` with the strategy :func:`recommend` picks for the partition
    directory ``pset`` (its replication or grid included; bits and the rest kept; with the
    rates file ``plan_rates``, the shortest predicted epoch for ``workers_per_host`` workers per
    machine; GCN, GraphSAGE and GIN: ``1d-sparse`` with ``--dependencies cache`` and ``hybrid``
    among them) among those whose busiest worker keeps at most ``memory_mb`` (where none does:
    the one that keeps least), that pick's cost, and every strategy's."""
    rates = None if plan_rates is None else read_rates(plan_rates, "--plan-rates")
    config = PlanConfig(
        model=model.model,
        hidden=model.hidden,
        layers=model.num_layers,
        dropout=model.dropout,
        input_dropout=model.input_dropout,
        bits=full.bits,
        workers=(pset.num_parts,),
        workers_per_host=1 if rates is None else workers_per_host,
        rates=plan_rates,
    )
    costs = partition_costs(pset, config, out_dim, rates)
    pick = recommend(costs, memory_mb).get(pset.num_parts)
    if pick is None:  # nothing fits: the least memory
        pick = min(costs, key=lambda cost: (worker_memory_mb(cost), cost.max_worker_bytes))
    best = pick.config
    chosen = dataclasses.replace(
        full,
        spmm=best.spmm,
        replication=best.replication,
        grid_rows=best.grid_rows,
        grid_layers=best.grid_layers,
        dependencies=best.dependencies,
    )
    return chosen, pick, costs
