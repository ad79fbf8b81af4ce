"""``shardgnn info`` (what a dataset holds) and ``shardgnn convert`` (your own graph)."""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

from shardgnn.cli.flags import add_flags, config_from_args, field_help, nonempty_text
from shardgnn.graph.convert import ConvertConfig
from shardgnn.train.config import TrainConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    info = sub.add_parser(
        "info",
        help="print statistics of a dataset",
        description="Load a dataset and print its size, degrees, splits and homophily.",
    )
    info.add_argument(
        "dataset", nargs="?", default=TrainConfig().dataset, help=field_help(TrainConfig, "dataset")
    )
    info.add_argument(
        "--data-dir", type=nonempty_text, default=None, help=field_help(TrainConfig, "data_dir")
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.add_argument("--list", action="store_true", help="list the known dataset names and exit")
    info.set_defaults(handler=run_info)

    convert = sub.add_parser(
        "convert",
        help=(
            "turn your own graph (edge list + files, CSV/Parquet tables, .npz, typed tables, "
            "molecules) into a graph directory"
        ),
        description=(
            "Write a graph directory from an edge list with feature/label/split files, from node "
            "and edge tables (CSV or Parquet), or from an .npz archive; a typed graph from a node "
            "table per type and an edge table per relation; a graph set from a CSV of SMILES. "
            "Train it with the dataset spec the command prints (graph:DIR, hetero:DIR or "
            "graphset:DIR), e.g. `shardgnn train graph:my-graph --workers 2`. A setting the "
            "input does not read is refused."
        ),
    )
    add_flags(convert, ConvertConfig)
    convert.set_defaults(handler=run_convert)


def _info_table(info: dict[str, Any]) -> str:
    from shardgnn.train.progress import format_table

    rows = []
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(
                f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        rows.append((key, value))
    return format_table(["property", "value"], rows)


def run_info(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn info``."""
    from shardgnn.graph.datasets import describe_datasets
    from shardgnn.train.kinds import describe_dataset

    if args.list:
        print(describe_datasets())
        return 0
    # by the dataset's graph kind (the registry's `describe`): a typed graph per node type and
    # per relation, a temporal one its events and time span
    info = describe_dataset(args.dataset, args.data_dir)
    print(json.dumps(info, indent=2) if args.json else _info_table(info))
    return 0


def run_convert(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn convert``."""
    from pathlib import Path

    from shardgnn.graph.convert import convert
    from shardgnn.graph.stats import graph_info
    from shardgnn.train.kinds import kind_of_graph

    config = config_from_args(ConvertConfig, args)
    with warnings.catch_warnings():
        # what convert leaves out (text columns) as one `warning:` line each, not silently
        warnings.simplefilter("always")
        graph = convert(config)
    if kind_of_graph(graph) == "graphset":
        from shardgnn.graph.stats import describe_graphset

        print(_info_table(describe_graphset(f"graphset:{config.out}")))
        print(f"wrote {config.out}; train it with: shardgnn train graphset:{Path(config.out)}")
        return 0
    if kind_of_graph(graph) == "typed":
        print(_info_table(graph.summary()))
        print(
            f"wrote {config.out}; train it with: shardgnn train hetero:{Path(config.out)} "
            "--model rgcn"
        )
        return 0
    print(_info_table(graph_info(graph)))
    print(f"wrote {config.out}; train it with: shardgnn train graph:{Path(config.out)}")
    return 0
