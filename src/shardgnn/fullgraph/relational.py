"""One rank's share of a knowledge graph's entities in distributed full-graph R-GCN: its
entities' message graph and the row exchanges that encode them (training,
:mod:`shardgnn.train.dist_kg`, and ``shardgnn infer``)."""

from __future__ import annotations

import numpy as np
import torch
from torch.optim.adam import adam as adam_step

from shardgnn.distributed.comm import Communicator
from shardgnn.fullgraph.rows import RowGather
from shardgnn.nn.typed import TypedLinkModel, TypedMessageGraph
from shardgnn.partition.format import PartitionSet

HALO_STAGE = "halo"
ENTITY_STAGE = "entities"
HELD_ROWS = "encoder.input_"
"""the state-name prefix of a rank's entity rows and their optimiser state"""


class EntityShard:
    """One rank's entities of a knowledge graph's partition, and the exchanges that encode them:
    its entities' message graph (their in-edges of every relation and its reverse; its own rows
    first among the sources, then the halo), the halo's rows per layer and every entity's last
    row (collectives when built and when used, :class:`~shardgnn.fullgraph.rows.RowGather`)."""

    def __init__(
        self,
        pset: PartitionSet,
        rank: int,
        comm: Communicator,
        device: torch.device,
        gathers_every_entity: bool = True,
    ):
        """``gathers_every_entity``: :meth:`encode` gathers every entity's row to every rank
        (training's decoder scores against all); False, only :meth:`encode_own` is asked for
        (inference writes each rank's own rows)."""
        book = pset.book
        start, end = book.part_range(rank)
        part = pset.load_part(rank)
        self.own_orig = np.array(pset.orig_ids[start:end], dtype=np.int64)
        """the original (entity) id of every row this rank holds"""
        self.own_keys = torch.from_numpy(self.own_orig).to(device)
        indptr = np.asarray(part.indptr, dtype=np.int64)
        src = np.asarray(part.indices, dtype=np.int64)
        own = (src >= start) & (src < end)
        halo = np.unique(src[~own])
        position = np.where(own, src - start, (end - start) + np.searchsorted(halo, src))
        dst = np.repeat(np.arange(end - start, dtype=np.int64), np.diff(indptr))
        self.graph = TypedMessageGraph.from_edges(
            position, dst, np.asarray(part.etype), end - start + len(halo),
            len(pset.typed_book.relations), device, end - start,
        )  # fmt: skip
        self.halo = RowGather(halo, book, comm, 0, HALO_STAGE)
        self.entities: RowGather | None = None
        if gathers_every_entity:
            every = np.arange(pset.num_nodes, dtype=np.int64)
            self.entities = RowGather(every, book, comm, 0, ENTITY_STAGE)
            self.new_of_orig = torch.from_numpy(pset.new_id_of_orig()).to(device)

    def encode_own(self, encoder) -> torch.Tensor:
        """``[own, D]``: this rank's entities' last-layer rows, in :attr:`own_orig` order
        (collective: the halo's rows per layer)."""
        return encoder(self.graph, halo=self.halo.gather, keys_N=self.own_keys)

    def encode(self, encoder) -> torch.Tensor:
        """``[N, D]``: every entity's last-layer row, in entity id order (collective)."""
        assert self.entities is not None, "built without gathers_every_entity"
        h_own = self.encode_own(encoder)
        return self.entities.gather(h_own)[self.new_of_orig]  # new ids -> entity ids


def hold_entity_rows(model: TypedLinkModel, rows_ND: torch.Tensor, ids: np.ndarray):
    """``model`` holding the entity rows ``rows_ND`` (of entities ``ids``) as its encoder's
    input, with their entity ids and their Adam state beside them (:data:`HELD_ROWS`
    ``node_ids``, ``exp_avg``, ``exp_avg_sq``, ``step``): a checkpoint puts every rank's rows and
    state back together by entity id, for inference and for a job of another size, one process
    included (:func:`~shardgnn.train.checkpoint.reshard`). They step by :func:`step_entity_rows`,
    not by the optimiser of the other weights."""
    encoder = model.encoder
    rows_ND = rows_ND.detach().clone()
    encoder.input_NI = torch.nn.Parameter(rows_ND)
    encoder.register_buffer("input_node_ids", torch.from_numpy(np.array(ids, dtype=np.int64)))
    encoder.register_buffer("input_exp_avg", torch.zeros_like(rows_ND))
    encoder.register_buffer("input_exp_avg_sq", torch.zeros_like(rows_ND))
    encoder.register_buffer("input_step", torch.zeros((), dtype=torch.float32))
    return model


@torch.no_grad()
def step_entity_rows(model: TypedLinkModel, lr: float, weight_decay: float) -> None:
    """One step of torch's Adam (fused, :func:`~shardgnn.train.setup.adam`'s) over the rows
    :func:`hold_entity_rows` gave ``model``, from their state beside them; their gradient is
    then dropped (no optimiser zeroes it)."""
    encoder = model.encoder
    rows = encoder.input_NI
    grad = rows.grad if rows.grad is not None else torch.zeros_like(rows)
    adam_step(
        [rows], [grad], [encoder.input_exp_avg], [encoder.input_exp_avg_sq], [],
        [encoder.input_step], fused=True, amsgrad=False, beta1=0.9, beta2=0.999, lr=lr,
        weight_decay=weight_decay, eps=1e-8, maximize=False,
    )  # fmt: skip
    rows.grad = None
