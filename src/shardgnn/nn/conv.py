"""Graph convolution layers that run on a :class:`MessageGraph` (a sampled block or the full
graph): ``layer(graph, h_SF) -> h_DF``.

A layer whose first product commutes with the aggregation, and narrows the rows (or takes sparse
input), runs it first: ``projects_first(h)``, then ``post(graph, pre(h_SF), h_dst_DF)``, which is
what ``forward`` does in that case. Layer-wise inference (:mod:`shardgnn.fullgraph.inference`)
calls the two halves itself, so that halo rows travel after the product, at the narrower width.

Shape legend: ``S`` src nodes, ``D`` dst nodes, ``E`` edges, ``H`` attention heads,
``F``/``C`` feature widths.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.functional import dst_rows, is_sparse, linear, segment_softmax, sparse_matmul
from shardgnn.nn.message_graph import MessageGraph, spmm


class SAGEConv(nn.Module):
    """GraphSAGE with mean aggregation: ``W_self h_dst + W_neigh mean_{src in N(dst)} h_src``."""

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim, bias=bias)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        """Aggregate at the narrower width: mean is linear, so A (h W) == (A h) W. Sparse input
        features are multiplied first (the SpMM needs a dense operand)."""
        return self.lin_neigh.out_features < self.lin_neigh.in_features or is_sparse(h_SF)

    def pre(self, h_SF: torch.Tensor) -> torch.Tensor:
        return linear(self.lin_neigh, h_SF)

    def post(self, graph, z_SC: torch.Tensor, h_dst_DF: torch.Tensor) -> torch.Tensor:
        return linear(self.lin_self, h_dst_DF) + spmm(graph, z_SC, "mean")

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        h_dst_DF = dst_rows(h_SF, graph.num_dst)
        if self.projects_first(h_SF):
            return self.post(graph, self.pre(h_SF), h_dst_DF)
        # Dense, aggregate first (the wide layers): the self term's bias rides on the neighbour
        # GEMM and the self GEMM accumulates into its output (addmm), so the [D, C] sum takes no
        # pass of its own over memory.
        neigh_DC = F.linear(spmm(graph, h_SF, "mean"), self.lin_neigh.weight, self.lin_self.bias)
        return torch.addmm(neigh_DC, h_dst_DF, self.lin_self.weight.t())


class GCNConv(nn.Module):
    """GCN (Kipf & Welling): ``D^-1/2 (A + I) D^-1/2 h W + b`` (see
    ``MessageGraph.edge_values``)."""

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        return self.lin.out_features < self.lin.in_features or is_sparse(h_SF)

    def pre(self, h_SF: torch.Tensor) -> torch.Tensor:
        return linear(self.lin, h_SF)

    def post(self, graph, z_SC: torch.Tensor, h_dst_DF: torch.Tensor | None) -> torch.Tensor:
        return self._bias(spmm(graph, z_SC, "gcn"))

    def _bias(self, out_DC: torch.Tensor) -> torch.Tensor:
        # the bias in the output's dtype (bf16 under autocast, as nn.Linear's own bias)
        return out_DC if self.bias is None else out_DC + self.bias.to(out_DC.dtype)

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        if self.projects_first(h_SF):
            return self.post(graph, self.pre(h_SF), None)
        return self._bias(self.lin(spmm(graph, h_SF, "gcn")))


class _Attention(nn.Module):
    """What GAT and GATv2 share: their heads' settings, each dst node's neighbourhood (its
    in-edges without self-loops, then one loop) and the softmax-weighted sum of the in-edges'
    values. Subclasses create their parameters, then the output bias (:meth:`_output_bias`)."""

    def __init__(self, out_dim, heads, concat, negative_slope, attn_dropout):
        super().__init__()
        self.heads, self.out_dim, self.concat = heads, out_dim, concat
        self.negative_slope, self.attn_dropout = negative_slope, attn_dropout

    def _output_bias(self, bias: bool) -> None:
        width = self.heads * self.out_dim if self.concat else self.out_dim
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    @staticmethod
    def _edges_with_self_loops(graph: MessageGraph, device: torch.device):
        """``(src_E, dst_E)``: the graph's edges without its self-loops, then one loop per dst
        node."""
        src_E, dst_E = graph.edge_index()
        not_loop = src_E != dst_E
        loops = torch.arange(graph.num_dst, device=device)
        return torch.cat([src_E[not_loop], loops]), torch.cat([dst_E[not_loop], loops])

    def _attend(self, value_EHC: torch.Tensor, logit_EH: torch.Tensor, dst_E, num_dst: int):
        """Each dst node's in-edge values weighted by the softmax of their logits (with
        ``attn_dropout``), heads concatenated or averaged, plus the bias. The softmax and the
        weighted sum run in fp32 even when the projection ran in bf16 (--precision bf16):
        attention weights summed over many in-edges need its mantissa."""
        H, C = self.heads, self.out_dim
        alpha_EH = segment_softmax(logit_EH.float(), dst_E, num_dst)
        alpha_EH = F.dropout(alpha_EH, self.attn_dropout, self.training)
        msg_EHC = value_EHC * alpha_EH[..., None]
        out_DHC = torch.zeros(num_dst, H, C, device=value_EHC.device, dtype=msg_EHC.dtype)
        out_DHC.index_add_(0, dst_E, msg_EHC)
        out = out_DHC.reshape(num_dst, H * C) if self.concat else out_DHC.mean(1)
        return out if self.bias is None else out + self.bias


class GATConv(_Attention):
    """Graph attention (Velickovic et al.) with a self-loop per dst node.

    ``alpha_ij = softmax_j LeakyReLU(a_dst . W h_i + a_src . W h_j)``; heads are concatenated
    (``concat=True``) or averaged.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        heads: int = 4,
        concat: bool = True,
        negative_slope: float = 0.2,
        attn_dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__(out_dim, heads, concat, negative_slope, attn_dropout)
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self._output_bias(bias)
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        # projected before the halo rows join (a distributed full-graph layer moves H * C wide
        # rows, not the input's width)
        return True

    def pre(self, h_SF: torch.Tensor) -> torch.Tensor:
        return linear(self.lin, h_SF)

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        return self.post(graph, self.pre(h_SF), None)

    def post(self, graph, z_SC: torch.Tensor, h_dst_DF: torch.Tensor | None) -> torch.Tensor:
        H, C, D = self.heads, self.out_dim, graph.num_dst
        z_SHC = graph.source_rows(z_SC).view(-1, H, C)
        src_E, dst_E = self._edges_with_self_loops(graph, z_SHC.device)
        score_SH = (z_SHC * self.att_src).sum(-1)
        score_DH = (z_SHC[:D] * self.att_dst).sum(-1)
        logit_EH = F.leaky_relu(score_SH[src_E] + score_DH[dst_E], self.negative_slope)
        return self._attend(z_SHC[src_E], logit_EH, dst_E, D)


