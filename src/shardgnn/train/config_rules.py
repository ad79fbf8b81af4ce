"""What the settings of a :class:`~shardgnn.train.config.TrainConfig` resolve to, and which
combinations it refuses.

:class:`ResolvedSettings`, a base of ``TrainConfig``, derives on request the values that settings
leave unset or ``auto`` (batch sizes, temporal sampling, historical embeddings, layer-wise
evaluation); :func:`resolve_and_check`, run as the config is built, resolves the rest once and
refuses invalid settings and combinations.

Neither names ``TrainConfig`` (the checks take it as ``Any``): ``shardgnn.train.config`` imports
this module, and the layering (tests/test_layers.py) allows no import back, not even for
annotations.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardgnn.distributed.config import device_problem
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.fullgraph.config import PLANNED_MODELS
from shardgnn.options import changed_settings, check_choices, invalid
from shardgnn.sampling.config import SamplerConfig
from shardgnn.store.config import check_historical, split_historical

DEFAULT_BATCH_SIZE = 1024
"""Items per step when ``--batch-size`` is not given (node classification: at most)."""
MIN_AUTO_BATCH_SIZE = 32
"""The smallest batch node classification picks by itself on a small training set."""

CAPTURED_MODELS = ("sage", "gin")
"""the models whose training step ``--cuda-graphs`` captures (shardgnn.train.captured): their
sparse matrices are made without a host read (GCN's drops self-loops by a mask, attention
softmaxes by segment)"""
LAYERWISE_MODELS = ("sage", "gcn", "gat", "gatv2", "gin", "appnp", "sgc")
"""the homogeneous models layer-wise inference runs (:mod:`shardgnn.fullgraph.inference`)"""


class ResolvedSettings:
    """The values a :class:`~shardgnn.train.config.TrainConfig` derives from its settings (a
    base of it, holding no fields of its own)."""

    def node_batch_size(self, num_train: int) -> int:
        """Seed nodes per step of node classification with ``num_train`` training nodes:
        ``--batch-size``, else :data:`DEFAULT_BATCH_SIZE` or, on a small training set, an eighth
        of it (at least :data:`MIN_AUTO_BATCH_SIZE`): the per-class splits (20 nodes per class)
        took one step per epoch at 1024 and stopped far from trained (0.24 test accuracy on
        amazon-computers after 10 epochs; 0.76 at 8 steps per epoch)."""
        if self.batch_size is not None:
            return self.batch_size
        return min(DEFAULT_BATCH_SIZE, max(MIN_AUTO_BATCH_SIZE, -(-num_train // 8)))

    @property
    def item_batch_size(self) -> int:
        """Target edges, events or triples per step: ``--batch-size``, else
        :data:`DEFAULT_BATCH_SIZE`."""
        return DEFAULT_BATCH_SIZE if self.batch_size is None else self.batch_size

    @property
    def temporal_sampling(self) -> str:
        """The temporal sampler's mode (``--temporal-sampling auto`` resolved by the model)."""
        if self.temporal.sampling != "auto":
            return self.temporal.sampling
        return "uniform" if self.model.model == "tgat" else "recent"

    @property
    def historical_layers(self) -> range | None:
        """The block layers served from historical embeddings (``--historical L:AGE``)."""
        if self.historical is None:
            return None
        return range(split_historical(self.historical)[0], self.model.num_layers)

    @property
    def historical_age(self) -> int | None:
        return None if self.historical is None else split_historical(self.historical)[1]

    @property
    def historical_push_interval(self) -> int:
        """Steps between two sends of one node's embedding to one worker."""
        if self.historical_push_every is not None:
            return self.historical_push_every
        return max(1, self.historical_age or 0)

    @property
    def layerwise_eval(self) -> bool:
        """Mini-batch evaluation with full neighbourhoods (all eval fanouts -1) runs layer-wise
        (every layer once per node, shardgnn.fullgraph.inference) for the models it supports."""
        fanouts = self.eval_fanouts or self.sampler.fanouts
        return (
            self.mode == "minibatch"
            and self.task == "node"
            and all(f == -1 for f in fanouts)
            and self.model.model in LAYERWISE_MODELS
        )


