"""Training configuration: one dataclass per component, validated at construction."""

from __future__ import annotations

import dataclasses

from shardgnn.distributed.codec import BITS
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.spmm import FullGraphConfig
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.store.cache import CacheConfig

MODES = ("minibatch", "full")
FEATURE_STORAGE = ("memory", "disk")
FEATURE_NORMS = ("none", "row", "standard")


@dataclasses.dataclass(kw_only=True)
class OptimConfig:
    """Optimiser and schedule."""

    epochs: int = 10
    """number of training epochs"""
    lr: float = 0.003
    """Adam learning rate"""
    weight_decay: float = 0.0
    """L2 weight decay"""
    patience: int = 0
    """stop after this many epochs without a better validation accuracy (0: never)"""

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError(f"epochs={self.epochs} must be >= 1")
        if self.lr <= 0 or self.weight_decay < 0 or self.patience < 0:
            raise ConfigError(f"lr={self.lr} must be > 0; weight_decay={self.weight_decay} and "
                              f"patience={self.patience} must be >= 0")


@dataclasses.dataclass(kw_only=True)
class TrainConfig:
    """A single-process training run."""

    dataset: str = "synthetic"
    """dataset spec, e.g. cora or synthetic:nodes=100000"""
    mode: str = "minibatch"
    """minibatch (sampled neighbourhoods) or full (full-graph training)"""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    full: FullGraphConfig = dataclasses.field(default_factory=FullGraphConfig)
    """distributed full-graph training (used with mode=full and several workers)"""
    cache: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    """the feature cache of distributed mini-batch training"""
    feature_storage: str = "memory"
    """distributed: memory (each worker loads its rows into RAM) or disk (rows read on demand from the
    memory-mapped part file, so feature matrices larger than RAM train)"""
    fetch_bits: int = 32
    """bits per value of remote feature rows in distributed mini-batch training (32: exact)"""
    batch_size: int = 1024
    """seed nodes per mini-batch (the global batch: with P workers each takes batch_size / P)"""
    eval_batch_size: int = 4096
    """seed nodes per evaluation mini-batch"""
    eval_fanouts: tuple[int, ...] | None = None
    """fanouts for mini-batch evaluation (default: the training fanouts)"""
    feature_norm: str = "none"
    """feature preprocessing: none, row (rows sum to 1) or standard (zero mean, unit variance)"""
    seed: int = 0
    """seed of model initialisation, dropout, batch order and sampling"""
    device: str = "cpu"
    """torch device: cpu, cuda, cuda:1, or auto"""
    threads: int | None = None
    """torch intra-op threads (default: torch's choice)"""
    data_dir: str | None = None
    """dataset folder (default: $SHARDGNN_DATA or ~/.cache/shardgnn)"""
    results: str | None = None
    """write the results JSON here"""
    progress: bool = True
    """show progress bars"""
    checkpoint_dir: str | None = None
    """write checkpoints here (every checkpoint_every epochs and at the end)"""
    checkpoint_every: int = 1
    """epochs between checkpoints"""
    keep_checkpoints: int = 2
    """complete checkpoints kept (older ones are deleted)"""
    resume: bool = False
    """continue from the newest complete checkpoint in checkpoint_dir (start fresh when there is none)"""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r} must be one of {MODES}")
        if self.feature_norm not in FEATURE_NORMS:
            raise ConfigError(f"feature_norm={self.feature_norm!r} must be one of {FEATURE_NORMS}")
        if self.feature_storage not in FEATURE_STORAGE:
            raise ConfigError(f"feature_storage={self.feature_storage!r} must be one of {FEATURE_STORAGE}")
        if self.mode == "full" and (self.cache.enabled or self.feature_storage != "memory"):
            raise ConfigError("--cache-policy and --feature-storage disk apply to mini-batch training; full-graph "
                              "training exchanges halo rows once per layer instead (drop them or use --mode minibatch)")
        if self.feature_storage == "disk" and self.layerwise_eval:
            raise ConfigError("--feature-storage disk keeps features out of RAM, but full-neighbourhood evaluation "
                              "(--eval-fanouts all -1) runs layer-wise over every local row at once; give sampled "
                              "--eval-fanouts (e.g. 15,10,5) or use --feature-storage memory")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ConfigError(f"batch sizes must be >= 1, got {self.batch_size} and {self.eval_batch_size}")
        if self.fetch_bits not in BITS:
            raise ConfigError(f"fetch_bits={self.fetch_bits} must be one of {BITS}")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ConfigError(f"checkpoint_every={self.checkpoint_every} and keep_checkpoints={self.keep_checkpoints} "
                              "must be >= 1")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir (the folder the interrupted run wrote)")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads={self.threads} must be >= 1")
        if self.mode == "minibatch" and self.model.num_layers != len(self.sampler.fanouts):
            raise ConfigError(f"the model has {self.model.num_layers} layers but {len(self.sampler.fanouts)} "
                              f"fanouts were given ({self.sampler.fanouts}); give one fanout per layer")
        if self.eval_fanouts is not None:
            self.eval_fanouts = SamplerConfig(fanouts=self.eval_fanouts).fanouts
            if len(self.eval_fanouts) != self.model.num_layers:
                raise ConfigError(f"eval fanouts {self.eval_fanouts} must name {self.model.num_layers} layers")

    @property
    def layerwise_eval(self) -> bool:
        """Mini-batch evaluation with full neighbourhoods (all eval fanouts -1) runs layer-wise
        (every layer once per node, shardgnn.fullgraph.inference) for the models it supports."""
        fanouts = self.eval_fanouts or self.sampler.fanouts
        return all(f == -1 for f in fanouts) and self.model.model in ("sage", "gcn")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
