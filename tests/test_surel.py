"""SUREL link prediction (issue 31): walks per node, relative positional encodings, the walk
graph without the batch's own edges, and training from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy import stats

from shardgnn.cli import main
from shardgnn.graph.csr import csr_from_edges
from shardgnn.nn.surel import SURELModel, relative_positions, relative_positions_by_comparison
from shardgnn.sampling.walks import node_walks

SMALL = "synthetic:nodes=300,degree=6,classes=3,features=8"


def _ring_with_star():
    """A symmetric graph: a 6-ring plus node 6 joined to 0, 2 and 4, and isolated node 7."""
    edges = [(i, (i + 1) % 6) for i in range(6)] + [(6, 0), (6, 2), (6, 4)]
    src = np.array([a for a, b in edges] + [b for a, b in edges])
    dst = np.array([b for a, b in edges] + [a for a, b in edges])
    indptr, indices, _ = csr_from_edges(src, dst, 8)
    return indptr, indices


def test_walks_step_along_edges_and_depend_on_the_node_alone():
    indptr, indices = _ring_with_star()
    edges = {(int(s), d) for d in range(8) for s in indices[indptr[d] : indptr[d + 1]]}
    walks = node_walks(indptr, indices, np.array([0, 6, 7]), 50, 5, seed=3)
    assert walks.shape == (3, 50, 6)
    assert (walks[:, :, 0] == np.array([[0], [6], [7]])).all()
    for walk in walks[:2].reshape(-1, 6):
        assert all((int(a), int(b)) in edges for a, b in zip(walk[:-1], walk[1:]))
    assert (walks[2, :, 1:] == -1).all()  # no neighbour: the walk ends
    # a node's walks are the same whatever else is drawn beside it
    again = node_walks(indptr, indices, np.array([5, 6]), 50, 5, seed=3)
    np.testing.assert_array_equal(again[1], walks[1])
    assert not np.array_equal(
        node_walks(indptr, indices, np.array([6]), 50, 5, seed=4)[0], walks[1]
    )


def test_walk_steps_are_uniform_over_the_neighbours():
    """Chi-square: node 6's first step over its 3 neighbours, and node 0's over its 3."""
    indptr, indices = _ring_with_star()
    walks = node_walks(indptr, indices, np.array([6, 0]), 6000, 1, seed=11)
    for row, neighbours in ((0, [0, 2, 4]), (1, [1, 5, 6])):
        counts = np.array([(walks[row, :, 1] == n).sum() for n in neighbours])
        assert counts.sum() == 6000
        assert stats.chisquare(counts).pvalue > 1e-3


def test_relative_positions_count_each_node_at_each_step_of_both_walk_sets():
    """Brute force: RPE of the node at (query, side, walk, step) is its count at every step of
    the walks of the side's own endpoint, then of the other endpoint, divided by M."""
    rng = np.random.default_rng(0)
    q, m, w = 3, 4, 4
    walks = rng.integers(-1, 6, size=(q, 2, m, w))
    walks[:, :, :, 0] = rng.integers(0, 6, size=(q, 2, 1))  # a walk starts at its endpoint
    got = relative_positions(torch.from_numpy(walks), 6).numpy()
    assert got.shape == (q, 2, m, w, 2 * w)
    for a in range(q):
        for s in range(2):
            for j in range(m):
                for i in range(w):
                    x = walks[a, s, j, i]
                    if x < 0:
                        assert not got[a, s, j, i].any()
                        continue
                    own = (walks[a, s] == x).sum(0) / m
                    other = (walks[a, 1 - s] == x).sum(0) / m
                    np.testing.assert_allclose(got[a, s, j, i], np.concatenate([own, other]))


def test_positions_by_comparison_equal_the_counted_ones_bit_for_bit():
    """The exported file's encodings (every position compared with every other: shapes free of
    the walks' values) are training's, bit for bit, in any node numbering, dead ends included;
    the serving module scores as the model does."""
    from shardgnn.nn.serving import WalkServingModel

    indptr, indices = _ring_with_star()
    starts = np.array([[0, 6], [7, 3], [2, 2], [5, 7]])  # node 7 has no neighbour
    walks = torch.from_numpy(node_walks(indptr, indices, starts.reshape(-1), 6, 4, seed=1))
    walks = walks.view(4, 2, 6, 5)
    assert (walks == -1).any() and (walks >= 0).any()
    counted = relative_positions(walks, 8)
    renumbered = torch.where(walks >= 0, walks * 1_000_003 + 17, walks)
    assert torch.equal(relative_positions_by_comparison(renumbered), counted)
    torch.manual_seed(0)
    model = SURELModel(4, 8, 0.0, 8).eval()
    with torch.no_grad():
        assert torch.equal(WalkServingModel(model, 6, 4)(renumbered), model(walks))


