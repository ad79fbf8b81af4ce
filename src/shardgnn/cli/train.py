"""``shardgnn train``: single-process, or N local workers (partitioning on the fly when needed).

The parent process resolves the whole config, checks everything it can before any worker starts
(the partition directory, the dataset it holds, a checkpoint to resume), and hands every worker
the resolved config as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Collection
from pathlib import Path

from shardgnn.cli.flags import add_flags, config_from_args, field_help, flag_for, was_given
from shardgnn.errors import ConfigError
from shardgnn.train.config import TrainConfig
from shardgnn.train.settings import LINK_SPLIT_SETTINGS

# Settings that another setting of the same recipe makes pointless: (dest, when, why). Given
# anyway, they are refused (what a recipe never reads is refused by the recipe).
_POINTLESS = (
    ("cache.size", lambda c: not c.cache.enabled, "no --cache-policy is set"),
    (
        "cache.lookahead",
        lambda c: c.cache.policy != "belady",
        "only --cache-policy belady looks ahead",
    ),
    ("embedding.optimizer", lambda c: not c.embedding.enabled, "no --embedding-dim is set"),
    ("embedding.lr", lambda c: not c.embedding.enabled, "no --embedding-dim is set"),
    ("embedding.storage", lambda c: not c.embedding.enabled, "no --embedding-dim is set"),
    (
        "embedding.directory",
        lambda c: not c.embedding.enabled or c.embedding.storage != "disk",
        "it holds the files of --embedding-dim D --embedding-storage disk",
    ),
)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train",
        help="train a GNN: node, link, edge or graph prediction (--task)",
        description=(
            "Train a GNN for node prediction (classes, labels, values), link prediction "
            "(knowledge and temporal graphs included), edge or graph prediction (--task): in "
            "this process, or with --workers N on N local worker processes (--partitions DIR, "
            "or the dataset partitioned on the fly). One line is printed per epoch; --results "
            "FILE.json is rewritten after every epoch."
        ),
    )
    parser.add_argument(
        "dataset_arg",
        nargs="?",
        default=None,
        metavar="DATASET",
        help=field_help(TrainConfig, "dataset")
        + "; with --partitions, the partitioned one; `shardgnn "
        "info --list` names the known datasets",
    )
    add_flags(parser, TrainConfig)
    parser.set_defaults(handler=run)


def partitions_for(path: str, workers: int | None) -> str:
    """``--partitions`` with ``{parts}`` replaced by the worker count: the job's own under
    torchrun (``WORLD_SIZE``: after an elastic restart on fewer or more machines, the partition
    of the count that runs now), else ``--workers``."""
    if "{parts}" not in path:
        return path
    world = os.environ.get("WORLD_SIZE") if "TORCHELASTIC_RUN_ID" in os.environ else None
    count = workers if world is None else int(world)
    if count is None:
        raise ConfigError(
            f"--partitions {path} names the worker count ({{parts}}) but none is known here: give "
            "--workers N, or run it under torchrun (python -m shardgnn.torchrun ... -m "
            "shardgnn.run train ...)"
        )
    return path.replace("{parts}", str(count))


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The config of a ``train`` command line: the flags given, then the defaults of the recipe
    its dataset trains with (:func:`~shardgnn.train.recipes.recipe_defaults`: a knowledge graph
    trains link prediction with R-GCN, a temporal graph TGN, ...), then the dataclasses'."""
    from shardgnn.train.recipes import (
        NoRecipeError,
        partition_holds,
        recipe_defaults,
        refuse_unread,
        select,
        traits_of,
    )

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    given = {k: v for k, v in vars(args).items() if k.split(".")[0] in fields}
    if args.dataset_arg is not None:
        given["dataset"] = args.dataset_arg
    if given.get("run.partitions") is not None:
        given["run.partitions"] = partitions_for(given["run.partitions"], given.get("run.workers"))
    traits = traits_of(given.get("dataset", TrainConfig.dataset), given.get("run.partitions"))
    # overrides replace the flags' values, so what was given comes last and wins
    config = config_from_args(TrainConfig, args, **recipe_defaults(traits, given), **given)
    flags_given = [dest for dest in given if dest != "dataset"]
    try:
        recipe = select(config, traits.kind)
    except NoRecipeError:
        partitions = given.get("run.partitions")
        if partitions is None:
            raise
        raise ConfigError(partition_holds(partitions, traits.kind)) from None
    if config.run.distributed and recipe.distributed is None:  # before any partitioning
        raise ConfigError(f"{recipe.description} trains in one process so far: drop --workers")
    refuse_unread(recipe, config, flags_given)
    if config.run.distributed:
        recipe.check_workers(config)
    for dest, pointless, why in _POINTLESS:
        if dest in given and pointless(config):
            raise ConfigError(f"{flag_for(TrainConfig, dest)} does not apply: {why}; drop it")
    return config


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn train``."""
    given = vars(args)
    if given.get("run.workers") is not None or given.get("run.partitions") is not None:
        from shardgnn.distributed.start_method import start_forkserver

        # the workers' imports, in the forkserver, side by side with this process's own (torch,
        # loaded by the checks below) and its checks and partitioning
        start_forkserver()
    config = train_config(args)
    _check_outputs(config)
    _warn_oversubscribed(config.run.workers, config.threads)
    if not config.run.distributed:
        from shardgnn.train.report import print_summary
        from shardgnn.train.single import run_training

        results = run_training(config)
        print_summary(results)
        if config.results:
            print(f"results written to {config.results}")
        return 0
    return _train_distributed(
        config, dataset_given=args.dataset_arg is not None, split_given=split_settings_given(args)
    )


def _check_outputs(config: TrainConfig) -> None:
    """Every output path is checked before the first epoch, not when it is first written."""
    from shardgnn.atomic import check_output_path

    if config.results:
        check_output_path(config.results, "--results", folder=False)
    from shardgnn.train.scalars import check_tensorboard

    check_tensorboard(config.tensorboard)
    for dest, path in (
        ("tensorboard", config.tensorboard),
        ("checkpoint.dir", config.checkpoint.dir),
        ("run.log_dir", config.run.log_dir),
        ("embedding.directory", config.embedding.directory),
    ):
        if path:
            check_output_path(path, flag_for(TrainConfig, dest), folder=True)


def _warn_oversubscribed(workers: int | None, threads: int | None = None) -> None:
    """One line when local workers, or the torch threads they run (``--threads``, per process),
    outnumber the cores this process may run on: it runs, but each thread gets a fraction of a core
    (and a collective waits for the slowest)."""
    from shardgnn.distributed.launch import available_cores

    cores = available_cores()
    plural = "s" * (cores > 1)
    if workers is not None and cores and workers > cores:
        print(
            f"shardgnn train: warning: --workers {workers} on {cores} CPU core{plural}: the "
            f"workers share cores, so epochs are slower than with --workers {cores} (for more "
            "parts than cores, partition with `shardgnn partition --parts N` and run them on more "
            "machines under torchrun)",
            file=sys.stderr,
        )
    elif threads is not None and threads * (workers or 1) > cores:
        processes = f"{workers} workers x " if workers else ""
        fit = max(1, cores // (workers or 1))
        print(
            f"shardgnn train: warning: --threads {threads} ({processes}{threads} torch threads) on "
            f"{cores} CPU core{plural}: the threads take turns on the cores, so steps are slower "
            f"than with --threads {fit} (or leave --threads unset: the cores are shared out)",
            file=sys.stderr,
        )


def split_settings_given(args: argparse.Namespace) -> list[str]:
    """The edge split settings given on the command line (checked against a stored split)."""
    return [name for name in LINK_SPLIT_SETTINGS if was_given(args, f"link.{name}")]


def refuse_what_one_host_skips(config: TrainConfig) -> None:
    """Refuse, before partitioning, what every worker of a local launch would refuse: all of them
    run on this machine and (``--host-sharing auto``) read each other's rows from their mapped
    parts, so a feature cache in front of rows in memory, or ``--fetch-bits``, has no
    collective to act on."""
    if config.run.host_sharing != "auto":
        return
    if (
        config.cache.enabled
        and config.cache.policy != "auto"  # it resolves to none here
        and config.feature_storage == "memory"
        and config.embedding.staleness is None  # peers' learnable rows are cached, not mapped
    ):
        from shardgnn.store.cache.build import nothing_to_cache

        raise nothing_to_cache(config.cache.policy, "each worker here would read")
    if config.mode == "minibatch" and config.fetch_bits != 32:
        from shardgnn.distributed.codec import nothing_to_quantise

        raise nothing_to_quantise(config.fetch_bits, "each worker here would read")


def _train_distributed(
    config: TrainConfig, *, dataset_given: bool, split_given: Collection[str] = ()
) -> int:
    """Partition when no --partitions, check everything, then start one worker per part."""
    from shardgnn.distributed.context import check_placement
    from shardgnn.distributed.launch import launch_local
    from shardgnn.train.worker import train_worker

    refuse_what_one_host_skips(config)
    if config.run.workers is not None:  # refused before partitioning on the fly
        check_placement(config.device, config.run.backend, config.run.workers)
        if config.mode == "full":
            from shardgnn.fullgraph.shard import grid_of

            grid_of(config.full, config.run.workers)  # the grid's rows and layers divide P
    with tempfile.TemporaryDirectory(prefix="shardgnn-parts-") as scratch:
        if config.run.partitions is None:
            config = partition_on_the_fly(config, Path(scratch) / "parts")
            dataset_given = False  # it is what was just partitioned
        config, workers = preflight(config, dataset_given=dataset_given, split_given=split_given)
        check_placement(config.device, config.run.backend, workers)
        launch_local(
            train_worker,
            (json.dumps(config.to_dict()),),
            nprocs=workers,
            log_dir=config.run.log_dir,
            stop_grace_s=config.run.stop_grace,
            stopped_timeout_s=config.run.timeout,
        )
    return 0


def partition_on_the_fly(config: TrainConfig, out: Path) -> TrainConfig:
    """``config.dataset`` partitioned into ``config.run.workers`` parts in ``out`` as training
    reads it (METIS; random for one part), said in one line; ``config`` reading them."""
    workers = config.run.workers
    assert workers is not None
    method = "metis" if workers > 1 else "random"
    from shardgnn.graph.datasets import dataset_traits
    from shardgnn.partition.methods import EmptyPartsError
    from shardgnn.train.partitioning import partition_for_training

    kind = dataset_traits(config.dataset).kind
    try:
        name, method = partition_for_training(config, kind, out, workers, method)
    except EmptyPartsError as exc:
        raise ConfigError(
            f"--workers {workers}: {str(exc).splitlines()[0]}; use fewer workers (every worker "
            "needs nodes of its own)"
        ) from None
    print(f"partitioned {name} into {workers} part{'s' * (workers > 1)} ({method})", flush=True)
    return dataclasses.replace(config, run=dataclasses.replace(config.run, partitions=str(out)))


def preflight(
    config: TrainConfig, *, dataset_given: bool, split_given: Collection[str] = ()
) -> tuple[TrainConfig, int]:
    """Everything the parent can check before a worker starts; returns the config the workers
    get (its dataset: the one the partition holds) and the number of workers.

    Raises:
        ConfigError / DatasetError: an unreadable or unlabelled partition directory, a dataset
            argument naming another graph, a worker count that does not match, a checkpoint that
            cannot be resumed by this run.
    """
    from shardgnn.graph.datasets import canonical_spec
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.kinds import check_partition
    from shardgnn.train.recipes import (
        NoRecipeError,
        partition_holds,
        select,
    )

    assert config.run.partitions is not None
    pset = read_partitions(config.run.partitions, verify=False)  # meta.json and every file's size
    recorded = pset.dataset
    if dataset_given:
        spec = canonical_spec(config.dataset)
        if recorded["spec"] is not None and spec != recorded["spec"]:
            raise ConfigError(
                f"{pset.path} holds {recorded['spec']}, not {spec}; drop the dataset argument to "
                f"train what the partition holds, or partition {config.dataset} first"
            )
    kind = pset.kind
    holds = partition_holds(pset.path, kind)
    try:
        recipe = select(config, kind)
    except NoRecipeError:
        raise ConfigError(holds) from None
    if recipe.distributed is None:
        raise ConfigError(f"{holds}; {recipe.description} trains in one process so far")
    config = check_partition(kind, config, pset, split_given)
    if pset.places_edges and not (
        config.mode == "full" and config.full.spmm in ("vertex-cut", "auto")
    ):
        warnings.warn(
            f"{pset.path} places every edge on a part ({pset.method}): only --mode full --spmm "
            "vertex-cut follows that; this run reads its nodes' owners alone",
            stacklevel=2,
        )
    return _resolved(config, pset)


def _auto_spmm(config: TrainConfig, pset) -> TrainConfig:
    """``--spmm auto`` made concrete: the strategy whose busiest worker sends the fewest bytes
    on this partition, or with ``--plan-rates`` the shortest predicted epoch (``shardgnn plan``'s
    pick; attention and GINE: ``1d-sparse``, the only one they run). Said in one line (by rank 0
    under torchrun, where every worker resolves it)."""

    from shardgnn.fullgraph.plan import auto_spmm, worker_memory_mb
    from shardgnn.train.fullgraph import HALO_ROW_MODELS

    model = config.model
    if model.model in HALO_ROW_MODELS:
        if config.plan_rates:
            raise ConfigError(
                f"--plan-rates does not apply to --model {model.model}: its layers read each "
                "edge's source row, on 1d-sparse only; drop --plan-rates"
            )
        full = dataclasses.replace(config.full, spmm="1d-sparse")
        said = f"1d-sparse, the one {model.model} layers run on"
    else:
        if config.task == "link":
            out_dim = config.link.out_dim
        else:
            part = pset.load_part(0, mmap=True, verify=False)
            y = part.y
            out_dim = int(y.shape[1]) if y is not None and y.ndim == 2 else part.num_classes
        per_host, memory_mb = _machine_share(pset)
        full, pick, costs = auto_spmm(
            pset, model, config.full, out_dim, per_host, memory_mb, config.plan_rates
        )
        sparse = next(c for c in costs if c.label == "1d-sparse")
        name = pick.label
        kept = worker_memory_mb(pick)
        if memory_mb is None:
            memory = ""
        elif kept > memory_mb:
            memory = (
                f"; no strategy fits in the {memory_mb:,.0f} MB each of this machine's "
                f"{per_host} workers can keep: this one keeps the least, {kept:,.0f} MB"
            )
        else:
            memory = f"; of those that fit in {memory_mb:,.0f} MB per worker (it keeps "
            memory += f"{kept:,.1f} MB)"
        if pick.epoch_s is not None:
            said = (
                f"{name}: the shortest predicted epoch, {pick.epoch_s:.3f} s (1d-sparse: "
                f"{sparse.epoch_s:.3f} s; `shardgnn plan --rates` compares every strategy)"
            )
        else:
            said = (
                f"{name}: its busiest worker sends the fewest bytes per epoch, "
                f"{pick.max_worker_bytes / 1e6:,.3f} MB (1d-sparse: "
                f"{sparse.max_worker_bytes / 1e6:,.3f} MB; `shardgnn plan` compares every strategy)"
            )
        said += memory
    if os.environ.get("RANK", "0") == "0":
        print(f"--spmm auto: {said}", flush=True)
    # hybrid prices each remote node with the rates it was planned with
    rates = config.plan_rates if full.dependencies == "hybrid" else None
    return dataclasses.replace(config, full=full, plan_rates=rates)


def _auto_cache(config: TrainConfig, pset) -> TrainConfig:
    """``--cache-policy auto`` made concrete: ``presample`` (of ``--cache-size``) or ``none``,
    whichever ``shardgnn plan``'s mini-batch model picks on this partition (at this
    ``--fetch-bits``): with ``--plan-rates``, the shorter predicted epoch, else the fewer bytes
    from the busiest worker, among those that fit in each worker's share of the memory. Said in
    one line (by rank 0 under torchrun, where every worker resolves it alike)."""
    import numpy as np

    from shardgnn.fullgraph.minibatch_plan import minibatch_costs
    from shardgnn.fullgraph.plan import recommend, worker_memory_mb
    from shardgnn.fullgraph.rates import read_rates

    rates = None if config.plan_rates is None else read_rates(config.plan_rates, "--plan-rates")
    graph = pset.reassemble()
    workers = pset.num_parts
    per_host, memory_mb = _machine_share(pset)
    model = config.model
    costs = minibatch_costs(
        graph, pset.book.owner(np.arange(graph.num_nodes)), workers, model=model.model,
        hidden=model.hidden, fanouts=config.sampler.fanouts,
        batch_size=config.node_batch_size(len(graph.train_idx)), cache_size=config.cache.size,
        seed=config.seed, rates=rates, workers_per_host=per_host,
        host_sharing=config.run.host_sharing == "auto", dropout=model.dropout,
        input_dropout=model.input_dropout,
    )  # fmt: skip
    # the options at this run's bit width: its rows without a cache, and through one (where
    # no row is fetched, exact rows alone)
    low_bit = config.fetch_bits < 32
    costs = [c for c in costs if ("--fetch-bits" in c.flags) == low_bit] or costs
    pick = recommend(costs, memory_mb).get(workers)
    if pick is None:  # nothing fits: the least memory
        pick = min(costs, key=worker_memory_mb)
    cached = "--cache-policy" in pick.flags
    policy = "presample" if cached else "none"
    name = "none"
    if cached:
        name = f"presample {config.cache.size} (predicted hit rate {100 * pick.hit_rate:.1f}%)"
    other = next((c for c in costs if c is not pick), None)
    if other is None:
        said = (
            "none: every owner of a row is on this machine, whose workers read each other's "
            "mapped parts (--host-sharing auto), so no row is fetched"
        )
    elif pick.epoch_s is not None:
        said = (
            f"{name}: the shorter predicted epoch, {pick.epoch_s:.3f} s (with"
            f"{'out' * cached} the cache: {other.epoch_s:.3f} s)"
        )
    else:
        said = (
            f"{name}: its busiest worker sends fewer bytes per epoch, "
            f"{pick.max_worker_bytes / 1e6:,.3f} MB (with{'out' * cached} the cache: "
            f"{other.max_worker_bytes / 1e6:,.3f} MB)"
        )
    if other is not None and memory_mb is not None and worker_memory_mb(pick) > memory_mb:
        said += (
            f"; neither fits in the {memory_mb:,.0f} MB each of this machine's {per_host} "
            f"workers can keep: this one keeps less, {worker_memory_mb(pick):,.0f} MB"
        )
    if other is not None:
        said += "; `shardgnn plan` compares every option"
    if os.environ.get("RANK", "0") == "0":
        print(f"--cache-policy auto: {said}", flush=True)
    cache = dataclasses.replace(config.cache, policy=policy)
    return dataclasses.replace(config, cache=cache, plan_rates=None)


def _machine_share(pset) -> tuple[int, float | None]:
    """What an ``auto`` pick plans each machine for: its workers (local workers share this
    machine; under torchrun, a machine runs its local world) and the MB each can keep, None
    under torchrun: there every worker resolves the pick on its own, after its peers may have
    taken memory, so a bound read there could differ between workers and so could their picks.
    The launcher of local workers resolves it once, before they start."""
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", pset.num_parts))
    return per_host, None if "RANK" in os.environ else memory_per_worker(per_host)


def memory_per_worker(workers_per_host: int) -> float | None:
    """MB each of this machine's ``workers_per_host`` workers can keep: what this process can
    still take (:func:`~shardgnn.distributed.oom.available_memory`, its memory cgroup's limit
    included), shared evenly; None where it cannot be read."""
    from shardgnn.distributed.oom import available_memory

    available = available_memory()
    return None if available is None else available / 1e6 / max(1, workers_per_host)


def _resolved(config: TrainConfig, pset) -> tuple[TrainConfig, int]:
    """The workers' config (the dataset the partition holds, the worker count) after the checks
    every kind of partition shares: the part count, the replication grid, a resumable
    checkpoint."""
    from shardgnn.fullgraph.shard import grid_of
    from shardgnn.train.checkpoint import Checkpointer, check_resumable

    recorded = pset.dataset
    workers = config.run.workers if config.run.workers is not None else pset.num_parts
    if workers != pset.num_parts:
        raise ConfigError(
            f"{pset.path} holds {pset.num_parts} parts but --workers is {workers}; use --workers "
            f"{pset.num_parts} or re-partition with --parts {workers}"
        )
    if config.mode == "full":
        if config.full.spmm == "auto":
            config = _auto_spmm(config, pset)
        if config.full.dependencies == "hybrid":  # a bad rates file: one line, before any worker
            from shardgnn.fullgraph.rates import read_rates

            read_rates(config.plan_rates, "--plan-rates")
        grid_of(config.full, workers)  # --replication or --grid-rows must divide the workers
    elif config.cache.policy == "auto":
        config = _auto_cache(config, pset)
    config = dataclasses.replace(
        config,
        dataset=recorded["spec"] or recorded["name"],
        run=dataclasses.replace(config.run, workers=workers),
    )
    ckpt = config.checkpoint
    if ckpt.resume and ckpt.dir:
        latest = (
            Checkpointer(ckpt.dir, world_size=workers).latest() if Path(ckpt.dir).is_dir() else None
        )
        if latest is not None:
            check_resumable(latest[0], latest[1], config.to_dict(), recorded)
    return config, workers
