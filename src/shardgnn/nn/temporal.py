"""Continuous-time temporal GNNs for link prediction: TGN, JODIE-style memory, TGAT.

* :class:`TimeEncoder`: ``cos(w * dt + b)`` with learnt ``w, b`` (TGAT's functional encoding).
* :class:`TemporalAttention`: multi-head attention of a destination over its sampled events,
  keys and values carrying the event's features and time encoding (TGN's graph attention
  embedding; the maths of PyG's ``TransformerConv`` with ``edge_dim``, tested equal to it).
* :class:`NodeMemory`: TGN's memory: a vector per node, updated by a GRU from the node's last
  message (identity message ``[s_v, s_u, e, phi(t - t_v)]``, last-message aggregator).
* :class:`TemporalLinkModel`: memory and/or an embedding module, then a link predictor.

Memory semantics (those of PyG's ``TGNMemory``, which the benchmark compares against): an event
is *pending* for its endpoints until the next batch that touches them. In training, reading a
node's memory applies its pending message through the GRU (so the loss trains the GRU and the
message inputs), and a batch's events become pending only after the batch is scored: a batch's
predictions never see its own events. In evaluation (no gradient), a batch's events are applied
at once after scoring. :meth:`NodeMemory.flush` applies everything pending (the switch from
training to evaluation).

Shape legend: ``N`` nodes, ``B`` nodes of a batch's subgraph, ``E`` sampled events, ``P`` pairs,
``M`` memory width, ``T`` time-encoding width, ``F`` event-feature width, ``H`` heads, ``C``
channels per head.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from shardgnn.nn.functional import segment_softmax
from shardgnn.sampling.temporal import TemporalHop


class TimeEncoder(nn.Module):
    """``phi(dt) = cos(dt * w + b)``, ``[*] -> [*, T]``."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.lin = nn.Linear(1, dim)

    def forward(self, dt: torch.Tensor) -> torch.Tensor:
        # An outer product, not a K=1 matmul (3x cheaper on CPU, forward and backward), in
        # float32, multiplied and added as two roundings: on gaps of 1e5 s and more one
        # rounding of the argument is a sizeable angle, and a fused multiply-add (addcmul's
        # AVX2/AVX-512 kernels, a K=1 GEMM) rounds once where ONNX Runtime's Mul and Add, and
        # every kernel build of ATen's mul and add, round twice (BENCHMARKS.md, 30)
        dt = dt.to(self.lin.weight.dtype).unsqueeze(-1)
        return torch.cos(dt * self.lin.weight.view(-1) + self.lin.bias)


