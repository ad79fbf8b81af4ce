"""Cluster batches (GraphTheta, Cluster-GCN): a batch is a group of clusters of the rank's own
part, so the seeds of a batch are neighbours of each other and their sampled neighbourhoods
overlap, and most of what they need is local by construction.

Each rank splits its own part with METIS into ``count x clusters_per_batch`` clusters once
(over the part's own edges, both directions). Every epoch the clusters are shuffled
(``seed``, epoch, rank) and the rank's training seeds, in cluster order, are cut into exactly
``count`` batches of near-equal size; ``count`` is the same on every rank (the seeds are dealt
out as for random batches, :func:`~shardgnn.loader.dist_batches.assign_seeds_evenly`), so every
rank runs the same number of steps and every training node is a seed exactly once per epoch.
Seeds a rank took over from another part (the even deal's surplus) form clusters of their own,
in id order.
"""

from __future__ import annotations

import warnings

import numpy as np

from shardgnn.graph.csr import Graph
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.partition.book import PartitionBook
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.seeding import mix_seed


def local_clusters(
    indptr: np.ndarray, indices: np.ndarray, start: int, end: int, num_clusters: int, seed: int
) -> np.ndarray:
    """METIS clusters (``int64 [end - start]``) of the part owning new ids ``[start, end)``, from
    its in-edge CSR (``indices`` in new global ids): only edges inside the part count."""
    n = end - start
    num_clusters = max(1, min(num_clusters, n))
    if num_clusters == 1:
        return np.zeros(n, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(indptr)))
    src = np.asarray(indices, dtype=np.int64) - start
    inside = (src >= 0) & (src < n)
    graph = Graph.from_edge_index(src[inside], dst[inside], n, name="local part").symmetrize()
    config = PartitionConfig(
        num_parts=num_clusters,
        method="metis",
        seed=seed,
        balance=("nodes",),
        allow_empty_parts=True,
    )
    # METIS may leave a cluster empty when clusters are small; an empty cluster is harmless here
    # (it contributes no batch), so its warning would only be noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(partition_graph(graph, config).assignment, dtype=np.int64)


class ClusterBatcher(DistSeedBatcher):
    """Yields ``(batch_index, seeds)`` for this rank: its training seeds grouped by cluster, the
    same seeds and number of batches on every rank as
    :class:`~shardgnn.loader.dist_batches.DistSeedBatcher`.

    Args:
        seeds: every training node (global new ids; the same array on every rank).
        book: the partition book.
        rank, world_size: this rank, and how many there are.
        batch_size: seeds per batch on one rank.
        indptr, indices: this rank's part (in-edge CSR, sources in new global ids).
        clusters_per_batch: METIS clusters per batch (the part is split into
            ``batches x clusters_per_batch`` clusters).
        seed: seed of METIS and of the per-epoch cluster order.
    """

    def __init__(
        self,
        seeds: np.ndarray,
        book: PartitionBook,
        rank: int,
        world_size: int,
        batch_size: int,
        indptr: np.ndarray,
        indices: np.ndarray,
        clusters_per_batch: int,
        *,
        seed: int,
    ):
        super().__init__(seeds, book, rank, world_size, batch_size, shuffle=True, seed=seed)
        start, end = book.part_range(rank)
        clusters = local_clusters(
            indptr, indices, start, end, self.count * clusters_per_batch, seed
        )
        own = (self.my_seeds >= start) & (self.my_seeds < end)
        labels = np.empty(self.my_seeds.shape[0], dtype=np.int64)
        labels[own] = clusters[self.my_seeds[own] - start]
        # Seeds from other parts: clusters of their own, batch-sized runs in id order.
        base = int(clusters.max()) + 1 if clusters.size else 0
        labels[~own] = base + np.arange(int((~own).sum())) // max(batch_size, 1)
        order = np.argsort(labels, kind="stable")
        self._sorted_seeds = self.my_seeds[order]
        self._bounds = np.flatnonzero(np.diff(labels[order])) + 1
        self.num_clusters = len(self._bounds) + (1 if labels.size else 0)

    def batches(self) -> list[np.ndarray]:
        """This epoch's ``count`` batches: the clusters in a shuffled order, seeds shuffled
        inside each cluster, cut into near-equal runs (most batches hold whole clusters)."""
        rng = np.random.default_rng(mix_seed(self.seed, self.epoch, self.rank))
        groups = np.split(self._sorted_seeds, self._bounds)
        order = rng.permutation(len(groups)) if groups else []
        ordered = [rng.permutation(groups[i]) for i in order]
        flat = np.concatenate(ordered) if ordered else np.zeros(0, dtype=np.int64)
        return np.array_split(flat.astype(np.int64), self.count)
