"""The recipes: one object per kind of training, and the one place that decides which runs.

A kind of training is (graph kind: homogeneous, typed, temporal) x (task) x (mode) x (the models
it trains). Its :class:`Recipe` knows the steps that train it in one process and with workers,
the settings it reads (a flag given explicitly that it does not read is refused,
:func:`refuse_unread`) and the defaults it trains best with (applied to the settings the user did
not give, :func:`recipe_defaults`).

Every place that used to decide the kind asks :func:`select`: one-process training
(:func:`shardgnn.train.single.run_training`), a worker
(:func:`shardgnn.train.worker.train_with_context`), and ``shardgnn train``'s checks of a partition
directory. :func:`select` is also the one place that checks a config against the kind of graph
its dataset names (:func:`~shardgnn.train.kinds.check_dataset_kind`).

What depends on the graph kind alone, whatever trains on it (its checks, its partitioning, its
inference), is one entry of :data:`shardgnn.train.kinds.KINDS`.

Adding a kind of training: write its steps (a :class:`~shardgnn.train.loop.Steps`), then one
:class:`Recipe` line in :data:`RECIPES` naming them, its graph kind, task, modes and models, and
the settings it reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import DatasetTraits, dataset_traits
from shardgnn.nn.config import (
    EDGE_FEATURE_MODELS,
    GRAPH_MODELS,
    SNAPSHOT_MODELS,
    TEMPORAL_MODELS,
    TYPED_MODELS,
    WALK_MODELS,
    ModelConfig,
    is_user_model,
)
from shardgnn.options import flag_for
from shardgnn.train.config import TrainConfig
from shardgnn.train.kinds import check_dataset_kind, load_target
from shardgnn.train.recipe_settings import (
    CLUSTER_HISTORICAL,
    COMMON_SETTINGS,
    DIST_FULL,
    DIST_SAMPLED,
    EDGE,
    EDGE_DEFAULTS,
    GPU,
    GRAPH,
    GRAPH_DEFAULTS,
    JODIE,
    KG_DEFAULTS,
    LAYER_READS,
    LINK,
    MODEL,
    PRECISION,
    RGCN,
    ROWS,
    SAMPLED,
    SAMPLED_LAYER_READS,
    SUREL_DEFAULTS,
    TEMPORAL,
    TGAT,
    TGN,
    TYPED_SAMPLED,
    WORKERS,
    settings,
)

SUREL = settings(
    "model.hidden",
    "model.dropout",
    "batch_size",
    "link.val",
    "link.test",
    "link.split_seed",
    "link.eval_negatives",
    "link.negative_sampler",
    "link.negatives",
    "link.loss",
    "link.margin",
    "link.hits_at",
    "link.walks",
    "link.walk_length",
)
KG_LINK = MODEL - {"model.input_dropout"} | settings(
    "batch_size", "link.loss", "link.out_dim", "link.predictor"
)
HOMOGENEOUS_MODELS = ("sage", "gcn", "gat", "gatv2", "gin", "appnp", "sgc")
ENCODER_MODELS = (*HOMOGENEOUS_MODELS, *EDGE_FEATURE_MODELS)
"""the node encoders of one large graph's node and link recipes (gine: on a graph with edge
features)"""
_STREAM_MODELS = tuple(m for m in TEMPORAL_MODELS if m not in SNAPSHOT_MODELS)
DEFAULT_EMBEDDING_DIM = 64
"""Learnt input rows of a featureless graph when ``--embedding-dim`` is not given; link
prediction over learnt rows also takes this width for its hidden layers."""
LEARNT_ROWS_LINK_FANOUTS = (10, 10)
"""Link prediction over learnt rows (BENCHMARKS sections 10 and 15): 2 layers of 64 at fanouts
10,10 train a soc-slashdot epoch in 28 s at a 935 MiB peak, and score better after one epoch
than the node-classification defaults (3 layers of 256 at 15,10,5: ~300 s, GEMM-bound)."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One kind of training.

    Attributes:
        name: how messages and results name it (``node``, ``kg-link``, ...).
        graph: the graph kind it trains on (:data:`~shardgnn.train.kinds.GRAPH_KINDS`).
        task: ``node`` or ``link``.
        modes: the ``--mode`` values it trains in.
        models: the ``--model`` values it trains; the first is its default.
        local: ``module:Class`` of its one-process steps.
        distributed: ``module:Class`` of its steps on workers, or ``None`` (one process only).
        defaults: setting (dotted field path) -> the value this kind trains best with, used when
            the setting is not given.
        description: what it trains, in the words of messages.
    """

    name: str
    graph: str
    task: str
    modes: tuple[str, ...]
    models: tuple[str, ...]
    local: str
    distributed: str | None
    description: str
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reads: frozenset[str] = frozenset()
    """settings its steps read in one process, beyond :data:`COMMON_SETTINGS`"""
    worker_reads: frozenset[str] = frozenset()
    """settings its steps read on workers, beyond :data:`COMMON_SETTINGS`"""
    model_reads: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """model -> settings only that model reads"""
    worker_model_reads: Mapping[str, frozenset[str]] | None = None
    """the same on workers (``None``: as in one process)"""
    mode_reads: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """mode -> settings read only in that mode (in one process)"""
    user_models: bool = False
    """it also trains a model of the user's (``--model module:Class``, :mod:`shardgnn.nn.user`)"""

    def takes_model(self, model: str) -> bool:
        """Whether ``--model model`` is one this recipe trains."""
        return model in self.models or (self.user_models and is_user_model(model))

    def settings_read(self, config: TrainConfig) -> frozenset[str]:
        """Every setting (dotted field path) that training ``config`` with this recipe reads."""
        workers = config.run.distributed
        by_model = self.model_reads
        if workers and self.worker_model_reads is not None:
            by_model = self.worker_model_reads
        return (
            COMMON_SETTINGS
            | (self.worker_reads if workers else self.reads)
            | by_model.get(config.model.model, frozenset())
            | (frozenset() if workers else self.mode_reads.get(config.mode, frozenset()))
        )

    def trains(self, graph: str, config: TrainConfig) -> bool:
        """Whether this recipe is the one for ``config`` on a graph of kind ``graph``."""
        return (
            graph == self.graph
            and config.task == self.task
            and config.mode in self.modes
            and self.takes_model(config.model.model)
        )

    def steps(self, config: TrainConfig, *, graph: Any = None, ctx: Any = None):
        """The steps that train ``config``: in this process (``ctx`` None, on ``graph`` when
        given), or this rank's share of a job ``ctx`` has joined."""
        if ctx is None:
            return load_target(self.local)(config, graph)
        if self.distributed is None:
            raise ConfigError(f"{self.description} trains in one process so far: drop --workers")
        return load_target(self.distributed)(config, ctx)

    def check_workers(self, config: TrainConfig) -> None:
        """Refuse, before any partitioning or worker, what its steps on workers would refuse on
        every rank (their ``check_config``, where they have one)."""
        if self.distributed is None:
            return
        check = getattr(load_target(self.distributed), "check_config", None)
        if check is not None:
            check(config)

    def train(self, config: TrainConfig, *, graph: Any = None, ctx: Any = None) -> dict[str, Any]:
        """Train ``config`` with this recipe's steps in the shared loop; return the results."""
        from shardgnn.train.loop import TrainingLoop

        return TrainingLoop(config, self.steps(config, graph=graph, ctx=ctx), self.name).run()


