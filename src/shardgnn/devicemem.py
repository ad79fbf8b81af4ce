"""Where tensors live on a GPU machine: device memory when they fit, else pinned host memory that
GPU kernels read in place (zero-copy, over CUDA's unified virtual addressing).

Quiver and DGL's UVA sampling read features and the CSR this way: a pinned host buffer's address is
valid on the device, so a gather kernel (here torch's ``index_select``) launched on a CUDA view of
it pulls exactly the rows it needs over PCIe, with no CPU-side gather and no staging copy.
"""

from __future__ import annotations

import torch

# What may be placed on the GPU, as a share of its free memory when nothing says otherwise: the
# rest is left to the model's activations, the sampled blocks and the allocator's slack.
DEFAULT_DEVICE_SHARE = 0.5


class _CudaArrayInterface:
    """A pinned host buffer described by ``__cuda_array_interface__`` (version 3), so that
    ``torch.as_tensor`` makes a CUDA tensor over it; holds the host tensor alive."""

    def __init__(self, host: torch.Tensor):
        self.host = host
        typestr = {
            torch.float32: "<f4",
            torch.float16: "<f2",
            torch.int64: "<i8",
            torch.int32: "<i4",
            torch.uint8: "|u1",
            torch.int8: "|i1",
        }
        if host.dtype not in typestr:
            raise TypeError(f"no zero-copy view for dtype {host.dtype}")
        self.__cuda_array_interface__ = {
            "shape": tuple(host.shape),
            "typestr": typestr[host.dtype],
            "data": (host.data_ptr(), False),
            "strides": None,
            "version": 3,
        }


def uva_view(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CUDA tensor over ``host``'s memory (pinned and contiguous; pinned here when it is not):
    kernels on ``device`` read it in place across PCIe. The view keeps ``host`` alive."""
    if not host.is_pinned():
        host = host.contiguous().pin_memory()
    host = host.contiguous()
    with torch.cuda.device(device):
        view = torch.as_tensor(_CudaArrayInterface(host), device=device)
    view._uva_host = host  # type: ignore[attr-defined]  # the buffer must outlive the view
    return view


def device_budget(device: torch.device) -> int:
    """Bytes that may be placed on ``device`` when nothing says otherwise: a share
    (:data:`DEFAULT_DEVICE_SHARE`) of its free memory now (CUDA); 0 elsewhere."""
    if device.type != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info(device)
    return int(free * DEFAULT_DEVICE_SHARE)


def place(
    host: torch.Tensor, device: torch.device, budget_bytes: int | None = None
) -> tuple[torch.Tensor, bool]:
    """``host`` on ``device`` when it fits ``budget_bytes`` (None: half the free memory), else a
    zero-copy view of it in pinned host memory. Returns ``(tensor, resident)``."""
    if device.type != "cuda":
        return host.to(device), True
    budget = device_budget(device) if budget_bytes is None else budget_bytes
    size = host.numel() * host.element_size()
    if size <= budget:
        return host.to(device), True
    return uva_view(host, device), False
