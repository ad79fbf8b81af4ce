"""``shardgnn plan``: what every distributed full-graph strategy and every mini-batch option would
send and hold at many worker counts, and which one sends the fewest bytes from its busiest worker
or, with machine rates, takes the shortest epoch (:mod:`shardgnn.fullgraph.plan`,
:mod:`shardgnn.fullgraph.minibatch_plan`)."""

from __future__ import annotations

import argparse
import shlex
import sys

from shardgnn.cli.flags import add_flags, config_from_args, field_help
from shardgnn.fullgraph.config import PlanConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "plan",
        help="bytes, memory and epoch time of every full-graph strategy and mini-batch option "
        "at many worker counts",
        description=(
            "Partition the dataset in memory for every --workers count and count, from its edges, "
            "the bytes each distributed full-graph strategy (--spmm 1d, 1d-sparse, 1.5d with each "
            "replication, 2d, 3d) sends per training epoch, the most one worker sends, and the "
            "feature rows and adjacency each worker holds; the pick per worker count is the "
            "strategy whose busiest worker sends the fewest bytes. The counts equal what a "
            "training run's counters measure, worker by worker. With --calibrate (or --rates "
            "FILE) it also predicts each strategy's epoch time from this machine's measured "
            "rates, weighs 1d-sparse's --dependencies cache and hybrid too (GCN, GraphSAGE, "
            "GIN: remote rows recomputed instead of received, selected here as the workers "
            "would) and picks the fastest. Mini-batch training (--strategies all or minibatch) "
            "is planned from one epoch of every worker's batches sampled here: the sampling "
            "and fetch bytes of exact rows, 8-bit rows (--fetch-bits 8), a presample cache "
            "(--cache-size) and, with --historical L:AGE, historical embeddings (pushed or "
            "pulled, their traffic too; the tables filled by a first epoch), and with rates "
            "their epoch time. With --memory-mb, only what fits in each worker's memory is "
            "picked."
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

    config = config_from_args(PlanConfig, args, dataset=args.dataset)
    if config.out:
        check_output_path(config.out, "--out", folder=False)
    graph = load_dataset(config.dataset, config.data_dir)
    if graph.x is None:
        from shardgnn.errors import ConfigError

        raise ConfigError(f"{config.dataset} has no node features; plan a dataset with features")
    batch_size = minibatch_batch_size(config, graph)
    rates = machine_rates(config, graph, batch_size)
    minibatch: list = []
    costs = plan(
        graph,
        config,
        progress=lambda p: print(f"partitioning into {p} parts ({config.method})", file=sys.stderr),
        rates=rates,
        on_partition=(
            minibatch_planner(config, graph, rates, batch_size, minibatch)
            if config.strategies != "full"
            else None
        ),
    )
    if rates is not None:
        print(
            f"machine rates: {rates.cores} cores, link {rates.link_bytes_s * 8 / 1e9:.2f} Gbit/s "
            "each way, "
            f"latency {rates.latency_s * 1e6:.0f} us; {config.workers_per_host} worker(s) per "
            "machine"
            + (
                f" (mini-batch: --host-sharing {config.host_sharing or 'auto'})"
                if config.workers_per_host > 1 and config.strategies != "full"
                else ""
            )
        )
    print(
        f"{config.dataset}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges; "
        f"{config.model}, {config.layers} layers, hidden {config.hidden}, {config.bits} bits, "
        f"{config.method} partitions"
    )
    picks = recommend(costs, config.memory_mb) if costs else {}
    if costs:
        print_full_graph(costs, picks, rates is not None, config.memory_mb)
    minibatch_picks = recommend(minibatch, config.memory_mb)
    if minibatch:
        print_minibatch(config, minibatch, minibatch_picks, rates is not None)
    for kind, planned, chosen in (
        ("full-graph strategy", costs, picks),
        ("mini-batch option", minibatch, minibatch_picks),
    ):
        for p in sorted({c.workers for c in planned} - set(chosen)):
            print(f"P={p}: no {kind} fits in --memory-mb {config.memory_mb:g} per worker")
    rates_file = config.rates or (config.out if rates is not None else None)
    commands = pick_flags(config, picks, minibatch_picks, batch_size, rates_file)
    if commands:
        print(
            f"to train a pick: `shardgnn train {config.dataset}` and its flags (with --workers: "
            "on this machine; without: `python -m shardgnn.torchrun --nproc-per-node "
            f"{config.workers_per_host} ... -m shardgnn.run train`, on each machine)"
        )
        for kind, by_workers in commands.items():
            for p, flags in by_workers.items():
                print(f"  P={p} {kind}: {shlex.join(flags)}")
        if any("RATES.json" in f for by in commands.values() for f in by.values()):
            print("  RATES.json: these rates, as `shardgnn plan --calibrate --out FILE` writes")
        if any("--partitions" in f for by in commands.values() for f in by.values()):
            print(
                f"  parts-P: `shardgnn partition {config.dataset} --parts P --method "
                f"{config.method} --out parts-P`"
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
                "minibatch_costs": [c.to_dict() for c in minibatch],
                "rates": None if rates is None else rates.to_dict(),
                "picks": {str(p): c.label for p, c in picks.items()},
                "minibatch_picks": {str(p): c.option for p, c in minibatch_picks.items()},
                "pick_flags": {
                    kind: {str(p): flags for p, flags in by_workers.items()}
                    for kind, by_workers in commands.items()
                },
            },
        )  # fmt: skip
        print(f"costs written to {config.out}")
    return 0