class TemporalAttention(nn.Module):
    """Attention of each destination over its in-events: ``q = W_q x_dst``,
    ``k = W_k x_src + W_e a``, ``v = W_v x_src + W_e a`` (``a``: the event's attributes),
    softmax of ``q.k / sqrt(C)`` over each destination's events, attention dropout, heads
    concatenated, plus a skip ``W_s x_dst``."""

    def __init__(self, in_dim: int, out_dim: int, edge_dim: int, heads: int = 2, dropout=0.1):
        super().__init__()
        if out_dim % heads:
            raise ValueError(f"attention width {out_dim} must be a multiple of heads {heads}")
        self.heads, self.channels, self.dropout = heads, out_dim // heads, dropout
        self.lin_query = nn.Linear(in_dim, out_dim)
        self.lin_key = nn.Linear(in_dim, out_dim)
        self.lin_value = nn.Linear(in_dim, out_dim)
        # no attributes (a featureless stream under TGAT): keys and values are the sources'
        self.lin_edge = nn.Linear(edge_dim, out_dim, bias=False) if edge_dim else None
        self.lin_skip = nn.Linear(in_dim, out_dim)

    def forward(
        self,
        x_dst_DF: torch.Tensor,
        x_src_SF: torch.Tensor,
        src_E: torch.Tensor | None,
        dst_E: torch.Tensor,
        attr_EA: torch.Tensor,
    ) -> torch.Tensor:
        """``[D, heads * C]``: destination ``i`` attends over the events ``e`` with
        ``dst_E[e] == i``, whose source is row ``src_E[e]`` of ``x_src_SF`` (``None``: row
        ``e``) and whose attributes are ``attr_EA[e]``."""
        H, C, D = self.heads, self.channels, x_dst_DF.shape[0]
        # keys and values in one product over the source rows, then one gather per event:
        # sources repeat across events (a node is many seeds' neighbour)
        weight = torch.cat([self.lin_key.weight, self.lin_value.weight])
        bias = torch.cat([self.lin_key.bias, self.lin_value.bias])
        kv_S2HC = F.linear(x_src_SF, weight, bias).view(-1, 2, H, C)
        kv_E2HC = kv_S2HC if src_E is None else kv_S2HC.index_select(0, src_E)
        key_EHC, value_EHC = kv_E2HC[:, 0], kv_E2HC[:, 1]
        if self.lin_edge is not None:
            edge_EHC = self.lin_edge(attr_EA).view(-1, H, C)
            key_EHC, value_EHC = key_EHC + edge_EHC, value_EHC + edge_EHC
        query_EHC = self.lin_query(x_dst_DF).view(D, H, C).index_select(0, dst_E)
        logit_EH = (query_EHC * key_EHC).sum(-1) / math.sqrt(C)
        alpha_EH = F.dropout(segment_softmax(logit_EH, dst_E, D), self.dropout, self.training)
        out_DHC = x_dst_DF.new_zeros(D, H, C).index_add_(
            0, dst_E, value_EHC * alpha_EH.unsqueeze(-1)
        )
        return out_DHC.reshape(D, H * C) + self.lin_skip(x_dst_DF)


@dataclasses.dataclass
class MemoryState:
    """What a node's memory update needs, for ``B`` nodes: their memory and last update, and
    their pending event (``other_B``: the other endpoint, -1 for none; its time and id)."""

    memory_BM: torch.Tensor
    last_B: torch.Tensor
    other_B: torch.Tensor
    time_B: torch.Tensor
    event_B: torch.Tensor


