"""``shardgnn infer``: layer-wise inference from a checkpoint, one worker per part."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from shardgnn.cli.flags import add_flags, config_from_args
from shardgnn.options import to_dict
from shardgnn.train.settings import InferConfig


def add_parsers(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "infer",
        help="layer-wise distributed inference from a checkpoint",
        description=(
            "Compute every node's embedding, logits and prediction (a link-prediction model: "
            "its embedding, and with --pairs the score of each pair) with full neighbourhoods, "
            "one layer at a time, one worker per part; outputs are in the graph's original node "
            "ids, as .npy files and as tables (CSV by default) keyed by the graph's own node ids "
            "(those `shardgnn convert` kept; else 0..N-1), with class names."
        ),
    )
    add_flags(parser, InferConfig)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn infer``: check the checkpoint against the partition (given, or the
    checkpoint's dataset partitioned on the fly), then launch."""
    from shardgnn.atomic import check_output_path
    from shardgnn.distributed.start_method import start_forkserver
    from shardgnn.errors import ConfigError
    from shardgnn.train.tables import check_table_format

    config = config_from_args(InferConfig, args)
    check_table_format(config.table_format)  # Parquet without pyarrow: refused before any work
    check_output_path(config.out, "--out", folder=True)
    earlier = earlier_inference(Path(config.out).expanduser())
    if earlier and not config.overwrite:
        summary = Path(config.out) / "inference.json"
        raise ConfigError(
            f"--out {config.out}: holds an earlier inference ({summary} and the "
            f"{len(earlier) - 1} output(s) it lists); pass --overwrite to replace it, or choose "
            "another --out"
        )
    if config.log_dir:
        check_output_path(config.log_dir, "--log-dir", folder=True)
    # the workers' imports, in the forkserver, side by side with this process's own (torch) and its
    # reading and checking of the checkpoint and partition
    start_forkserver()
    from shardgnn.train.inference import resolve_checkpoint

    checkpoint = resolve_checkpoint(config.checkpoint)  # a clear error before any worker starts
    with tempfile.TemporaryDirectory(prefix="shardgnn-parts-") as scratch:
        where = config.partitions
        if config.partitions is None:
            config, where = _partitioned_on_the_fly(config, checkpoint, Path(scratch) / "parts")
        _infer(config, checkpoint, where, earlier)
    return 0


def earlier_inference(out: Path) -> list[Path]:
    """What an earlier ``shardgnn infer`` left in ``out``: its ``inference.json`` first, then
    the outputs it lists that are files in ``out`` (paths as that run wrote them: relative to
    the folder it ran in, so found by their trailing parts under ``out`` as well); empty when
    ``out`` holds no inference."""
    summary = out / "inference.json"
    if not summary.is_file():
        return []
    try:
        listed = json.loads(summary.read_text()).get("outputs") or {}
        paths = [Path(p) for p in listed.values() if isinstance(p, str)]
    except (OSError, ValueError, AttributeError):  # unreadable: the summary alone is replaced
        paths = []
    inside = out.resolve()
    found = [summary.resolve()]
    for path in paths:
        tails = [Path(*path.parts[i:]) for i in range(1, len(path.parts))]
        for candidate in [path, *(out / tail for tail in tails)]:
            candidate = candidate.expanduser().resolve()
            if candidate.is_file() and candidate.is_relative_to(inside):
                found.append(candidate)
                break
    return list(dict.fromkeys(found))


def _partitioned_on_the_fly(
    config: InferConfig, checkpoint: Path, out: Path
) -> tuple[InferConfig, str]:
    """``config`` reading the checkpoint's dataset partitioned in ``out`` (``--workers`` parts,
    default as many as trained it), as training partitions it on the fly, and how messages
    name that partition."""
    from shardgnn.cli.train import partition_on_the_fly
    from shardgnn.distributed.context import check_placement
    from shardgnn.errors import ConfigError
    from shardgnn.graph.datasets import dataset_traits
    from shardgnn.train.checkpoint import read_checkpoint_meta
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.inference import check_feature_storage, check_time

    meta = read_checkpoint_meta(checkpoint)
    spec = (meta.get("dataset") or {}).get("spec")
    if spec is None:
        raise ConfigError(
            f"{checkpoint} records no dataset to partition (its graph was given in Python, not "
            "named); pass --partitions DIR, a partition of the graph it was trained on"
        )
    where = f"{spec} (partitioned on the fly)"
    kind = dataset_traits(spec).kind  # what the partition would say, said before partitioning
    check_feature_storage(config.feature_storage, kind, where)
    check_time(config.at, kind, where)
    trained = TrainConfig.from_dict(meta["config"], where=f"{checkpoint}/meta.json config")
    device = _check_request(config, checkpoint, kind, trained.task).device
    workers = config.workers or int(meta.get("world_size") or 1)
    check_placement(device, "gloo", workers)  # no GPU for --device cuda: before partitioning
    run = dataclasses.replace(trained.run, workers=workers, partitions=None)
    partitioned = partition_on_the_fly(dataclasses.replace(trained, dataset=spec, run=run), out)
    # the parts are the workers now
    config = dataclasses.replace(config, partitions=partitioned.run.partitions, workers=None)
    return config, where


def _check_request(config: InferConfig, checkpoint: Path, kind: str, task: str) -> InferConfig:
    """What the checkpoint's task and the kind of graph decide (before a partition is made):
    ``--pairs`` needs a link model; a graph kind inferred on the CPU refuses another
    ``--device`` (``auto`` becomes ``cpu``)."""
    from shardgnn.errors import ConfigError
    from shardgnn.train.kinds import KINDS

    if config.pairs is not None and task != "link":
        raise ConfigError(
            f"--pairs: {checkpoint} holds a node-classification model; pairs are scored by "
            "a model trained with --task link"
        )
    if KINDS[kind].infer_on_cpu:
        if config.device not in ("cpu", "auto"):
            raise ConfigError(
                f"--device {config.device}: inference of a {kind} graph runs on the CPU so far; "
                "use --device cpu"
            )
        config = dataclasses.replace(config, device="cpu")
    return config


def _infer(config: InferConfig, checkpoint: Path, where: str, earlier: list[Path]) -> None:
    """Check the checkpoint against ``config.partitions`` (named ``where`` in messages), remove
    the ``earlier`` inference's files (``--overwrite``: none of them may be taken for this run's),
    then one worker per part."""
    from shardgnn.distributed.context import check_placement
    from shardgnn.distributed.launch import launch_local
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.inference import (
        check_feature_storage,
        check_inference_pair,
        check_time,
        infer_worker,
        read_pairs,
    )

    pset = read_partitions(config.partitions, verify=False)
    trained = check_inference_pair(checkpoint, pset)
    check_feature_storage(config.feature_storage, pset.kind, where)
    check_time(config.at, pset.kind, where)
    config = _check_request(config, checkpoint, pset.kind, trained.task)
    check_placement(config.device, "gloo", pset.num_parts)
    if config.pairs is not None:
        read_pairs(config.pairs, pset.num_nodes)  # a bad file is refused before workers start
    for path in earlier:  # after every check: a refused run leaves the earlier outputs
        path.unlink(missing_ok=True)
    Path(config.out).expanduser().mkdir(parents=True, exist_ok=True)
    config = dataclasses.replace(config, checkpoint=str(checkpoint))
    launch_local(
        infer_worker,
        (json.dumps(to_dict(config)),),
        nprocs=pset.num_parts,
        log_dir=config.log_dir,
        stop_grace_s=config.stop_grace,
        stopped_timeout_s=config.timeout,
    )
