"""``--dependencies`` (NeutronStar's hybrid of communicating and caching remote dependencies in
sparse 1D full-graph training): the sets each worker computes and receives hold every layer's
in-edges, ``cache`` receives nothing, the hybrid follows its cost model node by node, and
training with either equals one process, its exchanged bytes those of the rows it receives."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardgnn.errors import ConfigError
from shardgnn.fullgraph.config import FullGraphConfig, PlanConfig
from shardgnn.fullgraph.dependencies import DependencyCosts, select_dependencies
from shardgnn.fullgraph.plan import (
    dependency_cost,
    dependency_costs,
    linear_layers,
    partition_edges,
    spmm_widths,
)
from shardgnn.fullgraph.rates import ComputeRates, MachineRates
from shardgnn.fullgraph.shard import _non_loop_degree
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.partition.book import PartitionBook
from shardgnn.partition.format import read_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.train.config import RunConfig, TrainConfig
from test_fullgraph import _assert_same_run, _config, _parts, _reference, _train_dist

from distributed_helpers import run_workers


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=600, degree=8, classes=4, features=12, seed=3))


def _local_fetch(indptr, indices, degree):
    """What the owners answer, read from the whole graph (one process plays every worker)."""

    def fetch(nodes):
        counts = indptr[nodes + 1] - indptr[nodes]
        sources = np.concatenate([indices[indptr[v] : indptr[v + 1]] for v in nodes] or [[]])
        sources = sources.astype(np.int64)
        return np.r_[0, np.cumsum(counts)], sources, degree[nodes], degree[sources]

    return fetch


def _worker_sets(graph, parts, rank, layers, mode, costs=None, nonzeros=None):
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices, dtype=np.int64)
    degree = _non_loop_degree(indptr, indices, 0)
    book = PartitionBook(np.linspace(0, graph.num_nodes, parts + 1).astype(np.int64))
    start, end = (int(v) for v in book.part_range(rank))
    own_indptr = indptr[start : end + 1] - indptr[start]
    own_sources = indices[indptr[start] : indptr[end]]
    met = np.unique(np.concatenate([np.arange(start, end), own_sources]))
    return select_dependencies(
        own_indptr, own_sources, np.arange(start, end), met, degree[met], layers, mode,
        _local_fetch(indptr, indices, degree), costs, nonzeros,
    )  # fmt: skip


def _costs(communicate, entry=1e-9, row=1e-9, input_s=0.0, input_nonzero_s=None):
    return DependencyCosts(tuple(communicate), (entry,) * len(communicate),
                           (row,) * len(communicate), input_s, input_nonzero_s)  # fmt: skip


def _in_neighbours(graph, nodes):
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
    return np.unique(np.concatenate([indices[indptr[v] : indptr[v + 1]] for v in nodes]))


def _check_sets(graph, sets, start, end):
    """Every layer computes a prefix from a longer one plus what it receives, which is exactly
    the in-neighbours it does not compute; the prefixes nest (``S_i = D_{i-1}``)."""
    assert np.array_equal(sets.nodes[: end - start], np.arange(start, end))
    assert len(np.unique(sets.nodes)) == len(sets.nodes)
    for layer in range(sets.num_layers):
        dst, src = sets.dst_rows[layer], sets.src_rows[layer]
        assert dst <= src <= len(sets.nodes)
        if layer > 0:
            assert sets.dst_rows[layer - 1] == src
        needed = _in_neighbours(graph, sets.nodes[:dst])
        held = np.intersect1d(needed, sets.nodes[:src])
        assert np.array_equal(np.union1d(held, sets.received[layer]), needed)
        assert len(np.intersect1d(sets.received[layer], sets.nodes[:src])) == 0
        indptr, columns, ids = sets.layer_csr(layer)
        assert np.array_equal(np.diff(indptr), np.diff(np.asarray(graph.indptr))[sets.nodes[:dst]])
        assert np.array_equal(np.unique(ids[columns]), needed)
    assert sets.dst_rows[-1] == end - start


@pytest.mark.parametrize("parts,layers", [(2, 2), (3, 3), (4, 1)])
def test_cache_holds_every_dependency_and_receives_nothing(graph, parts, layers):
    for rank in range(parts):
        sets = _worker_sets(graph, parts, rank, layers, "cache")
        start, end = rank * graph.num_nodes // parts, (rank + 1) * graph.num_nodes // parts
        _check_sets(graph, sets, start, end)
        assert all(len(r) == 0 for r in sets.received)
        # the rows computed at layer 0 are the L-hop in-neighbourhood of the own rows
        hood = np.arange(start, end)
        for _ in range(layers):
            hood = np.union1d(hood, _in_neighbours(graph, hood))
        assert np.array_equal(np.sort(sets.nodes), hood)


def test_hybrid_between_the_pure_choices(graph):
    start, end = 200, 400
    free = _worker_sets(graph, 3, 1, 3, "hybrid", _costs([0.0, 0.0, 0.0], input_s=1.0))
    _check_sets(graph, free, start, end)
    # communication costs nothing: 1d-sparse, every layer receiving the own rows' halo
    halo = np.setdiff1d(_in_neighbours(graph, np.arange(start, end)), np.arange(start, end))
    assert all(np.array_equal(r, halo) for r in free.received)
    assert free.src_rows == [end - start] * 3
    # exchanges dear enough that even a node bringing every new neighbour pays: cache
    dear = _worker_sets(graph, 3, 1, 3, "hybrid", _costs([1.0, 1e4, 1e9]))
    cache = _worker_sets(graph, 3, 1, 3, "cache")
    assert np.array_equal(dear.nodes, cache.nodes) and dear.src_rows == cache.src_rows


def test_hybrid_recomputes_exactly_the_rows_cheaper_than_their_exchange(graph):
    """Two layers: a halo node is recomputed when its in-edges and the in-neighbours only it
    brings cost less than its row's exchange, in order of fewest new neighbours."""
    costs = _costs([1e-6, 10e-9], entry=1e-9, row=0.0, input_s=2e-9)
    sets = _worker_sets(graph, 2, 0, 2, "hybrid", costs)
    _check_sets(graph, sets, 0, 300)
    halo = np.setdiff1d(_in_neighbours(graph, np.arange(300)), np.arange(300))
    recomputed = sets.nodes[300 : sets.src_rows[1]]
    assert 0 < len(recomputed) < len(halo)  # the costs split the halo
    # Order aside (each accepted node makes its new neighbours free for the next), a node is
    # recomputed when it pays even with all its new neighbours, and never when it would not
    # with none.
    known = np.union1d(np.arange(300), _in_neighbours(graph, np.arange(300)))
    for v in halo:
        in_edges = int(graph.indptr[v + 1] - graph.indptr[v])
        new = len(np.setdiff1d(_in_neighbours(graph, [v]), known))
        if costs.recompute_s(1, in_edges, new) < costs.communicate_s[1]:
            assert v in recomputed
        if costs.recompute_s(1, in_edges, 0) >= costs.communicate_s[1]:
            assert v not in recomputed
    # layer 0 caches the features of every node it needs: cheaper than their exchange
    assert len(sets.received[0]) == 0


