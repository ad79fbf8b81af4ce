"""Graph ingest: the CSR container, on-disk graph directories, dataset loaders and generators."""

from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import DatasetSpec, default_data_dir, known_datasets, load_dataset
from shardgnn.graph.io import load_graph, save_graph

__all__ = [
    "Graph",
    "DatasetSpec",
    "default_data_dir",
    "known_datasets",
    "load_dataset",
    "load_graph",
    "save_graph",
]
