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

``bits = 32`` is not a codec: callers send plain float32 rows (``make_codec(32)`` returns None).
"""

from __future__ import annotations

import torch

from shardgnn.distributed.config import BITS
from shardgnn.errors import ConfigError

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

    def payload_bytes(self, width: int) -> int:
        """Bytes of one encoded row of ``width`` values."""
        return -(-width * self.bits // 8) + _RANGE_BYTES

    def encode(self, x_RF: torch.Tensor) -> torch.Tensor:
        """``[R, F]`` float rows -> ``[R, payload_bytes(F)]`` uint8."""
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
        lo_bits = _bf16_bits_down(x.amin(1))
        hi_bits = _bf16_bits_down(-x.amax(1))  # ceil(max) = -floor(-max)
        lo = lo_bits.view(torch.float32)
        hi = -hi_bits.view(torch.float32)
        span = (hi - lo).clamp(min=torch.finfo(torch.float32).tiny)
        # The rounding stream lives on the CPU so runs are reproducible whatever the device.
        noise = torch.rand(x.shape, generator=self.generator).to(x.device)
        q = torch.floor((x - lo[:, None]) * (self.levels / span)[:, None] + noise)
        q = q.clamp_(0, self.levels).to(torch.int32)
        packed = self._pack(q)
        ranges = torch.stack([lo_bits >> 16, hi_bits >> 16], 1).to(torch.int16).view(torch.uint8)
        return torch.cat([packed, ranges.reshape(rows, _RANGE_BYTES)], 1)

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
        ranges = payload[:, -_RANGE_BYTES:].contiguous().view(torch.int16).to(torch.int32) << 16
        lo = ranges[:, 0].contiguous().view(torch.float32)
        hi = -ranges[:, 1].contiguous().view(torch.float32)
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
