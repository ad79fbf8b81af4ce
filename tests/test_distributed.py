"""Distributed mini-batch training on gloo: exactness against the single-process reference,
even work on every rank, evaluation coverage, and accuracy parity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.loader.dist_batches import assign_seeds_evenly, num_batches, rank_batches
from shardgnn.partition.book import PartitionBook
from shardgnn.partition.format import reassemble, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph

from distributed_helpers import run_workers


def make_partitions(path, graph, parts, method="metis"):
    result = partition_graph(graph, PartitionConfig(num_parts=parts, method=method, seed=0))
    write_partitions(graph, result.assignment, path, method=result.method, settings=result.settings)
    return str(path)


@pytest.fixture(scope="module")
def arange_graph_dist():
    g = generate(SyntheticConfig(nodes=2500, degree=10, classes=4, features=8, seed=5))
    # x[i] = i (every column) makes a fetched row name its node; it survives relabelling because
    # the partition writer moves rows with their nodes.
    return dataclasses.replace(
        g, x=np.repeat(np.arange(g.num_nodes, dtype=np.float32)[:, None], 3, axis=1)
    )


# ---------------------------------------------------------------------------- even work (pure)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_even_seed_assignment_for_every_rank(world):
    book = PartitionBook(np.linspace(0, 1000, world + 1).astype(np.int64))
    rng = np.random.default_rng(world)
    # A skewed train mask: nearly all training nodes are owned by rank 0.
    seeds = np.concatenate([rng.choice(book.part_range(0)[1], 200, replace=False), [999]])
    shares = assign_seeds_evenly(seeds, book, world)
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    assert np.array_equal(np.sort(np.concatenate(shares)), np.sort(seeds))  # each seed exactly once
    assert np.array_equal(shares[0], np.sort(shares[0]))
    for batch_size in (1, 7, 64, 1000):
        count = num_batches(shares, batch_size)
        per_rank = [
            rank_batches(s, count, shuffle=True, seed=3, epoch=1, rank=r)
            for r, s in enumerate(shares)
        ]
        assert all(len(b) == count for b in per_rank)
        assert all(len(x) <= batch_size for b in per_rank for x in b)


def test_even_assignment_prefers_local_seeds():
    book = PartitionBook(np.array([0, 50, 100]))
    shares = assign_seeds_evenly(np.arange(0, 100, 2), book, 2)
    assert np.all(book.owner(shares[0]) == 0) and np.all(book.owner(shares[1]) == 1)


# ---------------------------------------------------------------------------- multi-process
def _sample_and_fetch(ctx, path, seed_lists, sample_seeds, hosts=None):
    """``hosts``: the ranks grouped as if by host (None: no sharing, everything through
    collectives); a rank maps the parts of the others in its group. ``sample_seeds[r]``: rank
    ``r``'s sampling seed."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.store.dist_feature import DistFeatureStore
    from shardgnn.store.dist_graph import DistGraphStore

    host_ranks = next((h for h in hosts if ctx.rank in h), ()) if hosts else ()
    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    store = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm, host_ranks=host_ranks)
    peers_x = {p: peer.part.x for p, peer in store.peers.items()}
    peers_y = {p: peer.part.y for p, peer in store.peers.items()}
    out = []
    # the last: LADIES (owners serve full neighbourhoods, the requester draws the layer's nodes)
    for replace, fanouts, ladies in (
        (False, (5, 3), None), (True, (4, 4), None), (False, (-1, 2), None),
        (False, (-1, -1), (12, 6)),
    ):  # fmt: skip
        config = SamplerConfig(fanouts=fanouts, replace=replace, ladies=ladies)
        sampler = DistNeighborSampler(store, config, comm)
        seeds = torch.tensor(seed_lists[ctx.rank], dtype=torch.int64)
        sample = sampler.sample(seeds, seed=sample_seeds[ctx.rank])
        x_store = DistFeatureStore(store.part.x, store.book, ctx.rank, comm, peers=peers_x)
        x = x_store.gather(sample.input_nodes)
        y = DistFeatureStore(store.part.y, store.book, ctx.rank, comm, peers=peers_y).gather(
            sample.seeds
        )
        out.append(
            {
                "blocks": [
                    {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
                    for b in sample.blocks
                ],
                "x": x,
                "y": y,
                "replace": replace,
                "fanouts": fanouts,
                "ladies": ladies,
            }
        )
    stats = comm.reduce_stats()
    return {"runs": out, "stats": {k: v.as_dict() for k, v in stats.items()}}


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "world, hosts, rank_seeds",
    [
        (2, None, False),
        (3, None, False),
        (3, None, True),  # each rank's draws follow its own seed, whoever serves them
        (2, [(0, 1)], True),  # one host: no collective at all
        (3, [(0, 2), (1,)], True),  # two hosts: rank 1's rows travel; 0 and 2 read each other's
    ],
)
def test_distributed_sampling_and_fetch_equal_single_process(
    tmp_path, arange_graph_dist, world, hosts, rank_seeds
):
    from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig

    path = make_partitions(tmp_path / "parts", arange_graph_dist, world)
    full = reassemble(path)
    rng = np.random.default_rng(0)
    seed_lists = [rng.choice(full.num_nodes, 40, replace=False).tolist() for _ in range(world)]
    seed_lists[-1] = []  # a rank with nothing to sample still takes part in the collectives
    sample_seeds = [77 + 1000 * r if rank_seeds else 77 for r in range(world)]
    results = run_workers(_sample_and_fetch, world, path, seed_lists, sample_seeds, hosts)
    for rank, res in enumerate(results):
        for run in res["runs"]:
            ref = NeighborSampler(
                full.indptr,
                full.indices,
                SamplerConfig(fanouts=run["fanouts"], replace=run["replace"], ladies=run["ladies"]),
            )
            seeds = torch.tensor(seed_lists[rank], dtype=torch.int64)
            expect = ref.sample(seeds, seed=sample_seeds[rank])
            for got, want in zip(run["blocks"], expect.blocks):
                for name, value in got.items():
                    want_value = getattr(want, name)
                    assert (
                        (value == want_value)
                        if value is None or isinstance(value, int)
                        else torch.equal(value, want_value)
                    ), name
            # Fetched rows are exactly x[ids] (x = arange in original ids, moved with the nodes).
            inputs = expect.input_nodes
            assert torch.equal(run["x"], torch.from_numpy(np.asarray(full.x))[inputs])
            assert torch.equal(run["y"], torch.from_numpy(np.asarray(full.y))[expect.seeds])
    stats = results[0]["stats"]
    if hosts is None:
        assert stats["sample"]["bytes_sent"] == stats["sample"]["bytes_recv"] > 0
        assert stats["fetch"]["bytes_sent"] > 0
        assert stats["sample"]["host_bytes"] == stats["fetch"]["host_bytes"] == 0
    elif len(hosts) == 1:  # nothing crosses a host: no collective moved a byte
        assert stats["sample"]["calls"] == stats["fetch"]["calls"] == 0
        assert stats["sample"]["host_bytes"] > 0 and stats["fetch"]["host_bytes"] > 0
    else:
        assert stats["sample"]["bytes_sent"] > 0 and stats["fetch"]["bytes_sent"] > 0
        assert stats["sample"]["host_bytes"] > 0 and stats["fetch"]["host_bytes"] > 0


