"""Relational link prediction (knowledge-graph completion): an R-GCN encoder and a decoder
(``--predictor``: DistMult by default, TransE, RotatE or ComplEx), trained on the training
triples and ranked against every entity, filtered.

Training scores each query against all ``N`` entities at once (1-N scoring, Dettmers et al.
2018), in both directions: ``(h, r, ?)`` with answer ``t``, and ``(?, r, t)`` with answer ``h``.
``--link-loss softmax`` is cross-entropy over the entities per triple (1vsAll, Lacroix et al.
2018); ``bce`` is binary cross-entropy against every known training answer of the query (KvsAll,
ConvE). Every step encodes the whole graph: the knowledge graphs this runs on so far have
hundreds to thousands of entities.

Evaluation is the standard filtered protocol (Bordes et al. 2013): for each held-out triple, rank
its answer among all entities with the other known answers (train, valid and test) removed, both
directions; MRR and Hits@K over both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from shardgnn.errors import ConfigError
from shardgnn.fullgraph.relational import HELD_ROWS, hold_entity_rows, step_entity_rows
from shardgnn.graph.csr import label_dtype
from shardgnn.graph.datasets import canonical_spec, load_typed_dataset
from shardgnn.graph.identity import typed_fingerprint
from shardgnn.graph.typed import TypedGraph, reverse_relations, with_reverse_edges
from shardgnn.loader.pipeline import MiniBatch, MiniBatchLoader
from shardgnn.loader.typed import LocalTypedRows, TypedBatchRows
from shardgnn.nn.targets import LocalReducer, NodeTarget, target_of_labels
from shardgnn.nn.typed import (
    TypedInput,
    TypedLinkModel,
    TypedMessageGraph,
    TypedNodeModel,
    block_message_graph,
    layerwise_forward,
    relational_decoder,
    typed_encoder,
    typed_schema,
)
from shardgnn.sampling.typed import TypedNeighborSampler, relation_fanouts
from shardgnn.seeding import mix_seed
from shardgnn.store.embedding import EmbeddingTable
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun, StepResult, batch_epoch
from shardgnn.train.linkmetrics import (
    AnswerIndex,
    both_directions,
    filtered_ranks,
    metrics_of_rank_sums,
    rank_sums,
)
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import (
    EMBEDDING_STREAM,
    adam,
    label_results,
    node_prediction_refusal,
    resolve_device,
    split_problems,
    typed_rows_config,
)

RELATIONAL_HITS_AT = (1, 3, 10)
"""Hits@K reported for knowledge-graph completion (the benchmarks' standard set)."""


def message_graph(graph: TypedGraph, device: torch.device) -> TypedMessageGraph:
    """The graph's edges plus their reversals (relation ``r + R``): R-GCN's message graph."""
    r = graph.num_relations
    src, dst, etype = with_reverse_edges(*graph.edge_arrays(), r)
    return TypedMessageGraph.from_edges(
        src, dst, etype, graph.num_nodes, 2 * r, device,
        node_type=graph.node_type_of(np.arange(graph.num_nodes)),
    )  # fmt: skip


def message_relations(graph: TypedGraph) -> tuple:
    """The relations of :func:`message_graph` (and of ``graph.with_reverse_relations()``)."""
    return graph.relations + reverse_relations(graph.relations)


def dataset_info(graph: TypedGraph, spec: str | None) -> dict[str, Any]:
    """What results and checkpoints record of a typed dataset (sizes per type, fingerprint)."""
    summary = graph.summary()
    return {
        "spec": spec,
        "name": graph.name,
        "fingerprint": typed_fingerprint(graph),
        **{k: summary[k] for k in ("num_nodes", "num_edges", "num_relations", "nodes_per_type")},
        **{k: summary[k] for k in ("edges_per_relation", "triples", "splits") if summary[k]},
        "typed": typed_schema(
            graph.node_types, graph.type_offsets, message_relations(graph), graph.target_type
        ),
    }


def check_typed_trainable(graph: TypedGraph) -> None:
    missing = [s for s in ("train", "valid", "test") if not len(graph.triples.get(s, ()))]
    if missing:
        raise ConfigError(
            f"dataset {graph.name!r} has no {'/'.join(missing)} triples: relational link "
            "prediction trains on train triples and ranks valid/test ones; give a folder with "
            "train.txt, valid.txt and test.txt (kg:DIR)"
        )
    if len(graph.node_types) != 1:
        raise ConfigError(
            f"dataset {graph.name!r} has node types {list(graph.node_types)}: relational link "
            "prediction runs on one entity type so far (knowledge graphs)"
        )


class _TypedGraphSteps(Steps):
    """What every single-process typed-graph training shares: the config applied, the graph
    (``graph``: given, else loaded from the spec) checked by ``check``, its R-GCN message graph,
    and the dataset record."""

    def __init__(self, config: TrainConfig, graph: TypedGraph | None, check) -> None:
        self.config = config
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        g = graph if graph is not None else load_typed_dataset(config.dataset, config.data_dir)
        check(g)
        self.graph = g
        self.message_graph = message_graph(g, self.device)
        self.timer = StageTimer()
        torch.manual_seed(config.seed)

    def dataset_info(self) -> dict[str, Any]:
        return dataset_info(self.graph, self.spec)


class RelationalSteps(Steps):
    """What relational link prediction does in one process and on workers: the epoch over the
    training queries and the filtered evaluation, over the entity rows :meth:`encode` returns.

    Subclasses set ``config``, ``model`` (a :class:`TypedLinkModel`), ``optimizer``, ``timer``,
    ``device``, ``num_entities``, ``num_relations`` (the triples' relations, reverses excluded)
    and the triples by split (``triples``), then call :meth:`_index_triples`; they define
    :meth:`encode`, and on workers :meth:`share` and :meth:`backward_and_step`.
    """

    metric = "mrr"
    config: TrainConfig
    device: torch.device
    num_entities: int
    num_relations: int
    triples: dict[str, np.ndarray]

    def _index_triples(self) -> None:
        triples, n, r = self.triples, self.num_entities, self.num_relations
        self.train_queries = both_directions(triples["train"])
        self.train_answers = AnswerIndex(triples["train"], n, r)
        self.known = AnswerIndex(np.concatenate([triples[s] for s in triples]), n, r)
        self.last_metrics: dict[str, dict[str, float]] = {}
        self.model.encoder.use_hashed_dropout(self.config.seed)

    def encode(self) -> torch.Tensor:
        """``[N, D]``: every entity's row, in entity id order (a collective on workers)."""
        raise NotImplementedError

    def share(self, queries: np.ndarray) -> np.ndarray:
        """The queries (positions) this process scores of those every process steps through."""
        return queries

    def _set_model(self, model: TypedLinkModel) -> None:
        """``model`` (its entity rows given it by :func:`hold_entity_rows`) and the optimiser of
        its other weights; the entity rows step with their own Adam state, beside them."""
        self.model = model.to(self.device)
        self.replicated = [p for n, p in model.named_parameters() if n != "encoder.input_NI"]
        self.optimizer = adam(self.replicated, self.config.optim)

    def sharded_rows(self) -> dict[str, np.ndarray]:
        return {HELD_ROWS: self.model.encoder.input_node_ids.cpu().numpy()}

    def sync_gradients(self) -> None:
        """Make the weights' gradients whole (workers: summed over ranks)."""

    def backward_and_step(self, loss_share: torch.Tensor) -> None:
        """Backward from this process's share of the loss, then one step of every weight."""
        loss_share.backward()
        self.sync_gradients()
        self.optimizer.step()
        step_entity_rows(self.model, self.config.optim.lr, self.config.optim.weight_decay)

    def query_relation(self, relation: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """The decoder's relation of each query: ``r`` for tail queries, ``r + R`` (the
        reciprocal) for head queries."""
        return relation + direction * self.num_relations

    def _scores(self, ent_ND: torch.Tensor, queries, q: np.ndarray) -> torch.Tensor:
        anchor, relation, _, direction = queries
        relation_Q = torch.from_numpy(self.query_relation(relation[q], direction[q]))
        return self.model.decoder.score_all(
            ent_ND[torch.from_numpy(anchor[q]).to(self.device)], relation_Q.to(self.device), ent_ND
        )

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        """Every training query once, in batches of ``--batch-size`` queries in an order drawn
        from ``mix_seed(seed, epoch)``; each process scores its share of a batch, the shares'
        losses add up to the batch's mean loss."""
        config = self.config
        anchor, relation, answer, direction = self.train_queries
        order = np.random.default_rng(mix_seed(config.seed, run.epoch)).permutation(len(anchor))
        batch = config.item_batch_size
        loss_sum, correct = 0.0, 0
        self.model.train()
        steps = -(-len(order) // batch)
        for step, start in enumerate(range(0, len(order), batch)):
            batch_q = order[start : start + batch]
            # the masks of a step follow from its place in the run: a resumed run draws them alike
            self.model.encoder.dropout_step = run.epoch * steps + step
            q = self.share(batch_q)
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                ent_ND = self.encode()
                scores_QN = self._scores(ent_ND, self.train_queries, q)
                answer_Q = torch.from_numpy(answer[q]).to(self.device)
                if config.link.loss == "softmax":
                    loss = F.cross_entropy(scores_QN, answer_Q, reduction="sum") / len(batch_q)
                else:  # bce: every known training answer of the query is a positive
                    target_QN = self.train_answers.mask(anchor[q], relation[q], direction[q])
                    loss = F.binary_cross_entropy_with_logits(
                        scores_QN, torch.from_numpy(target_QN).to(scores_QN), reduction="sum"
                    ) / (len(batch_q) * self.num_entities)
                if not len(q):  # no share: the backward exchanges run all the same
                    loss = scores_QN.sum()
                self.backward_and_step(loss)
            loss_sum += loss.item() * len(batch_q)
            correct += int((scores_QN.argmax(1) == answer_Q).sum())
        loss_sum, correct = self.sum([loss_sum, float(correct)])
        return loss_sum / len(order), correct / len(order)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def entity_embeddings(self) -> torch.Tensor:
        self.model.eval()
        return self.encode()

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Filtered MRR over ``split``'s triples, both directions (each process ranks its share;
        the sums over processes make the metrics)."""
        queries = both_directions(self.triples[{"val": "valid"}.get(split, split)])
        anchor, relation, answer, direction = queries
        ent_ND = self.entity_embeddings()
        mine = self.share(np.arange(len(anchor)))
        ranks = [np.zeros(0)]
        chunk = max(1, (1 << 22) // max(self.num_entities, 1))  # ~4M scores at a time
        for start in range(0, len(mine), chunk):
            q = mine[start : start + chunk]
            scores_QN = self._scores(ent_ND, queries, q)
            known = self.known.mask(anchor[q], relation[q], direction[q])
            ranks.append(filtered_ranks(scores_QN.cpu().numpy(), answer[q], known))
        sums = self.sum(rank_sums(np.concatenate(ranks), RELATIONAL_HITS_AT))
        metrics = metrics_of_rank_sums(sums, RELATIONAL_HITS_AT)
        self.last_metrics[split] = metrics
        return metrics["mrr"]

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {
            "relational": {
                "protocol": "filtered ranks among all entities, head and tail queries, ties "
                "half (realistic)",
                "valid": self.last_metrics.get("val", {}),
                "test": self.last_metrics.get("test", {}),
            }
        }


class TypedLinkSteps(RelationalSteps, _TypedGraphSteps):
    """Single-process relational link prediction on a knowledge graph (``graph``: given, else
    loaded from the spec)."""

    def __init__(self, config: TrainConfig, graph: TypedGraph | None = None):
        super().__init__(config, graph, check_typed_trainable)
        g = self.graph
        self.num_entities, self.num_relations = g.num_nodes, g.num_relations
        self.triples = g.triples
        model = relational_model(config, message_relations(g), g.node_types, g.num_nodes)
        every = np.arange(g.num_nodes, dtype=np.int64)
        self._set_model(hold_entity_rows(model, model.encoder.input_NI, every))
        self._index_triples()

    def encode(self) -> torch.Tensor:
        return self.model(self.message_graph)


def relational_model(
    config: TrainConfig,
    relations: tuple,
    node_types: tuple,
    num_entities: int,
    own_entities: np.ndarray | None = None,
    draw_rows: bool = True,
) -> TypedLinkModel:
    """The R-GCN encoder over learnt entity rows and the ``--predictor`` decoder, initialised
    from the torch generator as it stands (one process and every worker build it alike; a
    worker makes the rows of its ``own_entities`` alone, equal to one process's).
    ``draw_rows=False``: no entity rows at all (their caller gives the encoder a checkpoint's,
    :func:`~shardgnn.fullgraph.relational.hold_entity_rows`), and none drawn: drawing them
    would take every entity's draw to keep the generator in step, needless where nothing is
    drawn after."""
    out_dim = config.link.out_dim
    encoder = typed_encoder(
        config.model, relations, node_types, out_dim=out_dim, num_nodes=num_entities,
        learn_input=draw_rows, input_rows=own_entities,
    )  # fmt: skip
    # A relation vector per direction (reciprocal relations, Lacroix et al. 2018): head
    # queries (?, r, t) are asked as (t, r^-1, ?). DistMult's score is symmetric in head
    # and tail, so with one vector per relation an asymmetric relation could not tell its
    # heads from its tails; every decoder then scores tail queries alone.
    decoder = relational_decoder(config.link.predictor, len(relations), out_dim)
    return TypedLinkModel(encoder, decoder)


def check_node_trainable(graph: TypedGraph) -> None:
    """Refuse a typed graph without labels or splits (or whose split has no known label), with
    the reason and the fix."""
    problems = []
    labelled = graph.target_type is not None and graph.y is not None
    if not labelled or (graph.label_kind == "class" and graph.num_classes < 1):
        problems.append("it has no labelled node type")
    target = typed_target(graph) if labelled else None
    problems += split_problems(graph, target)
    if problems:
        raise node_prediction_refusal(
            f"dataset {graph.name!r}",
            problems,
            "Knowledge graphs train --task link; synthetic-hetero has paper labels.",
        )


def typed_target(graph: TypedGraph) -> NodeTarget:
    """What the target type's labels are and how outputs are trained and scored against them
    (:mod:`shardgnn.nn.targets`: classes, multi-label, regression, several tasks)."""
    return target_of_labels(graph.label_kind, graph.y, graph.num_classes)


class TypedNodeSteps(_TypedGraphSteps):
    """Single-process node prediction of a typed graph's target type with R-GCN (or
    heterogeneous SAGE, HGT): classes, or any label kind of :mod:`shardgnn.nn.targets`.

    ``--mode full``: one step per epoch over every training node. ``--mode minibatch``: batches
    of ``--batch-size`` training nodes, each layer's neighbourhood drawn per relation (every
    relation and its reverse get the layer's fanout; :class:`TypedNeighborSampler`). Evaluation
    runs the full graph either way (every neighbour, exact).

    Featureless types' learnt rows are held as one worker holds its part's
    (``learnt_rows.<t>``: an :class:`EmbeddingTable` with the rows' typed ids and sparse Adam
    state), so a checkpoint resumes on workers, and workers' checkpoints here, re-sharded by
    typed id."""

    def __init__(self, config: TrainConfig, graph: TypedGraph | None = None):
        super().__init__(config, graph, check_node_trainable)
        g = self.graph
        model = config.model
        sizes = [g.num_nodes_of(t) for t in g.node_types]
        widths = [int(g.x[t].shape[1]) if t in g.x else 0 for t in g.node_types]
        self.features = {
            i: torch.as_tensor(np.asarray(g.x[t]), dtype=torch.float32, device=self.device)
            for i, t in enumerate(g.node_types)
            if t in g.x
        }
        self.target = typed_target(g)
        self.metric, self.details = self.target.metric, {}
        encoder = typed_encoder(
            model, message_relations(g), g.node_types, out_dim=self.target.out_dim
        )
        self.model = TypedNodeModel(
            TypedInput(sizes, widths, model.hidden), encoder, model.input_dropout
        ).to(self.device)
        self.tables = {
            t: EmbeddingTable(
                n, typed_rows_config(config, n), mix_seed(config.seed, EMBEDDING_STREAM, t)
            )
            for t, (n, width) in enumerate(zip(sizes, widths))
            if not width
        }
        # buffers, not parameters: the optimiser steps the other weights, each table its rows
        self.model.learnt_rows = torch.nn.ModuleDict({str(t): v for t, v in self.tables.items()})
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.y = torch.from_numpy(np.asarray(g.y, dtype=label_dtype(g.label_kind))).to(self.device)
        self.offset = int(g.type_offsets[g.node_types.index(g.target_type)])
        self.splits = {
            key: torch.from_numpy(np.asarray(getattr(g, f"{key}_idx"), dtype=np.int64)).to(
                self.device
            )
            for key in ("train", "val", "test")
        }
        self.target.fit_labels(self.y[self.splits["train"]])
        self.sampled_edges = 0
        # The reverse relations are r + R: the full-graph message graph's inverse relations, so
        # a model trained on blocks evaluates on the full graph (layer-wise, over this CSR) with
        # the same weights.
        self.sample_graph = g.with_reverse_relations()
        if config.mode == "minibatch":
            fanouts = relation_fanouts(
                self.sample_graph.relations, config.sampler.relation_layers()
            )
            self.sampler = TypedNeighborSampler(
                self.sample_graph, fanouts, replace=config.sampler.replace
            )
            train_ids = g.global_ids(g.target_type, g.train_idx)
            # the loader of every sampled training: typed blocks, input rows by node type
            rows = LocalTypedRows(
                g.type_offsets, self.features, self.tables, self.device, learn=True
            )
            self.loader = MiniBatchLoader(
                train_ids, self.sampler, rows, None,
                batch_size=config.node_batch_size(len(train_ids)), shuffle=True,
                seed=config.seed, timer=self.timer,
            )  # fmt: skip

    def learnt_rows(self, learn: bool = False) -> dict[int, torch.Tensor]:
        """Every featureless type's learnt rows on the device (``learn``: taking a gradient,
        which :meth:`step_learnt_rows` then applies)."""
        return {
            t: table.weight.to(self.device).detach().requires_grad_(learn)
            for t, table in self.tables.items()
        }

    def step_learnt_rows(self, learnt: dict[int, torch.Tensor]) -> None:
        """Each table's optimiser step on the gradient of every one of its rows (as a batch's
        rows step, :meth:`TypedBatchRows.apply_gradients`)."""
        rows = [(self.tables[t], torch.arange(x.shape[0]), x) for t, x in learnt.items()]
        TypedBatchRows({}, rows).apply_gradients()

    def input_rows(self) -> torch.Tensor:
        """Every node's input row (projected features, learnt rows), global id order."""
        return self.model.typed_input(self.features, self.learnt_rows())

    def logits(self, learnt: dict[int, torch.Tensor]) -> torch.Tensor:
        """The outputs of every target-type node (local ids)."""
        start = self.offset
        out = self.model(self.message_graph, self.features, learnt)
        return out[start : start + self.y.shape[0]]

    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        if self.config.mode == "minibatch":
            return self._train_epoch_blocks(run)
        self.model.train()
        idx = self.splits["train"]
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            learnt = self.learnt_rows(learn=True)
            logits = self.logits(learnt)[idx]
            loss = self.target.loss_mean(logits, self.y[idx])
            loss.backward()
            self.optimizer.step()
        with self.timer("embed"):
            self.step_learnt_rows(learnt)
        score = float(self.target.score_sum(logits.detach(), self.y[idx]))
        return loss.item(), score / max(len(idx), 1)

    def _train_epoch_blocks(self, run: EpochRun) -> tuple[float, float] | None:
        self.model.train()
        num_relations = self.sample_graph.num_relations

        def step(batch: MiniBatch) -> StepResult:
            sample, seeds = batch.sample, batch.sample.seeds
            with self.timer("sample"):  # the blocks as the model reads them
                graphs = [
                    block_message_graph(
                        b, num_relations, self.device, self.sample_graph.node_type_of
                    )
                    for b in sample.blocks
                ]
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                logits = self.model.forward_typed_rows(graphs, batch.x_SF.by_type)
                y = self.y[(seeds - self.offset).to(self.device)]
                loss = self.target.loss_mean(logits, y)
                loss.backward()
                self.optimizer.step()
            with self.timer("embed"):
                batch.x_SF.apply_gradients()
            self.sampled_edges += sample.num_sampled_edges
            score = float(self.target.score_sum(logits.detach(), y))
            return StepResult(
                loss.item(), score, self.target.rows_scored(y), sample.num_sampled_edges
            )

        sums = batch_epoch(run, self.loader, step)
        if sums is None:
            return None
        return sums.loss_sum / max(sums.count, 1), sums.correct / max(sums.count, 1)

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra = label_results(self.target, self.details)
        if self.config.mode != "minibatch":
            return extra
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        return {
            **extra,
            "sampled_edges_per_s": self.sampled_edges / sample_time if sample_time > 0 else None,
        }

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """The target's metric over ``split`` from every node's full neighbourhood, computed
        layer-wise in chunks of nodes (memory: one chunk's in-edges, not the whole graph's
        messages)."""
        self.model.eval()
        g = self.sample_graph
        _, out = layerwise_forward(
            self.model.encoder,
            self.input_rows(),
            g.indptr, g.indices, g.etype, 0,
            lambda h, ids: h[torch.from_numpy(ids).to(h.device)],
            g.node_type_of,
        )  # fmt: skip
        logits = out[self.offset : self.offset + self.y.shape[0]]
        idx = self.splits[split]
        evaluation = self.target.evaluation()
        evaluation.add(logits[idx], self.y[idx])
        metric, self.details[split] = evaluation.result(LocalReducer())
        return metric
