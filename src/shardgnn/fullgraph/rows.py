"""Rows of any nodes, from their owners, differentiable: what scoring node *pairs* in full-graph
training needs (a pair's endpoints and its negatives lie in any part).

A :class:`RowGather` is a plan for one set of nodes (one all-to-all of ids when built): owners
learn which of their rows each rank wants. ``gather(h_NF)`` then moves those rows (one
all-to-all) and its backward pass returns their gradients to the owners (the same all-to-all
reversed), which add them into the gradient of their own rows.
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import PartitionBook


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
        self.comm, self.stage = comm, stage
        owners = book.owner(nodes)
        # Sorted ids of contiguous parts: each owner's requests are one contiguous run, so the
        # concatenation of what the owners send back is already in the order of ``nodes``.
        self.recv_counts = np.bincount(owners, minlength=book.num_parts).tolist()
        local = nodes - book.boundaries[owners]
        requests = [torch.from_numpy(local[owners == p]) for p in range(book.num_parts)]
        wanted = comm.all_to_all(requests, stage)
        self.send_rows = [r.to(torch.int64) + own_offset for r in wanted]

    @property
    def num_rows(self) -> int:
        return int(sum(self.recv_counts))

    def gather(self, h_NF: torch.Tensor) -> torch.Tensor:
        """``[len(nodes), F]``: the rows of ``nodes`` from their owners' ``h_NF`` (collective;
        differentiable)."""
        return _GatherRows.apply(h_NF, self)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h_NF: torch.Tensor, plan: RowGather) -> torch.Tensor:
        ctx.plan, ctx.num_rows = plan, h_NF.shape[0]
        send = [h_NF[idx.to(h_NF.device)] for idx in plan.send_rows]
        received = plan.comm.all_to_all(send, plan.stage, recv_counts=plan.recv_counts)
        return torch.cat(received) if received else h_NF[:0]

    @staticmethod
    def backward(ctx, g_UF: torch.Tensor):
        plan = ctx.plan
        # The transpose of the gather: every owner receives the gradients of the rows it sent,
        # in the order it sent them, and adds them up (a row may have gone to several ranks).
        pieces = list(torch.split(g_UF.contiguous(), plan.recv_counts))
        returned = plan.comm.all_to_all(
            pieces, plan.stage, recv_counts=[len(r) for r in plan.send_rows]
        )
        g_NF = g_UF.new_zeros((ctx.num_rows, g_UF.shape[1]))
        for rows, grad in zip(plan.send_rows, returned):
            g_NF.index_add_(0, rows.to(g_NF.device), grad)
        return g_NF, None
