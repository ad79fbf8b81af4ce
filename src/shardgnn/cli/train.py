"""``shardgnn train``: single-process, or N local workers (partitioning on the fly when needed).

The parent process resolves the whole config, checks everything it can before any worker starts
(the partition directory, the dataset it holds, a checkpoint to resume), and hands every worker
the resolved config as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path

from shardgnn.cli.flags import add_flags, config_from_args, field_help, flag_for, was_given
from shardgnn.errors import ConfigError
from shardgnn.train.config import (
    LINK_SPLIT_SETTINGS,
    RELATIONAL_MODELS,
    TEMPORAL_MODELS,
    LinkConfig,
    TrainConfig,
)

# Flags that a setting makes pointless: (dest, when it is ignored, why). Given anyway, they are
# reported, never silently dropped.
_IGNORED = (
    ("sampler.fanouts", lambda c: c.mode == "full", "--mode full uses every neighbour"),
    ("sampler.replace", lambda c: c.mode == "full", "--mode full uses every neighbour"),
    (
        "batch_size",
        # knowledge graphs run the full graph's encoder once per batch of training triples
        lambda c: (
            c.mode == "full" and not (c.task == "link" and c.model.model in RELATIONAL_MODELS)
        ),
        "--mode full takes one step per epoch",
    ),
    (
        "eval_batch_size",
        lambda c: c.mode == "full",
        "--mode full evaluates the whole graph at once",
    ),
    ("eval_fanouts", lambda c: c.mode == "full", "--mode full evaluates every neighbour"),
    ("cache.size", lambda c: not c.cache.enabled, "no --cache-policy is set"),
    (
        "cache.lookahead",
        lambda c: c.cache.policy != "belady",
        "only --cache-policy belady looks ahead",
    ),
    (
        "model.num_bases",
        lambda c: c.model.model != "rgcn",
        "it applies to --model rgcn (basis decomposition)",
    ),
    (
        "sampler.relation_fanouts",
        lambda c: c.mode == "full",
        "--mode full uses every neighbour",
    ),
    ("full.spmm", lambda c: c.mode != "full", "it applies to --mode full"),
    ("full.replication", lambda c: c.mode != "full", "it applies to --mode full"),
    (
        "full.bits",
        lambda c: c.mode != "full",
        "it applies to --mode full (--fetch-bits compresses mini-batch rows)",
    ),
    ("full.staleness", lambda c: c.mode != "full", "it applies to --mode full"),
    (
        "fetch_bits",
        lambda c: c.mode == "full",
        "it applies to --mode minibatch (--bits compresses full-graph rows)",
    ),
    *(
        (f"link.{field.name}", lambda c: c.task != "link", "it applies to --task link")
        for field in dataclasses.fields(LinkConfig)
    ),
    ("embedding.optimizer", lambda c: not c.embedding.enabled, "no --embedding-dim is set"),
    ("embedding.lr", lambda c: not c.embedding.enabled, "no --embedding-dim is set"),
)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train",
        help="train a GNN for node classification or link prediction",
        description=(
            "Train a GNN for node classification: in this process, or with --workers N on N local "
            "worker processes (--partitions DIR, or the dataset partitioned on the fly). One line "
            "is printed per epoch; --results FILE.json is rewritten after every epoch."
        ),
    )
    parser.add_argument(
        "dataset_arg",
        nargs="?",
        default=None,
        metavar="DATASET",
        help=field_help(TrainConfig, "dataset")
        + "; with --partitions, the partitioned one; `shardgnn "
        "info --list` names the known datasets",
    )
    add_flags(parser, TrainConfig)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn train``."""
    given = {"dataset": args.dataset_arg} if args.dataset_arg is not None else {}
    config = config_from_args(TrainConfig, args, **given)
    for dest, ignored, why in _IGNORED:
        if was_given(args, dest) and ignored(config):
            print(
                f"shardgnn train: warning: {flag_for(TrainConfig, dest)} is ignored: {why}",
                file=sys.stderr,
            )
    _check_outputs(config)
    _warn_oversubscribed(config.run.workers)
    if not config.run.distributed:
        from shardgnn.train.report import print_summary
        from shardgnn.train.single import run_training

        results = run_training(config)
        print_summary(results)
        if config.results:
            print(f"results written to {config.results}")
        return 0
    return _train_distributed(
        config, dataset_given=args.dataset_arg is not None, split_given=split_settings_given(args)
    )


def _check_outputs(config: TrainConfig) -> None:
    """Every output path is checked before the first epoch, not when it is first written."""
    from shardgnn.atomic import check_output_path

    if config.results:
        check_output_path(config.results, "--results", folder=False)
    for dest, path in (
        ("checkpoint.dir", config.checkpoint.dir),
        ("run.log_dir", config.run.log_dir),
        ("embedding.directory", config.embedding.directory),
    ):
        if path:
            check_output_path(path, flag_for(TrainConfig, dest), folder=True)