def _bulk_sample(ctx, path, seed_lists, hosts=None):
    """This rank's batches drawn k at a time (``sample_many``) and one at a time, with the
    sample stage's collective calls of each."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.store.dist_graph import DistGraphStore

    host_ranks = next((h for h in hosts if ctx.rank in h), ()) if hosts else ()
    out = {}
    for name, config in (
        ("nodewise", SamplerConfig(fanouts=(5, 3))),
        ("ladies", SamplerConfig(ladies=(30, 20))),
    ):
        runs = {}
        for mode in ("many", "one"):
            comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
            store = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm, host_ranks=host_ranks)
            sampler = DistNeighborSampler(store, config, comm, stage=f"{name}-{mode}")
            batches = [torch.tensor(b, dtype=torch.int64) for b in seed_lists[ctx.rank]]
            seeds = [100 + i for i in range(len(batches))]
            if mode == "many":
                got = sampler.sample_many(batches, seeds)
            else:
                got = [sampler.sample(b, s) for b, s in zip(batches, seeds)]
            stats = comm.reduce_stats()[f"{name}-{mode}"].as_dict()
            runs[mode] = (
                [
                    [{f.name: getattr(b, f.name) for f in dataclasses.fields(b)} for b in g.blocks]
                    for g in got
                ],
                stats,
            )
        out[name] = runs
    return out


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world, hosts", [(2, None), (3, [(0, 2), (1,)])])
def test_bulk_sampling_with_workers_draws_each_batch_as_alone_in_one_exchange(
    tmp_path, arange_graph_dist, world, hosts
):
    """k batches per hop with workers: every batch's blocks are those it gets alone (node-wise
    and LADIES, uneven batch sizes, one empty), and the hops' requests for all k travel in one
    exchange: the sample stage's collective calls fall k-fold."""
    path = make_partitions(tmp_path / "parts", arange_graph_dist, world)
    rng = np.random.default_rng(3)
    k = 4
    seed_lists = [
        [rng.choice(2500, n, replace=False).tolist() for n in (30, 7, 0, 55)] for _ in range(world)
    ]
    results = run_workers(_bulk_sample, world, path, seed_lists, hosts)
    for res in results:
        for name, runs in res.items():
            many, one = runs["many"][0], runs["one"][0]
            assert len(many) == len(one) == k
            for got, want in zip(many, one):
                for block_got, block_want in zip(got, want, strict=True):
                    for field, value in block_got.items():
                        expect = block_want[field]
                        assert (
                            value == expect
                            if value is None or isinstance(value, int)
                            else torch.equal(value, expect)
                        ), (name, field)
            calls_many, calls_one = runs["many"][1]["calls"], runs["one"][1]["calls"]
            assert calls_many > 0 and calls_one == k * calls_many, (name, calls_many, calls_one)
            assert runs["many"][1]["bytes_sent"] > 0


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("task", ["node", "link"])
def test_bulk_batches_with_workers_train_as_one_at_a_time(tmp_path, task):
    """`--bulk-batches 3` on 2 workers (no host sharing: every request crosses a collective)
    trains loss for loss as one batch at a time (link prediction: each batch with its own
    negatives and excluded target edges), and each group of 3 fetches its rows in one exchange,
    the rows its batches share once (fewer bytes)."""
    import json

    from shardgnn.cli import main

    runs = {}
    for bulk in (1, 3):
        out = tmp_path / f"bulk{bulk}.json"
        argv = [
            "train", "synthetic:nodes=3000", "--task", task, "--workers", "2", "--epochs", "2",
            "--fanouts", "5,5", "--batch-size", "64" if task == "node" else "512",
            "--host-sharing", "off", "--bulk-batches", str(bulk), "--quiet", "--results", str(out),
        ]  # fmt: skip
        assert main(argv) == 0
        runs[bulk] = json.loads(out.read_text())
    assert [e["loss"] for e in runs[1]["epochs"]] == [e["loss"] for e in runs[3]["epochs"]]
    assert runs[1]["test_acc"] == runs[3]["test_acc"]
    fetched = {bulk: r["comm"]["fetch"]["bytes_sent"] for bulk, r in runs.items()}
    assert 0 < fetched[3] < fetched[1], fetched


