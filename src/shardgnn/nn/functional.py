"""Helpers that let the first layer take sparse input features (bag-of-words matrices are often
<1% dense: a sparse matmul and a dropout over the non-zeros only are 10-100x cheaper)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def is_sparse(h: torch.Tensor) -> bool:
    return h.layout != torch.strided


def linear(lin: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """``lin(h)`` for a dense or sparse COO ``h``."""
    if not is_sparse(h):
        return lin(h)
    out = torch.sparse.mm(h, lin.weight.t())
    return out if lin.bias is None else out + lin.bias


def dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout; for a sparse COO ``h`` only its stored values are dropped (zeros stay zero)."""
    if p == 0.0 or not training:
        return h
    if not is_sparse(h):
        return F.dropout(h, p, training)
    h = h.coalesce()
    return torch.sparse_coo_tensor(
        h.indices(),
        F.dropout(h.values(), p, training),
        h.shape,
        is_coalesced=True,
        check_invariants=False,
    )


def dst_rows(h_SF: torch.Tensor, num_dst: int) -> torch.Tensor:
    """The first ``num_dst`` rows (the dst nodes); a sparse input must be the full graph."""
    if num_dst == h_SF.shape[0]:
        return h_SF
    if is_sparse(h_SF):
        raise ValueError(
            "sparse input features are supported only on the full graph (src = dst nodes)"
        )
    return h_SF[:num_dst]


def to_sparse_if_sparse(x: torch.Tensor, max_density: float = 0.1) -> torch.Tensor:
    """A sparse COO copy of ``x`` when at most ``max_density`` of its entries are non-zero."""
    if x.numel() == 0 or float((x != 0).sum()) / x.numel() > max_density:
        return x
    return x.to_sparse().coalesce()
