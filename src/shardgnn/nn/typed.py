"""R-GCN (Schlichtkrull et al. 2018) with basis decomposition, and the knowledge-graph decoders
(DistMult, TransE, RotatE, ComplEx).

An R-GCN layer computes, for every destination node ``i``::

    h'_i = W_0 x_i + b + sum_r sum_{j in N_r(i)} (1 / |N_r(i)|) W_r x_j

with ``W_r = sum_b a_rb V_b`` under basis decomposition (``B`` shared ``V_b``, per-relation
coefficients ``a_rb``): the parameter count grows with ``B``, not with the number of relations.
This is PyG's ``RGCNConv`` with ``aggr="mean"`` (``root_weight``, ``bias``); a test checks the two
agree with the same weights.

Shape legend: ``S`` source nodes, ``D`` destination nodes (a prefix of the sources), ``E`` edges,
``R`` relations, ``B`` bases, ``I``/``O`` input/output width, ``Q`` queries, ``N`` entities.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.dropout import hashed_dropout
from shardgnn.nn.functional import segment_softmax
from shardgnn.sampling.kernels import relabel
from shardgnn.seeding import mix_seed


@dataclasses.dataclass
class TypedMessageGraph:
    """Typed edges ``src -> dst`` grouped by relation, with R-GCN's per-relation mean weights.

    ``order_E`` lists the edges relation by relation (``group_sizes[r]`` of relation ``r``), so a
    layer transforms each relation's sources with one matrix product and adds all messages to
    their destinations with one ``index_add``.
    """

    src_E: torch.Tensor
    dst_E: torch.Tensor
    etype_E: torch.Tensor
    num_src: int
    num_dst: int
    num_relations: int
    order_E: torch.Tensor
    group_sizes: list[int] | None
    """edges per relation, consecutive in that order; None: edges in any order (a graph built
    by tensor operations, :meth:`from_tensors`: layers transform every source by every
    relation and gather each edge's row)"""
    norm_E: torch.Tensor
    """``1 / |N_r(dst)|`` of every edge, in ``order_E`` order"""
    dst_type_D: torch.Tensor | None = None
    """node type of every destination (heterogeneous SAGE's per-type root terms), or None"""
    src_type_S: torch.Tensor | None = None
    """node type of every source (HGT's per-type keys and values), or None"""

    @classmethod
    def from_edges(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        etype: np.ndarray,
        num_nodes: int,
        num_relations: int,
        device: torch.device | str = "cpu",
        num_dst: int | None = None,
        node_type: np.ndarray | None = None,
    ) -> "TypedMessageGraph":
        """The graph of typed edges ``src -> dst`` (relation ``etype``) among ``num_nodes``
        sources, the first ``num_dst`` (default: all) of which are the destinations;
        ``node_type``: the type of every source, when a layer reads types."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        etype = np.asarray(etype, np.int64)
        order = np.argsort(etype, kind="stable")
        sizes = np.bincount(etype, minlength=num_relations)
        # |N_r(i)|: edges sharing (destination, relation)
        key = dst * num_relations + etype
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        norm = (1.0 / counts[inverse]).astype(np.float32)
        as_tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        types = None if node_type is None else np.asarray(node_type, np.int64)
        return cls(
            src_E=as_tensor(src[order]),
            dst_E=as_tensor(dst[order]),
            etype_E=as_tensor(etype[order]),
            num_src=int(num_nodes),
            num_dst=int(num_nodes if num_dst is None else num_dst),
            num_relations=int(num_relations),
            order_E=as_tensor(order),
            group_sizes=[int(s) for s in sizes],
            norm_E=as_tensor(norm[order]),
            dst_type_D=None if node_type is None else as_tensor(types[: int(num_dst or num_nodes)]),
            src_type_S=None if node_type is None else as_tensor(types),
        )

    @classmethod
    def from_tensors(
        cls,
        src_E: torch.Tensor,
        dst_E: torch.Tensor,
        etype_E: torch.Tensor,
        node_type_N: torch.Tensor,
        num_relations: int,
    ) -> "TypedMessageGraph":
        """The graph of typed edges among all ``node_type_N.shape[0]`` nodes (every node a
        destination), built with tensor operations only, in the edges' own order (no grouping
        by relation): what an exported model traces, for graphs of any size."""
        num_nodes = node_type_N.shape[0]
        # |N_r(i)|: edges sharing (destination, relation)
        key_E = dst_E * num_relations + etype_E
        count = torch.zeros(num_nodes * num_relations, dtype=torch.float32, device=src_E.device)
        count = count.index_add(0, key_E, torch.ones_like(key_E, dtype=torch.float32))
        return cls(
            src_E=src_E,
            dst_E=dst_E,
            etype_E=etype_E,
            num_src=num_nodes,
            num_dst=num_nodes,
            num_relations=num_relations,
            order_E=torch.arange(src_E.shape[0], device=src_E.device),
            group_sizes=None,
            norm_E=1.0 / count[key_E],
            dst_type_D=node_type_N,
            src_type_S=node_type_N,
        )


def block_message_graph(
    block, num_relations: int, device: torch.device | str = "cpu", node_type_of=None
) -> TypedMessageGraph:
    """The message graph of a sampled typed block (local ids; its destinations are the first
    ``num_dst`` sources; ``block.edge_type_E``: the relation of each of its edges).
    ``node_type_of``: global ids -> node types, to record the sources' (and so the
    destinations') types."""
    assert block.edge_type_E is not None, "a typed sampler sets the edges' relations"
    dst = np.repeat(np.arange(block.num_dst, dtype=np.int64), np.diff(block.indptr_D1.numpy()))
    return TypedMessageGraph.from_edges(
        block.indices_E.numpy(),
        dst,
        block.edge_type_E.numpy(),
        block.num_src,
        num_relations,
        device,
        block.num_dst,
        None if node_type_of is None else node_type_of(block.src_nodes_S.numpy()),
    )


