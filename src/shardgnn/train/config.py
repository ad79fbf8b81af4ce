"""Training configuration: one dataclass per component, each setting defined once.

Every field is a ``shardgnn train`` flag (``shardgnn.cli.flags`` derives them); the defaults are
valid, so ``TrainConfig()`` trains the built-in synthetic dataset. The resolved config travels
as JSON (:meth:`TrainConfig.to_dict` / :meth:`TrainConfig.from_dict`): the launcher hands it to
every worker, and every results file and checkpoint records it.

Imports torch only to apply ``--threads`` (:func:`apply_process_settings`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from shardgnn.distributed.config import BACKENDS, BITS, DEFAULT_STOP_GRACE_S, DEFAULT_TIMEOUT_S
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.fullgraph.config import FullGraphConfig
from shardgnn.graph.features import FEATURE_NORMS
from shardgnn.heap import HEAP_MODES, configure_heap
from shardgnn.loader.config import DeviceConfig
from shardgnn.nn.config import (
    LINK_LOSSES,
    PREDICTORS,
    ModelConfig,
)
from shardgnn.options import (
    changed_settings,
    check_choices,
    component,
    from_dict,
    invalid,
    option,
    to_dict,
)
from shardgnn.precision import PRECISIONS
from shardgnn.sampling.config import NEGATIVE_KINDS, SamplerConfig
from shardgnn.store.cache.config import CacheConfig
from shardgnn.store.config import HISTORICAL_MODES, HISTORICAL_SCOPES, EmbeddingConfig
from shardgnn.train.tables import TABLE_FORMATS

MODES = ("minibatch", "full")
TASKS = ("node", "link")
BATCHINGS = ("random", "cluster")
FEATURE_STORAGE = ("memory", "disk")
OVERLAP = ("auto", "on", "off")
HOST_SHARING = ("auto", "off")


@dataclasses.dataclass(kw_only=True)
class OptimConfig:
    """Optimiser and schedule."""

    epochs: int = option(10, help="training epochs")
    lr: float = option(0.003, help="Adam learning rate")
    weight_decay: float = option(0.0, help="L2 weight decay")
    patience: int = option(
        0, help="stop after this many epochs without a better validation accuracy (0: never)"
    )

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise invalid(self, "epochs", "must be >= 1")
        if not self.lr > 0:
            raise invalid(self, "lr", "must be > 0")
        for name in ("weight_decay", "patience"):
            if getattr(self, name) < 0:
                raise invalid(self, name, "must be >= 0")


LINK_SPLIT_SETTINGS = ("val", "test", "split_seed", "eval_negatives")
"""The settings of :class:`LinkConfig` that make the edge split (stored with a partition)."""


@dataclasses.dataclass(kw_only=True)
class LinkConfig:
    """Link prediction (``--task link``): the edge split, negatives, predictor, loss, metrics."""

    val: float = option(
        0.05,
        flag="--link-val",
        help="fraction of the edges held out for validation (removed from the message-passing "
        "graph, both directions when the graph is symmetric)",
    )
    test: float = option(0.10, flag="--link-test", help="fraction of the edges held out for tests")
    split_seed: int = option(
        0, flag="--link-split-seed", help="seed of the edge split and its evaluation negatives"
    )
    eval_negatives: int = option(
        100,
        help="fixed negatives per held-out edge, drawn once from non-edges: AUC and AP use the "
        "first (one per positive, as GAE), MRR and Hits@K rank against all of them (as OGB)",
    )
    negative_sampler: str = option(
        "uniform",
        choices=NEGATIVE_KINDS,
        help="training negatives: uniform over all nodes, degree (in-degree^0.75), or in-batch "
        "(the other positives' destinations)",
    )
    negatives: int = option(1, help="training negatives per positive edge")
    predictor: str = option(
        "auto",
        choices=PREDICTORS,
        help="edge scorer: dot product, an MLP on h_u * h_v, or distmult (<h_u, w_r, h_v>, one "
        "diagonal per relation; relational graphs); auto: distmult on relational graphs, else dot",
    )
    loss: str = option(
        "bce",
        choices=LINK_LOSSES,
        flag="--link-loss",
        help="bce (binary cross-entropy), margin (max(0, margin - pos + neg)) or softmax "
        "(cross-entropy of each positive against its negatives; relational graphs: against every "
        "entity)",
    )
    margin: float = option(1.0, help="margin of --link-loss margin")
    hits_at: tuple[int, ...] = option(
        (10, 50, 100), metavar="K,K,...", help="Hits@K values reported"
    )
    out_dim: int = option(
        64, help="width of the node embeddings (the encoder's last layer) in --task link"
    )

    def __post_init__(self) -> None:
        check_choices(self)
        self.hits_at = tuple(int(k) for k in self.hits_at)
        for name in ("val", "test"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise invalid(self, name, "a fraction in (0, 1)")
        if self.val + self.test >= 1.0:
            raise invalid(self, "test", f"with --link-val {self.val} leaves no training edges")
        for name in ("eval_negatives", "negatives", "out_dim"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if not self.margin > 0:
            raise invalid(self, "margin", "must be > 0")
        if not self.hits_at or min(self.hits_at) < 1:
            raise invalid(self, "hits_at", "name positive ranks, e.g. 10,50,100")


TEMPORAL_SAMPLING = ("auto", "recent", "uniform")


@dataclasses.dataclass(kw_only=True)
class TemporalConfig:
    """Continuous-time models of timestamped events (``--model tgn``, ``jodie``, ``tgat``)."""

    memory_dim: int = option(100, help="tgn, jodie: width of each node's memory")
    time_dim: int = option(100, help="width of the time encoding cos(w * dt + b)")
    neighbors: tuple[int, ...] = option(
        (10,),
        flag="--temporal-neighbors",
        metavar="K,K,...",
        help="earlier events sampled per node: tgn the K most recent (one count); tgat one count "
        "per layer",
    )
    sampling: str = option(
        "auto",
        choices=TEMPORAL_SAMPLING,
        flag="--temporal-sampling",
        help="which earlier events: recent (the latest K) or uniform (K drawn from all earlier "
        "ones); auto: recent for tgn, uniform for tgat",
    )
    chunks: int = option(
        1,
        help="TGL's random chunk scheduling: split each batch into this many chunks and start "
        "every epoch's batches at a random chunk boundary (1: every epoch the same batches)",
    )
    snapshots: int = option(
        20,
        help="tgcn: periods of equal event counts the events are cut into (one snapshot each)",
    )
    snapshot_window: int = option(
        1,
        help="tgcn: periods each snapshot's graph covers (a sliding window: consecutive "
        "snapshots share the overlap, stored once as a base graph plus deltas)",
    )

    def __post_init__(self) -> None:
        check_choices(self)
        self.neighbors = tuple(int(k) for k in self.neighbors)
        for name in ("memory_dim", "time_dim", "chunks", "snapshot_window"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.snapshots < 3:
            raise invalid(self, "snapshots", "must be >= 3 (training, validation and test periods)")
        if not self.neighbors or min(self.neighbors) < 1:
            raise invalid(self, "neighbors", "one count >= 1 per hop, e.g. 10 or 10,10")


@dataclasses.dataclass(kw_only=True)
class CheckpointConfig:
    """Checkpoints and resume."""

    dir: str | None = option(
        None,
        flag="--checkpoint-dir",
        metavar="DIR",
        help="write checkpoints (model, optimiser, random states, progress) into this folder",
    )
    every: int = option(
        1,
        flag="--checkpoint-every",
        help="epochs between checkpoints (the last epoch always writes one)",
    )
    keep: int = option(2, flag="--keep-checkpoints", help="complete checkpoints to keep")
    resume: bool = option(
        False,
        flag="--resume",
        help="continue from the newest complete checkpoint in --checkpoint-dir (a fresh start when "
        "there is none, so the same command works under torchrun --max-restarts)",
    )

    def __post_init__(self) -> None:
        for name in ("every", "keep"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.resume and not self.dir:
            raise ConfigError(
                "--resume needs --checkpoint-dir (the folder the interrupted run wrote)"
            )


@dataclasses.dataclass(kw_only=True)
class LaunchConfig:
    """What every multi-worker command shares: deadlines and logs."""

    timeout: float = option(
        DEFAULT_TIMEOUT_S,
        help="seconds any collective may wait before the job fails, so a dead or stalled worker "
        "ends the job instead of hanging it",
    )
    log_dir: str | None = option(
        None,
        metavar="DIR",
        help="keep every worker's log (tracebacks included) in this folder (unset: a "
        "temporary folder, kept only when a worker fails)",
    )
    stop_grace: float = option(
        DEFAULT_STOP_GRACE_S,
        help="after SIGTERM or SIGUSR1 (preemption), seconds the workers have to finish their "
        "step and save a checkpoint before they are killed",
    )

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise invalid(self, "timeout", "must be > 0 seconds")
        if not self.stop_grace > 0:
            raise invalid(self, "stop_grace", "must be > 0 seconds")


@dataclasses.dataclass(kw_only=True)
class RunConfig(LaunchConfig):
    """How a training job runs: how many workers, on which partition, with which deadlines."""

    workers: int | None = option(
        None,
        metavar="N",
        help="start N local worker processes, one per part; without --partitions the dataset "
        "is partitioned on the fly (METIS; one part for --workers 1)",
    )
    partitions: str | None = option(
        None,
        metavar="DIR",
        help="a partition directory written by `shardgnn partition` (one worker per part)",
    )
    overlap: str = option(
        "auto",
        choices=OVERLAP,
        help="sample and fetch the next batch in a background thread while training on the current "
        "one; auto: on when every worker has at least two cores",
    )

    host_sharing: str = option(
        "auto",
        choices=HOST_SHARING,
        help="auto: workers on one host read each other's graph and feature rows from the mapped "
        "partition files (found at start-up; only rows owned on other hosts travel through "
        "collectives); off: every remote row travels through collectives",
    )
    backend: str = option(
        "auto",
        choices=BACKENDS,
        help="process group of the workers' gradients and metrics: nccl (one GPU per worker), "
        "gloo, or auto: nccl when --device is cuda and every worker on a machine has a GPU of "
        "its own, else gloo (sampling and feature exchanges always use gloo)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices(self)
        if self.workers is not None and self.workers < 1:
            raise invalid(self, "workers", "must be >= 1")

    @property
    def distributed(self) -> bool:
        """Whether the run uses worker processes (and a partition directory)."""
        return self.workers is not None or self.partitions is not None


@dataclasses.dataclass(kw_only=True)
class InferConfig(LaunchConfig):
    """``shardgnn infer``: layer-wise inference of a trained model over a partitioned graph."""

    checkpoint: str = option(
        metavar="DIR",
        help="a --checkpoint-dir of `shardgnn train` (its newest checkpoint) or one epoch-N folder",
    )
    partitions: str = option(
        metavar="DIR", help="partition directory of the graph (one worker per part)"
    )
    out: str = option(
        metavar="DIR",
        help="output folder for embeddings, logits and predictions (.npy), and tables of them "
        "keyed by the graph's own node ids",
    )
    chunk_rows: int = option(65536, help="rows computed at a time (bounds working memory)")
    device: str = option(
        "cpu",
        help="where the layers run: cpu, cuda (one GPU per worker, shared round-robin when the "
        "workers outnumber the GPUs), cuda:N, or auto (cuda when available)",
    )
    table_format: str = option(
        "csv",
        choices=TABLE_FORMATS,
        help="the tables beside the .npy outputs (predictions: node_id, class, class_name; "
        "embeddings: node_id, emb_0, ...): csv, parquet (needs pyarrow) or none",
    )
    pairs: str | None = option(
        None,
        metavar="FILE",
        help="link-prediction models: node pairs to score, one per row (original ids; .npy of "
        "shape [P, 2], or text with two ids per line), written to OUT/scores.npy",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chunk_rows < 1:
            raise invalid(self, "chunk_rows", "must be >= 1")


DEFAULT_BATCH_SIZE = 1024
"""Items per step when ``--batch-size`` is not given (node classification: at most)."""
MIN_AUTO_BATCH_SIZE = 32
"""The smallest batch node classification picks by itself on a small training set."""


@dataclasses.dataclass(kw_only=True)
class TrainConfig:
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
        "AUC/AP/MRR/Hits@K)",
    )
    mode: str = option(
        "minibatch", choices=MODES, help="sampled mini-batches, or full-graph training"
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
    checkpoint: CheckpointConfig = component(CheckpointConfig, title="checkpoints")
    results: str | None = option(
        None, metavar="FILE.json", help="write the results JSON here (rewritten after every epoch)"
    )
    progress: bool = option(
        True,
        negative_flag="--quiet",
        negative_help="no progress bars",
        help="progress bars (on a terminal; a pipe or log gets the epoch lines only)",
    )

    def node_batch_size(self, num_train: int) -> int:
        """Seed nodes per step of node classification with ``num_train`` training nodes:
        ``--batch-size``, else :data:`DEFAULT_BATCH_SIZE` or, on a small training set, an eighth
        of it (at least :data:`MIN_AUTO_BATCH_SIZE`): the per-class splits (20 nodes per class)
        took one step per epoch at 1024 and stopped far from trained (0.24 test accuracy on
        amazon-computers after 10 epochs; 0.76 at 8 steps per epoch)."""
        if self.batch_size is not None:
            return self.batch_size
        return min(DEFAULT_BATCH_SIZE, max(MIN_AUTO_BATCH_SIZE, -(-num_train // 8)))

    @property
    def item_batch_size(self) -> int:
        """Target edges, events or triples per step: ``--batch-size``, else
        :data:`DEFAULT_BATCH_SIZE`."""
        return DEFAULT_BATCH_SIZE if self.batch_size is None else self.batch_size

    def __post_init__(self) -> None:
        check_choices(self)
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise ConfigError(
                f"dataset spec {self.dataset!r} is empty; name a dataset such as cora or synthetic"
            )
        for name in ("batch_size", "eval_batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise invalid(self, "threads", "must be >= 1")
        if self.task == "link" and self._names_relational():
            # Relational link prediction encodes the whole graph at every step (the knowledge
            # graphs it runs on are small): full-graph layers, whatever --mode says.
            self.mode = "full"
        self._resolve_layers()
        if self.eval_fanouts is not None:
            self.eval_fanouts = SamplerConfig(fanouts=self.eval_fanouts).fanouts
            if len(self.eval_fanouts) != self.model.num_layers:
                raise invalid(
                    self,
                    "eval_fanouts",
                    f"name {self.model.num_layers} layers, one per model layer",
                )
        self._check_combinations()

    def _resolve_layers(self) -> None:
        """Unset ``--layers``: one per fanout (mini-batch) or 2 (full graph). Full-graph runs
        record fanouts of -1 (every neighbour), which is what they compute."""
        model, sampler = self.model, self.sampler
        if self.mode == "minibatch":
            if model.num_layers is None:
                self.model = dataclasses.replace(model, num_layers=len(sampler.fanouts))
            elif model.num_layers != len(sampler.fanouts):
                raise ConfigError(
                    f"--layers {model.num_layers} but --fanouts "
                    f"{','.join(map(str, sampler.fanouts))} names {len(sampler.fanouts)}; give "
                    "one fanout per layer"
                )
        else:
            layers = 2 if model.num_layers is None else model.num_layers
            self.model = dataclasses.replace(model, num_layers=layers)
            self.sampler = dataclasses.replace(sampler, fanouts=(-1,) * layers)

    def _names_relational(self) -> bool:
        """Whether the dataset spec names a relational graph (no file is read)."""
        from shardgnn.graph.datasets import is_relational

        try:
            return is_relational(self.dataset)
        except DatasetError:
            return False  # an unknown dataset: loading it says so, with the list of known ones

    @property
    def temporal_sampling(self) -> str:
        """The temporal sampler's mode (``--temporal-sampling auto`` resolved by the model)."""
        if self.temporal.sampling != "auto":
            return self.temporal.sampling
        return "uniform" if self.model.model == "tgat" else "recent"

    def _check_combinations(self) -> None:
        # the checks against the kind of graph the dataset names run with the recipe's choice
        # (shardgnn.train.recipes.select, shardgnn.train.recipe_checks)
        if self.embedding.enabled and self.run.distributed:
            dim = f"--embedding-dim {self.embedding.dim}"
            if self.mode == "full":
                raise ConfigError(
                    f"{dim}: sharded learnable rows train in --mode minibatch so far; use it, or "
                    "one process for full-graph training"
                )
            if self.run.overlap == "on":
                raise ConfigError(
                    f"{dim} with --overlap on: a batch must read the rows after the previous "
                    "step updated them, so learnable rows run without the prefetch thread; use "
                    "--overlap auto or off"
                )
        if not self.run.distributed:
            flags = [
                *changed_settings(self.full),
                *changed_settings(self.cache),
                *changed_settings(self, ("fetch_bits", "feature_storage")),
                *changed_settings(self.embedding, ("staleness",)),
                *changed_settings(self, ("error_feedback",)),
            ]
            if flags:
                raise ConfigError(
                    f"{', '.join(flags)} shape(s) communication between workers, and this run has "
                    "one process; add --workers N (or --partitions DIR) to train distributed "
                    "(--workers 1 runs one worker over a one-part partition, which a cache or "
                    "disk storage can front)"
                )
        if self.batching == "cluster" and (
            not self.run.distributed or self.mode != "minibatch" or self.task != "node"
        ):
            raise ConfigError(
                "--batching cluster groups the training nodes of each worker's part: it applies "
                "to distributed mini-batch node classification (add --workers N, --mode "
                "minibatch, --task node), or drop it"
            )
        if self.clusters_per_batch < 1:
            raise invalid(self, "clusters_per_batch", "must be >= 1")
        if self.cluster_halo is not None:
            if self.batching != "cluster":
                raise ConfigError(
                    f"--cluster-halo {self.cluster_halo} bounds the halo of cluster batches; add "
                    "--batching cluster or drop it"
                )
            if not 0 <= self.cluster_halo <= self.model.num_layers:
                raise invalid(
                    self, "cluster_halo", f"must lie in [0, {self.model.num_layers}] (the layers)"
                )
        self._check_historical()
        bits = self.full.bits if self.mode == "full" else self.fetch_bits
        if self.error_feedback and bits == 32:
            flag = "--bits" if self.mode == "full" else "--fetch-bits"
            raise ConfigError(
                f"--error-feedback compensates low-bit sends, and {flag} is 32 (exact); give "
                f"{flag} 1, 2, 4, 8 or 16, or drop --error-feedback"
            )
        staleness = self.embedding.staleness
        if staleness is not None and not self.embedding.enabled:
            raise ConfigError(
                f"--embedding-staleness {staleness} bounds the age of cached learnable rows, and "
                "this run has none; add --embedding-dim D or drop --embedding-staleness"
            )
        if staleness is not None and self.cache.policy in ("none", "belady"):
            raise ConfigError(
                f"--embedding-staleness {staleness} caches peers' learnable rows in the cache of "
                f"--cache-policy, which is {self.cache.policy}: give degree, presample, fifo or "
                "lru (belady fetches rows batches before they are read)"
            )
        if self.mode == "full" and (self.cache.enabled or self.feature_storage != "memory"):
            raise ConfigError(
                "--cache-policy and --feature-storage disk apply to mini-batch training; "
                "full-graph training exchanges halo rows once per layer instead (drop them or use "
                "--mode minibatch)"
            )
        if self.feature_storage == "disk" and self.layerwise_eval:
            raise ConfigError(
                "--feature-storage disk keeps features out of RAM, but full-neighbourhood "
                "evaluation (--eval-fanouts all -1) runs layer-wise over every local row at once; "
                "give sampled --eval-fanouts (e.g. 15,10,5) or use --feature-storage memory"
            )

    def _check_historical(self) -> None:
        if self.historical_push_every is not None and self.historical_push_every < 1:
            raise invalid(self, "historical_push_every", "must be >= 1")
        if self.historical_push_every is not None and self.historical_mode == "pull":
            raise ConfigError(
                f"--historical-push-every {self.historical_push_every} paces pushes, and "
                "--historical-mode is pull; drop one of them"
            )
        if self.historical is None:
            if self.historical_scope != "remote":
                raise ConfigError(
                    f"--historical-scope {self.historical_scope} says which nodes historical "
                    "embeddings serve, and --historical is not set; add --historical L:AGE"
                )
            return
        flag = f"--historical {self.historical}"
        layer, sep, age = str(self.historical).partition(":")
        if not (sep and layer.strip().isdigit() and age.strip().isdigit()):
            raise ConfigError(
                f"{flag}: give LAYER:AGE, two non-negative integers, e.g. --historical 1:4"
            )
        layers = self.model.num_layers
        if not 1 <= int(layer) <= layers - 1:
            raise ConfigError(
                f"{flag}: the layer must lie in [1, {layers - 1}] for a {layers}-layer model "
                "(layer 0 reads input features, which no owner computes)"
            )
        if not self.run.distributed or self.mode != "minibatch" or self.task != "node":
            raise ConfigError(
                f"{flag} replaces remote nodes' embeddings with their owners' pushes: it applies "
                "to distributed mini-batch node classification (add --workers N, --mode "
                "minibatch, --task node), or drop it"
            )
        if self.run.overlap == "on" or self.cache.policy == "belady":
            what = "--overlap on" if self.run.overlap == "on" else "--cache-policy belady"
            raise ConfigError(
                f"{flag} with {what}: a batch must be sampled after the previous step's push, "
                "and both sample batches ahead; use --overlap auto or off and another cache "
                "policy"
            )

    @property
    def historical_layers(self) -> range | None:
        """The block layers served from historical embeddings (``--historical L:AGE``)."""
        if self.historical is None:
            return None
        return range(int(self.historical.split(":")[0]), self.model.num_layers)

    @property
    def historical_age(self) -> int | None:
        return None if self.historical is None else int(self.historical.split(":")[1])

    @property
    def historical_push_interval(self) -> int:
        """Steps between two sends of one node's embedding to one worker."""
        if self.historical_push_every is not None:
            return self.historical_push_every
        return max(1, self.historical_age or 0)

    @property
    def layerwise_eval(self) -> bool:
        """Mini-batch evaluation with full neighbourhoods (all eval fanouts -1) runs layer-wise
        (every layer once per node, shardgnn.fullgraph.inference) for the models it supports."""
        fanouts = self.eval_fanouts or self.sampler.fanouts
        return (
            self.mode == "minibatch"
            and self.task == "node"
            and all(f == -1 for f in fanouts)
            and self.model.model in ("sage", "gcn")
        )

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as JSON-ready data."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "TrainConfig":
        """The config :meth:`to_dict` wrote (validated again)."""
        return from_dict(cls, data, where=where)


def apply_process_settings(config: TrainConfig) -> None:
    """What ``config`` sets for the whole process: torch's thread count and the C heap mode."""
    if config.threads is not None:
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
