"""Partitioning a dataset for training with workers, one function per graph kind; each
:class:`~shardgnn.train.recipes.Recipe` names the one its graph needs (``shardgnn train --workers
N`` without ``--partitions`` calls it through the recipe)."""

from __future__ import annotations

from pathlib import Path

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import (
    canonical_spec,
    load_dataset,
    load_hetero_dataset,
    load_temporal_dataset,
)
from shardgnn.partition.methods import PartitionConfig
from shardgnn.train.config import TrainConfig


def check_worker_count(workers: int, num_nodes: int, name: str) -> None:
    """Each worker owns one part of the nodes: no more workers than nodes."""
    if workers > num_nodes:
        raise ConfigError(
            f"--workers {workers} exceeds the {num_nodes:,} nodes of {name}: each worker owns a "
            f"part of the nodes; use --workers {num_nodes} or fewer"
        )


def _config(config: TrainConfig, workers: int, method: str) -> PartitionConfig:
    return PartitionConfig(num_parts=workers, method=method, seed=config.seed)


def partition_homogeneous(config: TrainConfig, out: Path, workers: int, method: str) -> str:
    """A homogeneous graph; for link prediction the held-out edges leave the graph first and
    the split is stored with the parts. Returns the graph's name."""
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import partition_graph

    graph = load_dataset(config.dataset, config.data_dir)
    check_worker_count(workers, graph.num_nodes, graph.name)
    split, dataset_fingerprint = None, None
    if config.task == "link":
        from shardgnn.train.link import check_link_trainable, split_for_partitioning

        check_link_trainable(graph, config.embedding)
        graph, split, dataset_fingerprint = split_for_partitioning(graph, config.link)
    result = partition_graph(graph, _config(config, workers, method))
    write_partitions(
        graph,
        result.assignment,
        out,
        method=result.method,
        settings=result.settings,
        dataset_spec=canonical_spec(config.dataset),
        dataset_fingerprint=dataset_fingerprint,
        link_split=split,
    )
    return graph.name


def partition_typed(config: TrainConfig, out: Path, workers: int, method: str) -> str:
    """A typed graph: every relation reversed, every node type balanced. Returns its name."""
    from shardgnn.partition.hetero import partition_for_training
    from shardgnn.sampling.typed import relation_fanouts
    from shardgnn.train.relational import check_node_trainable, message_relations

    typed = load_hetero_dataset(config.dataset, config.data_dir)
    check_worker_count(workers, typed.num_nodes, typed.name)
    check_node_trainable(typed)
    # unknown relation names fail before the partitioning, not in the workers
    relation_fanouts(message_relations(typed), config.sampler.relation_layers())
    partition_for_training(
        typed, _config(config, workers, method), out, dataset_spec=canonical_spec(config.dataset)
    )
    return typed.name


def partition_temporal(config: TrainConfig, out: Path, workers: int, method: str) -> str:
    """A temporal graph: its nodes partitioned, the event stream stored with the parts."""
    from shardgnn.partition.temporal import partition_temporal as write_temporal

    events = load_temporal_dataset(config.dataset, config.data_dir)
    check_worker_count(workers, events.num_nodes, events.name)
    write_temporal(
        events, _config(config, workers, method), out, dataset_spec=canonical_spec(config.dataset)
    )
    return events.name
