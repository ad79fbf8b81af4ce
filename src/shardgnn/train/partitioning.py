"""Partitioning a dataset: one function, :func:`partition_dataset`, for ``shardgnn partition``
and for ``shardgnn train --workers N`` without ``--partitions``; the graph kind picks the
partitioner from the registry (:func:`shardgnn.train.kinds.partition_for`), one per kind below.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import (
    canonical_spec,
    load_dataset,
    load_temporal_dataset,
    load_typed_dataset,
    readable_spec,
)
from shardgnn.partition.config import PartitionConfig
from shardgnn.partition.metrics import PartitionMetrics
from shardgnn.train.config import LinkConfig, TrainConfig


@dataclasses.dataclass(frozen=True)
class PartitionJob:
    """What to partition, where, and for whom.

    Attributes:
        dataset: the dataset spec, as given (messages name it so).
        data_dir: where datasets are found.
        config: the partitioner's settings (``num_parts``: the parts to write).
        out: the partition directory to write.
        link: ``shardgnn partition --task link``: the edge split made before partitioning (a
            homogeneous graph's; the other kinds refuse it).
        training: partitioning for ``shardgnn train --workers N``: its config, whose checks run
            after the load (a worker per node at most, a trainable graph) and whose link split is
            made first (``--task link``).
        overwrite: replace an existing partition directory.
        progress: progress bars on stderr (when it is a terminal).
        report: say on stderr what is done, as ``shardgnn partition`` does (the graph loaded,
            the link split, a missed METIS balance).
    """

    dataset: str
    data_dir: str | None
    config: PartitionConfig
    out: Path
    link: LinkConfig | None = None
    training: TrainConfig | None = None
    overwrite: bool = False
    progress: bool = False
    report: bool = False


@dataclasses.dataclass(frozen=True)
class Partitioned:
    """What :func:`partition_dataset` wrote: the graph's name, the partition directory, the
    partitioner's result, the metrics, the seconds spent writing, and (typed graphs) the
    metrics per relation and node type (:func:`~shardgnn.partition.typed.typed_metrics`)."""

    name: str
    pset: Any
    result: Any
    metrics: PartitionMetrics
    write_s: float
    typed: dict | None = None


def partition_dataset(kind: str, job: PartitionJob) -> Partitioned:
    """Partition ``job``'s dataset, a graph of kind ``kind``, with the partitioner the registry
    names for that kind, and write the directory."""
    from shardgnn.train.kinds import partition_for

    return partition_for(kind)(job)


def partition_for_training(
    config: TrainConfig, kind: str, out: Path, workers: int, method: str
) -> tuple[str, str]:
    """Partition ``config``'s dataset (a graph of kind ``kind``) for training on ``workers``
    workers into ``out`` (with ``method`` where the kind partitions nodes); returns the graph's
    name and the method that partitioned it."""
    parts = PartitionConfig(num_parts=workers, method=method, seed=config.seed)
    job = PartitionJob(config.dataset, config.data_dir, parts, out, training=config)
    written = partition_dataset(kind, job)
    return written.name, written.pset.method


def check_worker_count(workers: int, num_nodes: int, name: str) -> None:
    """Each worker owns one part of the nodes: no more workers than nodes."""
    if workers > num_nodes:
        raise ConfigError(
            f"--workers {workers} exceeds the {num_nodes:,} nodes of {readable_spec(name)}: each "
            "worker owns a "
            f"part of the nodes; use --workers {num_nodes} or fewer"
        )


def _say(job: PartitionJob, line: str) -> None:
    if job.report:
        print(line, file=sys.stderr)


def partition_homogeneous(job: PartitionJob) -> Partitioned:
    """A homogeneous graph; for link prediction the held-out edges leave the graph first and
    the split is stored with the parts."""
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import partition_graph
    from shardgnn.partition.metrics import compute_metrics
    from shardgnn.partition.sections import LinkSplitSection

    start = time.perf_counter()
    graph = load_dataset(job.dataset, job.data_dir)
    _say(
        job,
        f"loaded {graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges "
        f"({time.perf_counter() - start:.1f} s)",
    )
    link, split, dataset_fingerprint = job.link, None, None
    if job.training is not None:
        check_worker_count(job.config.num_parts, graph.num_nodes, graph.name)
        if job.training.task == "link":
            from shardgnn.nn.config import WALK_MODELS
            from shardgnn.train.link import check_link_trainable

            if job.training.model.model not in WALK_MODELS:  # SUREL reads no features
                check_link_trainable(graph, job.training.embedding)
            link = job.training.link
    if link is not None:
        from shardgnn.train.link import split_for_partitioning

        graph, split, dataset_fingerprint = split_for_partitioning(graph, link)
        sizes = split.sizes()
        _say(
            job,
            f"link split: {sizes['train_edges']:,} training / {sizes['val_edges']:,} "
            f"validation / {sizes['test_edges']:,} test edges; partitioning the training "
            "graph",
        )
    result = partition_graph(graph, job.config, progress=job.progress)
    metrics = compute_metrics(graph, result.assignment, job.config.num_parts)
    if job.report and job.config.method == "metis":
        _warn_metis_balance(metrics, result.settings)
    start = time.perf_counter()
    pset = write_partitions(
        graph, result.assignment, job.out, method=result.method, settings=result.settings,
        overwrite=job.overwrite, num_parts=job.config.num_parts, metrics=metrics,
        seconds=result.seconds, progress=job.progress, dataset_spec=canonical_spec(job.dataset),
        dataset_fingerprint=dataset_fingerprint,
        sections=(*(() if split is None else (LinkSplitSection(split),)), *result.sections()),
    )  # fmt: skip
    return Partitioned(graph.name, pset, result, metrics, time.perf_counter() - start)


def _warn_metis_balance(metrics: PartitionMetrics, settings: dict) -> None:
    limit = 1.0 + 2.0 * float(settings["imbalance"])
    over = [
        f"{key} {getattr(metrics, 'balance_' + key):.3f}"
        for key in settings["balance"]
        if getattr(metrics, "balance_" + key) is not None
        and getattr(metrics, "balance_" + key) > limit
    ]
    if over:
        warnings.warn(
            f"METIS missed its balance target (imbalance {settings['imbalance']}): "
            f"{', '.join(over)} (max/mean); try another --seed, a larger --imbalance or fewer "
            "--balance constraints",
            stacklevel=2,
        )


def partition_typed(job: PartitionJob) -> Partitioned:
    """A typed graph: every relation reversed, every node type balanced; quality by relation
    and node type too; a knowledge graph's triples written with the parts."""
    from shardgnn.partition.typed import partition_for_training as write_typed
    from shardgnn.sampling.typed import relation_fanouts
    from shardgnn.train.typed import (
        check_node_trainable,
        check_typed_trainable,
        message_relations,
    )

    if job.link is not None:
        raise ConfigError(
            f"{job.dataset} is a typed graph: a knowledge graph's triples carry their own "
            "train/valid/test split and are written with the parts; drop --task link"
        )
    start = time.perf_counter()
    typed = load_typed_dataset(job.dataset, job.data_dir)
    _say(
        job,
        f"loaded {typed.name}: {typed.num_nodes:,} nodes of {len(typed.node_types)} types, "
        f"{typed.num_edges:,} edges of {typed.num_relations} relations "
        f"({time.perf_counter() - start:.1f} s); partitioning it with every relation "
        "reversed",
    )
    if job.training is not None:
        check_worker_count(job.config.num_parts, typed.num_nodes, typed.name)
        if job.training.task == "link":
            check_typed_trainable(typed)
        else:
            check_node_trainable(typed)
            # unknown relation names fail before the partitioning, not in the workers
            relation_fanouts(message_relations(typed), job.training.sampler.relation_layers())
    start = time.perf_counter()
    written, result, pset = write_typed(
        typed, job.config, job.out, overwrite=job.overwrite,
        dataset_spec=canonical_spec(job.dataset), num_parts=job.config.num_parts,
        progress=job.progress,
    )  # fmt: skip
    write_s = time.perf_counter() - start - result.seconds
    by_type = pset.typed_book.metrics  # written with the parts
    return Partitioned(written.name, pset, result, pset.metrics, write_s, by_type)


def partition_graphset(job: PartitionJob) -> Partitioned:
    """A graph set: whole graphs per part, every split spread evenly
    (:mod:`shardgnn.partition.graphset`)."""
    from shardgnn.graph.datasets import load_graphset_dataset
    from shardgnn.partition.graphset import write_graphset_partitions

    if job.link is not None:
        raise ConfigError(f"{job.dataset} is a set of graphs: drop --task link")
    graphs = load_graphset_dataset(job.dataset, job.data_dir)
    _say(job, f"loaded {graphs.name}: {graphs.num_graphs:,} graphs, {graphs.num_nodes:,} nodes")
    if job.training is not None and job.config.num_parts > len(graphs.train_idx):
        raise ConfigError(
            f"--workers {job.config.num_parts} exceeds the {len(graphs.train_idx)} training "
            f"graphs of {graphs.name}: each worker trains on whole graphs of its own; use "
            f"--workers {len(graphs.train_idx)} or fewer"
        )
    start = time.perf_counter()
    result, pset = write_graphset_partitions(
        graphs, job.config.num_parts, job.out, overwrite=job.overwrite,
        dataset_spec=canonical_spec(job.dataset), progress=job.progress,
    )  # fmt: skip
    write_s = time.perf_counter() - start - result.seconds
    return Partitioned(graphs.name, pset, result, pset.metrics, write_s)


def partition_temporal(job: PartitionJob) -> Partitioned:
    """A temporal graph: its T-CSR cut like a static graph, the event stream written beside."""
    from shardgnn.partition.temporal import partition_temporal as write_temporal

    if job.link is not None:
        raise ConfigError(
            f"{job.dataset} is a temporal graph: its split is chronological (made by the "
            "trainer from --link-val/--link-test); drop --task link"
        )
    events = load_temporal_dataset(job.dataset, job.data_dir)
    _say(job, f"loaded {events.name}: {events.num_nodes:,} nodes, {events.num_events:,} events")
    if job.training is not None:
        from shardgnn.train.temporal import split_events

        check_worker_count(job.config.num_parts, events.num_nodes, events.name)
        # here, not by every worker after the partitioning
        split_events(job.training, events.t, events.name)
    start = time.perf_counter()
    result, metrics, pset = write_temporal(
        events, job.config, job.out, progress=job.progress, overwrite=job.overwrite,
        dataset_spec=canonical_spec(job.dataset),
    )  # fmt: skip
    return Partitioned(events.name, pset, result, metrics, time.perf_counter() - start)