def _warn_oversubscribed(workers: int | None) -> None:
    """One line when local workers outnumber the cores this process may run on: it runs, but each
    worker gets a fraction of a core (and a collective waits for the slowest)."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if workers is not None and cores and workers > cores:
        print(
            f"shardgnn train: warning: --workers {workers} on {cores} CPU core"
            f"{'s' * (cores > 1)}: the workers share cores, so epochs are slower than with "
            f"--workers {cores} (for more parts than cores, partition with `shardgnn partition "
            "--parts N` and run them on more machines under torchrun)",
            file=sys.stderr,
        )


def split_settings_given(args: argparse.Namespace) -> list[str]:
    """The edge split settings given on the command line (checked against a stored split)."""
    return [name for name in LINK_SPLIT_SETTINGS if was_given(args, f"link.{name}")]


def _train_distributed(
    config: TrainConfig, *, dataset_given: bool, split_given: Collection[str] = ()
) -> int:
    """Partition when no --partitions, check everything, then start one worker per part."""
    from shardgnn.distributed.launch import launch_local
    from shardgnn.train.worker import train_worker

    with tempfile.TemporaryDirectory(prefix="shardgnn-parts-") as scratch:
        if config.run.partitions is None:
            config = _partition_on_the_fly(config, Path(scratch) / "parts")
            dataset_given = False  # it is what was just partitioned
        config, workers = preflight(config, dataset_given=dataset_given, split_given=split_given)
        launch_local(
            train_worker,
            (json.dumps(config.to_dict()),),
            nprocs=workers,
            log_dir=config.run.log_dir,
            stop_grace_s=config.run.stop_grace,
        )
    return 0


def _partition_on_the_fly(config: TrainConfig, out: Path) -> TrainConfig:
    workers = config.run.workers
    assert workers is not None
    method = "metis" if workers > 1 else "random"
    from shardgnn.partition.methods import EmptyPartsError

    try:
        name = _write_partitions(config, out, workers, method)
    except EmptyPartsError as exc:
        raise ConfigError(
            f"--workers {workers}: {str(exc).splitlines()[0]}; use fewer workers (every worker "
            "needs nodes of its own)"
        ) from None
    print(f"partitioned {name} into {workers} part{'s' * (workers > 1)} ({method})", flush=True)
    return dataclasses.replace(config, run=dataclasses.replace(config.run, partitions=str(out)))


def _write_partitions(config: TrainConfig, out: Path, workers: int, method: str) -> str:
    """Partition ``config``'s dataset for training into ``out``; returns the graph's name."""
    from shardgnn.graph.datasets import (
        canonical_spec,
        is_relational,
        is_temporal,
        load_dataset,
        load_hetero_dataset,
        load_temporal_dataset,
    )
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.hetero import partition_for_training
    from shardgnn.partition.methods import PartitionConfig, partition_graph
    from shardgnn.sampling.typed import relation_fanouts
    from shardgnn.train.relational import check_node_trainable, message_relations

    spec = canonical_spec(config.dataset)
    if is_temporal(config.dataset):
        from shardgnn.partition.temporal import partition_temporal

        events = load_temporal_dataset(config.dataset, config.data_dir)
        _check_worker_count(workers, events.num_nodes, events.name)
        partition_temporal(
            events, PartitionConfig(num_parts=workers, method=method, seed=config.seed), out,
            dataset_spec=spec,
        )  # fmt: skip
        return events.name
    if is_relational(config.dataset):
        typed = load_hetero_dataset(config.dataset, config.data_dir)
        _check_worker_count(workers, typed.num_nodes, typed.name)
        check_node_trainable(typed)
        # unknown relation names fail before the partitioning, not in the workers
        relation_fanouts(message_relations(typed), config.sampler.relation_layers())
        partition_for_training(
            typed, PartitionConfig(num_parts=workers, method=method, seed=config.seed), out,
            dataset_spec=spec,
        )  # fmt: skip
        return typed.name
    graph = load_dataset(config.dataset, config.data_dir)
    _check_worker_count(workers, graph.num_nodes, graph.name)
    split, dataset_fingerprint = None, None
    if config.task == "link":
        from shardgnn.train.link import check_link_trainable, split_for_partitioning

        check_link_trainable(graph, config.embedding)
        graph, split, dataset_fingerprint = split_for_partitioning(graph, config.link)
    result = partition_graph(
        graph, PartitionConfig(num_parts=workers, method=method, seed=config.seed)
    )
    write_partitions(
        graph,
        result.assignment,
        out,
        method=result.method,
        settings=result.settings,
        dataset_spec=spec,
        dataset_fingerprint=dataset_fingerprint,
        link_split=split,
    )
    return graph.name


def _check_worker_count(workers: int, num_nodes: int, name: str) -> None:
    """Each worker owns one part of the nodes: no more workers than nodes."""
    if workers > num_nodes:
        raise ConfigError(
            f"--workers {workers} exceeds the {num_nodes:,} nodes of {name}: each worker owns a "
            f"part of the nodes; use --workers {num_nodes} or fewer"
        )


def _with_stored_split(config: TrainConfig, path: Path, given: Collection[str]) -> TrainConfig:
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


def preflight(
    config: TrainConfig, *, dataset_given: bool, split_given: Collection[str] = ()
) -> tuple[TrainConfig, int]:
    """Everything the parent can check before a worker starts; returns the config the workers
    get (its dataset: the one the partition holds) and the number of workers.

    Raises:
        ConfigError / DatasetError: an unreadable or unlabelled partition directory, a dataset
            argument naming another graph, a worker count that does not match, a checkpoint that
            cannot be resumed by this run.
    """
    from shardgnn.graph.datasets import canonical_spec
    from shardgnn.partition.format import read_partitions

    assert config.run.partitions is not None
    pset = read_partitions(config.run.partitions, verify=False)  # meta.json and every file's size
    recorded = pset.dataset
    if dataset_given:
        spec = canonical_spec(config.dataset)
        if recorded["spec"] is not None and spec != recorded["spec"]:
            raise ConfigError(
                f"{pset.path} holds {recorded['spec']}, not {spec}; drop the dataset argument to "
                f"train what the partition holds, or partition {config.dataset} first"
            )
    temporal_model = config.model.model in TEMPORAL_MODELS
    if bool(pset.meta.get("temporal")) != temporal_model:
        raise ConfigError(
            f"{pset.path} holds a temporal graph: train it with --task link --model tgn, jodie "
            "or tgat"
            if not temporal_model
            else f"--model {config.model.model} needs timestamped events and {pset.path} holds "
            "a static graph; partition a temporal dataset (collegemsg, synthetic-temporal)"
        )
    if temporal_model:  # no features, labels or stored split: the events are all it needs
        return _resolved(config, pset)
    typed = bool(pset.meta.get("hetero"))
    relational_model = config.model.model in RELATIONAL_MODELS
    if typed != relational_model:
        raise ConfigError(
            f"{pset.path} holds a typed graph: train it with --model rgcn or hetero-sage"
            if typed
            else f"--model {config.model.model} needs a typed graph and {pset.path} holds an "
            "untyped one; partition a typed dataset (synthetic-hetero, hetero:DIR) or pick "
            "another model"
        )
    if typed:  # relation names in --relation-fanouts name the partition's relations
        from shardgnn.sampling.typed import relation_fanouts

        relation_fanouts(pset.meta["hetero"]["relations"], config.sampler.relation_layers())
    # a typed graph's featureless node types get learnt rows
    no_features = pset.meta.get("features") is None and not (config.embedding.enabled or typed)
    no_labels = pset.meta.get("labels") is None and config.task == "node"
    if no_features or no_labels:
        missing = "features" if no_features else "labels"
        raise ConfigError(
            f"{pset.path} holds no {missing}; partition a labelled dataset (give yours features "
            "and labels with `shardgnn convert`, or the nodes learnable rows with --embedding-dim)"
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
        config = _with_stored_split(config, pset.path, split_given)
    return _resolved(config, pset)


def _resolved(config: TrainConfig, pset) -> tuple[TrainConfig, int]:
    """The workers' config (the dataset the partition holds, the worker count) after the checks
    every kind of partition shares: the part count, the replication grid, a resumable
    checkpoint."""
    from shardgnn.fullgraph.shard import Grid
    from shardgnn.train.checkpoint import Checkpointer, check_resumable

    recorded = pset.dataset
    workers = config.run.workers if config.run.workers is not None else pset.num_parts
    if workers != pset.num_parts:
        raise ConfigError(
            f"{pset.path} holds {pset.num_parts} parts but --workers is {workers}; use --workers "
            f"{pset.num_parts} or re-partition with --parts {workers}"
        )
    if config.mode == "full":
        Grid(workers, config.full.replication)  # --replication must divide the workers
    config = dataclasses.replace(
        config,
        dataset=recorded["spec"] or recorded["name"],
        run=dataclasses.replace(config.run, workers=workers),
    )
    ckpt = config.checkpoint
    if ckpt.resume and ckpt.dir:
        latest = (
            Checkpointer(ckpt.dir, world_size=workers).latest() if Path(ckpt.dir).is_dir() else None
        )
        if latest is not None:
            check_resumable(latest[0], latest[1], config.to_dict(), workers, recorded)
    return config, workers
