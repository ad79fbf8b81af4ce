"""The ``shardgnn`` command line: ``train``, ``infer``, ``info``, ``partition``, ``verify``, ``plot``.

A thin layer: it parses flags into the config dataclasses, runs, and prints. Every user
mistake surfaces as a one-paragraph ``error:`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shardgnn.errors import ShardgnnError

# shardgnn.distributed.context.DEFAULT_TIMEOUT_S, repeated so building the parser never imports
# torch (tests/test_launch.py checks they agree).
DEFAULT_TIMEOUT_S = 45.0
# shardgnn.store.cache.POLICIES, repeated for the same reason.
POLICIES = ("none", "degree", "presample", "fifo", "lru", "belady")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 15,10,5") from None


def _add_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", nargs="?", default="synthetic",
                        help="dataset spec (default: synthetic); `shardgnn info --list` shows the known names")
    parser.add_argument("--data-dir", default=None, help="dataset folder (default: $SHARDGNN_DATA or ~/.cache/shardgnn)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardgnn", description="Graph neural network training at scale.")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a GNN for node classification",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _add_data_args(train)
    train.add_argument("--model", choices=("sage", "gcn", "gat"), default="sage", help="layer type")
    train.add_argument("--mode", choices=("minibatch", "full"), default="minibatch",
                       help="sampled mini-batches or full-graph training")
    train.add_argument("--fanouts", type=_int_list, default=(15, 10, 5),
                       help="neighbours per layer, output layer first; -1 = all (mini-batch mode)")
    train.add_argument("--layers", type=int, default=None,
                       help="number of layers (default: number of fanouts; 2 in full mode)")
    train.add_argument("--replace", action="store_true", help="sample neighbours with replacement")
    train.add_argument("--batch-size", type=int, default=1024, help="seed nodes per mini-batch, over all workers (each of P workers takes 1/P)")
    train.add_argument("--eval-batch-size", type=int, default=4096, help="seed nodes per evaluation batch")
    train.add_argument("--eval-fanouts", type=_int_list, default=None, help="fanouts for evaluation (default: --fanouts)")
    train.add_argument("--hidden", type=int, default=256, help="hidden width (per head for gat)")
    train.add_argument("--heads", type=int, default=4, help="attention heads (gat)")
    train.add_argument("--dropout", type=float, default=0.5, help="dropout between layers")
    train.add_argument("--input-dropout", type=float, default=0.0,
                       help="dropout on the input features (Kipf & Welling's GCN: 0.5)")
    train.add_argument("--epochs", type=int, default=10, help="training epochs")
    train.add_argument("--lr", type=float, default=0.003, help="Adam learning rate")
    train.add_argument("--weight-decay", type=float, default=0.0, help="L2 weight decay")
    train.add_argument("--patience", type=int, default=0, help="early-stopping patience in epochs (0: off)")
    train.add_argument("--feature-norm", choices=("none", "row", "standard"), default="none",
                       help="feature preprocessing")
    train.add_argument("--seed", type=int, default=0, help="random seed")
    train.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    train.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    train.add_argument("--sampler-threads", type=int, default=None, help="sampling threads (default: all cores)")
    train.add_argument("--results", default=None, help="write the results JSON to this file")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.add_argument("--checkpoint-dir", default=None,
                       help="write checkpoints (model, optimiser, RNG states, progress) into this folder")
    train.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints")
    train.add_argument("--keep-checkpoints", type=int, default=2, help="complete checkpoints to keep")
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest complete checkpoint in --checkpoint-dir (a fresh start when "
                            "there is none, so the same command works under torchrun --max-restarts)")
    dist_args = train.add_argument_group("distributed training")
    dist_args.add_argument("--workers", type=int, default=None,
                           help="start N local worker processes (one per partition); without --partitions the "
                                "dataset is partitioned on the fly with METIS")
    dist_args.add_argument("--partitions", default=None,
                           help="a partition directory written by `shardgnn partition` (one worker per part)")
    dist_args.add_argument("--overlap", choices=("auto", "on", "off"), default="auto",
                           help="sample/fetch the next batch in a background thread while training on the "
                                "current one; auto: on when every worker has >= 2 cores")
    dist_args.add_argument("--fetch-bits", type=int, choices=(1, 2, 4, 8, 16, 32), default=32,
                           help="mini-batch mode: bits per value of remote feature rows (low-bit codec; 32: exact)")
    cache_args = train.add_argument_group("feature cache and storage (distributed mini-batch training)")
    cache_args.add_argument("--cache-policy", choices=POLICIES, default="none",
                            help="cache of remote (and, with --feature-storage disk, local) feature rows per worker: "
                                 "degree (top in-degree), presample (most sampled in one pre-sampling epoch), "
                                 "fifo, lru, or belady (evicts the row used farthest ahead in a --cache-lookahead "
                                 "window)")
    cache_args.add_argument("--cache-size", default="10%",
                            help="capacity per worker: percent of all nodes (20%%), a row count (50000) or bytes (256MB)")
    cache_args.add_argument("--cache-lookahead", type=int, default=16,
                            help="belady: batches sampled ahead; their missing rows arrive in one exchange")
    cache_args.add_argument("--feature-storage", choices=("memory", "disk"), default="memory",
                            help="memory: each worker loads its feature rows; disk: rows are read on demand from the "
                                 "memory-mapped partition file (feature matrices larger than RAM)")
    full_args = train.add_argument_group("distributed full-graph training (--mode full --workers N)")
    full_args.add_argument("--spmm", choices=("1d", "1d-sparse", "1.5d"), default="1d-sparse",
                           help="distributed SpMM: 1d broadcasts every block, 1d-sparse moves only the rows each "
                                "rank needs, 1.5d replicates row blocks --replication times (CAGNET)")
    full_args.add_argument("--replication", type=int, default=1, help="1.5d replication factor (divides --workers)")
    full_args.add_argument("--bits", type=int, choices=(1, 2, 4, 8, 16, 32), default=32,
                           help="bits per value of exchanged features and feature gradients (32: exact)")
    full_args.add_argument("--staleness", type=int, default=0,
                           help="1d-sparse: epochs halo rows may lag, so exchanges overlap compute (0: synchronous)")
    dist_args.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                           help="seconds any collective may wait before the job fails (a dead worker ends the "
                                "job instead of hanging it)")

    infer = sub.add_parser("infer", help="layer-wise distributed inference from a checkpoint",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    infer.add_argument("--checkpoint", required=True,
                       help="a --checkpoint-dir of `shardgnn train` (its newest checkpoint) or one epoch-N folder")
    infer.add_argument("--partitions", required=True, help="partition directory of the graph (one worker per part)")
    infer.add_argument("--out", required=True, help="output folder for embeddings/logits/predictions (.npy)")
    infer.add_argument("--chunk-rows", type=int, default=65536, help="rows per chunk (bounds working memory)")
    infer.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="collective deadline in seconds")

    info = sub.add_parser("info", help="print statistics of a dataset")
    _add_data_args(info)
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.add_argument("--list", action="store_true", help="list the known dataset names and exit")

    from shardgnn.partition.commands import add_parsers as add_partition_parsers

    add_partition_parsers(sub)  # `partition` and `verify`

    plot = sub.add_parser("plot", help="draw PNG figures from results JSON files or partition directories")
    plot.add_argument("results", nargs="+",
                      help="results JSON files (`shardgnn train --results`) or partition directories")
    plot.add_argument("--out", default="plots", help="output folder for the PNG files")
    return parser


def config_from_args(args: argparse.Namespace):
    """The :class:`TrainConfig` that ``shardgnn train`` flags describe (also used by ``shardgnn.run``)."""
    from shardgnn.fullgraph.spmm import FullGraphConfig
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.store.cache import CacheConfig
    from shardgnn.train.config import OptimConfig, TrainConfig

    layers = args.layers or (len(args.fanouts) if args.mode == "minibatch" else 2)
    return TrainConfig(
        dataset=args.dataset, mode=args.mode,
        model=ModelConfig(model=args.model, hidden=args.hidden, num_layers=layers, dropout=args.dropout,
                          input_dropout=args.input_dropout, heads=args.heads),
        sampler=SamplerConfig(fanouts=args.fanouts if args.mode == "minibatch" else (-1,) * layers,
                              replace=args.replace, num_threads=args.sampler_threads),
        optim=OptimConfig(epochs=args.epochs, lr=args.lr, weight_decay=args.weight_decay, patience=args.patience),
        full=FullGraphConfig(spmm=args.spmm, replication=args.replication, bits=args.bits, staleness=args.staleness),
        fetch_bits=args.fetch_bits,
        cache=CacheConfig(policy=args.cache_policy, size=args.cache_size, lookahead=args.cache_lookahead),
        feature_storage=args.feature_storage,
        batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, eval_fanouts=args.eval_fanouts,
        feature_norm=args.feature_norm, seed=args.seed, device=args.device, threads=args.threads,
        data_dir=args.data_dir, results=args.results, progress=not args.quiet, checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints, resume=args.resume,
    )


def _train(args: argparse.Namespace, argv: list[str]) -> int:
    if args.workers is not None or args.partitions is not None:
        return _train_distributed(args, argv)
    from shardgnn.atomic import save_json
    from shardgnn.train.report import print_summary
    from shardgnn.errors import ConfigError
    from shardgnn.train.single import run_training

    distributed_only = [flag for flag, value, default in (("--bits", args.bits, 32), ("--staleness", args.staleness, 0),
                                                           ("--replication", args.replication, 1),
                                                           ("--fetch-bits", args.fetch_bits, 32),
                                                           ("--cache-policy", args.cache_policy, "none"),
                                                           ("--feature-storage", args.feature_storage, "memory"))
                        if value != default]
    if distributed_only:
        raise ConfigError(f"{', '.join(distributed_only)} shape(s) communication between workers, and this run has "
                          "one process; add --workers N (or --partitions DIR) to train distributed (--workers 1 "
                          "runs one worker over a one-part partition, which a cache or disk storage can front)")
    results = run_training(config_from_args(args))
    print_summary(results)
    if args.results:
        save_json(args.results, results)
        print(f"results written to {args.results}")
    return 0


def _train_distributed(args: argparse.Namespace, argv: list[str]) -> int:
    """Start ``--workers`` local processes (partitioning on the fly when no --partitions)."""
    import tempfile

    from shardgnn.distributed.launch import launch_local
    from shardgnn.errors import ConfigError
    from shardgnn.partition.format import read_partitions
    from shardgnn.run import worker_entry

    config_from_args(args)  # validate every flag before starting anything
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers} must be >= 1")
    with tempfile.TemporaryDirectory(prefix="shardgnn-parts-") as scratch:
        if args.partitions is None:
            from shardgnn.graph.datasets import load_dataset
            from shardgnn.partition.format import write_partitions
            from shardgnn.partition.methods import PartitionConfig, partition_graph

            graph = load_dataset(args.dataset, args.data_dir)
            method = "metis" if args.workers > 1 else "random"
            result = partition_graph(graph, PartitionConfig(num_parts=args.workers, method=method, seed=args.seed))
            parts_dir = str(Path(scratch) / "parts")
            write_partitions(graph, result.assignment, parts_dir, method=result.method, settings=result.settings)
            del graph
            print(f"partitioned {args.dataset} into {args.workers} parts ({method}) in {parts_dir}")
            argv = [*argv, "--partitions", parts_dir]
        else:
            parts_dir = args.partitions
        num_parts = read_partitions(parts_dir, verify=False).num_parts
        workers = args.workers if args.workers is not None else num_parts
        if workers != num_parts:
            raise ConfigError(f"{parts_dir} holds {num_parts} parts but --workers is {workers}; "
                              f"use --workers {num_parts} or re-partition with --parts {workers}")
        launch_local(worker_entry, (argv,), nprocs=workers)
    return 0


def _infer(args: argparse.Namespace) -> int:
    from shardgnn.distributed.launch import launch_local
    from shardgnn.errors import ConfigError
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.infer import infer_worker, resolve_checkpoint

    if args.chunk_rows < 1:
        raise ConfigError(f"--chunk-rows {args.chunk_rows} must be >= 1")
    checkpoint = resolve_checkpoint(args.checkpoint)  # a clear error before any worker starts
    workers = read_partitions(args.partitions, verify=False).num_parts
    Path(args.out).mkdir(parents=True, exist_ok=True)
    launch_local(infer_worker, (str(checkpoint), args.partitions, args.out, args.chunk_rows, args.timeout),
                 nprocs=workers)
    return 0


def _info(args: argparse.Namespace) -> int:
    from shardgnn.graph.datasets import describe_datasets, load_dataset
    from shardgnn.graph.stats import graph_info
    from shardgnn.train.progress import format_table

    if args.list:
        print(describe_datasets())
        return 0
    info = graph_info(load_dataset(args.dataset, args.data_dir))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    rows = []
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        rows.append((key, value))
    print(format_table(["property", "value"], rows))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from shardgnn.partition.commands import is_partition_dir, plot_partition
    from shardgnn.plot import plot_training_curves

    written: list[Path] = []
    for path in args.results:
        if is_partition_dir(path):
            written += plot_partition(path, Path(args.out))
    results = [Path(p) for p in args.results if not is_partition_dir(p)]
    if results:
        written += plot_training_curves(results, Path(args.out))
    for path in written:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    from shardgnn.partition.commands import partition_command, verify_command

    handlers = {"train": lambda a: _train(a, argv), "infer": _infer, "info": _info, "plot": _plot, "partition": partition_command,
                "verify": verify_command}
    try:
        return handlers[args.command](args)
    except ShardgnnError as exc:
        print(f"shardgnn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        from shardgnn.distributed.launch import WorkerFailedError

        if not isinstance(exc, WorkerFailedError):
            raise
        print(f"shardgnn {args.command}: a worker failed; the job was stopped.\n{exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