def _steps(**link):
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import LinkConfig, OptimConfig, TrainConfig
    from shardgnn.train.surel import SURELSteps

    config = TrainConfig(
        dataset=SMALL,
        task="link",
        model=ModelConfig(model="surel", hidden=16, dropout=0.2),
        link=LinkConfig(**link),
        optim=OptimConfig(epochs=1, lr=0.01),
        batch_size=64,
        progress=False,
    )
    return SURELSteps(config)


def test_a_batch_walks_on_the_graph_without_its_own_edges():
    """No walk of a training batch crosses one of the batch's positive edges, either way; every
    other step is an edge of the training graph."""
    from shardgnn.graph.linksplit import edge_arrays
    from shardgnn.train.surel import csr_without

    steps = _steps(walks=8, walk_length=4)
    g = steps.graph
    pos = steps.split.train_pos_2P[:, :64]
    csr = csr_without(g.indptr, g.indices, steps.edge_keys, pos, g.num_nodes, True)
    # the CSR of the kept edges, rebuilt from scratch: the same rows, the same order
    src, dst = edge_arrays(g)
    held = set(zip(pos[0].tolist(), pos[1].tolist())) | set(zip(pos[1].tolist(), pos[0].tolist()))
    kept = np.array([(s, d) not in held for s, d in zip(src.tolist(), dst.tolist())])
    indptr = np.zeros(g.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst[kept], minlength=g.num_nodes), out=indptr[1:])
    np.testing.assert_array_equal(csr[0], indptr)
    np.testing.assert_array_equal(csr[1], src[kept])
    nodes = np.unique(pos)
    walks = steps.draw_walks(nodes, 5, pos)
    np.testing.assert_array_equal(walks, node_walks(*csr, nodes, 8, 4, 5))
    train = set(zip(src.tolist(), dst.tolist()))
    a, b = walks[..., :-1].reshape(-1), walks[..., 1:].reshape(-1)
    moved = (a >= 0) & (b >= 0)
    steps_taken = set(zip(b[moved].tolist(), a[moved].tolist()))  # b is an in-neighbour of a
    assert steps_taken and not steps_taken & held and steps_taken <= train
    assert csr[1].shape[0] == src.shape[0] - 2 * pos.shape[1]


