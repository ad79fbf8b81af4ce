"""Low-bit row codec for communication: per-row min/max scaling, stochastic (unbiased) rounding,
bit packing.

A row ``x`` of ``F`` floats is sent as ``F`` unsigned ``b``-bit integers plus its range
``[lo, hi]``::

    q = floor((x - lo) * (2^b - 1) / (hi - lo) + U[0, 1))       (clamped to [0, 2^b - 1])
    x_hat = lo + q * (hi - lo) / (2^b - 1)

``E[floor(v + U)] = v``, so ``E[x_hat] = x`` (unbiased), and ``|x_hat - x| < (hi - lo) / (2^b - 1)``
(one quantisation step). ``lo``/``hi`` travel as bfloat16, rounded outwards (``lo`` down, ``hi``
up) before quantising, so the receiver dequantises with exactly the range the sender used and
unbiasedness survives the 16-bit range. One encoded row is ``ceil(F b / 8) + 4`` bytes (b = 1,
F = 256: 36 bytes instead of 1024). This is the quantiser of AdaQP/Sylvie (see
shared/research/algorithms.md, section 2).

Error feedback (Sylvie's error compensation, EF-SGD's residual): the sender keeps what
quantisation lost and adds it to the row's next send. With ``v = x + r`` sent as ``Q(v)`` and
``r <- v - Q(v)``, where ``Q`` quantises on ``x``'s own range (clamping ``v`` to it: on ``v``'s
range, 1-bit errors widen the next range and ``r`` grows without bound), the residual plus what
the receiver decodes is exactly what was meant to be sent (up to float32 rounding), and the
errors of repeated sends telescope: after ``T`` sends of a constant row the mean of what arrived
is off by ``r_T / T``, at most ``x``'s range over ``T``, where plain stochastic rounding leaves
an error of one quantisation step divided by ``sqrt(T)``.
:class:`Feedback` says where each destination's residuals live:
:class:`AlignedResiduals` for exchanges that send the same rows every time (full-graph halos),
:class:`RowResiduals` for a table of rows sent in any selection (mini-batch feature fetch).

``bits = 32`` is not a codec: callers send plain float32 rows (``make_codec(32)`` returns None).
"""

from __future__ import annotations

from typing import Any

import torch

from shardgnn.distributed.config import BITS
from shardgnn.errors import ConfigError
from shardgnn.journal import Journal

_RANGE_BYTES = 4  # lo and hi as bfloat16


def _bf16_bits_down(x: torch.Tensor) -> torch.Tensor:
    """The largest bfloat16 ``<= x`` (elementwise, float32 input), as its int32 bit pattern <<
    16."""
    bits = x.contiguous().view(torch.int32)
    kept = bits & -65536  # clear the low 16 bits: rounds the magnitude towards zero
    dropped = (bits & 0xFFFF) != 0
    # For negative numbers rounding the magnitude towards zero rounds up; step one ulp further out.
    return torch.where(dropped & (x < 0), kept + 65536, kept)