class GINConv(nn.Module):
    """Graph isomorphism network (Xu et al.): ``MLP((1 + eps) h_dst + sum_{src in N(dst)} h_src)``,
    the MLP two linear layers with a ReLU between them, ``eps`` learnt (``train_eps``) or fixed:
    PyG's ``GINConv(nn=Sequential(Linear, ReLU, Linear), train_eps=...)``."""

    def __init__(self, in_dim: int, out_dim: int, eps: float = 0.0, train_eps: bool = True):
        super().__init__()
        self.lin1 = nn.Linear(in_dim, out_dim)
        self.lin2 = nn.Linear(out_dim, out_dim)
        eps_t = torch.tensor([float(eps)])
        if train_eps:
            self.eps = nn.Parameter(eps_t)
        else:
            self.register_buffer("eps", eps_t)

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        """The first linear layer commutes with the sum over neighbours (its bias added once,
        after it): project first when that narrows the rows or the input is sparse."""
        w = self.lin1.weight
        return w.shape[0] < w.shape[1] or is_sparse(h_SF)

    def pre(self, h_SF: torch.Tensor) -> torch.Tensor:
        w = self.lin1.weight
        return sparse_matmul(h_SF, w.t()) if is_sparse(h_SF) else h_SF @ w.t()

    def post(self, graph, z_SC: torch.Tensor, h_dst_DF: torch.Tensor | None) -> torch.Tensor:
        pre_DC = spmm(graph, z_SC, "sum") + (1 + self.eps) * z_SC[: graph.num_dst]
        return self.lin2(F.relu(pre_DC + self.lin1.bias))

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        if self.projects_first(h_SF):
            return self.post(graph, self.pre(h_SF), None)
        h_dst_DF = dst_rows(h_SF, graph.num_dst)
        pre_DC = self.lin1(spmm(graph, h_SF, "sum") + (1 + self.eps) * h_dst_DF)
        return self.lin2(F.relu(pre_DC))


