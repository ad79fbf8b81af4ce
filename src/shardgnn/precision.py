"""Mixed precision (``--precision``): bf16 autocast of the dense layers, fp32 everywhere else.

``--precision bf16`` runs every training step's forward pass and loss, and every evaluation, under
``torch.autocast(device_type=<the training device's type>, dtype=torch.bfloat16)``: the GEMMs of
the dense layers (``nn.Linear``, ``addmm``) run in bf16, while the parameters, their gradients
and the optimiser state stay fp32 (master weights). bf16 has fp32's exponent range, so no loss
scaling is needed (no ``GradScaler``). Losses are computed from fp32 logits, and the sparse
aggregation takes reduced-precision rows in fp32 (:func:`shardgnn.nn.message_graph.spmm`: it is
memory-bound, and the CPU kernels are fp32/fp64 only), so only the GEMMs change precision.

:func:`precision_context` is the one place the autocast context is made; every step and every
evaluation of the recipes that read ``--precision`` enters it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it runs: the CLI's parser reads PRECISIONS
    import torch

PRECISIONS = ("fp32", "bf16")

_warned: set[str] = set()


def bf16_is_fast(device: torch.device | str) -> bool:
    """Whether ``device`` runs bf16 GEMMs natively: a CPU with AVX512-BF16 or AMX (oneDNN's
    check), or a CUDA GPU with bf16 tensor cores (Ampere and later)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # a torch build without oneDNN
            return False
    return True  # other backends: no check known; autocast says if it cannot


def precision_context(
    precision: str, device: torch.device | str
) -> contextlib.AbstractContextManager:
    """The context a forward pass and its loss run in: a bf16 autocast on ``device``'s type for
    ``precision`` ``bf16``, else nothing. The first bf16 context of a process on a device that
    lacks native bf16 prints one warning line (it still runs, emulated, and slower than fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision != "bf16":
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    import torch

    device = torch.device(device)
    if device.type not in _warned:
        _warned.add(device.type)
        if not bf16_is_fast(device):
            what = f"this {device.type} device has no native bf16"
            if device.type == "cpu":
                what = "this CPU has neither AVX512-BF16 nor AMX"
            print(
                f"shardgnn train: warning: --precision bf16: {what}, so bf16 is emulated and "
                "likely slower than fp32",
                file=sys.stderr,
                flush=True,
            )
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
