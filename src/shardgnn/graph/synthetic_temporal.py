"""The built-in temporal dataset: an interaction stream with power-law activity and recurring
pairs, whose future links are learnable from its past.

Every node has an activity weight (Pareto, ``exponent``) and a small circle of ``partners``
drawn by popularity. An event's source is drawn by activity; with probability ``recurrence``
its destination is one of the source's partners (the pair recurs), else any node by popularity.
Gaps between events are exponential (mean 1 time unit). Everything is vectorised: tens of
millions of events take seconds. Options are ``synthetic-temporal:key=value`` spec options.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.spec_options import SpecOptions
from shardgnn.graph.temporal import TemporalGraph


@dataclasses.dataclass(kw_only=True)
class TemporalStreamConfig(SpecOptions):
    """Parameters of the interaction stream (each a ``synthetic-temporal:key=value`` option)."""

    nodes: int = 10_000
    events: int = 200_000
    partners: int = 8
    recurrence: float = 0.7
    exponent: float = 2.2
    features: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 2 and self.events >= 1, "nodes >= 2 and events >= 1"),
            (1 <= self.partners < self.nodes, "1 <= partners < nodes"),
            (0.0 <= self.recurrence <= 1.0, "recurrence in [0, 1]"),
            (self.exponent > 2.0, "exponent > 2"),
            (self.features >= 0 and self.seed >= 0, "features >= 0 and seed >= 0"),
        ]
        for ok, rule in checks:
            if not ok:
                raise DatasetError(
                    f"synthetic-temporal: {self} breaks {rule}",
                    fix="change the option in the spec, e.g. synthetic-temporal:events=1000000",
                )


def _draw(rng: np.random.Generator, cumulative: np.ndarray, size: int) -> np.ndarray:
    """``size`` indices drawn proportional to the weights ``cumulative`` sums."""
    picks = np.searchsorted(cumulative, rng.random(size) * cumulative[-1], side="right")
    return np.minimum(picks, cumulative.shape[0] - 1)


def generate_temporal(config: TemporalStreamConfig | None = None) -> TemporalGraph:
    """The interaction stream ``config`` describes (defaults: 10k nodes, 200k events)."""
    cfg = config or TemporalStreamConfig()
    rng = np.random.default_rng(cfg.seed)
    n = cfg.nodes
    activity = (1.0 - rng.random(n)) ** (-1.0 / (cfg.exponent - 1.0))
    popularity = (1.0 - rng.random(n)) ** (-1.0 / (cfg.exponent - 1.0))
    cum_activity, cum_popularity = np.cumsum(activity), np.cumsum(popularity)
    circle = _draw(rng, cum_popularity, n * cfg.partners).reshape(n, cfg.partners)
    src = _draw(rng, cum_activity, cfg.events)
    recurring = rng.random(cfg.events) < cfg.recurrence
    dst = np.where(
        recurring,
        circle[src, rng.integers(0, cfg.partners, cfg.events)],
        _draw(rng, cum_popularity, cfg.events),
    )
    loops = dst == src  # no self-interactions: the next node instead
    dst[loops] = (dst[loops] + 1) % n
    t = np.cumsum(rng.exponential(1.0, cfg.events))
    feat = (
        rng.standard_normal((cfg.events, cfg.features), dtype=np.float32) if cfg.features else None
    )
    name = "synthetic-temporal:" + ",".join(
        f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg)
    )
    return TemporalGraph.from_events(src, dst, t, feat, num_nodes=n, name=name)