def _eval_coverage(ctx, path):
    from shardgnn.loader.dist_batches import DistSeedBatcher
    from shardgnn.partition.format import read_partitions

    book = read_partitions(path, verify=False).book
    out = {}
    for split, bs in (("train", 16), ("test", 100)):
        batcher = DistSeedBatcher(
            read_partitions(path, verify=False).global_split(split),
            book,
            ctx.rank,
            ctx.world_size,
            bs,
            shuffle=split == "train",
            seed=1,
        )
        out[split] = (len(batcher), torch.cat([s for _, s in batcher]).tolist())
    return out


@pytest.mark.slow
@pytest.mark.multiprocess
def test_batches_are_even_and_evaluation_covers_every_node_once(tmp_path):
    g = generate(SyntheticConfig(nodes=1500, degree=8, classes=3, features=4, seed=2))
    # Skew: all training nodes in the first fifth of the original ids.
    g = dataclasses.replace(
        g,
        train_idx=g.train_idx[g.train_idx < 300],
        test_idx=np.union1d(g.test_idx, g.train_idx[g.train_idx >= 300]),
    )
    path = make_partitions(tmp_path / "parts", g, 3, method="random")
    results = run_workers(_eval_coverage, 3, path)
    for split in ("train", "test"):
        counts = {r[split][0] for r in results}
        assert len(counts) == 1, f"ranks disagree on the {split} batch count: {counts}"
        seen = sorted(i for r in results for i in r[split][1])
        assert seen == sorted(global_ids(path, split))


