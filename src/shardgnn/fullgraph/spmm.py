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

import numpy as np
import torch

from shardgnn.distributed.codec import AlignedResiduals, RowCodec
from shardgnn.distributed.comm import PendingExchange
from shardgnn.fullgraph.config import FullGraphConfig
from shardgnn.fullgraph.shard import FullGraphShard, Grid, GridGroups
from shardgnn.nn.message_graph import MessageGraph, _csr, transpose_csr


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
    ):
        self.shard, self.grid, self.rank, self.groups = shard, grid, rank, groups
        self.config, self.codec, self.device, self.stage = config, codec, device, stage
        self.residuals = AlignedResiduals() if error_feedback and codec is not None else None
        self.num_rows = shard.num_rows
        n = shard.num_rows
        self._graph = MessageGraph(
            torch.from_numpy(shard.indptr).to(device),
            torch.from_numpy(shard.indices).to(device),
            n + len(shard.halo),
            torch.from_numpy(shard.degree).to(device),
        )
        self._adj: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._layers: list[DistLayerGraph] = []
        book = shard.book
        if config.spmm == "1d-sparse":
            self._setup_sparse_plan()
        else:
            col = grid.col_of(rank)
            self._col_parts = grid.col_parts(col)
            if grid.replication > 1:  # 1.5D: this replica multiplies only the columns of its parts
                self._column_mask = np.isin(
                    np.concatenate(
                        [
                            book.owner(np.arange(shard.row_start, shard.row_end)),
                            book.owner(shard.halo),
                        ]
                    ),
                    self._col_parts,
                )
            # The rows of each remote part this rank's columns need, in that part's local ids.
            self._needed = {
                q: torch.from_numpy(shard.halo[shard.halo_segment(q)] - int(book.part_range(q)[0]))
                for q in self._col_parts
                if grid.row_of(q) != grid.row_of(rank)
            }

    # ------------------------------------------------------------------ set-up
    def _setup_sparse_plan(self) -> None:
        """Tell every owner which of its rows this rank needs; learn which rows each peer needs
        (counted under ``setup``: ids once, not per layer)."""
        comm, shard = self.groups.col, self.shard
        requests = list(torch.split(torch.from_numpy(shard.halo), shard.halo_counts.tolist()))
        incoming = comm.all_to_all(requests, "setup")
        self._send_rows = [(ids - shard.own_start).to(self.device) for ids in incoming]
        self._send_counts = [int(ids.shape[0]) for ids in incoming]
        self._recv_counts = [int(c) for c in shard.halo_counts]

    def adjacency(self, norm: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, A^T)`` normalised, in extended local columns, restricted to this rank's columns
        (1.5D), as CSR tensors (cached)."""
        if self.grid.replication == 1:  # every column: the local graph's own cached matrices
            return self._graph.adjacency(norm), self._graph.adjacency_t(norm)
        if norm not in self._adj:
            # Normalise over the whole row (graph degrees), then keep this replica's columns.
            indptr, indices, values = self._graph.edge_values(norm)
            keep = torch.from_numpy(self._column_mask).to(self.device)[indices]
            rows = torch.repeat_interleave(
                torch.arange(self.num_rows, device=self.device), indptr.diff()
            )
            indptr = torch.zeros_like(indptr)
            indptr[1:] = torch.cumsum(torch.bincount(rows[keep], minlength=self.num_rows), 0)
            adj = _csr(indptr, indices[keep], values[keep], (self.num_rows, self._graph.num_src))
            self._adj[norm] = (adj, transpose_csr(adj))
        return self._adj[norm]

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

    @property
    def residual_bytes(self) -> int:
        """Memory of the error-feedback residuals (0 without)."""
        return 0 if self.residuals is None else self.residuals.nbytes

    def _feedback(self, *key) -> AlignedResiduals | None:
        """The residuals of gradient stream ``key`` (None: no error feedback)."""
        return None if self.residuals is None else self.residuals.stream(*key)

    # ------------------------------------------------------------------ 1d-sparse exchanges
    def start_halo(self, h_NF: torch.Tensor) -> PendingExchange:
        send = [h_NF[rows] for rows in self._send_rows]
        return self.groups.col.all_to_all_async(
            send, self.stage, recv_counts=self._recv_counts, codec=self.codec
        )

    def finish_halo(self, pending: PendingExchange, width: int) -> torch.Tensor:
        pieces = pending.wait()
        own = self.groups.col.rank
        rows = [p for i, p in enumerate(pieces) if i != own]
        if not rows:
            return torch.zeros((0, width), device=self.device)
        return torch.cat(rows).to(self.device)

    def start_halo_grad(self, g_halo_HF: torch.Tensor, layer: int) -> PendingExchange:
        """``layer``: whose gradient stream this is (its sends are error-compensated)."""
        send = list(torch.split(g_halo_HF, self._recv_counts))
        return self.groups.col.all_to_all_async(
            send,
            self.stage,
            recv_counts=self._send_counts,
            codec=self.codec,
            feedback=self._feedback(layer, "halo_grad"),
        )

    def finish_halo_grad(self, pending: PendingExchange, g_NF: torch.Tensor) -> None:
        for p, rows in enumerate(pending.wait()):
            if p != self.groups.col.rank and rows.shape[0]:
                g_NF.index_add_(0, self._send_rows[p], rows.to(g_NF.device, g_NF.dtype))

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
        self.step = 0
        self.halo_queue: collections.deque = collections.deque()
        self.grad_queue: collections.deque = collections.deque()
        self._edge_index: torch.Tensor | None = None

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
        fn = _SparseSpMM if self.full.config.spmm == "1d-sparse" else _BroadcastSpMM
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
        return full.finish_halo(full.start_halo(h_NF), h_NF.shape[1]).to(h_NF.dtype)

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
        width = h_NF.shape[1]
        pending = full.start_halo(h_NF)
        if training and full.config.staleness:
            pending = _take(layer.halo_queue, layer.step, full.config.staleness, pending)
        halo_HF = full.finish_halo(pending, width).to(h_NF.dtype)
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