class GINEConv(GINConv):
    """GIN with edge features (Hu et al., "Strategies for pre-training GNNs"):
    ``MLP((1 + eps) h_dst + AGG_{src in N(dst)} ReLU(h_src + W e_src,dst))``, ``W`` a linear map
    of the edge rows to the input width, ``AGG`` a sum (``aggr="sum"``) or a mean (``"mean"``).
    PyG's ``GINEConv(nn=Sequential(Linear, ReLU, Linear), train_eps=..., edge_dim=...,
    aggr=...)``."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        edge_dim: int,
        eps: float = 0.0,
        train_eps: bool = True,
        aggr: str = "sum",
    ):
        super().__init__(in_dim, out_dim, eps, train_eps)
        assert aggr in ("sum", "mean"), aggr
        self.lin_edge = nn.Linear(edge_dim, in_dim)
        self.aggr = aggr

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        return False  # the edge rows join each message before the sum: nothing commutes

    def forward(  # type: ignore[override]
        self, graph: MessageGraph, h_SF: torch.Tensor, edge_attr_ED: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``edge_attr_ED``: the rows of ``graph``'s edges (None: ``graph.edge_attr_ED``, the
        rows a sampled block carries)."""
        if edge_attr_ED is None:
            edge_attr_ED = graph.edge_attr_ED
            assert edge_attr_ED is not None, "GINE reads edge features; this graph has none"
        # edge_index() and source_rows(): a sampled block, the whole graph, or a distributed
        # full-graph layer (its halo rows appended, fetched from their owners)
        src_E, dst_E = graph.edge_index()
        message_EF = F.relu(
            graph.source_rows(h_SF).index_select(0, src_E) + self.lin_edge(edge_attr_ED)
        )
        agg_DF = h_SF.new_zeros(graph.num_dst, h_SF.shape[1]).index_add(0, dst_E, message_EF)
        if self.aggr == "mean":
            # an index_add of ones, not bincount: exported graphs (ONNX) have no bincount
            ones_E = torch.ones_like(dst_E, dtype=agg_DF.dtype)
            degree_D = agg_DF.new_zeros(graph.num_dst).index_add(0, dst_E, ones_E)
            agg_DF = agg_DF / degree_D.clamp(min=1).unsqueeze(1)
        return self.lin2(F.relu(self.lin1(agg_DF + (1 + self.eps) * dst_rows(h_SF, graph.num_dst))))


