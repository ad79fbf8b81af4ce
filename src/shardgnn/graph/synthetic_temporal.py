"""The built-in temporal dataset: an interaction stream with power-law activity and recurring
pairs, whose future links are learnable from its past.

Every node has an activity weight (Pareto, ``exponent``) and a small circle of ``partners``
drawn by popularity. An event's source is drawn by activity; with probability ``recurrence``
its destination is one of the source's partners (the pair recurs), else any node by popularity.
Gaps between events are exponential (mean 1 time unit). Everything is vectorised: tens of
millions of events take seconds. Options are ``synthetic-temporal:key=value`` spec options.

With ``classes=K`` (dynamic node classification) every node belongs to one of ``K``
communities, and a ``drift`` share of the nodes moves to another community once, at a random
event. A node's partner circle is drawn within its current community, each event's features
carry a noisy centroid of the community its destination was drawn from, and each event is
labelled with its source's community at that time: a model reads the label from the source's
recent events, and must forget the old ones after a move.
"""

from __future__ import annotations

import dataclasses

import numpy as np

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
    classes: int = 0
    drift: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 2 and self.events >= 1, "nodes >= 2 and events >= 1"),
            (1 <= self.partners < self.nodes, "1 <= partners < nodes"),
            (0.0 <= self.recurrence <= 1.0, "recurrence in [0, 1]"),
            (self.exponent > 2.0, "exponent > 2"),
            (self.features >= 0 and self.seed >= 0, "features >= 0 and seed >= 0"),
            (self.classes == 0 or 2 <= self.classes <= self.nodes, "classes 0 or in [2, nodes]"),
            (self.classes == 0 or self.features >= 1, "classes > 0 needs features >= 1 (the "
             "events' features carry the communities)"),
            (0.0 <= self.drift <= 1.0, "drift in [0, 1]"),
        ]  # fmt: skip
        self.refuse_broken("synthetic-temporal", checks)


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
    labels = None
    if cfg.classes:
        dst, labels, community = _communities(cfg, src, recurring, dst, popularity)
    loops = dst == src  # no self-interactions: the next node instead
    dst[loops] = (dst[loops] + 1) % n
    t = np.cumsum(rng.exponential(1.0, cfg.events))
    feat = (
        rng.standard_normal((cfg.events, cfg.features), dtype=np.float32) if cfg.features else None
    )
    if cfg.classes:
        centroid = np.random.default_rng([cfg.seed, 2]).standard_normal((cfg.classes, cfg.features))
        feat += (CENTROID_SCALE * centroid[community]).astype(np.float32)
    unlabelled = ("classes", "drift")  # an unlabelled stream's name is as it always was
    name = "synthetic-temporal:" + ",".join(
        f"{f.name}={getattr(cfg, f.name)}"
        for f in dataclasses.fields(cfg)
        if cfg.classes or f.name not in unlabelled
    )
    return TemporalGraph.from_events(src, dst, t, feat, num_nodes=n, name=name, labels=labels)


CENTROID_SCALE = 0.5
"""The community centroids' scale beside the events' unit noise (per feature)"""


def _communities(
    cfg: TemporalStreamConfig,
    src: np.ndarray,
    recurring: np.ndarray,
    dst: np.ndarray,
    popularity: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dst, labels, community)`` of the labelled stream: recurring events' destinations
    redrawn from the source's circle in its community at that event, every event's label (its
    source's community then) and the community each destination was drawn from (a
    non-recurring destination's own first community)."""
    rng = np.random.default_rng([cfg.seed, 1])  # the unlabelled stream's draws stay as they were
    n, k, events = cfg.nodes, cfg.classes, src.size
    first = rng.integers(0, k, n)
    moved = (first + rng.integers(1, k, n)) % k
    moves_at = np.where(rng.random(n) < cfg.drift, rng.integers(0, events, n), events)
    circles = np.empty((n, k, cfg.partners), dtype=np.int64)
    for c in range(k):
        members = np.flatnonzero(first == c)
        if members.size == 0:  # an empty community: its circles are anyone
            members = np.arange(n)
        picks = _draw(rng, np.cumsum(popularity[members]), n * cfg.partners)
        circles[:, c, :] = members[picks].reshape(n, cfg.partners)
    labels = np.where(np.arange(events) >= moves_at[src], moved[src], first[src])
    slot = rng.integers(0, cfg.partners, events)
    dst = np.where(recurring, circles[src, labels, slot], dst)
    community = np.where(recurring, labels, first[dst])
    return dst, labels.astype(np.int64), community