def test_hybrid_caches_each_sparse_feature_row_by_its_own_non_zeros(graph):
    """Sparse features: layer 0 caches exactly the rows whose non-zeros cost less to transform
    than the row's exchange (here those with at most 2), receives the others; asked once, for
    the rows the layers above did not take."""
    nnz = np.random.default_rng(1).integers(0, 6, graph.num_nodes)
    asked = []

    def nonzeros(nodes):
        asked.append(nodes.copy())
        return nnz[nodes]

    # a mean row (input_s) would cost more than its exchange: one choice for all receives all
    costs = _costs([2.5e-9, 1e-12], entry=1e-6, input_s=3e-9, input_nonzero_s=1e-9)
    sets = _worker_sets(graph, 3, 1, 2, "hybrid", costs, nonzeros)
    _check_sets(graph, sets, 200, 400)
    assert len(asked) == 1 and np.all(np.diff(asked[0]) > 0)
    cached, received = sets.nodes[sets.dst_rows[0] : sets.src_rows[0]], sets.received[0]
    assert np.array_equal(np.union1d(cached, received), asked[0])
    assert len(cached) > 0 and len(received) > 0
    assert np.all(nnz[cached] <= 2) and np.all(nnz[received] >= 3)
    # priced by the mean row alone, every row is received
    mean = _worker_sets(graph, 3, 1, 2, "hybrid", _costs([2.5e-9, 1e-12], 1e-6, input_s=3e-9))
    assert mean.recomputed(0) == 0


def _rates(model, dims, link_bytes_s=1e9, spmm_s=1e-9, linear_s=1e-9, threads=1, sparse_s=None):
    """Machine rates written by hand (what `shardgnn plan --calibrate` measures)."""
    plan = PlanConfig(model=model, hidden=dims[1], layers=len(dims) - 1)
    forward, _ = spmm_widths(plan, dims[0], dims[-1])
    linears = linear_layers(plan, dims[0], dims[-1], sparse=False)
    compute = ComputeRates(
        threads=threads,
        spmm_s={w: spmm_s for w in forward},
        spmm_t_s={w: spmm_s for w in forward},
        linear_s={f"{a},{b},{int(g)}": linear_s for a, b, g, _ in linears},
        sparse_s={} if sparse_s is None else {dims[1]: sparse_s},
        elementwise_s=0.0,
        adam_s=0.0,
    )
    return MachineRates(cores=2, compute={threads: compute}, link_bytes_s=link_bytes_s,
                        latency_s=1e-5, link_samples=[])  # fmt: skip


