"""Training on a graph set: one label per graph (``--task graph``: classification or
regression, :mod:`shardgnn.nn.targets`), a GIN or GINE encoder with a readout; or one class per
edge (``--task edge``: the edges of every graph, the positive class's F1 selecting when there
are two), the same encoder with an edge head (:mod:`shardgnn.nn.graphlevel`). Batches are whole
graphs either way.

In one process (:class:`GraphSetSteps`) the set is loaded whole; with workers
(:class:`DistGraphSetSteps`) each rank loads its part of whole graphs
(:mod:`shardgnn.partition.graphset`) and trains on it data-parallel: gradients averaged by DDP,
evaluation sums and gathers reduced over ranks. Every rank takes the same number of steps per
epoch (the largest part's count at ``ceil(batch / P)`` graphs per rank): a rank with fewer
training graphs goes round its own shuffled graphs again to fill its last steps, as PyTorch's
``DistributedSampler`` pads, so no rank waits on a collective another never issues.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.graph.graphset import GraphSet, take_graphs
from shardgnn.nn.graphlevel import GraphGNN
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.targets import (
    ClassTarget,
    CommReducer,
    F1Target,
    LocalReducer,
    NodeTarget,
    Reducer,
    target_of_labels,
)
from shardgnn.precision import precision_context
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.dist_steps import DistSteps
from shardgnn.train.epoch import EpochRun, StepResult, batch_epoch
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import adam, label_results, resolve_device

GRAPH_BATCH_SIZE = 32
"""graphs per optimiser step when ``--batch-size`` is not given"""


class GraphBatcher:
    """The training graphs of one epoch in batches: shuffled by ``(seed, epoch, rank)``, ``steps``
    batches of ``batch_size`` (padded by going round the shuffled graphs again when ``steps``
    asks for more than there are), resumable after ``start`` batches."""

    def __init__(
        self, ids: np.ndarray, batch_size: int, seed: int, rank: int, steps: int | None = None
    ):
        self.ids, self.batch_size, self.seed, self.rank = ids, batch_size, seed, rank
        self.steps = steps if steps is not None else -(-len(ids) // batch_size)
        self.batches: list[np.ndarray] = []

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        order = np.random.default_rng(mix_seed(self.seed, epoch, self.rank)).permutation(self.ids)
        if self.steps > -(-len(order) // self.batch_size):
            # more steps than this rank's graphs fill: whole batches, round the shuffle again
            order = np.resize(order, self.steps * self.batch_size)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        self.batches = batches[start : self.steps]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def batch_tensors(
    graphs: GraphSet, ids: np.ndarray, device: torch.device, level: str = "graph"
) -> tuple[Any, ...]:
    """Graphs ``ids`` of ``graphs`` as one batch on ``device``: ``(graph, x, graph index, count,
    edge rows, labels)``, the model's arguments and then the labels of ``level`` (the graphs',
    or their edges' in CSR order)."""
    batch = take_graphs(graphs, ids)
    labels = batch.y if level == "graph" else batch.edge_y
    attr = None if batch.edge_attr is None else torch.from_numpy(batch.edge_attr).to(device)
    return (
        MessageGraph.from_csr(batch.indptr, batch.indices, device),
        torch.from_numpy(batch.x).to(device),
        torch.from_numpy(batch.graph_index).to(device),
        batch.num_graphs,
        attr,
        None if labels is None else torch.from_numpy(labels).to(device),
    )


def graph_model(config: TrainConfig, graphs: GraphSet, out_dim: int) -> GraphGNN:
    """The graph- or edge-level model (``config.task``) ``config`` names for ``graphs``'
    features."""
    return GraphGNN(
        config.model.model, graphs.num_features, config.model.hidden, out_dim,
        config.model.num_layers, dropout=config.model.dropout, readout=config.model.readout,
        edge_dim=graphs.edge_dim, level=config.task,
    )  # fmt: skip


