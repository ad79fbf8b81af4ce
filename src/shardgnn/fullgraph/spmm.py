"""Distributed SpMM ``Z = A_hat @ H`` over row blocks, as autograd functions (CAGNET, Sylvie).

Each rank holds the rows ``A_r`` of its row group (see :mod:`shardgnn.fullgraph.shard`) in
extended local columns ``[held rows | halo]``; a layer's product is ``Z_r = A_r @ [H_r ; H_halo]``.
The variants differ only in how the halo rows arrive and how their gradients go back:

* ``1d-sparse`` (sparsity-aware 1D, ICPP'24): the halo plan is exchanged once; per layer every
  rank sends each peer exactly the rows it needs (one all-to-all) and, in the backward pass,
  the peers send the gradients of those rows back (the transpose: the same all-to-all reversed).
  Bytes per layer = the partition's communication volume x width x bytes per value.
* ``1d`` (CAGNET's baseline): every rank's whole block is broadcast in turn; the backward pass
  sends every owner a dense gradient block (the transpose of a broadcast is a reduce; it runs as
  an all-to-all so the low-bit codec can compress it).
* ``1.5d`` (replication ``c``): ``1d`` inside each grid column (``P/c`` ranks), each rank
  multiplying the columns of the parts ``q % c == k``, then an all-reduce of the partial
  products over the ``c`` replicas. ``c = 1`` is exactly ``1d``.
* ``2d`` (a ``R x C`` grid, nothing replicated): rank ``(r, k)`` holds its own part's rows and
  multiplies the adjacency of grid row ``r``'s parts restricted to the columns of grid column
  ``k``'s parts. *Expand*: the rows those columns need come from the ``R`` ranks of grid column
  ``k`` (sparse: only rows with an edge there); *fold*: the partial products of the grid row's
  rows go to their owners among the ``C`` ranks of grid row ``r`` (sparse: only rows with an
  edge in the block), which add them up. Backward: the fold's transpose (each owner's output
  gradient to the ranks that produced partial rows of it), the local ``A^T``, the expand's
  transpose (halo gradients to their owners). A row travels to at most ``R - 1`` ranks and
  receives from at most ``C - 1``, where 1D sends it to up to ``P - 1``: on dense or poorly
  partitioned graphs the bytes fall as ``1/sqrt(P)`` (2D graph partitioning, Boman et al. SC'13;
  CAGNET's 2D SUMMA moves adjacency blocks as well and splits the features, which this keeps
  whole so every dense layer stays local).
* ``3d`` (a ``R x C x L`` grid): ``2d`` over an ``R x C`` grid of *units* of ``L`` ranks, each
  rank of a unit multiplying the unit's block for ``1 / L`` of the feature columns (Split-3D's
  third dimension): one all-to-all inside the unit turns its rows into column slices before the
  product and one turns them back after (backward: the same, reversed). Rows cross at most
  ``R - 1 + C - 1`` units at ``1 / L`` of the width, plus the two slice exchanges; the unit's
  adjacency block is held by each of its ``L`` ranks.

* ``vertex-cut``: every node keeps its owner (rows, features, labels), and every edge whose ends
  lie in different parts is computed by one of the two: by the destination's owner from the
  source's row sent there (*pull*, as ``1d-sparse`` does for every such edge), or by the
  source's owner, which sends its share of the destination's sum (*push*). Per ordered pair of
  parts the rows that cross are a minimum vertex cover of the pair's crossing edges
  (:mod:`shardgnn.partition.cover`): a hub with many edges into a part travels once as a row, a
  node with many in-edges from a part receives one partial sum, and no pair sends more rows
  than ``1d-sparse``. On a partition that places its edges (``--method hdrf`` or ``2d-hash``,
  :mod:`shardgnn.partition.vertexcut`) every edge is computed where it was placed instead, from
  the source rows that part pulls, into partial sums it pushes to the destinations' owners (its
  masters): the cover is the case whose edges stay on one of their ends' parts. Forward: the
  pulled rows (one all-to-all), the local product over own and pulled rows, the pushed partial
  sums to their owners, who add them (a second); backward: the owners' output gradients of the
  pushed rows back to the ranks that pushed them, the local ``A^T`` (of both parts of the
  product), the pulled rows' gradients to their owners.

Replicated tensors (1.5D) follow one convention: values are equal on the ``c`` replicas and
gradients are *partial* (the true gradient is their sum). The forward all-reduce's adjoint is
an all-reduce of the gradients; each rank's loss covers only its own part's rows; weight
gradients are summed over all ranks.

Low-bit codec: halo rows and halo-row gradients travel quantised (``codec``); a rank's own rows
never do. With error feedback (``--error-feedback``) each gradient send adds the quantisation
error the same stream left at the previous step (the sender's residual) before quantising;
forward rows stay unbiased stochastic rounding (:class:`DistFullGraph`).
Bounded staleness (``1d-sparse`` only): with ``staleness = s`` the training step ``t`` of a layer
starts the exchange of step ``t`` and computes with the halo rows (and applies the halo
gradients) of step ``max(0, t - s)``, so the exchange overlaps computation; ``s = 0`` is
synchronous.
"""

from __future__ import annotations

import collections
import functools
import json

import numpy as np
import torch

from shardgnn.distributed.codec import AlignedResiduals, RowCodec
from shardgnn.distributed.comm import PendingExchange
from shardgnn.fullgraph.config import GRID_VARIANTS, FullGraphConfig
from shardgnn.fullgraph.dependencies import (
    DependencyCosts,
    DependencySets,
    fetch_in_edges,
    fetch_nonzeros,
    gather_sparse_rows,
    select_dependencies,
)
from shardgnn.fullgraph.rows import RowGather, RowPlan, owner_requests
from shardgnn.fullgraph.shard import FullGraphShard, Grid, GridGroups
from shardgnn.nn.message_graph import NORMS, MessageGraph, _csr, transpose_csr
from shardgnn.partition.cover import pulled_crossing_edges
from shardgnn.sampling.tensor_ops import entry_rows


