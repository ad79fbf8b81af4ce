"""Historical embeddings (``--historical L:AGE``): every served entry is checked against the
owners' pushes (right node, right stamp, never older than the bound, the latest push when owners
push every step); sampled blocks skip exactly the served nodes; age 0 is exact training bit for
bit; training with a bound stays as accurate as exact training; a resumed run equals an
uninterrupted one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.nn.models import with_history
from shardgnn.partition.book import PartitionBook
from shardgnn.sampling.config import SamplerConfig
from shardgnn.store.cache.config import CacheConfig
from shardgnn.train.config import RunConfig, TrainConfig

from distributed_helpers import run_workers, run_workers_each

NUM_NODES = 90


def _computed(step: int, rank: int) -> np.ndarray:
    """The nodes rank ``rank``'s batch computes at ``step`` (any owners, sorted, unique)."""
    rng = np.random.default_rng([step, rank, 7])
    return np.unique(rng.integers(0, NUM_NODES, int(rng.integers(0, 40))))


def _tables(ctx, age: int, push_every: int, steps: int, mode: str = "push", scope="remote"):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.store.historical import HistoricalEmbeddings

    world, rank = ctx.world_size, ctx.rank
    book = PartitionBook(np.linspace(0, NUM_NODES, world + 1).astype(np.int64))
    start, end = book.part_range(rank)
    comm = Communicator(rank, world, ctx.group)
    # every other remote node is watched
    halo = np.array([v for v in range(0, NUM_NODES, 2) if not start <= v < end], dtype=np.int64)
    tables = HistoricalEmbeddings(
        book, rank, comm, halo, range(1, 2), age, push_every, mode=mode, scope=scope
    )
    own = (halo[:0] if scope == "remote" else np.arange(start, end)).astype(np.int64)
    served_total = 0
    for step in range(steps):
        # a block: dst nodes first (never served), then other src nodes
        rng = np.random.default_rng([step, rank, 3])
        src = rng.permutation(NUM_NODES)[:50].astype(np.int64)
        mask = tables.prune(1, src, 10)
        assert not mask[:10].any()
        served = src[mask]
        assert np.all(np.isin(served, np.concatenate([halo, own])))
        if scope == "all":  # every kept own node computed within the bound is served
            others = src[10:]
            recent = [
                v
                for v in others
                if start <= v < end
                and any(v in _computed(t, rank) for t in range(max(0, step - age), step))
            ]
            assert np.all(np.isin(recent, served))
        rows = tables.read(1, served).numpy()
        if served.size:
            assert np.array_equal(rows[:, 0], served)  # the node's own row
            stamps = rows[:, 1].astype(np.int64)
            assert np.all((step - stamps >= 1) & (step - stamps <= age))
            assert np.array_equal(rows[:, 2], book.owner(served))  # pushed by its owner
            latest = push_every == 1 and mode == "push"
            for v, stamp in zip(served, stamps):  # the owner's latest computation before this
                if latest or start <= v < end:
                    owner = int(book.owner(np.array([v]))[0])
                    last = max(t for t in range(step) if v in _computed(t, owner))
                    assert stamp == last
        served_total += served.size
        nodes = _computed(step, rank)
        h = torch.tensor([[v, step, rank] for v in nodes], dtype=torch.float32).reshape(-1, 3)
        tables.after_step({1: (nodes, h)})
    return served_total, tables.counters()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("world", "age", "push_every", "mode", "scope"),
    [
        (2, 3, 1, "push", "remote"),
        (3, 4, 3, "push", "remote"),
        (2, 0, 1, "push", "remote"),
        (2, 3, 1, "pull", "remote"),
        (3, 0, 1, "pull", "remote"),
        (2, 3, 1, "push", "all"),
        (3, 4, 3, "pull", "all"),
        (2, 0, 1, "pull", "all"),
    ],
)
def test_served_entries_are_the_owners_rows_within_the_bound(world, age, push_every, mode, scope):
    results = run_workers(_tables, world, age, push_every, 25, mode, scope)
    served = sum(r[0] for r in results)
    if age == 0:
        assert served == 0  # age 0 serves nothing: exact
    else:
        assert served > 50
        for _, counters in results:
            lookups, hits, _, *ages = counters
            assert hits <= lookups and sum(ages) == hits and ages[0] == 0