def global_ids(path, split):
    from shardgnn.partition.format import read_partitions

    return read_partitions(path, verify=False).global_split(split).tolist()


def _train(ctx, path, overlap, host_sharing="auto"):
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
    from shardgnn.train.worker import train_with_context

    config = TrainConfig(
        model=ModelConfig(model="sage", hidden=32, num_layers=2),
        sampler=SamplerConfig(fanouts=(8, 8)),
        optim=OptimConfig(epochs=10, lr=0.01),
        batch_size=128,
        progress=False,
        seed=0,
        run=RunConfig(
            partitions=path, overlap="on" if overlap else "off", host_sharing=host_sharing
        ),
    )
    return train_with_context(config, ctx)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_match_one_worker_accuracy(tmp_path):
    g = generate(SyntheticConfig(nodes=5000, degree=10, classes=4, features=16, snr=1.5, seed=9))
    one = run_workers(_train, 1, make_partitions(tmp_path / "p1", g, 1, method="random"), False)[0]
    p2 = make_partitions(tmp_path / "p2", g, 2)
    two = run_workers(_train, 2, p2, True)
    assert two[0]["test_acc"] == two[1]["test_acc"]  # reduced over ranks
    assert abs(two[0]["test_acc"] - one["test_acc"]) <= 0.01, (one["test_acc"], two[0]["test_acc"])
    assert one["test_acc"] > 0.75
    comm = two[0]["comm"]
    assert {"sample", "fetch", "allreduce"} <= set(comm)
    # Both workers share this host: sampling and fetching read the peer's mapped part directly.
    assert all(
        comm[s]["bytes_sent"] == 0 and comm[s]["host_bytes"] > 0 for s in ("sample", "fetch")
    )
    assert comm["allreduce"]["bytes_sent"] > 0
    assert {"sample", "fetch", "compute"} <= set(two[0]["epochs"][0]["stages"])
    # Reading a peer's rows in place gives the very same run as receiving them.
    off = run_workers(_train, 2, p2, True, "off")
    assert [e["loss"] for e in off[0]["epochs"]] == [e["loss"] for e in two[0]["epochs"]]
    assert off[0]["test_acc"] == two[0]["test_acc"]
    # two runs, bit for bit the same weights (every rank names the same digest)
    assert off[0]["weights_sha256"] == two[0]["weights_sha256"] == two[1]["weights_sha256"]
    assert all(off[0]["comm"][s]["bytes_sent"] > 0 for s in ("sample", "fetch"))
    assert all(off[0]["comm"][s]["host_bytes"] == 0 for s in ("sample", "fetch"))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_torchrun_runs_the_same_worker_entry_point(tmp_path):
    """`torchrun ... -m shardgnn.run train --partitions DIR` is the multi-machine path."""
    import json
    import subprocess
    import sys

    from conftest import fixed_port

    g = generate(SyntheticConfig(nodes=1500, degree=8, classes=3, features=8, seed=4))
    path = make_partitions(tmp_path / "parts", g, 2)
    results = tmp_path / "run.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{fixed_port()}",
        "-m",
        "shardgnn.run",
        "train",
        "--partitions",
        path,
        "--fanouts",
        "5,5",
        "--hidden",
        "16",
        "--epochs",
        "2",
        "--quiet",
        "--timeout",
        "60",
        "--results",
        str(results),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(results.read_text())
    assert (
        data["workers"] == 2
        and len(data["epochs"]) == 2
        and data["comm"]["fetch"]["host_bytes"] > 0  # torchrun's workers found their host
    )


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cli_workers_partitions_on_the_fly(tmp_path, capsys):
    import json

    from shardgnn.cli import main

    results = tmp_path / "run.json"
    assert (
        main(
            [
                "train",
                "synthetic:nodes=1500,degree=8,classes=3,features=8",
                "--workers",
                "2",
                "--fanouts",
                "5,5",
                "--hidden",
                "16",
                "--epochs",
                "2",
                "--quiet",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    data = json.loads(results.read_text())
    assert data["workers"] == 2 and data["partitioner"] == "metis"
    # each worker's own peak resident memory, in rank order: a process holding torch and its
    # part of the graph (neither 0, a rank that did not report, nor the machine's)
    assert [100 < mb < 8_000 for mb in data["peak_memory_mb"]["rss"]] == [True, True]
    assert (
        main(["train", "--partitions", str(tmp_path / "nowhere"), "--workers", "2", "--quiet"]) == 2
    )
    assert "no such partition directory" in capsys.readouterr().err


def test_host_key_is_one_per_machine_and_namespace():
    """Processes of one host agree on the key; another network namespace is another host (the
    netns benchmark stands two machines up so)."""
    import shutil
    import subprocess
    import sys

    from shardgnn.distributed.context import host_key

    code = "from shardgnn.distributed.context import host_key; print(host_key())"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert here.stdout.strip() == host_key()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here")
    other = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", code], capture_output=True, text=True
    )
    if other.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {other.stderr.strip()[-200:]}")
    assert other.stdout.strip() != host_key()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_rank_without_training_nodes_never_hangs(tmp_path):
    """A partition that gives rank 1 no training node: every rank still runs the same number of
    batches (rank 1's are empty), in mini-batch, cluster and full-graph training alike, and the
    job ends with its results instead of a hang."""
    import json

    from shardgnn.cli import main

    graph = generate(SyntheticConfig(nodes=600, degree=6, classes=3, features=8, seed=0))
    assignment = (np.arange(graph.num_nodes) >= 300).astype(np.int64)
    train = np.asarray(graph.train_idx)
    graph = dataclasses.replace(graph, train_idx=train[train < 300])
    pset = write_partitions(graph, assignment, tmp_path / "parts", method="test")
    assert pset.meta["parts"][1]["num_train"] == 0 < pset.meta["parts"][0]["num_train"]
    runs = {
        "minibatch": ["--fanouts", "3,3", "--batch-size", "32"],
        "cluster": ["--batching", "cluster", "--fanouts", "3,3"],
        "full": ["--mode", "full"],
    }
    for name, flags in runs.items():
        out = tmp_path / f"{name}.json"
        argv = ["train", "--partitions", str(tmp_path / "parts"), "--epochs", "2", "--quiet"]
        assert main([*argv, *flags, "--timeout", "60", "--results", str(out)]) == 0, name
        assert len(json.loads(out.read_text())["epochs"]) == 2, name
