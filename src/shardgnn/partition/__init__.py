"""Graph partitioning: partitioners, the partition book, quality metrics and the on-disk format.

Layering: this package imports only ``shardgnn.graph`` and the base modules (``errors``,
``atomic``, ``options``...), plus numpy, scipy, numba, tqdm and pymetis; torch only when a tensor
is looked up in the book. The ``shardgnn partition`` and ``verify`` commands live in
:mod:`shardgnn.cli.partition`.

Typical use::

    from shardgnn.partition import PartitionConfig, partition_graph, write_partitions, load_part

    result = partition_graph(graph, PartitionConfig(num_parts=4, method="metis"))
    write_partitions(graph, result.assignment, "parts/", method=result.method,
    settings=result.settings,
                     num_parts=4)
    local = load_part("parts/", rank)          # memory-mapped arrays of one part
"""

from shardgnn.partition.book import PartitionBook, Relabelling, relabel
from shardgnn.partition.format import (
    FORMAT,
    VERSION,
    LocalPartition,
    PartitionSet,
    load_part,
    read_partitions,
    reassemble,
    verify_partitions,
    write_partitions,
)
from shardgnn.partition.methods import (
    BALANCE_KEYS,
    METHODS,
    PartitionConfig,
    PartitionResult,
    check_assignment,
    load_assignment,
    metis_partition,
    partition_graph,
    random_partition,
)
from shardgnn.partition.metrics import (
    PartitionMetrics,
    comm_volume,
    compute_metrics,
    edge_cut,
    max_send_volume,
)
from shardgnn.partition.streaming import (
    StreamConfig,
    StreamResult,
    fennel_partition,
    ldg_partition,
    stream_partition,
)

__all__ = [
    "PartitionBook",
    "Relabelling",
    "relabel",
    "FORMAT",
    "VERSION",
    "LocalPartition",
    "PartitionSet",
    "load_part",
    "read_partitions",
    "reassemble",
    "verify_partitions",
    "write_partitions",
    "BALANCE_KEYS",
    "METHODS",
    "PartitionConfig",
    "PartitionResult",
    "check_assignment",
    "load_assignment",
    "metis_partition",
    "partition_graph",
    "random_partition",
    "PartitionMetrics",
    "comm_volume",
    "compute_metrics",
    "edge_cut",
    "max_send_volume",
    "StreamConfig",
    "StreamResult",
    "fennel_partition",
    "ldg_partition",
    "stream_partition",
]
