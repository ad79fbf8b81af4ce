"""Helpers that let the first layer take sparse input features (bag-of-words matrices are often
<1% dense: a sparse matmul and a dropout over the non-zeros only are 10-100x cheaper): the whole
graph's in full-graph mode, a sampled batch's in mini-batch mode."""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.graph.features import SPARSE_MAX_DENSITY, stored_sparse


def is_sparse(h: torch.Tensor) -> bool:
    return h.layout != torch.strided


def sparse_matmul(h_SF: torch.Tensor, w_FC: torch.Tensor) -> torch.Tensor:
    """``h_SF @ w_FC`` for a sparse ``h_SF`` (COO or CSR), differentiable in ``w_FC``, in fp32
    (under bf16 autocast too: the product runs over the non-zeros only, and MKL's CSR product
    has no bf16). On a CPU a COO ``h_SF`` is multiplied as CSR: MKL's CSR product is 10x torch's
    COO one (30 ms against 300 ms for 30,000 rows of coauthor-physics at width 256), and the
    conversion of coalesced rows is a compression of their row indices (under a millisecond)."""
    if h_SF.device.type == "cpu" and h_SF.layout == torch.sparse_coo:
        with warnings.catch_warnings():  # torch's notice that its CSR support is in beta
            warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
            h_SF = h_SF.to_sparse_csr()
    with torch.autocast(h_SF.device.type, enabled=False):
        return torch.sparse.mm(h_SF, w_FC.float())


def linear(lin: nn.Linear, h: torch.Tensor) -> torch.Tensor:
    """``lin(h)`` for a dense or sparse ``h`` (:func:`sparse_matmul`)."""
    if not is_sparse(h):
        return lin(h)
    out = sparse_matmul(h, lin.weight.t())
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
    """The first ``num_dst`` rows (the dst nodes), of a dense or sparse COO ``h_SF`` (a sampled
    batch's sparse input rows: :class:`~shardgnn.store.feature.SparseRowStore`)."""
    return row_slice(h_SF, 0, num_dst)


def row_slice(h_NF: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Rows ``start:end`` of a dense or sparse COO ``h_NF`` (sparse: coalesced, as rows
    gathered or made by :func:`to_sparse_if_sparse` are)."""
    end = min(end, h_NF.shape[0])
    if start == 0 and end == h_NF.shape[0]:
        return h_NF
    if not is_sparse(h_NF):
        return h_NF[start:end]
    # Coalesced entries are in row order, so a range of rows' are a range of them: a slice
    # (0.1 ms for a batch of 30,000 coauthor-physics rows, against 14-35 ms for narrow_copy,
    # which masks every entry).
    h_NF = h_NF.coalesce()  # (no work for gathered rows: they are made coalesced)
    indices_2K, values_K = h_NF.indices(), h_NF.values()
    bounds = torch.tensor([start, end], dtype=indices_2K.dtype, device=indices_2K.device)
    lo, hi = (int(v) for v in torch.searchsorted(indices_2K[0], bounds))
    indices_2K = indices_2K[:, lo:hi]
    if start:
        indices_2K = torch.stack([indices_2K[0] - start, indices_2K[1]])
    return torch.sparse_coo_tensor(
        indices_2K,
        values_K[lo:hi],
        (max(0, end - start), *h_NF.shape[1:]),
        is_coalesced=True,
        check_invariants=False,
    )


def to_sparse_if_sparse(
    x: torch.Tensor,
    max_density: float = SPARSE_MAX_DENSITY,
    graph_counts: tuple[int, int] | None = None,
) -> torch.Tensor:
    """A sparse COO copy of ``x`` when at most ``max_density`` of its entries are non-zero;
    ``graph_counts``: the whole graph's ``(non-zeros, entries)`` where ``x`` is one worker's
    share of it (the choice is then the graph's, the one one process makes)."""
    if graph_counts is None:
        # count_nonzero, not (x != 0).sum(): that sum widens the mask to int64 first, a
        # temporary twice the size of a float32 x (1.2 GB for a worker's coauthor-physics rows)
        graph_counts = int(torch.count_nonzero(x)), x.numel()
    if not stored_sparse(*graph_counts, max_density):
        return x
    return x.to_sparse().coalesce()


def segment_softmax(logit_EH: torch.Tensor, dst_E: torch.Tensor, num_dst: int) -> torch.Tensor:
    """Softmax of edge logits ``[E, H]`` over each destination's in-edges (attention weights);
    subtracting the per-destination maximum keeps ``exp`` finite. The maximum is a constant to
    autograd (a softmax does not depend on it), and gathers are ``index_select`` (whose backward
    is an ``index_add``, twice as fast on CPU as indexing's accumulating ``index_put``)."""
    H = logit_EH.shape[1]
    max_DH = logit_EH.new_full((num_dst, H), float("-inf")).scatter_reduce(
        0, dst_E[:, None].expand(-1, H), logit_EH.detach(), "amax", include_self=True
    )
    weight_EH = torch.exp(logit_EH - max_DH.index_select(0, dst_E))
    denom_DH = logit_EH.new_zeros(num_dst, H).index_add(0, dst_E, weight_EH)
    return weight_EH / denom_DH.index_select(0, dst_E)