RECIPES: tuple[Recipe, ...] = (
    Recipe(
        "node", "homogeneous", "node", ("minibatch",), ENCODER_MODELS,
        "shardgnn.train.single:LocalSteps", "shardgnn.train.dist_node:DistMiniBatchSteps",
        "node classification on sampled mini-batches",
        reads=MODEL | SAMPLED | ROWS | {"feature_norm", "sampler.bulk"} | PRECISION | GPU,
        worker_reads=MODEL | SAMPLED | ROWS | {"feature_norm", "sampler.bulk", "plan_rates"}
        | DIST_SAMPLED | CLUSTER_HISTORICAL | PRECISION,
        model_reads=SAMPLED_LAYER_READS,
        user_models=True,
    ),
    Recipe(
        "node-full", "homogeneous", "node", ("full",), ENCODER_MODELS,
        "shardgnn.train.single:LocalSteps", "shardgnn.train.fullgraph:DistFullNodeSteps",
        "full-graph node classification",
        reads=MODEL | ROWS | {"feature_norm"} | PRECISION,
        worker_reads=MODEL | {"feature_norm"} | DIST_FULL | PRECISION,
        model_reads=LAYER_READS,
        user_models=True,
    ),
    Recipe(
        "link", "homogeneous", "link", ("minibatch",), ENCODER_MODELS,
        "shardgnn.train.link:LinkLocalSteps", "shardgnn.train.dist_link:DistLinkSteps",
        "link prediction on sampled mini-batches",
        reads=MODEL | SAMPLED | LINK | ROWS | {"feature_norm"} | PRECISION,
        worker_reads=MODEL | SAMPLED | LINK | ROWS | {"feature_norm", "sampler.bulk"}
        | DIST_SAMPLED | PRECISION,
        model_reads=SAMPLED_LAYER_READS,
        user_models=True,
    ),
    Recipe(
        "link-full", "homogeneous", "link", ("full",), ENCODER_MODELS,
        "shardgnn.train.link:LinkLocalSteps", "shardgnn.train.link_fullgraph:DistFullLinkSteps",
        "full-graph link prediction (GAE)",
        reads=MODEL | LINK | ROWS | {"feature_norm"} | PRECISION,
        worker_reads=MODEL | LINK | {"feature_norm"} | DIST_FULL | PRECISION,
        model_reads=LAYER_READS,
        user_models=True,
    ),
    Recipe(
        "surel", "homogeneous", "link", ("minibatch",), WALK_MODELS,
        "shardgnn.train.surel:SURELSteps", "shardgnn.train.dist_surel:DistSURELSteps",
        "link prediction from random walks (SUREL)",
        defaults=SUREL_DEFAULTS, reads=SUREL, worker_reads=SUREL | WORKERS,
    ),
    Recipe(
        "typed-node", "typed", "node", ("minibatch", "full"), TYPED_MODELS,
        "shardgnn.train.typed:TypedNodeSteps",
        "shardgnn.train.dist_typed:DistTypedNodeSteps",
        "node classification on a typed graph",
        reads=MODEL,
        worker_reads=MODEL | TYPED_SAMPLED | WORKERS | settings(
            "eval_batch_size", "eval_fanouts", "embedding.storage", "embedding.directory",
            "run.host_sharing",
        ),
        model_reads=RGCN,
        mode_reads={"minibatch": TYPED_SAMPLED},
    ),
    Recipe(
        # the whole graph's encoder runs at every step: --mode full (config sets it for a
        # knowledge-graph spec; a TypedGraph handed to run_training may say minibatch)
        "kg-link", "typed", "link", ("full", "minibatch"), ("rgcn",),
        "shardgnn.train.typed:TypedLinkSteps",
        "shardgnn.train.dist_kg:DistRelationalLinkSteps",
        "knowledge-graph link prediction (R-GCN + DistMult, TransE, RotatE or ComplEx)",
        defaults=KG_DEFAULTS,
        reads=KG_LINK,
        worker_reads=KG_LINK | WORKERS,
        model_reads=RGCN,
    ),
    *(
        # one steps class for both: batches of whole graphs, the task picks the head
        Recipe(
            task, "graphset", task, ("minibatch",), GRAPH_MODELS,
            "shardgnn.train.graphlevel:GraphSetSteps",
            "shardgnn.train.graphlevel:DistGraphSetSteps",
            description, defaults=defaults, reads=group | PRECISION, worker_reads=group | WORKERS,
        )
        for task, description, defaults, group in (
            ("graph", "graph classification and regression (one label per graph of a set)",
             GRAPH_DEFAULTS, GRAPH),
            ("edge", "edge classification (a class per edge of a graph set's graphs)",
             EDGE_DEFAULTS, EDGE),
        )
    ),
    Recipe(
        "temporal-link", "temporal", "link", ("minibatch",), _STREAM_MODELS,
        "shardgnn.train.temporal:TemporalLinkSteps",
        "shardgnn.train.dist_temporal:DistTemporalLinkSteps",
        "temporal link prediction (TGN, JODIE, TGAT)",
        reads=TEMPORAL,
        worker_reads=TEMPORAL | WORKERS,
        # tgn draws the most recent events in one process (--temporal-sampling is read by the
        # distributed sampler only); tgat learns input rows in one process only
        model_reads={"tgn": TGN, "jodie": JODIE, "tgat": TGAT | {"embedding.dim"}},
        worker_model_reads={"tgn": TGN | {"temporal.sampling"}, "jodie": JODIE, "tgat": TGAT},
    ),
    Recipe(
        "temporal-node", "temporal", "node", ("minibatch",), _STREAM_MODELS,
        "shardgnn.train.temporal_node:TemporalNodeSteps",
        "shardgnn.train.dist_temporal:DistTemporalNodeSteps",
        "dynamic node classification (TGN, JODIE, TGAT: each event's source's label)",
        reads=TEMPORAL | settings("temporal.link_weight"),
        worker_reads=TEMPORAL | WORKERS | settings("temporal.link_weight"),
        model_reads={"tgn": TGN, "jodie": JODIE, "tgat": TGAT | {"embedding.dim"}},
        worker_model_reads={"tgn": TGN | {"temporal.sampling"}, "jodie": JODIE, "tgat": TGAT},
    ),
    Recipe(
        "snapshot-link", "temporal", "link", ("minibatch",), SNAPSHOT_MODELS,
        "shardgnn.train.snapshot:SnapshotLinkSteps", None,
        "link prediction on snapshots (T-GCN)",
        reads=settings(
            "model.dropout", "link.val", "link.test", "link.split_seed", "link.out_dim",
            "temporal.snapshots", "temporal.snapshot_window", "run.overlap",
        ),
    ),
)  # fmt: skip


