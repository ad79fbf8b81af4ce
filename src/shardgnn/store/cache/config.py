"""The feature cache's settings (imports nothing heavy: the command line is built from them)."""

from __future__ import annotations

import dataclasses
import re

from shardgnn.errors import ConfigError
from shardgnn.options import check_choices, check_types, invalid, option

POLICIES = ("none", "degree", "presample", "fifo", "lru", "belady", "auto")
BUILT_POLICIES = POLICIES[1:-1]
"""the policies a worker builds (``auto`` becomes ``presample`` or ``none`` before any starts)"""
STATIC_POLICIES = ("degree", "presample")

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%|kb|mb|gb|rows)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"kb": 1e3, "mb": 1e6, "gb": 1e9}


@dataclasses.dataclass(kw_only=True)
class CacheConfig:
    """The feature cache of distributed mini-batch training (one cache per worker)."""

    policy: str = option(
        "none",
        choices=POLICIES,
        flag="--cache-policy",
        help="cache of remote (with --feature-storage disk also local) feature rows per worker: "
        "degree (top in-degree), presample (most sampled in one pre-sampling epoch), fifo, lru, "
        "belady (keeps the rows used soonest in a --cache-lookahead window), or auto "
        "(node classification: presample or none, whichever `shardgnn plan`'s cost model "
        "predicts is faster on this partition; see --plan-rates)",
    )
    size: str = option(
        "10%",
        flag="--cache-size",
        metavar="SIZE",
        help="capacity per worker: a percentage of all nodes (20%%), a row count (50000) or bytes "
        "(256MB)",
    )
    lookahead: int = option(
        16,
        flag="--cache-lookahead",
        help="belady: batches sampled ahead; their missing rows arrive in one exchange",
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        parse_cache_size(self.size)
        if self.lookahead < 1:
            raise invalid(self, "lookahead", "must be >= 1 batch")

    @property
    def enabled(self) -> bool:
        return self.policy != "none"

    def capacity_rows(self, num_nodes: int, row_bytes: int) -> int:
        """The capacity in rows for a graph of ``num_nodes`` nodes whose rows take ``row_bytes``."""
        return resolve_capacity(self.size, num_nodes, row_bytes)


def parse_cache_size(text: str) -> tuple[str, float]:
    """``("fraction" | "rows" | "bytes", value)`` of a ``--cache-size`` string."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(
            f"--cache-size {text!r} is not understood; give a percentage of nodes (20%), a "
            "fraction (0.2), a row count (50000) or a size in bytes (256MB, 2GB)"
        )
    value, unit = float(match.group(1)), (match.group(2) or "").lower()
    if unit == "%":
        kind, value = "fraction", value / 100
    elif unit in _UNIT_BYTES:
        kind, value = "bytes", value * _UNIT_BYTES[unit]
    elif unit == "rows" or ("." not in match.group(1)):
        kind = "rows"
    else:
        kind = "fraction"
    if kind == "fraction" and not 0 < value <= 1:
        raise ConfigError(f"--cache-size {text!r} is a fraction of nodes and must lie in (0, 100%]")
    if kind == "rows" and value != int(value):
        raise ConfigError(f"--cache-size {text!r}: a row count must be a whole number")
    return kind, value


def resolve_capacity(size: str, num_nodes: int, row_bytes: int) -> int:
    """Rows that ``size`` allows, at most ``num_nodes`` and at least 1."""
    kind, value = parse_cache_size(size)
    rows = {
        "fraction": lambda: int(round(value * num_nodes)),
        "rows": lambda: int(value),
        "bytes": lambda: int(value // max(row_bytes, 1)),
    }[kind]()
    if rows < 1:
        raise ConfigError(
            f"--cache-size {size!r} holds no row ({num_nodes:,} nodes of {row_bytes:,} bytes); "
            "give a larger --cache-size or --cache-policy none"
        )
    return min(rows, num_nodes)