def resolve_and_check(config: Any) -> None:
    """Resolve what ``config`` leaves to its other settings (the layers, a relational link
    task's mode, the evaluation fanouts) and refuse invalid settings and combinations, each in
    one line that says what to give instead. A :class:`~shardgnn.train.config.TrainConfig` runs
    this as it is built, so every config is valid."""
    check_choices(config)
    if not isinstance(config.dataset, str) or not config.dataset.strip():
        raise ConfigError(
            f"dataset spec {config.dataset!r} is empty; name a dataset such as cora or synthetic"
        )
    for name in ("batch_size", "eval_batch_size"):
        if getattr(config, name) is not None and getattr(config, name) < 1:
            raise invalid(config, name, "must be >= 1")
    if config.threads is not None and config.threads < 1:
        raise invalid(config, "threads", "must be >= 1")
    if (problem := device_problem(config.device)) is not None:
        raise invalid(config, "device", problem)
    if config.task == "link" and _names_typed(config):
        # Relational link prediction encodes the whole graph at every step (the knowledge
        # graphs it runs on are small): full-graph layers, whatever --mode says.
        config.mode = "full"
    _resolve_layers(config)
    if config.eval_fanouts is not None:
        config.eval_fanouts = SamplerConfig(fanouts=config.eval_fanouts).fanouts
        if len(config.eval_fanouts) != config.model.num_layers:
            raise invalid(
                config,
                "eval_fanouts",
                f"name {config.model.num_layers} layers, one per model layer",
            )
    _check_combinations(config)


def _resolve_layers(config: Any) -> None:
    """Unset ``--layers``: one per fanout (mini-batch), 2 (full graph) or 4 (graph-level
    training, whose batches are whole graphs). Full-graph and graph-level runs record fanouts
    of -1 (every neighbour), which is what they compute."""
    model, sampler = config.model, config.sampler
    whole_graphs = config.task in ("graph", "edge")
    if config.mode == "minibatch" and not whole_graphs:
        if model.num_layers is None:
            config.model = dataclasses.replace(model, num_layers=len(sampler.fanouts))
        elif model.num_layers != len(sampler.fanouts):
            flag, counts = (
                ("--fanouts", sampler.fanouts) if sampler.ladies is None
                else ("--ladies", sampler.ladies)
            )  # fmt: skip
            raise ConfigError(
                f"--layers {model.num_layers} but {flag} {','.join(map(str, counts))} names "
                f"{len(counts)}; give one count per layer"
            )
    else:
        default = 4 if whole_graphs else 2
        layers = default if model.num_layers is None else model.num_layers
        config.model = dataclasses.replace(model, num_layers=layers)
        config.sampler = dataclasses.replace(sampler, fanouts=(-1,) * layers)


def _names_typed(config: Any) -> bool:
    """Whether the dataset spec names a typed graph (its graph kind, as the registry of datasets
    records it; no graph is loaded)."""
    from shardgnn.graph.datasets import dataset_traits

    try:
        return dataset_traits(config.dataset).kind == "typed"
    except DatasetError:
        return False  # an unknown dataset: loading it says so, with the list of known ones


