"""Feature and graph stores behind one interface (:class:`~shardgnn.store.feature.FeatureStore`):
local, distributed (:mod:`~shardgnn.store.dist_feature`) and cached (:mod:`shardgnn.store.cache`).
Nothing is imported here, so :mod:`shardgnn.store.cache.config` stays light."""
