"""Learnable node embeddings' settings (imports nothing heavy: the command line is built from
them)."""

from __future__ import annotations

import dataclasses

from shardgnn.errors import ConfigError
from shardgnn.options import check_choices, check_types, invalid, option

EMBEDDING_OPTIMIZERS = ("adagrad", "adam")
EMBEDDING_STORAGE = ("memory", "disk")
HISTORICAL_MODES = ("push", "pull")
"""How owners fill historical-embedding tables (:mod:`shardgnn.store.historical`)."""
HISTORICAL_SCOPES = ("remote", "all")
"""Which nodes historical embeddings serve: remote ones only (DistGNN-MB), or every node outside
the batch's own layer (GNNAutoScale)."""
STACKED_MODELS = ("sage", "gcn", "gat", "gatv2", "gin", "gine")
"""the models whose layers historical embeddings can feed (:class:`~shardgnn.nn.models.GNN`)"""


def split_historical(spec: str) -> tuple[int, int] | None:
    """``(layer, age)`` of a ``--historical LAYER:AGE`` value (None: not two non-negative
    integers)."""
    layer, sep, age = str(spec).partition(":")
    if not (sep and layer.strip().isdigit() and age.strip().isdigit()):
        return None
    return int(layer), int(age)


def check_historical(spec: str, model: str, layers: int) -> tuple[int, int]:
    """``(layer, age)`` of ``--historical spec`` for a ``layers``-layer ``--model model``; a
    :class:`ConfigError` if the spec does not parse, the model has no stack of layers to feed,
    or the layer is outside ``[1, layers - 1]``. The one check `shardgnn train` and
    `shardgnn plan` share."""
    flag = f"--historical {spec}"
    parsed = split_historical(spec)
    if parsed is None:
        raise ConfigError(f"{flag}: give LAYER:AGE, two non-negative integers, e.g. 1:4")
    if model not in STACKED_MODELS:
        raise ConfigError(
            f"{flag}: --model {model} has no stack of layers to feed (historical rows replace "
            f"a layer's inputs in {', '.join(STACKED_MODELS)}): drop --historical"
        )
    if not 1 <= parsed[0] <= layers - 1:
        raise ConfigError(
            f"{flag}: the layer must lie in [1, {layers - 1}] for a {layers}-layer model "
            "(layer 0 reads input features, which no owner computes)"
        )
    return parsed


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
    storage: str = option(
        "memory",
        choices=EMBEDDING_STORAGE,
        flag="--embedding-storage",
        help="where the rows and their optimiser state live: memory, or disk (memory-mapped "
        "files in --embedding-dir, for tables larger than RAM: the kernel pages rows in and out)",
    )
    directory: str | None = option(
        None,
        flag="--embedding-dir",
        metavar="DIR",
        help="folder of the --embedding-storage disk files (unset: the system's temporary "
        "folder); they are unlinked as soon as they are mapped, so none is left behind",
    )
    staleness: int | None = option(
        None,
        flag="--embedding-staleness",
        metavar="S",
        help="workers with a --cache-policy: also cache peers' rows, each serving reads for at "
        "most S training steps after it was fetched (HET's bounded staleness; 0: never stale, "
        "equal to uncached); unset: rows are never cached",
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.dim < 0:
            raise invalid(self, "dim", "must be >= 0 (0: no learnable rows)")
        if not self.lr > 0:
            raise invalid(self, "lr", "must be > 0")
        if self.staleness is not None and self.staleness < 0:
            raise invalid(self, "staleness", "must be >= 0 steps (0: never stale)")

    @property
    def enabled(self) -> bool:
        return self.dim > 0
