"""A trained model as one function of a whole graph, in plain torch ops: what ``shardgnn export``
hands to ``torch.export`` (and from there to ONNX) for serving.

Training runs the layers on :class:`~shardgnn.nn.message_graph.MessageGraph` blocks, whose
aggregation is a numba kernel (CPU) or a torch sparse product: neither can be exported.
:class:`EdgeListGraph` is the same graph protocol (``num_src``, ``num_dst``, ``edge_index()``,
``aggregate(h, norm)``...) over an edge list, with ``index_add`` and gathers only, so every layer of
:mod:`shardgnn.nn.conv` runs on it unchanged, and the numbers of nodes and edges stay symbolic in
the exported program (one file serves graphs of any size).

Graph- and edge-level models (:class:`~shardgnn.nn.graphlevel.GraphGNN`) serve a batch of small
graphs as their disjoint union: :class:`GraphServingModel` takes PyG's ``Batch.ptr`` (each graph's
first node, then ``N``) and returns one row per graph, :class:`EdgeServingModel` one row per edge.
A SUREL link predictor (:class:`WalkServingModel`) takes the walks of its queries' endpoints,
TGAT (:class:`TemporalServingModel`) the earlier events sampled around its queries, TGN and JODIE
(:class:`MemoryServingModel`) their nodes' memory, which the serving stack keeps
(:class:`ServedMemory`).

Shape legend: ``N`` nodes, ``E`` edges, ``B`` graphs, ``F`` input width, ``C`` output width.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from shardgnn.graph.csr import check_edge_range
from shardgnn.graph.temporal import event_arrays
from shardgnn.nn.surel import relative_positions_by_comparison
from shardgnn.nn.temporal import HopTensors, latest_events
from shardgnn.nn.typed import TypedMessageGraph


class EdgeListGraph:
    """One whole graph (every node a src and a dst node) given as ``edge_index_2E`` = ``[src;
    dst]``, for inference.

    The normalisations equal :meth:`MessageGraph.edge_values` on a complete graph: ``mean``
    divides by the in-degree (self-loop edges included, as there), ``sum`` adds, ``gcn`` is
    ``D^-1/2 (A + I) D^-1/2`` with the graph's self-loop edges ignored and one loop per node.
    """

    node_keys_S = None  # no hashed dropout at inference
    src_degree_S = None  # complete: the graph's own degrees

    def __init__(self, edge_index_2E: torch.Tensor, num_nodes, edge_attr_ED=None):
        self.src_E, self.dst_E = edge_index_2E[0], edge_index_2E[1]
        self.num_src = self.num_dst = num_nodes  # a symbolic size under torch.export: no int()
        self.edge_attr_ED = edge_attr_ED  # the edges' features, in edge_index order (or None)

    @property
    def indices_E(self) -> torch.Tensor:
        return self.src_E

    @property
    def device(self) -> torch.device:
        return self.src_E.device

    def dst_index_E(self) -> torch.Tensor:
        return self.dst_E

    def edge_index(self) -> torch.Tensor:
        return torch.stack([self.src_E, self.dst_E])

    def source_rows(self, h_SF: torch.Tensor) -> torch.Tensor:
        return h_SF

    def _sum_in(self, value_E: torch.Tensor) -> torch.Tensor:
        """Per node, the sum of a value over its in-edges (``[N]``)."""
        return value_E.new_zeros(self.num_dst).index_add(0, self.dst_E, value_E)

    def aggregate(self, h_NF: torch.Tensor, norm: str) -> torch.Tensor:
        """``A_norm @ h`` (see the class docstring)."""
        if norm == "gcn":
            not_loop_E = (self.src_E != self.dst_E).to(h_NF.dtype)
            inv_sqrt_N = (self._sum_in(not_loop_E) + 1).rsqrt()
            weight_E = not_loop_E * inv_sqrt_N[self.src_E] * inv_sqrt_N[self.dst_E]
            message_EF = h_NF.index_select(0, self.src_E) * weight_E[:, None]
            out_NF = h_NF.new_zeros(h_NF.shape).index_add(0, self.dst_E, message_EF)
            return out_NF + h_NF * (inv_sqrt_N * inv_sqrt_N)[:, None]
        out_NF = h_NF.new_zeros(h_NF.shape).index_add(
            0, self.dst_E, h_NF.index_select(0, self.src_E)
        )
        if norm == "sum":
            return out_NF
        if norm != "mean":
            raise ValueError(f"unknown norm {norm!r}")
        degree_N = self._sum_in(torch.ones_like(self.src_E, dtype=h_NF.dtype))
        return out_NF / degree_N.clamp(min=1)[:, None]


class ServingModel(nn.Module):
    """``forward(x_NF, edge_index_2E[, edge_attr_ED]) -> [N, C]``: a trained stacked model
    (``model(graphs, x)`` taking one graph per layer) run over one whole graph, with the feature
    normalisation it was trained with (``row``: rows divided by their sums; ``none``); a model
    that reads edge features (``edge_dim`` > 0) takes their rows, in ``edge_index`` order.

    The output is what ``shardgnn infer`` computes for every node: a node model's logits (or
    its regression values, its labels' logits), a link model's encoder embeddings."""

    def __init__(
        self, model: nn.Module, num_layers: int, feature_norm: str = "none", edge_dim: int = 0
    ):
        super().__init__()
        if feature_norm not in ("none", "row"):
            raise ValueError(f"feature_norm {feature_norm!r}: a served model takes none or row")
        self.model, self.num_layers, self.feature_norm = model, num_layers, feature_norm
        self.edge_dim = edge_dim
        self.input_names = ("x", "edge_index") + ("edge_attr",) * bool(edge_dim)

    def forward(
        self,
        x_NF: torch.Tensor,
        edge_index_2E: torch.Tensor,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.feature_norm == "row":
            sums_N1 = x_NF.sum(dim=1, keepdim=True)
            x_NF = x_NF / torch.where(sums_N1 == 0, torch.ones_like(sums_N1), sums_N1)
        graph = EdgeListGraph(edge_index_2E, x_NF.shape[0], edge_attr_ED)
        return self.model([graph] * self.num_layers, x_NF)


def graph_index_of(graph_ptr_B1: torch.Tensor, num_nodes) -> torch.Tensor:
    """``[N]``: each node's graph (``0..B-1``) from the graphs' offsets ``graph_ptr_B1`` (``[B +
    1]``, from 0 to ``N``, PyG's ``Batch.ptr``): a one at every offset, a running sum, minus the
    one of the first offset (the last, ``N``, falls past the nodes). An empty graph (a repeated
    offset) adds two ones at one node and is skipped, as it should be. Not ``repeat_interleave``
    or ``searchsorted``, whose output sizes ONNX takes from the data, and no slice of the
    offsets, which ``torch.export`` would guard to hold two or more: one file serves one graph
    (``graph_ptr = [0, N]``) as it serves many."""
    ones_B1 = torch.ones_like(graph_ptr_B1)
    marks = graph_ptr_B1.new_zeros(num_nodes + 1).index_add(0, graph_ptr_B1, ones_B1)
    return marks.cumsum(0)[:num_nodes] - 1


class GraphServingModel(nn.Module):
    """``forward(x_NF, edge_index_2E, graph_ptr_B1[, edge_attr_ED]) -> [B, C]``: a trained
    graph-level model (:class:`~shardgnn.nn.graphlevel.GraphGNN`, ``level="graph"``) over a batch
    of graphs given as their disjoint union: the nodes of graph ``b`` are rows
    ``graph_ptr_B1[b]:graph_ptr_B1[b + 1]``; a model reading edge features (GINE) takes their rows
    in ``edge_index`` order. One row of outputs per graph (its logits or predicted values), what
    ``shardgnn infer`` writes to ``logits.npy``."""

    def __init__(self, model: nn.Module, edge_dim: int = 0):
        super().__init__()
        assert model.level == "graph", "a graph-level model"
        self.model, self.edge_dim = model, edge_dim
        self.input_names = ("x", "edge_index", "graph_ptr") + ("edge_attr",) * bool(edge_dim)

    def forward(
        self,
        x_NF: torch.Tensor,
        edge_index_2E: torch.Tensor,
        graph_ptr_B1: torch.Tensor,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> torch.Tensor:
        graph = EdgeListGraph(edge_index_2E, x_NF.shape[0], edge_attr_ED)
        graph_index_N = graph_index_of(graph_ptr_B1, x_NF.shape[0])
        return self.model(graph, x_NF, graph_index_N, graph_ptr_B1.shape[0] - 1, edge_attr_ED)


class EdgeServingModel(nn.Module):
    """``forward(x_NF, edge_index_2E[, edge_attr_ED]) -> [E, C]``: a trained edge-level model
    (:class:`~shardgnn.nn.graphlevel.GraphGNN`, ``level="edge"``) over a graph (or the disjoint
    union of several: the edges never cross graphs), one row of outputs per edge in
    ``edge_index`` order; a model reading edge features takes their rows in that order."""

    def __init__(self, model: nn.Module, edge_dim: int = 0):
        super().__init__()
        assert model.level == "edge", "an edge-level model"
        self.model, self.edge_dim = model, edge_dim
        self.input_names = ("x", "edge_index") + ("edge_attr",) * bool(edge_dim)

    def forward(
        self,
        x_NF: torch.Tensor,
        edge_index_2E: torch.Tensor,
        edge_attr_ED: torch.Tensor | None = None,
    ) -> torch.Tensor:
        graph = EdgeListGraph(edge_index_2E, x_NF.shape[0], edge_attr_ED)
        no_graphs_N = edge_index_2E.new_zeros(x_NF.shape[0])  # the edge head reads no readout
        return self.model(graph, x_NF, no_graphs_N, 1, edge_attr_ED)


class TypedServingModel(nn.Module):
    """A typed node model (R-GCN, heterogeneous SAGE, HGT over typed input rows) on one whole
    typed graph whose nodes are numbered type by type, as in training.

    Inputs: one feature table per featured type (``x_<type>``, ``[N_t, F_t]``: any number of
    that type's nodes, new ones included), then ``edge_index`` (``[2, E]``, ids in the type-by-
    type numbering) and ``edge_type`` (``[E]``, each edge's relation among the graph's own
    ``relations``, reverses excluded: they are added here as in training). Featureless types'
    learnt rows belong to the training graph: they are in the file, and the served graph holds
    exactly the training graph's nodes of those types, in their training order. Output: every
    node's ``[N, C]`` (the labelled type's rows are its predictions)."""

    def __init__(
        self,
        model: nn.Module,
        type_names: list[str],
        learnt: dict[int, torch.Tensor],
        relations: list[tuple[str, str, str]],
    ):
        super().__init__()
        self.model = model
        self.num_types = len(type_names)
        self.featured = [t for t in range(self.num_types) if t not in learnt]
        self.widths = [
            self.model.typed_input.project[str(t)].in_features if t in self.featured else 0
            for t in range(self.num_types)
        ]
        self.type_names, self.relations = list(type_names), [tuple(rel) for rel in relations]
        self.relation_types = [(type_names.index(s), type_names.index(d)) for s, _, d in relations]
        for t, rows in learnt.items():
            self.register_buffer(f"learnt_{t}", rows.detach().clone())
        names = [re.sub(r"\W", "_", type_names[t]) for t in self.featured]
        self.input_names = (*(f"x_{name}" for name in names), "edge_index", "edge_type")
        self.edge_dim = 0

    def learnt(self) -> dict[int, torch.Tensor]:
        """Featureless type -> its learnt rows."""
        return {
            t: getattr(self, f"learnt_{t}") for t in range(self.num_types) if t not in self.featured
        }

    def type_sizes(self, featured: int | list[int]) -> list[int]:
        """Nodes of every type: ``featured`` of each featured type (one count, or one each), the
        featureless types' learnt rows."""
        counts = iter(featured if isinstance(featured, list) else [featured] * len(self.featured))
        learnt = self.learnt()
        return [
            int(learnt[t].shape[0]) if t in learnt else next(counts) for t in range(self.num_types)
        ]

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        *features, edge_index, edge_type = inputs
        by_type, learnt = dict(zip(self.featured, features)), self.learnt()
        x_NI = self.model.typed_input(by_type, learnt)  # training's input rows, type by type
        rows = {**learnt, **by_type}
        types = [
            torch.full((rows[t].shape[0],), t, dtype=torch.int64) for t in range(self.num_types)
        ]
        src_E, dst_E = edge_index[0], edge_index[1]
        r = len(self.relation_types)
        graph = TypedMessageGraph.from_tensors(
            torch.cat([src_E, dst_E]),
            torch.cat([dst_E, src_E]),
            torch.cat([edge_type, edge_type + r]),
            torch.cat(types),
            2 * r,
        )
        return self.model.encoder(graph, x_NI)


