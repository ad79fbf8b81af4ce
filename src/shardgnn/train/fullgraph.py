"""Distributed full-graph training: every rank computes every layer for its rows of the graph,
with the distributed SpMM of :mod:`shardgnn.fullgraph.spmm` in place of the local one.

Equal to single-process full-graph training (:class:`~shardgnn.train.single.LocalSteps` with
``mode="full"``): the loss is the mean over *all* training nodes (each rank sums its own part's
and divides by the global count), dropout masks are keyed by original node id
(``GNN.use_hashed_dropout``), and weight gradients are summed over ranks. At 32 bits and
staleness 0, losses and accuracies match per epoch within fp32 rounding (tested at 1e-5 for
P = 2, 3, 4, every SpMM variant, and METIS partitions with dropout on).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch

from shardgnn.distributed.codec import make_codec
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.config import DEPENDENCY_MODELS, GRID_VARIANTS
from shardgnn.fullgraph.shard import (
    Grid,
    grid_of,
    input_rows,
    load_shard,
    make_grid_groups,
)
from shardgnn.fullgraph.spmm import DistFullGraph
from shardgnn.nn.models import build_model
from shardgnn.nn.targets import CommReducer, target_of_labels
from shardgnn.precision import precision_context
from shardgnn.seeding import mix_seed
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import DistSteps, partition_dataset_record
from shardgnn.train.epoch import EpochRun
from shardgnn.train.loop import EpochRecord
from shardgnn.train.setup import (
    adam,
    label_results,
    model_edge_dim,
)

DIST_FULL_MODELS = ("gcn", "sage", "gin", "appnp", "sgc", "gat", "gatv2", "gine")
"""the models distributed full-graph training runs: layers that aggregate through the
distributed SpMM, and layers that compute a message per in-edge over the halo rows (attention,
GINE's edge features)"""

HALO_ROW_MODELS = ("gat", "gatv2", "gine")
"""the models whose layers read the halo rows themselves (``DistLayerGraph.source_rows``): the
synchronous ``1d-sparse`` plan without replication only"""


class DistFullGraphSteps(DistSteps):
    """What one rank of any distributed full-graph job holds (``--mode full --workers N``): its
    rows of the graph and their features, the distributed adjacency every layer runs on, a
    model with identical initial weights on every rank, and the step that sums weight gradients
    over ranks. Subclasses add the task: :class:`DistFullNodeSteps` (node classes) and
    :class:`~shardgnn.train.link_fullgraph.DistFullLinkSteps` (links)."""

    @staticmethod
    def check_config(config: TrainConfig) -> None:
        """Refuse, in one line, a model these steps do not run with ``config``'s settings: by
        the launcher before any partitioning or worker (:meth:`~shardgnn.train.recipes.Recipe.
        check_workers`), and by every rank."""
        model, full = config.model.model, config.full
        if model not in DIST_FULL_MODELS:
            raise ConfigError(
                f"--model {model}: distributed full-graph training runs "
                f"{', '.join(DIST_FULL_MODELS)}; use one of them (or --mode minibatch for "
                f"{model})"
            )
        # --spmm auto picks 1d-sparse for them
        if model in HALO_ROW_MODELS and (
            full.spmm not in ("1d-sparse", "auto") or full.replication != 1 or full.staleness
        ):
            raise ConfigError(
                f"--model {model} in distributed full-graph mode reads each edge's "
                "source row from its owner: it runs with --spmm 1d-sparse, --replication 1 and "
                "--staleness 0; drop the others (or use --model gcn/sage/gin for them)"
            )
        if full.dependencies != "communicate" and model not in DEPENDENCY_MODELS:
            raise ConfigError(
                f"--dependencies {full.dependencies} recomputes remote rows layer by layer, for "
                f"--model {', '.join(DEPENDENCY_MODELS)}; use one of them or --dependencies "
                f"communicate with --model {model}"
            )

    def __init__(self, config: TrainConfig, ctx: DistContext, *, need_labels: bool):
        assert config.mode == "full"
        self.check_config(config)
        full = config.full
        if full.spmm == "auto":  # a config that did not come through `shardgnn train`
            raise ConfigError(
                "--spmm auto is decided before the workers start (`shardgnn train`, "
                "`python -m shardgnn.run train`); give a concrete --spmm here"
            )
        super().__init__(config, ctx)
        self.grid = grid_of(full, ctx.world_size)
        self.spmm_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        two_d = full.spmm in GRID_VARIANTS
        # 2D/3D: a rank holds its own part's rows (features, labels) and multiplies a block of
        # its grid row's adjacency (read without features).
        self.shard = load_shard(
            self.pset.path,
            Grid(ctx.world_size, 1) if two_d else self.grid,
            ctx.rank,
            self.spmm_comm,
            need_labels=need_labels,
            read_features=False,
        )
        block = (
            load_shard(self.pset.path, self.grid, ctx.rank, self.spmm_comm, data=False)
            if two_d
            else None
        )
        groups = make_grid_groups(self.grid, ctx.rank, self.spmm_comm, ctx.timeout_s)
        # Comm stats of the grid groups (1.5D, 2D, 3D) are reported with the world's.
        self.comms = tuple(
            {
                id(c): c
                for c in (self.spmm_comm, groups.row, groups.col, groups.fiber, self.main_comm)
            }.values()
        )
        codec = make_codec(full.bits, mix_seed(config.seed, ctx.rank, 0xC0DEC))
        self.graph = DistFullGraph(
            self.shard,
            self.grid,
            ctx.rank,
            groups,
            full,
            codec,
            ctx.device,
            error_feedback=config.error_feedback,
            block=block,
        )
        # stored sparse or dense: one choice for the whole graph (the two layouts fetch remote
        # rows through different collectives, --dependencies)
        x = input_rows(self.shard.x_parts, config.feature_norm, self.main_comm)
        self.x = x.to(ctx.device)
        # --dependencies cache/hybrid extends the rows once the model is known
        self._x_own: torch.Tensor | None = x if full.dependencies != "communicate" else None

    def _set_model(self, build: Callable[[], torch.nn.Module], out_dim: int) -> None:
        """Build the model from ``--seed`` (identical initial weights on every rank, and as one
        process), key its dropout by original node id, and create its optimiser; with
        ``--dependencies cache/hybrid``, decide the remote rows each layer computes here
        (``out_dim``: the model's output width, which hybrid's costs need)."""
        torch.manual_seed(self.config.seed)
        self.model = build().to(self.ctx.device)
        self.model.use_hashed_dropout(self.config.seed)
        self.broadcast_weights(self.model)
        optim = self.config.optim
        self.optimizer = adam(self.model.parameters(), optim)
        if self.config.full.dependencies != "communicate":
            self._set_dependencies(out_dim)
        self.layers = [self.graph.layer(i) for i in range(self.model.num_layers)]

    def _set_dependencies(self, out_dim: int) -> None:
        """``--dependencies``: the remote rows each layer computes here, and the features of
        every remote node this rank computes (fetched once)."""
        full, settings, x_own = self.config.full, self.config.model, self._x_own
        assert x_own is not None
        self._x_own = None  # not kept past the set-up
        costs, nonzeros = None, None
        if full.dependencies == "hybrid":
            from shardgnn.fullgraph.plan import dependency_costs
            from shardgnn.fullgraph.rates import read_rates

            mean_nnz = None
            if x_own.is_sparse:  # each own row's non-zeros: its stored entries
                row_nnz = x_own.coalesce().indices()[0].bincount(minlength=x_own.shape[0])
                mean_nnz = float(row_nnz.sum()) / max(1, x_own.shape[0])
            dims = [x_own.shape[1]] + [settings.hidden] * (settings.num_layers - 1)
            costs = dependency_costs(
                read_rates(self.config.plan_rates, "--plan-rates"),
                torch.get_num_threads(),
                settings.model,
                [*dims, out_dim],
                full.bits,
                mean_nnz,
            )
            if costs.input_nonzero_s is not None:  # each cached row priced by its own
                nonzeros = row_nnz.numpy()
        self.graph.set_dependencies(self.model.num_layers, costs, nonzeros)
        # sparse features travel as their non-zeros
        self.x = self.graph.dependency_rows(x_own).to(self.ctx.device)

    def _model_edge_dim(self) -> int:
        """The width of the edge rows the model reads from this rank's shard (0: none; a model
        that needs them is refused without any): :func:`~shardgnn.train.setup.model_edge_dim`."""
        attr = self.shard.edge_attr
        width = 0 if attr is None else int(attr.shape[1])
        return model_edge_dim(self.config, width, str(self.pset.path))

    @contextlib.contextmanager
    def _timed_step(self):
        """Time one training step as ``comm`` (SpMM exchanges, gradient all-reduce, pair rows)
        and ``compute`` (the rest)."""
        self.model.train()
        comm_before = self._comm_seconds()
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        yield
        elapsed = time.perf_counter() - start
        comm = self._comm_seconds() - comm_before
        self.timer.add("comm", comm)
        self.timer.add("compute", elapsed - comm)

    def _backward_and_step(self, loss_share: torch.Tensor) -> None:
        """``loss_share``: this rank's share of the global loss (its sum over its own rows or
        pairs divided by the global count), so the weight gradients of all ranks add up to the
        gradient of the global loss."""
        loss_share.backward()
        self._allreduce_gradients()
        self.optimizer.step()

    def _comm_seconds(self) -> float:
        return sum(
            st.time_s
            for c in self.comms
            for name, st in c.stats.items()
            if name in ("spmm", "allreduce", "pairs")
        )

    def _allreduce_gradients(self) -> None:
        self.sum_gradients([p for p in self.model.parameters() if p.grad is not None])

    def generators(self) -> list[torch.Generator]:
        codec = self.graph.codec
        return [] if codec is None or codec.generator is None else [codec.generator]

    def extra_state(self) -> dict[str, torch.Tensor]:
        """The error-feedback residuals and, with ``--staleness``, the exchanges in flight
        (:meth:`DistFullGraph.state_dict`): a resumed run goes on as the uninterrupted one."""
        return {"fullgraph." + k: v for k, v in self.graph.state_dict().items()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        prefix = "fullgraph."
        self.graph.load_state_dict(
            {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        )

    def load_resharded_extra_state(self, states: list[dict[str, torch.Tensor]]) -> None:
        """On another worker count the residuals and exchanges in flight belong to the old
        partition's halo plan: they start afresh (zero residuals; the first ``--staleness``
        steps wait for their own exchanges), the rest of the run as before."""

    def finish(self) -> None:
        self.graph.drain()

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        full = self.config.full
        return {
            "partitioner": self.pset.method,
            "spmm": full.spmm,
            "replication": full.replication,
            "grid": self.grid.shape if full.spmm in GRID_VARIANTS else None,
            "bits": full.bits,
            "staleness": full.staleness,
            "error_feedback": self.config.error_feedback,
            # the senders' residuals, summed over workers
            "residual_mb": self.sum([float(self.graph.residual_bytes)])[0] / 1e6,
            "dependencies": self._dependency_counts(),
        }

    def _dependency_counts(self) -> dict[str, Any]:
        """``--dependencies``, and with cache/hybrid per layer the remote rows computed here
        (layer 0: the cached feature rows) and those received, summed over workers."""
        deps, mode = self.graph.deps, self.config.full.dependencies
        if deps is None:
            return {"mode": mode}
        layers = range(deps.num_layers)
        recomputed = self.sum([float(deps.recomputed(i)) for i in layers])
        received = self.sum([float(len(deps.received[i])) for i in layers])
        return {
            "mode": mode,
            "recomputed_rows": [int(v) for v in recomputed],
            "received_rows": [int(v) for v in received],
        }


class DistFullNodeSteps(DistFullGraphSteps):
    """One rank of distributed full-graph node classification."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        super().__init__(config, ctx, need_labels=True)
        shard = self.shard
        self.y = torch.from_numpy(shard.y).to(ctx.device)
        self.splits = {k: torch.from_numpy(v).to(ctx.device) for k, v in shard.splits.items()}
        counts = self.sum([float(len(v)) for v in shard.splits.values()], "setup")
        self.split_sizes = {k: int(c) for k, c in zip(shard.splits, counts)}
        if self.split_sizes["train"] == 0:
            raise ConfigError(
                f"{self.pset.path} has no training nodes; partition a dataset with a training split"
            )
        self.num_classes = shard.num_classes
        self.target = target_of_labels(shard.label_kind, shard.y, self.num_classes)
        self.metric, self.details = self.target.metric, {}
        y_train = self.y[self.splits["train"]].cpu()
        self.target.fit_labels(y_train, lambda values: self.sum(values, "setup"))
        edge_dim = self._model_edge_dim()
        self._set_model(
            lambda: build_model(config.model, shard.num_features, self.target.out_dim, edge_dim),
            self.target.out_dim,
        )

    # ------------------------------------------------------------------ epochs
    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        # one step per epoch: a stop signal is acted on at the end of the epoch, by the loop
        # Split indices are held-row ids of this rank's own part: with 1.5D replication each
        # replica scores only its own part, so every node counts once.
        train_idx = self.splits["train"]
        with self._timed_step():
            with precision_context(self.config.precision, self.ctx.device):
                logits = self.model(self.layers, self.x)[train_idx].float()
                y = self.y[train_idx]
                loss_sum = self.target.loss_sum(logits, y)
            self._backward_and_step(loss_sum / self.split_sizes["train"])
        loss_total, correct = self.sum(
            [float(loss_sum.detach()), float(self.target.score_sum(logits.detach(), y))]
        )
        return loss_total / self.split_sizes["train"], correct / self.split_sizes["train"]

    def evaluate(self, split: str) -> float:
        return self.evaluate_splits((split,))[split]

    @torch.no_grad()
    def evaluate_splits(self, splits: tuple[str, ...]) -> dict[str, float]:
        """Every split from one forward pass (its exchanges included)."""
        self.model.eval()
        with precision_context(self.config.precision, self.ctx.device):
            logits = self.model(self.layers, self.x)
        metrics = {}
        for split in splits:
            idx = self.splits[split]
            evaluation = self.target.evaluation()
            evaluation.add(logits[idx], self.y[idx])
            metrics[split], self.details[split] = evaluation.result(CommReducer(self.main_comm))
        return metrics

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        return {**super().results_extra(history), **label_results(self.target, self.details)}

    # ------------------------------------------------------------------ results
    def dataset_info(self) -> dict[str, Any]:
        return partition_dataset_record(
            self.pset, self.shard.num_features, self.num_classes, self.split_sizes
        )