class MemoryRows(nn.Module):
    """The per-node buffers of :class:`NodeMemory` (one row per node held here): ``memory``
    ``[rows, M]``, ``last_update`` (time of the last applied message), the pending event
    (``pending_other``: the other endpoint, -1: none; ``pending_time``; ``pending_event``) and
    ``node_ids``, the rows' original node ids.

    In a state dict ``pending_other`` holds original node ids (in the module, the ids of the
    partition it trains on), so that a checkpoint of one partition re-shards onto another by
    original id (:func:`~shardgnn.train.checkpoint.reshard`): ``orig_ids`` maps every node id
    of this process to its original id (None: the same ids).
    """

    def __init__(self, first: int, rows: int, dim: int, orig_ids: np.ndarray | None = None):
        super().__init__()
        self.orig_ids = None if orig_ids is None else np.asarray(orig_ids, dtype=np.int64)
        self._new_of_orig: np.ndarray | None = None
        ids = np.arange(first, first + rows, dtype=np.int64)
        node_ids = ids if self.orig_ids is None else self.orig_ids[ids]
        self.register_buffer("memory", torch.zeros(rows, dim))
        self.register_buffer("last_update", torch.zeros(rows, dtype=torch.float64))
        self.register_buffer("pending_other", torch.full((rows,), -1, dtype=torch.int64))
        self.register_buffer("pending_time", torch.zeros(rows, dtype=torch.float64))
        self.register_buffer("pending_event", torch.zeros(rows, dtype=torch.int64))
        self.register_buffer("node_ids", torch.from_numpy(node_ids))

    def _translate(self, other: torch.Tensor, to_orig: bool) -> torch.Tensor:
        """``other`` (node ids, -1 for none) in original ids (``to_orig``) or back."""
        if self.orig_ids is None:
            return other
        if to_orig:
            table = self.orig_ids
        else:
            if self._new_of_orig is None:
                self._new_of_orig = np.empty_like(self.orig_ids)
                self._new_of_orig[self.orig_ids] = np.arange(self.orig_ids.shape[0])
            table = self._new_of_orig
        ids = other.cpu().numpy()
        out = ids.copy()
        some = ids >= 0
        out[some] = table[ids[some]]
        return torch.from_numpy(out).to(other.device)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        key = prefix + "pending_other"
        destination[key] = self._translate(destination[key].detach(), to_orig=True)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "pending_other"
        if key in state_dict:
            state_dict[key] = self._translate(state_dict[key], to_orig=False)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def latest_events(src_P: torch.Tensor, dst_P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The endpoints of ``P`` events in event order (TGN's last-message aggregator keeps each
    node's latest): ``(n_id, last)``, the distinct endpoints, sorted, and the entry of ``[src_P;
    dst_P]`` of each one's latest event (entry ``i`` is event ``i % P``, the node its source for
    ``i < P``, its destination after)."""
    n_id, inverse = torch.unique(torch.cat([src_P, dst_P]), return_inverse=True)
    # entry i is event i % P (events come in time order, ties in time in event order), so the
    # key 2 * (i % P) + (i // P) orders a node's entries by event; the highest key is its latest
    p = src_P.shape[0]
    key = torch.arange(2 * p, device=src_P.device)
    key = 2 * (key % p) + key // p
    top = torch.full_like(n_id, -1).scatter_reduce(0, inverse, key, "amax")
    return n_id, top // 2 + (top % 2) * p


class NodeMemory(nn.Module):
    """TGN's memory of the nodes held here (see the module docstring for when messages apply).

    Its per-node buffers (:class:`MemoryRows`, ``held``; part of the state dict, so the best
    epoch's weights come with the memory they produced) hold global ids ``[first, first +
    rows)``: all ``N`` in one process, the owner's part when sharded.

    Args:
        num_nodes: ``N``.
        dim: ``M``.
        time_encoder: shared with the embedding module (as TGN and PyG's example do).
        event_feat_EF: every event's features (``[E, 0]`` for none): messages read rows of it.
        first, rows: the global ids held here (default: all).
        orig_ids: every global id's original node id (default: the same).
    """

    def __init__(
        self,
        num_nodes: int,
        dim: int,
        time_encoder: TimeEncoder,
        event_feat_EF: torch.Tensor,
        *,
        first: int = 0,
        rows: int | None = None,
        orig_ids: np.ndarray | None = None,
    ):
        super().__init__()
        self.num_nodes, self.dim = num_nodes, dim
        self.first = first
        self.rows = num_nodes - first if rows is None else rows
        self.time_encoder = time_encoder
        self.event_feat_EF = event_feat_EF  # data, not state: not a buffer
        message_dim = 2 * dim + event_feat_EF.shape[1] + time_encoder.dim
        self.gru = nn.GRUCell(message_dim, dim)
        self.held = MemoryRows(first, self.rows, dim, orig_ids)

    # the held rows' buffers, by the names the updates use
    memory = property(lambda self: self.held.memory)
    last_update = property(lambda self: self.held.last_update)
    pending_other = property(lambda self: self.held.pending_other)
    pending_time = property(lambda self: self.held.pending_time)
    pending_event = property(lambda self: self.held.pending_event)

    def reset(self) -> None:
        """Empty memory (the start of a pass over the events)."""
        self.memory.zero_()
        self.last_update.zero_()
        self.pending_other.fill_(-1)
        self.pending_time.zero_()
        self.pending_event.zero_()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the buffers (evaluation streams events through a copy and restores)."""
        return {name: buf.clone() for name, buf in self.named_buffers()}

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        for name, buf in self.named_buffers():
            buf.copy_(snapshot[name])

    def state(self, n_id_B: torch.Tensor) -> MemoryState:
        """The held rows of global ids ``n_id_B``."""
        local = n_id_B - self.first
        return MemoryState(
            self.memory[local],
            self.last_update[local],
            self.pending_other[local],
            self.pending_time[local],
            self.pending_event[local],
        )

    def step(self, state: MemoryState, other_memory_RM: torch.Tensor) -> tuple:
        """``(memory [B, M], last_update [B])`` after one GRU step on each node's pending
        message ``[s_v, s_u, e, phi(t - t_v)]`` (``other_memory_RM``: ``s_u`` of the nodes with
        one, in order); nodes without one take the step on a zero message, as TGN.
        Differentiable in the GRU and the time encoder."""
        has_B = state.other_B >= 0
        rows = torch.nonzero(has_B).squeeze(1)
        message_BF = state.memory_BM.new_zeros(state.memory_BM.shape[0], self.gru.input_size)
        if rows.numel():
            message = self.message(
                state.memory_BM[rows],
                state.last_B[rows],
                other_memory_RM,
                state.time_B[rows],
                self.event_feat_EF[state.event_B[rows]],
            )
            message_BF = message_BF.index_copy(0, rows, message)
        memory_BM = self.gru(message_BF, state.memory_BM)
        return memory_BM, torch.where(has_B, state.time_B, state.last_B)

    def message(
        self,
        memory_RM: torch.Tensor,
        last_R: torch.Tensor,
        other_memory_RM: torch.Tensor,
        time_R: torch.Tensor,
        attr_RF: torch.Tensor,
    ) -> torch.Tensor:
        """TGN's identity message ``[s_v, s_u, e, phi(t - t_v)]`` ``[R, 2M + F + T]`` of ``R``
        nodes' events (times float64: exact on Unix seconds)."""
        return torch.cat(
            [memory_RM, other_memory_RM, attr_RF, self.time_encoder(time_R - last_R)], dim=1
        )

    def updated(self, n_id_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(memory [B, M], last_update [B])`` of held nodes ``n_id_B`` with their pending
        messages applied (:meth:`step`), without storing it (one process: every other endpoint
        is held here too)."""
        state = self.state(n_id_B)
        others = state.other_B[state.other_B >= 0]
        return self.step(state, self.memory[others - self.first])

    def read(self, n_id_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The memory a batch's model sees: :meth:`updated` in training, the stored memory in
        evaluation (where every event was applied after its batch)."""
        if self.training:
            return self.updated(n_id_B)
        local = n_id_B - self.first
        return self.memory[local], self.last_update[local]

    def store(self, n_id_B: torch.Tensor, memory_BM: torch.Tensor, last_B: torch.Tensor) -> None:
        """Write ``memory_BM`` (detached) for held ``n_id_B``; their pending messages are
        consumed."""
        local = n_id_B - self.first
        self.memory[local] = memory_BM.detach()
        self.last_update[local] = last_B
        self.pending_other[local] = -1

    def observe(
        self, src_P: torch.Tensor, dst_P: torch.Tensor, t_P: torch.Tensor, eid_P: torch.Tensor
    ) -> torch.Tensor:
        """Make a scored batch's events (in event order) pending: each held endpoint keeps its
        latest event of the batch (the last-message aggregator: earlier ones would never be
        read). Returns the batch's held nodes (unique)."""
        others = torch.cat([dst_P, src_P])
        events = torch.cat([eid_P, eid_P])
        n_id, last = latest_events(src_P, dst_P)
        held = (n_id >= self.first) & (n_id < self.first + self.rows)
        n_id, last = n_id[held], last[held]
        local = n_id - self.first
        self.pending_other[local] = others[last]
        self.pending_event[local] = events[last]
        self.pending_time[local] = torch.cat([t_P, t_P])[last]
        return n_id

    @torch.no_grad()
    def apply_pending(self, n_id_B: torch.Tensor) -> None:
        """Apply the pending messages of held ``n_id_B`` and store the result."""
        self.store(n_id_B, *self.updated(n_id_B))

    @torch.no_grad()
    def flush(self) -> None:
        """Apply every node's pending message (as PyG's switch to evaluation: every node takes a
        GRU step, with a zero message when none is pending)."""
        self.apply_pending(self.held_ids())

    def held_ids(self) -> torch.Tensor:
        return torch.arange(self.first, self.first + self.rows, device=self.memory.device)


class LinkPredictor(nn.Module):
    """``score(u, v) = w . relu(W_s z_u + W_d z_v) + b`` (TGN's link decoder)."""

    def __init__(self, dim: int):
        super().__init__()
        self.lin_src = nn.Linear(dim, dim)
        self.lin_dst = nn.Linear(dim, dim)
        self.lin_out = nn.Linear(dim, 1)

    def forward(self, z_src_PD: torch.Tensor, z_dst_PD: torch.Tensor) -> torch.Tensor:
        return self.lin_out(F.relu(self.lin_src(z_src_PD) + self.lin_dst(z_dst_PD))).squeeze(-1)

    def score_against(self, z_src_PD: torch.Tensor, z_dst_KPD: list[torch.Tensor]) -> torch.Tensor:
        """``[K, P]``: ``score(u_i, v_i)`` for each of ``K`` destination sets, the sources'
        transform computed once and the destinations' in one product."""
        k, p = len(z_dst_KPD), z_src_PD.shape[0]
        dst_KPD = self.lin_dst(torch.cat(z_dst_KPD)).view(k, p, -1)
        return self.lin_out(F.relu(self.lin_src(z_src_PD).unsqueeze(0) + dst_KPD)).squeeze(-1)


@dataclasses.dataclass
class HopTensors:
    """One hop of temporal sampling as the tensors :meth:`TemporalLinkModel.embed_hops` reads:
    per sampled event its seed's row (``dst_index``), the seed's time, and the event's other
    endpoint, time and id."""

    dst_index: torch.Tensor
    dst_times: torch.Tensor
    nbr: torch.Tensor
    nbr_times: torch.Tensor
    eids: torch.Tensor

    @classmethod
    def of(cls, hop: TemporalHop, device: torch.device) -> "HopTensors":
        counts = np.diff(hop.offsets)
        return cls(
            dst_index=torch.from_numpy(np.repeat(np.arange(counts.size), counts)).to(device),
            dst_times=torch.from_numpy(hop.dst_times).to(device),
            nbr=torch.from_numpy(hop.nbr).to(device),
            nbr_times=torch.from_numpy(hop.nbr_times).to(device),
            eids=torch.from_numpy(hop.eids).to(device),
        )


class LearntRows(nn.Embedding):
    """TGAT's learnt row per node: one table, every node's row on every worker (trained densely,
    kept equal by the gradient all-reduce), in the order of the partition's node ids, with
    ``node_ids``, each row's original node id: a checkpoint of one partition resumes on another
    (:func:`~shardgnn.train.checkpoint.reshard` puts the rows in the new order)."""

    def __init__(self, num_nodes: int, dim: int, orig_ids: np.ndarray | None = None):
        super().__init__(num_nodes, dim)
        ids = np.arange(num_nodes) if orig_ids is None else np.asarray(orig_ids)[:num_nodes]
        self.register_buffer("node_ids", torch.from_numpy(ids.astype(np.int64)))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a checkpoint from before the table named its rows holds them in this order
        state_dict.setdefault(prefix + "node_ids", self.node_ids.clone())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class TemporalLinkModel(nn.Module):
    """A temporal link-prediction model: node memory (``tgn``, ``jodie``) and an embedding of a
    batch's nodes at the batch's time, scored in pairs by :class:`LinkPredictor`.

    * ``tgn``: memory, then one :class:`TemporalAttention` over each node's most recent events
      (attributes: ``phi(t_u - t_e)`` and the event's features).
    * ``jodie``: memory projected to the query time, ``(1 + w * dt / scale) * s_v`` (JODIE's
      projection; ``scale``: the training events' mean gap per node, so ``dt`` is O(1)).
    * ``tgat``: no memory; ``layers`` of attention over uniformly sampled earlier events, each
      hop continuing from the event's time (TGAT). Its input rows are zeros (as TGAT on graphs
      without node features: it then learns from event features and times only), or with
      ``node_rows > 0`` a learnt row per node (trained densely with the model: the graphs one
      process trains on are small enough).

    ``memory_rows``: ``(first, rows)``, the global ids whose memory this process holds (the
    owner's part when memory is sharded; default all); ``orig_ids``: every global id's original
    node id (default: the same; :class:`MemoryRows`).
    """

    def __init__(
        self,
        kind: str,
        num_nodes: int,
        event_feat_EF: torch.Tensor,
        *,
        memory_dim: int = 100,
        time_dim: int = 100,
        embedding_dim: int = 100,
        heads: int = 2,
        dropout: float = 0.1,
        layers: int = 1,
        time_scale: float = 1.0,
        node_rows: int = 0,
        memory_rows: tuple[int, int] | None = None,
        orig_ids: np.ndarray | None = None,
        num_classes: int = 0,
    ):
        super().__init__()
        assert kind in ("tgn", "jodie", "tgat"), kind
        self.kind = kind
        self.time_encoder = TimeEncoder(time_dim)
        feat_dim = event_feat_EF.shape[1]
        self.memory: NodeMemory | None = None
        if kind in ("tgn", "jodie"):
            first, rows = memory_rows or (0, num_nodes)
            self.memory = NodeMemory(
                num_nodes,
                memory_dim,
                self.time_encoder,
                event_feat_EF,
                first=first,
                rows=rows,
                orig_ids=orig_ids,
            )
        self.event_feat_EF = event_feat_EF
        if kind == "tgn":
            self.attention = nn.ModuleList(
                [TemporalAttention(memory_dim, embedding_dim, time_dim + feat_dim, heads, dropout)]
            )
        elif kind == "tgat":
            self.input_dim = node_rows or embedding_dim
            self.node_rows = LearntRows(num_nodes, node_rows, orig_ids) if node_rows else None
            self.attention = nn.ModuleList(
                TemporalAttention(
                    (self.input_dim if layer == 0 else embedding_dim) + time_dim,
                    embedding_dim,
                    feat_dim,
                    heads,
                    dropout,
                )
                for layer in range(layers)
            )
        else:
            embedding_dim = memory_dim
            self.projection = nn.Linear(1, memory_dim, bias=False)
            nn.init.normal_(self.projection.weight, 0.0, 0.1)  # JODIE: starts near identity
            # a buffer: the file `shardgnn export` writes divides by it without the stream
            self.register_buffer("time_scale", torch.tensor(float(time_scale), dtype=torch.float64))
        self.predictor = LinkPredictor(embedding_dim)
        # dynamic node classification: TGN's MLP decoder over the source's embedding
        self.num_classes = num_classes
        self.classifier = (
            nn.Sequential(
                nn.Linear(embedding_dim, embedding_dim),
                nn.ReLU(),
                nn.Dropout(dropout),
                nn.Linear(embedding_dim, num_classes),
            )
            if num_classes
            else None
        )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a jodie checkpoint from before its time scale was a buffer: the stream's, as computed
        if self.kind == "jodie":
            state_dict.setdefault(prefix + "time_scale", self.time_scale.clone())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def embed_recent(
        self,
        memory_BM: torch.Tensor,
        last_B: torch.Tensor,
        edge_index_2E: torch.Tensor,
        event_E: torch.Tensor,
        event_time_E: torch.Tensor,
        num_seeds: int,
    ) -> torch.Tensor:
        """``tgn``: embeddings ``[Q, D]`` of the first ``num_seeds`` nodes of a batch's subgraph
        (the seeds: only their embeddings are scored) from the memory of its ``B`` nodes
        (:meth:`NodeMemory.read`) and the events ``edge_index_2E`` (local neighbour, local
        seed) of the seeds' recent neighbourhoods."""
        nbr_E, dst_E = edge_index_2E
        return self.attend_recent(
            memory_BM[:num_seeds],
            memory_BM,
            last_B,
            nbr_E,
            dst_E,
            event_time_E,
            self.event_feat_EF[event_E],
        )

    def attend_recent(
        self,
        memory_QM: torch.Tensor,
        memory_BM: torch.Tensor,
        last_B: torch.Tensor,
        nbr_E: torch.Tensor,
        seed_E: torch.Tensor,
        event_time_E: torch.Tensor,
        event_attr_EF: torch.Tensor,
    ) -> torch.Tensor:
        """``tgn``: embeddings ``[Q, D]`` of ``Q`` seeds of memory ``memory_QM``, attending
        over their recent events: per event its neighbour's row of ``memory_BM`` (``nbr_E``),
        its seed (``seed_E``), its time and features (attributes ``[phi(t_u - t_e), e]``)."""
        attr_EA = torch.cat(
            [self.time_encoder(last_B.index_select(0, nbr_E) - event_time_E), event_attr_EF],
            dim=1,
        )
        return self.attention[0](memory_QM, memory_BM, nbr_E, seed_E, attr_EA)

    def embed_projected(
        self, memory_PM: torch.Tensor, last_P: torch.Tensor, time_P: torch.Tensor
    ) -> torch.Tensor:
        """``jodie``: memory rows projected from their last update to the query times."""
        dt_P1 = ((time_P - last_P) / self.time_scale).to(memory_PM.dtype).unsqueeze(1)
        return memory_PM * (1.0 + self.projection(dt_P1))

    def embed_hops(
        self,
        hops: list[HopTensors],
        seeds_Q: torch.Tensor,
        event_feat_EF: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``tgat``: embeddings of the first hop's ``num_seeds`` seeds, one hop per layer (first
        hop first), the events' features rows ``hop.eids`` of ``event_feat_EF`` (default: the
        training stream's). Rows of depth ``d`` are the seeds (``d = 0``) or hop ``d - 1``'s
        sampled events, each a node at an event's time (:meth:`attend_hops`)."""
        nodes = [seeds_Q] + [hop.nbr for hop in hops]
        if self.node_rows is not None:
            h = [self.node_rows(n) for n in nodes]
        else:
            h = [
                seeds_Q.new_zeros((n.shape[0], self.input_dim), dtype=torch.float32) for n in nodes
            ]
        feat_EF = self.event_feat_EF if event_feat_EF is None else event_feat_EF
        return self.attend_hops(
            h,
            [hop.dst_index for hop in hops],
            [hop.dst_times for hop in hops],
            [hop.nbr_times for hop in hops],
            [feat_EF[hop.eids] for hop in hops],
        )

    def attend_hops(
        self,
        h: list[torch.Tensor],
        dst_index: list[torch.Tensor],
        dst_times: list[torch.Tensor],
        nbr_times: list[torch.Tensor],
        attr: list[torch.Tensor],
    ) -> torch.Tensor:
        """``tgat``'s layers over input rows ``h[d]`` of each depth and, per hop ``d``, each
        event's row of depth ``d`` (``dst_index[d]``), the times of depth ``d``'s rows and of
        the events, and the events' features: layer ``l`` updates every depth a later layer
        still reads, attending from ``[h_v, phi(0)]`` over ``[h_u, phi(t_v - t_e)]`` and the
        events' features. The embeddings of depth 0 (the seeds)."""
        layers = len(self.attention)
        assert len(dst_index) == layers
        for layer, attention in enumerate(self.attention):
            nxt = []
            for depth in range(layers - layer):
                gap_E = dst_times[depth][dst_index[depth]] - nbr_times[depth]
                x_src_EF = torch.cat([h[depth + 1], self.time_encoder(gap_E)], dim=1)
                zero_time = self.time_encoder(dst_times[depth].new_zeros(h[depth].shape[0]))
                x_dst_DF = torch.cat([h[depth], zero_time], dim=1)
                out = attention(x_dst_DF, x_src_EF, None, dst_index[depth], attr[depth])
                nxt.append(F.relu(out) if layer < layers - 1 else out)
            h = nxt
        return h[0]

    def classify(self, z_PD: torch.Tensor) -> torch.Tensor:
        """Class logits ``[P, C]`` of nodes from their embeddings (a model built with
        ``num_classes``)."""
        assert self.classifier is not None, "built without num_classes"
        return self.classifier(z_PD)

    def score(self, z_src_PD: torch.Tensor, z_dst_KPD: list[torch.Tensor]) -> torch.Tensor:
        """``[K, P]`` scores of the sources against each of ``K`` destination sets."""
        return self.predictor.score_against(z_src_PD, z_dst_KPD)
