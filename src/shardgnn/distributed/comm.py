"""The communicator: every byte that crosses ranks passes through here, counted per named stage.

Stages are free-form names (``sample``, ``fetch``, ``allreduce``, ``spmm``...). For each stage the
communicator counts bytes sent to and received from *other* ranks (a rank's own slice of an
all-to-all never leaves the process and is not counted) and the wall time spent in collectives.
Bytes a rank reads straight from the memory of a peer on its own host (no collective) are counted
apart, as ``host_bytes`` (:meth:`Communicator.record_host`): ``bytes_*`` cross hosts, or at least
processes through the backend; ``host_bytes`` never leave the machine.

All collectives of one communicator go through one process group and must be called in the same
order on every rank (the usual collective contract). Every call has the group's timeout, so a
dead peer turns into an exception on the survivors instead of a hang.

Tensors may live on the host or a GPU whatever the group's backend: gloo takes both, and on an
NCCL group (the default group of ``--backend nccl``: gradients, metrics, reports) a host tensor
is copied to this rank's GPU for the collective and the result comes back where the caller's
tensor lives (:meth:`Communicator.on_wire`). The data pipeline's group is gloo, on host tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections import defaultdict
from typing import Sequence

import torch
import torch.distributed as dist

from shardgnn.distributed.codec import Feedback, RowCodec, encode_with


class CollectiveError(RuntimeError):
    """A collective failed: a peer worker died, stalled past the collective timeout, or the network
    broke. The message names this rank and the communication stage; the job cannot continue."""


@contextlib.contextmanager
def collective_guard(stage: str, what: str):
    """Turn a backend failure inside the block into a :class:`CollectiveError` naming the stage."""
    start = time.perf_counter()
    try:
        yield
    except CollectiveError:
        raise
    except RuntimeError as exc:  # DistBackendError, gloo "Connection closed by peer", timeouts
        rank = dist.get_rank() if dist.is_initialized() else "?"
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise CollectiveError(
            f"rank {rank}: the {what} of stage '{stage}' failed after "
            f"{time.perf_counter() - start:.1f} s: a peer worker died or stalled (or the network "
            f"failed), so this worker stops too. Cause: {cause}"
        ) from exc


@dataclasses.dataclass
class CommStats:
    """Per-stage totals of one rank (or summed over ranks after
    :meth:`Communicator.reduce_stats`)."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    time_s: float = 0.0
    calls: int = 0
    host_bytes: int = 0
    """bytes read from same-host peers' memory instead of received"""

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
        self.rank_order_sums = True
        """float sums over 3 or more ranks in rank order (:meth:`all_reduce`); False: the
        backend's ring (faster, its last bits depend on the tensor's layout)"""
        self.stats: dict[str, CommStats] = defaultdict(CommStats)
        self._declared: set[str] = set()
        self._wire: torch.device | None = None

    @property
    def wire_device(self) -> torch.device | None:
        """The device this group's backend needs its tensors on: this rank's GPU under NCCL;
        ``None`` (any: host or GPU) under gloo or in a one-rank communicator."""
        if self._wire is None and self.world_size > 1 and dist.is_initialized():
            if dist.get_backend(self.group) == "nccl":
                self._wire = torch.device("cuda", torch.cuda.current_device())
        return self._wire

    def on_wire(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` where the backend takes it (itself when it is there already)."""
        wire = self.wire_device
        return tensor if wire is None or tensor.device == wire else tensor.to(wire)

    # ------------------------------------------------------------------ accounting
    def declare(self, stage: str) -> None:
        """Report ``stage`` from now on even while this rank moves nothing through it.

        The reports' reductions need the same stage names on every rank. A stage that only runs
        collectives appears on every rank at once, but one served from same-host memory may see
        no call at all on a rank with nothing to read while its peers record bytes."""
        self._declared.add(stage)
        self.stats[stage]  # noqa: B018 - creates the entry

    def record(self, stage: str, sent: int, recv: int, seconds: float) -> None:
        st = self.stats[stage]
        st.bytes_sent += int(sent)
        st.bytes_recv += int(recv)
        st.time_s += seconds
        st.calls += 1

    def record_host(self, stage: str, nbytes: int) -> None:
        """Count ``nbytes`` this rank read from a same-host peer's memory (no collective)."""
        self.stats[stage].host_bytes += int(nbytes)

    def reset(self) -> dict[str, CommStats]:
        out = dict(self.stats)
        self.stats = defaultdict(CommStats)
        for stage in self._declared:
            self.stats[stage]  # noqa: B018 - creates the entry
        return out

    # ------------------------------------------------------------------ collectives
    def all_to_all(
        self,
        send: Sequence[torch.Tensor],
        stage: str,
        *,
        recv_counts: Sequence[int] | None = None,
        codec: RowCodec | None = None,
        feedback: Feedback | None = None,
    ) -> list[torch.Tensor]:
        """Send ``send[p]`` to rank ``p``; return what every rank sent here (``out[p]`` from ``p``).

        Tensors may differ in length along dim 0 but share dtype and trailing shape. Unless the
        caller knows them (``recv_counts``, e.g. from a communication plan built once), the row
        counts are exchanged first so every receiver can size its buffers; the payload then
        moves in one ``all_to_all_single``. With a ``codec`` the rows (2-D float) travel
        quantised and arrive dequantised; a rank's own slice never leaves the process and is
        returned as given. ``feedback``: the senders' residuals (error compensation).
        """
        return self.all_to_all_async(
            send, stage, recv_counts=recv_counts, codec=codec, feedback=feedback
        ).wait()

    def all_to_all_async(
        self,
        send: Sequence[torch.Tensor],
        stage: str,
        *,
        recv_counts: Sequence[int] | None = None,
        codec: RowCodec | None = None,
        feedback: Feedback | None = None,
    ) -> "PendingExchange":
        """:meth:`all_to_all` whose payload is still in flight: ``.wait()`` returns the rows.

        Exchanges of one communicator complete in the order they were started; the bytes are
        counted now, the time spent blocked in ``wait``.
        """
        assert len(send) == self.world_size, "one tensor per rank"
        start = time.perf_counter()
        own = send[self.rank]
        if self.world_size == 1:
            self.record(stage, 0, 0, time.perf_counter() - start)
            return PendingExchange(self, stage, None, [own], None, 0.0)
        width = own.shape[1] if codec is not None else None
        if codec is not None:
            assert all(t.dim() == 2 for t in send), "the codec sends [rows, width] float matrices"
            # One peer after the other: a row sent to two peers carries the first send's
            # quantisation error into the second (error feedback).
            send = [
                encode_with(codec, t, feedback, p) if p != self.rank else codec.encode(t[:0])
                for p, t in enumerate(send)
            ]
        template = send[0]
        row_shape = tuple(template.shape[1:])
        send_counts = torch.tensor([t.shape[0] for t in send], dtype=torch.int64)
        metadata = 0
        if recv_counts is None:
            counts = self.on_wire(send_counts)
            recv = torch.empty_like(counts)
            with collective_guard(stage, "all-to-all of row counts"):
                dist.all_to_all_single(recv, counts, group=self.group)
            recv_counts = recv.tolist()
            # The 8-byte count per peer is metadata; it is counted too, to be honest.
            metadata = 8 * (self.world_size - 1)
        recv_counts = [int(c) for c in recv_counts]
        assert len(recv_counts) == self.world_size, "one receive count per rank"
        # An encoded exchange keeps this rank's own rows off the wire (passed on as they are).
        wire_counts = list(recv_counts)
        if codec is not None:
            wire_counts[self.rank] = 0
        payload = self.on_wire(torch.cat([t.reshape(t.shape[0], *row_shape) for t in send]))
        received = torch.empty(
            (sum(wire_counts), *row_shape), dtype=template.dtype, device=payload.device
        )
        with collective_guard(stage, "all-to-all"):
            work = dist.all_to_all_single(
                received,
                payload.contiguous(),
                output_split_sizes=wire_counts,
                input_split_sizes=send_counts.tolist(),
                group=self.group,
                async_op=True,
            )
        row_bytes = template.element_size() * math.prod(row_shape)
        others = [p for p in range(self.world_size) if p != self.rank]
        sent = sum(int(send_counts[p]) for p in others) * row_bytes
        got = sum(recv_counts[p] for p in others) * row_bytes
        self.record(stage, sent + metadata, got + metadata, 0.0)
        pieces = list(torch.split(received, wire_counts))
        pieces[self.rank] = own
        decode = None if codec is None else (lambda t: codec.decode(t, width))
        if received.device != template.device:  # staged on the GPU for NCCL: back where sent
            origin, decoded = template.device, decode
            decode = (
                (lambda t: t.to(origin)) if decoded is None else (lambda t: decoded(t.to(origin)))
            )
        return PendingExchange(self, stage, work, pieces, decode, time.perf_counter() - start)

    def all_reduce(
        self, tensor: torch.Tensor, stage: str, op: dist.ReduceOp = dist.ReduceOp.SUM
    ) -> torch.Tensor:
        """In-place all-reduce. Counted as a ring all-reduce: each rank sends and receives
        ``2 (P - 1) / P`` times the tensor's bytes.

        A float sum over 3 or more ranks adds the ranks' values in rank order for every element
        (:meth:`_sum_in_rank_order`): a ring all-reduce adds an element's values in an order that
        depends on which of the ring's chunks it falls in, so the same gradients summed in
        another layout (DDP's buckets before and after their first rebuild, as after a resume)
        differed in their last bits. Over 2 ranks every order gives the same sum."""
        start = time.perf_counter()
        if self.world_size > 1:
            wire = self.on_wire(tensor)
            with collective_guard(stage, "all-reduce"):
                if (
                    self.rank_order_sums
                    and self.world_size > 2
                    and op == dist.ReduceOp.SUM
                    and wire.is_floating_point()
                ):
                    wire = self._sum_in_rank_order(wire)
                else:
                    dist.all_reduce(wire, op=op, group=self.group)
            if wire is not tensor:
                tensor.copy_(wire)
        volume = (
            2 * (self.world_size - 1) * tensor.numel() * tensor.element_size() // self.world_size
        )
        self.record(stage, volume, volume, time.perf_counter() - start)
        return tensor

    def _sum_in_rank_order(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over ranks of ``tensor``, each element's values added in rank order (0, 1,
        ..., P - 1): a reduce-scatter by all-to-all (rank ``p`` receives every rank's ``p``-th
        chunk and adds them up in rank order), then an all-gather of the sums; the same bytes
        as a ring all-reduce."""
        world = self.world_size
        flat = tensor.reshape(-1)
        chunk = -(-flat.numel() // world)
        padded = flat.new_zeros(chunk * world)
        padded[: flat.numel()] = flat
        received = torch.empty_like(padded)
        dist.all_to_all_single(received, padded, group=self.group)
        parts = received.view(world, chunk)
        total = parts[0].clone()
        for p in range(1, world):
            total += parts[p]
        gathered = [torch.empty_like(total) for _ in range(world)]
        dist.all_gather(gathered, total, group=self.group)
        return torch.cat(gathered)[: flat.numel()].view_as(tensor)

    def broadcast(
        self,
        tensor: torch.Tensor,
        src: int,
        stage: str,
        *,
        codec: RowCodec | None = None,
        feedback: Feedback | None = None,
    ) -> torch.Tensor:
        """Broadcast from ``src`` (counted as ``src`` sending the tensor to every peer).

        Without a codec ``tensor`` is filled in place on the receivers and returned. With one,
        ``tensor`` (2-D float) travels quantised: ``src`` gets its own tensor back, the others a
        new dequantised tensor of the same shape (their ``tensor`` is only a shape template);
        ``feedback`` (on ``src``): its residuals, under peer ``src``.
        """
        start = time.perf_counter()
        buffer = tensor
        if codec is not None:
            rows, width = tensor.shape
            buffer = (
                encode_with(codec, tensor, feedback, src)
                if self.rank == src
                else torch.empty(
                    (rows, codec.payload_bytes(width)), dtype=torch.uint8, device=tensor.device
                )
            )
        if self.world_size > 1:
            # ``src`` is a rank of this communicator's group; torch wants the global rank.
            root = src if self.group is None else dist.get_global_rank(self.group, src)
            wire = self.on_wire(buffer)
            with collective_guard(stage, "broadcast"):
                dist.broadcast(wire, src=root, group=self.group)
            if wire is not buffer and self.rank != src:
                buffer.copy_(wire)
        nbytes = buffer.numel() * buffer.element_size()
        sent = nbytes * (self.world_size - 1) if self.rank == src else 0
        self.record(stage, sent, 0 if self.rank == src else nbytes, time.perf_counter() - start)
        if codec is None or self.rank == src:
            return tensor
        return codec.decode(buffer, tensor.shape[1]).to(tensor.dtype)

    def reduce_stats(self, stats: dict[str, CommStats] | None = None) -> dict[str, CommStats]:
        """Sum per-stage stats over all ranks (every rank gets the totals). Reporting traffic is
        not part of any stage.

        Every collective is issued by all ranks with the same stage name, so every rank holds the
        same set of stage names.
        """
        stats = dict(self.stats if stats is None else stats)
        names = sorted(stats)
        values = _stats_matrix([stats.get(n, CommStats()) for n in names])
        if self.world_size > 1 and names:
            values = self.on_wire(values)
            with collective_guard("report", "all-reduce"):
                dist.all_reduce(values, group=self.group)
        return {n: _stats_from_row(v) for n, v in zip(names, values.tolist())}

    def gather_stats(self, stats: dict[str, CommStats]) -> dict[str, list[CommStats]]:
        """Every rank's per-stage stats (``out[stage][p]`` of rank ``p``), on every rank: for the
        maximum any one rank sends or receives. Every rank must hold the same stage names."""
        names = sorted(stats)
        values = self.on_wire(_stats_matrix([stats[n] for n in names]))
        gathered = [values.clone() for _ in range(self.world_size)]
        if self.world_size > 1 and names:
            with collective_guard("report", "all-gather"):
                dist.all_gather(gathered, values, group=self.group)
        return {n: [_stats_from_row(g[i].tolist()) for g in gathered] for i, n in enumerate(names)}


_STAT_FIELDS = tuple(f.name for f in dataclasses.fields(CommStats))


def _stats_matrix(rows: list[CommStats]) -> torch.Tensor:
    """``[stages, fields]`` float64 (exact for counts below 2**53), for one reduction."""
    return torch.tensor(
        [[float(getattr(st, f)) for f in _STAT_FIELDS] for st in rows], dtype=torch.float64
    ).reshape(len(rows), len(_STAT_FIELDS))


def _stats_from_row(row: list[float]) -> CommStats:
    return CommStats(
        **{f: (float(v) if f == "time_s" else int(v)) for f, v in zip(_STAT_FIELDS, row)}
    )


class PendingExchange:
    """An all-to-all in flight (see :meth:`Communicator.all_to_all_async`)."""

    def __init__(
        self,
        comm: Communicator,
        stage: str,
        work,
        pieces: list[torch.Tensor],
        decode,
        setup_s: float,
    ):
        self._comm, self._stage, self._work, self._pieces = comm, stage, work, pieces
        self._decode, self._setup_s = decode, setup_s
        self._result: list[torch.Tensor] | None = None

    @classmethod
    def done(cls, rows: list[torch.Tensor]) -> "PendingExchange":
        """An exchange that has arrived: ``rows[p]`` from rank ``p`` (a restored checkpoint's
        exchange in flight; nothing to wait for, nothing counted)."""
        exchange = cls.__new__(cls)
        exchange._result = list(rows)
        return exchange

    def wait(self) -> list[torch.Tensor]:
        """Block until the rows arrived; ``out[p]`` came from rank ``p``. Idempotent."""
        if self._result is None:
            start = time.perf_counter()
            if self._work is not None:
                with collective_guard(self._stage, "all-to-all"):
                    self._work.wait()
            pieces = self._pieces
            if self._decode is not None:
                rank = self._comm.rank
                pieces = [t if p == rank else self._decode(t) for p, t in enumerate(pieces)]
            self._comm.stats[self._stage].time_s += self._setup_s + time.perf_counter() - start
            self._result = pieces
        return self._result
