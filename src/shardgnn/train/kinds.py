"""The graph kinds (homogeneous, typed, temporal) and what each decides whatever trains on it:
the checks of a config against a dataset of the kind, how a dataset of the kind is partitioned
(``shardgnn partition`` and ``shardgnn train --workers N`` both call
:func:`shardgnn.train.partitioning.partition_dataset`, which asks :func:`partition_for`) and how
``shardgnn infer`` runs over a partition of it (:func:`infer_for`), and what ``shardgnn info``
prints of a dataset of it (:func:`describe_dataset`). One :class:`GraphKind` entry of
:data:`KINDS` each; the recipes (:mod:`shardgnn.train.recipes`) say what trains on them."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Collection
from typing import Any

from shardgnn.errors import DatasetError
from shardgnn.graph.datasets import dataset_traits
from shardgnn.train.config import TrainConfig


def load_target(target: str) -> Any:
    """The object a ``module:name`` string names (imported on first use)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class GraphKind:
    """What a kind of graph decides, whatever trains on it.

    Attributes:
        name: ``homogeneous``, ``typed``, ``graphset`` (many graphs, a label each) or
            ``temporal``.
        graph_class: ``module:Class`` of a loaded graph of this kind (what the Python API's
            ``run_training(config, graph=...)`` is given).
        check: ``module:function(config)`` refusing, in one line, a config that does not fit a
            dataset of this kind (the spec names the kind; nothing is read).
        partition: ``module:function(job)`` that partitions a dataset of this kind
            (:class:`~shardgnn.train.partitioning.PartitionJob`).
        check_partition: ``module:function(config, pset, split_given)`` refusing, in one line,
            a partition directory of this kind that lacks what ``config`` trains on (before any
            worker starts); returns the config the workers get.
        describe: ``module:function(spec, data_dir)`` loading a dataset of this kind and
            returning what ``shardgnn info`` prints of it, as a JSON-ready dictionary.
        infer: ``module:function(ctx, run)`` running one rank of ``shardgnn infer`` over a
            partition of this kind (:class:`~shardgnn.train.inference.run.InferRun`), or ``None``.
        infer_on_cpu: its inference runs on the CPU only (so far).
    """

    name: str
    graph_class: str
    check: str
    partition: str
    check_partition: str
    describe: str
    infer: str | None = None
    infer_on_cpu: bool = False


KINDS: dict[str, GraphKind] = {
    kind.name: kind
    for kind in (
        GraphKind(
            "homogeneous", "shardgnn.graph.csr:Graph",
            "shardgnn.train.recipe_checks:check_homogeneous",
            "shardgnn.train.partitioning:partition_homogeneous",
            check_partition="shardgnn.train.partition_checks:check_homogeneous_partition",
            describe="shardgnn.graph.stats:describe_homogeneous",
            infer="shardgnn.train.inference.kinds:infer_homogeneous",
        ),
        GraphKind(
            "typed", "shardgnn.graph.typed:TypedGraph",
            "shardgnn.train.recipe_checks:check_typed",
            "shardgnn.train.partitioning:partition_typed",
            check_partition="shardgnn.train.partition_checks:check_typed_partition",
            describe="shardgnn.graph.stats:describe_typed",
            infer="shardgnn.train.inference.kinds:infer_typed", infer_on_cpu=True,
        ),
        GraphKind(
            "graphset", "shardgnn.graph.graphset:GraphSet",
            "shardgnn.train.recipe_checks:check_graphset",
            "shardgnn.train.partitioning:partition_graphset",
            check_partition="shardgnn.train.partition_checks:check_graphset_partition",
            describe="shardgnn.graph.stats:describe_graphset",
            infer="shardgnn.train.inference.kinds:infer_graphset",
        ),
        GraphKind(
            "temporal", "shardgnn.graph.temporal:TemporalGraph",
            "shardgnn.train.recipe_checks:check_temporal",
            "shardgnn.train.partitioning:partition_temporal",
            check_partition="shardgnn.train.partition_checks:check_temporal_partition",
            describe="shardgnn.graph.stats:describe_temporal",
            infer="shardgnn.train.inference.temporal:infer_temporal",
        ),
    )
}  # fmt: skip
GRAPH_KINDS = tuple(KINDS)


def partition_for(kind: str) -> Any:
    """The function that partitions a dataset of graph kind ``kind``."""
    return load_target(KINDS[kind].partition)


def describe_dataset(spec: str, data_dir: str | None = None) -> dict[str, Any]:
    """What ``shardgnn info`` prints of the dataset ``spec`` names, by the ``describe`` function
    of its graph kind (the spec names the kind).

    Raises:
        DatasetError: an unknown dataset or a malformed spec, or one that does not load.
    """
    return load_target(KINDS[dataset_traits(spec).kind].describe)(spec, data_dir)


def kind_of(config: TrainConfig, graph: Any = None) -> str:
    """The kind of a loaded ``graph`` (:func:`kind_of_graph`), else the kind ``config.dataset``
    names."""
    if graph is None:
        return dataset_traits(config.dataset).kind
    return kind_of_graph(graph)


def kind_of_graph(graph: Any) -> str:
    """The kind of a loaded graph: the kind whose ``graph_class`` it is an instance of, the most
    derived class first."""
    classes = {name: load_target(kind.graph_class) for name, kind in KINDS.items()}
    matches = [name for name, cls in classes.items() if isinstance(graph, cls)]
    if not matches:
        raise TypeError(f"not a graph of any kind: {type(graph).__name__}")
    # a subclass of another kind's class is the more specific kind
    return min(matches, key=lambda name: -len(classes[name].__mro__))


def check_partition(
    kind: str, config: TrainConfig, pset: Any, split_given: Collection[str] = ()
) -> TrainConfig:
    """The config the workers get after the checks of partition directory ``pset`` (of graph
    kind ``kind``) against ``config`` (``split_given``: the link split settings given).

    Raises:
        ConfigError: one line, from the kind's ``check_partition``.
    """
    return load_target(KINDS[kind].check_partition)(config, pset, split_given)


def infer_for(kind: str) -> Any:
    """The function that runs one rank of ``shardgnn infer`` over a partition of kind ``kind``,
    or ``None`` where none does."""
    target = KINDS[kind].infer
    return None if target is None else load_target(target)


def check_dataset_kind(config: TrainConfig) -> None:
    """Refuse ``config`` where it does not fit the kind of graph its dataset spec names (an
    unknown dataset counts as homogeneous: loading it says what is known).

    Raises:
        ConfigError: one line, from the kind's ``check``.
    """
    try:
        kind = dataset_traits(config.dataset).kind
    except DatasetError:
        kind = "homogeneous"
    load_target(KINDS[kind].check)(config)
