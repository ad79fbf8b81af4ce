"""The component configs of training beside the model, sampler and stores: optimisation, link
prediction, temporal graphs, checkpoints, and the workers of a job (``shardgnn train``'s
:class:`RunConfig`, ``shardgnn infer``'s :class:`InferConfig`).

:class:`~shardgnn.train.config.TrainConfig` holds one of each; like it, every field is a command
flag and every default is valid.
"""

from __future__ import annotations

import dataclasses
import math

from shardgnn.distributed.config import (
    BACKENDS,
    DEFAULT_STOP_GRACE_S,
    DEFAULT_TIMEOUT_S,
    HOST_SHARING,
    device_problem,
)
from shardgnn.errors import ConfigError
from shardgnn.nn.config import LINK_LOSSES, PREDICTORS
from shardgnn.options import changed_settings, check_choices, check_types, invalid, option
from shardgnn.sampling.config import NEGATIVE_KINDS
from shardgnn.train.tables import TABLE_FORMATS

OVERLAP = ("auto", "on", "off")
SUM_ORDERS = ("rank", "ring")


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
        check_types(self)
        if self.epochs < 1:
            raise invalid(self, "epochs", "must be >= 1")
        if not self.lr > 0:
            raise invalid(self, "lr", "must be > 0")
        for name in ("weight_decay", "patience"):
            if getattr(self, name) < 0:
                raise invalid(self, name, "must be >= 0")


