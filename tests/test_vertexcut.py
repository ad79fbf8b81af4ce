"""Vertex-cut partitioners (``shardgnn.partition.vertexcut``: HDRF, 2D hash): every edge placed,
masters among the replicas and balanced, the 2D bound on replicas, fewer replicas than placing
edges at random; the placement written with the parts and checked on load; the rows the plan
counts equal a brute-force count; and full-graph training with ``--spmm vertex-cut`` on these
partitions equal to one process, sending the bytes the plan predicts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.partition.cover import cut_rows
from shardgnn.partition.format import load_part, read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph, random_partition
from shardgnn.partition.vertexcut import _edges, most_square


@pytest.fixture(scope="module")
def power_law():
    return generate(SyntheticConfig(nodes=4000, degree=10, classes=4, features=8, seed=1))


def _cut(graph, parts, method, **settings):
    config = PartitionConfig(num_parts=parts, method=method, seed=0, **settings)
    return partition_graph(graph, config)


def _replicas(graph, result, parts) -> np.ndarray:
    """Per node, the parts holding it: its master's and every part computing one of its edges."""
    src, dst = _edges(graph)
    held = np.zeros((graph.num_nodes, parts), dtype=bool)
    held[np.arange(graph.num_nodes), result.assignment] = True
    held[src, result.edge_part] = True
    held[dst, result.edge_part] = True
    return held


@pytest.mark.parametrize("parts", [3, 4, 8, 70])
def test_hdrf_places_every_edge_balanced_with_masters_among_replicas(power_law, parts):
    result = _cut(power_law, parts, "hdrf")
    g = power_law
    assert result.edge_part.shape == (g.num_edges,) and result.edge_part.dtype == np.int32
    assert 0 <= result.edge_part.min() and result.edge_part.max() < parts
    load = np.bincount(result.edge_part, minlength=parts)
    assert load.max() / load.mean() < 1.02  # lambda = 1 balances the computed edges
    nodes = np.bincount(result.assignment, minlength=parts)
    assert nodes.max() <= max(np.ceil(g.num_nodes / parts), 1.03 * g.num_nodes / parts)
    # a master holds one of its node's edges wherever the cap lets it
    src, dst = _edges(g)
    own_edge = np.zeros(g.num_nodes, dtype=bool)
    own_edge[src[result.edge_part == result.assignment[src]]] = True
    own_edge[dst[result.edge_part == result.assignment[dst]]] = True
    has_edges = np.bincount(np.concatenate([src, dst]), minlength=g.num_nodes) > 0
    assert own_edge[has_edges].mean() > 0.97
    # fewer replicas than edges placed at random (what HDRF exists to beat), and the recorded
    # statistics are those of the placement
    held = _replicas(g, result, parts)
    rng = np.random.default_rng(0)
    scattered = dataclasses.replace(
        result, edge_part=rng.integers(0, parts, g.num_edges).astype(np.int32)
    )
    assert held.sum() < 0.8 * _replicas(g, scattered, parts).sum()
    assert result.settings["replication_factor"] == pytest.approx(held.sum() / g.num_nodes)
    _, pulls, pushes = cut_rows(src, dst, result.assignment, parts, result.edge_part)
    assert result.settings["rows_per_layer"] == len(pulls) + len(pushes)


def test_hdrf_lambda_trades_balance_for_replicas(power_law):
    """A larger lambda weighs balance more: never fewer replicas, never a worse balance."""
    loose, tight = (_cut(power_law, 4, "hdrf", hdrf_balance=lam).settings for lam in (0.5, 4.0))
    assert tight["replication_factor"] >= loose["replication_factor"]
    assert tight["balance_computed_edges"] <= loose["balance_computed_edges"]