def test_costs_from_the_machine_rates():
    costs = dependency_costs(_rates("gcn", [12, 8, 8, 4]), 1, "gcn", [12, 8, 8, 4], 32)
    # rows 8, 8, 4 wide; each with its gradient back (the first layer projects 12 -> 8 first)
    assert costs.communicate_s == pytest.approx((64e-9, 64e-9, 32e-9))
    assert costs.entry_s == pytest.approx((2e-9,) * 3) and costs.row_s == pytest.approx((1e-9,) * 3)
    assert costs.input_s == pytest.approx(1e-9)
    # aggregating the 12 raw features (hidden 16): no gradient to send back, no transform
    raw = dependency_costs(_rates("sage", [12, 16, 4]), 1, "sage", [12, 16, 4], 8)
    assert raw.input_s == 0.0 and raw.entry_s[0] == pytest.approx(1e-9)
    assert raw.row_s[0] == pytest.approx(2e-9)  # GraphSAGE: two linear layers a row
    assert costs.input_nonzero_s is None and raw.input_nonzero_s is None
    # sparse features (3 non-zeros a row on average): each row priced by its own
    rates = _rates("gcn", [12, 8, 8, 4], sparse_s=5e-9)
    sparse = dependency_costs(rates, 1, "gcn", [12, 8, 8, 4], 32, feature_nnz=3.0)
    assert sparse.input_nonzero_s == pytest.approx(5e-9)
    assert sparse.input_s == pytest.approx(15e-9)


def test_dependencies_config_errors():
    with pytest.raises(ConfigError, match="--dependencies cache: needs --spmm 1d-sparse"):
        FullGraphConfig(spmm="1d", dependencies="cache")
    with pytest.raises(ConfigError, match="--staleness 2"):
        FullGraphConfig(dependencies="cache", staleness=2)
    run = RunConfig(workers=2)
    with pytest.raises(ConfigError, match="add --plan-rates FILE"):
        TrainConfig(mode="full", run=run, full=FullGraphConfig(dependencies="hybrid"))
    with pytest.raises(ConfigError, match="--plan-rates r.json: needs --spmm auto or"):
        full = FullGraphConfig(spmm="1d-sparse", dependencies="cache")
        TrainConfig(mode="full", run=run, full=full, plan_rates="r.json")
    full = FullGraphConfig(spmm="1d-sparse", dependencies="hybrid")
    TrainConfig(mode="full", run=run, full=full, plan_rates="r.json")


def _count_bytes(ctx, config):
    from shardgnn.train.epoch import EpochRun
    from shardgnn.train.fullgraph import DistFullNodeSteps

    steps = DistFullNodeSteps(config, ctx)
    steps.spmm_comm.reset()
    steps.train_epoch(EpochRun(0, show_progress=False))
    deps = steps.graph.deps
    return steps.spmm_comm.stats["spmm"].bytes_sent, [len(r) for r in deps.received]


