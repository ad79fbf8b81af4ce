"""Building a worker's cache from its config: which rows may be cached, how many, and which rows
a static policy loads (``degree``: the highest in-degree; ``presample``: the most sampled in one
pre-sampling epoch, whose counts the caller supplies because sampling sits above this layer)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from shardgnn.errors import ConfigError
from shardgnn.store.cache.config import CacheConfig
from shardgnn.store.cache.policies import make_policy
from shardgnn.store.cache.store import CachedFeatureStore
from shardgnn.store.feature import FeatureStore


def top_ids(scores: np.ndarray, cacheable: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` cacheable ids of highest positive score (ties: lower id first), best first."""
    candidates = np.flatnonzero(cacheable & (scores > 0))
    order = np.lexsort((candidates, -scores[candidates].astype(np.float64)))
    return candidates[order[:k]].astype(np.int64)


def cacheable_rows(store: FeatureStore) -> np.ndarray:
    """Which rows of ``store`` a cache may hold (bool ``[N]``): those from a slow tier (a peer,
    or this rank's disk); rows in this process's RAM, or mapped from same-host peers, never."""
    n = store.shape[0]
    return np.ones(n, dtype=bool) if store.on_disk else ~store.local_mask(np.arange(n))


def nothing_to_cache(policy: str, who: str) -> ConfigError:
    """The refusal of a cache whose worker (``who``: "this worker reads") reads every row in
    place: a worker's own rows in RAM and the parts its host's workers map."""
    return ConfigError(
        f"--cache-policy {policy}: {who} every row without communication (its own rows in RAM, "
        "the rest from the mapped parts of workers on its host), so there is nothing to cache; "
        "use --feature-storage disk (the cache then fronts disk reads), --host-sharing off, or "
        "drop the cache"
    )


def build_cache(
    config: CacheConfig,
    store: FeatureStore,
    *,
    fill_from: FeatureStore,
    degree: np.ndarray,
    presample_counts: Callable[[], np.ndarray],
    max_age: int | None = None,
) -> CachedFeatureStore:
    """The cache ``config`` describes, in front of ``store`` (collective when ``store`` is
    distributed: static policies load their rows through ``fill_from``).

    Args:
        config: policy, size and look-ahead (``config.enabled`` must be true).
        store: the store the cache fronts.
        fill_from: the store static rows are loaded from (the same rows under another
            communication stage, so set-up bytes are counted apart from training's).
        degree: in-degree of every node (``degree``'s scores).
        presample_counts: called once for ``presample``: how often the sampler touched each node
            in one pre-sampling epoch.
        max_age: rows that change (learnable rows): the most steps a cached row serves reads.

    Raises:
        ConfigError: nothing here can be cached (every row is read without communication).
    """
    assert config.enabled
    n = store.shape[0]
    cacheable = cacheable_rows(store)
    if not cacheable.any():
        raise nothing_to_cache(config.policy, "this worker reads")
    # Never more slots than rows that can be cached (this worker's own rows in RAM never are).
    capacity = min(config.capacity_rows(n, store.row_bytes), int(cacheable.sum()))
    static_ids = None
    if config.policy == "degree":
        static_ids = top_ids(degree, cacheable, capacity)
    elif config.policy == "presample":
        static_ids = top_ids(presample_counts(), cacheable, capacity)
    policy = make_policy(
        config.policy, num_nodes=n, lookahead=config.lookahead, static_ids=static_ids
    )
    return CachedFeatureStore(store, policy, capacity, fill_from=fill_from, max_age=max_age)
