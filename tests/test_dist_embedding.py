"""Learnable rows sharded by partition: P = 2 and 3 ranks, fed the same batches, hold exactly the
rows one process's table holds (within 1e-6), step after step and across checkpoint and resume;
every gather returns the owner's current rows; a rank holds only its own part's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardgnn.partition.book import PartitionBook
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.embedding import EmbeddingTable

from distributed_helpers import run_workers

NUM_NODES, DIM, SEED = 61, 5, 7


def _layout(world: int):
    """Uneven parts, and a relabelling: new id i is original node orig_ids[i]."""
    cuts = np.linspace(0, NUM_NODES, world + 1).astype(np.int64)
    cuts[1:-1] += np.arange(1, world) * 3  # uneven on purpose
    orig_ids = np.random.default_rng(1).permutation(NUM_NODES)
    return PartitionBook(cuts), orig_ids


def _batch(step: int, rank: int):
    """Rank ``rank``'s rows and gradients at ``step``: any nodes, repeats included, sometimes
    none at all."""
    rng = np.random.default_rng([step, rank])
    count = 0 if (step + rank) % 5 == 4 else int(rng.integers(1, 40))
    ids = rng.integers(0, NUM_NODES, count).astype(np.int64)
    return torch.from_numpy(ids), torch.from_numpy(rng.standard_normal((count, DIM)).astype("f4"))


def _sharded(ctx, world, optimizer, steps, resume_at):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.store.dist_embedding import DistEmbeddingTable

    book, orig_ids = _layout(world)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    start, end = book.part_range(ctx.rank)
    config = EmbeddingConfig(dim=DIM, optimizer=optimizer, lr=0.05)

    def table():
        return DistEmbeddingTable(book, ctx.rank, comm, config, SEED, orig_ids[start:end])

    rows = table()
    gathered = []
    for step in range(steps):
        if step == resume_at:  # "restart": a new table from this rank's checkpointed state
            state = {k: v.clone() for k, v in rows.state_dict().items()}
            rows = table()
            rows.load_state_dict(state)
        ids, grad = _batch(step, ctx.rank)
        gathered.append(rows.gather(ids).numpy())  # what the step would read
        rows.apply_gradients(ids, grad)
    local = rows.local
    return start, local.weight.numpy().copy(), gathered, local.weight.shape[0], int(local.steps)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(("world", "optimizer"), [(2, "adam"), (3, "adagrad"), (3, "adam")])
def test_sharded_rows_equal_one_table(world, optimizer):
    steps = 9
    book, orig_ids = _layout(world)
    reference = EmbeddingTable(
        NUM_NODES,
        EmbeddingConfig(dim=DIM, optimizer=optimizer, lr=0.05),
        SEED,
        init_ids=orig_ids,
    )
    expected_reads = []
    for step in range(steps):
        batches = [_batch(step, rank) for rank in range(world)]
        expected_reads.append([reference.weight[ids].numpy().copy() for ids, _ in batches])
        reference.apply_gradients(
            torch.cat([ids for ids, _ in batches]), torch.cat([g for _, g in batches])
        )
    results = run_workers(_sharded, world, world, optimizer, steps, 4)
    for rank, (start, weight, gathered, held, step_count) in enumerate(results):
        end = start + held
        assert (start, end) == book.part_range(rank) and held < NUM_NODES  # only its own rows
        np.testing.assert_allclose(weight, reference.weight[start:end].numpy(), atol=1e-6, rtol=0)
        assert step_count == steps  # every owner stepped every step, rows used or not
        for step in range(steps):
            np.testing.assert_allclose(gathered[step], expected_reads[step][rank], atol=1e-6)


def _cached(ctx, world, policy, staleness, steps):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.store.cache.build import build_cache
    from shardgnn.store.cache.config import CacheConfig
    from shardgnn.store.dist_embedding import DistEmbeddingTable

    book, orig_ids = _layout(world)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    start, end = book.part_range(ctx.rank)
    config = EmbeddingConfig(dim=DIM, optimizer="adagrad", lr=0.05)
    rows = DistEmbeddingTable(book, ctx.rank, comm, config, SEED, orig_ids[start:end])
    degree = np.random.default_rng(5).integers(1, 50, NUM_NODES)
    rows.cache_rows(
        build_cache(
            CacheConfig(policy=policy, size="20"),
            rows.owners,
            fill_from=rows.owners,
            degree=degree,
            presample_counts=lambda: degree,
            max_age=staleness,
        )
    )
    gathered = []
    for step in range(steps):
        ids, grad = _batch(step, ctx.rank)
        gathered.append(rows.gather(ids).numpy())
        rows.apply_gradients(ids, grad)
    cache = rows.cache
    return gathered, cache.served_ages.tolist(), cache.refreshed, cache.core.requested


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(("policy", "staleness"), [("lru", 0), ("lru", 2), ("degree", 3)])
def test_cached_rows_are_never_older_than_the_bound(policy, staleness):
    """HET's bounded staleness, checked value by value: every row a rank reads at step t equals
    its owner's row at some step in [t - s, t] (one table fed the same batches gives the rows of
    every step); s = 0 reads the current rows only."""
    world, steps = 2, 14
    book, orig_ids = _layout(world)
    reference = EmbeddingTable(
        NUM_NODES, EmbeddingConfig(dim=DIM, optimizer="adagrad", lr=0.05), SEED, init_ids=orig_ids
    )
    history = []  # the table at the start of every step
    for step in range(steps):
        history.append(reference.weight.numpy().copy())
        batches = [_batch(step, rank) for rank in range(world)]
        reference.apply_gradients(
            torch.cat([ids for ids, _ in batches]), torch.cat([g for _, g in batches])
        )
    results = run_workers(_cached, world, world, policy, staleness, steps)
    stale_reads = 0
    for rank, (gathered, ages, refreshed, requested) in enumerate(results):
        assert requested > 0
        # s = 0: a row fetched this step is never read again before the update, so none is
        # served from the cache; s > 0: the cache served rows
        assert len(ages) == staleness + 1 and (sum(ages) > 0) == (staleness > 0)
        for step in range(steps):
            ids = _batch(step, rank)[0].numpy()
            for j, node in enumerate(ids):
                diffs = [
                    np.abs(gathered[step][j] - history[t][node]).max()
                    for t in range(max(0, step - staleness), step + 1)
                ]
                assert min(diffs) <= 1e-6, (rank, step, node, diffs)
                stale_reads += diffs[-1] > 1e-6
        if staleness:
            assert refreshed > 0  # rows past the bound were fetched again
    assert (stale_reads > 0) == (staleness > 0)  # s > 0 did serve older rows
