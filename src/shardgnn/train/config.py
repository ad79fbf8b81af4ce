"""Training configuration: one dataclass per component, each setting defined once.

Every field is a ``shardgnn train`` flag (``shardgnn.cli.flags`` derives them); the defaults are
valid, so ``TrainConfig()`` trains the built-in synthetic dataset. The resolved config travels
as JSON (:meth:`TrainConfig.to_dict` / :meth:`TrainConfig.from_dict`): the launcher hands it to
every worker, and every results file and checkpoint records it.

The components of training itself are defined in :mod:`shardgnn.train.settings` (the ones a
``TrainConfig`` holds are importable from here too); what the settings resolve to and the
combinations refused, in :mod:`shardgnn.train.config_rules`.

Imports torch only to apply ``--threads`` (:func:`apply_process_settings`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardgnn.distributed.config import BITS
from shardgnn.fullgraph.config import FullGraphConfig
from shardgnn.graph.features import FEATURE_NORMS
from shardgnn.heap import HEAP_MODES, configure_heap
from shardgnn.loader.config import DeviceConfig
from shardgnn.nn.config import ModelConfig
from shardgnn.options import check_types, component, from_dict, option, to_dict
from shardgnn.precision import PRECISIONS
from shardgnn.sampling.config import SamplerConfig
from shardgnn.store.cache.config import CacheConfig
from shardgnn.store.config import HISTORICAL_MODES, HISTORICAL_SCOPES, EmbeddingConfig
from shardgnn.train.config_rules import (
    DEFAULT_BATCH_SIZE,
    MIN_AUTO_BATCH_SIZE,
    ResolvedSettings,
    resolve_and_check,
)
from shardgnn.train.settings import (
    CheckpointConfig,
    LinkConfig,
    OptimConfig,
    RunConfig,
    TemporalConfig,
)

MODES = ("minibatch", "full")
TASKS = ("node", "link", "graph", "edge")
BATCHINGS = ("random", "cluster")
FEATURE_STORAGE = ("memory", "disk")


@dataclasses.dataclass(kw_only=True)
class TrainConfig(ResolvedSettings):
    """A training run: what to train, how, and where the results go."""

    dataset: str = option(
        "synthetic", cli=False, help="dataset spec, e.g. cora, synthetic:nodes=100000 or graph:DIR"
    )
    data_dir: str | None = option(
        None, metavar="DIR", help="dataset folder (unset: $SHARDGNN_DATA, else ~/.cache/shardgnn)"
    )
    task: str = option(
        "node",
        choices=TASKS,
        help="node: node classification; link: link prediction (held-out edges, negatives, "
        "AUC/AP/MRR/Hits@K); graph: one label per graph of a graph set (classification or "
        "regression); edge: one class per edge of a graph set's graphs",
    )
    mode: str = option(
        "minibatch",
        choices=MODES,
        help="sampled mini-batches, or full-graph training",
        also_called={
            **dict.fromkeys(("fullgraph", "full-graph", "full_graph", "fullbatch"), ("full",)),
            **dict.fromkeys(("mini-batch", "mini_batch", "sampled", "sampling"), ("minibatch",)),
        },
    )
    model: ModelConfig = component(ModelConfig, title="model")
    sampler: SamplerConfig = component(SamplerConfig, title="neighbour sampling (mini-batch mode)")
    batch_size: int | None = option(
        None,
        help="seed nodes (--task link: target edges; temporal graphs: events; knowledge graphs: "
        f"triples) per mini-batch, over all workers (each of P workers takes 1/P); unset: "
        f"{DEFAULT_BATCH_SIZE}, and for node classification at most an eighth of the training "
        f"nodes (at least {MIN_AUTO_BATCH_SIZE}), so that a small training set still takes 8 "
        "steps per epoch",
    )
    eval_batch_size: int = option(4096, help="seed nodes per evaluation batch")
    eval_fanouts: tuple[int, ...] | None = option(
        None,
        metavar="F,F,...",
        help="fanouts for evaluation (unset: --fanouts; all -1 evaluates "
        "full neighbourhoods, layer-wise)",
    )
    optim: OptimConfig = component(OptimConfig, title="optimisation")
    link: LinkConfig = component(LinkConfig, title="link prediction (--task link)")
    temporal: TemporalConfig = component(
        TemporalConfig, title="temporal graphs (--model tgn, jodie, tgat)"
    )
    embedding: EmbeddingConfig = component(EmbeddingConfig, title="learnable node embeddings")
    feature_norm: str = option(
        "none",
        choices=FEATURE_NORMS,
        help="feature preprocessing: row (rows sum to 1) or standard (z-score per column)",
    )
    seed: int = option(0, help="seed of initial weights, dropout, batch order and sampling")
    device: str = option("cpu", help="cpu, cuda, cuda:N, or auto")
    precision: str = option(
        "fp32",
        choices=PRECISIONS,
        help="bf16: the dense layers' forward pass and the loss run under bf16 autocast on the "
        "training device (parameters, gradients and optimiser stay fp32; the sparse aggregation "
        "and the loss are fp32); fp32: everything in fp32",
    )
    gpu: DeviceConfig = component(
        DeviceConfig, title="GPU pipeline (--device cuda, mini-batch training in one process)"
    )
    threads: int | None = option(
        None, help="torch threads per process (unset: the cores, shared among local workers)"
    )
    heap: str = option(
        "reuse",
        choices=HEAP_MODES,
        help="reuse: the C heap keeps freed memory for the next batch (no page faults on every "
        "large tensor; holds the heap's high-water mark); system: the C library's stock settings",
    )
    run: RunConfig = component(RunConfig, title="workers (distributed training)")
    batching: str = option(
        "random",
        choices=BATCHINGS,
        help="distributed mini-batch node classification: random seeds per batch, or cluster "
        "(each batch a group of METIS clusters of the worker's own part, so a batch's "
        "neighbourhoods overlap and stay local; GraphTheta, Cluster-GCN)",
    )
    clusters_per_batch: int = option(
        4, help="--batching cluster: clusters per batch (each part is split into batches x this)"
    )
    cluster_halo: int | None = option(
        None,
        metavar="H",
        help="--batching cluster: a batch's nodes are its seeds and their H-hop sampled "
        "neighbourhood, later hops keep only edges among them (0: the clusters' own subgraph, "
        "as Cluster-GCN; unset: every layer's hop)",
    )
    historical: str | None = option(
        None,
        metavar="L:AGE",
        help="distributed mini-batch node classification: at layer L and above, remote nodes "
        "take their hidden embedding from what their owners pushed, at most AGE steps old, "
        "instead of expanding their neighbourhoods (historical embeddings, DistGNN-MB; AGE 0 "
        "is exact training)",
    )
    historical_mode: str = option(
        "push",
        choices=HISTORICAL_MODES,
        help="--historical: push (owners send what they computed to the workers that watch it, "
        "DistGNN-MB) or pull (workers ask owners while sampling, only for rows they lack)",
    )
    historical_scope: str = option(
        "remote",
        choices=HISTORICAL_SCOPES,
        help="--historical: serve remote nodes only (DistGNN-MB), or all nodes outside a batch's "
        "own layer, own ones from a local table of what this worker's batches computed "
        "(GNNAutoScale; saves sampling and compute, not only bytes)",
    )
    historical_push_every: int | None = option(
        None,
        help="--historical-mode push: an owner re-sends a node's embedding to a worker at most "
        "every this many steps (unset: AGE, a row is re-sent as the copy it replaces reaches the "
        "bound)",
    )
    fetch_bits: int = option(
        32,
        choices=BITS,
        help="mini-batch mode: bits per value of remote feature rows (low-bit codec; 32: exact)",
    )
    error_feedback: bool = option(
        False,
        help="with --bits or --fetch-bits below 32: the sender keeps each row's quantisation "
        "error and adds it to that row's next send (error compensation, as Sylvie; full-graph: "
        "the gradient exchanges)",
    )
    cache: CacheConfig = component(
        CacheConfig, title="feature cache (distributed mini-batch training)"
    )
    feature_storage: str = option(
        "memory",
        choices=FEATURE_STORAGE,
        help="memory: each worker loads its feature rows; disk: rows are read on demand from "
        "the memory-mapped partition file (feature matrices larger than RAM)",
    )
    full: FullGraphConfig = component(
        FullGraphConfig, title="distributed full-graph training (--mode full)"
    )
    plan_rates: str | None = option(
        None,
        metavar="FILE",
        help="the machine rates of `shardgnn plan --calibrate --out FILE`, for the cost model: "
        "with --spmm auto, pick the strategy with the shortest predicted epoch, 1d-sparse's "
        "--dependencies cache and hybrid among them; with --cache-policy auto, a presample cache "
        "of --cache-size or none, whichever predicts the shorter epoch (without this file both "
        "pick by the bytes from the busiest worker); with --dependencies hybrid, price each "
        "remote node's rows",
    )
    checkpoint: CheckpointConfig = component(CheckpointConfig, title="checkpoints")
    results: str | None = option(
        None, metavar="FILE.json", help="write the results JSON here (rewritten after every epoch)"
    )
    tensorboard: str | None = option(
        None,
        metavar="DIR",
        help="write TensorBoard scalars per epoch into DIR (loss, metrics, stage seconds; needs "
        "the tensorboard package)",
    )
    progress: bool = option(
        True,
        negative_flag="--quiet",
        negative_help="no progress bars",
        help="progress bars (on a terminal; a pipe or log gets the epoch lines only)",
    )

    def __post_init__(self) -> None:
        check_types(self)
        resolve_and_check(self)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as JSON-ready data."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "TrainConfig":
        """The config :meth:`to_dict` wrote (validated again)."""
        return from_dict(cls, moved_settings(data), where=where)


def moved_settings(data: Any) -> Any:
    """``data`` with the settings older releases recorded elsewhere at their place now, so that
    their checkpoints and results still load: ``--plan-rates`` was ``full.plan_rates`` until the
    mini-batch cache's ``auto`` read it too."""
    full = data.get("full") if isinstance(data, dict) else None
    if not isinstance(full, dict) or "plan_rates" not in full:
        return data
    full = dict(full)
    rates = full.pop("plan_rates")
    return {**data, "full": full, "plan_rates": data.get("plan_rates", rates)}


def apply_process_settings(config: TrainConfig) -> None:
    """What ``config`` sets for the whole process: torch's thread count and the C heap mode."""
    if config.threads is not None:
        import torch  # here: the CLI's parser reads this module, and needs no torch

        torch.set_num_threads(config.threads)
    configure_heap(config.heap)


# Settings that may differ between an interrupted run and its resumption: where and how the run
# executes, not what it computes. (A cache or the storage tier change where rows come from, not
# their values; with --fetch-bits < 32 a cached row keeps the rounding it arrived with. The device
# changes the arithmetic's rounding only: a GPU run resumes on the CPU and the other way round.)
RESUMABLE_CHANGES = (
    "optim.epochs",
    "device",
    "results",
    "progress",
    "data_dir",
    "dataset",
    "threads",
    "heap",
    "sampler.num_threads",
    "checkpoint.",
    "run.",
    "cache.",
    "feature_storage",
)
