"""The numba SpMM kernels (shardgnn.nn.kernels) against the torch sparse CSR reference: forward and
backward for every norm on random blocks (empty rows, no edges, D < S, narrow and wide features),
the counting-sort transpose against ``transpose_csr``, the gcn values against the torch build,
float64 gradcheck, and determinism across calls and thread counts."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

import shardgnn.nn.message_graph as mg
from shardgnn.nn import kernels
from shardgnn.nn.message_graph import (
    NORMS,
    MessageGraph,
    spmm,
    spmm_reference,
    transpose_csr,
    uses_kernels,
)


def random_block(
    num_dst: int, num_src: int, max_degree: int, seed: int, empty_frac: float = 0.2
) -> MessageGraph:
    """A block with random in-degrees in ``[0, max_degree]`` (about ``empty_frac`` of the rows
    empty), uniformly random src ids (duplicates and self-loops included) and graph degrees."""
    rng = np.random.default_rng(seed)
    degree_D = rng.integers(0, max_degree + 1, num_dst)
    degree_D[rng.random(num_dst) < empty_frac] = 0
    indptr_D1 = np.zeros(num_dst + 1, dtype=np.int64)
    np.cumsum(degree_D, out=indptr_D1[1:])
    indices_E = rng.integers(0, max(num_src, 1), int(indptr_D1[-1]), dtype=np.int64)
    # some self-loops (src d of dst d), which the gcn norm drops and re-adds
    loops = rng.random(indices_E.shape[0]) < 0.05
    indices_E[loops] = np.repeat(np.arange(num_dst), degree_D)[loops]
    src_degree_S = rng.integers(1, 30, num_src, dtype=np.int64)
    return MessageGraph(
        torch.from_numpy(indptr_D1),
        torch.from_numpy(indices_E),
        num_src,
        torch.from_numpy(src_degree_S),
    )


def full_graph(num_nodes: int, max_degree: int, seed: int) -> MessageGraph:
    """A square graph without graph degrees (the full-graph path, ``MessageGraph.from_csr``)."""
    g = random_block(num_nodes, num_nodes, max_degree, seed)
    return MessageGraph.from_csr(g.indptr_D1.numpy(), g.indices_E.numpy())


# (name, graph factory, width): shapes the kernels must handle
CASES = [
    ("block-F1", lambda: random_block(60, 250, 12, 0), 1),
    ("block-F300", lambda: random_block(60, 250, 12, 1), 300),
    ("block-F17", lambda: random_block(300, 1000, 25, 2), 17),
    ("full-graph", lambda: full_graph(200, 10, 3), 8),
    ("no-edges", lambda: random_block(20, 50, 0, 4), 5),
    ("all-rows-empty-but-one", lambda: random_block(40, 90, 6, 5, empty_frac=0.97), 3),
    ("no-dst", lambda: random_block(0, 30, 5, 6), 4),
    ("no-nodes", lambda: random_block(0, 0, 0, 7), 2),
]


@pytest.fixture(params=["parallel", "serial"])
def launch(request, monkeypatch):
    """Run every kernel SpMM through the parallel kernel (SERIAL_WORK = 0) or the serial one."""
    monkeypatch.setattr(kernels, "SERIAL_WORK", 0 if request.param == "parallel" else 1 << 62)
    return request.param


def _forward_backward(fn, graph, h_SF, grad_DF, norm):
    h = h_SF.clone().requires_grad_()
    out = fn(graph, h, norm)
    out.backward(grad_DF)
    return out.detach(), h.grad


def _assert_rel_close(actual, expected, rtol=1e-5):
    """Within ``rtol`` of the largest reference magnitude (zero-size tensors compare shapes)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.numel() == 0:
        return
    scale = float(expected.abs().max())
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-30))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kernel_spmm_matches_torch_sparse_forward_and_backward(case, norm, launch):
    _, make, width = case
    gen = torch.Generator().manual_seed(11)
    graph = make()
    h_SF = torch.randn(graph.num_src, width, generator=gen)
    grad_DF = torch.randn(graph.num_dst, width, generator=gen)
    assert uses_kernels(h_SF)
    out, grad = _forward_backward(spmm, make(), h_SF, grad_DF, norm)
    ref_out, ref_grad = _forward_backward(spmm_reference, graph, h_SF, grad_DF, norm)
    _assert_rel_close(out, ref_out)
    _assert_rel_close(grad, ref_grad)
    if graph.num_edges == 0 and norm != "gcn":  # gcn adds self-loops
        assert not out.any() and not grad.any()


