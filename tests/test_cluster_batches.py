"""Cluster batches (``--batching cluster``): every epoch the batches of all ranks are a partition
of the training nodes, every rank runs the same number of batches, batches follow the METIS
clusters of the rank's part (their seeds are far more often neighbours than random seeds are),
and a resumed epoch yields the same batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.loader.cluster_batches import ClusterBatcher
from shardgnn.loader.dist_batches import DistSeedBatcher
from shardgnn.partition.format import write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.train.config import RunConfig, TrainConfig


@pytest.fixture(scope="module")
def pset(tmp_path_factory):
    from shardgnn.partition.format import read_partitions

    # communities of 50 nodes (7 of every 8 edges inside one): structure METIS can find
    rng = np.random.default_rng(0)
    n, size = 3000, 50
    src = np.repeat(np.arange(n), 8)
    inside = (src // size) * size + rng.integers(0, size, src.size)
    dst = np.where(rng.random(src.size) < 7 / 8, inside, rng.integers(0, n, src.size))
    graph = Graph.from_edge_index(src, dst, n, name="communities").symmetrize()
    graph = dataclasses.replace(graph, train_idx=np.sort(rng.permutation(n)[: 2 * n // 3]))
    path = tmp_path_factory.mktemp("clusters") / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=3, method="metis", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method)
    return read_partitions(path)


def _batchers(pset, cls, batch_size=64):
    train = pset.global_split("train")
    out = []
    for rank in range(pset.num_parts):
        if cls is ClusterBatcher:
            part = pset.load_part(rank)
            args = (np.asarray(part.indptr), np.asarray(part.indices), 4)
            out.append(cls(train, pset.book, rank, pset.num_parts, batch_size, *args, seed=5))
        else:
            out.append(
                cls(train, pset.book, rank, pset.num_parts, batch_size, shuffle=True, seed=5)
            )
    return train, out


def _edges_inside(pset, batches) -> float:
    """Share of the in-edges of batch seeds whose source is a seed of the same batch."""
    graph = pset.reassemble()
    inside = total = 0
    for seeds in batches:
        members = np.zeros(graph.num_nodes, dtype=bool)
        members[seeds] = True
        for v in seeds:
            sources = graph.indices[graph.indptr[v] : graph.indptr[v + 1]]
            inside += int(members[sources].sum())
            total += len(sources)
    return inside / max(total, 1)


def test_cluster_batches_partition_the_training_nodes_evenly(pset):
    train, batchers = _batchers(pset, ClusterBatcher)
    counts = {len(b) for b in batchers}
    assert len(counts) == 1  # the same number of batches on every rank
    for epoch in (0, 1):
        seen = []
        for b in batchers:
            b.set_epoch(epoch)
            batches = [seeds.numpy() for _, seeds in b]
            sizes = [len(s) for s in batches]
            assert max(sizes) - min(sizes) <= 1
            seen.extend(batches)
        everything = np.concatenate(seen)
        assert np.array_equal(np.sort(everything), np.sort(train))  # each node once
    # another epoch, another cluster order; a resumed epoch repeats its batches
    b = batchers[0]
    b.set_epoch(0)
    first = [s.numpy() for _, s in b]
    b.set_epoch(1)
    assert not all(np.array_equal(x, y) for x, y in zip(first, [s.numpy() for _, s in b]))
    b.set_epoch(0, start=2)
    resumed = [s.numpy() for _, s in b]
    assert all(np.array_equal(x, y) for x, y in zip(first[2:], resumed))


def test_cluster_batches_keep_neighbours_together(pset):
    _, clustered = _batchers(pset, ClusterBatcher)
    _, random = _batchers(pset, DistSeedBatcher)
    share = {}
    for name, batchers in (("cluster", clustered), ("random", random)):
        batches = [s.numpy() for b in batchers for _, s in b]
        share[name] = _edges_inside(pset, batches)
    assert share["cluster"] > 3 * share["random"], share


def test_more_clusters_than_metis_can_fill_still_partition_the_seeds(pset):
    # batch size 4 asks for hundreds of clusters per part: METIS leaves some empty, which
    # must neither fail nor lose a seed
    train, batchers = _batchers(pset, ClusterBatcher, batch_size=4)
    seen = np.concatenate([s.numpy() for b in batchers for _, s in b])
    assert np.array_equal(np.sort(seen), np.sort(train))


def test_cluster_batching_is_refused_where_it_does_not_apply():
    with pytest.raises(ConfigError, match="--batching cluster .* distributed mini-batch node"):
        TrainConfig(batching="cluster")
    with pytest.raises(ConfigError, match="--batching cluster"):
        TrainConfig(batching="cluster", task="link", run=RunConfig(workers=2))
    with pytest.raises(ConfigError, match="--clusters-per-batch 0"):
        TrainConfig(batching="cluster", clusters_per_batch=0, run=RunConfig(workers=2))
    assert TrainConfig(batching="cluster", run=RunConfig(workers=2)).batching == "cluster"


@pytest.mark.parametrize("halo", [0, 1, 2])
def test_a_bounded_halo_keeps_only_edges_among_the_nodes_it_reached(pset, halo):
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.neighbor import NeighborSampler, sample_blocks, sample_neighbors

    graph = pset.reassemble()
    config = SamplerConfig(fanouts=(5, 5))
    plain = NeighborSampler(graph.indptr, graph.indices, config)
    seeds = np.arange(0, 3000, 37)
    node_map = np.full(graph.num_nodes, -1, dtype=np.int64)
    bounded = sample_blocks(
        seeds,
        config,
        11,
        one_hop=lambda frontier, fanout, s: sample_neighbors(
            plain.indptr, plain.indices, frontier, fanout, False, s
        ),
        degree_of=lambda nodes: np.diff(plain.indptr)[nodes],
        node_map=node_map,
        halo_hops=halo,
    )
    exact = plain.sample(seeds, 11)
    if halo >= 1:  # hop 0 unbounded: the last hop draws for the same frontier as the plain one
        dropped_or_kept = bounded.num_sampled_edges + bounded.num_dropped_edges
        assert dropped_or_kept == exact.num_sampled_edges
    reached = seeds if halo == 0 else bounded.blocks[-1].src_nodes_S.numpy()
    if halo == 2:
        assert bounded.num_dropped_edges == 0
        reached = bounded.blocks[0].src_nodes_S.numpy()
    for block in bounded.blocks:
        src = block.src_nodes_S.numpy()
        assert np.all(np.isin(src, reached))  # no node beyond the halo
        dst = np.repeat(block.dst_nodes_D.numpy(), np.diff(block.indptr_D1.numpy()))
        for u, v in zip(src[block.indices_E.numpy()], dst):  # every edge is a graph edge
            assert u in graph.indices[graph.indptr[v] : graph.indptr[v + 1]]


def test_cluster_halo_settings_are_checked():
    two = RunConfig(workers=2)
    with pytest.raises(ConfigError, match="--batching cluster or drop it"):
        TrainConfig(cluster_halo=0, run=two)
    with pytest.raises(ConfigError, match="cluster-halo"):
        TrainConfig(batching="cluster", cluster_halo=4, run=two)
    assert TrainConfig(batching="cluster", cluster_halo=0, run=two).cluster_halo == 0


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cluster_batches_with_a_zero_halo_train_on_their_own_part(tmp_path):
    import json

    from shardgnn.cli import main

    out = tmp_path / "r.json"
    argv = ["train", "synthetic:nodes=3000", "--workers", "2", "--epochs", "1", "--quiet"]
    argv += ["--batching", "cluster", "--cluster-halo", "0", "--results", str(out)]
    assert main(argv) == 0
    results = json.loads(out.read_text())
    assert results["batching"] == "cluster"
    # only edges among a batch's seeds: almost all inside the worker's part, most drawn dropped
    assert results["local_edge_share"] > 0.95 and results["kept_edge_share"] < 0.5
