"""Layer-wise distributed inference (DGI): every node's output, layer by layer, with full
neighbourhoods.

Node-wise inference computes each node's L-hop neighbourhood separately, so a node reached by
many seeds is recomputed for each of them (and the neighbourhood explodes with L). Layer-wise
inference computes layer ``l`` once for every node: each rank computes its own rows of layer
``l`` from the layer ``l - 1`` rows of its nodes and of their remote in-neighbours (fetched once
per layer with the sparsity-aware halo plan of :mod:`shardgnn.fullgraph.spmm`), in chunks of
``chunk_rows`` destination rows so the working set is bounded by a chunk and its neighbourhood.
The result equals node-wise full-neighbour inference up to fp32 rounding (tested at 1e-5).
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.fullgraph.rows import RowPlan
from shardgnn.fullgraph.shard import FullGraphShard
from shardgnn.nn.functional import is_sparse, row_slice
from shardgnn.nn.message_graph import MessageGraph, spmm
from shardgnn.nn.models import GNN, DecoupledGNN
from shardgnn.nn.targets import NodeTarget, Reducer


class LayerwiseInference:
    """Runs a trained :class:`GNN` over one rank's rows of the whole graph (collective).

    Args:
        shard: this rank's part (``load_shard`` with a 1D grid).
        rank: this rank; ``comm``: the communicator of the halo exchanges (stage ``infer``).
        chunk_rows: destination rows computed at once (bounds the working memory).
        halo_per_chunk: fetch each chunk's halo rows on their own (one all-to-all per chunk)
            instead of the whole halo once per layer: the rows held at once are bounded by a
            chunk and its neighbourhood, not the halo (an input larger than memory, read from a
            memory map), at the price of moving a row once per chunk that reads it.
    """

    def __init__(
        self,
        shard: FullGraphShard,
        rank: int,
        comm: Communicator,
        *,
        chunk_rows: int = 65536,
        device: torch.device | str = "cpu",
        stage: str = "infer",
        halo_per_chunk: bool = False,
    ):
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows={chunk_rows} must be >= 1")
        assert shard.row_start == shard.own_start and shard.row_end == shard.own_end, "a 1D shard"
        self.shard, self.chunk_rows, self.device = shard, chunk_rows, torch.device(device)
        self.stage = stage
        self.indptr = torch.from_numpy(shard.indptr)
        self.indices = torch.from_numpy(shard.indices)
        self.degree = torch.from_numpy(shard.degree)
        # The halo plan of the sparsity-aware SpMM (the rows each peer needs, once per layer), or
        # with halo_per_chunk one plan per chunk restricted to the rows the chunk's edges reach:
        # every rank builds as many as the largest part has chunks (collective), empty ones past
        # its own rows.
        self.halo_plan, self.chunk_plans = None, []
        if halo_per_chunk:
            chunks = max(1, int(np.ceil(np.diff(shard.book.boundaries).max() / chunk_rows)))
            self.chunk_plans = [
                RowPlan(comm, self._chunk_requests(c * chunk_rows), "setup", self.device)
                for c in range(chunks)
            ]
        else:
            parts = list(range(comm.world_size))
            self.halo_plan = RowPlan(comm, shard.halo_requests(parts), "setup", self.device)

    def _chunk_requests(self, start: int) -> list[torch.Tensor]:
        """Per owner, the halo rows that the chunk beginning at row ``start`` reads (owner-local
        ids, sorted; owner after owner they are the chunk's halo positions in ascending
        order)."""
        n, shard = self.shard.num_rows, self.shard
        end = min(n, start + self.chunk_rows)
        cols = self.indices[int(self.indptr[start]) : int(self.indptr[end])] if start < n else []
        cols = torch.as_tensor(cols, dtype=torch.int64)
        halo_pos = torch.unique(cols[cols >= n]).numpy() - n
        return shard.halo_requests(list(range(len(shard.halo_counts))), halo_pos)

    def _chunk_graph(self, start: int, end: int) -> tuple[MessageGraph, torch.Tensor]:
        """The one-layer block of rows ``start..end`` with full neighbourhoods: its graph and the
        extended-row ids of its sources (the chunk's own rows first)."""
        lo, hi = int(self.indptr[start]), int(self.indptr[end])
        cols = self.indices[lo:hi]
        dst = torch.arange(start, end, dtype=torch.int64)
        others = torch.unique(cols)
        others = others[(others < start) | (others >= end)]
        src_ids = torch.cat([dst, others])
        # Relabel sources to block-local ids: searchsorted over the sorted "others" keeps memory
        # proportional to the chunk (no array over all extended rows).
        in_chunk = (cols >= start) & (cols < end)
        local = torch.where(in_chunk, cols - start, end - start + torch.searchsorted(others, cols))
        graph = MessageGraph(
            (self.indptr[start : end + 1] - lo).to(self.device),
            local.to(self.device),
            src_ids.shape[0],
            self.degree[src_ids].to(self.device),
        )
        return graph, src_ids

    @torch.no_grad()
    def run(self, model: GNN, x_NF: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings, logits)`` of this rank's rows: the input of the last layer (after the
        activation) and the model's output. ``x_NF``: this rank's input features (a tensor over
        a memory-mapped file is read chunk by chunk, never whole), or a sparse COO tensor of
        them (mostly-zero rows: the first layer, which projects first, multiplies their
        non-zeros; a model of :data:`~shardgnn.nn.config.SPARSE_INPUT_MODELS`)."""
        model.eval()
        h = x_NF.to(self.device)  # on the CPU: the same tensor (a memory map stays one)
        if isinstance(model, DecoupledGNN):  # its propagation steps are whole-graph products
            return model.rows_forward(h, lambda z: self._over_chunks(z, _gcn_product))
        embeddings = h
        for i, layer in enumerate(model.layers):
            if i > 0:
                h = self._activate(model.activation, h)
            embeddings = h
            h = self._over_chunks(h, layer)
        if is_sparse(embeddings):  # one layer: its input rows are the embeddings, dense
            embeddings = embeddings.to_dense()
        return embeddings, h

    def _activate(self, activation, h_NF: torch.Tensor) -> torch.Tensor:
        """``activation(h_NF)`` written over ``h_NF`` a chunk at a time: a layer's rows are held
        once, not twice (the input of a layer is its predecessor's output, used by nothing
        else)."""
        for start in range(0, h_NF.shape[0], self.chunk_rows):
            h_NF[start : start + self.chunk_rows] = activation(
                h_NF[start : start + self.chunk_rows]
            )
        return h_NF

    def _rowwise(self, h_NF: torch.Tensor, fn) -> torch.Tensor:
        """``fn`` over this rank's rows, a chunk at a time (``h_NF`` may be a memory map)."""
        n = self.shard.num_rows
        out = None
        for start in range(0, max(n, 1), self.chunk_rows):
            z = fn(row_slice(h_NF, start, start + self.chunk_rows))
            if out is None:
                out = z.new_empty((n, *z.shape[1:]))
            out[start : start + z.shape[0]] = z
        assert out is not None
        return out

    def _over_chunks(self, h_NF: torch.Tensor, layer) -> torch.Tensor:
        """``layer(graph, rows)`` over this rank's rows, chunk by chunk, each with its full
        neighbourhood: the halo rows of ``h_NF`` from their owners, all at once (one all-to-all)
        or, with ``halo_per_chunk``, each chunk's own (one all-to-all per chunk, on every rank).
        ``h_NF`` may be a memory-mapped matrix: only the rows a chunk reads, and those peers
        ask for, are read.

        A layer that projects first (``projects_first``: its first product commutes with the
        aggregation and narrows the rows) has that product applied to this rank's rows once,
        before the exchange: the halo rows then travel at the narrower width (coauthor-physics'
        first GCN layer: 256 columns instead of 8,415), and no source row is multiplied once per
        chunk that reads it. The chunks then run ``layer.post``."""
        n = self.shard.num_rows
        split = getattr(layer, "projects_first", None) is not None and layer.projects_first(h_NF)
        assert split or not is_sparse(h_NF), "sparse input rows are projected before the exchange"
        inputs = h_NF
        if split:
            h_NF = self._rowwise(h_NF, layer.pre)
        # rows travel in fp32 (bf16 activations under --precision bf16 included)
        halo = None
        if self.halo_plan is not None:
            halo = self.halo_plan.finish(
                self.halo_plan.start(h_NF, self.stage, dtype=torch.float32), h_NF[:0]
            )
        out = None
        for c in range(len(self.chunk_plans) or max(1, -(-n // self.chunk_rows))):
            plan = self.chunk_plans[c] if self.chunk_plans else None
            pending = plan.start(h_NF, self.stage, dtype=torch.float32) if plan else None
            start = c * self.chunk_rows
            if start >= n and not (n == 0 and c == 0):
                pending.wait()  # a chunk past this rank's rows: it only serves its peers
                continue
            end = min(n, start + self.chunk_rows)
            graph, src_ids = self._chunk_graph(start, end)
            local = src_ids[src_ids < n].to(h_NF.device)  # the chunk's rows, its other sources
            # One buffer: the local rows, then the halo rows (no concatenations: with wide inputs
            # a chunk's rows are the largest thing inference holds).
            rows = h_NF.new_empty((src_ids.shape[0], *h_NF.shape[1:]))
            k = local.shape[0]
            torch.index_select(h_NF, 0, local, out=rows[:k])
            if plan is not None:
                plan.finish(pending, out=rows[k:])
            else:
                torch.index_select(halo, 0, (src_ids[k:] - n).to(halo.device), out=rows[k:])
            h_out = (
                layer.post(graph, rows, row_slice(inputs, start, end))
                if split
                else layer(graph, rows)
            )
            if out is None:
                out = h_out.new_empty((n, *h_out.shape[1:]))
            out[start:end] = h_out
        return out


def _gcn_product(graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
    """One propagation step of APPNP and SGC on a chunk (GCN's normalisation, graph degrees)."""
    return spmm(graph, h_SF, "gcn")


@torch.no_grad()
def layerwise_metrics(
    engine: LayerwiseInference,
    model: GNN,
    splits,
    target: NodeTarget,
    reducer: Reducer,
    x_NF: torch.Tensor | None = None,
) -> dict[str, tuple[float, dict]]:
    """``target``'s ``(metric, details)`` over each of ``splits`` with full neighbourhoods (one
    inference pass), each rank scoring its own part's nodes; ``reducer`` combines the ranks.
    ``x_NF``: this rank's input rows as :meth:`LayerwiseInference.run` takes them (a sparse
    tensor of mostly-zero rows too); default: the shard's features."""
    shard = engine.shard
    if x_NF is None:
        x_NF = torch.from_numpy(np.ascontiguousarray(shard.x, dtype=np.float32))
    _, logits = engine.run(model, x_NF)
    y = torch.from_numpy(shard.y).to(logits.device)
    results = {}
    for split in splits:
        idx = torch.from_numpy(shard.splits[split]).to(logits.device)
        evaluation = target.evaluation()
        evaluation.add(logits[idx], y[idx])
        results[split] = evaluation.result(reducer)
    return results
