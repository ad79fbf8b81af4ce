"""Distributed full-graph training: row-block shards, the process grid, and distributed SpMM
(1D, sparsity-aware 1D, 1.5D) with low-bit communication and bounded staleness."""