def sorted_position(sorted_K: torch.Tensor, key_Q: torch.Tensor, right: bool = False):
    """``torch.searchsorted(sorted_K, key_Q, right=right)`` written out as a binary search of
    fixed steps (``log2 K``), which every serving format captures (ONNX has no such op)."""
    size = int(sorted_K.shape[0])
    lo, hi = torch.zeros_like(key_Q), torch.full_like(key_Q, size)
    if size == 0:
        return lo
    for _ in range(size.bit_length()):
        mid = torch.div(lo + hi, 2, rounding_mode="floor")
        at_Q = sorted_K[mid.clamp(max=size - 1)]
        after = ((at_Q <= key_Q) if right else (at_Q < key_Q)) & (mid < hi)
        lo, hi = torch.where(after, mid + 1, lo), torch.where(after, hi, mid)
    return lo


class KnowledgeGraphServingModel(nn.Module):
    """A knowledge-graph model's answers to queries: the encoder's entity rows (computed once,
    over the training graph, and carried in the file) scored by the decoder.

    Inputs: ``entity`` (int64 ``[Q]``, the query's known entity) and ``relation`` (int64
    ``[Q]``: ``r`` asks for the tail of ``(entity, r, ?)``, ``r + R`` for the head of ``(?, r,
    entity)``, the reciprocal relation training scored head queries with). Output: ``[Q, N]``,
    every entity's score as the answer (higher is likelier); with ``top_k``, the ``K`` best
    entities of each query (int64 ``[Q, K]``, best first) and their scores (``[Q, K]``).

    ``known``: the keys (``relation * N + entity``, sorted) and answers of the graph's known
    triples, one pair per answer; given, a known answer scores ``-inf`` (never among the best
    ``K``: a query with fewer than ``K`` unknown answers ends in ``-inf`` scores). A query finds
    its answers by binary search (:func:`sorted_position`), ``log2`` of the pairs' count steps."""

    def __init__(
        self,
        decoder: nn.Module,
        entities_ND: torch.Tensor,
        relation_names: list[str] = (),
        top_k: int | None = None,
        known: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        super().__init__()
        self.decoder, self.relation_names, self.top_k = decoder, list(relation_names), top_k
        self.register_buffer("entities_ND", entities_ND.detach().clone())
        # the decoder's relation rows: every relation and its reciprocal
        self.num_query_relations = int(next(decoder.parameters()).shape[0])
        self.input_names = ("entity", "relation")
        self.output_names = ("out",) if top_k is None else ("entities", "scores")
        self.edge_dim = 0
        self.filters_known = known is not None
        if known is not None:
            keys_K, answers_K = (torch.from_numpy(np.asarray(a, np.int64)) for a in known)
            self.register_buffer("known_keys_K", keys_K)
            self.register_buffer("known_answers_K", answers_K)

    def known_answers(self, entity_Q: torch.Tensor, relation_Q: torch.Tensor) -> torch.Tensor:
        """``[Q, N]`` bool: True where the entity is a known answer of the query."""
        n, q = self.entities_ND.shape[0], entity_Q.shape[0]
        key_Q = relation_Q * n + entity_Q
        first_Q = sorted_position(self.known_keys_K, key_Q)
        count_Q = sorted_position(self.known_keys_K, key_Q, right=True) - first_Q
        # one (query, answer position) pair per known answer of each query
        device = entity_Q.device
        query_M = torch.repeat_interleave(torch.arange(q, device=device), count_Q)
        rank_M = (
            torch.arange(query_M.shape[0], device=device)
            - (torch.cumsum(count_Q, 0) - count_Q)[query_M]
        )
        known_QN = torch.zeros(q, n, dtype=torch.bool, device=device)
        known_QN[query_M, self.known_answers_K[first_Q[query_M] + rank_M]] = True
        return known_QN

    def scores(
        self, entity_Q: torch.Tensor, relation_Q: torch.Tensor, known_QN: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[Q, N]``: every entity's score as each query's answer; where the file filters,
        known answers score ``-inf`` (``known_QN``, default :meth:`known_answers`)."""
        ent_ND = self.entities_ND
        scores_QN = self.decoder.score_all(ent_ND[entity_Q], relation_Q, ent_ND)
        if self.filters_known:
            if known_QN is None:
                known_QN = self.known_answers(entity_Q, relation_Q)
            scores_QN = scores_QN.masked_fill(known_QN, -torch.inf)
        return scores_QN

    def best(self, scores_QN: torch.Tensor):
        """The file's outputs for the scores ``scores_QN``: themselves, or with ``top_k`` the
        best entities and their scores."""
        if self.top_k is None:
            return scores_QN
        best_QK, where_QK = torch.topk(scores_QN, self.top_k, dim=1)
        return where_QK, best_QK

    def forward(self, entity_Q: torch.Tensor, relation_Q: torch.Tensor):
        return self.best(self.scores(entity_Q, relation_Q))


class WalkServingModel(nn.Module):
    """A SUREL link predictor (:class:`~shardgnn.nn.surel.SURELModel`) scoring queries from
    their endpoints' walks: input ``walks`` (int64 ``[Q, 2, M, L + 1]``: query ``q``'s ``u``'s
    ``M`` walks of ``L`` steps, then ``v``'s, each starting at its endpoint, ``-1`` past a node
    without neighbours, as :func:`~shardgnn.nn.surel.query_walks` over
    :func:`~shardgnn.sampling.walks.node_walks` draws them), output ``[Q]``: each query's logit,
    what ``shardgnn infer --pairs`` writes to ``scores.npy``. Walks are drawn outside the file:
    a random draw is not a function of its inputs, and a serving stack draws them on its own
    graph (node ids only meet each other: any numbering, any graph). The encodings are computed
    by comparison (:func:`~shardgnn.nn.surel.relative_positions_by_comparison`), whose shapes do
    not depend on the walks' values."""

    def __init__(self, model: nn.Module, num_walks: int, walk_length: int):
        super().__init__()
        self.model, self.num_walks, self.walk_length = model, num_walks, walk_length
        self.input_names = ("walks",)
        self.edge_dim = 0

    def forward(self, walks_QSMW: torch.Tensor) -> torch.Tensor:
        return self.model.score(relative_positions_by_comparison(walks_QSMW))


class TemporalServingModel(nn.Module):
    """TGAT (:class:`~shardgnn.nn.temporal.TemporalLinkModel` without memory) embedding query
    nodes at query times from the earlier events sampled around them, hop by hop. Inputs:
    ``seed_time`` (float64 ``[Q]``: each query's time), then per hop ``d`` (``L`` hops, one per
    layer) ``dst_index_d`` (int64 ``[E_d]``: the row of depth ``d`` each sampled event belongs
    to: a query for ``d = 0``, hop ``d - 1``'s event after), ``nbr_time_d`` (float64 ``[E_d]``:
    the event's time, before its row's) and, for a stream with event features, ``event_attr_d``
    (float32 ``[E_d, F]``), as :meth:`~shardgnn.sampling.temporal.TemporalNeighborSampler.\
sample_hops` draws them (:func:`temporal_inputs`). Output ``[Q, D]``: the embeddings (a link
    model's: its predictor scores pairs of them) or, for dynamic node classification, the class
    logits. Events are sampled outside the file, as a SUREL model's walks: a random draw is not
    a function of its inputs, and a serving stack samples its own stream. Times stay float64, as
    training reads them: Unix seconds lose their last digits in float32."""

    def __init__(self, model: nn.Module, fanouts: tuple[int, ...], mode: str, classify: bool):
        super().__init__()
        self.model, self.fanouts, self.mode, self.classify = model, tuple(fanouts), mode, classify
        self.layers = len(model.attention)
        first = model.attention[0].lin_edge
        self.event_dim = 0 if first is None else int(first.weight.shape[1])
        per_hop = ("dst_index", "nbr_time") + (("event_attr",) if self.event_dim else ())
        self.input_names = ("seed_time",) + tuple(
            f"{name}_{d}" for d in range(self.layers) for name in per_hop
        )
        self.edge_dim = 0

    def forward(self, seed_time_Q: torch.Tensor, *hops: torch.Tensor) -> torch.Tensor:
        per_hop = len(hops) // self.layers
        index = [hops[d * per_hop] for d in range(self.layers)]
        nbr_times = [hops[d * per_hop + 1] for d in range(self.layers)]
        if self.event_dim:
            attr = [hops[d * per_hop + 2] for d in range(self.layers)]
        else:
            attr = [t.new_zeros((t.shape[0], 0), dtype=torch.float32) for t in nbr_times]
        width = self.model.input_dim
        h = [seed_time_Q.new_zeros((seed_time_Q.shape[0], width), dtype=torch.float32)]
        h += [t.new_zeros((t.shape[0], width), dtype=torch.float32) for t in nbr_times]
        z_QD = self.model.attend_hops(h, index, [seed_time_Q, *nbr_times[:-1]], nbr_times, attr)
        return self.model.classify(z_QD) if self.classify else z_QD


def temporal_inputs(
    hops: list, seed_time_Q: np.ndarray, event_feat_EF: np.ndarray | None
) -> tuple[torch.Tensor, ...]:
    """:class:`TemporalServingModel`'s inputs from the hops
    :meth:`~shardgnn.sampling.temporal.TemporalNeighborSampler.sample_hops` drew
    (:class:`~shardgnn.sampling.temporal.TemporalHop`) and the served stream's event features
    (``None``: a stream without them)."""
    inputs = [torch.from_numpy(np.ascontiguousarray(seed_time_Q, dtype=np.float64))]
    for hop in hops:
        tensors = HopTensors.of(hop, torch.device("cpu"))
        inputs += [tensors.dst_index, tensors.nbr_times.to(torch.float64)]
        if event_feat_EF is not None:
            rows = np.asarray(event_feat_EF, dtype=np.float32)[hop.eids]
            inputs.append(torch.from_numpy(np.ascontiguousarray(rows)))
    return tuple(inputs)


class MemoryServingModel(nn.Module):
    """TGN or JODIE (:class:`~shardgnn.nn.temporal.TemporalLinkModel` with memory) as one
    function of the memory it reads: the memory is the serving stack's (:class:`ServedMemory`
    keeps it as evaluation does), the file holds the weights. One call applies the messages of
    ``B`` nodes' latest events to their memory, then embeds ``Q`` queries among them.

    Inputs, for ``B`` nodes: ``memory`` (float32 ``[B, M]``) and ``last_update`` (float64
    ``[B]``), each one's message (``has_message``, bool ``[B]``; ``message_memory``, the other
    endpoint's memory ``[B, M]``; ``message_time``, float64 ``[B]``; ``message_attr``, the
    event's features ``[B, F]``, for a stream with them: rows without a message are read as
    none); ``query_index`` (int64 ``[Q]``, rows of ``B``); JODIE: ``query_time`` (float64
    ``[Q]``: memory projected to it); TGN: the queries' recent events, ``nbr_index`` (int64
    ``[E]``: the other endpoint's row of ``B``), ``seed_index`` (int64 ``[E]``: the query's row
    of ``Q``), ``event_time`` (float64 ``[E]``), ``event_attr`` (``[E, F]``). Outputs: ``out``
    ``[Q, D]`` (embeddings, or a node classifier's logits), ``memory_out`` and
    ``last_update_out``: the ``B`` rows after the messages (unchanged without one).

    Evaluation applies a batch's events after scoring it, so a serving stack calls the file
    twice per batch: to embed (no message) and to apply (no query)."""

    output_names = ("out", "memory_out", "last_update_out")

    def __init__(self, model: nn.Module, classify: bool, recent: int):
        super().__init__()
        assert model.memory is not None, model.kind
        self.model, self.kind, self.classify = model, model.kind, classify
        self.recent = recent  # TGN: the latest events per query that training attended over
        self.memory_dim = model.memory.dim
        self.event_dim = model.memory.gru.input_size - 2 * self.memory_dim - model.time_encoder.dim
        attr = ("message_attr",) if self.event_dim else ()
        names = ("memory", "last_update", "has_message", "message_memory", "message_time")
        names += attr + ("query_index",)
        if self.kind == "jodie":
            names += ("query_time",)
        else:
            names += ("nbr_index", "seed_index", "event_time")
            names += ("event_attr",) if self.event_dim else ()
        self.input_names = names
        self.edge_dim = 0

    def forward(self, memory_BM, last_B, has_B, message_memory_BM, message_time_B, *rest):
        rest = list(rest)
        # no features: zero columns, sliced so that the rows stay symbolic when traced
        attr_BF = rest.pop(0) if self.event_dim else message_memory_BM[:, :0]
        memory = self.model.memory
        message_BF = memory.message(memory_BM, last_B, message_memory_BM, message_time_B, attr_BF)
        # one GRU step for the rows with a message (evaluation applies no other)
        has_B1 = has_B.unsqueeze(1)
        memory_BM = torch.where(has_B1, memory.gru(message_BF, memory_BM), memory_BM)
        last_B = torch.where(has_B, message_time_B, last_B)
        query_Q = rest.pop(0)
        if self.kind == "jodie":
            z_QD = self.model.embed_projected(memory_BM[query_Q], last_B[query_Q], rest[0])
        else:
            nbr_E, seed_E, time_E = rest[:3]
            attr_EF = rest[3] if self.event_dim else time_E.unsqueeze(1)[:, :0].float()
            z_QD = self.model.attend_recent(
                memory_BM[query_Q], memory_BM, last_B, nbr_E, seed_E, time_E, attr_EF
            )
        out = self.model.classify(z_QD) if self.classify else z_QD
        return out, memory_BM, last_B


class ServedMemory:
    """What a serving stack keeps for a :class:`MemoryServingModel` file, and the inputs it
    builds for it: every node's memory and last update (zeros: a stream's start), as
    ``shardgnn train`` evaluates a stream.

    Per batch of events (in time order), :meth:`embed_inputs` of the queried nodes (TGN: with
    their recent events before the batch, as
    :meth:`~shardgnn.sampling.temporal.TemporalNeighborSampler.recent_subgraph` samples them),
    run the file, then :meth:`apply_inputs` of the batch's events, run the file, and
    :meth:`store` its ``memory_out`` and ``last_update_out``."""

    def __init__(self, num_nodes: int, memory_dim: int, event_dim: int, kind: str):
        self.memory_NM = torch.zeros(num_nodes, memory_dim)
        self.last_N = torch.zeros(num_nodes, dtype=torch.float64)
        self.event_dim, self.kind = event_dim, kind
        self.n_id_B = torch.zeros(0, dtype=torch.int64)

    def call_inputs(
        self,
        n_id_B: torch.Tensor,
        message: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None],
        query_Q: torch.Tensor,
        query_time_Q: torch.Tensor | None = None,
        recent: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """The inputs of one call over rows ``n_id_B`` (their memory as stored), in the file's
        order: ``message`` = ``(has_message [B], other endpoint's memory [B, M], time [B],
        features [B, F] or None)``; queries ``query_Q`` (rows of ``n_id_B``), JODIE's at
        ``query_time_Q``, TGN's over ``recent`` = ``(edge_index [2, E]`` (neighbour's row of
        ``n_id_B``, query's of ``query_Q``), ``event_time [E]``, ``event_attr [E, F]`` or
        None). :meth:`store` keeps what the call returns for these rows."""
        has_B, other_BM, time_B, attr_BF = message
        inputs = [self.memory_NM[n_id_B], self.last_N[n_id_B], has_B, other_BM]
        inputs.append(time_B.to(torch.float64))
        if self.event_dim:
            if attr_BF is None:
                raise ValueError(f"the file reads {self.event_dim} features an event: give them")
            inputs.append(attr_BF.float())
        inputs.append(query_Q)
        if self.kind == "jodie":
            if query_time_Q is None:
                raise ValueError("a jodie file embeds its queries at query_time_Q: give it")
            inputs.append(query_time_Q.to(torch.float64))
        else:
            if recent is None:
                raise ValueError("a tgn file embeds its queries over their recent events")
            edge_index_2E, time_E, attr_EF = recent
            inputs += [edge_index_2E[0], edge_index_2E[1], time_E.to(torch.float64)]
            if self.event_dim:
                if attr_EF is None:
                    raise ValueError(f"the file reads {self.event_dim} features an event")
                inputs.append(attr_EF.float())
        self.n_id_B = n_id_B
        return tuple(inputs)

    def embed_inputs(
        self,
        n_id_B: torch.Tensor,
        num_queries: int,
        query_time_Q: torch.Tensor | None = None,
        recent: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """The inputs embedding the first ``num_queries`` nodes of ``n_id_B`` (no message):
        JODIE at ``query_time_Q``; TGN over ``recent`` (:meth:`call_inputs`)."""
        b = n_id_B.shape[0]
        none = (
            torch.zeros(b, dtype=torch.bool),
            torch.zeros(b, self.memory_NM.shape[1]),
            torch.zeros(b, dtype=torch.float64),
            torch.zeros(b, self.event_dim),
        )
        return self.call_inputs(n_id_B, none, torch.arange(num_queries), query_time_Q, recent)

    def apply_inputs(
        self,
        src_P: torch.Tensor,
        dst_P: torch.Tensor,
        t_P: torch.Tensor,
        attr_PF: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """The inputs applying ``P`` events (in time order) to their endpoints' memory: each
        endpoint's latest event of them, the other endpoint's memory as stored before
        (``attr_PF``: their features, on a stream with them); no query."""
        n_id_B, last = latest_events(src_P, dst_P)
        event = last % src_P.shape[0]
        message = (
            torch.ones(n_id_B.shape[0], dtype=torch.bool),
            self.memory_NM[torch.cat([dst_P, src_P])[last]],
            t_P[event],
            None if attr_PF is None else attr_PF[event],
        )
        no_query = torch.zeros(0, dtype=torch.int64)
        recent = (
            torch.zeros(2, 0, dtype=torch.int64),
            torch.zeros(0, dtype=torch.float64),
            torch.zeros(0, self.event_dim),
        )
        return self.call_inputs(
            n_id_B, message, no_query, torch.zeros(0, dtype=torch.float64), recent
        )

    def store(self, memory_out_BM: torch.Tensor, last_update_out_B: torch.Tensor) -> None:
        """Keep what the file returned for the rows of the last inputs built."""
        self.memory_NM[self.n_id_B] = memory_out_BM.detach()
        self.last_N[self.n_id_B] = last_update_out_B.detach()

    @torch.no_grad()
    def replay(
        self,
        run: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        src_P: torch.Tensor | np.ndarray,
        dst_P: torch.Tensor | np.ndarray,
        t_P: torch.Tensor | np.ndarray,
        attr_PF: torch.Tensor | np.ndarray | None = None,
        batch: int = 200,
    ) -> None:
        """Bring the memory up to date with events already seen (the training stream, say), so
        that serving goes on from where they end rather than from a stream's start: apply them to
        the memory through the file ``run``, ``batch`` events at a time (in time order, the
        batch size the stream is served with: a node's message is its latest event of a batch).
        The events may be tensors or NumPy arrays.
        Embedding a batch leaves the memory as it is, so this is the memory serving every batch
        (embedded, then applied) would leave."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"replay batch is {batch!r}: give a whole number of events, 1 or more")
        lengths = [len(a) for a in (src_P, dst_P, t_P, attr_PF) if a is not None]
        if len(set(lengths)) > 1:
            raise ValueError(
                f"replayed events: src, dst, t, attr have {lengths} rows: give one each"
            )
        src, dst, t = event_arrays(src_P, dst_P, t_P, "replayed events")
        check_edge_range(src, dst, self.memory_NM.shape[0])
        if t.size and t[0] < float(self.last_N.max()):
            raise ValueError(
                "replayed events are not in time order after the memory's latest update "
                f"({float(self.last_N.max()):g}): replay them before serving newer events"
            )
        src_P, dst_P, t_P = (torch.from_numpy(a) for a in (src, dst, t))
        if attr_PF is not None:
            attr_PF = torch.as_tensor(attr_PF)
        for lo in range(0, t_P.shape[0], batch):
            hi = lo + batch
            attr = None if attr_PF is None else attr_PF[lo:hi]
            _, memory_out, last_out = run(
                *self.apply_inputs(src_P[lo:hi], dst_P[lo:hi], t_P[lo:hi], attr)
            )
            self.store(memory_out, last_out)
