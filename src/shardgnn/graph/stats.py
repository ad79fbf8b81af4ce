"""Summary statistics of a graph (``shardgnn info``), and what the command prints of a dataset
of each graph kind (:func:`describe_homogeneous`, :func:`describe_typed`,
:func:`describe_temporal`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardgnn.graph.csr import Graph


def degree_summary(degree: np.ndarray) -> dict[str, float]:
    """Mean, extremes, percentiles and a power-law skew hint of a degree array."""
    if degree.size == 0:
        return {}
    pct = np.percentile(degree, [50, 90, 99])
    return {
        "mean": float(degree.mean()),
        "min": int(degree.min()),
        "median": float(pct[0]),
        "p90": float(pct[1]),
        "p99": float(pct[2]),
        "max": int(degree.max()),
        "std": float(degree.std()),
        "isolated": int(np.sum(degree == 0)),
    }


def graph_info(graph: Graph) -> dict[str, Any]:
    """Everything ``shardgnn info`` prints, as a JSON-ready dictionary."""
    info: dict[str, Any] = {
        "name": graph.name,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "symmetric": graph.is_symmetric(),
        "self_loops": int(np.sum(graph.edge_index()[0] == graph.edge_index()[1])),
        "in_degree": degree_summary(graph.in_degree()),
        "out_degree": degree_summary(graph.out_degree()),
        "num_features": graph.num_features,
        **({"edge_features": graph.edge_dim} if graph.edge_dim else {}),
        "num_classes": graph.num_classes,
        "label_kind": graph.label_kind,
        **(
            {}
            if graph.y is None or graph.label_kind == "class"
            else {"label_columns": int(graph.y.shape[1])}
        ),
        "splits": {
            k: (0 if getattr(graph, f"{k}_idx") is None else int(len(getattr(graph, f"{k}_idx"))))
            for k in ("train", "val", "test")
        },
        "edge_homophily": (
            graph.edge_homophily() if graph.y is not None and graph.label_kind == "class" else None
        ),
    }
    if graph.y is not None and graph.num_classes and graph.label_kind == "class":
        info["class_sizes"] = np.bincount(
            graph.y[graph.y >= 0], minlength=graph.num_classes
        ).tolist()
    return info


# What `shardgnn info` prints of a dataset of each graph kind, which the graph-kind registry
# names (`shardgnn.train.kinds.KINDS`, its `describe` field).
def describe_homogeneous(spec: str, data_dir: str | None = None) -> dict[str, Any]:
    """``shardgnn info`` of a homogeneous dataset: sizes, degrees, splits, homophily."""
    from shardgnn.graph.datasets import load_dataset

    return graph_info(load_dataset(spec, data_dir))


def describe_typed(spec: str, data_dir: str | None = None) -> dict[str, Any]:
    """``shardgnn info`` of a typed dataset: its sizes per node type and per relation."""
    from shardgnn.graph.datasets import load_typed_dataset

    return load_typed_dataset(spec, data_dir).summary()


def describe_graphset(spec: str, data_dir: str | None = None) -> dict[str, Any]:
    """``shardgnn info`` of a graph set: graphs, nodes, edges, features, labels, splits."""
    from shardgnn.graph.datasets import load_graphset_dataset

    gs = load_graphset_dataset(spec, data_dir)
    sizes = np.diff(gs.graph_ptr)
    return {
        "name": gs.name,
        "kind": "graphset",
        "num_graphs": gs.num_graphs,
        "num_nodes": gs.num_nodes,
        "num_edges": gs.num_edges,
        "nodes_per_graph": {
            "min": int(sizes.min()),
            "mean": float(sizes.mean()),
            "max": int(sizes.max()),
        },
        "num_features": gs.num_features,
        "edge_features": gs.edge_dim,
        "graph_labels": "none" if gs.y is None else gs.label_kind,
        "num_classes": gs.num_classes,
        "edge_classes": gs.edge_classes,
        "edge_labels": "none" if gs.edge_y is None else gs.edge_label_kind,
        "splits": {s: int(len(getattr(gs, f"{s}_idx"))) for s in ("train", "val", "test")},
    }


def describe_temporal(spec: str, data_dir: str | None = None) -> dict[str, Any]:
    """``shardgnn info`` of a temporal dataset: its sizes and time span."""
    from shardgnn.graph.datasets import load_temporal_dataset

    return load_temporal_dataset(spec, data_dir).summary()
