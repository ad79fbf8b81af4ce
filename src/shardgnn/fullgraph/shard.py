"""What one rank holds in distributed full-graph training, and the process grid that says which.

The graph is split into ``P`` row blocks by the partition directory (part ``p`` owns new ids
``[boundaries[p], boundaries[p+1])``). With replication ``c`` (1.5D, CAGNET) the ``P`` ranks form a
``(P/c) x c`` grid: rank ``(r, k)`` (``r = rank // c``, ``k = rank % c``) holds the *row group* of
parts ``r c .. r c + c - 1`` (replicated on the ``c`` ranks of row ``r``) and multiplies the columns
of the parts ``q`` with ``q % c == k``. ``c = 1`` is the 1D layout: a rank holds its own part.
2D and 3D run on a :class:`BlockGrid` instead: a rank holds only its own part's rows and
multiplies a block of the adjacency (:func:`grid_of`, :mod:`shardgnn.fullgraph.spmm`).

Columns are kept in an *extended* local space: ``0 .. n - 1`` are the held rows, ``n ..`` the
halo (sorted global ids of non-held in-neighbours, so each owner's halo rows are contiguous).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from shardgnn.distributed.comm import Communicator
from shardgnn.errors import ConfigError
from shardgnn.graph.csr import label_dtype
from shardgnn.graph.features import stored_sparse
from shardgnn.partition.book import PartitionBook
from shardgnn.partition.format import read_partitions
from shardgnn.partition.vertexcut import most_square
from shardgnn.store.feature import advise_random, csr_rows, dense_rows, nonzero_count


@dataclasses.dataclass(frozen=True)
class Grid:
    """The 1.5D process grid: ``P / c`` row groups of ``c`` replicas (``c = 1``: plain 1D).

    Raises:
        ConfigError: ``c`` does not divide ``P``.
    """

    world_size: int
    replication: int = 1

    def __post_init__(self) -> None:
        if self.replication < 1 or self.world_size % self.replication:
            raise ConfigError(
                f"--replication {self.replication} must be >= 1 and divide the number of workers "
                f"({self.world_size}); e.g. --replication 2 with 4 workers"
            )

    @property
    def num_rows(self) -> int:
        return self.world_size // self.replication

    def row_of(self, rank: int) -> int:
        return rank // self.replication

    def col_of(self, rank: int) -> int:
        return rank % self.replication

    def row_parts(self, row: int) -> range:
        """The parts (= ranks) of row group ``row``."""
        return range(row * self.replication, (row + 1) * self.replication)

    def col_parts(self, col: int) -> list[int]:
        """The parts whose columns the ranks of grid column ``col`` multiply (ascending)."""
        return [q for q in range(self.world_size) if q % self.replication == col]

    def group_ranks(self) -> dict[str, list[list[int]]]:
        """Every communicator's ranks: ``row`` (a row group's replicas), ``col`` (a grid
        column: one member per row group)."""
        return {
            "row": [list(self.row_parts(r)) for r in range(self.num_rows)],
            "col": [self.col_parts(k) for k in range(self.replication)],
        }


@dataclasses.dataclass(frozen=True)
class BlockGrid:
    """The ``R x C x L`` grid of 2D (``L = 1``) and 3D SpMM.

    Ranks form *units* of ``L`` consecutive ranks (a fiber; unit ``u`` = ranks and parts
    ``u L .. u L + L - 1``, a contiguous id range); units form an ``R x C`` grid, unit
    ``u = r C + k`` at grid row ``r``, column ``k``. Grid row ``r``'s block of the adjacency (the
    rows of its units) restricted to the columns of grid column ``k``'s units is multiplied by
    the ``L`` ranks of unit ``(r, k)``, each for ``1 / L`` of the feature columns.

    Raises:
        ConfigError: the grid does not have the workers' count of ranks.
    """

    world_size: int
    rows: int
    cols: int
    layers: int = 1

    def __post_init__(self) -> None:
        if min(self.rows, self.cols, self.layers) < 1 or (
            self.rows * self.cols * self.layers != self.world_size
        ):
            raise ConfigError(
                f"a {self.rows} x {self.cols} x {self.layers} grid does not hold "
                f"{self.world_size} workers; choose --grid-rows (and --grid-layers) dividing them"
            )

    @property
    def replication(self) -> int:
        """Parts per grid row (what :func:`load_shard` reads as a row group)."""
        return self.cols * self.layers

    def unit_of(self, rank: int) -> int:
        return rank // self.layers

    def row_of(self, rank: int) -> int:
        return self.unit_of(rank) // self.cols

    def col_of(self, rank: int) -> int:
        return self.unit_of(rank) % self.cols

    def unit_parts(self, unit: int) -> range:
        return range(unit * self.layers, (unit + 1) * self.layers)

    def row_parts(self, row: int) -> range:
        """The parts of grid row ``row``'s units (the block's rows)."""
        return range(row * self.replication, (row + 1) * self.replication)

    def row_units(self, row: int) -> list[int]:
        return [row * self.cols + k for k in range(self.cols)]

    def col_units(self, col: int) -> list[int]:
        return [r * self.cols + col for r in range(self.rows)]

    def group_ranks(self) -> dict[str, list[list[int]]]:
        """Every communicator's ranks: ``row`` (a grid row's units, one layer), ``col`` (a grid
        column's units, one layer), ``fiber`` (a unit's ranks)."""
        layers = range(self.layers)
        return {
            "row": [
                [u * self.layers + z for u in self.row_units(r)]
                for r in range(self.rows)
                for z in layers
            ],
            "col": [
                [u * self.layers + z for u in self.col_units(k)]
                for k in range(self.cols)
                for z in layers
            ],
            "fiber": [list(self.unit_parts(u)) for u in range(self.rows * self.cols)],
        }

    @property
    def shape(self) -> str:
        return f"{self.rows}x{self.cols}" + (f"x{self.layers}" if self.layers > 1 else "")


def grid_of(config, world_size: int) -> Grid | BlockGrid:
    """The process grid a :class:`~shardgnn.fullgraph.config.FullGraphConfig` runs on:
    ``(P / c) x c`` for ``1.5d``; ``R x C`` for ``2d`` and ``R x C x L`` for ``3d`` (``R`` =
    ``--grid-rows``, 0: the most square with ``R <= C``; ``L`` = ``--grid-layers``, 0: the
    largest divisor of ``P`` with ``L^3 <= P``, or its smallest above 1 when that is 1);
    ``P x 1`` otherwise.

    Raises:
        ConfigError: the replication, the grid's rows or its layers do not divide ``P``.
    """
    if config.spmm not in ("2d", "3d"):
        return Grid(world_size, config.replication)
    layers = 1
    if config.spmm == "3d":
        divisors = [d for d in range(1, world_size + 1) if world_size % d == 0]
        layers = config.grid_layers or max(d for d in divisors if d**3 <= world_size)
        if layers == 1 and not config.grid_layers and world_size > 1:
            layers = divisors[1]
        if world_size % layers:
            raise ConfigError(
                f"--grid-layers {layers} must divide the number of workers ({world_size}); "
                "e.g. --grid-layers 2 with 8 workers (0: chosen)"
            )
    units = world_size // layers
    rows = config.grid_rows or most_square(units)
    if units % rows:
        raise ConfigError(
            f"--grid-rows {rows} must divide the number of workers ({world_size})"
            + (f" over --grid-layers ({units})" if layers > 1 else "")
            + "; e.g. --grid-rows 2 with 4 workers (0: the most square grid)"
        )
    return BlockGrid(world_size, rows, units // rows, layers)


@dataclasses.dataclass
class GridGroups:
    """Communicators of one rank. 1D/1.5D: ``row`` over its ``c`` replicas, ``col`` over its grid
    column (one member per row group; the group rank of member ``(R, k)`` is ``R``). 2D/3D: ``row``
    over its grid row's units and ``col`` over its grid column's (its layer's rank of each, the
    group rank of unit ``(r, k)`` being ``k``, resp. ``r``), ``fiber`` over its unit's ranks."""

    row: Communicator
    col: Communicator
    fiber: Communicator = dataclasses.field(default_factory=lambda: Communicator(0, 1, None))


