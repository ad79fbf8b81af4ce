"""Models on sampled blocks and on the full graph; PyG layers inside our models."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardgnn.nn.config import SPARSE_INPUT_MODELS
from shardgnn.nn.conv import GATv2Conv, GINConv, PyGLayer, SAGEConv
from shardgnn.nn.message_graph import MessageGraph, spmm
from shardgnn.nn.models import GNN, ModelConfig, build_model
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig


def dense_adjacency(graph):
    a = np.zeros((graph.num_nodes, graph.num_nodes), dtype=np.float64)
    src, dst = graph.edge_index()
    np.add.at(a, (dst, src), 1.0)
    return a


@pytest.mark.parametrize("norm", ["mean", "sum", "gcn"])
def test_spmm_forward_and_backward_match_dense(small_graph, norm):
    mg = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
    a = dense_adjacency(small_graph)
    if norm == "mean":
        a = a / np.maximum(a.sum(1, keepdims=True), 1)
    elif norm == "gcn":
        a = a + np.eye(len(a))
        d = a.sum(1)
        a = a / np.sqrt(d[:, None] * d[None, :])
    h = torch.randn(small_graph.num_nodes, 5, dtype=torch.float32, requires_grad=True)
    out = spmm(mg, h, norm)
    np.testing.assert_allclose(out.detach().numpy(), a @ h.detach().numpy(), atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    np.testing.assert_allclose(h.grad.numpy(), a.T @ g.numpy(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gatv2", "gin", "appnp", "sgc"])
def test_models_forward_backward_on_blocks_and_full_graph(small_graph, model):
    torch.manual_seed(0)
    net = build_model(
        ModelConfig(model=model, hidden=8, num_layers=2, heads=2),
        small_graph.num_features,
        small_graph.num_classes,
    )
    x = torch.from_numpy(small_graph.x)
    full = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
    out = net([full, full], x)
    assert out.shape == (small_graph.num_nodes, small_graph.num_classes)
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())
    # A block with full fanout computes exactly the full-graph output of its seeds.
    net.eval()
    sampler = NeighborSampler(
        small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(-1, -1))
    )
    sample = sampler.sample(torch.arange(0, 300, 3), seed=0)
    graphs = [MessageGraph.from_block(b) for b in sample.blocks]
    with torch.no_grad():
        block_out = net(graphs, x[sample.input_nodes])
        full_out = net([full, full], x)[sample.seeds]
    torch.testing.assert_close(block_out, full_out, atol=1e-5, rtol=1e-4)


def test_pyg_message_passing_layer_inside_our_model(small_graph):
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    ours = SAGEConv(small_graph.num_features, 6)
    theirs = pyg.SAGEConv(small_graph.num_features, 6, aggr="mean")
    # Same weights: PyG's lin_l acts on the aggregated neighbours, lin_r on the root node.
    with torch.no_grad():
        theirs.lin_l.weight.copy_(ours.lin_neigh.weight)
        theirs.lin_l.bias.copy_(ours.lin_self.bias)
        theirs.lin_r.weight.copy_(ours.lin_self.weight)
    sampler = NeighborSampler(
        small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(4, 4))
    )
    sample = sampler.sample(torch.arange(50), seed=1)
    graphs = [MessageGraph.from_block(b) for b in sample.blocks]
    x = torch.from_numpy(small_graph.x)[sample.input_nodes]
    model = GNN([PyGLayer(theirs), PyGLayer(pyg.GCNConv(6, 3), bipartite=False)], dropout=0.0)
    out = model(graphs, x)
    assert out.shape == (50, 3)
    out.sum().backward()
    torch.testing.assert_close(
        PyGLayer(theirs)(graphs[0], x), ours(graphs[0], x), atol=1e-5, rtol=1e-4
    )


def _pyg_twin(ours, pyg):
    """PyG's layer of the same name holding ``ours``' weights."""
    if isinstance(ours, GINConv):
        mlp = torch.nn.Sequential(ours.lin1, torch.nn.ReLU(), ours.lin2)
        theirs = pyg.GINConv(mlp, train_eps=True)
        with torch.no_grad():
            theirs.eps.copy_(ours.eps)
        return theirs
    heads, out_dim = ours.heads, ours.out_dim
    edge_dim = None if ours.lin_edge is None else ours.lin_edge.in_features
    theirs = pyg.GATv2Conv(
        ours.lin_src.in_features, out_dim, heads=heads, concat=ours.concat, share_weights=False,
        edge_dim=edge_dim,
    )  # fmt: skip
    with torch.no_grad():
        if edge_dim is not None:
            theirs.lin_edge.weight.copy_(ours.lin_edge.weight)
        theirs.lin_l.weight.copy_(ours.lin_src.weight)
        theirs.lin_l.bias.copy_(ours.lin_src.bias)
        theirs.lin_r.weight.copy_(ours.lin_dst.weight)
        theirs.lin_r.bias.copy_(ours.lin_dst.bias)
        theirs.att.copy_(ours.att)
        theirs.bias.copy_(ours.bias)
    return theirs


@pytest.mark.parametrize("layer", ["gin", "gatv2", "gatv2-mean", "gatv2-edges"])
@pytest.mark.parametrize("where", ["block", "full"])
def test_new_layers_equal_pygs_forward_and_backward(small_graph, layer, where):
    """GIN and GATv2 (also with edge features) equal PyG's GINConv and GATv2Conv with the same
    weights, on a sampled block (bipartite: PyG gets ``(x_src, x_dst)``) and on the whole graph,
    outputs and every gradient."""
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    F_in = small_graph.num_features
    if layer == "gin":
        ours = GINConv(F_in, 6)
        with torch.no_grad():
            ours.eps.fill_(0.3)
    else:
        edge_dim = 3 if layer == "gatv2-edges" else None
        ours = GATv2Conv(F_in, 5, heads=3, concat=layer != "gatv2-mean", edge_dim=edge_dim)
        with torch.no_grad():
            ours.bias.normal_()
            ours.lin_src.bias.normal_()
            ours.lin_dst.bias.normal_()
    theirs = _pyg_twin(ours, pyg)
    x_all = torch.from_numpy(small_graph.x)
    edge_rows = torch.randn(small_graph.num_edges, 3, generator=torch.Generator().manual_seed(2))
    if where == "block":
        sampler = NeighborSampler(
            small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(4,))
        )
        block = sampler.sample(torch.arange(0, 200, 2), seed=1).blocks[0]
        graph = MessageGraph.from_block(block, edge_attr_ED=edge_rows[block.edge_ids_E])
        x = x_all[block.src_nodes_S].clone().requires_grad_(True)
        x_pyg = x.detach().clone().requires_grad_(True)
        # GATv2Conv takes no size: its self-loops and softmax need the dst count from x_dst
        pair, size = (x_pyg, x_pyg[: graph.num_dst]), (graph.num_src, graph.num_dst)
        kwargs = {"size": size} if layer == "gin" else {}
        if layer == "gatv2-edges":
            kwargs["edge_attr"] = graph.edge_attr_ED
        theirs_out = theirs(pair, graph.edge_index(), **kwargs)
    else:
        graph = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
        graph.edge_attr_ED = edge_rows
        x = x_all.clone().requires_grad_(True)
        x_pyg = x.detach().clone().requires_grad_(True)
        kwargs = {"edge_attr": edge_rows} if layer == "gatv2-edges" else {}
        theirs_out = theirs(x_pyg, graph.edge_index(), **kwargs)
    ours_out = ours(graph, x)
    torch.testing.assert_close(ours_out, theirs_out, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(ours_out)
    ours_out.backward(grad)
    theirs_out.backward(grad)
    torch.testing.assert_close(x.grad, x_pyg.grad, atol=1e-5, rtol=1e-4)
    ours_grads = [p.grad for p in ours.parameters()]
    theirs_grads = {id(p): p.grad for p in theirs.parameters()}
    if layer == "gin":  # the same modules: their gradients accumulated twice
        torch.testing.assert_close(ours.eps.grad, theirs.eps.grad)
    else:
        pairs = [
            (ours.lin_src.weight, theirs.lin_l.weight), (ours.lin_dst.weight, theirs.lin_r.weight),
            (ours.att, theirs.att), (ours.bias, theirs.bias),
        ]  # fmt: skip
        if layer == "gatv2-edges":
            pairs.append((ours.lin_edge.weight, theirs.lin_edge.weight))
        for mine, their in pairs:
            torch.testing.assert_close(mine.grad, theirs_grads[id(their)], atol=1e-5, rtol=1e-4)
    assert all(g is not None for g in ours_grads)


@pytest.mark.parametrize("model", ["appnp", "sgc"])
def test_decoupled_models_equal_pygs_propagation(small_graph, model):
    """APPNP equals PyG's ``APPNP(K, alpha)`` over the same MLP's output, SGC PyG's
    ``SGConv(K)`` with the same weights: outputs and input gradients within 1e-5."""
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    config = ModelConfig(model=model, hidden=8, num_layers=3, dropout=0.0, alpha=0.2)
    ours = build_model(config, small_graph.num_features, small_graph.num_classes)
    graph = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
    x = torch.from_numpy(small_graph.x).clone().requires_grad_(True)
    x_pyg = x.detach().clone().requires_grad_(True)
    edge_index = graph.edge_index()
    if model == "appnp":
        mlp = ours.lin2(torch.relu(ours.lin1(x_pyg)))
        theirs = pyg.APPNP(K=3, alpha=0.2)(mlp, edge_index)
    else:
        conv = pyg.SGConv(small_graph.num_features, small_graph.num_classes, K=3)
        with torch.no_grad():
            conv.lin.weight.copy_(ours.lin.weight)
            conv.lin.bias.copy_(ours.bias)
        theirs = conv(x_pyg, edge_index)
    out = ours([graph] * 3, x)
    torch.testing.assert_close(out, theirs, atol=1e-5, rtol=1e-4)
    grad = torch.randn_like(out)
    out.backward(grad)
    theirs.backward(grad)
    torch.testing.assert_close(x.grad, x_pyg.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model", SPARSE_INPUT_MODELS)
@pytest.mark.parametrize("where", ["full", "blocks"])
def test_sparse_input_features_match_dense(small_graph, model, where):
    """Every model that takes sparse input rows computes what it computes on the dense rows,
    forward and gradients: on the whole graph (full-graph mode) and on sampled blocks, whose dst
    rows are a prefix of the sparse src rows (mini-batch mode)."""
    from shardgnn.nn.functional import to_sparse_if_sparse

    torch.manual_seed(0)
    net = build_model(
        ModelConfig(model=model, hidden=8, num_layers=2, heads=2, input_dropout=0.5),
        small_graph.num_features,
        small_graph.num_classes,
    )
    x = torch.from_numpy(small_graph.x) * (torch.rand(small_graph.x.shape) < 0.05)
    full = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
    graphs, rows = [full, full], x
    if where == "blocks":
        sampler = NeighborSampler(
            small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(4, 3))
        )
        sample = sampler.sample(torch.arange(0, 300, 3), seed=0)
        graphs = [MessageGraph.from_block(b) for b in sample.blocks]
        rows = x[sample.input_nodes]
        assert graphs[0].num_dst < graphs[0].num_src
    net.use_hashed_dropout(5)  # the same input dropout for sparse and dense rows
    sparse = to_sparse_if_sparse(rows)
    assert sparse.layout == torch.sparse_coo
    for training in (False, True):
        net.train(training)
        net.zero_grad()
        net.dropout_step = 0
        dense_out = net(graphs, rows)
        dense_out.sum().backward()
        dense_grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        net.dropout_step = 0
        sparse_out = net(graphs, sparse)
        torch.testing.assert_close(sparse_out, dense_out, atol=1e-5, rtol=1e-4)
        sparse_out.sum().backward()
        for grad, p in zip(dense_grads, net.parameters()):
            torch.testing.assert_close(p.grad, grad, atol=1e-5, rtol=1e-4)


def test_hashed_dropout_depends_only_on_seed_node_and_column():
    from shardgnn.nn.dropout import hashed_dropout

    h = torch.ones(1000, 64, requires_grad=True)
    out = hashed_dropout(h, 0.3, seed=11, row_offset=0)
    kept = (out != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.01
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / 0.7))
    # Rows 500..599 alone, by offset or by explicit ids, get the same mask as inside the whole.
    part = hashed_dropout(torch.ones(100, 64), 0.3, seed=11, row_offset=500)
    assert torch.equal(part, out[500:600].detach())
    ids = torch.tensor([7, 3, 999, 7])
    assert torch.equal(
        hashed_dropout(torch.ones(4, 64), 0.3, seed=11, row_ids=ids), out[ids].detach()
    )
    # Another seed, another mask; the gradient is masked like the values.
    assert not torch.equal(hashed_dropout(torch.ones(1000, 64), 0.3, seed=12), out.detach())
    out.sum().backward()
    assert torch.equal(h.grad, out.detach())
    # Sparse input: only the stored values are dropped, with the dense mask's decisions.
    dense = torch.zeros(1000, 64)
    dense[::3, ::5] = 1.0
    sparse_out = hashed_dropout(dense.to_sparse(), 0.3, seed=11).to_dense()
    assert torch.equal(sparse_out, hashed_dropout(dense, 0.3, seed=11))
    assert hashed_dropout(h, 0.0, seed=1) is h


@pytest.mark.parametrize("model", ["gat", "gatv2"])
def test_attention_dropout_drops_coefficients_in_training_only(small_graph, model):
    """--attention-dropout (the GAT paper's 0.6 on the normalised coefficients): two training
    passes differ, evaluation is untouched by it, and 0 is the layer without dropout."""
    graph = MessageGraph.from_csr(small_graph.indptr, small_graph.indices)
    x = torch.from_numpy(small_graph.x)

    def built(p):
        torch.manual_seed(0)
        config = ModelConfig(model=model, hidden=4, num_layers=2, dropout=0.0, attention_dropout=p)
        return build_model(config, small_graph.num_features, small_graph.num_classes)

    dropped, plain = built(0.6), built(0.0)
    assert all(layer.attn_dropout == 0.6 for layer in dropped.layers)
    dropped.train()
    assert not torch.equal(dropped([graph] * 2, x), dropped([graph] * 2, x))
    dropped.eval(), plain.eval()
    with torch.no_grad():
        torch.testing.assert_close(dropped([graph] * 2, x), plain([graph] * 2, x))
    with pytest.raises(Exception, match="--attention-dropout 1.0: a probability in"):
        ModelConfig(model=model, attention_dropout=1.0)