def recipe_named(name: str) -> Recipe:
    """The recipe called ``name``."""
    for recipe in RECIPES:
        if recipe.name == name:
            return recipe
    raise KeyError(name)


class NoRecipeError(ConfigError):
    """No recipe trains a config on a graph of the kind given (the config fits its dataset)."""


def select(config: TrainConfig, graph: str) -> Recipe:
    """The recipe that trains ``config`` on a graph of kind ``graph``, after the checks of the
    kind its dataset names (:func:`check_dataset_kind`).

    Raises:
        ConfigError: the config does not fit its dataset.
        NoRecipeError: no recipe trains that combination; the message says what does.
    """
    check_dataset_kind(config)
    for recipe in RECIPES:
        if recipe.trains(graph, config):
            return recipe
    kinds = [r for r in RECIPES if r.graph == graph]
    offered = "; ".join(
        f"{r.description}: --task {r.task} --mode {'|'.join(r.modes)} --model {'|'.join(r.models)}"
        for r in kinds
    )
    raise NoRecipeError(
        f"nothing trains --task {config.task} --mode {config.mode} --model {config.model.model} "
        f"on a {graph} graph; it trains {offered}"
    )


def default_task(traits: DatasetTraits) -> str:
    """Node classification where nodes carry labels (a temporal graph: where its events carry
    their sources' labels); link prediction otherwise (unlabelled event streams, knowledge
    graphs, unlabelled edge lists); a graph set trains its graphs' labels, else its edges'
    (``labelled`` says whether its graphs carry labels)."""
    if traits.kind == "graphset":
        return "graph" if traits.labelled else "edge"
    return "node" if traits.labelled else "link"


