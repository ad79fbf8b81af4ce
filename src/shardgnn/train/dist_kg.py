"""Distributed knowledge-graph link prediction: one rank of ``shardgnn train kg-... --workers N``
(R-GCN + DistMult, TransE, RotatE or ComplEx over a typed partition of the entities).

Equal to one process (:class:`~shardgnn.train.typed.TypedLinkSteps`) up to fp32 rounding,
epoch by epoch (tested at 1e-5, dropout included):

* every rank owns a part of the entities (the partition's), their learnt input rows and those
  rows' Adam state (kept beside the rows: a checkpoint resumes on another number of workers,
  every row and its state re-sharded by entity id); the R-GCN weights and the decoder's
  relation vectors are replicated (every rank starts from the weights one process draws, and
  sums the weight gradients over ranks);
* each layer reads the previous layer's rows of its own entities and of their in-neighbours in
  other parts (the halo, one exchange per layer, :class:`~shardgnn.fullgraph.rows.RowGather`;
  the backward pass returns the halo's gradients to their owners), and writes its own entities'
  rows: the partition holds every entity's in-edges of every relation and its reverse;
* every query is scored against all entities (1-N scoring): the last layer's rows of every
  entity are exchanged once per step, and their gradients go back to their owners;
* each rank scores an even share of every batch of training queries (the batches one process
  steps through, in its order) and divides its loss by the batch's size, so the shares add up to
  the batch's loss; dropout masks are hashed from the entity ids, so every rank drops what one
  process drops;
* evaluation ranks an even share of the held-out queries per rank (filtered against every
  known triple); MRR and Hits@K come from the ranks' sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.relational import EntityShard, hold_entity_rows
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import DistSteps, partition_dataset_record
from shardgnn.train.loop import EpochRecord
from shardgnn.train.typed import RelationalSteps, relational_model


class DistRelationalLinkSteps(DistSteps, RelationalSteps):
    """One rank of a distributed knowledge-graph link-prediction job."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        pset = self.pset
        triples = (pset.meta.get("triples") or {}) if pset.kind == "typed" else {}
        if not triples:
            raise ConfigError(
                f"{pset.path} holds no knowledge graph's triples: relational link prediction "
                "trains on them; partition a knowledge graph (kg-umls, kg:DIR) or give it with "
                "--workers N"
            )
        typed = pset.typed_book
        self.device = ctx.device
        self.comms = (self.main_comm,)
        self.triples = pset.triples()
        self.num_entities = pset.num_nodes
        self.num_relations = int(triples["num_relations"])
        self.shard = EntityShard(pset, ctx.rank, self.main_comm, self.device)
        # One process's weights: the same draws from the same seed, of which this rank keeps its
        # own entities' input rows alone (never the whole N x D table)
        torch.manual_seed(config.seed)
        own = self.shard.own_orig
        model = relational_model(
            config, typed.relations, typed.node_types, self.num_entities, own_entities=own
        )
        self._set_model(hold_entity_rows(model, model.encoder.input_NI, own))
        self._index_triples()

    def encode(self) -> torch.Tensor:
        return self.shard.encode(self.model.encoder)

    def share(self, queries: np.ndarray) -> np.ndarray:
        return np.array_split(queries, self.world_size)[self.rank]

    def sync_gradients(self) -> None:
        """The replicated weights' gradients summed over ranks, in one all-reduce (each rank's
        loss is its share; the entity rows' gradients came back to their owners already)."""
        self.sum_gradients(self.replicated)

    def dataset_info(self) -> dict[str, Any]:
        record = partition_dataset_record(self.pset, 0, 0, {})
        record.update(
            num_relations=self.num_relations,
            triples={split: int(len(rows)) for split, rows in self.triples.items()},
        )
        return record

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra = super().results_extra(history)
        extra["relational"]["halo_rows"] = int(self.sum([float(self.shard.halo.num_rows)])[0])
        return extra