def _check_combinations(config: Any) -> None:
    # the checks against the kind of graph the dataset names run with the recipe's choice
    # (shardgnn.train.recipes.select, shardgnn.train.recipe_checks)
    if config.embedding.enabled and config.run.distributed:
        dim = f"--embedding-dim {config.embedding.dim}"
        if config.mode == "full":
            raise ConfigError(
                f"{dim}: sharded learnable rows train in --mode minibatch so far; use it, or "
                "one process for full-graph training"
            )
        if config.run.overlap == "on":
            raise ConfigError(
                f"{dim} with --overlap on: a batch must read the rows after the previous "
                "step updated them, so learnable rows run without the prefetch thread; use "
                "--overlap auto or off"
            )
    if not config.run.distributed:
        flags = [
            *changed_settings(config.full),
            *changed_settings(config.cache),
            *changed_settings(config, ("fetch_bits", "feature_storage")),
            *changed_settings(config.embedding, ("staleness",)),
            *changed_settings(config, ("error_feedback", "plan_rates")),
        ]
        if flags:
            raise ConfigError(
                f"{', '.join(flags)} shape(s) communication between workers, and this run has "
                "one process; add --workers N (or --partitions DIR) to train distributed "
                "(--workers 1 runs one worker over a one-part partition, which a cache or "
                "disk storage can front)"
            )
    if config.batching == "cluster" and (
        not config.run.distributed or config.mode != "minibatch" or config.task != "node"
    ):
        raise ConfigError(
            "--batching cluster groups the training nodes of each worker's part: it applies "
            "to distributed mini-batch node classification (add --workers N, --mode "
            "minibatch, --task node), or drop it"
        )
    if config.clusters_per_batch < 1:
        raise invalid(config, "clusters_per_batch", "must be >= 1")
    if config.cluster_halo is not None:
        if config.batching != "cluster":
            raise ConfigError(
                f"--cluster-halo {config.cluster_halo} bounds the halo of cluster batches; add "
                "--batching cluster or drop it"
            )
        if not 0 <= config.cluster_halo <= config.model.num_layers:
            raise invalid(
                config, "cluster_halo", f"must lie in [0, {config.model.num_layers}] (the layers)"
            )
    _check_historical(config)
    if config.gpu.cuda_graphs:
        _check_cuda_graphs(config)
    bits = config.full.bits if config.mode == "full" else config.fetch_bits
    if config.error_feedback and bits == 32:
        flag = "--bits" if config.mode == "full" else "--fetch-bits"
        raise ConfigError(
            f"--error-feedback compensates low-bit sends, and {flag} is 32 (exact); give "
            f"{flag} 1, 2, 4, 8 or 16, or drop --error-feedback"
        )
    _check_plan_rates(config)
    _check_auto_cache(config)
    staleness = config.embedding.staleness
    if staleness is not None and not config.embedding.enabled:
        raise ConfigError(
            f"--embedding-staleness {staleness} bounds the age of cached learnable rows, and "
            "this run has none; add --embedding-dim D or drop --embedding-staleness"
        )
    if staleness is not None and config.cache.policy in ("none", "belady"):
        raise ConfigError(
            f"--embedding-staleness {staleness} caches peers' learnable rows in the cache of "
            f"--cache-policy, which is {config.cache.policy}: give degree, presample, fifo or "
            "lru (belady fetches rows batches before they are read)"
        )
    if config.model.attention_dropout and config.mode == "full" and config.run.distributed:
        raise ConfigError(
            f"--attention-dropout {config.model.attention_dropout}: its masks come from each "
            "worker's generator, not from node ids, so full-graph workers would not compute one "
            "process's epoch; drop it, or train in one process or with --mode minibatch"
        )
    if config.mode == "full" and (config.cache.enabled or config.feature_storage != "memory"):
        raise ConfigError(
            "--cache-policy and --feature-storage disk apply to mini-batch training; "
            "full-graph training exchanges halo rows once per layer instead (drop them or use "
            "--mode minibatch)"
        )
    if config.feature_storage == "disk" and config.layerwise_eval:
        raise ConfigError(
            "--feature-storage disk keeps features out of RAM, but full-neighbourhood "
            "evaluation (--eval-fanouts all -1) runs layer-wise over every local row at once; "
            "give sampled --eval-fanouts (e.g. 15,10,5) or use --feature-storage memory"
        )


def _check_plan_rates(config: Any) -> None:
    """``--plan-rates`` goes with what the cost model picks or prices, and hybrid needs it."""
    full = config.full
    if full.dependencies == "hybrid" and not config.plan_rates:
        raise invalid(
            full,
            "dependencies",
            "hybrid prices communicating against recomputing with this machine's rates: "
            "add --plan-rates FILE (from `shardgnn plan --calibrate --out FILE`)",
        )
    if not config.plan_rates:
        return
    if config.mode == "full" and full.spmm != "auto" and full.dependencies != "hybrid":
        needs = f"needs --spmm auto or --dependencies hybrid (got --spmm {full.spmm})"
    elif config.mode != "full" and config.cache.policy != "auto":
        needs = f"needs --cache-policy auto (got --cache-policy {config.cache.policy})"
    else:
        return
    raise invalid(config, "plan_rates", needs)


