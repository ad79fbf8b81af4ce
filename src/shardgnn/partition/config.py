"""What a partitioning is asked to do: :class:`PartitionConfig` (the ``shardgnn partition`` flags)
and :class:`StreamConfig` (a streaming partitioner's settings), with the method names.

Kept apart from the partitioners (numba, scipy, pymetis) so that building the command line
imports none of them: ``shardgnn --help`` and a refused flag answer at once.
"""

from __future__ import annotations

import dataclasses
import math

from shardgnn.errors import ConfigError
from shardgnn.options import check_choices, check_types, invalid, option

STREAM_METHODS = ("ldg", "fennel")
VERTEX_CUT_METHODS = ("hdrf", "2d-hash")
METHODS = ("random", "metis", "hypergraph", *STREAM_METHODS, *VERTEX_CUT_METHODS, "assignment")
METHODS_ELSEWHERE = {
    **dict.fromkeys(("kahypar", "mt-kahypar", "mtkahypar", "patoh", "hmetis"), ("hypergraph",)),
    "parmetis": ("metis",),
    **dict.fromkeys(("vertex-cut", "vertexcut"), VERTEX_CUT_METHODS),
    **dict.fromkeys(("stream", "streaming"), STREAM_METHODS),
}
"""``--method`` as other tools name the partitioners (KaHyPar is ``hypergraph``)."""
BALANCE_KEYS = ("nodes", "train", "edges")


@dataclasses.dataclass(kw_only=True)
class StreamConfig:
    """Settings of a streaming partitioner."""

    method: str = "ldg"
    """scoring rule: ldg or fennel"""
    slack: float = 0.05
    """capacity slack: no part gets more than (1 + slack) * N / P nodes"""
    gamma: float = 1.5
    """Fennel's exponent (> 1)"""
    chunk_edges: int = 1 << 20
    """edge entries per chunk (graph and .npy input); memory grows with it, the result does not"""
    chunk_bytes: int | None = None
    """bytes of text per chunk for text files (default 16 * chunk_edges)"""
    key: str = "auto"
    """files: the column that groups edges into vertex records: auto, src or dst"""
    base: int | str = 0
    """text files: 0 (ids start at 0), 1, or auto (1-based iff the smallest id is 1); .jlg is always
    1"""
    num_nodes: int | None = None
    """files: node count (default: largest id + 1, or the .jlg header)"""

    def validate(self) -> "StreamConfig":
        if self.method not in STREAM_METHODS:
            raise ConfigError(f"streaming method {self.method!r} is not one of {STREAM_METHODS}")
        if not (0.0 <= self.slack <= 10.0) or not math.isfinite(self.slack):
            raise ConfigError(
                f"slack={self.slack} must lie in [0, 10] (e.g. 0.05 for 5% above N/P)"
            )
        if not self.gamma > 1.0 or not math.isfinite(self.gamma):
            raise ConfigError(f"gamma={self.gamma} must be > 1 (Fennel uses 1.5)")
        if self.chunk_edges < 1:
            raise ConfigError(f"chunk_edges={self.chunk_edges} must be >= 1")
        if self.chunk_bytes is not None and self.chunk_bytes < 1:
            raise ConfigError(f"chunk_bytes={self.chunk_bytes} must be >= 1")
        if self.key not in ("auto", "src", "dst"):
            raise ConfigError(f"key={self.key!r} must be auto, src or dst")
        if self.base not in (0, 1, "auto"):
            raise ConfigError(f"base={self.base!r} must be 0, 1 or 'auto'")
        if self.num_nodes is not None and self.num_nodes < 1:
            raise ConfigError(f"num_nodes={self.num_nodes} must be >= 1")
        return self


_STREAM_DEFAULTS = StreamConfig()


@dataclasses.dataclass(kw_only=True)
class PartitionConfig:
    """How to partition a graph (every field is a ``shardgnn partition`` flag)."""

    num_parts: int = option(flag="--parts", short="-k", metavar="P", help="number of parts P")
    method: str | None = option(
        None,
        choices=METHODS,
        also_called=METHODS_ELSEWHERE,
        help="partitioner (unset: metis, or the --assignment file when one is given)",
    )
    seed: int = option(
        0,
        help="random/metis/hypergraph/hdrf/2d-hash seed (ldg and fennel are deterministic)",
    )
    balance: tuple[str, ...] | None = option(
        None,
        metavar="KEY,...",
        help=f"metis: balance constraints, a subset of {','.join(BALANCE_KEYS)} "
        "(unset: every one that applies); hypergraph: one of nodes (unset), edges",
    )
    imbalance: float = option(
        0.03,
        help="metis, hypergraph: allowed imbalance per constraint (0.03 = 3%% above the "
        "average); hdrf: of the nodes each part is the master of",
    )
    hdrf_balance: float = option(
        1.0,
        help="hdrf: weight of balancing the edges each part computes against replicating fewer "
        "nodes (the paper's lambda)",
    )
    slack: float = option(
        _STREAM_DEFAULTS.slack, help="ldg/fennel: parts hold at most (1 + slack) * N / P nodes"
    )
    chunk_edges: int = option(
        _STREAM_DEFAULTS.chunk_edges,
        help="ldg/fennel: edges per streamed chunk; bounds scratch memory, never changes the "
        "result",
    )
    assignment: str | None = option(
        None,
        metavar="FILE.npy",
        help="use this node -> part array (integer .npy of length N) instead of a partitioner",
    )
    allow_empty_parts: bool = option(
        False, help="accept parts that own no node (a warning instead of an error)"
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.method is None:
            self.method = "assignment" if self.assignment is not None else "metis"
        self.validate()

    def validate(self) -> "PartitionConfig":
        check_choices(self)
        if not isinstance(self.num_parts, int) or self.num_parts < 1:
            raise invalid(self, "num_parts", "must be a positive integer")
        if (self.method == "assignment") != (self.assignment is not None):
            raise ConfigError(
                f"give either --method or --assignment, not both (--method {self.method}, "
                f"--assignment {self.assignment})"
                if self.assignment is not None
                else "--method assignment needs an --assignment file"
            )
        if self.method in ("metis", "hypergraph", "hdrf") and not 0.0 < self.imbalance <= 1.0:
            raise invalid(self, "imbalance", "must lie in (0, 1]")
        if self.balance is not None:
            unknown = [b for b in self.balance if b not in BALANCE_KEYS]
            if unknown or not self.balance:
                raise invalid(
                    self, "balance", f"give a comma-separated subset of {','.join(BALANCE_KEYS)}"
                )
        if not self.hdrf_balance > 0.0:
            raise invalid(self, "hdrf_balance", "must be > 0")
        if self.method in STREAM_METHODS:
            StreamConfig(
                method=self.method, slack=self.slack, chunk_edges=self.chunk_edges
            ).validate()
        return self