def _permutation(world: int) -> np.ndarray:
    """A partition's new id -> original id (another one per worker count)."""
    return np.random.default_rng(world).permutation(NUM_NODES).astype(np.int64)


def _tables_of(ctx, scope: str, push_every: int, steps: int, old_states=None):
    """Historical tables over ``ctx.world_size`` parts of a permuted graph (every remote node of
    even new id watched), after ``steps`` steps of owners computing ``[original id, step,
    rank]`` rows (push mode), or filled from ``old_states`` (re-sharded): this rank's state
    dict."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.store.historical import HistoricalEmbeddings

    world, rank = ctx.world_size, ctx.rank
    orig = _permutation(world)
    book = PartitionBook(np.linspace(0, NUM_NODES, world + 1).astype(np.int64))
    start, end = book.part_range(rank)
    halo = np.array([v for v in range(0, NUM_NODES, 2) if not start <= v < end], dtype=np.int64)
    comm = Communicator(rank, world, ctx.group)
    tables = HistoricalEmbeddings(
        book, rank, comm, halo, range(1, 2), 3, push_every, scope=scope, orig_ids=orig
    )
    if old_states is not None:
        tables.load_resharded(old_states)
        return tables.state_dict()
    for step in range(steps):
        nodes = _computed(step, rank)
        nodes = nodes[book.owner(nodes) == rank]  # what owners keep and push
        h = torch.tensor([[orig[v], step, rank] for v in nodes], dtype=torch.float32)
        tables.after_step({1: (nodes, h.reshape(-1, 3))})
    return tables.state_dict()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(("scope", "push_every"), [("remote", 1), ("all", 3)])
def test_tables_of_3_workers_re_shard_onto_2_by_original_id(scope, push_every):
    """Issue 33: the tables of a 3-worker job resumed by 2 workers over another partition hold,
    for every node they watch (and with scope all, own), the freshest entry the old job kept of
    it: its old owner's last computation before the checkpoint, stamped with that step (pushed
    every step; or kept by the owner, its watchers' copies up to 3 steps older); nodes the old
    job kept nothing of stay empty."""
    from shardgnn.store.historical import NEVER

    steps = 12
    old = run_workers(_tables_of, 3, scope, push_every, steps)
    new = run_workers(_tables_of, 2, scope, push_every, steps, old)
    orig3, book3 = _permutation(3), PartitionBook(np.linspace(0, NUM_NODES, 4).astype(np.int64))
    old_id = np.argsort(orig3)  # original id -> the 3-worker job's id

    def expected(u: int, own: bool) -> tuple[int, int]:
        """(stamp, old owner) of original node ``u``'s freshest entry in the old job."""
        v = int(old_id[u])
        owner = int(book3.owner(np.array([v]))[0])
        kept = (v % 2 == 0) or (scope == "all")  # watched by another rank, or kept by its owner
        last = [t for t in range(steps) if v in _computed(t, owner)]
        return (last[-1] if kept and last else NEVER), owner

    checked = 0
    for state in new:
        assert int(state["step"]) == steps
        for ids_key, table in (("watch_ids", ""), ("own_node_ids", "own_")):
            stamps = state[f"{table}stamps.1"].numpy()
            rows = state.get(f"{table}rows.1")
            for i, u in enumerate(state[ids_key].numpy()):
                stamp, owner = expected(int(u), own=table == "own_")
                assert stamps[i] == stamp, (table, u)
                if stamp != NEVER:
                    assert rows[i].tolist() == [float(u), float(stamp), float(owner)]
                    checked += 1
    assert checked > 15


def test_with_history_merges_in_order_and_passes_gradients_to_computed_rows():
    mask = torch.tensor([False, True, False, True, True])
    h = torch.tensor([[1.0], [2.0]], requires_grad=True)
    rows = torch.tensor([[10.0], [20.0], [30.0]])
    out = with_history(h, mask, rows)
    assert out.flatten().tolist() == [1.0, 10.0, 2.0, 20.0, 30.0]
    out.sum().backward()
    assert h.grad.flatten().tolist() == [1.0, 1.0]