def _check_auto_cache(config: Any) -> None:
    """``--cache-policy auto`` picks with the mini-batch plan (``shardgnn plan``'s): refused,
    in one line, where that plan does not model the run."""
    if config.cache.policy != "auto":
        return
    unplanned = [
        (config.task != "node", f"--task {config.task}"),
        (config.model.model not in PLANNED_MODELS, f"--model {config.model.model}"),
        (config.embedding.enabled, "learnable rows (--embedding-dim)"),
        (config.feature_storage != "memory", f"--feature-storage {config.feature_storage}"),
        (config.historical is not None, "--historical"),
        (config.batching != "random", f"--batching {config.batching}"),
        (config.sampler.ladies is not None, "--ladies"),
        (config.fetch_bits not in (8, 32), f"--fetch-bits {config.fetch_bits}"),
    ]
    what = [words for applies, words in unplanned if applies]
    if what:
        raise ConfigError(
            f"--cache-policy auto picks with the cost model of `shardgnn plan`, which plans node "
            f"classification by {', '.join(PLANNED_MODELS)} with exact or 8-bit rows held in "
            f"memory, not {what[0]}; give --cache-policy presample (or another) or none"
        )


def _check_cuda_graphs(config: Any) -> None:
    """What ``--cuda-graphs`` captures: a GraphSAGE or GIN step over sampled blocks, in fp32, on
    a GPU (the recipe refuses it for other kinds of training)."""
    why = None
    if config.device.startswith("cpu"):
        why = "runs on a GPU, and --device is cpu; give --device cuda"
    elif config.model.model not in CAPTURED_MODELS:
        why = (
            f"captures {' and '.join(CAPTURED_MODELS)} steps so far, and --model is "
            f"{config.model.model}; use --model sage or gin"
        )
    elif config.precision != "fp32":
        why = f"captures fp32 steps so far, and --precision is {config.precision}; give fp32"
    elif config.embedding.enabled:
        why = "captures steps over feature rows, and learnable rows (--embedding-dim) are updated "
        why += "outside the step; drop --embedding-dim"
    elif config.sampler.ladies is not None:
        why = "pads node-wise blocks, and --ladies weighs its edges; drop --ladies"
    if why is not None:
        raise ConfigError(f"--cuda-graphs {why}, or drop --cuda-graphs")


def _check_historical(config: Any) -> None:
    if config.historical_push_every is not None and config.historical_push_every < 1:
        raise invalid(config, "historical_push_every", "must be >= 1")
    if config.historical_push_every is not None and config.historical_mode == "pull":
        raise ConfigError(
            f"--historical-push-every {config.historical_push_every} paces pushes, and "
            "--historical-mode is pull; drop one of them"
        )
    if config.historical is None:
        if config.historical_scope != "remote":
            raise ConfigError(
                f"--historical-scope {config.historical_scope} says which nodes historical "
                "embeddings serve, and --historical is not set; add --historical L:AGE"
            )
        return
    check_historical(config.historical, config.model.model, config.model.num_layers)
    flag = f"--historical {config.historical}"
    if not config.run.distributed or config.mode != "minibatch" or config.task != "node":
        raise ConfigError(
            f"{flag} replaces remote nodes' embeddings with their owners' pushes: it applies "
            "to distributed mini-batch node classification (add --workers N, --mode "
            "minibatch, --task node), or drop it"
        )
    if config.run.overlap == "on" or config.cache.policy == "belady":
        what = "--overlap on" if config.run.overlap == "on" else "--cache-policy belady"
        raise ConfigError(
            f"{flag} with {what}: a batch must be sampled after the previous step's push, "
            "and both sample batches ahead; use --overlap auto or off and another cache "
            "policy"
        )
