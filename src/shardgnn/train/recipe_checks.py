"""The checks of a config against the kind of graph its dataset spec names (no file is read):
one function per graph kind, which :data:`shardgnn.train.kinds.KINDS` names and
:func:`shardgnn.train.recipes.select` calls before it picks a recipe. Each refuses, in one line,
what the recipes of its kind do not train, saying what does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardgnn.errors import ConfigError
from shardgnn.nn.config import (
    RELATIONAL_PREDICTORS,
    SNAPSHOT_MODELS,
    TEMPORAL_MODELS,
    TYPED_MODELS,
    WALK_MODELS,
)

if TYPE_CHECKING:
    from shardgnn.train.config import TrainConfig


def check_typed(config: TrainConfig) -> None:
    """Relational datasets (typed edges) train R-GCN + a triple scorer (DistMult, TransE,
    RotatE, ComplEx) for link prediction and typed node
    classification; the other models and scorers need a homogeneous graph."""
    model, predictor = config.model.model, config.link.predictor
    problem = None
    if model not in TYPED_MODELS:
        problem = (
            f"needs a relational model, not --model {model}: use --model rgcn, hetero-sage or hgt"
        )
    elif config.task == "link" and predictor not in ("auto", *RELATIONAL_PREDICTORS):
        problem = (
            f"scores (head, relation, tail) with --predictor {', '.join(RELATIONAL_PREDICTORS)}, "
            f"not {predictor}"
        )
    elif config.task == "link" and predictor in ("rotate", "complex") and config.link.out_dim % 2:
        problem = (
            f"scores with --predictor {predictor}, which reads --out-dim {config.link.out_dim} "
            "as complex numbers: give an even --out-dim"
        )
    elif config.task == "link" and config.link.loss == "margin":
        problem = "ranks every entity: use --link-loss softmax or bce, not margin"
    elif config.run.distributed and model in SNAPSHOT_MODELS:
        problem = f"trains --model {model} on snapshots in one process: drop --workers"
    elif config.run.distributed and config.mode == "full" and config.task == "node":
        problem = "trains with workers on sampled blocks: use --mode minibatch"
    elif config.embedding.enabled:
        problem = "gives featureless nodes learnt input rows already: drop --embedding-dim"
    elif config.task == "link" and model == "hgt":
        problem = "trains link prediction with --model rgcn: use it, or --task node for hgt"
    if problem:
        raise ConfigError(f"dataset {config.dataset!r} is a relational graph: it {problem}")
    if model == "hgt" and config.model.hidden % config.model.heads:
        raise ConfigError(
            f"--hidden {config.model.hidden} is split over --heads {config.model.heads} HGT heads: "
            f"give a multiple of {config.model.heads}"
        )


def _check_untyped(config: TrainConfig) -> None:
    """A graph without relations: nothing drawn per relation, no relational model or scorer."""
    model, predictor = config.model.model, config.link.predictor
    if config.sampler.relation_fanouts is not None and config.run.partitions is None:
        raise ConfigError(
            f"--relation-fanouts draws per relation, and dataset {config.dataset!r} has no "
            "relations; use --fanouts"
        )
    relational = predictor in RELATIONAL_PREDICTORS
    if (model in TYPED_MODELS and config.run.partitions is None) or relational:
        # with --partitions the dataset is what the directory holds: the workers check it is
        # typed
        flag = f"--model {model}" if model in TYPED_MODELS else f"--predictor {predictor}"
        raise ConfigError(
            f"{flag} needs typed edges (relations), and dataset {config.dataset!r} has none; "
            "use a relational dataset (kg-umls, kg:DIR, hetero:DIR) or another model"
        )


def check_homogeneous(config: TrainConfig) -> None:
    """A homogeneous graph: no relations, and no timestamped events for the temporal models."""
    _check_untyped(config)
    model = config.model.model
    if config.task in ("graph", "edge"):
        raise ConfigError(
            f"--task {config.task} trains on the graphs of a graph set, and dataset "
            f"{config.dataset!r} is one graph; use csl, freesolv, tracks, molecules:FILE.csv or "
            "graphset:DIR"
        )
    if model in TEMPORAL_MODELS and config.task != "link":
        raise ConfigError(f"--model {model} predicts future events: add --task link")
    if model in WALK_MODELS and config.task != "link":
        raise ConfigError(f"--model {model} predicts links from random walks: add --task link")
    if model in TEMPORAL_MODELS and config.run.partitions is None:
        # with --partitions the dataset is what the directory holds: the workers check it
        raise ConfigError(
            f"--model {model} learns from timestamped events, and dataset {config.dataset!r} "
            "has none; use a temporal dataset (collegemsg, synthetic-temporal, temporal:FILE)"
        )


def check_graphset(config: TrainConfig) -> None:
    """A graph set trains one label per graph (``--task graph``) with a graph-level model."""
    from shardgnn.nn.config import GRAPH_MODELS

    _check_untyped(config)
    problem = None
    if config.task not in ("graph", "edge"):
        problem = "has a label per graph or per edge: use --task graph or --task edge"
    elif config.model.model not in GRAPH_MODELS:
        problem = f"trains --model gin or gine, not --model {config.model.model}"
    if problem:
        raise ConfigError(f"dataset {config.dataset!r} is a set of graphs: it {problem}")


def check_temporal(config: TrainConfig) -> None:
    """Temporal datasets train the temporal models on link prediction (the snapshot models in
    one process), and the stream models on the labels of the events' sources."""
    _check_untyped(config)
    model = config.model.model
    problem = None
    if config.task not in ("link", "node"):
        problem = (
            "predicts future events (--task link) or its events' sources' labels (--task node)"
        )
    elif config.task == "node" and model in SNAPSHOT_MODELS:
        problem = f"classifies event sources with --model tgn, jodie or tgat, not --model {model}"
    elif model not in TEMPORAL_MODELS:
        problem = f"needs a temporal model, not --model {model}: use --model tgn, jodie or tgat"
    elif config.run.distributed and model in SNAPSHOT_MODELS:
        problem = f"trains --model {model} on snapshots in one process: drop --workers"
    elif config.run.distributed and config.mode == "full":
        problem = "streams events in batches: drop --mode full"
    elif config.run.distributed and config.embedding.enabled:
        problem = (
            "gives tgat learnt input rows in one process only: drop --embedding-dim or --workers"
        )
    elif config.embedding.enabled and model != "tgat":
        problem = (
            f"gives nodes memory with --model {model}: drop --embedding-dim (learnt input rows "
            "are for --model tgat)"
        )
    if problem:
        raise ConfigError(f"dataset {config.dataset!r} is a temporal graph: it {problem}")
    heads, out_dim = config.model.heads, config.link.out_dim
    if model in ("tgn", "tgat") and out_dim % heads:
        raise ConfigError(
            f"--out-dim {out_dim} is split over --heads {heads} attention heads: give a multiple "
            f"of {heads} (e.g. {heads * max(1, out_dim // heads)})"
        )
    if model == "tgn" and len(config.temporal.neighbors) != 1:
        raise ConfigError(
            f"--temporal-neighbors {','.join(map(str, config.temporal.neighbors))}: tgn attends "
            "over one hop of recent events; give one count (e.g. 10)"
        )
    chunks, batch_size = config.temporal.chunks, config.item_batch_size
    if chunks > batch_size:  # chunks of one event would start the first batch past a batch
        raise ConfigError(
            f"--chunks {chunks} splits each batch of {batch_size} events (--batch-size) into "
            f"chunks of at least one event: give at most {batch_size}"
        )
