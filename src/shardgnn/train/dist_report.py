"""What sampled distributed training reports (node classification and link prediction): each
epoch's input traffic and cache metrics, and the run's summary of sampling, caches, low-bit
fetches and historical embeddings, summed or averaged over ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardgnn.store.feature import SparseRowStore
from shardgnn.train.loop import EpochRecord


def _served_ages(ages) -> dict[str, Any]:
    """Mean and largest age of served entries, from ``ages[a]`` = entries served at age ``a``."""
    served = int(np.sum(ages))
    return {
        "mean_served_age": float(np.dot(np.arange(len(ages)), ages) / served) if served else None,
        "max_served_age": int(np.flatnonzero(ages)[-1]) if served else None,
    }


def _mean_of(history: list[EpochRecord], key: str) -> float | None:
    """The mean of epoch metric ``key`` over the epochs that recorded it."""
    values = [r.cache[key] for r in history if r.cache and r.cache.get(key) is not None]
    return float(np.mean(values)) if values else None


class SampledReport:
    """The reports of :class:`~shardgnn.train.dist_sampled.DistSampledSteps` (a base of it): they
    read the stores it opens (``fetch_store``, ``cache``, ``edge_store``, ``edge_cache``,
    ``embedding``, ``history``, ``feedback``; ``sparse_batches``) and reduce over ranks with its
    ``sum``."""

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        edges = self.sum([float(self.sampled_edges)])[0]
        return {
            "partitioner": self.pset.method,
            "overlap": self.overlap,
            # Sampling runs on every rank at once: edges summed over ranks per second of one rank.
            "sampled_edges_per_s": edges / sample_time if sample_time > 0 else None,
            # all ranks' sampled edges per epoch this process trained (a resumed run counts its
            # own epochs only)
            "sampled_edges_per_epoch": edges / self.sampled_epochs if self.sampled_epochs else None,
            "cache": self.cache_summary(history),
            "batching": self.config.batching,
            # sampled training edges whose source the worker owns, mean over epochs
            "local_edge_share": _mean_of(history, "local_edge_share"),
            # with --cluster-halo: sampled edges kept inside the bounded halo, mean over epochs
            "kept_edge_share": _mean_of(history, "kept_edge_share"),
            "fetch_bits": self.config.fetch_bits,
            "error_feedback": self.config.error_feedback,
            # the owners' residuals, summed over workers
            "residual_mb": self.sum([float(0 if self.feedback is None else self.feedback.nbytes)])[
                0
            ]
            / 1e6,
            "historical": self._historical_summary(history),
        }

    def _historical_summary(self, history: list[EpochRecord]) -> dict[str, Any] | None:
        """Historical embeddings (``--historical``) over the epochs that recorded them."""
        if self.history is None:
            return None
        epochs = [r.cache["historical"] for r in history if r.cache and "historical" in r.cache]
        ages = np.sum([e["ages"] for e in epochs], axis=0) if epochs else []
        lookups = sum(e["lookups"] for e in epochs)
        return {
            "layers": list(self.history.layers),
            "max_age": self.history.max_age,
            "mode": self.history.mode,
            "scope": self.history.scope,
            "push_every": self.history.push_every if not self.history.pull else None,
            "hit_rate": sum(e["hits"] for e in epochs) / lookups if lookups else None,
            **_served_ages(ages),
            # pushes, or pull requests and replies, received per epoch (all workers)
            "traffic_mb_per_epoch": (
                float(np.mean([e["traffic_mb"] for e in epochs])) if epochs else None
            ),
            # the tables, summed over workers
            "memory_mb": self.sum([float(self.history.nbytes)])[0] / 1e6,
        }

    def epoch_metrics(self, epoch_comm: dict[str, list]) -> dict[str, Any] | None:
        """Input traffic of the epoch's training batches, summed over ranks (collective; every
        rank has the same stores, so all or none call it).

        Features: bytes requested from a slow tier (peers, or disk), of them missed by the
        cache, and bytes the fetch moved. Cached learnable rows (``--embedding-staleness``):
        peers' rows requested, missed (fetched: not cached, or too old and refreshed), the
        refreshed ones, the row and gradient bytes received, and how old the served cached rows
        were (``row_ages[a]``: rows served
        ``a`` steps after they were fetched)."""
        metrics: dict[str, Any] = {}
        if self.fetch_store is not None:
            remote = epoch_comm.get("fetch", [0, 0])[1]
            sampled = epoch_comm.get("sample", [0, 0])[1]
            requested, missed, remote, sampled = self.sum(
                [*_slow_tier_bytes(self.fetch_store, self.cache), float(remote), float(sampled)]
            )
            metrics.update(
                hit_rate=(requested - missed) / requested if requested else None,
                requested_mb=requested / 1e6,
                missed_mb=missed / 1e6,
                remote_feature_mb=remote / 1e6,
                # the distributed sampler's requests and replies (all workers)
                remote_sample_mb=sampled / 1e6,
            )
        if self.edge_store is not None:
            requested, missed = self.sum(list(_slow_tier_bytes(self.edge_store, self.edge_cache)))
            metrics.update(
                edge_hit_rate=(requested - missed) / requested if requested else None,
                edge_requested_mb=requested / 1e6,
                edge_missed_mb=missed / 1e6,
            )
        row_cache = None if self.embedding is None else self.embedding.cache
        if row_cache is not None:
            requested, missed = row_cache.reset_counters()
            ages = row_cache.served_ages
            embed = float(epoch_comm.get("embed", [0, 0])[1])  # rows and gradients received
            totals = self.sum([requested, missed, row_cache.refreshed, embed, *ages.tolist()])
            row_cache.refreshed, ages[:] = 0, 0
            metrics.update(
                row_hit_rate=(totals[0] - totals[1]) / totals[0] if totals[0] else None,
                row_requested=int(totals[0]),
                row_missed=int(totals[1]),
                row_refreshed=int(totals[2]),
                row_embed_mb=totals[3] / 1e6,
                row_ages=[int(v) for v in totals[4:]],
            )
        if self.locality is not None:
            counts = self.locality
            local, edges, dropped = self.sum([counts.local_edges, counts.edges, counts.dropped])
            counts.local_edges = counts.edges = counts.dropped = 0
            metrics["local_edge_share"] = local / edges if edges else None
            if self.config.cluster_halo is not None:
                metrics["kept_edge_share"] = edges / (edges + dropped) if edges else None
        if self.history is not None:
            traffic = float(epoch_comm.get(self.history.stage, [0, 0])[1])
            totals = self.sum([*self.history.counters(), traffic])
            self.history.reset_counters()
            lookups, hits, sent_rows = totals[:3]
            metrics["historical"] = {
                "lookups": int(lookups),
                "hits": int(hits),
                "hit_rate": hits / lookups if lookups else None,
                "sent_rows": int(sent_rows),
                "ages": [int(v) for v in totals[3:-1]],
                "traffic_mb": totals[-1] / 1e6,
            }
        return metrics or None

    def cache_summary(self, history: list[EpochRecord]) -> dict[str, Any]:
        """The cache's configuration and its epoch metrics averaged over epochs >= 2."""
        cfg = self.config.cache
        capacity = self.cache.capacity if self.cache is not None else 0
        cache = self.cache
        staged, held, sparse_workers, cache_held, csr_caches = self.sum([
            float(cache.max_staged_rows if cache is not None else 0),
            float(0 if self.x_store is None else self.x_store.nbytes),
            float(self.sparse_batches),
            float(cache.nbytes if cache is not None else 0),
            float(cache is not None and cache.layout == "csr"),
        ])  # fmt: skip
        # workers whose parts differ in density may hold their caches in different forms
        layouts = {0: "dense", self.world_size: "csr"}
        # Epochs recorded before a resume may come from a run without these metrics.
        measured = [r for r in (history[1:] or history) if r.cache]
        row_bytes = 0 if self.fetch_store is None else self.fetch_store.row_bytes

        def mean(values):
            values = [v for v in values if v is not None]
            return float(np.mean(values)) if values else None

        return {
            "policy": cfg.policy,
            "size": cfg.size if cfg.enabled else None,
            "capacity_rows": capacity,
            # the cached rows' bytes per worker: dense, or a static cache's CSR (its non-zeros)
            "capacity_mb": cache_held / self.world_size / 1e6,
            "cache_layout": None if cache is None else layouts.get(int(csr_caches), "mixed"),
            "feature_storage": self.config.feature_storage,
            # in memory: each worker's rows dense, or as CSR where mostly zero (SparseRowStore)
            "feature_layout": _layout(self.x_store),
            "feature_mb_per_worker": held / self.world_size / 1e6,
            # how many workers gather their batches' input rows as sparse tensors
            # (train.setup.sparse_batches_apply: those whose own rows are held as CSR)
            "sparse_batch_workers": int(sparse_workers),
            "lookahead": cfg.lookahead if cfg.policy == "belady" else None,
            "setup_s": self.sum([self.cache_setup_s])[0] / self.world_size,
            "hit_rate": mean(r.cache.get("hit_rate") for r in measured),
            "requested_mb_per_epoch": mean(r.cache.get("requested_mb") for r in measured),
            "remote_feature_mb_per_epoch": mean(r.cache.get("remote_feature_mb") for r in measured),
            "fetch_s_per_epoch": mean(r.stages.get("fetch", 0.0) for r in measured),
            "lookahead_s_per_epoch": mean(r.stages.get("lookahead", 0.0) for r in measured),
            # The look-ahead's memory: rows staged for one window (summed over workers).
            "max_staged_mb": staged * row_bytes / 1e6,
            "rows": self._row_cache_summary(measured),
            "edges": self._edge_cache_summary(measured),
        }

    def _edge_cache_summary(self, measured: list[EpochRecord]) -> dict[str, Any] | None:
        """The edge rows' cache (a model that reads edge features, ``--cache-policy``)."""
        if self.edge_cache is None:
            return None
        epochs = [r.cache for r in measured if r.cache and "edge_requested_mb" in r.cache]
        requested = sum(e["edge_requested_mb"] for e in epochs)
        missed = sum(e["edge_missed_mb"] for e in epochs)
        return {
            "capacity_rows": self.edge_cache.capacity,
            "capacity_mb": self.edge_cache.nbytes / 1e6,
            "hit_rate": (requested - missed) / requested if requested else None,
            "requested_mb_per_epoch": requested / len(epochs) if epochs else None,
        }

    def _row_cache_summary(self, measured: list[EpochRecord]) -> dict[str, Any] | None:
        """The learnable rows' cache (``--embedding-staleness``) over the measured epochs."""
        row_cache = None if self.embedding is None else self.embedding.cache
        if row_cache is None:
            return None
        epochs = [r.cache for r in measured if r.cache and "row_requested" in r.cache]
        requested = sum(e["row_requested"] for e in epochs)
        missed = sum(e["row_missed"] for e in epochs)
        ages = np.sum([e["row_ages"] for e in epochs], axis=0) if epochs else []
        return {
            "staleness": row_cache.max_age,
            "capacity_rows": row_cache.capacity,
            "hit_rate": (requested - missed) / requested if requested else None,
            "refreshed_per_epoch": (
                sum(e["row_refreshed"] for e in epochs) / len(epochs) if epochs else None
            ),
            **_served_ages(ages),
            "embed_mb_per_epoch": (
                float(np.mean([e["row_embed_mb"] for e in epochs])) if epochs else None
            ),
        }


def _layout(store: Any) -> str | None:
    """How a worker's own feature rows are held: ``csr``, ``dense``, ``mapped`` (read from the
    part file on demand) or None (no features)."""
    if store is None:
        return None
    if isinstance(store, SparseRowStore):
        return "csr"
    return "mapped" if store.on_disk else "dense"


def _slow_tier_bytes(store: Any, cache: Any) -> tuple[float, float]:
    """This rank's bytes of ``store``'s rows requested from a slow tier (peers, disk) since the
    last call and, of them, missed by ``cache`` (all of them without one); resets the counts."""
    if cache is not None:
        requested, missed = cache.reset_counters()
    else:
        requested = missed = store.slow_rows
    store.slow_rows = 0
    return float(requested * store.row_bytes), float(missed * store.row_bytes)
