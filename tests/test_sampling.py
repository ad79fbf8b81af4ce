"""Sampler invariants, determinism, and the exact feature join of the loader pipeline."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.loader import MiniBatchLoader, SeedBatcher, split_into_batches
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig
from shardgnn.store.feature import LocalFeatureStore


def check_blocks(graph, out, fanouts, replace):
    """Every invariant a sampled computation graph must satisfy."""
    indptr, indices = graph.indptr, np.asarray(graph.indices)
    assert len(out.blocks) == len(fanouts)
    assert torch.equal(out.blocks[-1].dst_nodes_D, out.seeds)
    for layer in range(len(out.blocks) - 1):
        assert torch.equal(out.blocks[layer + 1].src_nodes_S, out.blocks[layer].dst_nodes_D)
    # blocks run input -> output, fanouts are given output layer first.
    for block, fanout in zip(out.blocks, reversed(fanouts)):
        src = block.src_nodes_S.numpy()
        assert np.unique(src).size == src.size, "src nodes must be unique"
        dst_local = block.dst_index_E().numpy()
        dst_global = src[dst_local]
        src_global = src[block.indices_E.numpy()]
        eid = block.edge_ids_E.numpy()
        # The edge exists: it sits in dst's CSR row and names src.
        assert np.all(indices[eid] == src_global)
        assert np.all((eid >= indptr[dst_global]) & (eid < indptr[dst_global + 1]))
        deg = np.diff(indptr)[src[: block.num_dst]]
        counts = np.diff(block.indptr_D1.numpy())
        if fanout < 0:
            assert np.array_equal(counts, deg)
        elif replace:
            assert np.array_equal(counts, np.where(deg > 0, fanout, 0))
        else:
            assert np.array_equal(counts, np.minimum(deg, fanout))
            for row in np.flatnonzero(counts > 1)[:200]:
                lo, hi = block.indptr_D1[row], block.indptr_D1[row + 1]
                assert np.unique(eid[lo:hi]).size == hi - lo, (
                    "duplicate neighbour without replacement"
                )


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts", [(5, 3), (10, 10, 10), (-1, 4)])
def test_sampled_blocks_satisfy_invariants(small_graph, fanouts, replace):
    sampler = NeighborSampler(
        small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=fanouts, replace=replace)
    )
    seeds = torch.from_numpy(
        np.random.default_rng(0).choice(small_graph.num_nodes, 128, replace=False)
    )
    check_blocks(small_graph, sampler.sample(seeds, seed=5), fanouts, replace)


def test_sampling_is_seeded_and_thread_count_independent(small_graph):
    seeds = torch.arange(0, 3000, 7)
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        s = NeighborSampler(
            small_graph.indptr,
            small_graph.indices,
            SamplerConfig(fanouts=(4, 4), num_threads=threads),
        )
        results.append(s.sample(seeds, seed=11))
    other = NeighborSampler(
        small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(4, 4))
    ).sample(seeds, seed=12)
    for a, b in zip(results[0].blocks, results[1].blocks):
        assert torch.equal(a.src_nodes_S, b.src_nodes_S) and torch.equal(a.edge_ids_E, b.edge_ids_E)
    assert not torch.equal(results[0].blocks[-1].edge_ids_E, other.blocks[-1].edge_ids_E)


def test_node_draws_do_not_depend_on_the_rest_of_the_frontier(small_graph):
    """Counter-based RNG: a node's sample depends on (seed, node) only, which is what lets a
    distributed owner reproduce the single-process sample."""
    s = NeighborSampler(small_graph.indptr, small_graph.indices, SamplerConfig(fanouts=(3,)))
    hub = int(np.argmax(small_graph.in_degree()))
    alone = s.sample(torch.tensor([hub]), seed=9).blocks[0]
    crowd = s.sample(torch.tensor([5, hub, 17]), seed=9).blocks[0]
    row = slice(int(crowd.indptr_D1[1]), int(crowd.indptr_D1[2]))
    assert torch.equal(alone.edge_ids_E, crowd.edge_ids_E[row])


def test_bad_sampler_config():
    with pytest.raises(ConfigError, match="fanout 0"):
        SamplerConfig(fanouts=(10, 0))
    with pytest.raises(ConfigError):
        SamplerConfig(fanouts=())


def test_split_into_batches_covers_every_item_once():
    for n, b in [(0, 4), (10, 3), (12, 4), (1, 100)]:
        ranges = split_into_batches(n, b)
        covered = [i for s, e in ranges for i in range(s, e)]
        assert covered == list(range(n))
        assert all(e - s <= b for s, e in ranges)
    assert split_into_batches(10, 3, drop_last=True) == [(0, 3), (3, 6), (6, 9)]
    with pytest.raises(ConfigError):
        split_into_batches(10, 0)


def test_seed_batcher_shuffles_per_epoch():
    batcher = SeedBatcher(np.arange(100), 30, shuffle=True, seed=1)
    epoch0 = torch.cat([s for _, s in batcher])
    batcher.set_epoch(1)
    epoch1 = torch.cat([s for _, s in batcher])
    assert sorted(epoch0.tolist()) == sorted(epoch1.tolist()) == list(range(100))
    assert not torch.equal(epoch0, epoch1)
    batcher.set_epoch(0)
    assert torch.equal(torch.cat([s for _, s in batcher]), epoch0)


def test_feature_join_is_exact(arange_graph):
    """With x[i] = i, every fetched row must name its own node."""
    g = arange_graph
    sampler = NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(5, 5)))
    labels = torch.from_numpy(g.y)
    loader = MiniBatchLoader(
        g.train_idx,
        sampler,
        LocalFeatureStore(g.x),
        LocalFeatureStore(labels),
        batch_size=64,
        shuffle=True,
        seed=0,
    )
    seen = []
    for batch in loader:
        assert torch.equal(batch.x_SF[:, 0], batch.sample.input_nodes.to(torch.float32))
        assert torch.equal(batch.x_SF[:, 2], batch.sample.input_nodes.to(torch.float32))
        assert torch.equal(batch.y, labels[batch.sample.seeds])
        seen.append(batch.sample.seeds)
    assert sorted(torch.cat(seen).tolist()) == sorted(g.train_idx.tolist())
    assert set(loader.timer.seconds) == {"sample", "fetch"}


def test_memory_mapped_feature_store(tmp_path, arange_graph):
    np.save(tmp_path / "x.npy", arange_graph.x)
    store = LocalFeatureStore(np.load(tmp_path / "x.npy", mmap_mode="r"))
    ids = torch.tensor([5, 0, 5, 2999])
    assert torch.equal(store.gather(ids)[:, 1], ids.to(torch.float32))
    with pytest.raises(IndexError):
        store.gather(torch.tensor([3000]))


class _RowsAliveAtGather(LocalFeatureStore):
    """A local store that notes, at each gather, how many of the row tensors it gave out before
    are still alive (held by someone)."""

    def __init__(self, x):
        super().__init__(x)
        self.given: list = []
        self.alive_at_gather: list[int] = []

    def _gather(self, ids):
        import weakref

        self.alive_at_gather.append(sum(ref() is not None for ref in self.given))
        rows = super()._gather(ids)
        self.given.append(weakref.ref(rows))
        return rows


def _one_batch_at_a_time_loader(g):
    store = _RowsAliveAtGather(g.x)
    sampler = NeighborSampler(g.indptr, g.indices, SamplerConfig(fanouts=(5, 5)))
    labels = LocalFeatureStore(torch.from_numpy(g.y))
    loader = MiniBatchLoader(
        g.train_idx, sampler, store, labels, batch_size=16, shuffle=False, seed=0
    )
    return loader, store


def test_the_loader_lets_go_of_a_batch_before_fetching_the_next(arange_graph):
    # An evaluation batch's input rows can be a GB: a consumer that drops a batch must not find
    # the loader still holding it while the next one is gathered (two batches' rows alive).
    loader, store = _one_batch_at_a_time_loader(arange_graph)
    for batch in loader:
        assert batch.x_SF.shape[0] > 0
        del batch
    assert len(store.alive_at_gather) > 2
    assert store.alive_at_gather == [0] * len(store.alive_at_gather)


def test_evaluation_holds_one_batch_of_rows_at_a_time(arange_graph):
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.models import build_model
    from shardgnn.nn.targets import ClassTarget
    from shardgnn.train.minibatch import evaluate_batches

    g = arange_graph
    loader, store = _one_batch_at_a_time_loader(g)
    num_classes = int(g.y.max()) + 1
    model = build_model(ModelConfig(hidden=8, num_layers=2), g.x.shape[1], num_classes)
    evaluation = evaluate_batches(model, loader, torch.device("cpu"), ClassTarget(num_classes))
    assert len(store.alive_at_gather) > 2
    assert store.alive_at_gather == [0] * len(store.alive_at_gather)
    assert evaluation is not None
