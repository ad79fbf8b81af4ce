"""What every kind of training resolves the same way: the device, the evaluation sampler, the
dataset's record in results and checkpoints."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.graph.identity import fingerprint
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import TrainConfig


def resolve_device(name: str) -> torch.device:
    """``auto``: CUDA when available, else CPU; a CUDA device that is absent is refused."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available here; use --device cpu")
    return device


def eval_sampler_config(config: TrainConfig) -> SamplerConfig:
    """The sampler settings of evaluation: the training sampler with ``--eval-fanouts``."""
    return dataclasses.replace(
        config.sampler, fanouts=config.eval_fanouts or config.sampler.fanouts
    )


def dataset_record(graph: Graph, spec: str | None) -> dict[str, Any]:
    """What results and checkpoints record of a dataset: spec, name, fingerprint, split sizes."""

    def size(idx) -> int:
        return int(len(idx)) if idx is not None else 0

    return {
        "spec": spec,
        "name": graph.name,
        "fingerprint": fingerprint(graph),
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "train": size(graph.train_idx),
        "val": size(graph.val_idx),
        "test": size(graph.test_idx),
    }