@pytest.fixture(scope="module")
def sparse_graph(graph):
    """The graph with 95 % of its features zero: stored sparse, fetched as non-zeros."""
    x = graph.x.copy()
    x[np.random.default_rng(0).random(x.shape) > 0.05] = 0.0
    return dataclasses.replace(graph, x=x)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "world,mode,model,hidden,sparse",
    [(2, "cache", "gcn", 16, False), (3, "cache", "gin", 8, False),
     (3, "hybrid", "sage", 8, False), (2, "hybrid", "gcn", 8, False),
     (3, "cache", "gcn", 8, True), (2, "hybrid", "gcn", 8, True)],
)  # fmt: skip
def test_dependencies_train_as_one_process(
    tmp_path, tmp_path_factory, graph, sparse_graph, world, mode, model, hidden, sparse
):
    """Dropout on, 3 layers; hidden 8 projects the 12 features first (the cached feature rows
    are transformed here), hidden 16 aggregates them; sparse features are cached sparse. The
    hybrid's hand-written rates split the remote rows between recomputing and receiving (with
    sparse features, layer 0's feature rows too, by their own non-zeros); its bytes are those
    of the rows received, and `shardgnn plan` selects the same rows."""
    graph = sparse_graph if sparse else graph
    path = _parts(tmp_path_factory, graph, world, "metis")
    full = FullGraphConfig(dependencies="cache")
    if mode == "hybrid":
        dims = [12, hidden, hidden, 4]
        # a row of 8 floats and its gradient: 1.28e-7 s; a sparse row's transform 1e-7 s per
        # non-zero: the rows of at most one non-zero are cached
        machine = _rates(model, dims, link_bytes_s=5e8, sparse_s=1e-7 if sparse else None)
        rates = tmp_path / "rates.json"
        rates.write_text(json.dumps({"rates": machine.to_dict()}))
    config = _config(path, model, full)
    if mode == "hybrid":
        full = dataclasses.replace(config.full, dependencies=mode)
        config = dataclasses.replace(config, full=full, plan_rates=str(rates))
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, hidden=hidden))
    ref = _reference(graph, config)
    results = run_workers(_train_dist, world, config)
    _assert_same_run(ref, results[0])
    counts = results[0]["dependencies"]
    assert counts["mode"] == mode
    if mode == "cache":
        assert counts["received_rows"] == [0, 0, 0]
        assert "spmm" not in results[0]["comm"]  # no row exchanged: not one call
        return
    assert sum(counts["received_rows"]) > 0 and sum(counts["recomputed_rows"][1:]) > 0
    if sparse:
        assert counts["received_rows"][0] > 0 and counts["recomputed_rows"][0] > 0
    widths = [min(a, b) for a, b in zip(dims[:-1], dims[1:])]
    grads = [hidden < 12, True, True]
    per_worker = run_workers(_count_bytes, world, dataclasses.replace(config, progress=False))
    sent = sum(s for s, _ in per_worker)
    received = np.sum([r for _, r in per_worker], axis=0)
    assert received.tolist() == counts["received_rows"]
    assert sent == sum(4 * w * m * (1 + g) for w, m, g in zip(widths, received, grads))
    # `shardgnn plan` selects the same rows on the partition and predicts these bytes
    e, in_dim = partition_edges(read_partitions(path, verify=False))
    plan = PlanConfig(model=model, hidden=hidden, layers=3, workers=(world,),
                      workers_per_host=world, rates=str(rates))  # fmt: skip
    cost = dependency_cost(
        "hybrid", e, world, spmm_widths(plan, in_dim, 4), plan, in_dim, 4, machine,
    )  # fmt: skip
    assert cost.rows == received.sum()
    assert (cost.bytes_per_epoch, cost.max_worker_bytes) == (sent, max(s for s, _ in per_worker))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_features_sparse_on_one_part_and_dense_on_the_other_are_stored_alike(
    tmp_path_factory, graph
):
    """Whether features are stored sparse is one choice for the whole graph, as one process
    makes it: here one part's rows are 2 % non-zero, the other's 15 % (above the 10 % bound;
    the graph's under it), and cached feature rows still reach every worker as one process's."""
    parts = partition_graph(graph, PartitionConfig(num_parts=2, method="metis", seed=0)).assignment
    density = np.where(np.asarray(parts) == 0, 0.02, 0.15)[:, None]
    x = graph.x.copy()
    x[np.random.default_rng(0).random(x.shape) >= density] = 0.0
    mixed = dataclasses.replace(graph, x=x)
    part_density = [np.count_nonzero(x[parts == q]) / x[parts == q].size for q in (0, 1)]
    assert part_density[0] < 0.1 < part_density[1] and np.count_nonzero(x) / x.size < 0.1
    path = _parts(tmp_path_factory, mixed, 2, "metis")
    config = _config(path, "gcn", FullGraphConfig(dependencies="cache"))
    _assert_same_run(_reference(mixed, config), run_workers(_train_dist, 2, config)[0])


def test_cli_refuses_a_bad_rates_file_before_any_worker(tmp_path, capsys):
    from shardgnn.cli import main

    missing = tmp_path / "none.json"
    argv = ["train", "synthetic:nodes=300", "--mode", "full", "--workers", "2", "--epochs", "1"]
    assert main(argv + ["--dependencies", "hybrid", "--plan-rates", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--plan-rates {missing}: not the JSON of `shardgnn plan --calibrate" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--model", "appnp", "--dependencies", "cache"],
         "--dependencies cache recomputes remote rows layer by layer, for --model gcn, sage, gin"),
        (["--model", "gat", "--spmm", "1d"],
         "--model gat in distributed full-graph mode reads each edge's source row from its owner"),
    ],
)  # fmt: skip
def test_cli_refuses_what_workers_would_before_partitioning(tmp_path, capsys, flags, message):
    """A model the workers' full-graph steps do not run with these settings is refused in one
    line by the launcher: nothing partitioned, no worker started."""
    from shardgnn.cli import main

    argv = ["train", "synthetic:nodes=300", "--mode", "full", "--workers", "2", "--epochs", "1"]
    assert main(argv + flags) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1, captured.err
    assert "partitioned" not in captured.out
