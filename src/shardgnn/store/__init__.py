"""Graph and feature stores: local now; partitioned and cached stores implement the same interface."""

from shardgnn.store.feature import FeatureStore, LocalFeatureStore

__all__ = ["FeatureStore", "LocalFeatureStore"]