@pytest.mark.parametrize("norm", NORMS)
def test_kernel_spmm_matches_dense_matmul(norm, launch):
    """An independent check of both paths: the dense normalised matrix."""
    graph = random_block(50, 120, 9, 8)
    indptr, indices, values = graph.edge_values(norm)
    rows = torch.repeat_interleave(torch.arange(graph.num_dst), indptr.diff())
    dense_DS = torch.zeros(graph.num_dst, graph.num_src, dtype=torch.float64)
    dense_DS.index_put_((rows, indices), values.double(), accumulate=True)
    h_SF = torch.randn(graph.num_src, 7, dtype=torch.float64)
    grad_DF = torch.randn(graph.num_dst, 7, dtype=torch.float64)
    out, grad = _forward_backward(spmm, graph, h_SF.float(), grad_DF.float(), norm)
    torch.testing.assert_close(out.double(), dense_DS @ h_SF, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad.double(), dense_DS.T @ grad_DF, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_transpose_kernel_equals_transpose_csr(case, norm):
    graph = case[1]()
    indptr_S1, indices_E, values_E, mean = graph.kernel_csr(norm, True, torch.float32)
    assert not mean
    ref = graph.adjacency_t(norm)
    assert torch.equal(torch.from_numpy(indptr_S1), ref.crow_indices())
    assert torch.equal(torch.from_numpy(indices_E), ref.col_indices())
    if values_E is None:  # sum: the kernel multiplies by 1
        assert norm == "sum" and bool((ref.values() == 1).all())
    else:
        assert torch.equal(torch.from_numpy(values_E), ref.values())


def test_transpose_kernel_is_a_stable_counting_sort():
    #       dst 0: src 2, 0, 2   dst 1: (none)   dst 2: src 0, 1
    indptr_D1 = np.array([0, 3, 3, 5], dtype=np.int64)
    indices_E = np.array([2, 0, 2, 0, 1], dtype=np.int64)
    indptr_S1, dst_E, perm_E = kernels.csr_transpose(indptr_D1, indices_E, 4)
    np.testing.assert_array_equal(indptr_S1, [0, 2, 3, 5, 5])
    np.testing.assert_array_equal(dst_E, [0, 2, 2, 0, 0])
    np.testing.assert_array_equal(perm_E, [1, 3, 4, 0, 2])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gcn_values_kernel_equals_torch_build(case):
    graph = case[1]()
    for got, want in zip(graph._gcn_values_cpu(), graph._gcn_values_torch()):
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


@pytest.mark.parametrize("norm", NORMS)
def test_float64_kernel_path_gradcheck(norm, launch):
    graph = random_block(12, 30, 5, 9)
    h_SF = torch.randn(30, 3, dtype=torch.float64, requires_grad=True)
    assert uses_kernels(h_SF)
    assert torch.autograd.gradcheck(lambda h: spmm(graph, h, norm), (h_SF,))


def test_kernel_spmm_is_deterministic_across_calls_threads_and_launches(monkeypatch):
    """Bit-identical results twice, on 1 and 2 threads, and from the serial kernel."""
    graph = random_block(400, 1500, 40, 10)
    gen = torch.Generator().manual_seed(12)
    h_SF = torch.randn(1500, 33, generator=gen)
    grad_DF = torch.randn(400, 33, generator=gen)
    before = torch.get_num_threads()
    runs = {norm: [] for norm in NORMS}
    try:
        for threads, serial_work in ((1, 0), (2, 0), (1, 0), (2, 1 << 62)):
            if threads > numba.config.NUMBA_NUM_THREADS:
                continue
            torch.set_num_threads(threads)
            monkeypatch.setattr(kernels, "SERIAL_WORK", serial_work)
            for norm in NORMS:
                runs[norm].append(_forward_backward(spmm, graph, h_SF, grad_DF, norm))
    finally:
        torch.set_num_threads(before)
    for norm in NORMS:
        out0, grad0 = runs[norm][0]
        assert len(runs[norm]) >= 3
        for out, grad in runs[norm][1:]:
            assert torch.equal(out, out0) and torch.equal(grad, grad0)


def test_numba_thread_count_is_restored(monkeypatch):
    monkeypatch.setattr(kernels, "SERIAL_WORK", 0)
    graph = random_block(30, 60, 5, 13)
    before = numba.get_num_threads()
    spmm(graph, torch.randn(60, 4), "gcn")
    assert numba.get_num_threads() == before


def test_kernel_spmm_edge_order_sum_with_unrolled_tail(launch):
    """Rows of 0..9 edges (the 4-edge sweeps and the remainder loop) against float64 sums."""
    indptr_D1 = torch.tensor([0, 0, 1, 3, 6, 10, 15, 21, 28, 36, 45])
    rng = np.random.default_rng(16)
    indices_E = torch.from_numpy(rng.integers(0, 12, 45))
    graph = MessageGraph(indptr_D1, indices_E, 12)
    h_SF = torch.randn(12, 20, dtype=torch.float64)
    out = spmm(graph, h_SF, "sum")
    for d in range(10):
        want = h_SF[indices_E[indptr_D1[d] : indptr_D1[d + 1]]].sum(0)
        torch.testing.assert_close(out[d], want)


def test_switch_and_unsupported_inputs_take_the_torch_path(monkeypatch):
    graph = random_block(30, 60, 5, 14)
    h_SF = torch.randn(60, 4)
    assert not uses_kernels(h_SF.to(torch.float16))
    assert not uses_kernels(h_SF[:, 0])
    assert not uses_kernels(h_SF.to_sparse())
    monkeypatch.setattr(mg, "USE_KERNELS", False)
    assert not uses_kernels(h_SF)
    out, _ = _forward_backward(spmm, graph, h_SF, torch.ones(30, 4), "gcn")
    assert not graph._kernel_csr  # nothing was built for the kernels
    torch.testing.assert_close(out, spmm_reference(graph, h_SF, "gcn").detach())


def test_transpose_csr_of_kernel_csr_round_trips():
    """``transpose_csr`` of the kernel's transpose is the forward matrix again."""
    graph = random_block(70, 200, 8, 15)
    indptr_S1, indices_E, values_E, _ = graph.kernel_csr("gcn", True, torch.float32)
    adj_t = mg._csr(
        torch.from_numpy(indptr_S1),
        torch.from_numpy(indices_E),
        torch.from_numpy(values_E),
        (graph.num_src, graph.num_dst),
    )
    back = transpose_csr(adj_t)
    adj = graph.adjacency("gcn")
    assert torch.equal(back.crow_indices(), adj.crow_indices())
    # within a row the forward gcn matrix keeps neighbours first and the self-loop last, while a
    # transpose lists columns in ascending order: compare the dense rows
    torch.testing.assert_close(back.to_dense(), adj.to_dense(), rtol=0, atol=0)


@pytest.mark.parametrize("trial", range(4))
def test_transpose_csr_equals_torchs_csc_conversion(trial):
    """The tensor-code transpose is ``to_sparse_csc``'s matrix, entry for entry in the same order
    (duplicate-free rows, empty rows and columns included)."""
    g = torch.Generator().manual_seed(trial)
    rows, cols = 37 + trial, 23 + 5 * trial
    dense = (torch.rand(rows, cols, generator=g) < 0.15) * torch.randn(rows, cols, generator=g)
    dense[3] = 0  # an empty row
    dense[:, 2] = 0  # an empty column
    adj = dense.to_sparse_csr()
    ours, csc = transpose_csr(adj), adj.to_sparse_csc()
    assert torch.equal(ours.crow_indices(), csc.ccol_indices())
    assert torch.equal(ours.col_indices(), csc.row_indices())
    assert torch.equal(ours.values(), csc.values())
    assert torch.equal(ours.to_dense(), dense.t())
