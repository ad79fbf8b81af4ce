"""The checks of a config against a partition directory it trains with workers, one function
per graph kind (:data:`shardgnn.train.kinds.KINDS` names it, ``shardgnn train``'s preflight
calls it through :func:`shardgnn.train.kinds.check_partition`): what the parts must hold for
the chosen recipe (features, labels, a stored link split, the relations the fan-outs name), in
one line each, before any worker starts. Each returns the config the workers get (a link run
takes the stored split's settings)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from shardgnn.errors import ConfigError
from shardgnn.options import flag_for
from shardgnn.partition.format import partition_labelled
from shardgnn.train.settings import LinkConfig

if TYPE_CHECKING:
    from shardgnn.partition.format import PartitionSet
    from shardgnn.train.config import TrainConfig


def check_homogeneous_partition(
    config: TrainConfig, pset: PartitionSet, split_given: Collection[str]
) -> TrainConfig:
    """Features (or learnt rows; SUREL reads none), edge features for a model that reads them,
    labels for node classification, something to cache, and a stored split for link
    prediction."""
    from shardgnn.nn.config import WALK_MODELS
    from shardgnn.train.setup import model_edge_dim

    model_edge_dim(config, pset.load_part(0, verify=False).edge_dim, _named(pset))
    walks = config.model.model in WALK_MODELS
    return _check_rows(config, pset, split_given, featureless_types=walks)


def _named(pset: PartitionSet) -> str:
    """A partition directory as messages name it: the dataset it holds, and where (a folder of
    the user's, or one ``shardgnn train --workers`` partitioned into on the fly)."""
    dataset = pset.dataset
    return f"dataset {dataset.get('spec') or dataset['name']!r} (partitioned in {pset.path})"


def check_typed_partition(
    config: TrainConfig, pset: PartitionSet, split_given: Collection[str]
) -> TrainConfig:
    """As a homogeneous partition, except that featureless node types learn rows; relation
    names in ``--relation-fanouts`` name the partition's relations; link prediction needs a
    knowledge graph's triples."""
    from shardgnn.sampling.typed import relation_fanouts

    if config.task == "link":  # a knowledge graph: its triples are its split
        if not pset.meta.get("triples"):
            raise ConfigError(
                f"--task link: {pset.path} holds no knowledge graph's triples; partition a "
                "knowledge graph (kg-umls, kg:DIR), or train this one with --task node"
            )
        return config
    relation_fanouts(pset.typed_book.relations, config.sampler.relation_layers())
    return _check_rows(config, pset, split_given, featureless_types=True)


def check_graphset_partition(
    config: TrainConfig, pset: PartitionSet, split_given: Collection[str]
) -> TrainConfig:
    """Edge features for GINE (the rest travels with the graphs)."""
    if config.model.model == "gine" and not (pset.meta["graphset"].get("edge_dim") or 0):
        raise ConfigError(
            f"{pset.path} holds graphs without edge features: --model gine reads them; use "
            "--model gin"
        )
    return config


def check_temporal_partition(
    config: TrainConfig, pset: PartitionSet, split_given: Collection[str]
) -> TrainConfig:
    """The chronological split must leave training and validation events, and dynamic node
    classification needs the events' labels beside the parts; nothing else (no features or
    stored split: the event stream suffices, the recipe's own checks ran on the config)."""
    from shardgnn.train.temporal import split_events

    split_events(config, pset.shared_array("events/t.npy"), pset.dataset["name"])
    if config.task == "node" and not partition_labelled(pset.meta):
        raise ConfigError(
            f"{pset.path} holds events without labels: --task node classifies each event's "
            "source by the label its events carry; partition a labelled stream "
            "(temporal:FILE,labels=1 or synthetic-temporal:classes=4,features=16) or train "
            "--task link"
        )
    return config


def _check_rows(
    config: TrainConfig, pset: PartitionSet, split_given: Collection[str], featureless_types: bool
) -> TrainConfig:
    no_features = pset.meta.get("features") is None and not (
        config.embedding.enabled or featureless_types
    )
    no_labels = pset.meta.get("labels") is None and config.task == "node"
    if no_features or no_labels:
        missing = "features" if no_features else "labels"
        raise ConfigError(
            f"{pset.path} holds no {missing}; partition a labelled dataset (give yours features "
            "and labels with `shardgnn convert`, or the nodes learnable rows with --embedding-dim)"
        )
    from shardgnn.train.setup import node_prediction_refusal

    splits = pset.meta.get("splits") or {}
    empty = [f"its {s} split is empty" for s in ("train", "val", "test") if not splits.get(s)]
    if config.task == "node" and empty:
        # as one process refuses it: no validation split picks no epoch, no test split reports
        # no score (a zero would be reported as one)
        raise node_prediction_refusal(
            _named(pset),
            empty,
            "Give the graph train, validation and test nodes (`shardgnn convert --train/--val/"
            "--test`) and partition it again.",
        )
    if (
        pset.meta.get("features") is None
        and config.cache.enabled
        and config.embedding.staleness is None
    ):
        raise ConfigError(
            f"--cache-policy {config.cache.policy}: {pset.path} holds no features, so there is "
            "nothing to cache (learnable rows are cached only with a bound on their age); add "
            "--embedding-staleness S, or drop --cache-policy"
        )
    if config.task == "link":
        config = with_stored_split(config, pset.path, split_given)
    return config


def with_stored_split(config: TrainConfig, path: Path, given: Collection[str]) -> TrainConfig:
    """``config`` with the edge split settings of the split stored in ``path`` (the split the
    workers read, so results and checkpoints record it); a split setting given on the command
    line (``given``) that differs from the stored one is refused."""
    from shardgnn.graph.linksplit import LINK_SPLIT_DIR, read_link_split_spec

    if not (path / LINK_SPLIT_DIR / "meta.json").is_file():
        raise ConfigError(
            f"--task link: {path} holds no link split ({LINK_SPLIT_DIR}/); partition with "
            "`shardgnn partition DATASET --task link --parts N --out DIR`, or give the dataset "
            "and --workers N instead of --partitions, so that the held-out edges leave the graph "
            "before it is partitioned"
        )
    spec = read_link_split_spec(path / LINK_SPLIT_DIR)
    stored = {"val": spec.val, "test": spec.test, "eval_negatives": spec.eval_negatives}
    stored["split_seed"] = spec.seed
    for name, value in stored.items():
        if name in given and getattr(config.link, name) != value:
            flag = flag_for(LinkConfig, name)
            raise ConfigError(
                f"{flag} {getattr(config.link, name)}: {path} holds a split made with {flag} "
                f"{value}; drop {flag} to train on that split, or partition again with yours"
            )
    return dataclasses.replace(config, link=dataclasses.replace(config.link, **stored))
