"""The graph kinds (homogeneous, typed, temporal) and what each decides whatever trains on it:
the checks of a config against a dataset of the kind, how a dataset of the kind is partitioned
(``shardgnn partition`` and ``shardgnn train --workers N`` both call
:func:`shardgnn.train.partitioning.partition_dataset`, which asks :func:`partition_for`) and how
``shardgnn infer`` runs over a partition of it (:func:`infer_for`). One :class:`GraphKind` entry
of :data:`KINDS` each; the recipes (:mod:`shardgnn.train.recipes`) say what trains on them."""

from __future__ import annotations

import dataclasses
import importlib
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
        name: ``homogeneous``, ``typed`` or ``temporal``.
        check: ``module:function(config)`` refusing, in one line, a config that does not fit a
            dataset of this kind (the spec names the kind; nothing is read).
        partition: ``module:function(job)`` that partitions a dataset of this kind
            (:class:`~shardgnn.train.partitioning.PartitionJob`).
        infer: ``module:function(ctx, run)`` running one rank of ``shardgnn infer`` over a
            partition of this kind (:class:`~shardgnn.train.infer.InferRun`), or ``None``.
        infer_on_cpu: its inference runs on the CPU only (so far).
    """

    name: str
    check: str
    partition: str
    infer: str | None = None
    infer_on_cpu: bool = False


KINDS: dict[str, GraphKind] = {
    kind.name: kind
    for kind in (
        GraphKind(
            "homogeneous", "shardgnn.train.recipe_checks:check_homogeneous",
            "shardgnn.train.partitioning:partition_homogeneous",
            infer="shardgnn.train.infer_kinds:infer_homogeneous",
        ),
        GraphKind(
            "typed", "shardgnn.train.recipe_checks:check_typed",
            "shardgnn.train.partitioning:partition_typed",
            infer="shardgnn.train.infer_kinds:infer_typed", infer_on_cpu=True,
        ),
        GraphKind(
            "temporal", "shardgnn.train.recipe_checks:check_temporal",
            "shardgnn.train.partitioning:partition_temporal",
        ),
    )
}  # fmt: skip
GRAPH_KINDS = tuple(KINDS)


def partition_for(kind: str) -> Any:
    """The function that partitions a dataset of graph kind ``kind``."""
    return load_target(KINDS[kind].partition)


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