class RGCNConv(nn.Module):
    """One R-GCN layer (mean per relation, self-loop weight, bias), optional basis
    decomposition (``num_bases`` > 0)."""

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_bases: int = 0):
        super().__init__()
        self.in_dim, self.out_dim, self.num_relations = in_dim, out_dim, num_relations
        self.num_bases = num_bases
        if num_bases > 0:
            self.basis_BIO = nn.Parameter(torch.empty(num_bases, in_dim, out_dim))
            self.comp_RB = nn.Parameter(torch.empty(num_relations, num_bases))
        else:
            self.weight_RIO = nn.Parameter(torch.empty(num_relations, in_dim, out_dim))
        self.root_IO = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias_O = nn.Parameter(torch.zeros(out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stacked = self.basis_BIO if self.num_bases else self.weight_RIO
        for matrix_IO in (self.root_IO, *stacked):  # Glorot per [I, O] matrix
            nn.init.xavier_uniform_(matrix_IO)
        if self.num_bases:
            nn.init.xavier_uniform_(self.comp_RB)
        nn.init.zeros_(self.bias_O)

    def relation_weights(self) -> torch.Tensor:
        """``W_r`` of every relation, ``[R, I, O]``."""
        if not self.num_bases:
            return self.weight_RIO
        return (self.comp_RB @ self.basis_BIO.flatten(1)).view(
            self.num_relations, self.in_dim, self.out_dim
        )

    def forward(
        self,
        graph: TypedMessageGraph,
        x_SI: torch.Tensor,
        transform_all: bool | None = None,
    ) -> torch.Tensor:
        """``h'`` of the ``graph.num_dst`` destinations (``transform_all``: see
        :func:`relation_messages`)."""
        assert graph.num_relations == self.num_relations, (graph.num_relations, self.num_relations)
        msg_EO = relation_messages(graph, x_SI, self.relation_weights(), transform_all)
        out_DO = x_SI[: graph.num_dst] @ self.root_IO + self.bias_O
        return out_DO.index_add(0, graph.dst_E, msg_EO * graph.norm_E[:, None])


def relation_messages(
    graph: TypedMessageGraph,
    x_SI: torch.Tensor,
    weight_RIO: torch.Tensor,
    transform_all: bool | None = None,
) -> torch.Tensor:
    """``x_src W_r`` of every edge (``[E, O]``, in ``graph.order_E`` order).

    ``transform_all`` (unset: when it is the cheaper) multiplies every source by every
    relation's weight in one product and gathers each edge's row; otherwise one product per
    relation over its edges' sources. The first suits few nodes with many relations (knowledge
    graphs), the second many nodes; both are exact."""
    num_edges = graph.src_E.shape[0]
    r, i, o = weight_RIO.shape
    if graph.group_sizes is None:  # edges in any order
        transform_all = True
    elif transform_all is None:
        transform_all = graph.num_src * r <= 2 * num_edges
    if transform_all:
        # [S, I] @ [I, R * O]: row (s, r) of the result is x_s W_r
        xw_SRO = (x_SI @ weight_RIO.permute(1, 0, 2).reshape(i, r * o)).view(-1, o)
        return xw_SRO[graph.src_E * r + graph.etype_E]
    # unbind, not weight[r] per relation: the backward of R selections would add R full
    # [R, I, O] zero-padded gradients; unbind's backward stacks the R pieces once.
    weights_IO = weight_RIO.unbind(0)
    # One gather of every edge's source row, then one product per relation over its edges
    # (consecutive in order_E).
    x_EI = x_SI[graph.src_E]
    parts = [
        rows_I @ weights_IO[rel]
        for rel, rows_I in enumerate(x_EI.split(graph.group_sizes))
        if rows_I.shape[0]
    ]
    return torch.cat(parts) if parts else x_SI.new_zeros(0, o)


class TypedSAGEConv(nn.Module):
    """Heterogeneous GraphSAGE: a SAGE aggregator per relation, summed per destination type
    (PyG's ``HeteroConv({rel: SAGEConv(...)}, aggr="sum")``; a test checks the two agree)::

        h'_i = sum_{r into type(i)} (W_r mean_{j in N_r(i)} x_j + b_r + U_r x_i)

    ``relation_dst_types[r]``: the destination node type of relation ``r``. The root terms of
    the relations into one type are one product with ``sum_r U_r`` (the same function and
    gradients); a node of a type no relation enters gets zeros.
    """

    def __init__(self, in_dim: int, out_dim: int, relation_dst_types: list[int], num_types: int):
        super().__init__()
        self.num_relations, self.num_types = len(relation_dst_types), num_types
        self.out_dim = out_dim
        self.neigh_RIO = nn.Parameter(torch.empty(self.num_relations, in_dim, out_dim))
        self.root_RIO = nn.Parameter(torch.empty(self.num_relations, in_dim, out_dim))
        self.bias_RO = nn.Parameter(torch.zeros(self.num_relations, out_dim))
        self.register_buffer(
            "dst_type_R", torch.tensor(relation_dst_types, dtype=torch.int64), persistent=False
        )
        for matrix_IO in (*self.neigh_RIO, *self.root_RIO):  # Glorot per [I, O] matrix
            nn.init.xavier_uniform_(matrix_IO)

    def forward(self, graph: TypedMessageGraph, x_SI: torch.Tensor) -> torch.Tensor:
        assert graph.num_relations == self.num_relations, (graph.num_relations, self.num_relations)
        assert graph.dst_type_D is not None, "heterogeneous SAGE needs the destinations' types"
        t, (_, i, o) = self.num_types, self.root_RIO.shape
        msg_EO = relation_messages(graph, x_SI, self.neigh_RIO)
        root_TIO = x_SI.new_zeros(t, i, o).index_add(0, self.dst_type_R, self.root_RIO)
        bias_TO = x_SI.new_zeros(t, o).index_add(0, self.dst_type_R, self.bias_RO)
        x_DI, type_D = x_SI[: graph.num_dst], graph.dst_type_D
        out_DO = x_SI.new_zeros(graph.num_dst, o)
        for node_type in range(t):
            rows = torch.nonzero(type_D == node_type).squeeze(1)
            out_DO = out_DO.index_add(
                0, rows, x_DI[rows] @ root_TIO[node_type] + bias_TO[node_type]
            )
        return out_DO.index_add(0, graph.dst_E, msg_EO * graph.norm_E[:, None])


class HGTConv(nn.Module):
    """Heterogeneous graph transformer (Hu et al. 2020), PyG's ``HGTConv(in, out, metadata,
    heads)`` (a test checks the two agree, outputs and gradients)::

        k_j, q_j, v_j  = per-type linear maps of x_j              (heads h, width D = out / H)
        a_ij^h = softmax over all in-edges of i of  (q_i^h . k_j^h W^K_{r,h}) p_{r,h} / sqrt(D)
        h'_i   = A_{type(i)} gelu(sum_j a_ij^h v_j^h W^V_{r,h})   (heads concatenated)

    then a learnt gate ``s = sigmoid(skip_{type(i)})`` mixes in the input: ``s h'_i + (1 - s)
    x_i`` (PyG's, when ``in == out``), else ``s h'_i + (1 - s) P_{type(i)} x_i`` with a learnt
    projection ``P`` (PyG has no skip there). ``r`` is the edge's relation; the softmax runs
    over every relation's edges into ``i`` together."""

    def __init__(self, in_dim: int, out_dim: int, num_relations: int, num_types: int, heads: int):
        super().__init__()
        assert out_dim % heads == 0, (out_dim, heads)
        self.in_dim, self.out_dim, self.num_relations = in_dim, out_dim, num_relations
        self.heads, self.num_types = heads, num_types
        d = out_dim // heads
        self.kqv = nn.ModuleList(nn.Linear(in_dim, 3 * out_dim) for _ in range(num_types))
        self.out = nn.ModuleList(nn.Linear(out_dim, out_dim) for _ in range(num_types))
        self.k_rel_RHDD = nn.Parameter(torch.empty(num_relations, heads, d, d))
        self.v_rel_RHDD = nn.Parameter(torch.empty(num_relations, heads, d, d))
        self.p_rel_RH = nn.Parameter(torch.ones(num_relations, heads))
        self.skip_T = nn.Parameter(torch.ones(num_types))
        # Where the widths differ PyG drops the skip, and the last layer of a node classifier
        # would then never see the node itself (its own row enters attention as a query only):
        # here the input enters through a learnt per-type projection instead.
        self.project = None
        if in_dim != out_dim:
            self.project = nn.ModuleList(
                nn.Linear(in_dim, out_dim, bias=False) for _ in range(num_types)
            )
        bound = 1.0 / math.sqrt(d)  # PyG's HeteroLinear: kaiming-uniform of a [D, D] matrix
        for weight in (self.k_rel_RHDD, self.v_rel_RHDD):
            nn.init.uniform_(weight, -bound, bound)

    def forward(self, graph: TypedMessageGraph, x_SI: torch.Tensor) -> torch.Tensor:
        assert graph.num_relations == self.num_relations, (graph.num_relations, self.num_relations)
        assert graph.src_type_S is not None, "HGT needs the sources' types"
        heads, d, num_dst = self.heads, self.out_dim // self.heads, graph.num_dst
        kqv_S3F = x_SI.new_zeros(x_SI.shape[0], 3 * self.out_dim)
        for t, lin in enumerate(self.kqv):
            rows = torch.nonzero(graph.src_type_S == t).squeeze(1)
            kqv_S3F = kqv_S3F.index_add(0, rows, lin(x_SI[rows]))
        k_SF, q_SF, v_SF = kqv_S3F.tensor_split(3, dim=1)
        src_E, dst_E = graph.src_E, graph.dst_E
        # each edge's source key and value through its relation's per-head maps: one product per
        # relation over its edges (consecutive in order_E)
        k_SHD, v_SHD = k_SF.view(-1, heads, d), v_SF.view(-1, heads, d)
        if graph.group_sizes is None:  # edges in any order: every source through every map
            k_EHD = _every_relation(k_SHD, self.k_rel_RHDD, src_E, graph.etype_E)
            v_EHD = _every_relation(v_SHD, self.v_rel_RHDD, src_E, graph.etype_E)
        else:
            k_EHD, v_EHD = k_SHD.index_select(0, src_E), v_SHD.index_select(0, src_E)
            # every relation's maps join the graph, edges or not: a rank whose batch lacks one
            # still gives DDP a (zero) gradient for it
            k_EHD = torch.cat([
                torch.einsum("ehd,hdf->ehf", rows, self.k_rel_RHDD[rel])
                for rel, rows in enumerate(k_EHD.split(graph.group_sizes))
            ])  # fmt: skip
            v_EHD = torch.cat([
                torch.einsum("ehd,hdf->ehf", rows, self.v_rel_RHDD[rel])
                for rel, rows in enumerate(v_EHD.split(graph.group_sizes))
            ])  # fmt: skip
        q_EHD = q_SF.index_select(0, dst_E).view(-1, heads, d)
        logit_EH = (q_EHD * k_EHD).sum(-1) * self.p_rel_RH.index_select(0, graph.etype_E)
        weight_EH = segment_softmax(logit_EH / math.sqrt(d), dst_E, num_dst)
        message_EF = (v_EHD * weight_EH[:, :, None]).reshape(-1, self.out_dim)
        agg_DF = x_SI.new_zeros(num_dst, self.out_dim).index_add(0, dst_E, message_EF)
        agg_DF = F.gelu(agg_DF)
        out_DF = x_SI.new_zeros(num_dst, self.out_dim)
        type_D = graph.src_type_S[:num_dst]
        for t, lin in enumerate(self.out):
            rows = torch.nonzero(type_D == t).squeeze(1)
            a = lin(agg_DF[rows])
            x_DF = x_SI[rows] if self.project is None else self.project[t](x_SI[rows])
            gate = torch.sigmoid(self.skip_T[t])
            a = gate * a + (1 - gate) * x_DF
            out_DF = out_DF.index_add(0, rows, a)
        return out_DF


def _every_relation(
    x_SHD: torch.Tensor, map_RHDD: torch.Tensor, src_E: torch.Tensor, etype_E: torch.Tensor
) -> torch.Tensor:
    """``x_src`` through its edge's relation's per-head map, for edges in any order: every
    source through every relation's map (``[S, R, H, D]``), then each edge's row."""
    r = map_RHDD.shape[0]
    x_SRHD = torch.einsum("shd,rhdf->srhf", x_SHD, map_RHDD)
    return x_SRHD.reshape(-1, *x_SRHD.shape[2:])[src_E * r + etype_E]


def xavier_rows(
    num_rows: int, dim: int, keep: np.ndarray | None = None, chunk_rows: int = 1 << 16
) -> torch.Tensor:
    """``nn.init.xavier_uniform_`` of a ``[num_rows, dim]`` table from the torch generator, or
    only its rows ``keep`` (``[len(keep), dim]``, in that order) in their memory plus one chunk's:
    the table is drawn chunk by chunk, which on CPU draws the same values in the same order and
    leaves the generator as one draw does (tested), so a worker's rows equal one process's."""
    if keep is None:
        table = torch.empty(num_rows, dim)
        nn.init.xavier_uniform_(table)
        return table
    bound = math.sqrt(6.0 / (num_rows + dim))  # xavier_uniform_'s, gain 1
    keep = np.asarray(keep, dtype=np.int64)
    order = np.argsort(keep, kind="stable")
    wanted = keep[order]
    out = torch.empty(len(keep), dim)
    for start in range(0, num_rows, chunk_rows):
        block = torch.empty(min(chunk_rows, num_rows - start), dim).uniform_(-bound, bound)
        lo, hi = np.searchsorted(wanted, [start, start + block.shape[0]])
        out[torch.from_numpy(order[lo:hi])] = block[torch.from_numpy(wanted[lo:hi] - start)]
    return out


class RGCN(nn.Module):
    """A stack of :class:`RGCNConv` layers, of :class:`TypedSAGEConv` layers (``conv``
    ``hetero-sage``: needs ``relation_dst_types`` and ``num_types``) or of :class:`HGTConv`
    layers (``conv`` ``hgt``: ``heads`` heads, the last layer one), ReLU and dropout between
    them, over learnable entity embeddings or over given rows."""

    def __init__(
        self,
        num_nodes: int,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int,
        num_relations: int,
        num_bases: int = 0,
        dropout: float = 0.0,
        learn_input: bool = True,
        conv: str = "rgcn",
        relation_dst_types: list[int] | None = None,
        num_types: int = 1,
        heads: int = 1,
        input_rows: np.ndarray | None = None,
    ):
        super().__init__()
        # input_rows: a worker's own entities, whose rows alone it makes (as the whole table's)
        self.input_NI = (
            nn.Parameter(xavier_rows(num_nodes, in_dim, input_rows)) if learn_input else None
        )
        widths = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        if conv == "hetero-sage":
            assert relation_dst_types is not None and len(relation_dst_types) == num_relations
            self.convs = nn.ModuleList(
                TypedSAGEConv(a, b, relation_dst_types, num_types)
                for a, b in zip(widths[:-1], widths[1:])
            )
        elif conv == "hgt":
            last = len(widths) - 2
            self.convs = nn.ModuleList(
                HGTConv(a, b, num_relations, num_types, heads if i < last else 1)
                for i, (a, b) in enumerate(zip(widths[:-1], widths[1:]))
            )
        else:
            assert conv == "rgcn", conv
            self.convs = nn.ModuleList(
                RGCNConv(a, b, num_relations, num_bases) for a, b in zip(widths[:-1], widths[1:])
            )
        self.dropout = dropout
        self.dropout_seed: int | None = None
        self.dropout_step = 0

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def use_hashed_dropout(self, seed: int) -> None:
        """Draw dropout masks from ``(seed, dropout_step, layer, node id, column)``
        (:func:`~shardgnn.nn.dropout.hashed_dropout`; the trainer sets ``dropout_step`` at every
        step): whatever rows a worker holds, it drops what one process drops for them."""
        self.dropout_seed, self.dropout_step = int(seed), 0

    def _drop(self, h: torch.Tensor, layer: int, keys_N: torch.Tensor | None) -> torch.Tensor:
        if self.dropout_seed is None or not self.training or self.dropout == 0.0:
            return F.dropout(h, self.dropout, self.training)
        seed = mix_seed(self.dropout_seed, self.dropout_step, layer)
        return hashed_dropout(h, self.dropout, seed, row_ids=keys_N)

    def forward(
        self,
        graph: TypedMessageGraph | list[TypedMessageGraph],
        x_NI: torch.Tensor | None = None,
        *,
        halo: Callable[[torch.Tensor], torch.Tensor] | None = None,
        keys_N: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One message graph for every layer (full graph), or one per layer (sampled blocks,
        input layer first).

        Distributed full-graph training holds some rows of every layer: ``halo(h)`` returns the
        rows of the other sources of the graph (a collective), which follow the held rows ``h``
        among the graph's sources; ``keys_N``: the held rows' node ids (hashed dropout's keys;
        None: ``0 .. N-1``)."""
        graphs = graph if isinstance(graph, list) else [graph] * len(self.convs)
        assert len(graphs) == len(self.convs), (len(graphs), len(self.convs))
        h = self.input_NI if x_NI is None else x_NI
        assert h is not None, "an RGCN without learnable input needs features"
        for i, (conv, layer_graph) in enumerate(zip(self.convs, graphs)):
            if i:
                h = self._drop(F.relu(h), i, keys_N)
            if halo is not None:
                h = torch.cat([h, halo(h)])
            h = conv(layer_graph, h)
        return h


def typed_encoder(
    model,
    relations,
    node_types,
    *,
    out_dim: int,
    in_dim: int | None = None,
    num_nodes: int = 0,
    learn_input: bool = False,
    input_rows: np.ndarray | None = None,
) -> RGCN:
    """The ``--model`` stack (``rgcn``, ``hetero-sage`` or ``hgt``: a :class:`ModelConfig`)
    over the message graph's ``relations`` (``(src, rel, dst)`` names, every direction
    included) of a graph with ``node_types``; ``input_rows``: of its learnt input table, the
    rows of these nodes alone (:func:`xavier_rows`)."""
    return RGCN(
        num_nodes=num_nodes,
        in_dim=model.hidden if in_dim is None else in_dim,
        hidden=model.hidden,
        out_dim=out_dim,
        num_layers=model.num_layers,
        num_relations=len(relations),
        num_bases=model.num_bases,
        dropout=model.dropout,
        learn_input=learn_input,
        conv=model.model,
        relation_dst_types=[list(node_types).index(rel[2]) for rel in relations],
        num_types=len(node_types),
        heads=model.heads,
        input_rows=input_rows,
    )


def typed_schema(node_types, type_offsets, relations, target_type) -> dict:
    """What a checkpoint records of a typed graph for a model built without it (``shardgnn
    export``): the node types in id order with their counts, the message graph's relations
    (``(src, rel, dst)`` names, reverses included: what :func:`typed_encoder` was built on) and
    the labelled type."""
    return {
        "node_types": list(node_types),
        "nodes_per_type": [int(n) for n in np.diff(np.asarray(type_offsets))],
        "message_relations": [list(rel) for rel in relations],
        "target_type": target_type,
    }


def partitioned_node_model(model, typed, num_classes: int) -> "TypedNodeModel":
    """The node classifier of a typed partition (``typed``: its
    :class:`~shardgnn.partition.typed.TypedPartitionBook`: node types and sizes, relations,
    featured types' widths): projections for featured types, the ``--model`` stack;
    featureless types' rows are given with each batch (sharded learnt rows)."""
    encoder = typed_encoder(model, typed.relations, typed.node_types, out_dim=num_classes)
    sizes = np.diff(typed.type_offsets).tolist()
    typed_input = TypedInput(sizes, typed.feature_widths, model.hidden)
    return TypedNodeModel(typed_input, encoder, model.input_dropout)


class DistMult(nn.Module):
    """``score(h, r, t) = <e_h, w_r, e_t>`` (Yang et al. 2015): one diagonal matrix per relation.

    Every decoder scores a triple (:meth:`forward`) and, for a batch of queries ``(e, r, ?)``,
    every entity as the missing tail (:meth:`score_all`); head queries are asked as tail queries
    of the reciprocal relation (the trainer gives each relation a second vector for them)."""

    def __init__(self, num_relations: int, dim: int):
        super().__init__()
        self.rel_RD = nn.Parameter(torch.empty(num_relations, dim))
        nn.init.xavier_uniform_(self.rel_RD)

    def forward(self, h_QD: torch.Tensor, r_Q: torch.Tensor, t_QD: torch.Tensor) -> torch.Tensor:
        return (h_QD * self.rel_RD[r_Q] * t_QD).sum(-1)

    def score_all(
        self, e_QD: torch.Tensor, r_Q: torch.Tensor, ent_ND: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[Q, N]`` of every entity as the tail of each query ``(e, r, ?)``."""
        return (e_QD * self.rel_RD[r_Q]) @ ent_ND.T


class TransE(nn.Module):
    """``score(h, r, t) = -||e_h + w_r - e_t||_1 / sqrt(D)`` (Bordes et al. 2013, whose distance
    is L1 or L2; PyKEEN's default is L1): relations translate. The ``1 / sqrt(D)`` keeps a
    softmax over every entity unsaturated (an L1 distance grows with ``D``). Measured, R-GCN 2 x
    128 + TransE, Kinships, 10 epochs, seed 0: test MRR 0.22 with the plain L2 distance, 0.25 with
    L1, 0.38 with L1 / sqrt(D) (UMLS 0.72 -> 0.77); L2 does not gain from a scale (0.21 at 0.2)."""

    def __init__(self, num_relations: int, dim: int):
        super().__init__()
        self.rel_RD = nn.Parameter(torch.empty(num_relations, dim))
        nn.init.xavier_uniform_(self.rel_RD)
        self.scale = 1.0 / math.sqrt(dim)

    def forward(self, h_QD: torch.Tensor, r_Q: torch.Tensor, t_QD: torch.Tensor) -> torch.Tensor:
        distance = torch.linalg.vector_norm(h_QD + self.rel_RD[r_Q] - t_QD, ord=1, dim=-1)
        return -self.scale * distance

    def score_all(
        self, e_QD: torch.Tensor, r_Q: torch.Tensor, ent_ND: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[Q, N]`` of every entity as the tail of each query ``(e, r, ?)``."""
        return -self.scale * torch.cdist(e_QD + self.rel_RD[r_Q], ent_ND, p=1)


def _complex(x_QD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An embedding read as ``D / 2`` complex numbers: (real parts, imaginary parts)."""
    half = x_QD.shape[-1] // 2
    return x_QD[..., :half], x_QD[..., half:]


class ComplEx(nn.Module):
    """``score(h, r, t) = Re(<e_h, w_r, conj(e_t)>)`` (Trouillon et al. 2016): DistMult over
    complex numbers (an embedding's first half the real parts, the second the imaginary), so
    the score of ``(h, r, t)`` and of ``(t, r, h)`` differ."""

    def __init__(self, num_relations: int, dim: int):
        super().__init__()
        if dim % 2:
            raise ValueError(f"ComplEx reads embeddings as complex numbers: dim {dim} is odd")
        self.rel_RD = nn.Parameter(torch.empty(num_relations, dim))
        nn.init.xavier_uniform_(self.rel_RD)

    def _query(self, h_QD: torch.Tensor, r_Q: torch.Tensor) -> torch.Tensor:
        """``e_h * w_r`` as ``[real | imaginary]``."""
        (h_re, h_im), (r_re, r_im) = _complex(h_QD), _complex(self.rel_RD[r_Q])
        return torch.cat([h_re * r_re - h_im * r_im, h_re * r_im + h_im * r_re], dim=-1)

    def forward(self, h_QD: torch.Tensor, r_Q: torch.Tensor, t_QD: torch.Tensor) -> torch.Tensor:
        # Re(q * conj(t)) = q_re t_re + q_im t_im: a dot product of the [re | im] layouts
        return (self._query(h_QD, r_Q) * t_QD).sum(-1)

    def score_all(
        self, e_QD: torch.Tensor, r_Q: torch.Tensor, ent_ND: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[Q, N]`` of every entity as the tail of each query ``(e, r, ?)``."""
        return self._query(e_QD, r_Q) @ ent_ND.T


class RotatE(nn.Module):
    """``score(h, r, t) = -||e_h o w_r - e_t||`` (Sun et al. 2019): each relation rotates every
    complex coordinate of the head by a learnt phase (``|w_r| = 1``); the distance is the
    Euclidean norm of the complex difference (PyKEEN's)."""

    def __init__(self, num_relations: int, dim: int):
        super().__init__()
        if dim % 2:
            raise ValueError(f"RotatE reads embeddings as complex numbers: dim {dim} is odd")
        self.phase_RH = nn.Parameter(torch.empty(num_relations, dim // 2))
        nn.init.uniform_(self.phase_RH, -math.pi, math.pi)

    def _query(self, h_QD: torch.Tensor, r_Q: torch.Tensor) -> torch.Tensor:
        """The rotated head ``e_h o w_r`` as ``[real | imaginary]``."""
        h_re, h_im = _complex(h_QD)
        phase = self.phase_RH[r_Q]
        cos, sin = torch.cos(phase), torch.sin(phase)
        return torch.cat([h_re * cos - h_im * sin, h_re * sin + h_im * cos], dim=-1)

    def forward(self, h_QD: torch.Tensor, r_Q: torch.Tensor, t_QD: torch.Tensor) -> torch.Tensor:
        return -torch.linalg.vector_norm(self._query(h_QD, r_Q) - t_QD, dim=-1)

    def score_all(
        self, e_QD: torch.Tensor, r_Q: torch.Tensor, ent_ND: torch.Tensor
    ) -> torch.Tensor:
        """Scores ``[Q, N]`` of every entity as the tail of each query ``(e, r, ?)``."""
        return -torch.cdist(self._query(e_QD, r_Q), ent_ND)


DECODERS = {"distmult": DistMult, "transe": TransE, "rotate": RotatE, "complex": ComplEx}
"""the knowledge-graph decoders by ``--predictor`` name"""


def relational_decoder(predictor: str, num_relations: int, dim: int) -> nn.Module:
    """The decoder ``--predictor`` names (``auto``: DistMult) for ``num_relations`` relations
    (reciprocals included) and ``dim``-wide entity embeddings."""
    return DECODERS["distmult" if predictor == "auto" else predictor](num_relations, dim)


class TypedLinkModel(nn.Module):
    """R-GCN encoder + a knowledge-graph decoder (Schlichtkrull et al.'s link-prediction model
    with DistMult, the default)."""

    def __init__(self, encoder: RGCN, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, graph: TypedMessageGraph) -> torch.Tensor:
        return self.encoder(graph)


class TypedInput(nn.Module):
    """Every node's input row, type by type in global id order: a linear projection of the
    type's features when it has them, else the type's learnt rows, given to it (featureless
    types: one process and every worker keep them in tables of node rows with their optimiser
    state, :class:`~shardgnn.store.embedding.EmbeddingTable`)."""

    def __init__(self, type_sizes: list[int], feature_widths: list[int], dim: int):
        super().__init__()
        assert len(type_sizes) == len(feature_widths)
        self.type_sizes = list(type_sizes)
        self.project = nn.ModuleDict(
            {str(t): nn.Linear(f, dim) for t, f in enumerate(feature_widths) if f > 0}
        )

    def forward(
        self, features: dict[int, torch.Tensor], learnt: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        """Every node's row; ``features``: type index -> ``[N_t, F_t]`` for the types with
        features; ``learnt``: type index -> ``[N_t, D]`` the others' learnt rows."""
        parts = []
        for t in range(len(self.type_sizes)):
            key = str(t)
            parts.append(self.project[key](features[t]) if key in self.project else learnt[t])
        return torch.cat(parts)

    def assemble(self, by_type: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """A batch's input rows from its nodes grouped by type: ``by_type[t] = (positions,
        rows)``, the positions of type ``t``'s nodes among the batch's and their raw rows
        (features, projected here, for featured types; learnt rows for the others). Every
        projection runs, also over no rows: each weight gets a gradient every step (DDP)."""
        parts, order = [], []
        for t, (where, rows) in sorted(by_type.items()):
            key = str(t)
            parts.append(self.project[key](rows) if key in self.project else rows)
            order.append(where)
        out_SD = torch.cat(parts)
        # rows were gathered type by type: put them back in the batch's order
        return out_SD[torch.argsort(torch.cat(order))]


class TypedNodeModel(nn.Module):
    """Node classification on a typed graph: typed input rows, then R-GCN layers whose last
    gives class logits."""

    def __init__(self, typed_input: TypedInput, encoder: RGCN, input_dropout: float = 0.0):
        super().__init__()
        self.typed_input, self.encoder, self.input_dropout = typed_input, encoder, input_dropout

    def forward(
        self,
        graph: TypedMessageGraph,
        features: dict[int, torch.Tensor],
        learnt: dict[int, torch.Tensor],
    ) -> torch.Tensor:
        """Every node's outputs over the whole graph (:meth:`TypedInput.forward`'s rows)."""
        x_NI = F.dropout(self.typed_input(features, learnt), self.input_dropout, self.training)
        return self.encoder(graph, x_NI)

    def forward_typed_rows(
        self,
        graphs: list[TypedMessageGraph],
        by_type: dict[int, tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """Outputs of a sampled batch's seeds (``graphs`` one per layer, input layer first)
        from its input nodes' raw rows by type (:meth:`TypedInput.assemble`)."""
        return self._encode(graphs, self.typed_input.assemble(by_type))

    def _encode(self, graphs: list[TypedMessageGraph], x_SI: torch.Tensor) -> torch.Tensor:
        x_SI = F.dropout(x_SI, self.input_dropout, self.training)
        return self.encoder(graphs, x_SI)


@torch.no_grad()
def layerwise_forward(
    encoder: RGCN,
    x_NI: torch.Tensor,
    indptr: np.ndarray,
    indices: np.ndarray,
    etype: np.ndarray,
    start: int,
    gather,
    node_type_of,
    chunk_rows: int = 65536,
    num_chunks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every layer of ``encoder`` over the held rows, one layer at a time in chunks of
    destinations: ``(input of the last layer, output)`` of every held row. Working memory is one
    chunk's in-edges, not the whole graph's messages.

    ``x_NI``: input rows of the held nodes (global ids ``start ..``); ``indptr``/``indices``/
    ``etype``: their in-edge CSR (sources in global ids, each edge's relation); ``gather(h,
    ids)``: rows of global ``ids`` of a layer whose held rows are ``h`` (a collective when other
    processes hold rows: every process calls it ``num_chunks`` times per layer, with no ids past
    its own chunks); ``node_type_of``: global ids -> node types (heterogeneous SAGE).
    """
    encoder.eval()
    n = x_NI.shape[0]
    own_chunks = -(-n // chunk_rows)
    total = own_chunks if num_chunks is None else num_chunks
    assert total >= own_chunks, (total, own_chunks)
    h, before_last = x_NI, x_NI
    # relabel's scratch map: every id a chunk names (held rows and their sources)
    top = max(start + n, int(np.max(indices)) + 1 if len(indices) else 0)
    node_map = np.full(top, -1, dtype=np.int64)
    for layer, conv in enumerate(encoder.convs):
        if layer:
            h = F.relu(h)
        before_last = h
        out = h.new_empty(n, conv.out_dim)
        for chunk in range(total):
            a, b = min(chunk * chunk_rows, n), min((chunk + 1) * chunk_rows, n)
            lo, hi = int(indptr[a]), int(indptr[b])
            dst_ids = np.arange(start + a, start + b, dtype=np.int64)
            # the chunk's nodes, destinations first (a block's layout), and its edges' sources
            nodes, local_src = relabel(dst_ids, np.asarray(indices[lo:hi], np.int64), node_map)
            rows = gather(h, nodes)
            if b == a:
                continue
            local_dst = np.repeat(np.arange(b - a, dtype=np.int64), np.diff(indptr[a : b + 1]))
            graph = TypedMessageGraph.from_edges(
                local_src, local_dst, etype[lo:hi], len(nodes), conv.num_relations, x_NI.device,
                b - a, node_type_of(nodes),
            )  # fmt: skip
            out[a:b] = conv(graph, rows)
        h = out
    return before_last, h
