"""Feature caches: a cached store is a store.

:class:`~shardgnn.store.cache.store.CachedFeatureStore` wraps any
:class:`~shardgnn.store.feature.FeatureStore` (in practice the distributed one) and keeps up to
``capacity`` rows that would otherwise come from a slow tier: a peer (remote rows) or this rank's
own memory-mapped file (``--feature-storage disk``). Rows held in RAM by this rank are never
cached; they are already as fast as a cache.

Which rows are kept is a policy (:mod:`~shardgnn.store.cache.policies`):

========== ======= ============================================================= ============
policy     kind    rule                                                          from
========== ======= ============================================================= ============
degree     static  the highest in-degree cacheable nodes                         PaGraph
presample  static  the nodes the sampler touched most in one unrecorded epoch    GNNLab
fifo       dynamic admit every miss, evict the oldest admission (a ring)         BGL
lru        dynamic admit every miss, evict the least recently used               classic
belady     dynamic look ``W`` batches ahead; keep the rows used soonest          Ginex, Bagpipe
========== ======= ============================================================= ============

Modules: ``config`` (settings, capacity parsing), ``policies``, ``core`` (the row-free part: ids,
slots, policy, counters, and :func:`~shardgnn.store.cache.core.simulate`, which runs a policy on a
recorded trace through exactly the code the store runs), ``store`` (the cached store) and
``build`` (a worker's cache from its config).

Accounting (GNNLab's definition): per ``gather`` the distinct cacheable ids are *requested*; those
not cached at call time are *missed*; hit rate = (requested - missed) / requested, in bytes (all
rows have the same size, so rows give the same ratio).

Nothing is imported here, so :mod:`shardgnn.store.cache.config` stays light.
"""