def test_historical_settings_are_checked():
    two = RunConfig(workers=2)
    with pytest.raises(ConfigError, match="applies to distributed mini-batch node"):
        TrainConfig(historical="1:2")
    with pytest.raises(ConfigError, match=r"must lie in \[1, 1\]"):
        TrainConfig(historical="2:2", sampler=SamplerConfig(fanouts=(5, 5)), run=two)
    with pytest.raises(ConfigError, match="LAYER:AGE"):
        TrainConfig(historical="1-2", sampler=SamplerConfig(fanouts=(5, 5)), run=two)
    with pytest.raises(ConfigError, match="--overlap on"):
        TrainConfig(historical="1:2", run=RunConfig(workers=2, overlap="on"))
    with pytest.raises(ConfigError, match="--cache-policy belady"):
        TrainConfig(historical="1:2", cache=CacheConfig(policy="belady"), run=two)
    config = TrainConfig(historical="1:3", sampler=SamplerConfig(fanouts=(5, 5, 5)), run=two)
    assert config.historical_layers == range(1, 3) and config.historical_push_interval == 3
    with pytest.raises(ConfigError, match="add --historical L:AGE"):
        TrainConfig(historical_scope="all", run=two)
    with pytest.raises(ConfigError, match="--historical-mode is pull"):
        TrainConfig(historical="1:3", historical_mode="pull", historical_push_every=2, run=two)


def _train(ctx, path, historical, epochs, mode="push", scope="remote"):
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig
    from shardgnn.train.worker import train_with_context

    config = TrainConfig(
        model=ModelConfig(model="sage", hidden=32, num_layers=2),
        sampler=SamplerConfig(fanouts=(8, 8)),
        optim=OptimConfig(epochs=epochs, lr=0.01),
        batch_size=128,
        progress=False,
        seed=0,
        historical=historical,
        historical_mode=mode,
        historical_scope=scope,
        run=RunConfig(partitions=path, overlap="off", host_sharing="off"),
    )
    return train_with_context(config, ctx)


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory):
    from shardgnn.graph.synthetic import SyntheticConfig, generate
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph

    g = generate(SyntheticConfig(nodes=4000, degree=10, classes=4, features=16, snr=1.5, seed=9))
    path = tmp_path_factory.mktemp("historical") / "p2"
    result = partition_graph(g, PartitionConfig(num_parts=2, method="metis", seed=0))
    write_partitions(g, result.assignment, path, method=result.method)
    return str(path)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_age_zero_is_exact_and_a_bound_keeps_accuracy(two_parts):
    settings = [(None, "push", "remote"), ("1:0", "push", "remote"), ("1:3", "push", "remote")]
    settings += [("1:3", "pull", "remote"), ("1:0", "pull", "remote")]
    settings += [("1:0", "push", "all"), ("1:3", "push", "all")]
    runs = [(two_parts, historical, 6, mode, scope) for historical, mode, scope in settings]
    exact, zero, bounded, pulled, zero_pull, zero_all, every = (
        ranks[0] for ranks in run_workers_each(_train, 2, runs)
    )
    assert [e["loss"] for e in zero["epochs"]] == [e["loss"] for e in exact["epochs"]]
    assert zero["test_acc"] == exact["test_acc"]
    assert zero["historical"]["hit_rate"] == 0.0
    summary = bounded["historical"]
    assert summary["hit_rate"] > 0.3 and summary["max_served_age"] <= 3
    assert summary["traffic_mb_per_epoch"] > 0 and summary["memory_mb"] > 0
    assert abs(bounded["test_acc"] - exact["test_acc"]) <= 0.02, (bounded, exact["test_acc"])
    # served nodes are not expanded: fewer rows fetched, fewer neighbours sampled, and of the
    # sampled edges more come from the worker's own part
    assert 0.5 < exact["local_edge_share"] < bounded["local_edge_share"] <= 1.0
    for stage in ("fetch", "sample"):
        assert bounded["comm"][stage]["bytes_sent"] < exact["comm"][stage]["bytes_sent"]
    # pulled rows: the same bound, the same checks, only rows that are read move
    assert pulled["historical"]["mode"] == "pull" and pulled["historical"]["hit_rate"] > 0.3
    assert pulled["historical"]["max_served_age"] <= 3
    assert abs(pulled["test_acc"] - exact["test_acc"]) <= 0.02
    assert [e["loss"] for e in zero_pull["epochs"]] == [e["loss"] for e in exact["epochs"]]
    # own nodes served too (GNNAutoScale): age 0 is exact; a bound samples fewer edges than
    # serving remote nodes only, moves fewer bytes than exact training, and keeps accuracy
    # (remote bytes need not drop below scope remote's: owners compute, and so push, fewer rows)
    assert [e["loss"] for e in zero_all["epochs"]] == [e["loss"] for e in exact["epochs"]]
    assert every["historical"]["scope"] == "all" and every["historical"]["max_served_age"] <= 3
    assert every["historical"]["hit_rate"] > 0.3
    assert every["sampled_edges_per_epoch"] < 0.8 * bounded["sampled_edges_per_epoch"]
    for stage in ("fetch", "sample"):
        assert every["comm"][stage]["bytes_sent"] < exact["comm"][stage]["bytes_sent"]
    assert abs(every["test_acc"] - exact["test_acc"]) <= 0.03, (every["test_acc"], exact)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(("mode", "scope"), [("push", "remote"), ("pull", "all")])
