"""Sparse row exchanges of full-graph training, and the rows of any nodes from their owners.

A :class:`RowPlan` is the plan of one sparse exchange (one all-to-all of ids when built): every
rank learns which of its rows each peer wants. ``start``/``finish`` move those rows to the
peers that asked; ``start_back``/``finish_back`` (the transpose) move rows of the received shape
back, each owner adding them into the rows they belong to. The halo rows of the sparsity-aware
SpMM, its gradients, 2D's expand and fold, and :class:`RowGather` are all such plans.

A :class:`RowGather` is a differentiable plan for one set of nodes (a pair's endpoints and its
negatives lie in any part): ``gather(h_NF)`` moves their rows, its backward pass returns the
gradients to the owners.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from shardgnn.distributed.codec import Feedback, RowCodec
from shardgnn.distributed.comm import Communicator, PendingExchange
from shardgnn.partition.book import PartitionBook


def owner_requests(
    book: PartitionBook, nodes: np.ndarray, parts: int
) -> tuple[np.ndarray, list[torch.Tensor]]:
    """``(owners, requests)``: each node's part, and per part the ids (part-local) of the nodes
    it owns, in the order of ``nodes``: what a worker asks each owner for."""
    nodes = np.asarray(nodes, dtype=np.int64)
    owners = book.owner(nodes)
    local = nodes - book.boundaries[owners]
    return owners, [torch.from_numpy(local[owners == p]) for p in range(parts)]


class RowPlan:
    """Which rows of this rank every peer of ``comm`` wants, and how many this rank gets from
    each. Collective when built (every member builds its plans in the same order).

    Args:
        comm: the communicator; peer ``p`` is its group rank ``p``.
        requests: per peer, int64 ids of the peer's rows this rank wants (the peer's own ids).
        stage: the stage the ids are counted under (once: ``setup``).
        device: where the rows to send are indexed.
        offset: added to every requested id (where the owner's rows begin in the tensors it is
            given).
    """

    def __init__(
        self,
        comm: Communicator,
        requests: Sequence[torch.Tensor],
        stage: str,
        device: torch.device | str = "cpu",
        offset: int = 0,
    ):
        assert len(requests) == comm.world_size, "one request per peer"
        self.comm = comm
        self.recv_counts = [int(r.shape[0]) for r in requests]
        wanted = comm.all_to_all([r.to(torch.int64) for r in requests], stage)
        self.send_rows = [(ids + offset).to(device) for ids in wanted]
        self.send_counts = [int(ids.shape[0]) for ids in wanted]

    @property
    def rows_received(self) -> int:
        return sum(self.recv_counts)

    def remote_rows(self, direction: str = "start") -> int:
        """Rows this rank sends to other ranks per exchange (``start``: the requested rows;
        ``back``: the transpose)."""
        counts = self.send_counts if direction == "start" else self.recv_counts
        return sum(c for p, c in enumerate(counts) if p != self.comm.rank)

    def start(
        self,
        h_NF: torch.Tensor,
        stage: str,
        codec: RowCodec | None = None,
        feedback: Feedback | None = None,
        dtype: torch.dtype | None = None,
    ) -> PendingExchange:
        """Send every peer the rows of ``h_NF`` it requested (as ``dtype``: unset, their own;
        only the requested rows are read and converted)."""
        return self.comm.all_to_all_async(
            [h_NF[rows.to(h_NF.device)].to(dtype or h_NF.dtype) for rows in self.send_rows],
            stage,
            recv_counts=self.recv_counts,
            codec=codec,
            feedback=feedback,
        )

    def finish(
        self,
        pending: PendingExchange,
        like: torch.Tensor | None = None,
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[rows_received, F]``: the requested rows, peer after peer, each peer's in the order
        requested: a new tensor as ``like``'s dtype and device, or written into ``out`` (any
        dtype and device) peer by peer, without a concatenated copy."""
        pieces = pending.wait()
        if out is None:
            assert like is not None, "finish needs like or out"
            return torch.cat(pieces).to(like.device, like.dtype)
        at = 0
        for piece in pieces:
            out[at : at + piece.shape[0]].copy_(piece)
            at += piece.shape[0]
        assert at == out.shape[0], "out holds exactly the rows received"
        return out

    def start_back(
        self,
        g_RF: torch.Tensor,
        stage: str,
        codec: RowCodec | None = None,
        feedback: Feedback | None = None,
    ) -> PendingExchange:
        """The transpose: send every peer the rows of ``g_RF`` (``[rows_received, F]``, laid out
        as :meth:`finish` returns) that stand for its rows."""
        return self.comm.all_to_all_async(
            list(torch.split(g_RF.contiguous(), self.recv_counts)),
            stage,
            recv_counts=self.send_counts,
            codec=codec,
            feedback=feedback,
        )

    def finish_back(self, pending: PendingExchange, g_NF: torch.Tensor) -> None:
        """Add what the peers sent back into the rows of ``g_NF`` they stand for (a row sent to
        several peers gets each one's)."""
        for rows, grad in zip(self.send_rows, pending.wait()):
            if grad.shape[0]:
                g_NF.index_add_(0, rows.to(g_NF.device), grad.to(g_NF.device, g_NF.dtype))


class RowGather:
    """The rows of ``nodes`` (sorted unique new ids, any owner) from the owners' blocks.

    Collective when built (every rank builds its plans in the same order).

    Args:
        nodes: sorted unique new ids this rank needs.
        book: the partition book (part ``p`` is owned by rank ``p``).
        comm: the world communicator.
        own_offset: where this rank's own part begins in the blocks passed to :meth:`gather`
            (``own_start - row_start``: with 1.5D replication a rank holds its row group).
        stage: the communication stage the exchanges are counted under.
    """

    def __init__(
        self,
        nodes: np.ndarray,
        book: PartitionBook,
        comm: Communicator,
        own_offset: int,
        stage: str,
    ):
        nodes = np.asarray(nodes, dtype=np.int64)
        assert nodes.ndim == 1 and np.all(nodes[1:] > nodes[:-1]), "nodes must be sorted unique"
        self.stage = stage
        # Sorted ids of contiguous parts: each owner's requests are one contiguous run, so the
        # concatenation of what the owners send back is already in the order of ``nodes``.
        _, requests = owner_requests(book, nodes, book.num_parts)
        self.plan = RowPlan(comm, requests, stage, offset=own_offset)

    @property
    def num_rows(self) -> int:
        return self.plan.rows_received

    def gather(self, h_NF: torch.Tensor) -> torch.Tensor:
        """``[len(nodes), F]``: the rows of ``nodes`` from their owners' ``h_NF`` (collective;
        differentiable)."""
        return _GatherRows.apply(h_NF, self)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_NF: torch.Tensor, gather: RowGather) -> torch.Tensor:
        ctx.plan, ctx.stage, ctx.num_rows = gather.plan, gather.stage, h_NF.shape[0]
        return gather.plan.finish(gather.plan.start(h_NF, gather.stage), h_NF)

    @staticmethod
    def backward(ctx, g_UF: torch.Tensor):
        # The transpose of the gather: every owner receives the gradients of the rows it sent,
        # in the order it sent them, and adds them up (a row may have gone to several ranks).
        g_NF = g_UF.new_zeros((ctx.num_rows, g_UF.shape[1]))
        ctx.plan.finish_back(ctx.plan.start_back(g_UF, ctx.stage), g_NF)
        return g_NF, None