def test_surel_trains_from_the_command_line_and_refuses_what_it_does_not_read(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["train", SMALL, "--task", "link", "--model", "surel", "--epochs", "3", "--quiet"]
    assert main([*argv, "--walks", "8", "--results", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["recipe"] == "surel"
    assert results["walks"] == {
        "per_node": 8,
        "length": 4,
        "drawn_per_s": pytest.approx(results["walks"]["drawn_per_s"]),
    }
    assert results["link"]["test"]["auc"] > 0.6, results["link"]["test"]  # chance: 0.5
    capsys.readouterr()
    for extra, message in [
        (["--fanouts", "5,5"], "--fanouts does not apply to link prediction from random walks"),
    ]:
        assert main([*argv, *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["train", SMALL, "--model", "surel"]) == 2
    assert "predicts links from random walks: add --task link" in capsys.readouterr().err
    assert main(["train", SMALL, "--task", "link", "--walks", "8"]) == 2
    assert "--walks does not apply" in capsys.readouterr().err


def _train(ctx, config):
    from shardgnn.train.worker import train_with_context

    return train_with_context(config, ctx)


def _walks_on_workers(ctx, path, starts, seed):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.partition.format import read_partitions
    from shardgnn.sampling.dist_walks import dist_node_walks

    pset = read_partitions(path, verify=False)
    part = pset.load_part(ctx.rank)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    orig = np.asarray(pset.orig_ids)
    mine = np.array_split(pset.new_id_of_orig()[starts], ctx.world_size)[ctx.rank]
    walks = dist_node_walks(
        pset.book.owner, part.indptr, part.indices, part.start, comm, mine, orig[mine], 6, 5, seed
    )
    return np.where(walks >= 0, orig[np.maximum(walks, 0)], -1)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 3])
def test_workers_draw_one_process_walks_and_train_as_one_process(tmp_path, world):
    """Walks drawn step by step by each node's owner equal one process's node for node; SUREL on
    workers equals one process epoch by epoch (loss within 1e-5, the same held-out metrics)."""
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import LinkConfig, OptimConfig, RunConfig, TrainConfig
    from shardgnn.train.single import run_training

    from distributed_helpers import run_workers

    parts = tmp_path / "p"
    argv = ["partition", SMALL, "--task", "link", "--parts", str(world), "--out", str(parts)]
    assert main([*argv, "--quiet"]) == 0
    graph = load_dataset(SMALL)
    starts = np.arange(0, graph.num_nodes, 7)
    got = np.concatenate(run_workers(_walks_on_workers, world, str(parts), starts, 9))
    from shardgnn.graph.linksplit import split_edges
    from shardgnn.train.linkmetrics import split_spec

    train_graph, _ = split_edges(graph, split_spec(LinkConfig()))
    want = node_walks(train_graph.indptr, train_graph.indices, starts, 6, 5, 9)
    np.testing.assert_array_equal(got, want)

    def config(**run):
        return TrainConfig(
            dataset=SMALL, task="link", model=ModelConfig(model="surel", hidden=16, dropout=0.2),
            link=LinkConfig(walks=6, negatives=2), optim=OptimConfig(epochs=3, lr=0.01),
            batch_size=100, seed=4, progress=False, threads=1, **run,
        )  # fmt: skip

    one = run_training(config())
    many = run_workers(_train, world, config(run=RunConfig(partitions=str(parts), workers=world)))
    losses = [[e["loss"] for e in r["epochs"]] for r in (one, many[0])]
    np.testing.assert_allclose(losses[1], losses[0], rtol=0, atol=1e-5)
    for split in ("val", "test"):
        for key, value in one["link"][split].items():
            assert many[0]["link"][split][key] == pytest.approx(value, abs=1e-4), (split, key)
    assert many[0]["comm"]["walk"]["bytes_sent"] > 0


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """Walks, negatives and dropout follow from (seed, epoch, step): 2 epochs, then a resume to
    3, train what 3 uninterrupted epochs train, bit for bit."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import CheckpointConfig, LinkConfig, OptimConfig, TrainConfig
    from shardgnn.train.single import run_training

    def config(epochs, **changes):
        return TrainConfig(
            dataset=SMALL, task="link", model=ModelConfig(model="surel", hidden=16, dropout=0.2),
            link=LinkConfig(walks=6), optim=OptimConfig(epochs=epochs, lr=0.01), batch_size=100,
            seed=2, progress=False, **changes,
        )  # fmt: skip

    whole = run_training(config(3))
    ckpt = str(tmp_path / "ckpt")
    run_training(config(2, checkpoint=CheckpointConfig(dir=ckpt)))
    resumed = run_training(config(3, checkpoint=CheckpointConfig(dir=ckpt, resume=True)))
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in whole["epochs"]]
    assert resumed["link"]["test"] == whole["link"]["test"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_scores_pairs_as_training_evaluated_them(tmp_path, capsys):
    """``shardgnn infer --pairs`` of a 2-worker SUREL checkpoint, over a 3-part partition of the
    same graph: the test edges' and their first negatives' scores give the run's test AUC; without
    ``--pairs`` it says what it needs."""
    from shardgnn.graph.linksplit import LINK_SPLIT_DIR, load_link_split
    from shardgnn.train.linkmetrics import auc

    out = tmp_path / "r.json"
    argv = ["train", SMALL, "--task", "link", "--model", "surel", "--epochs", "2", "--quiet"]
    argv += ["--workers", "2", "--walks", "8", "--checkpoint-dir", str(tmp_path / "ckpt")]
    assert main([*argv, "--results", str(out)]) == 0
    parts = tmp_path / "p3"
    assert main(["partition", SMALL, "--task", "link", "--parts", "3", "--out", str(parts)]) == 0
    split = load_link_split(parts / LINK_SPLIT_DIR)
    pos, neg = split.test_pos_2P.T, np.stack([split.test_pos_2P[0], split.test_neg_PK[:, 0]], 1)
    np.save(tmp_path / "pairs.npy", np.concatenate([pos, neg]))
    infer = ["infer", "--checkpoint", str(tmp_path / "ckpt"), "--partitions", str(parts)]
    capsys.readouterr()
    assert main([*infer, "--out", str(tmp_path / "none")]) == 2
    assert "has no node embeddings: give --pairs FILE" in capsys.readouterr().err
    infer += ["--out", str(tmp_path / "inferred"), "--pairs", str(tmp_path / "pairs.npy")]
    assert main(infer) == 0
    scores = np.load(tmp_path / "inferred" / "scores.npy")
    assert scores.shape == (2 * len(pos),)
    got = auc(scores[: len(pos)], scores[len(pos) :, None])
    assert got == pytest.approx(json.loads(out.read_text())["link"]["test"]["auc"], abs=1e-6)
