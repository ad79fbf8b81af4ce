"""``shardgnn export``: a trained model as one ONNX, torch.export or TorchScript file for serving
(:mod:`shardgnn.train.inference.export`)."""

from __future__ import annotations

import argparse

from shardgnn.cli.flags import add_flags, config_from_args
from shardgnn.train.settings import ExportConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help="write a trained model to ONNX, torch.export or TorchScript for serving",
        description=(
            "Write the model of a checkpoint (node classification or regression: its outputs; "
            "link prediction: its encoder's embeddings) as one file taking x [N, F] float32 and "
            "edge_index [2, E] int64 (sources; destinations) of a graph of any size, with the "
            "training's feature normalisation inside. A graph set's model (--task graph, edge: "
            "GIN, GINE) takes a batch of graphs as their disjoint union, plus graph_ptr [B + 1] "
            "int64 (each graph's first node, then N: PyG's Batch.ptr) for a graph-level one, and "
            "returns a row per graph, or per edge in edge_index order. A model reading edge "
            "features takes edge_attr [E, D] float32 last. A typed node model takes x_<type> per "
            "featured node type, edge_index and edge_type [E] int64; a knowledge-graph model "
            "takes entity and relation [Q] int64 and scores every entity. The file is loaded back "
            "and checked on a random graph against the trained model before it is put in place; "
            "OUT.json beside it names its inputs and output (dtypes, shapes, relations)."
        ),
    )
    add_flags(parser, ExportConfig)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn export``."""
    from shardgnn.atomic import check_output_path
    from shardgnn.train.inference.export import export_model

    config = config_from_args(ExportConfig, args)
    check_output_path(config.out, "--out", folder=False)
    print(export_model(config).summary())
    return 0
