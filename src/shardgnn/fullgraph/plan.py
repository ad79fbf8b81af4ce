"""What every distributed full-graph strategy would send and hold at any number of workers, before
a run: ``shardgnn plan`` (the byte and memory half of issue 32's cost model).

For each worker count ``P`` the graph is partitioned in memory (``--method``) and, for every
strategy (``1d``; ``1d-sparse``; ``1.5d`` with each replication ``c > 1``, ``c^2 <= P``; ``2d`` and
``3d`` on their default grids), the rows each worker sends per SpMM are counted from the edges,
as the exchanges of :mod:`shardgnn.fullgraph.spmm` send them: the results equal the byte
counters of a training epoch, worker by worker (tested for every strategy at P = 4). Bytes per
epoch = per SpMM of the training step (forward, and backward where the input needs a gradient)
rows x the bytes of one row at its width (``--bits``: the codec's payload; 1.5D's all-reduce of
partial products stays fp32). *Held* memory is what a worker keeps for the whole run: its
feature rows (1.5D: its row group's) and its adjacency block with the transpose (int64 index and
fp32 value per entry, self-loops included), not the activations.

The recommendation is the strategy whose busiest worker sends the fewest bytes (network-bound
epochs); epoch-time prediction from calibrated machine rates is not part of it yet.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from shardgnn.distributed.codec import RowCodec
from shardgnn.fullgraph.config import FullGraphConfig, PlanConfig
from shardgnn.fullgraph.shard import BlockGrid, grid_of
from shardgnn.graph.csr import Graph
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.partition.metrics import recv_volumes, send_volumes

_INDEX_VALUE_BYTES = 12  # one CSR entry: int64 index + fp32 value


@dataclasses.dataclass(kw_only=True)
class StrategyCost:
    """One strategy at one worker count.

    Attributes:
        workers: ``P``; strategy: the ``--spmm`` variant; layout: its replication or grid.
        rows: rows one forward SpMM sends, summed over workers (3D: ``ceil(width / L)`` wide
            slices; 1.5D's all-reduce of partial products not included).
        bytes_per_epoch: SpMM bytes of one training step, summed over workers.
        max_worker_bytes: the most one worker sends of those.
        held_mb: the largest worker's feature rows and adjacency (with its transpose), MB.
        empty_parts: parts the partitioner left without a node (such a worker holds nothing;
            training refuses them unless the partition allows it).
        config: the settings that run it (``--spmm``, ``--replication`` / ``--grid-*``).
    """

    workers: int
    strategy: str
    layout: str
    rows: int
    bytes_per_epoch: int
    max_worker_bytes: int
    held_mb: float
    empty_parts: int
    config: FullGraphConfig

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


def row_bytes(width: int, bits: int) -> int:
    """Bytes of one exchanged row ``width`` wide at ``bits`` (32: fp32; below: the codec's)."""
    return 4 * width if bits == 32 else RowCodec(bits).payload_bytes(width)


def strategies(workers: int) -> list[FullGraphConfig]:
    """Every strategy :func:`plan` weighs at ``workers``."""
    out = [FullGraphConfig(spmm="1d"), FullGraphConfig(spmm="1d-sparse")]
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
) -> StrategyCost:
    """The bytes and memory of one strategy (see the module docstring)."""
    forward, backward, allreduce, entries = _worker_rows(full, e, workers, config.model == "gcn")
    grid = grid_of(full, workers)
    layers = grid.layers if isinstance(grid, BlockGrid) else 1
    c = full.replication
    worker_bytes = np.zeros(workers, np.int64)
    for rows, group in zip((forward, backward), widths):
        for w in group:
            worker_bytes += rows * row_bytes(-(-w // layers), config.bits)
            # the ring all-reduce of fp32 partial products (1.5D), as the communicator counts it
            worker_bytes += 2 * (c - 1) * allreduce * w * 4 // c
    held_rows = allreduce if full.spmm == "1.5d" and c > 1 else e.sizes
    held = held_rows * in_dim * 4 + 2 * entries * _INDEX_VALUE_BYTES
    layout = f"c={c}" if full.spmm == "1.5d" else grid.shape if isinstance(grid, BlockGrid) else ""
    return StrategyCost(
        workers=workers,
        strategy=full.spmm,
        layout=layout,
        rows=int(forward.sum()),
        bytes_per_epoch=int(worker_bytes.sum()),
        max_worker_bytes=int(worker_bytes.max()),
        held_mb=float(held.max()) / 1e6,
        empty_parts=int((e.sizes == 0).sum()),
        config=full,
    )


def costs_at(
    graph: Graph, assignment: np.ndarray, workers: int, config: PlanConfig
) -> list[StrategyCost]:
    """Every strategy's cost on one partition of an in-memory graph (``assignment``: each node's
    part)."""
    owner = np.asarray(assignment, dtype=np.int64)
    e = _Edges(
        dst=np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr)),
        src=np.asarray(graph.indices, dtype=np.int64),
        owner=owner,
        sizes=np.bincount(owner, minlength=workers).astype(np.int64),
        send_volume=send_volumes(graph, owner, workers).astype(np.int64),
        recv_volume=recv_volumes(graph, owner, workers).astype(np.int64),
    )
    return _costs(e, workers, config, int(graph.x.shape[1]), graph.num_classes)


def partition_costs(pset, config: PlanConfig, out_dim: int) -> list[StrategyCost]:
    """Every strategy's cost on a partition directory (a
    :class:`~shardgnn.partition.format.PartitionSet`) at its part count: the edges come from
    every part's in-edges (new ids), the volumes from its recorded metrics; ``out_dim``: the
    model's output width."""
    book = pset.book
    workers = pset.num_parts
    dst, src = [], []
    for q in range(workers):
        part = pset.load_part(q, mmap=True, verify=False)
        dst.append(np.repeat(np.arange(part.start, part.end, dtype=np.int64), np.diff(part.indptr)))
        src.append(np.asarray(part.indices, dtype=np.int64))
    metrics = pset.metrics
    e = _Edges(
        dst=np.concatenate(dst),
        src=np.concatenate(src),
        owner=book.owner(np.arange(book.num_nodes)).astype(np.int64),
        sizes=np.diff(np.asarray(book.boundaries)).astype(np.int64),
        send_volume=np.asarray(metrics.send_volume, dtype=np.int64),
        recv_volume=np.asarray(metrics.recv_volume, dtype=np.int64),
    )
    in_dim = int((pset.meta.get("features") or {}).get("dim", 0))
    return _costs(e, workers, config, in_dim, out_dim)


def _costs(
    e: _Edges, workers: int, config: PlanConfig, in_dim: int, out_dim: int
) -> list[StrategyCost]:
    widths = spmm_widths(config, in_dim, out_dim)
    return [
        strategy_cost(
            dataclasses.replace(full, bits=config.bits), e, workers, widths, config, in_dim
        )
        for full in strategies(workers)
    ]


def plan(graph: Graph, config: PlanConfig, progress=None) -> list[StrategyCost]:
    """Every strategy's cost at every ``config.workers``, each on a partition made in memory
    with ``config.method`` (empty parts allowed and counted); ``progress(P)`` is called before
    each."""
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
            assignment = partition_graph(graph, part).assignment
        out += costs_at(graph, assignment, workers, config)
    return out


def recommend(costs: list[StrategyCost]) -> dict[int, StrategyCost]:
    """Per worker count: the strategy whose busiest worker sends the fewest bytes (ties: the
    least held memory)."""
    best: dict[int, StrategyCost] = {}
    for cost in costs:
        key = (cost.max_worker_bytes, cost.held_mb)
        incumbent = best.get(cost.workers)
        if incumbent is None or key < (incumbent.max_worker_bytes, incumbent.held_mb):
            best[cost.workers] = cost
    return best


def auto_spmm(
    pset, model: str, hidden: int, layers: int, full: FullGraphConfig, out_dim: int
) -> tuple[FullGraphConfig, StrategyCost, list[StrategyCost]]:
    """``--spmm auto``: ``full`` with the strategy :func:`recommend` picks for the partition
    directory ``pset`` (its replication or grid included; bits and the rest kept), that pick's
    cost, and every strategy's."""
    config = PlanConfig(model=model, hidden=hidden, layers=layers, bits=full.bits)
    costs = partition_costs(pset, config, out_dim)
    pick = recommend(costs)[pset.num_parts]
    best = pick.config
    chosen = dataclasses.replace(
        full,
        spmm=best.spmm,
        replication=best.replication,
        grid_rows=best.grid_rows,
        grid_layers=best.grid_layers,
    )
    return chosen, pick, costs