def pick_flags(
    config: PlanConfig, picks: dict, minibatch_picks: dict, batch_size: int, rates: str | None
) -> dict[str, dict[int, list[str]]]:
    """Per kind (``full graph``, ``mini-batch``) and worker count, the ``shardgnn train`` flags
    that train the pick with the planned model (its batches and host sharing), its workers
    placed as planned: where one machine holds them all (``--workers-per-host``), ``--workers
    P`` (training partitions with METIS; another ``--method``: also ``--partitions parts-P``,
    which ``shardgnn partition --parts P --method`` makes), else ``--partitions parts-P`` alone
    (under torchrun, ``--workers-per-host`` a machine). ``rates``: the file a ``--dependencies
    hybrid`` pick prices with (``--plan-rates``; ``RATES.json`` where the rates went to no
    file)."""
    from shardgnn.nn.config import ModelConfig

    model = ["--model", config.model, "--hidden", str(config.hidden)]
    for name, flag in (("dropout", "--dropout"), ("input_dropout", "--input-dropout")):
        if getattr(config, name) != getattr(ModelConfig(), name):
            model += [flag, f"{getattr(config, name):g}"]

    def partition(p: int) -> list[str]:
        parts = ["--partitions", f"parts-{p}"]
        if p > config.workers_per_host:  # torchrun's workers read a partition made before
            return parts
        return ["--workers", str(p), *(parts if config.method != "metis" else [])]

    full = {
        p: [*partition(p), "--mode", "full", *model, "--layers", str(config.layers)]
        + (["--bits", str(config.bits)] if config.bits != 32 else [])
        + cost.flags(rates or "RATES.json")
        for p, cost in sorted(picks.items())
    }
    minibatch = {}
    if minibatch_picks:
        fanouts = ",".join(map(str, config.minibatch_fanouts))
        sampled = ["--fanouts", fanouts, "--batch-size", str(batch_size)]
        sampled += ["--host-sharing", "off"] if config.host_sharing == "off" else []
        minibatch = {
            p: [*partition(p), *model, *sampled, *cost.flags]
            for p, cost in sorted(minibatch_picks.items())
        }
    return {kind: by for kind, by in (("full graph", full), ("mini-batch", minibatch)) if by}


def pick_mark(cost, picks, timed: bool, memory_mb: float | None) -> str:
    """The table's pick column: the pick of its worker count, or a strategy over the memory."""
    from shardgnn.fullgraph.plan import worker_memory_mb

    if picks.get(cost.workers) is cost:
        return "<- fastest" if timed else "<- fewest"
    if memory_mb is not None and worker_memory_mb(cost) > memory_mb:
        return "over memory"
    return ""


def print_full_graph(costs, picks, timed_costs: bool, memory_mb: float | None = None) -> None:
    """The full-graph strategies' table."""
    from shardgnn.train.progress import format_table

    baseline = {c.workers: c.bytes_per_epoch for c in costs if c.strategy == "1d"}
    timed = ["compute s", "comm s", "epoch s"] if timed_costs else []
    rows = [
        [
            c.workers,
            c.strategy,
            c.label.removeprefix(c.strategy).strip(),  # a grid, or --dependencies
            f"{c.rows:,}",
            f"{c.bytes_per_epoch / 1e6:,.1f}",
            f"{c.bytes_per_epoch / baseline[c.workers]:.3f}" if baseline[c.workers] else "-",
            f"{c.max_worker_bytes / 1e6:,.2f}",
            f"{c.max_worker_recv / 1e6:,.2f}",
            f"{c.held_mb:,.1f}",
            f"{c.activation_mb:,.1f}",
            *([f"{c.compute_s:.3f}", f"{c.comm_s:.3f}", f"{c.epoch_s:.3f}"] if timed else []),
            pick_mark(c, picks, bool(timed), memory_mb),
        ]
        for c in costs
    ]
    print("full-graph training (--mode full), per epoch:")
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
                "activations MB (1 worker)",
                *timed,
                "pick",
            ],
            rows,
        )
    )


def minibatch_batch_size(config: PlanConfig, graph) -> int:
    """The global batch of the mini-batch plan: ``--batch-size``, else what `shardgnn train`
    chooses for the dataset's training nodes (refused in one line without any); 0 when only
    full-graph strategies are planned."""
    from shardgnn.train.config import TrainConfig

    if config.strategies == "full":
        return 0
    if graph.train_idx is None or not len(graph.train_idx):
        from shardgnn.errors import ConfigError

        raise ConfigError(
            f"{config.dataset} has no training nodes to plan mini-batches over; plan it with "
            "--strategies full, or give it a training split"
        )
    return TrainConfig(batch_size=config.batch_size).node_batch_size(len(graph.train_idx))


