"""Distributed R-GCN node prediction on a typed graph (classes or any label kind of
:mod:`shardgnn.nn.targets`): one process per part of a typed
partition (``write_typed_partitions``), DDP over the weights, the data on ``torch.distributed``
all-to-alls.

Per batch (every step is a sequence of collectives, the same on every rank):
  1. each rank takes ``ceil(B / P)`` of the global batch's target-type seeds
     (:class:`DistSeedBatcher`), samples their typed blocks per relation
     (:class:`DistTypedNeighborSampler`: each owner draws its nodes' neighbours and sends each
     edge's relation with it);
  2. the input nodes are split by type (the typed book: ``P x (T + 1)`` numbers); for every type
     in type order, featured types fetch their feature rows from the owners through the type's
     own book (typed ids, so a part's rows of one type are one array), featureless types read
     their learnt rows from a sharded table (:class:`DistEmbeddingTable`: each rank holds and
     steps its own part's rows only);
  3. forward and backward through the DDP-wrapped model (projections per featured type, R-GCN
     layers); the learnt rows' gradients go back to their owners, which step them.

Evaluation samples the validation/test seeds the same way (``--eval-fanouts``, default the
training fanouts), each rank a disjoint share, and reduces the target's metric over ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.graph.csr import label_dtype
from shardgnn.heap import stock_heap
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.loader.pipeline import FeatureFetcher, MiniBatch, NeighborSamplingStage
from shardgnn.loader.typed import TypedRowFetcher
from shardgnn.nn.targets import CommReducer, target_of_labels
from shardgnn.nn.typed import (
    TypedNodeModel,
    block_message_graph,
    partitioned_node_model,
    typed_schema,
)
from shardgnn.partition.format import PartitionSet
from shardgnn.partition.typed import TypedPartitionBook
from shardgnn.sampling.dist_neighbor import DistTypedNeighborSampler
from shardgnn.sampling.typed import relation_fanouts
from shardgnn.seeding import mix_seed
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore
from shardgnn.store.dist_graph import DistGraphStore
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import DistSteps, partition_dataset_record
from shardgnn.train.epoch import EpochRun, StepResult, batch_epoch
from shardgnn.train.loop import EpochRecord
from shardgnn.train.setup import EMBEDDING_STREAM, adam, label_results, typed_rows_config


class DistTypedNodeSteps(DistSteps):
    """One rank of distributed R-GCN / heterogeneous SAGE / HGT node prediction (sampled typed
    blocks)."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx)
        if self.pset.kind != "typed":
            raise ConfigError(
                f"{self.pset.path} holds an untyped graph; --model {config.model.model} trains "
                "typed graphs: partition one (shardgnn partition synthetic-hetero ...), or pick a "
                "homogeneous model"
            )
        self.data_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        self.comms = (self.data_comm, self.main_comm)
        host_ranks = ctx.host_ranks if config.run.host_sharing == "auto" else ()
        self.graph = DistGraphStore.open(
            self.pset.path, ctx.rank, ctx.world_size, self.data_comm, host_ranks=host_ranks
        )
        self._check_labelled(True, self.graph.part.y is not None)
        self.typed = self.graph.typed
        self.num_relations = len(self.typed.relations)
        part = self.graph.part
        self.num_classes = int(part.num_classes)
        self.target = target_of_labels(part.label_kind, part.y, self.num_classes)
        self.metric, self.details = self.target.metric, {}
        train_rows = np.asarray(part.train_idx if part.train_idx is not None else [], np.int64)
        y_train = torch.from_numpy(np.asarray(part.y[train_rows]))
        self.target.fit_labels(y_train, lambda values: self.sum(values, "setup"))
        self.tables, self.train_rows, self.eval_rows, self.labels = open_typed_rows(
            config, ctx, self.pset, self.graph, self.typed, self.data_comm
        )
        self._make_batches()
        self.sampler = self._sampler(config.sampler.relation_layers(), "sample")
        eval_layers = list(config.eval_fanouts or ()) or config.sampler.relation_layers()
        self.eval_sampler = self._sampler(eval_layers, "eval")
        self._make_stages()
        self.sampled_edges = self.sampled_epochs = 0
        self.traffic = TypedTraffic(self.typed, self.graph, ctx.rank, config.model.hidden)
        self._make_model()

    def _make_batches(self) -> None:
        """Training batches (``--batch-size`` is the global batch: each of the P workers takes
        ``B / P`` seeds per step) and the validation/test seeds, each evaluated by one rank."""
        config, ctx, book = self.config, self.ctx, self.graph.book
        split_ids = {split: self.pset.global_split(split) for split in ("train", "val", "test")}
        self.split_sizes = {split: int(len(ids)) for split, ids in split_ids.items()}

        def batcher(split: str, batch_size: int, shuffle: bool) -> DistSeedBatcher:
            per_rank = max(1, -(-batch_size // ctx.world_size))
            return DistSeedBatcher(
                split_ids[split], book, ctx.rank, ctx.world_size, per_rank, shuffle=shuffle,
                seed=config.seed,
            )  # fmt: skip

        self.train_batches = batcher(
            "train", config.node_batch_size(self.split_sizes["train"]), True
        )
        self.eval_batches = {s: batcher(s, config.eval_batch_size, False) for s in ("val", "test")}

    def _make_stages(self) -> None:
        """The loader every sampled training runs, over typed blocks and rows by type: training
        batch ``i`` of epoch ``e`` sampled with ``mix_seed(seed, rank, e, i)``, evaluation's with
        ``mix_seed(seed + 1, i)``; then the batch's rows and labels fetched from their owners."""
        seed, timer = self.config.seed, self.timer
        samples = NeighborSamplingStage(
            self.train_batches, self.sampler, (seed, self.ctx.rank), timer
        )
        self.train_stages = FeatureFetcher(samples, self.train_rows, self.labels["labels"], timer)
        self.eval_stages = {}
        for split, batches in self.eval_batches.items():
            samples = NeighborSamplingStage(
                batches, self.eval_sampler, seed + 1, StageTimer(), per_epoch=False
            )
            self.eval_stages[split] = FeatureFetcher(
                samples, self.eval_rows, self.labels["eval"], StageTimer()
            )

    def _sampler(self, layers: list, stage: str) -> DistTypedNeighborSampler:
        return DistTypedNeighborSampler(
            self.graph,
            relation_fanouts(self.typed.relations, layers),
            self.data_comm,
            replace=self.config.sampler.replace,
            stage=stage,
        )

    def _make_model(self) -> None:
        """The model (identical initial weights on every rank), its learnt rows, DDP and the
        optimiser."""
        config, ctx = self.config, self.ctx
        torch.manual_seed(config.seed)
        self.model = partitioned_node_model(config.model, self.typed, self.target.out_dim)
        self.model = self.model.to(ctx.device)
        self.broadcast_weights(self.model)
        # This rank's learnt rows join the model's state after the broadcast (they differ per
        # rank): checkpoints and best weights carry each rank's own rows. DDP never sees them
        # (buffers, not broadcast).
        self.model.learnt_rows = torch.nn.ModuleDict(
            {str(t): table.local for t, table in self.tables.items()}
        )
        self.ddp = self.data_parallel(_TypedRowsForward(self.model))
        self.optimizer = adam(self.ddp.parameters(), config.optim)
        # dropout masks differ per rank (their batches differ anyway)
        torch.manual_seed(mix_seed(config.seed, ctx.rank))

    # ------------------------------------------------------------------ one batch
    def _graphs(self, sample) -> list:
        return [
            block_message_graph(b, self.num_relations, self.ctx.device, self.typed.type_of)
            for b in sample.blocks
        ]

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        ctx = self.ctx
        self.ddp.train()

        def step(batch: MiniBatch) -> StepResult:
            sample = batch.sample
            with self.timer("sample"):  # the blocks as the model reads them
                graphs = self._graphs(sample)
            by_type = batch.x_SF.by_type
            y = batch.y.to(ctx.device)
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                logits = self.ddp(graphs, by_type)
                loss = self.target.loss_mean(logits, y)
                loss.backward()
                self.optimizer.step()
            with self.timer("embed"):
                batch.x_SF.apply_gradients()
            self.traffic.count(sample)
            self.sampled_edges += sample.num_sampled_edges
            score = float(self.target.score_sum(logits.detach(), y))
            return StepResult(loss.item(), score, int(y.shape[0]), sample.num_sampled_edges)

        # every rank runs the same number of batches (DistSeedBatcher), so the stop agreement
        # and the collectives inside a step line up
        sums = batch_epoch(run, self.train_batches, step, self.train_stages)
        if sums is None:
            return None
        self.sampled_epochs += 1
        loss_sum, correct, count = self.sum([sums.loss_sum, sums.correct, sums.count])
        return loss_sum / max(count, 1), correct / max(count, 1)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """The target's metric over every node of ``split`` (each evaluated by exactly one
        rank)."""
        self.ddp.eval()
        evaluation = self.target.evaluation()
        with stock_heap():  # one batch alive at a time, its memory returned (evaluate_batches)
            for batch in self.eval_stages[split]:
                by_type, _ = batch.x_SF
                logits = self.model.forward_typed_rows(self._graphs(batch.sample), by_type)
                evaluation.add(logits, batch.y)
                del batch, by_type, logits
        metric, self.details[split] = evaluation.result(CommReducer(self.main_comm))
        return metric

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        edges = self.sum([float(self.sampled_edges)])[0]
        epochs = max(self.sampled_epochs, 1)
        return {
            "partitioner": self.pset.method,
            "sampled_edges_per_s": edges / sample_time if sample_time > 0 else None,
            "sampled_edges_per_epoch": edges / epochs,
            "relational": self.traffic.report(self.sum, epochs, self.tables),
            **label_results(self.target, self.details),
        }

    def dataset_info(self) -> dict[str, Any]:
        width, typed = sum(self.typed.feature_widths), self.typed
        record = partition_dataset_record(self.pset, width, self.num_classes, self.split_sizes)
        schema = typed_schema(
            typed.node_types, typed.type_offsets, typed.relations, typed.target_type
        )
        return {**record, "typed": schema}


class TypedRows(NamedTuple):
    """A rank's input rows of every node type and its labels (:func:`open_typed_rows`)."""

    tables: dict[int, DistEmbeddingTable]
    """featureless type -> its learnt rows, sharded by owner"""
    train_rows: TypedRowFetcher
    """fetches a training batch's rows by type (learnt rows with their gradients)"""
    eval_rows: TypedRowFetcher
    """fetches an evaluation batch's rows by type"""
    labels: dict[str, DistFeatureStore]
    """stage (``labels``, ``eval``) -> the labels, held by their owners"""


def open_typed_rows(
    config: TrainConfig,
    ctx: DistContext,
    pset: PartitionSet,
    graph: DistGraphStore,
    typed: TypedPartitionBook,
    data_comm: Communicator,
) -> TypedRows:
    """Every node type's input rows, held by their owners: a featured type's feature rows
    (this rank's in its part's ``x_type<t>.npy``), a featureless type's learnt rows in a
    sharded table; ``train_rows``/``eval_rows`` fetch a batch's by type. And the labels."""
    part = graph.part
    features: dict[str, dict[int, DistFeatureStore]] = {"fetch": {}, "eval": {}}
    tables: dict[int, DistEmbeddingTable] = {}
    orig = np.asarray(pset.orig_ids)
    for t, width in enumerate(typed.feature_widths):
        type_book = typed.type_book(t)
        if width:
            peers = {p: peer.part.type_x[t] for p, peer in graph.peers.items()}
            for stage, stores in features.items():
                stores[t] = DistFeatureStore(
                    part.type_x[t], type_book, ctx.rank, data_comm, stage, peers=peers
                )
            continue
        # A featureless type's learnt rows, sharded like its nodes; initial values keyed by
        # original typed id, so P workers start from one worker's rows.
        lo, hi = (int(b) for b in typed.type_bounds[ctx.rank, t : t + 2])
        tables[t] = DistEmbeddingTable(
            type_book,
            ctx.rank,
            data_comm,
            typed_rows_config(config, hi - lo),
            mix_seed(config.seed, EMBEDDING_STREAM, t),
            orig[lo:hi] - typed.type_offsets[t],
        )
    eval_tables = {
        t: DistFeatureStore(table.local, typed.type_book(t), ctx.rank, data_comm, "eval")
        for t, table in tables.items()
    }
    dtype = label_dtype(part.label_kind)
    peer_y = {p: np.asarray(peer.part.y, dtype=dtype) for p, peer in graph.peers.items()}
    y_local = np.asarray(part.y, dtype=dtype)
    return TypedRows(
        tables,
        TypedRowFetcher(typed, features["fetch"], tables, ctx.device, learn=True),
        TypedRowFetcher(typed, features["eval"], eval_tables, ctx.device),
        {
            stage: DistFeatureStore(y_local, graph.book, ctx.rank, data_comm, stage, peers=peer_y)
            for stage in ("labels", "eval")
        },
    )


class TypedTraffic:
    """Traffic by relation and by node type of this rank's training batches: sampled edges (all,
    and drawn by another rank's owner), input rows (all, and owned by another rank)."""

    EDGE_BYTES = 24
    """a sampled edge travels as (neighbour, edge id, relation): three int64"""

    def __init__(self, typed: TypedPartitionBook, graph: DistGraphStore, rank: int, hidden: int):
        self.typed, self.graph, self.rank = typed, graph, rank
        self.relation_edges = np.zeros((2, len(typed.relations)), dtype=np.int64)
        self.type_rows = np.zeros((2, len(typed.node_types)), dtype=np.int64)
        self.row_bytes = np.array(
            [4 * (w if w else hidden) * (1 if w else 2) for w in typed.feature_widths],
            dtype=np.float64,
        )  # a feature row, or a learnt row and its gradient back

    def count(self, sample) -> None:
        """Add a training batch's sampled typed blocks and input rows."""
        rank, relations = self.rank, len(self.typed.relations)
        for b in sample.blocks:
            remote_D = self.graph.owner(b.dst_nodes_D.numpy()) != rank
            remote_E = np.repeat(remote_D, np.diff(b.indptr_D1.numpy()))
            rel_E = b.edge_type_E.numpy()
            self.relation_edges[0] += np.bincount(rel_E, minlength=relations)
            self.relation_edges[1] += np.bincount(rel_E[remote_E], minlength=relations)
        ids = sample.input_nodes.numpy()
        type_S = self.typed.type_of(ids)
        types = self.type_rows.shape[1]
        self.type_rows[0] += np.bincount(type_S, minlength=types)
        self.type_rows[1] += np.bincount(type_S[self.graph.owner(ids) != rank], minlength=types)

    def report(
        self,
        sum_over_ranks: Callable[[list[float]], list[float]],
        epochs: int,
        learnt: Collection[int],
    ) -> dict[str, Any]:
        """The results' ``relational`` record (collective: ``sum_over_ranks`` sums the counts of
        every rank): per epoch of ``epochs``; ``learnt``: the node types with learnt rows."""
        edges_R = np.asarray(sum_over_ranks(self.relation_edges.ravel().tolist())).reshape(2, -1)
        rows_T = np.asarray(sum_over_ranks(self.type_rows.ravel().tolist())).reshape(2, -1)
        edge_bytes = self.EDGE_BYTES
        return {
            "note": "per epoch of training batches, summed over workers; remote: drawn by "
            "(edges) or owned by (rows) another worker",
            "relations": {
                "/".join(rel): {
                    "sampled_edges_per_epoch": edges_R[0, r] / epochs,
                    "remote_edges_per_epoch": edges_R[1, r] / epochs,
                    "remote_mb_per_epoch": edges_R[1, r] * edge_bytes / epochs / 1e6,
                }
                for r, rel in enumerate(self.typed.relations)
            },
            "node_types": {
                name: {
                    "input_rows_per_epoch": rows_T[0, t] / epochs,
                    "remote_rows_per_epoch": rows_T[1, t] / epochs,
                    "remote_mb_per_epoch": rows_T[1, t] * self.row_bytes[t] / epochs / 1e6,
                    "learnt_rows": int(t) in learnt,
                }
                for t, name in enumerate(self.typed.node_types)
            },
        }


class _TypedRowsForward(torch.nn.Module):
    """The model as DDP calls it: logits from sampled blocks and the batch's rows by type."""

    def __init__(self, model: TypedNodeModel):
        super().__init__()
        self.model = model

    def forward(self, graphs, by_type):
        return self.model.forward_typed_rows(graphs, by_type)