def graph_set_target(config: TrainConfig, graphs: GraphSet) -> NodeTarget:
    """What the outputs meet: the graphs' labels (``--task graph``) or the edges' classes or real
    targets (``--task edge``; two classes: :class:`~shardgnn.nn.targets.F1Target`).

    Raises:
        ConfigError: the set lacks the labels the task trains on, or GINE its edge features.
    """
    if config.model.model == "gine" and graphs.edge_attr is None:
        raise ConfigError(
            f"--model gine reads edge features and {graphs.name} has none; use --model gin"
        )
    if config.task == "edge":
        if graphs.edge_y is None:
            raise ConfigError(f"{graphs.name} has no edge labels; train it with --task graph")
        if graphs.edge_label_kind != "class":
            return target_of_labels(graphs.edge_label_kind, graphs.edge_y, 0)
        return F1Target(2) if graphs.edge_classes == 2 else ClassTarget(graphs.edge_classes)
    if graphs.y is None:
        raise ConfigError(f"{graphs.name} has no graph labels, only edge labels: use --task edge")
    return target_of_labels(graphs.label_kind, graphs.y, graphs.num_classes)


class GraphSetSteps(Steps):
    """Graph-level training in one process (``graphs``: given, else loaded from the spec), and
    the epoch, evaluation and results every rank of :class:`DistGraphSetSteps` shares."""

    reducer: Reducer = LocalReducer()

    def __init__(self, config: TrainConfig, graphs: GraphSet | None = None):
        from shardgnn.graph.datasets import canonical_spec, load_graphset_dataset

        self.config = config
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graphs is None else None
        if graphs is None:
            graphs = load_graphset_dataset(config.dataset, config.data_dir)
        self._setup(graphs, rank=0, steps=None)
        self.make_optimizer()

    def _setup(self, graphs: GraphSet, rank: int, steps: int | None) -> None:
        """The model, optimiser, target and batches of this process's ``graphs``."""
        config = self.config
        self.graphs, self.level = graphs, config.task
        torch.manual_seed(config.seed)
        self.target: NodeTarget = graph_set_target(config, graphs)
        self.metric = self.target.metric
        # (a regression target standardises by its training labels: the graphs', or their edges')
        labels = graphs.y if self.level == "graph" else graphs.edge_y
        train = graphs.train_idx if self.level == "graph" else graphs.edges_of(graphs.train_idx)
        y_train = torch.from_numpy(np.asarray(labels[train]))
        self.target.fit_labels(y_train, None if steps is None else self.sum)
        self.model = graph_model(config, graphs, self.target.out_dim).to(self.device)
        self.module: torch.nn.Module = self.model
        self.timer = StageTimer()
        self.batcher = GraphBatcher(
            np.asarray(graphs.train_idx, dtype=np.int64),
            self.batch_size(),
            config.seed,
            rank,
            steps,
        )
        self.details: dict[str, dict] = {}

    def batch_size(self) -> int:
        """Graphs per step on this process."""
        return self.config.batch_size or GRAPH_BATCH_SIZE

    def make_optimizer(self) -> None:
        self.optimizer = adam(self.module.parameters(), self.config.optim)

    def _batch(self, ids: np.ndarray) -> tuple[Any, ...]:
        with self.timer("fetch"):
            return batch_tensors(self.graphs, ids, self.device, self.level)

    def _forward(self, batch: tuple[Any, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """The outputs of a batch (through the DDP wrapper with workers) and its labels."""
        *inputs, y = batch
        with precision_context(self.config.precision, self.device):
            out = self.module(*inputs)
        return out.float(), y

    def _step(self, ids: np.ndarray) -> StepResult:
        batch = self._batch(ids)
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            out, y = self._forward(batch)
            loss = self.target.loss_mean(out, y)
            loss.backward()
            self.optimizer.step()
        score = self.target.score_sum(out.detach(), y)
        return StepResult(loss.item(), score, self.target.rows_scored(y), 0)

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        self.module.train()
        sums = batch_epoch(run, self.batcher, self._step)
        if sums is None:
            return None
        loss_sum, score, count = self.sum([sums.loss_sum, sums.correct, sums.count], "metrics")
        return loss_sum / max(count, 1), score / max(count, 1)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        self.module.eval()
        evaluation = self.target.evaluation()
        ids = np.asarray(getattr(self.graphs, f"{split}_idx"), dtype=np.int64)
        size = self.config.eval_batch_size or 4 * self.batch_size()
        for start in range(0, len(ids), size):
            evaluation.add(*self._forward(self._batch(ids[start : start + size])))
        metric, self.details[split] = evaluation.result(self.reducer)
        return metric

    def dataset_info(self) -> dict[str, Any]:
        gs = self.graphs
        return graph_set_record(self.spec, gs.name, gs.fingerprint(), gs.label_kind, {
            split: int(len(getattr(gs, f"{split}_idx"))) for split in ("train", "val", "test")
        })  # fmt: skip

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return label_results(self.target, self.details)


def graph_set_record(
    spec: str | None, name: str, fingerprint: dict, label_kind: str, splits: dict[str, int]
) -> dict[str, Any]:
    """What results and checkpoints record of a graph set (splits count graphs)."""
    return {
        "spec": spec,
        "name": name,
        "fingerprint": fingerprint,
        **{k: fingerprint[k] for k in ("num_graphs", "num_nodes", "num_edges", "num_features")},
        "num_classes": fingerprint["num_classes"],
        "label_kind": label_kind,
        **splits,
    }


class DistGraphSetSteps(DistSteps, GraphSetSteps):
    """Graph-level training on workers: this rank's part of whole graphs, data-parallel."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        from shardgnn.partition.graphset import load_graph_part

        DistSteps.__init__(self, config, ctx)
        self.device = ctx.device
        self.comms = (self.main_comm,)
        self.spec = self.pset.dataset.get("spec")
        graphs = load_graph_part(self.pset, ctx.rank)
        per_rank = max(1, -(-(config.batch_size or GRAPH_BATCH_SIZE) // ctx.world_size))
        self._per_rank = per_rank
        counts = [0.0] * ctx.world_size
        counts[ctx.rank] = float(len(graphs.train_idx))
        counts = self.sum(counts, "setup")
        if min(counts) == 0:
            empty = [p for p, c in enumerate(counts) if c == 0]
            raise ConfigError(
                f"{self.pset.path}: part(s) {empty} hold no training graph; use fewer workers "
                f"than training graphs ({int(sum(counts))})"
            )
        steps = max(-(-int(c) // per_rank) for c in counts)
        self.reducer = CommReducer(self.main_comm)
        self._setup(graphs, rank=ctx.rank, steps=steps)
        self.broadcast_weights(self.model)
        self.module = self.data_parallel(self.model)
        self.make_optimizer()

    def batch_size(self) -> int:
        return self._per_rank

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        trained = GraphSetSteps.train_epoch(self, run)
        if trained is not None:
            # Batch normalisation's running statistics saw only this rank's graphs: their mean
            # over ranks after every epoch makes the model (and its evaluation and checkpoint)
            # the same on every rank. Not on a mid-epoch stop: the resumed epoch must go on from
            # exactly what each rank had.
            with self.timer("comm"):
                for buffer in self.model.buffers():
                    if buffer.is_floating_point():
                        self.main_comm.all_reduce(buffer, "allreduce")
                        buffer.div_(self.world_size)
        return trained

    def dataset_info(self) -> dict[str, Any]:
        info = self.pset.meta["graphset"]
        record = graph_set_record(
            self.spec, str(self.pset.meta.get("graph", "graphs")), info["fingerprint"],
            info["label_kind"], dict(info["splits"]),
        )  # fmt: skip
        record["partitions"] = {
            "path": str(self.pset.path), "parts": self.pset.num_parts, "method": self.pset.method,
        }  # fmt: skip
        return record