class GATv2Conv(_Attention):
    """GATv2 (Brody et al., "How attentive are graph attention networks?") with a self-loop per
    dst node: ``alpha_ij = softmax_j a . LeakyReLU(W_dst h_i + W_src h_j)`` (the attention
    vector after the non-linearity: dynamic attention), messages ``W_src h_j``; heads
    concatenated or averaged. PyG's ``GATv2Conv(share_weights=False)``.

    With ``edge_dim``, edge features join the score: ``a . LeakyReLU(W_dst h_i + W_src h_j +
    W_e e_ji)`` (``W_e`` without bias), each self-loop's features the mean of its node's other
    in-edges' (PyG's ``edge_dim=..., fill_value="mean"``); the graph's ``edge_attr_ED`` holds
    them."""

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        heads: int = 4,
        concat: bool = True,
        negative_slope: float = 0.2,
        attn_dropout: float = 0.0,
        bias: bool = True,
        edge_dim: int | None = None,
    ):
        super().__init__(out_dim, heads, concat, negative_slope, attn_dropout)
        self.lin_src = nn.Linear(in_dim, heads * out_dim)
        self.lin_dst = nn.Linear(in_dim, heads * out_dim)
        self.att = nn.Parameter(torch.empty(1, heads, out_dim))
        self.lin_edge = None if edge_dim is None else nn.Linear(edge_dim, heads * out_dim, False)
        self._output_bias(bias)
        for weight in (self.lin_src.weight, self.lin_dst.weight, self.att):
            nn.init.xavier_uniform_(weight)
        if self.lin_edge is not None:
            nn.init.xavier_uniform_(self.lin_edge.weight)
        nn.init.zeros_(self.lin_src.bias)
        nn.init.zeros_(self.lin_dst.bias)

    def projects_first(self, h_SF: torch.Tensor) -> bool:
        return True

    def pre(self, h_SF: torch.Tensor) -> torch.Tensor:
        return linear(self.lin_src, h_SF)

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        return self.post(graph, self.pre(h_SF), dst_rows(h_SF, graph.num_dst))

    def post(self, graph, z_SC: torch.Tensor, h_dst_DF: torch.Tensor) -> torch.Tensor:
        H, C, D = self.heads, self.out_dim, graph.num_dst
        src_SHC = graph.source_rows(z_SC).view(-1, H, C)
        dst_DHC = linear(self.lin_dst, h_dst_DF).view(-1, H, C)
        src_E, dst_E = self._edges_with_self_loops(graph, src_SHC.device)
        value_EHC = src_SHC.index_select(0, src_E)
        pair_EHC = value_EHC + dst_DHC.index_select(0, dst_E)
        if self.lin_edge is not None:
            pair_EHC = pair_EHC + self.lin_edge(self._loop_edge_rows(graph)).view(-1, H, C)
        pair_EHC = F.leaky_relu(pair_EHC, self.negative_slope)
        logit_EH = (pair_EHC * self.att).sum(-1)
        return self._attend(value_EHC, logit_EH, dst_E, D)

    @staticmethod
    def _loop_edge_rows(graph: MessageGraph) -> torch.Tensor:
        """The edge rows in :meth:`_edges_with_self_loops`' order: the graph's rows without its
        self-loops', then each dst node's loop: the mean of its other in-edges' rows (zeros
        without any)."""
        edge_attr_ED = graph.edge_attr_ED
        assert edge_attr_ED is not None, "GATv2 with edge_dim reads edge features; none given"
        src_E, dst_E = graph.edge_index()
        not_loop = src_E != dst_E
        rows_KD, dst_K = edge_attr_ED[not_loop], dst_E[not_loop]
        sums_DD = rows_KD.new_zeros(graph.num_dst, rows_KD.shape[1]).index_add(0, dst_K, rows_KD)
        ones_K = torch.ones_like(dst_K, dtype=rows_KD.dtype)
        counts_D = rows_KD.new_zeros(graph.num_dst).index_add(0, dst_K, ones_K).clamp(min=1)
        return torch.cat([rows_KD, sums_DD / counts_D.unsqueeze(1)])


class PyGLayer(nn.Module):
    """Run a PyG ``MessagePassing`` layer inside a shardgnn model.

    ``bipartite=True`` calls ``conv((h_src, h_dst), edge_index, size=(S, D))`` (SAGEConv,
    GATConv, GraphConv...); ``bipartite=False`` runs the layer on all src nodes and keeps the dst
    rows (for layers such as PyG's GCNConv that accept only one node set).
    """

    def __init__(self, conv: nn.Module, bipartite: bool = True):
        super().__init__()
        self.conv, self.bipartite = conv, bipartite

    def forward(self, graph: MessageGraph, h_SF: torch.Tensor) -> torch.Tensor:
        edge_index = graph.edge_index()
        if self.bipartite:
            return self.conv(
                (h_SF, h_SF[: graph.num_dst]), edge_index, size=(graph.num_src, graph.num_dst)
            )
        return self.conv(h_SF, edge_index)[: graph.num_dst]
