"""Single-process training: the reference every distributed result is checked against.

:class:`LocalSteps` trains on an in-memory graph in ``full`` or ``minibatch`` mode with the local
pipeline (local sampler, local stores) and the local graph operators; the distributed steps
replace exactly those parts. :func:`run_training` runs it in the shared
:class:`~shardgnn.train.loop.TrainingLoop`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.inference import LayerwiseInference, layerwise_metrics
from shardgnn.fullgraph.shard import shard_from_graph
from shardgnn.graph.csr import Graph, label_dtype
from shardgnn.graph.datasets import canonical_spec, load_dataset
from shardgnn.graph.features import normalize_features
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.graph.typed import TypedGraph
from shardgnn.loader.device import Staged, device_pipeline
from shardgnn.loader.pipeline import MiniBatchLoader
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import GNN, build_model
from shardgnn.nn.targets import ClassTarget, LocalReducer, target_of_labels
from shardgnn.options import changed_settings
from shardgnn.precision import precision_context
from shardgnn.sampling.device import DeviceNeighborSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.store.embedding import input_store
from shardgnn.store.feature import LocalFeatureStore, SparseRowStore
from shardgnn.timing import StageTimer
from shardgnn.train.captured import CapturedSteps
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.minibatch import (
    GraphsAhead,
    evaluate_batches,
    node_objective,
    train_epoch_batches,
)
from shardgnn.train.setup import (
    adam,
    batch_features,
    dataset_record,
    eval_sampler_config,
    full_edge_rows,
    full_features,
    full_input,
    label_results,
    make_embedding_table,
    model_edge_dim,
    node_prediction_refusal,
    resolve_device,
    split_problems,
    step_rows,
)


def check_trainable(graph: Graph, learnable_rows: bool = False) -> None:
    """Refuse graphs that cannot be trained on, with the reason and the fix
    (``learnable_rows``: ``--embedding-dim`` gives the nodes their input)."""
    problems = []
    if graph.x is None and not learnable_rows:
        problems.append("it has no node features (--embedding-dim D gives each node a row)")
    if graph.y is None or (graph.label_kind == "class" and graph.num_classes < 1):
        problems.append("it has no labels")
    target = (
        None if graph.y is None else target_of_labels(graph.label_kind, graph.y, graph.num_classes)
    )
    problems += split_problems(graph, target)
    if problems:
        raise node_prediction_refusal(
            f"dataset {graph.name!r}",
            problems,
            "Use a labelled dataset such as cora or synthetic, or give yours features, labels "
            "and splits with `shardgnn convert`.",
        )


def gpu_sampling(config: TrainConfig, device: torch.device) -> bool:
    """Whether mini-batches are sampled and gathered on the GPU (``--sampler-device``); the GPU
    pipeline's settings given without a GPU to apply to are refused."""
    given = changed_settings(config.gpu)
    if device.type != "cuda":
        if given:
            raise ConfigError(
                f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} to training on a "
                f"GPU (--device cuda); this run trains on {device}: drop "
                f"{'them' if len(given) > 1 else 'it'}"
            )
        return False
    if config.embedding.enabled:
        if config.gpu.sampler_device == "gpu":
            raise ConfigError(
                "--sampler-device gpu: learnable rows (--embedding-dim) stay in host memory and "
                "are gathered on the CPU; use --sampler-device cpu (or auto)"
            )
        return False
    return config.gpu.sampler_device != "cpu"


