"""Learnable node embeddings' settings (imports nothing heavy: the command line is built from
them)."""

from __future__ import annotations

import dataclasses

from shardgnn.options import check_choices, invalid, option

EMBEDDING_OPTIMIZERS = ("adagrad", "adam")


@dataclasses.dataclass(kw_only=True)
class EmbeddingConfig:
    """Learnable node embeddings: one trainable row per node, updated by a sparse optimiser."""

    dim: int = option(
        0,
        flag="--embedding-dim",
        help="width of a learnable row per node (0: none); the model's input is the row for a "
        "graph without features, the features followed by the row otherwise",
    )
    optimizer: str = option(
        "adagrad",
        choices=EMBEDDING_OPTIMIZERS,
        flag="--embedding-optimizer",
        help="sparse optimiser of the rows, updating only the rows a step used: adagrad "
        "(row-wise: one accumulator per row) or adam (lazy moments, as torch.optim.SparseAdam)",
    )
    lr: float = option(0.01, flag="--embedding-lr", help="learning rate of the rows")

    def __post_init__(self) -> None:
        check_choices(self)
        if self.dim < 0:
            raise invalid(self, "dim", "must be >= 0 (0: no learnable rows)")
        if not self.lr > 0:
            raise invalid(self, "lr", "must be > 0")

    @property
    def enabled(self) -> bool:
        return self.dim > 0