class RowCodec:
    """Quantise float rows to ``bits`` bits and back.

    Args:
        bits: 1, 2, 4, 8 or 16.
        generator: the random stream of the stochastic rounding (seed it for reproducible runs).
    """

    def __init__(self, bits: int, generator: torch.Generator | None = None):
        if bits not in BITS or bits == 32:
            raise ConfigError(
                f"bits={bits} must be one of {BITS[:-1]} for a codec (32 means no codec)"
            )
        self.bits = bits
        self.levels = (1 << bits) - 1
        self.generator = generator

    def reseed(self, seed: int) -> None:
        """Start the rounding stream afresh from ``seed``: a send keyed by what it carries (a
        training batch's fetch: its epoch and index) rounds alike whatever was sent before it,
        so a run resumed mid-epoch, or one whose fetches ran ahead on a prefetch thread, rounds
        as the uninterrupted run."""
        if self.generator is None:
            self.generator = torch.Generator()
        self.generator.manual_seed(seed)

    def payload_bytes(self, width: int) -> int:
        """Bytes of one encoded row of ``width`` values."""
        return -(-width * self.bits // 8) + _RANGE_BYTES

    def encode_compensated(
        self, x_RF: torch.Tensor, residual_RF: torch.Tensor, counts_R: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Encode ``x + residual`` and leave in ``residual`` (in place) what the encoding lost:
        ``residual_new + decode(payload) == x + residual_old`` up to float32 rounding. With
        ``counts_R``, ``x`` and ``residual`` are ragged rows' values (:meth:`encode_ragged`)."""
        assert residual_RF.shape == x_RF.shape, (residual_RF.shape, x_RF.shape)
        x = x_RF.detach().to(torch.float32)
        meant = x + residual_RF
        # Quantised on x's own range (values beyond it are clamped to its ends): on the range of
        # x + residual, 1-bit errors as wide as that range would feed the next range and the
        # residual would grow without bound. On x's range every residual entry stays within one
        # range of x, so the error of the mean of T sends is at most that range over T.
        # Rounded stochastically like plain sends: rounding to the nearest level instead
        # (sigma-delta) was measured worse in full-graph training (BENCHMARKS.md section 4).
        if counts_R is None:
            payload = self.encode(meant, range_of=x)
            residual_RF.copy_(meant - self.decode(payload, x_RF.shape[1]))
        else:
            payload = self.encode_ragged(meant, counts_R, range_of=x)
            residual_RF.copy_(meant - self.decode_ragged(payload, counts_R))
        return payload

    def encode(self, x_RF: torch.Tensor, range_of: torch.Tensor | None = None) -> torch.Tensor:
        """``[R, F]`` float rows -> ``[R, payload_bytes(F)]`` uint8 (each row quantised on its
        own ``[min, max]``, or on that of the same row of ``range_of``, clamping to it)."""
        if x_RF.dim() != 2:
            raise ValueError(
                f"the codec encodes [rows, width] matrices, got shape {tuple(x_RF.shape)}"
            )
        x = x_RF.detach().to(torch.float32)
        rows, width = x.shape
        if rows == 0 or width == 0:
            return torch.zeros(
                (rows, self.payload_bytes(width)), dtype=torch.uint8, device=x.device
            )
        bounds = x if range_of is None else range_of.detach().to(torch.float32)
        lo, scale, ranges = self._ranges(bounds.amin(1), bounds.amax(1))
        packed = self._pack(self._levels_of(x, lo[:, None], scale[:, None]))
        return torch.cat([packed, ranges], 1)

    def ragged_payload_bytes(self, rows: int, values: int) -> int:
        """Bytes of :meth:`encode_ragged`'s payload for ``values`` values in ``rows`` rows."""
        return rows * _RANGE_BYTES + -(-values * self.bits // 8)

    def encode_ragged(
        self,
        values_V: torch.Tensor,
        counts_R: torch.Tensor,
        range_of: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Rows of different lengths (row ``r``: the next ``counts_R[r]`` of ``values_V``, e.g. a
        CSR row's non-zeros) -> ``[ragged_payload_bytes(R, V)]`` uint8: every row's range, then
        the values packed back to back, each quantised on its own row's ``[min, max]`` (or on
        that of the same row of ``range_of``, clamping to it) as :meth:`encode` quantises a row
        (a mostly-zero row's non-zeros are quantised on their own range, its zeros not sent)."""
        counts = torch.as_tensor(counts_R, dtype=torch.int64)
        row_of_V = torch.repeat_interleave(torch.arange(counts.shape[0]), counts)
        x = values_V.detach().to(torch.float32)
        bounds = x if range_of is None else range_of.detach().to(torch.float32)
        lo_R = x.new_zeros(counts.shape[0]).scatter_reduce_(
            0, row_of_V, bounds, "amin", include_self=False
        )
        hi_R = x.new_zeros(counts.shape[0]).scatter_reduce_(
            0, row_of_V, bounds, "amax", include_self=False
        )
        lo, scale, ranges = self._ranges(lo_R, hi_R)
        q = self._levels_of(x, lo[row_of_V], scale[row_of_V])
        return torch.cat([ranges.reshape(-1), self._pack(q[None]).reshape(-1)])

    def decode_ragged(self, payload: torch.Tensor, counts_R: torch.Tensor) -> torch.Tensor:
        """:meth:`encode_ragged`'s payload -> the ``[V]`` float32 values."""
        counts = torch.as_tensor(counts_R, dtype=torch.int64)
        rows, values = counts.shape[0], int(counts.sum())
        if payload.shape != (self.ragged_payload_bytes(rows, values),):
            raise ValueError(
                f"payload shape {tuple(payload.shape)} does not hold {values} values in {rows} "
                f"rows at {self.bits} bits (expected [{self.ragged_payload_bytes(rows, values)}])"
            )
        lo, hi = self._read_ranges(payload[: rows * _RANGE_BYTES].view(rows, _RANGE_BYTES))
        q = self._unpack(payload[rows * _RANGE_BYTES :][None], values)[0]
        row_of_V = torch.repeat_interleave(torch.arange(rows), counts)
        step = (hi - lo) / self.levels
        return lo[row_of_V] + q.to(torch.float32) * step[row_of_V]

    def _ranges(
        self, lo_R: torch.Tensor, hi_R: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row's range rounded outwards to bfloat16 (``lo`` down, ``hi`` up): ``lo``, the
        levels per unit ``levels / (hi - lo)``, and the ``[R, 4]`` range bytes that carry it."""
        lo_bits = _bf16_bits_down(lo_R)
        hi_bits = _bf16_bits_down(-hi_R)  # ceil(max) = -floor(-max)
        lo = lo_bits.view(torch.float32)
        hi = -hi_bits.view(torch.float32)
        span = (hi - lo).clamp(min=torch.finfo(torch.float32).tiny)
        ranges = torch.stack([lo_bits >> 16, hi_bits >> 16], 1).to(torch.int16).view(torch.uint8)
        return lo, self.levels / span, ranges.reshape(-1, _RANGE_BYTES)

    def _levels_of(self, x: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """``x`` stochastically rounded to levels of its range (``lo``, ``scale`` broadcast)."""
        # The rounding stream lives on the CPU so runs are reproducible whatever the device.
        noise = torch.rand(x.shape, generator=self.generator).to(x.device)
        q = torch.floor((x - lo) * scale + noise)
        return q.clamp_(0, self.levels).to(torch.int32)

    @staticmethod
    def _read_ranges(range_bytes_R4: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``lo``, ``hi`` of ``[R, 4]`` range bytes (as :meth:`_ranges` wrote them)."""
        # A fresh buffer, not .contiguous(): a single row's range bytes count as contiguous
        # but may start at an odd byte (or keep an odd stride), which int16 cannot view.
        range_bytes = range_bytes_R4.new_empty(range_bytes_R4.shape).copy_(range_bytes_R4)
        ranges = range_bytes.view(torch.int16).to(torch.int32) << 16
        lo = ranges[:, 0].contiguous().view(torch.float32)
        hi = -ranges[:, 1].contiguous().view(torch.float32)
        return lo, hi

    def decode(self, payload: torch.Tensor, width: int) -> torch.Tensor:
        """``[R, payload_bytes(width)]`` uint8 -> ``[R, width]`` float32."""
        rows = payload.shape[0]
        if payload.dim() != 2 or payload.shape[1] != self.payload_bytes(width):
            raise ValueError(
                f"payload shape {tuple(payload.shape)} does not hold rows of width {width} "
                f"at {self.bits} bits (expected [R, {self.payload_bytes(width)}])"
            )
        if rows == 0 or width == 0:
            return torch.zeros((rows, width), dtype=torch.float32, device=payload.device)
        lo, hi = self._read_ranges(payload[:, -_RANGE_BYTES:])
        q = self._unpack(payload[:, :-_RANGE_BYTES], width)
        step = (hi - lo) / self.levels
        return lo[:, None] + q.to(torch.float32) * step[:, None]

    # ------------------------------------------------------------------ bit packing
    def _pack(self, q_RF: torch.Tensor) -> torch.Tensor:
        rows, width = q_RF.shape
        if self.bits == 16:
            return (q_RF - 32768).to(torch.int16).view(torch.uint8).reshape(rows, 2 * width)
        per_byte = 8 // self.bits
        pad = (-width) % per_byte
        if pad:
            q_RF = torch.cat([q_RF, q_RF.new_zeros(rows, pad)], 1)
        shifts = torch.arange(per_byte, device=q_RF.device, dtype=torch.int32) * self.bits
        return (q_RF.view(rows, -1, per_byte) << shifts).sum(-1).to(torch.uint8)

    def _unpack(self, packed: torch.Tensor, width: int) -> torch.Tensor:
        rows = packed.shape[0]
        if self.bits == 16:
            return packed.contiguous().view(torch.int16).to(torch.int32)[:, :width] + 32768
        per_byte = 8 // self.bits
        shifts = torch.arange(per_byte, device=packed.device, dtype=torch.int32) * self.bits
        values = (packed.to(torch.int32)[:, :, None] >> shifts) & self.levels
        return values.reshape(rows, -1)[:, :width]

    def roundtrip(self, x_RF: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x))``: what the receiver of ``x`` sees."""
        return self.decode(self.encode(x_RF), x_RF.shape[1]).to(x_RF.dtype)


class Feedback:
    """Where the residuals of one stream of sends live (see the module docstring)."""

    def take(self, peer: int, x_RF: torch.Tensor) -> torch.Tensor:
        """The residual rows of what goes to ``peer`` now (``x_RF``'s shape; updated in place by
        the encoder, then handed back to :meth:`put`)."""
        raise NotImplementedError

    def put(self, peer: int, residual_RF: torch.Tensor) -> None:
        """Keep the updated residual rows of the send to ``peer``."""

    @property
    def nbytes(self) -> int:
        """Memory the residuals take."""
        raise NotImplementedError


class AlignedResiduals(Feedback):
    """One residual block per (stream key, peer), aligned with the rows sent: for exchanges
    that send the same rows in the same order every time (a fixed communication plan). A block
    whose shape changes starts again from zero."""

    def __init__(self) -> None:
        self.blocks: dict[tuple, torch.Tensor] = {}
        self.key: tuple = ()

    def stream(self, *key) -> "AlignedResiduals":
        """This store, for the sends of stream ``key`` (e.g. a layer's forward halo)."""
        self.key = key
        return self

    def take(self, peer: int, x_RF: torch.Tensor) -> torch.Tensor:
        block = self.blocks.get((*self.key, peer))
        if block is None or block.shape != x_RF.shape:
            block = torch.zeros(x_RF.shape, dtype=torch.float32, device=x_RF.device)
            self.blocks[(*self.key, peer)] = block
        return block

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.blocks.values())


class RowResiduals(Feedback):
    """One residual row per row of a local table (``num_rows x width``), whichever rows a send
    selects: ``select(rows)`` names the table rows of the next send to each peer. Peers are
    served one after the other, so a row sent to two peers carries the first send's error into
    the second. With ``width`` None the table is ``[num_rows]``, one residual per entry of a
    ragged table (a CSR's non-zeros: its zeros travel exact, so they keep none) and ``select``
    names entries.

    Sends made ahead of time (a prefetch thread fetching batches before they train) can be
    taken back: after ``journal(tag)`` every update keeps the rows it overwrote under ``tag``,
    and ``rewind(tag)`` restores the table to what it was before the first send tagged ``tag``
    or later (:class:`~shardgnn.journal.Journal`)."""

    def __init__(self, num_rows: int, width: int | None = None):
        shape = (num_rows,) if width is None else (num_rows, width)
        self.table = torch.zeros(shape, dtype=torch.float32)
        self.rows: list[torch.Tensor] = []
        self._journal: Journal[torch.Tensor, torch.Tensor] = Journal()

    def select(self, rows_per_peer: list[torch.Tensor]) -> "RowResiduals":
        self.rows = rows_per_peer
        return self

    def take(self, peer: int, x_RF: torch.Tensor) -> torch.Tensor:
        return self.table[self.rows[peer]]

    def put(self, peer: int, residual_RF: torch.Tensor) -> None:
        rows = self.rows[peer]
        if self._journal:
            self._journal.record(rows, self.table[rows])  # indexing copies the rows
        self.table[rows] = residual_RF

    def journal(self, tag: Any) -> None:
        """Keep what the sends from now on overwrite under ``tag`` (comparable with ``<``:
        e.g. ``(epoch, batch)``), until the next ``journal``. An entry no send wrote to is
        retagged rather than kept (the batches of a window fetched whole send nothing)."""
        self._journal.open(tag)

    def rewind(self, tag: Any) -> None:
        """Undo every journalled send tagged ``tag`` or later, the latest first (a row sent in
        two of them ends as it was before the earlier); the journal is then empty."""

        def restore(rows: torch.Tensor, before_RF: torch.Tensor) -> None:
            self.table[rows] = before_RF

        self._journal.rewind(tag, restore)

    @property
    def nbytes(self) -> int:
        return self.table.numel() * self.table.element_size()


def encode_with(
    codec: RowCodec,
    x_RF: torch.Tensor,
    feedback: Feedback | None,
    peer: int,
    counts_R: torch.Tensor | None = None,
) -> torch.Tensor:
    """``codec.encode(x)`` (with ``counts_R``, ``codec.encode_ragged(x, counts_R)``),
    compensated by ``feedback``'s residuals for ``peer`` when given."""
    if feedback is None or x_RF.shape[0] == 0:
        return codec.encode(x_RF) if counts_R is None else codec.encode_ragged(x_RF, counts_R)
    residual = feedback.take(peer, x_RF)
    payload = codec.encode_compensated(x_RF, residual, counts_R)
    feedback.put(peer, residual)
    return payload


def make_codec(bits: int, seed: int = 0) -> RowCodec | None:
    """The codec for ``bits`` (None for 32: plain float32), its rounding stream seeded by
    ``seed``."""
    if bits not in BITS:
        raise ConfigError(f"bits={bits} must be one of {BITS}")
    if bits == 32:
        return None
    generator = torch.Generator()
    generator.manual_seed(seed)
    return RowCodec(bits, generator)


def nothing_to_quantise(bits: int, who: str, *, has_rows: bool = True) -> ConfigError:
    """The refusal of ``--fetch-bits bits`` where it would round nothing: ``who`` (e.g. "this
    worker reads") reads every feature row without a collective (its own and its host's workers'
    mapped parts), or with ``has_rows`` false the run fetches no feature or edge rows at all. A
    run said to send low-bit rows that sends none would be silently different from its name."""
    if not has_rows:
        return ConfigError(
            f"--fetch-bits {bits} quantises the feature and edge rows fetched from other workers, "
            "and this run has neither (learnable rows travel exact); drop --fetch-bits"
        )
    return ConfigError(
        f"--fetch-bits {bits}: {who} every feature row without communication (its own rows, "
        "the rest from the mapped parts of workers on its host), so nothing would be quantised; "
        "use --host-sharing off (rows then cross the all-to-all, as between machines) or drop "
        "--fetch-bits"
    )
