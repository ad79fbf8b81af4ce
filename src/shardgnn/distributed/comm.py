"""The communicator: every byte that crosses ranks passes through here, counted per named stage.

Stages are free-form names (``sample``, ``fetch``, ``allreduce``, ``spmm``...). For each stage the
communicator counts bytes sent to and received from *other* ranks (a rank's own slice of an
all-to-all never leaves the process and is not counted) and the wall time spent in collectives.

All collectives of one communicator go through one process group and must be called in the same
order on every rank (the usual collective contract). Every call has the group's timeout, so a
dead peer turns into an exception on the survivors instead of a hang.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from typing import Sequence

import torch
import torch.distributed as dist


@dataclasses.dataclass
class CommStats:
    """Per-stage totals of one rank (or summed over ranks after :meth:`Communicator.reduce_stats`)."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    time_s: float = 0.0
    calls: int = 0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


class Communicator:
    """Collectives with byte and time accounting.

    Args:
        rank, world_size: this rank's position in ``group``.
        group: the process group to use (``None``: the default group).
    """

    def __init__(self, rank: int, world_size: int, group: dist.ProcessGroup | None = None):
        self.rank, self.world_size, self.group = rank, world_size, group
        self.stats: dict[str, CommStats] = defaultdict(CommStats)

    # ------------------------------------------------------------------ accounting
    def record(self, stage: str, sent: int, recv: int, seconds: float) -> None:
        st = self.stats[stage]
        st.bytes_sent += int(sent)
        st.bytes_recv += int(recv)
        st.time_s += seconds
        st.calls += 1

    def reset(self) -> dict[str, CommStats]:
        out = dict(self.stats)
        self.stats = defaultdict(CommStats)
        return out

    # ------------------------------------------------------------------ collectives
    def all_to_all(self, send: Sequence[torch.Tensor], stage: str) -> list[torch.Tensor]:
        """Send ``send[p]`` to rank ``p``; return what every rank sent here (``out[p]`` from ``p``).

        Tensors may differ in length along dim 0 but share dtype and trailing shape. Two
        collectives run: the row counts first (so every receiver can size its buffers), then the
        payload in one ``all_to_all_single``.
        """
        assert len(send) == self.world_size, "one tensor per rank"
        start = time.perf_counter()
        template = send[0]
        row_shape = tuple(template.shape[1:])
        if self.world_size == 1:
            self.record(stage, 0, 0, time.perf_counter() - start)
            return [send[0]]
        send_counts = torch.tensor([t.shape[0] for t in send], dtype=torch.int64)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=self.group)
        payload = torch.cat([t.reshape(t.shape[0], *row_shape) for t in send]) if send else template
        received = torch.empty((int(recv_counts.sum()), *row_shape), dtype=template.dtype, device=template.device)
        dist.all_to_all_single(received, payload.contiguous(), output_split_sizes=recv_counts.tolist(),
                               input_split_sizes=send_counts.tolist(), group=self.group)
        row_bytes = template.element_size() * math.prod(row_shape)
        others = [p for p in range(self.world_size) if p != self.rank]
        sent = sum(int(send_counts[p]) for p in others) * row_bytes
        recv = sum(int(recv_counts[p]) for p in others) * row_bytes
        # The 2 x 8-byte count exchange per peer is metadata; it is counted too, to be honest.
        self.record(stage, sent + 8 * len(others), recv + 8 * len(others), time.perf_counter() - start)
        return list(torch.split(received, recv_counts.tolist()))

    def all_reduce(self, tensor: torch.Tensor, stage: str, op: dist.ReduceOp = dist.ReduceOp.SUM) -> torch.Tensor:
        """In-place all-reduce. Counted as a ring all-reduce: each rank sends and receives
        ``2 (P - 1) / P`` times the tensor's bytes."""
        start = time.perf_counter()
        if self.world_size > 1:
            dist.all_reduce(tensor, op=op, group=self.group)
        volume = 2 * (self.world_size - 1) * tensor.numel() * tensor.element_size() // self.world_size
        self.record(stage, volume, volume, time.perf_counter() - start)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int, stage: str) -> torch.Tensor:
        """In-place broadcast from ``src`` (counted as ``src`` sending the tensor to every peer)."""
        start = time.perf_counter()
        if self.world_size > 1:
            dist.broadcast(tensor, src=src, group=self.group)
        nbytes = tensor.numel() * tensor.element_size()
        sent = nbytes * (self.world_size - 1) if self.rank == src else 0
        self.record(stage, sent, 0 if self.rank == src else nbytes, time.perf_counter() - start)
        return tensor

    def reduce_stats(self, stats: dict[str, CommStats] | None = None) -> dict[str, CommStats]:
        """Sum per-stage stats over all ranks (every rank gets the totals). Reporting traffic is
        not part of any stage.

        Every collective is issued by all ranks with the same stage name, so every rank holds the
        same set of stage names.
        """
        stats = dict(self.stats if stats is None else stats)
        names = sorted(stats)
        values = torch.tensor([[stats.get(n, CommStats()).bytes_sent, stats.get(n, CommStats()).bytes_recv,
                                stats.get(n, CommStats()).time_s, stats.get(n, CommStats()).calls] for n in names],
                              dtype=torch.float64).reshape(len(names), 4)
        if self.world_size > 1 and names:
            dist.all_reduce(values, group=self.group)
        return {n: CommStats(int(v[0]), int(v[1]), float(v[2]), int(v[3])) for n, v in zip(names, values.tolist())}
