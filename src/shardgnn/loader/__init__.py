"""The mini-batch pipeline: seed batches -> sampled blocks -> features joined -> model."""

from shardgnn import lazy_exports

_WHERE = {
    "SeedBatcher": "shardgnn.loader.batches",
    "split_into_batches": "shardgnn.loader.batches",
    "FeatureFetcher": "shardgnn.loader.pipeline",
    "MiniBatch": "shardgnn.loader.pipeline",
    "MiniBatchLoader": "shardgnn.loader.pipeline",
    "NeighborSamplingStage": "shardgnn.loader.pipeline",
}
"""each public name and its module, imported on first use"""

__all__ = list(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
