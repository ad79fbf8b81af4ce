"""``shardgnn plan``: what every distributed full-graph strategy would send and hold at many
worker counts, and which one sends the fewest bytes from its busiest worker
(:mod:`shardgnn.fullgraph.plan`)."""

from __future__ import annotations

import argparse
import sys

from shardgnn.cli.flags import add_flags, config_from_args, field_help
from shardgnn.fullgraph.config import PlanConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="bytes and memory of every full-graph strategy at many worker counts",
        description=(
            "Partition the dataset in memory for every --workers count and count, from its edges, "
            "the bytes each distributed full-graph strategy (--spmm 1d, 1d-sparse, 1.5d with each "
            "replication, 2d, 3d) sends per training epoch, the most one worker sends, and the "
            "feature rows and adjacency each worker holds; the pick per worker count is the "
            "strategy whose busiest worker sends the fewest bytes. The counts equal what a "
            "training run's counters measure, worker by worker. With --calibrate (or --rates "
            "FILE) it also predicts each strategy's epoch time from this machine's measured "
            "rates and picks the fastest."
        ),
    )
    parser.add_argument(
        "dataset", nargs="?", default=PlanConfig().dataset, help=field_help(PlanConfig, "dataset")
    )
    add_flags(parser, PlanConfig)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn plan``."""
    from shardgnn.atomic import check_output_path, save_json
    from shardgnn.fullgraph.plan import plan, recommend
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.train.progress import format_table

    config = config_from_args(PlanConfig, args, dataset=args.dataset)
    if config.out:
        check_output_path(config.out, "--out", folder=False)
    graph = load_dataset(config.dataset, config.data_dir)
    if graph.x is None:
        from shardgnn.errors import ConfigError

        raise ConfigError(f"{config.dataset} has no node features; plan a dataset with features")
    rates = machine_rates(config, graph)
    costs = plan(
        graph,
        config,
        progress=lambda p: print(f"partitioning into {p} parts ({config.method})", file=sys.stderr),
        rates=rates,
    )
    picks = recommend(costs)
    baseline = {c.workers: c.bytes_per_epoch for c in costs if c.strategy == "1d"}
    timed = ["compute s", "comm s", "epoch s"] if rates is not None else []
    rows = [
        [
            c.workers,
            c.strategy,
            c.layout,
            f"{c.rows:,}",
            f"{c.bytes_per_epoch / 1e6:,.1f}",
            f"{c.bytes_per_epoch / baseline[c.workers]:.3f}" if baseline[c.workers] else "-",
            f"{c.max_worker_bytes / 1e6:,.2f}",
            f"{c.max_worker_recv / 1e6:,.2f}",
            f"{c.held_mb:,.1f}",
            *([f"{c.compute_s:.3f}", f"{c.comm_s:.3f}", f"{c.epoch_s:.3f}"] if timed else []),
            ("<- fastest" if timed else "<- fewest") if picks[c.workers] is c else "",
        ]
        for c in costs
    ]
    if rates is not None:
        print(
            f"machine rates: {rates.cores} cores, link {rates.link_bytes_s * 8 / 1e9:.2f} Gbit/s "
            "each way, "
            f"latency {rates.latency_s * 1e6:.0f} us; {config.workers_per_host} worker(s) per "
            "machine"
        )
    print(
        f"{config.dataset}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges; "
        f"{config.model}, {config.layers} layers, hidden {config.hidden}, {config.bits} bits, "
        f"{config.method} partitions"
    )
    print(
        format_table(
            [
                "P",
                "spmm",
                "layout",
                "rows/SpMM",
                "MB/epoch",
                "vs 1d",
                "max MB sent (1 worker)",
                "max MB recv (1 worker)",
                "held MB (1 worker)",
                *timed,
                "pick",
            ],
            rows,
        )
    )
    for p, c in picks.items():
        if c.empty_parts:
            print(
                f"P={p}: {config.method} left {c.empty_parts} of {p} parts empty (their workers "
                "would hold nothing; training needs a partition with --allow-empty-parts)"
            )
    if config.out:
        save_json(
            config.out,
            {
                "dataset": config.dataset,
                "num_nodes": graph.num_nodes,
                "num_edges": graph.num_edges,
                "settings": {
                    k: v for k, v in vars(config).items() if k not in ("dataset", "out")
                },
                "costs": [c.to_dict() for c in costs],
                "rates": None if rates is None else rates.to_dict(),
                "picks": {str(p): c.strategy + (f" {c.layout}" if c.layout else "")
                          for p, c in picks.items()},
            },
        )  # fmt: skip
        print(f"costs written to {config.out}")
    return 0


def machine_rates(config: PlanConfig, graph):
    """The rates ``--calibrate`` measures (or ``--rates`` reads), the link replaced by
    ``--link-gbit`` (each way) and ``--latency-us``; ``None`` without either."""
    import dataclasses

    from shardgnn.distributed.launch import available_cores
    from shardgnn.fullgraph.plan import thread_counts, workload
    from shardgnn.fullgraph.rates import calibrate, read_rates

    if config.calibrate:
        cores = available_cores()
        print(f"calibrating this machine ({cores} cores)", file=sys.stderr)
        rates = calibrate(workload(graph, config), thread_counts(config, cores), cores, config.link)
    elif config.rates:
        rates = read_rates(config.rates, "--rates")
    else:
        return None
    if config.link_gbit:
        rates = dataclasses.replace(rates, link_bytes_s=config.link_gbit * 1e9 / 8)
    if config.latency_us:
        rates = dataclasses.replace(rates, latency_s=config.latency_us * 1e-6)
    return rates
