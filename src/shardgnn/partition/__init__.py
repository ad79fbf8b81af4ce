"""Graph partitioning: partitioners, the partition book, quality metrics and the on-disk format.

Layering: this package imports only ``shardgnn.graph`` and the base modules (``errors``,
``atomic``, ``options``...), plus numpy, scipy, numba, tqdm and pymetis; torch only when a tensor
is looked up in the book. Its names are imported on first use, so that the configs
(:mod:`shardgnn.partition.config`) come without the partitioners. The ``shardgnn partition``
and ``verify`` commands live in :mod:`shardgnn.cli.partition`.

Typical use::

    from shardgnn.partition import PartitionConfig, partition_graph, write_partitions, load_part

    result = partition_graph(graph, PartitionConfig(num_parts=4, method="metis"))
    write_partitions(graph, result.assignment, "parts/", method=result.method,
                     settings=result.settings, num_parts=4)
    local = load_part("parts/", rank)          # memory-mapped arrays of one part
"""

from shardgnn import lazy_exports

_WHERE = {
    "PartitionBook": "shardgnn.partition.book",
    "Relabelling": "shardgnn.partition.book",
    "relabel": "shardgnn.partition.book",
    "FORMAT": "shardgnn.partition.format",
    "VERSION": "shardgnn.partition.format",
    "LocalPartition": "shardgnn.partition.format",
    "PartitionSet": "shardgnn.partition.format",
    "load_part": "shardgnn.partition.format",
    "read_partitions": "shardgnn.partition.format",
    "reassemble": "shardgnn.partition.format",
    "verify_partitions": "shardgnn.partition.format",
    "write_partitions": "shardgnn.partition.format",
    "BALANCE_KEYS": "shardgnn.partition.config",
    "METHODS": "shardgnn.partition.config",
    "PartitionConfig": "shardgnn.partition.config",
    "PartitionResult": "shardgnn.partition.methods",
    "check_assignment": "shardgnn.partition.methods",
    "load_assignment": "shardgnn.partition.methods",
    "metis_partition": "shardgnn.partition.methods",
    "partition_graph": "shardgnn.partition.methods",
    "random_partition": "shardgnn.partition.methods",
    "PartitionMetrics": "shardgnn.partition.metrics",
    "comm_volume": "shardgnn.partition.metrics",
    "compute_metrics": "shardgnn.partition.metrics",
    "edge_cut": "shardgnn.partition.metrics",
    "max_send_volume": "shardgnn.partition.metrics",
    "StreamConfig": "shardgnn.partition.config",
    "StreamResult": "shardgnn.partition.streaming",
    "fennel_partition": "shardgnn.partition.streaming",
    "ldg_partition": "shardgnn.partition.streaming",
    "stream_partition": "shardgnn.partition.streaming",
}
"""each public name and its module, imported on first use"""

__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
