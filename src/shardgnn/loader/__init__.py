"""The mini-batch pipeline: seed batches -> sampled blocks -> features joined -> model."""

from shardgnn.loader.batches import SeedBatcher, split_into_batches
from shardgnn.loader.pipeline import (
    FeatureFetcher,
    MiniBatch,
    MiniBatchLoader,
    NeighborSamplingStage,
)

__all__ = [
    "SeedBatcher",
    "split_into_batches",
    "FeatureFetcher",
    "MiniBatch",
    "MiniBatchLoader",
    "NeighborSamplingStage",
]