class DistFullGraph:
    """The distributed normalised adjacency of one rank; ``layer(i)`` gives the graph object that
    layer ``i`` of a :class:`~shardgnn.nn.models.GNN` runs on.

    Args:
        shard: this rank's rows.
        grid: the process grid (``replication`` > 1 only for ``1.5d``).
        groups: row/column communicators (:func:`make_grid_groups`); ``1d-sparse`` uses ``col``
            (the world when ``c = 1``).
        config: variant, bits, staleness.
        codec: the low-bit codec (None: float32).
        stage: the communication stage every exchange is counted under.
        error_feedback: with a codec, each training step's *gradient* exchange adds the
            quantisation error of a row's previous send to its next one (residuals kept by the
            sender, per layer and per peer: the plan sends the same rows every step). Forward
            halo rows are sent with plain (unbiased) stochastic rounding: they change every step
            and feed the next layer at once, so a carried error only adds variance there, where
            the optimiser sums gradients over steps, which is what error feedback corrects
            (1-bit SGD; BENCHMARKS.md section 4 measures both).
    """

    def __init__(
        self,
        shard: FullGraphShard,
        grid: Grid,
        rank: int,
        groups: GridGroups,
        config: FullGraphConfig,
        codec: RowCodec | None,
        device: torch.device,
        stage: str = "spmm",
        error_feedback: bool = False,
        block: FullGraphShard | None = None,
    ):
        self.shard, self.grid, self.rank, self.groups = shard, grid, rank, groups
        self.config, self.codec, self.device, self.stage = config, codec, device, stage
        self.residuals = AlignedResiduals() if error_feedback and codec is not None else None
        self._edge_rows: torch.Tensor | None = None  # edge_rows(), read when first asked
        self.num_rows = shard.num_rows
        # The rows this rank multiplies: its own (row group) rows, or 2D's grid-row block.
        assert (block is not None) == (config.spmm in GRID_VARIANTS), "a grid row's block"
        self.block = block = block if block is not None else shard
        self._graph = MessageGraph(
            torch.from_numpy(block.indptr).to(device),
            torch.from_numpy(block.indices).to(device),
            block.num_rows + len(block.halo),
            torch.from_numpy(block.degree).to(device),
        )
        self._adj: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._layers: list[DistLayerGraph] = []
        self._column_map: np.ndarray | None = None  # extended column -> multiplied column (or -1)
        self._num_columns: int | None = None  # the multiplied columns, where renumbered
        # --dependencies cache/hybrid (set_dependencies): the rows each layer computes here, its
        # block over them and the exchange of the rest
        self.deps: DependencySets | None = None
        self._dep_layers: list[tuple[MessageGraph, RowPlan | None]] = []
        self._dep_keys: torch.Tensor | None = None
        book = shard.book
        if config.spmm == "1d-sparse":
            comm = groups.col  # the world: 1d-sparse runs without replication
            self.halo_plan = RowPlan(comm, shard.halo_requests(list(range(comm.world_size))),
                                     "setup", device)  # fmt: skip
        elif config.spmm in GRID_VARIANTS:
            self._setup_grid()
        elif config.spmm == "vertex-cut":
            self._setup_cut()
        else:
            col_parts = self._col_parts = grid.col_parts(grid.col_of(rank))
            if grid.replication > 1:  # 1.5D: this replica multiplies only the columns of its parts
                owners = np.concatenate(
                    [book.owner(np.arange(shard.row_start, shard.row_end)), book.owner(shard.halo)]
                )
                self._column_map = np.where(
                    np.isin(owners, col_parts), np.arange(owners.shape[0]), -1
                )
            # The rows of each remote part this rank's columns need, in that part's local ids.
            remote = [q for q in col_parts if grid.row_of(q) != grid.row_of(rank)]
            self._needed = dict(zip(remote, shard.halo_requests(remote)))

    # ------------------------------------------------------------------ set-up
    def _unit_range(self, unit: int) -> tuple[int, int]:
        """Global ids ``[start, end)`` of a 2D/3D unit's rows (its parts are contiguous)."""
        parts = self.grid.unit_parts(unit)
        return int(self.block.book.part_range(parts[0])[0]), int(
            self.block.book.part_range(parts[-1])[1]
        )

    def _unit_halo(self, unit: int) -> slice:
        """Positions in the block's halo of a unit's rows."""
        parts = self.grid.unit_parts(unit)
        first, last = self.block.halo_segment(parts[0]), self.block.halo_segment(parts[-1])
        return slice(first.start, last.stop)

    def _setup_grid(self) -> None:
        """2D/3D: number the columns this rank multiplies (its unit's rows, then the halo rows of
        the other units of its grid column, unit after unit) and plan the expand (grid column)
        and the fold (grid row) exchanges of its layer (ids counted under ``setup``, once)."""
        block, grid, rank = self.block, self.grid, self.rank
        unit = grid.unit_of(rank)
        unit_start, unit_end = self._unit_range(unit)
        n_block = block.num_rows
        self._unit_lo = unit_lo = unit_start - block.row_start
        self._unit_rows = n_unit = unit_end - unit_start
        col_units = grid.col_units(grid.col_of(rank))
        remote = [u for u in col_units if u != unit]
        halo_pos = np.concatenate(
            [np.arange(self._unit_halo(u).start, self._unit_halo(u).stop) for u in remote]
            + [np.zeros(0, np.int64)]
        )
        column_map = np.full(n_block + len(block.halo), -1, dtype=np.int64)
        column_map[unit_lo : unit_lo + n_unit] = np.arange(n_unit)
        column_map[n_block + halo_pos] = n_unit + np.arange(halo_pos.shape[0])
        self._column_map = column_map
        self._num_columns = n_unit + int(halo_pos.shape[0])
        # Expand: grid column member r (group rank r) holds unit col_units[r]'s rows.
        requests = [
            torch.from_numpy(block.halo[self._unit_halo(u)] - self._unit_range(u)[0])
            if u != unit
            else torch.zeros(0, dtype=torch.int64)
            for u in col_units
        ]
        self.expand = RowPlan(self.groups.col, requests, "setup", self.device)
        # Fold: the grid row's other units' rows with an edge into this rank's columns; their
        # holders (grid row member k holds unit row_units[k]) add up the partial products.
        dst = np.repeat(np.arange(n_block, dtype=np.int64), np.diff(block.indptr))
        touched = np.zeros(n_block, dtype=bool)
        touched[dst[column_map[block.indices] >= 0]] = True
        requests, fold_rows = [], []
        for u in grid.row_units(grid.row_of(rank)):
            lo, hi = (v - block.row_start for v in self._unit_range(u))
            rows = np.flatnonzero(touched[lo:hi]) if u != unit else np.zeros(0, np.int64)
            requests.append(torch.from_numpy(rows))
            fold_rows.append(rows + lo)
        self.fold = RowPlan(self.groups.row, requests, "setup", self.device)
        self._fold_rows = torch.from_numpy(np.concatenate(fold_rows)).to(self.device)
        # 3D: the rows of each part of the unit (fiber member l holds part unit * L + l)
        self._fiber_rows = [
            int(np.diff(block.book.part_range(q))[0]) for q in grid.unit_parts(unit)
        ]

    def _setup_cut(self) -> None:
        """Vertex-cut: the part computing each in-edge of this rank's rows (the partition's
        placement where it has one, :mod:`shardgnn.partition.vertexcut`; else the cover of its
        node partition, which every rank decides alike,
        :func:`~shardgnn.partition.cover.pulled_crossing_edges`); every edge another part
        computes sent there with its normalised values, one per norm, and those this rank
        computes for others received; then the rows it pulls (the sources of the edges it
        computes that it does not own), the partial sums it pushes and both its blocks over its
        own and pulled rows (collective; counted under ``setup``, once)."""
        shard, comm, device, rank = self.shard, self.groups.col, self.device, self.rank
        n, parts, book = shard.num_rows, comm.world_size, shard.book
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(shard.indptr))
        ext = np.asarray(shard.indices, dtype=np.int64)
        remote = ext >= n
        src = ext + shard.row_start
        src[remote] = shard.halo[ext[remote] - n]
        computed_by = np.full(ext.shape[0], rank, dtype=np.int64)
        if shard.edge_part is not None:
            computed_by[:] = shard.edge_part
        else:
            crossing = np.flatnonzero(remote)
            src_owner = book.owner(src[crossing]).astype(np.int64)
            pulled = pulled_crossing_edges(
                src[crossing],
                dst[crossing] + shard.row_start,
                src_owner,
                np.full(crossing.shape[0], rank),
                parts,
            )
            computed_by[crossing[~pulled]] = src_owner[~pulled]
        # Each norm lists the edges its own way (gcn drops self-loops and adds one per row):
        # an entry is found by (row, column); every copy of a repeated edge shares its part,
        # and self-loops are the owner's (they need no row from elsewhere).
        width = n + len(shard.halo)
        keys, first = np.unique(dst * width + ext, return_index=True)
        part_of_key = computed_by[first]
        lists = []
        for norm in NORMS:
            indptr, indices, values = (t.cpu().numpy() for t in self._graph.edge_values(norm))
            rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            indices = indices.astype(np.int64)
            part = np.full(indices.shape[0], rank, dtype=np.int64)
            if keys.shape[0]:
                wanted = rows * width + indices
                at = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
                found = keys[at] == wanted
                part[found] = part_of_key[at[found]]
            part[indices == rows] = rank
            global_src = indices + shard.row_start
            halo_columns = indices >= n
            global_src[halo_columns] = shard.halo[indices[halo_columns] - n]
            lists.append((rows, global_src, values, part))
        # The pushed edges in one order (by destination, then source: repeated edges, alike in
        # every norm, pair up whichever way); per part computing them, their destinations (this
        # rank's rows), sources (global ids) and a value per norm.
        sent = []
        for rows, global_src, _, part in lists:
            away = np.flatnonzero(part != rank)
            sent.append(away[np.lexsort((global_src[away], rows[away]))])
        assert len({s.shape[0] for s in sent}) == 1, "every norm pushes the same edges"
        rows, global_src, _, part = lists[0]
        push_dst, push_src, push_part = rows[sent[0]], global_src[sent[0]], part[sent[0]]
        values_EN = np.stack([v[s] for (_, _, v, _), s in zip(lists, sent)], 1).astype(np.float32)
        targets_of, edges, edge_values = [], [], []
        for q in range(parts):
            mine = np.flatnonzero(push_part == q)
            targets, target_of = np.unique(push_dst[mine], return_inverse=True)
            targets_of.append(torch.from_numpy(targets))  # held rows are the own part's (P x 1)
            pair = np.stack([target_of.astype(np.int64), push_src[mine]], 1)
            edges.append(torch.from_numpy(pair))
            edge_values.append(torch.from_numpy(values_EN[mine]))
        # what this rank pushes: each peer's destinations, and the edges into them it computes
        wanted = comm.all_to_all(targets_of, "setup")
        pairs = comm.all_to_all(edges, "setup")
        pair_values = comm.all_to_all(edge_values, "setup")
        self.push = RowPlan(comm, wanted, "setup", device)
        offsets = np.concatenate([[0], np.cumsum([int(w.shape[0]) for w in wanted])])
        pushed_row = np.concatenate([p[:, 0].numpy() + offsets[q] for q, p in enumerate(pairs)])
        pushed_src = np.concatenate([p[:, 1].numpy() for p in pairs])
        # the rows to pull: the sources of every edge computed here that another part owns
        rows, global_src, _, part = lists[0]
        here = part == rank
        needed = np.concatenate([global_src[here], pushed_src])
        own = (needed >= shard.row_start) & (needed < shard.row_end)
        pulled_ids = np.unique(needed[~own])
        _, requests = owner_requests(book, pulled_ids, parts)
        self.pull = RowPlan(comm, requests, "setup", device)
        self._num_columns = num_columns = n + int(pulled_ids.shape[0])

        def column_of(global_ids: np.ndarray) -> torch.Tensor:
            """Columns of the product: own rows, then the pulled rows."""
            column = n + np.searchsorted(pulled_ids, global_ids)
            mine = (global_ids >= shard.row_start) & (global_ids < shard.row_end)
            column[mine] = global_ids[mine] - shard.row_start
            return torch.from_numpy(column)

        for norm, (rows, global_src, values, part) in zip(NORMS, lists):  # computed here
            here = part == rank
            indptr = torch.zeros(n + 1, dtype=torch.int64)
            indptr[1:] = torch.cumsum(torch.from_numpy(np.bincount(rows[here], minlength=n)), 0)
            adj = _csr(
                indptr, column_of(global_src[here]), torch.from_numpy(values[here]),
                (n, num_columns),
            ).to(device)  # fmt: skip
            self._adj[norm] = (adj, transpose_csr(adj))
        received_EN = torch.cat(pair_values)  # the edges this rank computes, a value per norm
        order = np.lexsort((pushed_src, pushed_row))
        pushed_rows = int(offsets[-1])
        indptr = torch.zeros(pushed_rows + 1, dtype=torch.int64)
        indptr[1:] = torch.cumsum(
            torch.bincount(torch.from_numpy(pushed_row), minlength=pushed_rows), 0
        )
        column_t = column_of(pushed_src[order])
        self._push_adj = {}
        for k, norm in enumerate(NORMS):
            values_k = received_EN[torch.from_numpy(order), k].contiguous()
            adj = _csr(indptr, column_t, values_k, (pushed_rows, num_columns)).to(device)
            self._push_adj[norm] = (adj, transpose_csr(adj))

    def set_dependencies(
        self,
        num_layers: int,
        costs: DependencyCosts | None,
        feature_nonzeros: np.ndarray | None = None,
    ) -> None:
        """``--dependencies cache`` or ``hybrid`` (``1d-sparse``): decide which remote rows each of
        the model's ``num_layers`` layers computes here and which it receives
        (:mod:`shardgnn.fullgraph.dependencies`; ``costs``: hybrid's; ``feature_nonzeros``: each
        own row's, where ``costs`` prices sparse feature rows by theirs), then build each layer's
        block and the plan of its exchange. Collective; before :meth:`layer`."""
        shard, comm, book = self.shard, self.groups.col, self.shard.book
        n = shard.num_rows
        sources = shard.indices + shard.row_start
        halo = shard.indices >= n
        sources[halo] = shard.halo[shard.indices[halo] - n]
        serve = functools.partial(
            fetch_in_edges, comm, book, shard.indptr, sources, shard.degree[shard.indices],
            shard.degree[:n],
        )  # fmt: skip
        nonzeros = None
        if feature_nonzeros is not None:
            nonzeros = functools.partial(fetch_nonzeros, comm, book, feature_nonzeros)
        own = np.arange(shard.row_start, shard.row_end, dtype=np.int64)
        self.deps = deps = select_dependencies(
            shard.indptr, sources, own, np.concatenate([own, shard.halo]), shard.degree,
            num_layers, self.config.dependencies, serve, costs, nonzeros,
        )  # fmt: skip
        device = self.device
        # a layer no rank receives rows at runs no exchange at all (every rank knows it)
        received = torch.tensor([float(len(r)) for r in deps.received], dtype=torch.float64)
        comm.all_reduce(received, "setup")
        for layer in range(num_layers):
            indptr, columns, column_ids = deps.layer_csr(layer)
            graph = MessageGraph(
                torch.from_numpy(indptr).to(device),
                torch.from_numpy(columns).to(device),
                len(column_ids),
                torch.from_numpy(deps.degree_of(column_ids)).to(device),
            )
            plan = None
            if received[layer] > 0:
                _, requests = owner_requests(book, deps.received[layer], comm.world_size)
                plan = RowPlan(comm, requests, "setup", device)
            self._dep_layers.append((graph, plan))
        keys = torch.from_numpy(np.array(shard.orig_ids, dtype=np.int64)).unsqueeze(1)
        self._dep_keys = self.dependency_rows(keys).squeeze(1)

    def dependency_rows(self, own_NF: torch.Tensor) -> torch.Tensor:
        """``[local rows, F]``: this rank's own rows ``own_NF`` (its features, say), then the
        owners' rows of every remote node a layer computes here, in local order (collective;
        counted under ``setup``). Sparse COO rows travel as their non-zeros and come back
        sparse (bag-of-words features: a few dozen of thousands of columns a row)."""
        assert self.deps is not None, "set_dependencies first"
        remote = self.deps.nodes[self.num_rows :]
        if own_NF.is_sparse:
            return gather_sparse_rows(self.groups.col, self.shard.book, own_NF, remote)
        order = np.argsort(remote, kind="stable")
        gather = RowGather(remote[order], self.shard.book, self.groups.col, 0, "setup")
        with torch.no_grad():
            rows = gather.gather(own_NF)
        out = own_NF.new_empty((len(remote), own_NF.shape[1]))
        out[torch.from_numpy(order)] = rows.to(out.device, out.dtype)
        return torch.cat([own_NF, out])

    def push_adjacency(self, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Vertex-cut: ``(B, B^T)``, the pushed edges this rank computes: rows the partial sums
        it sends (peer after peer, in the push plan's order), columns its own rows."""
        return self._push_adj[norm]

    def to_columns(self, h_NF: torch.Tensor, feedback=None) -> torch.Tensor:
        """3D: ``[own rows, F]`` -> ``[unit rows, ceil(F / L)]``: this rank's slice of the
        feature columns (zero-padded to ``L`` equal slices) for every row of its unit (one
        all-to-all over the fiber; 2D: unchanged)."""
        fiber = self.groups.fiber
        if fiber.world_size == 1:
            return h_NF
        width = -(-h_NF.shape[1] // fiber.world_size)
        padded = torch.nn.functional.pad(h_NF, (0, width * fiber.world_size - h_NF.shape[1]))
        send = [
            padded[:, i * width : (i + 1) * width].contiguous() for i in range(fiber.world_size)
        ]
        pieces = fiber.all_to_all(
            send, self.stage, recv_counts=self._fiber_rows, codec=self.codec, feedback=feedback
        )
        return torch.cat(pieces).to(h_NF.device, h_NF.dtype)

    def to_rows(self, z_UW: torch.Tensor, width: int, feedback=None) -> torch.Tensor:
        """3D: the inverse of :meth:`to_columns`: ``[unit rows, W]`` slices -> ``[own rows,
        width]`` (2D: unchanged)."""
        fiber = self.groups.fiber
        if fiber.world_size == 1:
            return z_UW
        send = list(torch.split(z_UW.contiguous(), self._fiber_rows))
        own = self._fiber_rows[fiber.rank]
        pieces = fiber.all_to_all(
            send,
            self.stage,
            recv_counts=[own] * fiber.world_size,
            codec=self.codec,
            feedback=feedback,
        )
        return torch.cat([p.to(z_UW.device, z_UW.dtype) for p in pieces], dim=1)[:, :width]

    def adjacency(self, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, A^T)`` normalised over whole rows (graph degrees), restricted to the columns this
        rank multiplies (1.5D: its replica's parts; 2D: its grid column's, renumbered), as CSR
        tensors (cached). Rows: the held rows (2D: the grid row's block)."""
        if norm in self._adj:  # built at set-up (vertex-cut) or before
            return self._adj[norm]
        if self._column_map is None:  # every column: the local graph's own cached matrices
            return self._graph.adjacency(norm), self._graph.adjacency_t(norm)
        indptr, indices, values = self._graph.edge_values(norm)
        column = torch.from_numpy(self._column_map).to(self.device)[indices]
        keep = column >= 0
        rows = self._graph.num_dst
        dst = entry_rows(indptr, len(indices))
        indptr = torch.zeros_like(indptr)
        indptr[1:] = torch.cumsum(torch.bincount(dst[keep], minlength=rows), 0)
        num_columns = self._graph.num_src if self._num_columns is None else self._num_columns
        adj = _csr(indptr, column[keep], values[keep], (rows, num_columns))
        self._adj[norm] = (adj, transpose_csr(adj))
        return self._adj[norm]

    def edge_rows(self) -> torch.Tensor | None:
        """This rank's edge features on the device (read from the part file once, when a layer
        first asks), or None without any."""
        if self.shard.edge_attr is None:
            return None
        if self._edge_rows is None:
            rows = np.ascontiguousarray(self.shard.edge_attr, dtype=np.float32)
            self._edge_rows = torch.from_numpy(rows).to(self.device)
        return self._edge_rows

    def layer(self, index: int) -> "DistLayerGraph":
        layer = DistLayerGraph(self, index)
        self._layers.append(layer)
        return layer

    def drain(self) -> None:
        """Wait for every exchange still in flight (staleness keeps some running between steps)."""
        for layer in self._layers:
            for queue in (layer.halo_queue, layer.grad_queue):
                while queue:
                    queue.popleft()[1].wait()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """What an exact resume needs beyond the weights: the error-feedback residuals (one block
        per stream and peer) and, with ``staleness``, every layer's step count and its exchanges
        in flight (waited for here: their received rows, in step order). Empty without either."""
        state = {}
        if self.residuals is not None:
            for key, block in self.residuals.blocks.items():
                state["residual." + json.dumps(list(key))] = block.detach().cpu().clone()
        if self.config.staleness:
            for layer in self._layers:
                state[f"layer.{layer.index}.step"] = torch.tensor(layer.step)
                for name, queue in (("halo", layer.halo_queue), ("grad", layer.grad_queue)):
                    for j, (step, pending) in enumerate(queue):
                        entry = f"layer.{layer.index}.{name}.{j}."
                        state[entry + "step"] = torch.tensor(step)
                        for peer, rows in enumerate(pending.wait()):
                            state[entry + f"rows.{peer}"] = rows.detach().cpu().clone()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict` (the layers built, before the first step)."""
        if self.residuals is not None:
            self.residuals.blocks = {
                tuple(json.loads(name[len("residual.") :])): block.to(self.device)
                for name, block in state.items()
                if name.startswith("residual.")
            }
        if self.config.staleness:
            for layer in self._layers:
                prefix = f"layer.{layer.index}."
                if prefix + "step" not in state:
                    continue  # older checkpoints: the first steps run synchronously
                layer.step = int(state[prefix + "step"])
                for name, queue in (("halo", layer.halo_queue), ("grad", layer.grad_queue)):
                    queue.clear()
                    j = 0
                    while f"{prefix}{name}.{j}.step" in state:
                        entry = f"{prefix}{name}.{j}."
                        rows, peer = [], 0
                        while entry + f"rows.{peer}" in state:
                            rows.append(state[entry + f"rows.{peer}"].to(self.device))
                            peer += 1
                        queue.append((int(state[entry + "step"]), PendingExchange.done(rows)))
                        j += 1

    @property
    def residual_bytes(self) -> int:
        """Memory of the error-feedback residuals (0 without)."""
        return 0 if self.residuals is None else self.residuals.nbytes

    def _feedback(self, *key) -> AlignedResiduals | None:
        """The residuals of gradient stream ``key`` (None: no error feedback)."""
        return None if self.residuals is None else self.residuals.stream(*key)

    # ------------------------------------------------------------------ 1d-sparse exchanges
    def start_halo(self, h_NF: torch.Tensor) -> PendingExchange:
        return self.halo_plan.start(h_NF, self.stage, self.codec)

    def finish_halo(self, pending: PendingExchange, like: torch.Tensor) -> torch.Tensor:
        return self.halo_plan.finish(pending, like)

    def start_halo_grad(self, g_halo_HF: torch.Tensor, layer: int) -> PendingExchange:
        """``layer``: whose gradient stream this is (its sends are error-compensated)."""
        return self.halo_plan.start_back(
            g_halo_HF, self.stage, self.codec, self._feedback(layer, "halo_grad")
        )

    def finish_halo_grad(self, pending: PendingExchange, g_NF: torch.Tensor) -> None:
        self.halo_plan.finish_back(pending, g_NF)

    # ------------------------------------------------------------------ 1d / 1.5d exchanges
    def broadcast_halo(self, h_NF: torch.Tensor) -> torch.Tensor:
        """Every part of this grid column is broadcast by its row group's member here; keep the
        rows this rank's columns need."""
        shard, book, col = self.shard, self.shard.book, self.groups.col
        width = h_NF.shape[1]
        halo_HF = torch.zeros((len(shard.halo), width), dtype=h_NF.dtype, device=self.device)
        my_row = self.grid.row_of(self.rank)
        for q in self._col_parts:  # the same ascending order on every member of the column
            start, end = (int(v) for v in book.part_range(q))
            src = self.grid.row_of(q)
            if src == my_row:
                col.broadcast(
                    h_NF[start - shard.row_start : end - shard.row_start].contiguous(),
                    src,
                    self.stage,
                    codec=self.codec,
                )
                continue
            block = col.broadcast(
                torch.empty((end - start, width), dtype=h_NF.dtype, device=self.device),
                src,
                self.stage,
                codec=self.codec,
            )
            halo_HF[shard.halo_segment(q)] = block[self._needed[q].to(self.device)]
        return halo_HF

    def reduce_halo_grad(self, g_halo_HF: torch.Tensor, g_NF: torch.Tensor, layer: int) -> None:
        """Send every owner in this grid column a dense gradient block of its part (zeros where this
        rank has no edge) and add the blocks received for the parts held here."""
        shard, book, col = self.shard, self.shard.book, self.groups.col
        width = g_NF.shape[1]
        my_row = self.grid.row_of(self.rank)
        send: list[list[torch.Tensor]] = [[] for _ in range(col.world_size)]
        mine: list[int] = []
        for q in self._col_parts:
            src = self.grid.row_of(q)
            start, end = (int(v) for v in book.part_range(q))
            if src == my_row:
                mine.append(q)
                continue
            block = torch.zeros((end - start, width), dtype=g_NF.dtype, device=self.device)
            block[self._needed[q].to(self.device)] = g_halo_HF[shard.halo_segment(q)]
            send[src].append(block)
        mine_rows = sum(int(book.part_range(q)[1] - book.part_range(q)[0]) for q in mine)
        tensors = [torch.cat(blocks) if blocks else g_NF.new_zeros((0, width)) for blocks in send]
        recv_counts = [0 if r == my_row else mine_rows for r in range(col.world_size)]
        received = col.all_to_all(
            tensors,
            self.stage,
            recv_counts=recv_counts,
            codec=self.codec,
            feedback=self._feedback(layer, "reduce"),
        )
        for r, rows in enumerate(received):
            if r == my_row or rows.shape[0] == 0:
                continue
            offset = 0
            for q in mine:
                start, end = (int(v) for v in book.part_range(q))
                g_NF[start - shard.row_start : end - shard.row_start] += rows[
                    offset : offset + end - start
                ].to(g_NF.device, g_NF.dtype)
                offset += end - start


class DistLayerGraph:
    """What one GNN layer runs on: ``num_src == num_dst`` = held rows, ``node_keys_S`` = their
    original ids (hashed dropout's keys), ``aggregate(h, norm)`` = the distributed product. Holds
    the layer's staleness queues."""

    def __init__(self, full: DistFullGraph, index: int):
        self.full, self.index = full, index
        self.num_src = self.num_dst = full.num_rows
        self.node_keys_S = torch.from_numpy(np.array(full.shard.orig_ids, dtype=np.int64))
        if full.deps is not None:  # a block: the rows computed here from a longer prefix
            self.num_dst, self.num_src = full.deps.dst_rows[index], full.deps.src_rows[index]
            self.node_keys_S = full._dep_keys[: self.num_src]
        self.step = 0
        self.halo_queue: collections.deque = collections.deque()
        self.grad_queue: collections.deque = collections.deque()
        self._edge_index: torch.Tensor | None = None

    @property
    def edge_attr_ED(self) -> torch.Tensor | None:
        """The features of :meth:`edge_index`'s edges (the held rows' in-edges, in the part's CSR
        order), on the device; None when the edges carry none."""
        return self.full.edge_rows()

    def source_rows(self, h_NF: torch.Tensor) -> torch.Tensor:
        """The rows an attention layer scores edges over: the held rows, then the halo rows
        (``1d-sparse``: each from its owner, one all-to-all; their gradients go back to the
        owners in the backward pass, the same all-to-all reversed)."""
        return torch.cat([h_NF, _HaloRows.apply(h_NF, self)])

    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` (src, dst) of every in-edge of the held rows: src in extended local ids
        (held rows, then halo), dst in held-row ids; what :meth:`source_rows` lines up with."""
        device = self.full.device
        if self._edge_index is None or self._edge_index.device != device:
            shard = self.full.shard
            degree = np.diff(np.asarray(shard.indptr))
            dst = np.repeat(np.arange(self.num_dst, dtype=np.int64), degree)
            src = np.asarray(shard.indices, dtype=np.int64)
            self._edge_index = torch.from_numpy(np.stack([src, dst])).to(device)
        return self._edge_index

    def aggregate(self, h_NF: torch.Tensor, norm: str) -> torch.Tensor:
        training = torch.is_grad_enabled() and h_NF.requires_grad
        if self.full.deps is not None:
            return _DependencySpMM.apply(h_NF, self, norm)
        fn = _SPMM_OF.get(self.full.config.spmm, _BroadcastSpMM)
        out = fn.apply(h_NF, self, norm, training)
        if training:
            self.step += 1
        return out


def _take(
    queue: collections.deque, step: int, staleness: int, started: PendingExchange
) -> PendingExchange:
    """Queue the exchange started at ``step``; return the one of step ``max(0, step - staleness)``,
    dropping older ones (each is waited for first, so exchanges complete in order)."""
    target = max(0, step - staleness)
    queue.append((step, started))
    while queue[0][0] < target:
        queue.popleft()[1].wait()
    assert queue[0][0] == target
    return queue[0][1]


class _HaloRows(torch.autograd.Function):
    """The halo rows of ``h_NF`` from their owners (``1d-sparse`` plan, synchronous); backward:
    their gradients back to the owners, added into the owners' rows."""

    @staticmethod
    def forward(ctx, h_NF, layer: DistLayerGraph):
        full = layer.full
        ctx.layer = layer
        return full.finish_halo(full.start_halo(h_NF), h_NF)

    @staticmethod
    def backward(ctx, g_HF):
        layer, full = ctx.layer, ctx.layer.full
        g_h = torch.zeros(full.num_rows, g_HF.shape[1], dtype=g_HF.dtype, device=g_HF.device)
        full.finish_halo_grad(full.start_halo_grad(g_HF.contiguous(), layer.index), g_h)
        return g_h, None


class _SparseSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_NF, layer: DistLayerGraph, norm: str, training: bool):
        full = layer.full
        pending = full.start_halo(h_NF)
        if training and full.config.staleness:
            pending = _take(layer.halo_queue, layer.step, full.config.staleness, pending)
        halo_HF = full.finish_halo(pending, h_NF)
        adj, _ = full.adjacency(norm)
        ctx.layer, ctx.norm, ctx.step = layer, norm, layer.step
        return adj @ torch.cat([h_NF, halo_HF])

    @staticmethod
    def backward(ctx, g_NF):
        layer, full = ctx.layer, ctx.layer.full
        _, adj_t = full.adjacency(ctx.norm)
        g_ext = adj_t @ g_NF.contiguous()
        n = full.num_rows
        g_h = g_ext[:n].clone()
        pending = full.start_halo_grad(g_ext[n:].contiguous(), layer.index)
        if full.config.staleness:
            pending = _take(layer.grad_queue, ctx.step, full.config.staleness, pending)
        full.finish_halo_grad(pending, g_h)
        return g_h, None, None, None


class _DependencySpMM(torch.autograd.Function):
    """``--dependencies cache/hybrid``: the layer's block over the rows computed here and the
    rows received (one exchange; none when every dependency is cached); backward: the
    transposed block, the received rows' gradients back to their owners."""

    @staticmethod
    def forward(ctx, h_SF, layer: DistLayerGraph, norm: str):
        full = layer.full
        graph, plan = full._dep_layers[layer.index]
        ctx.layer, ctx.norm = layer, norm
        if plan is None:
            return graph.adjacency(norm) @ h_SF
        received_MF = plan.finish(plan.start(h_SF, full.stage, full.codec), h_SF)
        return graph.adjacency(norm) @ torch.cat([h_SF, received_MF])

    @staticmethod
    def backward(ctx, g_DF):
        layer, full = ctx.layer, ctx.layer.full
        graph, plan = full._dep_layers[layer.index]
        g_ext = graph.adjacency_t(ctx.norm) @ g_DF.contiguous()
        if plan is None:
            return g_ext, None, None
        g_SF = g_ext[: layer.num_src].clone()
        feedback = full._feedback(layer.index, "halo_grad")
        pending = plan.start_back(g_ext[layer.num_src :].contiguous(), full.stage, full.codec,
                                  feedback)  # fmt: skip
        plan.finish_back(pending, g_SF)
        return g_SF, None, None


class _BroadcastSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_NF, layer: DistLayerGraph, norm: str, training: bool):
        full = layer.full
        halo_HF = full.broadcast_halo(h_NF)
        adj, _ = full.adjacency(norm)
        z_NF = adj @ torch.cat([h_NF, halo_HF])
        # 1.5D: the c replicas each multiplied a subset of the columns; sum the partial products.
        if full.groups.row.world_size > 1:
            full.groups.row.all_reduce(z_NF, full.stage)
        ctx.layer, ctx.norm = layer, norm
        return z_NF

    @staticmethod
    def backward(ctx, g_NF):
        full = ctx.layer.full
        g_NF = g_NF.contiguous()
        # partial gradients of a replicated output -> the true one
        if full.groups.row.world_size > 1:
            g_NF = full.groups.row.all_reduce(g_NF.clone(), full.stage)
        _, adj_t = full.adjacency(ctx.norm)
        g_ext = adj_t @ g_NF
        n = full.num_rows
        g_h = g_ext[:n].clone()
        full.reduce_halo_grad(g_ext[n:], g_h, ctx.layer.index)
        return g_h, None, None, None


class _GridSpMM(torch.autograd.Function):
    """2D/3D: (3D: rows to column slices over the fiber) expand (grid column), the block's
    product, fold (grid row) (3D: column slices back to rows); backward the transposes in
    reverse order."""

    @staticmethod
    def forward(ctx, h_NF, layer: DistLayerGraph, norm: str, training: bool):
        full = layer.full
        h_UW = full.to_columns(h_NF)
        halo_HW = full.expand.finish(full.expand.start(h_UW, full.stage, full.codec), h_UW)
        adj, _ = full.adjacency(norm)
        partial_BW = adj @ torch.cat([h_UW, halo_HW])
        lo = full._unit_lo
        z_UW = partial_BW[lo : lo + full._unit_rows].clone()
        # the grid row's other units' partial rows to their holders, who add them up
        pending = full.fold.start_back(partial_BW[full._fold_rows], full.stage, full.codec)
        full.fold.finish_back(pending, z_UW)
        ctx.layer, ctx.norm, ctx.width = layer, norm, h_NF.shape[1]
        return full.to_rows(z_UW, h_NF.shape[1])

    @staticmethod
    def backward(ctx, g_NF):
        layer, full = ctx.layer, ctx.layer.full
        g_UW = full.to_columns(g_NF.contiguous(), full._feedback(layer.index, "columns"))
        # the fold's transpose: every rank that produced partial rows of ours gets their gradient
        pending = full.fold.start(g_UW, full.stage, full.codec, full._feedback(layer.index, "fold"))
        g_fold = full.fold.finish(pending, g_UW)
        g_BW = g_UW.new_zeros((full.block.num_rows, g_UW.shape[1]))
        lo = full._unit_lo
        g_BW[lo : lo + full._unit_rows] = g_UW
        g_BW[full._fold_rows] = g_fold
        _, adj_t = full.adjacency(ctx.norm)
        g_ext = adj_t @ g_BW
        n = full._unit_rows
        g_h = g_ext[:n].clone()
        # the expand's transpose: halo gradients to their holders
        pending = full.expand.start_back(
            g_ext[n:], full.stage, full.codec, full._feedback(layer.index, "halo_grad")
        )
        full.expand.finish_back(pending, g_h)
        g_NF = full.to_rows(g_h, ctx.width, full._feedback(layer.index, "rows"))
        return g_NF, None, None, None


class _CutSpMM(torch.autograd.Function):
    """Vertex-cut: the pulled rows, the local product over own and pulled rows, the pushed
    partial sums added by their owners; backward the transposes in reverse order."""

    @staticmethod
    def forward(ctx, h_NF, layer: DistLayerGraph, norm: str, training: bool):
        full = layer.full
        pulled_HF = full.pull.finish(full.pull.start(h_NF, full.stage, full.codec), h_NF)
        h_CF = torch.cat([h_NF, pulled_HF])  # the product's columns: own rows, pulled rows
        adj, _ = full.adjacency(norm)
        z_NF = adj @ h_CF
        push, _ = full.push_adjacency(norm)
        pending = full.push.start_back(push @ h_CF, full.stage, full.codec)
        full.push.finish_back(pending, z_NF)
        ctx.layer, ctx.norm = layer, norm
        return z_NF

    @staticmethod
    def backward(ctx, g_NF):
        layer, full = ctx.layer, ctx.layer.full
        g_NF = g_NF.contiguous()
        # the pushed rows' output gradients, from their owners to the ranks that pushed them
        pending = full.push.start(g_NF, full.stage, full.codec, full._feedback(layer.index, "push"))
        g_pushed_RF = full.push.finish(pending, g_NF)
        _, adj_t = full.adjacency(ctx.norm)
        _, push_t = full.push_adjacency(ctx.norm)
        g_CF = adj_t @ g_NF + push_t @ g_pushed_RF
        n = full.num_rows
        g_h = g_CF[:n].clone()
        pending = full.pull.start_back(
            g_CF[n:].contiguous(), full.stage, full.codec, full._feedback(layer.index, "halo_grad")
        )
        full.pull.finish_back(pending, g_h)
        return g_h, None, None, None


_SPMM_OF = {
    "1d-sparse": _SparseSpMM,
    "2d": _GridSpMM,
    "3d": _GridSpMM,
    "vertex-cut": _CutSpMM,
}
"""the autograd function of each variant (the others broadcast: ``1d``, ``1.5d``)"""