LINK_SPLIT_SETTINGS = ("val", "test", "split_seed", "eval_negatives")
"""The settings of :class:`LinkConfig` that make the edge split (stored with a partition)."""
SUREL_WALKS, SUREL_WALK_LENGTH = 16, 4
"""--model surel's walks per node and their length when --walks / --walk-length are unset"""


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
        help="edge scorer: dot product, an MLP on h_u * h_v; on relational graphs distmult "
        "(<h, w_r, t>), transe (-||h + w_r - t||), rotate (-||h o e^(i theta_r) - t||, complex) "
        "or complex (Re<h, w_r, conj t>); auto: distmult on relational graphs, else dot",
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
        (10, 50, 100),
        metavar="K,K,...",
        help="Hits@K values reported, each at most --eval-negatives (unset: those of 10,50,100 "
        "that are)",
    )
    out_dim: int = option(
        64, help="width of the node embeddings (the encoder's last layer) in --task link"
    )
    walks: int | None = option(
        None, help="--model surel: random walks drawn from each node (unset: 16)"
    )
    walk_length: int | None = option(None, help="--model surel: steps of each walk (unset: 4)")

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        for name in ("val", "test"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise invalid(self, name, "a fraction in (0, 1)")
        if self.val + self.test >= 1.0:
            raise invalid(self, "test", f"with --link-val {self.val} leaves no training edges")
        for name in ("eval_negatives", "negatives", "out_dim"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        for name in ("walks", "walk_length"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if not self.margin > 0:
            raise invalid(self, "margin", "must be > 0")
        if self.loss != "margin" and changed_settings(self, ("margin",)):
            raise invalid(self, "margin", f"applies to --link-loss margin, not {self.loss}")
        if not self.hits_at or min(self.hits_at) < 1:
            raise invalid(self, "hits_at", "name positive ranks, e.g. 10,50,100")
        if len(set(self.hits_at)) != len(self.hits_at):
            raise invalid(self, "hits_at", "names a rank twice; give each once")
        too_high = [k for k in self.hits_at if k > self.eval_negatives]
        if too_high and changed_settings(self, ("hits_at",)):
            raise invalid(
                self,
                "hits_at",
                f"Hits@{too_high[0]} ranks each positive among {self.eval_negatives + 1} "
                f"candidates (--eval-negatives {self.eval_negatives} and itself), so it is always "
                f"1; name ranks <= {self.eval_negatives} or raise --eval-negatives",
            )

    def reported_hits_at(self) -> tuple[int, ...]:
        """The Hits@K ranks reported: the default ranks that can miss among ``eval_negatives + 1``
        candidates (a rank given by the user above that is refused)."""
        return tuple(k for k in self.hits_at if k <= self.eval_negatives)

    def walk_shape(self) -> tuple[int, int]:
        """``--model surel``'s walks per node and steps per walk (their defaults where unset)."""
        return self.walks or SUREL_WALKS, self.walk_length or SUREL_WALK_LENGTH


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
    link_weight: float = option(
        1.0,
        flag="--temporal-link-weight",
        help="dynamic node classification (--task node on events): weight of the self-supervised "
        "link loss (each event against a random destination) beside the label loss; it trains "
        "memory on every event, labelled or not (0: the labels alone)",
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
        check_types(self)
        check_choices(self)
        for name in ("memory_dim", "time_dim", "chunks", "snapshot_window"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if not self.link_weight >= 0:
            raise invalid(self, "link_weight", "must be >= 0")
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
        check_types(self)
        for name in ("every", "keep"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.resume and not self.dir:
            raise ConfigError(
                "--resume needs --checkpoint-dir (the folder the interrupted run wrote)"
            )


MAX_DEADLINE_S = 1e7
"""The longest --timeout and --stop-grace (116 days): longer ones overflow c10d's deadlines."""


@dataclasses.dataclass(kw_only=True)
class LaunchConfig:
    """What every multi-worker command shares: deadlines and logs."""

    timeout: float = option(
        DEFAULT_TIMEOUT_S,
        help="seconds any collective may wait before the job fails, so a dead or stalled worker "
        "ends the job instead of hanging it; a worker stopped (SIGSTOP) this long is killed, even "
        "a lone one",
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
        check_types(self)
        for name in ("timeout", "stop_grace"):  # bounded: c10d's deadlines are C integers
            if not 0 < getattr(self, name) <= MAX_DEADLINE_S:
                raise invalid(
                    self, name, f"must be > 0 and at most {MAX_DEADLINE_S:.0e} seconds (116 days)"
                )


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
        help="a partition directory written by `shardgnn partition` (one worker per part); "
        "{parts} in it stands for the worker count (parts/products-{parts}: under torchrun with "
        "elastic --nnodes MIN:MAX a restart on fewer or more machines reads its own count's "
        "partition and resumes the checkpoint re-sharded)",
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

    sum_order: str = option(
        "rank",
        choices=SUM_ORDERS,
        help="how 3 or more workers add up gradients: rank (every element's values in rank "
        "order: the same weights bit for bit in every run and after any resume) or ring (the "
        "backend's ring all-reduce: faster, about 20%% of a 3-worker CPU epoch here, but its "
        "last bits depend on the gradients' bucket layout, which a resume changes); 1 or 2 "
        "workers add in one order either way",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choices(self)
        if self.workers is not None and self.workers < 1:
            raise invalid(self, "workers", "must be >= 1")
        if self.sum_order == "ring" and (
            not self.distributed or (self.workers is not None and self.workers <= 2)
        ):
            raise invalid(
                self, "sum_order", "ring applies to 3 or more workers (fewer add in one order)"
            )

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
    partitions: str | None = option(
        None,
        metavar="DIR",
        help="partition directory of the graph (one worker per part); unset: the checkpoint's "
        "dataset partitioned on the fly, as `shardgnn train --workers` partitions it",
    )
    workers: int | None = option(
        None,
        metavar="N",
        help="without --partitions: the parts (and workers) the dataset is partitioned into "
        "(default: as many as trained the checkpoint)",
    )
    out: str = option(
        metavar="DIR",
        help="output folder for embeddings, logits and predictions (.npy), and tables of them "
        "keyed by the graph's own node ids",
    )
    overwrite: bool = option(
        False,
        help="replace an earlier inference in --out (OUT/inference.json and the outputs it "
        "lists); without it such a folder is refused",
    )
    chunk_rows: int = option(
        65536,
        help="rows computed at a time; bounds working memory: the chunk's rows, the rows its "
        "in-edges read and their outputs (lower it for wide features)",
    )
    feature_storage: str = option(
        "memory",
        choices=("memory", "disk"),
        help="memory: each worker loads its part's features and fetches its whole halo once per "
        "layer; disk: features stay in the memory-mapped part file and each chunk fetches only "
        "the halo rows it reads (memory bounded by a chunk, for graphs larger than memory; a "
        "row several chunks read moves once per chunk)",
    )
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
    at: float | None = option(
        None,
        metavar="TIME",
        help="temporal models: replay the events up to TIME (inclusive; the stream's own time "
        "unit) and write every node's embedding at TIME (unset: the last event's time); the "
        "per-event outputs cover the replayed events",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chunk_rows < 1:
            raise invalid(self, "chunk_rows", "must be >= 1")
        if (problem := device_problem(self.device)) is not None:
            raise invalid(self, "device", problem)
        if self.workers is not None and self.workers < 1:
            raise invalid(self, "workers", "must be >= 1")
        if self.workers is not None and self.partitions is not None:
            raise invalid(
                self, "workers", "does not apply: the partition's parts are the workers; drop it"
            )
        if self.at is not None and not math.isfinite(self.at):
            raise invalid(self, "at", "must be a finite time")


EXPORT_FORMATS = ("auto", "onnx", "pt2", "torchscript")


@dataclasses.dataclass(kw_only=True)
class ExportConfig:
    """``shardgnn export``: a trained model as one file for serving (ONNX, torch.export or
    TorchScript), checked against the model it came from."""

    checkpoint: str = option(
        metavar="DIR",
        help="a --checkpoint-dir of `shardgnn train` (its newest checkpoint) or one epoch-N folder",
    )
    out: str = option(
        metavar="FILE",
        help="the file to write: model.onnx (ONNX), model.pt2 (torch.export) or model.pt "
        "(TorchScript); its inputs are x [N, F] float32 and edge_index [2, E] int64 (src; dst), "
        "its output [N, C]",
    )
    format: str = option(
        "auto",
        choices=EXPORT_FORMATS,
        help="auto: from the file's suffix (.onnx, .pt2, .pt or .ts)",
    )
    opset: int = option(
        18, help="ONNX opset (18 or newer: the attention layers' scatter maximum needs it)"
    )
    check_nodes: int = option(
        1000,
        help="nodes of the random graph the written file is checked on (against the model "
        "computed as `shardgnn infer` computes it); 0: no check",
    )
    top_k: int | None = option(
        None,
        metavar="K",
        help="a knowledge-graph model's file returns each query's K best-scored entities and "
        "their scores (entities [Q, K] int64, scores [Q, K]) instead of every entity's score",
    )
    filter_known: bool = option(
        False,
        help="a knowledge-graph model's file never answers with a known fact: the graph's "
        "triples (every split) score -inf and are not among the --top-k (asks for new facts)",
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.opset < 18:
            raise invalid(self, "opset", "must be >= 18")
        if self.check_nodes < 0:
            raise invalid(self, "check_nodes", "must be >= 0")
        if self.top_k is not None and self.top_k < 1:
            raise invalid(self, "top_k", "must be >= 1")
