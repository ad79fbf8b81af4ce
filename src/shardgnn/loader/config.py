"""The GPU pipeline's settings (imports nothing heavy: the command line is built from them)."""

from __future__ import annotations

import dataclasses

from shardgnn.errors import ConfigError
from shardgnn.options import check_choices, check_types, invalid, option
from shardgnn.store.cache.config import parse_cache_size

SAMPLER_DEVICES = ("auto", "gpu", "cpu")
HOT_POLICIES = ("degree", "presample")


@dataclasses.dataclass(kw_only=True)
class DeviceConfig:
    """Where a mini-batch is made when training on a GPU (``--device cuda``)."""

    sampler_device: str = option(
        "auto",
        choices=SAMPLER_DEVICES,
        flag="--sampler-device",
        help="--device cuda: gpu samples on the GPU (the CSR in GPU memory, or in pinned host "
        "memory read in place when it does not fit; the same draws as the CPU sampler); cpu "
        "samples with the CPU kernels in a background thread and copies each batch to the GPU "
        "on a side stream, one batch ahead; auto: gpu, except with learnable rows "
        "(--embedding-dim), whose table stays in host memory",
    )
    feature_memory: str = option(
        "auto",
        flag="--gpu-feature-memory",
        metavar="SIZE",
        help="--device cuda with GPU sampling: feature rows kept in GPU memory: auto (every row "
        "when they fit in half the free memory, else as many as fit), a percentage of nodes "
        "(20%%), a row count (50000) or bytes (8GB); the other rows stay in pinned host memory "
        "and are read in place over PCIe",
    )
    hot_policy: str = option(
        "degree",
        choices=HOT_POLICIES,
        flag="--gpu-hot-policy",
        help="which rows --gpu-feature-memory keeps on the GPU when not all fit: degree (highest "
        "in-degree) or presample (most often sampled in one pre-sampling epoch)",
    )

    overlap: bool = option(
        True,
        negative_flag="--no-gpu-overlap",
        negative_help="--device cuda with GPU sampling: sample and gather each batch on the "
        "training stream, in the training thread (no overlap; for comparison)",
        help="--device cuda with GPU sampling: sample and gather batch k+1 in a background thread "
        "on a second CUDA stream while batch k computes",
    )

    cuda_graphs: bool = option(
        False,
        flag="--cuda-graphs",
        help="--device cuda: run each training step as a replayed CUDA graph (one launch instead "
        "of hundreds), one graph captured per bucket of batch shapes (each batch padded by at "
        "most 1/8); GraphSAGE and GIN node classification in fp32",
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.feature_memory != "auto":
            try:
                parse_cache_size(self.feature_memory)
            except ConfigError:
                raise invalid(
                    self,
                    "feature_memory",
                    "give auto, a percentage of nodes (20%), a row count (50000) or bytes (8GB)",
                ) from None

    def resident_rows(self, num_nodes: int, row_bytes: int, budget_bytes: int) -> int:
        """Feature rows to keep on the GPU; ``auto`` takes what ``budget_bytes`` holds."""
        if self.feature_memory == "auto":
            return min(num_nodes, budget_bytes // max(row_bytes, 1))
        kind, value = parse_cache_size(self.feature_memory)
        rows = {"fraction": value * num_nodes, "rows": value, "bytes": value // max(row_bytes, 1)}
        return min(num_nodes, int(rows[kind]))