def traits_of(spec: str, partitions: str | None = None) -> DatasetTraits:
    """What a run trains on: the partition directory's graph when ``partitions`` is given (its
    ``meta.json`` only), else the dataset ``spec`` names (nothing is loaded)."""
    if partitions is None:
        return dataset_traits(spec)
    from shardgnn.partition.format import partition_kind, partition_labelled, read_partition_meta

    meta = read_partition_meta(partitions)
    kind = partition_kind(meta)
    return DatasetTraits(
        kind,
        labelled=partition_labelled(meta),
        featured=meta.get("features") is not None or kind == "typed",
    )


def recipe_defaults(traits: DatasetTraits, given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run takes from its recipe when the user gives only some (``given``: dotted
    field path -> value, as given): the task its data asks for (:func:`default_task`), the
    recipe's first model, a mode it trains in, and the recipe's own defaults; a featureless
    homogeneous graph gets learnt input rows. Only settings absent from ``given`` are returned;
    with nothing to choose from (a combination no recipe trains) none is, and :func:`select`
    says what trains."""
    chosen: dict[str, Any] = {}
    task = given.get("task", default_task(traits))
    if "task" not in given and task != TrainConfig.task:
        chosen["task"] = task
    candidates = [r for r in RECIPES if r.graph == traits.kind and r.task == task]
    if "model.model" in given:
        candidates = [r for r in candidates if r.takes_model(given["model.model"])]
    if "mode" in given:
        candidates = [r for r in candidates if given["mode"] in r.modes]
    if not candidates:
        return chosen
    recipe = candidates[0]
    if "model.model" not in given and recipe.models[0] != ModelConfig.model:
        chosen["model.model"] = recipe.models[0]
    if "mode" not in given and TrainConfig.mode not in recipe.modes:
        chosen["mode"] = recipe.modes[0]
    chosen.update({k: v for k, v in recipe.defaults.items() if k not in given})
    # a featureless graph's nodes learn input rows where the recipe reads rows at all
    learnt_rows = traits.kind == "homogeneous" and not traits.featured
    learnt_rows = learnt_rows and "embedding.dim" in recipe.reads
    if learnt_rows and "embedding.dim" not in given:
        chosen["embedding.dim"] = DEFAULT_EMBEDDING_DIM
    if learnt_rows and task == "link" and not {"sampler.fanouts", "model.num_layers"} & set(given):
        chosen["sampler.fanouts"] = LEARNT_ROWS_LINK_FANOUTS
    if learnt_rows and task == "link" and "model.hidden" not in given:
        chosen["model.hidden"] = DEFAULT_EMBEDDING_DIM
    return chosen


def trains_with_workers(graph: str) -> str:
    """What trains on a partitioned graph of kind ``graph``, as flags
    (``--task link --model tgn, jodie or tgat``)."""

    def models(names: tuple[str, ...]) -> str:
        return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"

    by_task: dict[str, dict[str, None]] = {}
    for r in RECIPES:
        if r.graph == graph and r.distributed is not None:
            by_task.setdefault(r.task, {}).update(dict.fromkeys(r.models))
    return "; ".join(
        ("" if task == "node" else f"--task {task} ") + f"--model {models(tuple(names))}"
        for task, names in by_task.items()
    )


def partition_holds(path: Any, graph: str) -> str:
    """``DIR holds a temporal graph: train it with --task link --model tgn, ...``."""
    return f"{path} holds a {graph} graph: train it with {trains_with_workers(graph)}"


def refuse_unread(recipe: Recipe, config: TrainConfig, given: Collection[str]) -> None:
    """Refuse a setting given explicitly (``given``: dotted field paths) that ``recipe`` does
    not read for ``config``: one line naming its flag and the kinds of training it applies to.

    Raises:
        ConfigError: the first such setting, in flag order.
    """
    unread = [dest for dest in given if dest not in recipe.settings_read(config)]
    if not unread:
        return
    dest = unread[0]
    by_model = recipe.model_reads
    if config.run.distributed and recipe.worker_model_reads is not None:
        by_model = recipe.worker_model_reads
    models = [model for model, read in by_model.items() if dest in read]
    if models:  # a setting of some of this recipe's models (--heads, --alpha...)
        raise ConfigError(
            f"{flag_for(TrainConfig, dest)} does not apply to --model {config.model.model}: it "
            f"applies to --model {', '.join(models)}; drop it"
        )
    where = _readers(dest, config)
    what = f"{recipe.description} (--model {config.model.model}"
    what += ", with workers)" if config.run.distributed else ", in one process)"
    raise ConfigError(
        f"{flag_for(TrainConfig, dest)} does not apply to {what}: it applies to {where}; drop it"
    )


def _readers(dest: str, config: TrainConfig) -> str:
    """The kinds of training that read ``dest``, in words, with the ``--mode`` each takes where
    it is not ``config``'s (a run with workers is never told to add them)."""
    places = []
    for recipe in RECIPES:
        local = dest in recipe.reads or any(dest in r for r in recipe.model_reads.values())
        local = local or any(dest in r for r in recipe.mode_reads.values())
        by_model = recipe.worker_model_reads or recipe.model_reads
        workers = dest in recipe.worker_reads or any(dest in r for r in by_model.values())
        if local or workers:
            mode = "" if config.mode in recipe.modes else f" (--mode {recipe.modes[0]})"
            places.append((recipe.description, mode, local))
    if places and not config.run.distributed and not any(local for *_, local in places):
        return "training with workers (--workers N or --partitions DIR)"
    return "; ".join(
        what + ("" if local else " with workers") + mode for what, mode, local in places
    )