def test_a_resumed_run_with_historical_embeddings_equals_an_uninterrupted_one(
    two_parts, tmp_path, mode, scope
):
    import json

    from shardgnn.cli import main

    from conftest import assert_same_weights, final_weights

    argv = ["train", "--partitions", two_parts, "--fanouts", "8,8", "--hidden", "32"]
    argv += ["--batch-size", "128", "--historical", "1:3", "--host-sharing", "off", "--quiet"]
    argv += ["--historical-mode", mode, "--historical-scope", scope]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert main([*argv, "--epochs", "4", "--checkpoint-dir", str(straight), "--results", a]) == 0
    stop = [*argv, "--checkpoint-dir", str(stopped), "--results", b]
    assert main([*stop, "--epochs", "2"]) == 0
    assert main([*stop, "--epochs", "4", "--resume"]) == 0
    assert_same_weights(final_weights(straight), final_weights(stopped))
    first, resumed = (json.loads(open(f).read()) for f in (a, b))
    assert [e["loss"] for e in first["epochs"]] == [e["loss"] for e in resumed["epochs"]]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_historical_training_resumes_on_another_worker_count(two_parts, tmp_path, capfd):
    """Issue 33: a 2-worker run with pulled historical embeddings of every node (the tables,
    own and remote) resumes on 3 workers: the tables are rebuilt by original node id, every
    entry served afterwards is checked against the age bound, and accuracy stays that of the
    uninterrupted 2-worker run."""
    import json

    from shardgnn.cli import main
    from shardgnn.graph.synthetic import SyntheticConfig, generate
    from shardgnn.partition.format import write_partitions
    from shardgnn.partition.methods import PartitionConfig, partition_graph

    g = generate(SyntheticConfig(nodes=4000, degree=10, classes=4, features=16, snr=1.5, seed=9))
    p3 = tmp_path / "p3"
    result = partition_graph(g, PartitionConfig(num_parts=3, method="metis", seed=0))
    write_partitions(g, result.assignment, p3, method=result.method)
    argv = ["train", "--fanouts", "8,8", "--hidden", "32", "--batch-size", "128"]
    argv += ["--historical", "1:3", "--historical-mode", "pull", "--historical-scope", "all"]
    argv += ["--host-sharing", "off", "--quiet"]
    straight, resumed = tmp_path / "straight.json", tmp_path / "resumed.json"
    assert (
        main([*argv, "--partitions", two_parts, "--epochs", "4", "--results", str(straight)]) == 0
    )
    ck = ["--checkpoint-dir", str(tmp_path / "ck")]
    assert main([*argv, *ck, "--partitions", two_parts, "--epochs", "2"]) == 0
    capfd.readouterr()
    resume = [*argv, *ck, "--partitions", str(p3), "--epochs", "4", "--resume"]
    assert main([*resume, "--results", str(resumed)]) == 0
    assert "(2 of 4 epochs done; written by 2 workers, re-sharded for 3)" in capfd.readouterr().out
    first, then = (json.loads(f.read_text()) for f in (straight, resumed))
    assert then["workers"] == 3 and [e["epoch"] for e in then["epochs"]] == [1, 2, 3, 4]
    assert then["historical"]["hit_rate"] > 0.3 and then["historical"]["max_served_age"] <= 3
    assert abs(then["test_acc"] - first["test_acc"]) <= 0.03, (then["test_acc"], first)