class LocalSteps(Steps):
    """Single-process epochs on an in-memory graph (``graph``: given, else loaded from the spec)."""

    def __init__(self, config: TrainConfig, graph: Graph | None = None):
        self.config = config
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        spec = canonical_spec(config.dataset) if graph is None else None
        self.graph = graph if graph is not None else load_dataset(config.dataset, config.data_dir)
        self.spec = spec
        check_trainable(self.graph, config.embedding.enabled)
        torch.manual_seed(config.seed)
        g = self.graph
        self.x = None if g.x is None else normalize_features(g.x, config.feature_norm)
        self.y = torch.from_numpy(np.asarray(g.y, dtype=label_dtype(g.label_kind)))
        self.target = target_of_labels(g.label_kind, g.y, g.num_classes)
        self.metric = self.target.metric
        self.target.fit_labels(self.y[torch.from_numpy(g.train_idx)])
        self.details: dict[str, dict] = {}
        self.embedding = make_embedding_table(config, g.num_nodes)
        in_dim = g.num_features + config.embedding.dim
        edge_dim = model_edge_dim(config, g.edge_dim, f"dataset {g.name!r}")
        self.model: GNN = build_model(config.model, in_dim, self.target.out_dim, edge_dim)
        if self.embedding is not None:
            # The rows (buffers) become part of the model's state: checkpoints and the best
            # epoch's weights carry them; their sparse optimiser, not Adam, updates them.
            self.model.embedding = self.embedding
        self.model.to(self.device)
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.timer = StageTimer()
        self.sampled_edges = 0
        # Dropout keyed by (step, layer, node id, column): a parallel kernel, and a distributed
        # run with the same seed drops exactly the same entries (train/fullgraph.py).
        self.model.use_hashed_dropout(config.seed)
        if config.mode == "full":
            self.full_graph = MessageGraph.from_csr(g.indptr, g.indices, self.device)
            if edge_dim:  # the whole graph's edge rows, in its CSR order
                self.full_graph.edge_attr_ED = full_edge_rows(g, self.device)
            self.features_full = full_features(self.x, self.device)
            # the labels beside the logits: indexed by split ids on the device
            self.y_full = self.y.to(self.device)
            return
        batch_size = config.node_batch_size(len(g.train_idx))
        # On a GPU: sampled and gathered there (device_pipeline), or made on the CPU and staged.
        self.pipeline = None
        # the edge features by edge id (an edge's position in the CSR: what blocks name)
        edge_attr = g.edge_attr if edge_dim else None
        edge_rows = None if edge_attr is None else LocalFeatureStore(edge_attr)
        if gpu_sampling(config, self.device):
            self.pipeline = device_pipeline(
                g.indptr,
                g.indices,
                self.x,
                self.y,
                g.train_idx,
                device=self.device,
                config=config.gpu,
                sampler_config=config.sampler,
                eval_sampler_config=eval_sampler_config(config),
                batch_size=batch_size,
                seed=config.seed,
                edge_attr=edge_attr,
            )
            features, labels = self.pipeline.features, self.pipeline.labels
            edge_rows = self.pipeline.edges
            sampler, eval_sampler = self.pipeline.sampler, self.pipeline.eval_sampler
        else:
            features = input_store(batch_features(self.x, config, self.device), self.embedding)
            labels = LocalFeatureStore(self.y)
            sampler = (
                # bulk: the tensor sampler stacks k batches' frontiers (the same draws)
                DeviceNeighborSampler(g.indptr, g.indices, config.sampler, torch.device("cpu"))
                if config.sampler.batches_per_call > 1
                else NeighborSampler(g.indptr, g.indices, config.sampler)
            )
            eval_sampler = NeighborSampler(g.indptr, g.indices, eval_sampler_config(config))
        self.train_loader = MiniBatchLoader(
            g.train_idx,
            sampler,
            features,
            labels,
            batch_size=batch_size,
            shuffle=True,
            seed=config.seed,
            timer=self.timer,
            edge_rows=edge_rows,
        )
        self.train_stream = self.train_loader
        # batches made in a thread on a side stream: the step's graphs are made there too
        self.ahead = None
        staged = self.device.type == "cuda" and (self.pipeline is None or config.gpu.overlap)
        self.captured = None
        if config.gpu.cuda_graphs:  # (on a GPU: the GPU settings are refused elsewhere)
            if not isinstance(self.target, ClassTarget):
                raise ConfigError(
                    f"--cuda-graphs captures steps over class labels so far, and dataset "
                    f"{g.name!r} has {g.label_kind} labels; drop --cuda-graphs"
                )
            self.captured = CapturedSteps(self.model, self.optimizer, self.target)
        if staged:
            # (a captured step makes its graphs inside the graph: none made ahead for it)
            self.ahead = None if self.captured is not None else GraphsAhead(self.device)
            self.train_stream = Staged(self.train_loader, self.device, self.timer,
                                       copy=self.pipeline is None, prepare=self.ahead)  # fmt: skip
        # Full-neighbourhood evaluation runs layer-wise (every layer once per node).
        self.layerwise = None
        if config.layerwise_eval:
            shard = shard_from_graph(g)
            shard.x = self.x  # with learnable rows, set before each evaluation (they change)
            self.layerwise = LayerwiseInference(
                shard, 0, Communicator(0, 1, None), device=self.device
            )
        # rows held as CSR (sparse batches): the layer-wise pass multiplies their non-zeros too
        self.csr_rows = features if isinstance(features, SparseRowStore) else None
        self.eval_loaders = {
            split: MiniBatchLoader(
                getattr(g, f"{split}_idx"),
                eval_sampler,
                features,
                labels,
                batch_size=config.eval_batch_size,
                shuffle=False,
                seed=config.seed + 1,
                timer=StageTimer(),
                edge_rows=edge_rows,
            )
            for split in ("val", "test")
        }

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        if self.config.mode == "full":
            return self._train_epoch_full()  # one step: a stop is acted on after the epoch
        trained = train_epoch_batches(
            run,
            self.train_loader,
            self.train_stream,
            self.model,
            self.optimizer,
            device=self.device,
            timer=self.timer,
            objective=node_objective(self.target),
            embedding=self.embedding,
            precision=self.config.precision,
            ahead=self.ahead,
            captured=self.captured,
        )
        if trained is None:
            return None
        sums, new_edges = trained
        self.sampled_edges += new_edges
        return sums.loss_sum / max(sums.count, 1), sums.correct / max(sums.count, 1)

    def _train_epoch_full(self) -> tuple[float, float]:
        self.model.train()
        train_idx = torch.from_numpy(self.graph.train_idx).to(self.device)
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            x_NF = full_input(self.features_full, self.embedding, requires_grad=True)
            with precision_context(self.config.precision, self.device):
                logits = self.model([self.full_graph] * self.model.num_layers, x_NF).float()
                y = self.y_full[train_idx]
                loss = self.target.loss_mean(logits[train_idx], y)
            loss.backward()
            self.optimizer.step()
        step_rows(self.embedding, x_NF, self.timer)
        score = float(self.target.score_sum(logits[train_idx].detach(), y))
        return loss.item(), score / max(len(train_idx), 1)

    def evaluate(self, split: str) -> float:
        return self.evaluate_splits((split,))[split]

    @torch.no_grad()
    def evaluate_splits(self, splits: tuple[str, ...]) -> dict[str, float]:
        results = self._evaluate(splits)
        for split, (_, details) in results.items():
            self.details[split] = details
        return {split: metric for split, (metric, _) in results.items()}

    def _evaluate(self, splits: tuple[str, ...]) -> dict[str, tuple[float, dict]]:
        """Each split's ``(metric, details)``: full-graph and layer-wise from one forward pass
        over every node, sampled batches split by split."""
        if self.config.mode == "full":
            self.model.eval()
            x_NF = full_input(self.features_full, self.embedding)
            with precision_context(self.config.precision, self.device):
                logits = self.model([self.full_graph] * self.model.num_layers, x_NF)
            results = {}
            for split in splits:
                idx = torch.from_numpy(getattr(self.graph, f"{split}_idx")).to(self.device)
                evaluation = self.target.evaluation()
                evaluation.add(logits[idx], self.y_full[idx])
                results[split] = evaluation.result(LocalReducer())
            return results
        if self.layerwise is not None:
            if self.embedding is not None:
                rows = self.embedding.weight.cpu().numpy()
                self.layerwise.shard.x = rows if self.x is None else np.hstack([self.x, rows])
            x_NF = None if self.csr_rows is None else self.csr_rows.to_sparse()
            with precision_context(self.config.precision, self.device):
                return layerwise_metrics(
                    self.layerwise, self.model, splits, self.target, LocalReducer(), x_NF
                )
        results = {}
        for split in splits:
            loader = self.eval_loaders[split]
            loader.set_epoch(0)  # evaluation samples the same neighbourhoods every time
            evaluation = evaluate_batches(
                self.model, loader, self.device, self.target, self.config.precision
            )
            results[split] = evaluation.result(LocalReducer())
        return results

    def dataset_info(self) -> dict[str, Any]:
        return dataset_record(self.graph, self.spec)

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra = label_results(self.target, self.details)
        if self.config.mode == "full":
            return extra
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        extra["sampled_edges_per_s"] = (
            (self.sampled_edges / sample_time) if sample_time > 0 else None
        )
        if self.device.type == "cuda":
            # (staged CPU sampling has no GPU pipeline of its own, but graphs made ahead and
            # captured steps all the same)
            stats = {"sampler_device": "cpu"} if self.pipeline is None else self.pipeline.stats()
            # how many training batches came with their graphs made ahead (GraphsAhead)
            stats["graphs_made_ahead"] = 0 if self.ahead is None else self.ahead.made
            if self.captured is not None:
                # training steps run as replayed CUDA graphs, and the graphs captured for them
                stats["steps_replayed"] = self.captured.replays
                stats["graphs_captured"] = len(self.captured.captured)
            extra["gpu_pipeline"] = stats
        return extra


def run_training(
    config: TrainConfig, graph: Graph | TypedGraph | TemporalGraph | None = None
) -> dict[str, Any]:
    """Train once in this process with ``config`` (on ``graph`` when given, else on the dataset
    ``config.dataset`` names) and return the results dictionary."""
    if config.run.distributed:
        raise ConfigError(
            "this config runs workers (--workers/--partitions); start it with `shardgnn train` or "
            "shardgnn.train.worker.run_worker under torchrun"
        )
    from shardgnn.train.kinds import kind_of
    from shardgnn.train.recipes import select

    resolve_device(config.device)  # a GPU that is not here: refused before the graph is read
    return select(config, kind_of(config, graph)).train(config, graph=graph)
