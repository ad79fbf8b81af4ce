"""``shardgnn partition`` and ``shardgnn verify`` (and the partition figure of ``shardgnn plot``).

The partition flags are derived from :class:`~shardgnn.partition.config.PartitionConfig`; the
partitioners and the format are imported when a command runs, not when the parser is built.
Handlers return an exit code and raise :class:`~shardgnn.errors.ShardgnnError` for user mistakes
(``shardgnn.cli.main`` turns those into ``error:`` + exit 2).
"""

from __future__ import annotations

import argparse
import json
import textwrap
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from shardgnn.atomic import atomic_open, save_npy
from shardgnn.cli.flags import (
    add_flags,
    config_from_args,
    field_help,
    flag_for,
    nonempty_text,
    was_given,
)
from shardgnn.partition.config import VERTEX_CUT_METHODS, PartitionConfig
from shardgnn.train.config import TASKS, TrainConfig
from shardgnn.train.progress import format_table
from shardgnn.train.settings import LINK_SPLIT_SETTINGS, LinkConfig

if TYPE_CHECKING:
    from shardgnn.partition.metrics import PartitionMetrics

# Which methods read which setting (a setting given for another method is reported, not dropped).
_USED_BY = {
    "seed": ("random", "metis", "hypergraph", "hdrf", "2d-hash"),
    "balance": ("metis", "hypergraph"),
    "imbalance": ("metis", "hypergraph", "hdrf"),
    "hdrf_balance": ("hdrf",),
    "slack": ("ldg", "fennel"),
    "chunk_edges": ("ldg", "fennel"),
}


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``partition`` and ``verify`` subcommands."""
    part = subparsers.add_parser(
        "partition",
        help="split a dataset into P parts and write a partition directory",
        description=(
            "Partition a dataset's nodes into P parts, relabel them so every part owns a "
            "contiguous id range, and write one folder per part (CSR of in-edges, features, "
            "labels, splits, halo) plus meta.json with the dataset's identity, checksums and "
            "quality metrics."
        ),
    )
    part.add_argument(
        "dataset", nargs="?", default=TrainConfig().dataset, help=field_help(TrainConfig, "dataset")
    )
    part.add_argument(
        "--data-dir", type=nonempty_text, default=None, help=field_help(TrainConfig, "data_dir")
    )
    add_flags(part, PartitionConfig)
    part.add_argument(
        "--task",
        choices=TASKS,
        default=argparse.SUPPRESS,
        help="node (default) or link: split the edges first (the settings below) and partition "
        "the training graph; the split is stored in OUT/link/ for `shardgnn train --task link "
        "--partitions OUT`",
    )
    add_flags(
        part,
        LinkConfig,
        group=part.add_argument_group("edge split (--task link)"),
        prefix="link.",
        only=LINK_SPLIT_SETTINGS,
    )
    part.add_argument(
        "--out", type=nonempty_text, required=True, help="output directory (created atomically)"
    )
    part.add_argument(
        "--save-assignment",
        type=nonempty_text,
        default=None,
        metavar="FILE.npy",
        help="also write the node -> part array (original ids) to this .npy",
    )
    part.add_argument(
        "--overwrite", action="store_true", help="replace an existing partition directory"
    )
    part.add_argument(
        "--json", action="store_true", help="print the metrics as JSON instead of tables"
    )
    part.add_argument("--quiet", action="store_true", help="no progress bars")
    part.set_defaults(handler=partition_command)

    verify = subparsers.add_parser(
        "verify",
        help="check a partition directory (checksums, structure, metrics) and print its metrics",
        description=(
            "Recompute the SHA-256 of every array file, check every structural invariant (each "
            "node owned once, valid CSRs, halos, splits) and recompute the metrics recorded in "
            "meta.json."
        ),
    )
    verify.add_argument("dir", help="a directory written by `shardgnn partition`")
    verify.add_argument(
        "--no-checksums",
        action="store_true",
        help="skip the SHA-256 pass (sizes are still checked)",
    )
    verify.add_argument(
        "--json", action="store_true", help="print the metrics as JSON instead of tables"
    )
    verify.add_argument("--quiet", action="store_true", help="no progress bars")
    verify.set_defaults(handler=verify_command)


# ------------------------------------------------------------------------------------------ helpers
def _fmt_balance(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def metrics_tables(metrics: PartitionMetrics, max_parts: int = 64) -> str:
    """A summary table and (up to ``max_parts`` parts) a per-part table, as text/Markdown."""
    summary = format_table(
        ["metric", "value"],
        [
            ("parts", metrics.num_parts),
            (
                "edge cut",
                f"{metrics.edge_cut:.4f} ({metrics.cut_edges:,} of {metrics.num_edges:,} edges)",
            ),
            ("comm volume (rows/layer)", metrics.comm_volume),
            ("max send volume", metrics.max_send_volume),
            ("balance nodes (max/mean)", _fmt_balance(metrics.balance_nodes)),
            ("balance train", _fmt_balance(metrics.balance_train)),
            ("balance edges", _fmt_balance(metrics.balance_edges)),
        ],
    )
    if metrics.num_parts > max_parts:
        return summary + f"\n({metrics.num_parts} parts: per-part table omitted; see meta.json)"
    rows = [
        (
            p,
            metrics.part_nodes[p],
            metrics.part_edges[p],
            metrics.part_train[p],
            metrics.send_volume[p],
            metrics.recv_volume[p],
        )
        for p in range(metrics.num_parts)
    ]
    per_part = format_table(["part", "nodes", "in-edges", "train", "send", "recv (halo)"], rows)
    return summary + "\n\n" + per_part


def _resolve_config(args: argparse.Namespace) -> PartitionConfig:
    config = config_from_args(PartitionConfig, args)
    for name, methods in _USED_BY.items():
        if was_given(args, name) and config.method not in methods:
            from shardgnn.errors import ConfigError

            raise ConfigError(
                f"{flag_for(PartitionConfig, name)} does not apply to --method {config.method}: "
                f"it applies to --method {', '.join(methods)}; drop it"
            )
    return config


def _refuse_node_partitioner_flags(args: argparse.Namespace) -> None:
    """A graph set is cut into whole graphs, every split spread evenly: the node partitioners'
    settings do not apply to it."""
    import dataclasses

    from shardgnn.errors import ConfigError

    for field in dataclasses.fields(PartitionConfig):
        if field.name not in ("num_parts", "seed") and was_given(args, field.name):
            raise ConfigError(
                f"{flag_for(PartitionConfig, field.name)} does not apply to a graph set: its parts "
                "are whole graphs, each split spread evenly; drop it"
            )


def _link_config(args: argparse.Namespace) -> LinkConfig | None:
    given = {k.split(".", 1)[1]: v for k, v in vars(args).items() if k.startswith("link.")}
    if getattr(args, "task", "node") != "link":
        if given:
            from shardgnn.errors import ConfigError

            flags = ", ".join(flag_for(LinkConfig, name) for name in given)
            raise ConfigError(
                f"{flags} split edges for link prediction: add --task link, or drop them"
            )
        return None
    return LinkConfig(**given)


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ----------------------------------------------------------------------------------------- commands
def partition_command(args: argparse.Namespace) -> int:
    """``shardgnn partition``: load, partition, write, print the metrics (the graph kind the
    dataset names picks how: :func:`~shardgnn.train.partitioning.partition_dataset`)."""
    from shardgnn.graph.datasets import dataset_traits
    from shardgnn.partition.format import check_output_dir
    from shardgnn.train.partitioning import PartitionJob, partition_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        config = _resolve_config(args)
        link = _link_config(args)
        # fail before the (possibly long) load and partitioning
        out = check_output_dir(args.out, args.overwrite)
        kind = dataset_traits(args.dataset).kind
        if kind == "graphset":
            _refuse_node_partitioner_flags(args)
        elif kind != "homogeneous" and config.method in VERTEX_CUT_METHODS:
            from shardgnn.errors import ConfigError
            from shardgnn.partition.methods import vertex_cut_refusal

            raise ConfigError(vertex_cut_refusal(config.method, f"a {kind} graph"))
        job = PartitionJob(
            args.dataset, args.data_dir, config, out, link=link, overwrite=args.overwrite,
            progress=not args.quiet, report=True,
        )  # fmt: skip
        done = partition_dataset(kind, job)
        if args.save_assignment:
            save_npy(Path(args.save_assignment).expanduser(), done.result.assignment)
    return _report(args, done.name, done.pset, done.result, done.metrics, done.write_s, done.typed)


def _report(
    args: argparse.Namespace,
    name: str,
    pset,
    result,
    metrics: PartitionMetrics,
    write_s: float,
    typed: dict | None = None,
) -> int:
    """Print what was written and its quality: JSON (``--json``), else a line and tables (with
    ``typed``, :func:`~shardgnn.partition.typed.typed_metrics`, per relation and node type)."""
    if args.json:
        report = {
            "out": str(pset.path),
            "method": result.method,
            "settings": result.settings,
            "partition_seconds": result.seconds,
            "write_seconds": write_s,
            "metrics": metrics.to_dict(),
        }
        if typed is not None:
            report["typed_metrics"] = typed
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"partitioned {name} into {pset.num_parts} parts with {result.method} in "
        f"{result.seconds:.2f} s{', every node type balanced' if typed else ''}; wrote "
        f"{pset.path} ({_dir_size(pset.path) / 2**20:,.1f} MiB, {write_s:.1f} s)"
    )
    if args.save_assignment:
        print(f"assignment written to {args.save_assignment}")
    print(metrics_tables(metrics))
    if result.edge_part is not None:
        s = result.settings
        print(
            f"vertex-cut: {s['replication_factor']:.3f} replicas per node, "
            f"{s['rows_per_layer']:,} rows per layer with --spmm vertex-cut (pulled rows and "
            f"pushed partial sums; the table's comm volume is of the masters alone), computed "
            f"edges balance {s['balance_computed_edges']:.3f} (max/mean)"
        )
    if typed is not None:
        print(
            format_table(
                ["relation", "edges", "cut edges", "edge cut"],
                [
                    (rel, f"{m['edges']:,}", f"{m['cut_edges']:,}", f"{m['edge_cut']:.4f}")
                    for rel, m in typed["relations"].items()
                ],
            )
        )
        print(
            format_table(
                ["node type", "nodes per part", "balance (max/mean)"],
                [
                    (t, " ".join(f"{c:,}" for c in m["part_nodes"]), _fmt_balance(m["balance"]))
                    for t, m in typed["node_types"].items()
                ],
            )
        )
    return 0


def verify_command(args: argparse.Namespace) -> int:
    """``shardgnn verify``: checksums + invariants + recomputed metrics; exit 0 when all hold."""
    from shardgnn.partition.format import FORMAT, read_partitions, verify_partitions

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        start = time.perf_counter()
        metrics = verify_partitions(
            args.dir, checksums=not args.no_checksums, progress=not args.quiet
        )
        pset = read_partitions(args.dir, verify=False)
    seconds = time.perf_counter() - start
    if args.json:
        print(
            json.dumps(
                {
                    "dir": str(pset.path),
                    "ok": True,
                    "checksums": not args.no_checksums,
                    "metrics": metrics.to_dict(),
                },
                indent=2,
            )
        )
        return 0
    checked = (
        "checksums, structure and metrics"
        if not args.no_checksums
        else "structure and metrics (no checksums)"
    )
    meta = pset.meta
    print(
        f"OK: {pset.path}: {FORMAT} v{meta['version']}, graph {meta['graph']}, {pset.num_parts} "
        f"parts, {pset.num_nodes:,} nodes, {pset.num_edges:,} edges, method {pset.method}; "
        f"{len(meta['arrays'])} files, {checked} verified in {seconds:.1f} s"
    )
    print(metrics_tables(metrics))
    return 0


# --------------------------------------------------------------------------------------------- plot
def partition_figure_name(path: str | Path) -> str:
    """The file name :func:`plot_partition` gives a directory's figure."""
    return f"{Path(path).resolve().name}-partition.png"