def minibatch_planner(config, graph, rates, batch_size: int, out: list):
    """``on_partition(P, assignment)`` of :func:`~shardgnn.fullgraph.plan.plan` that appends the
    mini-batch options' costs on each partition to ``out``."""
    from shardgnn.fullgraph.minibatch_plan import minibatch_costs
    from shardgnn.store.cache.config import CacheConfig

    cache_size = config.cache_size or CacheConfig().size

    def on_partition(workers: int, assignment) -> None:
        print(f"sampling an epoch of {workers} workers' batches", file=sys.stderr)
        out.extend(
            minibatch_costs(
                graph, assignment, workers, model=config.model, hidden=config.hidden,
                fanouts=config.minibatch_fanouts, batch_size=batch_size, cache_size=cache_size,
                historical=config.historical, seed=config.seed, rates=rates,
                workers_per_host=config.workers_per_host, dropout=config.dropout,
                host_sharing=config.host_sharing != "off",
                input_dropout=config.input_dropout,
            )
        )  # fmt: skip

    return on_partition


def print_minibatch(config, costs, picks, timed_costs: bool) -> None:
    """The mini-batch options' table."""
    from shardgnn.train.progress import format_table

    timed = ["sample s", "compute s", "comm s", "epoch s"] if timed_costs else []
    history = ["history hit", "history MB"] if config.historical else []
    rows = [
        [
            c.workers,
            c.option,
            c.batches,
            f"{c.fetch_rows:,}",
            "-" if c.hit_rate is None else f"{100 * c.hit_rate:.1f}%",
            *(
                [
                    "-" if c.history_hit_rate is None else f"{100 * c.history_hit_rate:.1f}%",
                    f"{c.history_bytes / 1e6:,.1f}",
                ]
                if history
                else []
            ),  # fmt: skip
            f"{c.sample_bytes / 1e6:,.1f}",
            f"{c.fetch_bytes / 1e6:,.1f}",
            f"{c.max_worker_bytes / 1e6:,.2f}",
            f"{c.max_worker_recv / 1e6:,.2f}",
            f"{c.held_mb:,.1f}",
            f"{c.activation_mb:,.1f}",
            *(
                [f"{c.sample_s:.3f}", f"{c.compute_s:.3f}", f"{c.comm_s:.3f}", f"{c.epoch_s:.3f}"]
                if timed
                else []
            ),
            pick_mark(c, picks, bool(timed), config.memory_mb),
        ]
        for c in costs
    ]
    fanouts = ",".join(map(str, config.minibatch_fanouts))
    # bag-of-words features: batches gathered as sparse tensors (through a cache too; a
    # presample cache holds the rows' non-zeros)
    sparse = ", input rows sparse" if any(c.sparse_batches for c in costs) else ""
    print(
        f"mini-batch training (fanouts {fanouts}, batch {costs[0].batch_size}, every other "
        f"worker's row through the all-to-all{sparse}), per epoch:"
    )
    print(
        format_table(
            [
                "P", "option", "batches", "remote rows", "cache hit", *history, "sample MB",
                "fetch MB",
                "max MB sent (1 worker)", "max MB recv (1 worker)", "held MB (1 worker)",
                "activations MB (1 worker)", *timed, "pick",
            ],
            rows,
        )
    )  # fmt: skip


def machine_rates(config: PlanConfig, graph, batch_size: int = 0):
    """The rates ``--calibrate`` measures (or ``--rates`` reads), the link replaced by
    ``--link-gbit`` (each way) and ``--latency-us``; ``None`` without either."""
    import dataclasses

    from shardgnn.distributed.launch import available_cores
    from shardgnn.fullgraph.plan import thread_counts, workload
    from shardgnn.fullgraph.rates import calibrate, read_rates

    if config.calibrate:
        cores = available_cores()
        print(f"calibrating this machine ({cores} cores)", file=sys.stderr)
        work = workload(graph, config, batch_size)
        # workers filling a machine's cores wait at each collective for the descheduled
        per_host = {min(p, config.workers_per_host) for p in config.workers}
        crowded = tuple(w for w in per_host if w >= cores) if config.strategies != "full" else ()
        rates = calibrate(
            work, thread_counts(config, cores), cores, config.link, crowded, graph=graph
        )
    elif config.rates:
        rates = read_rates(config.rates, "--rates")
    else:
        return None
    if config.link_gbit:
        rates = dataclasses.replace(rates, link_bytes_s=config.link_gbit * 1e9 / 8)
    if config.latency_us:
        rates = dataclasses.replace(rates, latency_s=config.latency_us * 1e-6)
    return rates