@pytest.mark.parametrize("parts", [4, 6, 9])
def test_2d_hash_keeps_a_nodes_replicas_in_its_grid_row_and_column(power_law, parts):
    g = power_law
    result = _cut(g, parts, "2d-hash")
    rows = most_square(parts)
    cols = parts // rows
    block = random_partition(g.num_nodes, parts, 0)
    assert np.array_equal(result.assignment, block)  # masters: the hashed blocks
    src, dst = _edges(g)
    assert np.array_equal(result.edge_part // cols, block[dst] // cols)  # destination's row
    assert np.array_equal(result.edge_part % cols, block[src] % cols)  # source's column
    assert _replicas(g, result, parts).sum(1).max() <= rows + cols - 1
    assert result.settings["grid"] == f"{rows}x{cols}"


@pytest.mark.parametrize("method", ["hdrf", "2d-hash"])
def test_self_loops_follow_masters_and_repeated_edges_share_a_part(method):
    rng = np.random.default_rng(3)
    src = rng.integers(0, 50, 600)
    dst = rng.integers(0, 50, 600)
    src = np.concatenate([src, src[:200], np.arange(20)])  # repeats and self-loops
    dst = np.concatenate([dst, dst[:200], np.arange(20)])
    g = Graph.from_edge_index(src, dst, 50)
    result = _cut(g, 4, method)
    s, d = _edges(g)
    loops = s == d
    assert np.array_equal(result.edge_part[loops], result.assignment[s[loops]])
    keys = d * 50 + s
    for key in np.unique(keys):
        assert len(set(result.edge_part[keys == key].tolist())) == 1


@pytest.mark.parametrize("seed", range(6))
def test_cut_rows_of_a_placement_equal_a_brute_force_count(seed):
    """Rows pulled: (source, part) for every edge whose part does not own its source; pushed:
    (destination, part) likewise; self-loops on their owner."""
    rng = np.random.default_rng(seed)
    parts, n = 3, 30
    src, dst = rng.integers(0, n, 150), rng.integers(0, n, 150)
    src[:5] = dst[:5]
    owner = rng.integers(0, parts, n)
    placed = rng.integers(0, parts, 150)
    computed_by, pulls, pushes = cut_rows(src, dst, owner, parts, placed)
    pulled, pushed = set(), set()
    for u, v, p in zip(src, dst, placed):
        p = owner[v] if u == v else p
        if owner[u] != p:
            pulled.add(u * parts + p)
        if owner[v] != p:
            pushed.add(v * parts + p)
    assert set(pulls.tolist()) == pulled and set(pushes.tolist()) == pushed
    assert np.array_equal(computed_by, np.where(src == dst, owner[dst], placed))


def test_the_placement_is_written_with_the_parts_and_checked_on_load(tmp_path, power_law):
    result = _cut(power_law, 3, "hdrf")
    path = tmp_path / "parts"
    pset = write_partitions(
        power_law, result.assignment, path, method=result.method, settings=result.settings,
        sections=result.sections(),
    )  # fmt: skip
    src, dst = _edges(power_law)
    for q in range(3):
        part = pset.load_part(q)
        rows = pset.orig_ids[part.start : part.end]
        # each part's in-edges in its CSR order, the placement alongside
        expected = np.concatenate([result.edge_part[dst == v] for v in rows])
        assert np.array_equal(np.asarray(part.edge_part), expected)
    assert pset.meta["partitioner"]["settings"]["replication_factor"] > 1
    bad = np.load(path / "part-1" / "edge_part.npy")
    bad[0] = 7
    np.save(path / "part-1" / "edge_part.npy", bad)  # same size: caught without checksums
    with pytest.raises(DatasetError, match=r"edge_part.npy.*holds parts outside \[0, 3\)"):
        load_part(path, 1, verify=False)
    assert read_partitions(path, verify=False).load_part(0).edge_part is not None


def test_node_partitioned_data_refuses_a_vertex_cut(power_law):
    node_type = np.zeros(power_law.num_nodes, dtype=np.int64)
    with pytest.raises(ConfigError, match="--method hdrf places edges .* a typed graph"):
        partition_graph(power_law, PartitionConfig(num_parts=2, method="hdrf"), node_type=node_type)
    with pytest.raises(ConfigError, match="--hdrf-balance"):
        PartitionConfig(num_parts=2, method="hdrf", hdrf_balance=0.0)


def test_cli_partition_reports_the_replicas_and_refuses_other_methods_flags(tmp_path, capsys):
    from shardgnn.cli import main

    spec = "synthetic:nodes=600,degree=6,classes=3,features=4"
    out = tmp_path / "vc"
    assert main(["partition", spec, "--parts", "4", "--method", "2d-hash", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "vertex-cut:" in printed and "replicas per node" in printed
    assert main(["verify", str(out)]) == 0
    assert main(["partition", spec, "--parts", "2", "--method", "metis", "--hdrf-balance", "2",
                 "--out", str(tmp_path / "m")]) == 2  # fmt: skip
    assert "--hdrf-balance does not apply to --method metis" in capsys.readouterr().err
    # node-partitioned data: refused before it is loaded
    temporal = "synthetic-temporal:nodes=300,events=2000"
    assert main(["partition", temporal, "--parts", "2", "--method", "hdrf", "--out",
                 str(tmp_path / "t")]) == 2  # fmt: skip
    captured = capsys.readouterr()
    assert "a temporal graph is partitioned by node" in captured.err
    assert "loaded" not in captured.out + captured.err


# ------------------------------------------------------------------ training on the placement
def _train_dist(ctx, config):
    from shardgnn.train.worker import train_with_context

    return train_with_context(config, ctx)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "world,method,model", [(2, "hdrf", "gcn"), (3, "hdrf", "gin"), (4, "2d-hash", "sage")]
)
def test_vertex_cut_training_on_the_placement_equals_one_process_and_the_plans_bytes(
    tmp_path, world, method, model
):
    from shardgnn.fullgraph.config import FullGraphConfig, PlanConfig
    from shardgnn.fullgraph.plan import costs_at, partition_costs
    from test_fullgraph import _assert_same_run, _config, _reference, _spmm_bytes

    from distributed_helpers import run_workers

    graph = generate(SyntheticConfig(nodes=600, degree=8, classes=4, features=12, seed=3))
    result = _cut(graph, world, method)
    path = tmp_path / "parts"
    write_partitions(
        graph, result.assignment, path, method=result.method, sections=result.sections()
    )
    config = _config(str(path), model, FullGraphConfig(spmm="vertex-cut"))
    got = run_workers(_train_dist, world, config)
    _assert_same_run(_reference(graph, config), got[0])
    # the bytes: the plan's, from the graph and the placement or from the directory alike
    plan = PlanConfig(model=model, hidden=16, layers=3, dropout=0.5, input_dropout=0.2)
    cost = next(
        c
        for c in costs_at(graph, result.assignment, world, plan, edge_part=result.edge_part)
        if c.strategy == "vertex-cut"
    )
    sent, recv, _ = zip(*run_workers(_spmm_bytes, world, config))
    assert (sum(sent), max(sent), max(recv)) == (
        cost.bytes_per_epoch, cost.max_worker_bytes, cost.max_worker_recv,
    )  # fmt: skip
    from_dir = partition_costs(read_partitions(path), plan, graph.num_classes)
    assert next(c for c in from_dir if c.strategy == "vertex-cut").bytes_per_epoch == sum(sent)
    # the edge placement is what moved them: the cover of the masters moves other rows
    cover = next(
        c for c in costs_at(graph, result.assignment, world, plan) if c.strategy == "vertex-cut"
    )
    assert cover.bytes_per_epoch != sum(sent)


def test_training_that_does_not_follow_the_placement_says_so(tmp_path, power_law):
    """Mini-batch training (or another SpMM) reads a vertex-cut partition's masters alone, and a
    line says so; ``--spmm vertex-cut`` does not warn."""
    import warnings

    from shardgnn.cli.train import preflight
    from shardgnn.fullgraph.config import FullGraphConfig
    from shardgnn.train.config import RunConfig, TrainConfig

    result = _cut(power_law, 2, "hdrf")
    path = tmp_path / "parts"
    write_partitions(
        power_law, result.assignment, path, method=result.method, sections=result.sections()
    )
    run = RunConfig(partitions=str(path), workers=2)
    with pytest.warns(UserWarning, match=r"places every edge on a part \(hdrf\): only --mode full"):
        preflight(TrainConfig(run=run), dataset_given=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preflight(
            TrainConfig(mode="full", full=FullGraphConfig(spmm="vertex-cut"), run=run),
            dataset_given=False,
        )


@pytest.mark.slow
@pytest.mark.multiprocess
def test_low_bit_rows_on_the_placement_send_the_plans_bytes(tmp_path):
    """4-bit rows and gradients (pulled and pushed alike) on an HDRF placement: the bytes the
    plan counts at 4 bits, worker by worker."""
    from shardgnn.fullgraph.config import PlanConfig
    from shardgnn.fullgraph.plan import costs_at
    from test_fullgraph import _config, _spmm_bytes

    from distributed_helpers import run_workers

    graph = generate(SyntheticConfig(nodes=600, degree=8, classes=4, features=12, seed=3))
    result = _cut(graph, 3, "hdrf")
    path = tmp_path / "parts"
    write_partitions(
        graph, result.assignment, path, method=result.method, sections=result.sections()
    )
    plan = PlanConfig(model="sage", hidden=16, layers=3, bits=4, dropout=0.5, input_dropout=0.2)
    cost = next(
        c
        for c in costs_at(graph, result.assignment, 3, plan, edge_part=result.edge_part)
        if c.strategy == "vertex-cut"
    )
    config = _config(str(path), "sage", cost.config)
    assert cost.config.bits == 4
    sent, recv, _ = zip(*run_workers(_spmm_bytes, 3, config))
    assert (sum(sent), max(sent), max(recv)) == (
        cost.bytes_per_epoch, cost.max_worker_bytes, cost.max_worker_recv,
    )  # fmt: skip