def make_grid_groups(
    grid: Grid | BlockGrid, rank: int, world_comm: Communicator, timeout_s: float
) -> GridGroups:
    """Create the grid's process groups (every rank must call this, in the same order).

    A group of one rank is this rank alone and a group of every rank in order is the world
    (``world_comm``): neither creates a process group (1D creates none).
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    mine: dict[str, Communicator] = {}
    for name, groups in grid.group_ranks().items():
        for ranks in groups:
            if len(ranks) == 1:
                comm = Communicator(0, 1, None)
            elif ranks == list(range(world_comm.world_size)):
                comm = world_comm
            else:  # new_group is itself collective over the world: every rank creates every group
                group = dist.new_group(ranks, timeout=timeout, backend="gloo")
                comm = Communicator(ranks.index(rank), len(ranks), group) if rank in ranks else None
            if rank in ranks:
                mine[name] = comm
    return GridGroups(**mine)


@dataclasses.dataclass
class FullGraphShard:
    """The rows one rank holds (its row group) and their in-edges in extended local ids.

    Attributes:
        book: the partition book (part ``p`` is held by rank ``p`` and its row-group replicas).
        row_start, row_end: held new ids (the row group's range).
        own_start, own_end: this rank's own part (its loss and metrics cover these rows only).
        indptr: int64 ``[n + 1]`` CSR over held rows.
        indices: int64 ``[e]`` sources in extended local ids.
        halo: int64 ``[h]`` sorted global ids of the non-held sources.
        halo_counts: int64 ``[P]`` halo rows owned by each part (contiguous segments of ``halo``).
        degree: int64 ``[n + h]`` graph in-degree (self-loops excluded) of every extended column:
            what GCN normalisation needs of remote sources.
        x: float32 ``[n, F]`` held features (None: the graph has none); y: int64 ``[n]`` held
            labels (empty: none), float32 ``[n, W]`` for the other ``label_kind`` s.
        splits: ``{"train"|"val"|"test": int64 indices}`` of own-part nodes, in held-row ids.
        num_classes: label classes.
        label_kind: what a label is (:mod:`shardgnn.nn.targets`).
        orig_ids: int64 ``[n]`` the held rows' ids in the original graph (they key hashed dropout,
            so every partitioning drops what one process drops).
    """

    book: PartitionBook
    row_start: int
    row_end: int
    own_start: int
    own_end: int
    indptr: np.ndarray
    indices: np.ndarray
    halo: np.ndarray
    halo_counts: np.ndarray
    degree: np.ndarray
    x: np.ndarray | None
    y: np.ndarray
    splits: dict[str, np.ndarray]
    num_classes: int
    orig_ids: np.ndarray
    label_kind: str = "class"
    edge_attr: np.ndarray | None = None
    """float32 ``[e, D]`` features of the held rows' in-edges, in ``indices`` order (a row group
    of one part, whose edges carry features), else None"""
    edge_part: np.ndarray | None = None
    """int32 ``[e]`` the part computing each in-edge, in ``indices`` order (a row group of one
    part of a vertex-cut partition: :mod:`shardgnn.partition.vertexcut`), else None"""
    x_parts: tuple[np.ndarray, ...] = ()
    """the held rows' features as stored, part after part (memory maps, not read; empty: none):
    what :func:`input_rows` reads a chunk at a time"""

    @property
    def num_features(self) -> int:
        """The feature width (0: no features)."""
        if self.x is not None:
            return int(self.x.shape[1])
        return int(self.x_parts[0].shape[1]) if self.x_parts else 0

    @property
    def num_rows(self) -> int:
        return self.row_end - self.row_start

    def halo_segment(self, part: int) -> slice:
        """Positions in ``halo`` of the rows owned by ``part``."""
        offsets = np.concatenate([[0], np.cumsum(self.halo_counts)])
        return slice(int(offsets[part]), int(offsets[part + 1]))

    def halo_requests(
        self, parts: list[int], positions: np.ndarray | None = None
    ) -> list[torch.Tensor]:
        """Per part of ``parts``: the halo rows it owns (all, or those at the sorted halo
        ``positions``: one chunk's), in its own (part-local) ids, in halo order: the requests
        of a :class:`~shardgnn.fullgraph.rows.RowPlan` that fetches them from their owners."""
        requests = []
        for q in parts:
            segment = self.halo_segment(q)
            if positions is not None:
                lo, hi = np.searchsorted(positions, [segment.start, segment.stop])
                segment = positions[lo:hi]
            first = int(self.book.part_range(q)[0])
            requests.append(torch.from_numpy(self.halo[segment] - first))
        return requests


def _mapped(x: np.ndarray) -> np.ndarray:
    """A part's memory-mapped features, read at random rows (no read-ahead: a chunk's halo rows
    are scattered over the file)."""
    advise_random(x)
    return x


def _non_loop_degree(indptr: np.ndarray, indices: np.ndarray, first_id: int) -> np.ndarray:
    """In-degree of every row ignoring self-loops (row ``i`` is global id ``first_id + i``)."""
    rows = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64) + first_id, np.diff(indptr))
    loops = np.bincount(rows[indices == rows] - first_id, minlength=indptr.shape[0] - 1)
    return np.diff(indptr) - loops


def load_shard(
    partitions: str | Path,
    grid: Grid,
    rank: int,
    world_comm: Communicator,
    stage: str = "setup",
    *,
    need_features: bool = True,
    need_labels: bool = True,
    data: bool = True,
    mapped_features: bool = False,
    read_features: bool = True,
) -> FullGraphShard:
    """Load this rank's row group from a partition directory and fetch its halo's degrees.

    Collective over ``world_comm`` (one all-to-all pair: halo ids to owners, degrees back).

    Without ``need_features``/``need_labels`` a part may lack them (``x`` is then None, ``y``
    empty): link-prediction inference with learnable rows needs neither. Without ``data`` none
    are read: the adjacency of the row group only (what 2D's SpMM multiplies). With
    ``mapped_features`` a row group of one part keeps its float32 features as the read-only memory
    map of the partition file (layer-wise inference reads them chunk by chunk). Without
    ``read_features`` ``x`` is None and the features are left in the part files
    (:attr:`FullGraphShard.x_parts`) for :func:`input_rows`.

    Raises:
        ConfigError: the directory's part count differs from the number of ranks, or it has no
            features/labels that are needed.
    """
    pset = read_partitions(partitions, verify=False)
    if pset.num_parts != grid.world_size:
        raise ConfigError(
            f"{partitions} holds {pset.num_parts} parts but {grid.world_size} workers run; "
            f"use --workers {pset.num_parts} or re-partition with --parts {grid.world_size}"
        )
    book = pset.book
    row = grid.row_of(rank)
    parts = [pset.load_part(p, mmap=True, verify=False) for p in grid.row_parts(row)]
    if need_features and any(part.x is None for part in parts):
        raise ConfigError(f"{partitions} has no features; partition a dataset with features")
    if need_labels and any(part.y is None for part in parts):
        raise ConfigError(f"{partitions} has no labels; partition a labelled dataset")
    has_x = data and all(part.x is not None for part in parts)
    has_y = data and all(part.y is not None for part in parts)
    row_start, row_end = parts[0].start, parts[-1].end
    n = row_end - row_start
    indptr = np.zeros(n + 1, dtype=np.int64)
    offset = 0
    for part in parts:
        indptr[part.start - row_start + 1 : part.end - row_start + 1] = (
            np.asarray(part.indptr[1:]) + offset
        )
        offset += part.num_edges
    global_src = np.concatenate([np.asarray(part.indices, dtype=np.int64) for part in parts])
    held = (global_src >= row_start) & (global_src < row_end)
    halo = np.unique(global_src[~held])
    indices = np.empty_like(global_src)
    indices[held] = global_src[held] - row_start
    indices[~held] = n + np.searchsorted(halo, global_src[~held])
    halo_counts = np.bincount(book.owner(halo), minlength=grid.world_size).astype(np.int64)
    own_degree = _non_loop_degree(indptr, global_src, row_start)

    # Degrees of the halo from its owners: requests are the halo's per-owner segments.
    own_part = next(part for part in parts if part.part == rank)
    requests = list(torch.split(torch.from_numpy(halo), halo_counts.tolist()))
    incoming = world_comm.all_to_all(requests, stage)
    local_of_own = own_part.start - row_start
    replies = [
        torch.from_numpy(own_degree[(ids.numpy() - own_part.start) + local_of_own])
        for ids in incoming
    ]
    # collective: always called
    halo_degree = torch.cat(world_comm.all_to_all(replies, stage)).numpy()

    splits = {}
    for split in ("train", "val", "test"):
        local = getattr(own_part, f"{split}_idx")
        splits[split] = (
            np.zeros(0, np.int64)
            if local is None
            else np.asarray(local, dtype=np.int64) + local_of_own
        )
    return FullGraphShard(
        book=book,
        row_start=int(row_start),
        row_end=int(row_end),
        own_start=int(own_part.start),
        own_end=int(own_part.end),
        indptr=indptr,
        indices=indices,
        halo=halo,
        halo_counts=halo_counts,
        degree=np.concatenate([own_degree, halo_degree]).astype(np.int64),
        x=(
            None
            if not has_x or not read_features
            else _mapped(parts[0].x)
            if mapped_features and len(parts) == 1 and parts[0].x.dtype == np.float32
            else np.concatenate([np.asarray(part.x, dtype=np.float32) for part in parts])
        ),
        y=(
            np.concatenate(
                [np.asarray(part.y, dtype=label_dtype(own_part.label_kind)) for part in parts]
            )
            if has_y
            else np.zeros(0, dtype=np.int64)
        ),
        splits=splits,
        num_classes=int(own_part.num_classes),
        label_kind=own_part.label_kind,
        orig_ids=np.asarray(pset.orig_ids[row_start:row_end], dtype=np.int64),
        # a one-part row group's edge rows, in its CSR order (mapped, not read until used)
        edge_attr=parts[0].edge_attr if len(parts) == 1 else None,
        edge_part=(
            np.asarray(parts[0].edge_part)
            if len(parts) == 1 and parts[0].edge_part is not None
            else None
        ),
        x_parts=tuple(part.x for part in parts) if has_x else (),
    )


def input_rows(
    x_parts: Sequence[np.ndarray],
    feature_norm: str,
    comm: Communicator,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """This rank's input rows: its held rows' features as stored, part after part
    (:attr:`FullGraphShard.x_parts`, as :func:`load_shard` leaves them without
    ``read_features``), normalised by ``feature_norm`` row by row and read a chunk at a time: a
    coalesced sparse COO tensor where the whole graph's rows are mostly zero
    (:func:`~shardgnn.graph.features.stored_sparse` of the graph's counts: one choice for every
    rank, the one one process makes, whatever the density of this rank's own rows), else dense
    float32. Sparse rows are built from the chunks, never from the dense matrix (read whole, then
    normalised into a second copy, before this). A collective (stage ``setup``)."""
    counts = torch.tensor(
        [
            float(nonzero_count(x_parts, chunk_rows)),
            float(sum(math.prod(part.shape) for part in x_parts)),
        ],
        dtype=torch.float64,
    )
    comm.all_reduce(counts, "setup")
    if stored_sparse(int(counts[0]), int(counts[1])):
        return csr_rows(x_parts, feature_norm, chunk_rows).to_sparse()
    return torch.from_numpy(dense_rows(x_parts, feature_norm, chunk_rows))


def shard_from_graph(graph) -> FullGraphShard:
    """The whole of an in-memory :class:`~shardgnn.graph.csr.Graph` as the shard of a single rank
    (no partition directory needed): single-process layer-wise inference runs on it."""
    n = graph.num_nodes
    indptr = np.asarray(graph.indptr, dtype=np.int64)
    indices = np.asarray(graph.indices, dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    splits = {
        s: (
            empty
            if getattr(graph, f"{s}_idx") is None
            else np.asarray(getattr(graph, f"{s}_idx"), np.int64)
        )
        for s in ("train", "val", "test")
    }
    return FullGraphShard(
        book=PartitionBook(np.array([0, n], dtype=np.int64)),
        row_start=0,
        row_end=n,
        own_start=0,
        own_end=n,
        indptr=indptr,
        indices=indices,
        halo=empty,
        halo_counts=np.zeros(1, dtype=np.int64),
        degree=_non_loop_degree(indptr, indices, 0),
        x=graph.x,
        x_parts=() if graph.x is None else (graph.x,),
        y=empty if graph.y is None else np.asarray(graph.y, dtype=label_dtype(graph.label_kind)),
        splits=splits,
        num_classes=int(graph.num_classes),
        label_kind=graph.label_kind,
        orig_ids=np.arange(n, dtype=np.int64),
    )
