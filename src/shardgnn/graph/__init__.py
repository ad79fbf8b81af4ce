"""Graph ingest: the CSR container, on-disk graph directories, dataset loaders and generators."""

from shardgnn import lazy_exports

_WHERE = {
    "Graph": "shardgnn.graph.csr",
    "DatasetSpec": "shardgnn.graph.datasets",
    "default_data_dir": "shardgnn.graph.datasets",
    "known_datasets": "shardgnn.graph.datasets",
    "load_dataset": "shardgnn.graph.datasets",
    "load_graph": "shardgnn.graph.io",
    "save_graph": "shardgnn.graph.io",
}
"""each public name and its module, imported on first use"""

__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