def plot_partition(dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Draw per-part nodes, in-edges, training nodes and send/receive volumes of a partition
    directory into ``out_dir/<dir name>-partition.png`` (matplotlib Agg, written atomically).

    Returns:
        The written PNG paths.

    Raises:
        DatasetError: ``dir`` is not a readable partition directory.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shardgnn.partition.format import read_partitions

    pset = read_partitions(dir, verify=False)
    m = pset.metrics
    parts = np.arange(m.num_parts)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [
        (axes[0, 0], m.part_nodes, "owned nodes", m.balance_nodes),
        (axes[0, 1], m.part_edges, "in-edges of owned nodes", m.balance_edges),
        (axes[1, 0], m.part_train, "training nodes", m.balance_train),
    ]
    for ax, values, title, bal in panels:
        ax.bar(parts, values, color="tab:blue")
        if any(values):
            ax.axhline(
                float(np.mean(values)), color="black", linestyle="--", linewidth=1, label="mean"
            )
        ax.set_title(f"{title} (max/mean {_fmt_balance(bal)})")
    ax = axes[1, 1]
    width = 0.4
    ax.bar(parts - width / 2, m.send_volume, width, label="send", color="tab:orange")
    ax.bar(parts + width / 2, m.recv_volume, width, label="receive (halo)", color="tab:green")
    ax.set_title(f"rows exchanged per layer (total {m.comm_volume:,})")
    ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.set_xlabel("part")
        ax.grid(alpha=0.3, axis="y")
        if m.num_parts <= 32:
            ax.set_xticks(parts)
    from shardgnn.graph.datasets import readable_spec

    spec = pset.dataset.get("spec")
    name = readable_spec(str(spec)) if spec else str(pset.meta.get("graph"))
    # Long names (synthetic specs) wrap instead of being cut.
    fig.suptitle(
        "\n".join(
            textwrap.wrap(f"{name}: {pset.method}, P={m.num_parts}, edge cut {m.edge_cut:.3f}", 90)
        )
    )
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / partition_figure_name(pset.path)
    with atomic_open(target, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
    return [target]


__all__ = ["add_parsers", "partition_command", "verify_command", "plot_partition", "metrics_tables"]
