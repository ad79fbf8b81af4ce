"""Distributed link prediction (``--task link --workers N``): the launcher's split equals one
process's, every batch's target edges are absent from the blocks the owners sampled, 2 workers
reach one process's AUC, and a resumed run ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardgnn.cli import main
from shardgnn.errors import ConfigError
from shardgnn.graph.io import save_graph
from shardgnn.graph.linksplit import (
    LINK_SPLIT_DIR,
    LinkSplitSpec,
    load_link_split,
    pair_keys,
    split_edges,
)
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.config import ModelConfig
from shardgnn.partition.format import read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.config import SamplerConfig
from shardgnn.train.config import LinkConfig, OptimConfig, RunConfig, TrainConfig
from shardgnn.train.single import run_training

from conftest import assert_same_weights, final_weights
from distributed_helpers import run_workers


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=1200, degree=8, classes=4, features=16, snr=4.0, seed=3))


def test_distributed_full_graph_link_is_refused():
    with pytest.raises(ConfigError, match="--task link with --workers trains in --mode minibatch"):
        TrainConfig(task="link", mode="full", run=RunConfig(workers=2))


def test_the_launcher_splits_as_one_process_and_partitions_the_training_graph(graph, tmp_path):
    from shardgnn.cli.train import _partition_on_the_fly

    save_graph(graph, tmp_path / "g")
    config = TrainConfig(
        dataset=f"graph:{tmp_path / 'g'}", task="link", run=RunConfig(workers=2), progress=False
    )
    _partition_on_the_fly(config, tmp_path / "parts")
    stored = load_link_split(tmp_path / "parts" / LINK_SPLIT_DIR)
    train_graph, expected = split_edges(graph, LinkSplitSpec())
    for name in ("train_pos_2P", "val_pos_2P", "test_pos_2P", "val_neg_PK", "test_neg_PK"):
        assert np.array_equal(getattr(stored, name), getattr(expected, name)), name
    pset = read_partitions(tmp_path / "parts")
    assert pset.num_edges == train_graph.num_edges  # held-out edges never reach a worker


def _exclusion_on_owners(ctx, path):
    """One epoch of link batches on this rank with the distributed sampler; every block is
    checked against the batch's targets."""
    from shardgnn.distributed.comm import Communicator
    from shardgnn.loader.dist_batches import DistSeedBatcher
    from shardgnn.loader.link import LinkSamplingStage, target_exclusion
    from shardgnn.partition.book import PartitionBook
    from shardgnn.sampling.distributed import DistNeighborSampler
    from shardgnn.sampling.negative import NegativeSampler
    from shardgnn.store.dist_graph import DistGraphStore

    pset = read_partitions(path, verify=False)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    store = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm)
    n = pset.num_nodes
    split = load_link_split(path / LINK_SPLIT_DIR)
    new_of_orig = np.empty(n, dtype=np.int64)
    new_of_orig[np.asarray(pset.orig_ids)] = np.arange(n)
    pairs = new_of_orig[split.train_pos_2P]
    # Positions stand in for pairs; a book that gives each rank half of them: only evenness
    # matters here.
    half = pairs.shape[1] // 2
    book = PartitionBook(np.array([0, half, pairs.shape[1]]))
    batches = DistSeedBatcher(
        np.arange(pairs.shape[1]), book, ctx.rank, ctx.world_size, 64, shuffle=True, seed=0
    )
    sampler = DistNeighborSampler(store, SamplerConfig(fanouts=(-1, 5)), comm, "sample")
    stage = LinkSamplingStage(
        batches,
        pairs,
        sampler,
        NegativeSampler("uniform", n, 2),
        num_nodes=n,
        symmetric=split.symmetric,
        seed=ctx.rank,
    )
    batches.set_epoch(1)
    seen = dropped = 0
    for _, sample in stage:
        src = sample.seeds[sample.pos_src_P].numpy()
        dst = sample.seeds[sample.pos_dst_P].numpy()
        excluded = set(target_exclusion(src, dst, n, split.symmetric).tolist())
        for block in sample.blocks:
            s = block.src_nodes_S[block.indices_E].numpy()
            d = block.dst_nodes_D[block.dst_index_E()].numpy()
            assert not excluded & set(pair_keys(s, d, n).tolist())
        full = sampler.sample(sample.seeds, 0).blocks[-1]  # collective: every rank calls it
        dropped += full.num_edges - sample.blocks[-1].num_edges
        assert full.num_edges - sample.blocks[-1].num_edges == 2 * src.shape[0]
        seen += 1
    return seen, dropped


@pytest.mark.slow
@pytest.mark.multiprocess
def test_owners_exclude_each_batchs_targets(graph, tmp_path):
    train_graph, split = split_edges(graph, LinkSplitSpec(seed=2))
    result = partition_graph(train_graph, PartitionConfig(num_parts=2, method="metis", seed=0))
    path = tmp_path / "parts"
    write_partitions(train_graph, result.assignment, path, method="metis")
    from shardgnn.graph.linksplit import save_link_split

    save_link_split(split, path / LINK_SPLIT_DIR)
    (seen0, dropped0), (seen1, dropped1) = run_workers(_exclusion_on_owners, 2, path)
    assert seen0 == seen1 > 0  # even batches
    assert dropped0 + dropped1 == 2 * split.train_pos_2P.shape[1]  # every target, once


def _argv(spec, out, *extra):
    argv = ["train", spec, "--task", "link", "--workers", "2", "--fanouts", "10,10"]
    argv += ["--batch-size", "256", "--hidden", "32", "--out-dim", "16", "--dropout", "0"]
    argv += ["--lr", "0.01", "--eval-negatives", "20", "--hits-at", "5,10", "--quiet"]
    return [*argv, "--results", str(out), *extra]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_workers_reach_one_process_auc_and_resume_exactly(graph, tmp_path):
    save_graph(graph, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    one = run_training(
        TrainConfig(
            dataset=spec,
            task="link",
            sampler=SamplerConfig(fanouts=(10, 10)),
            batch_size=256,
            optim=OptimConfig(epochs=4, lr=0.01),
            model=ModelConfig(hidden=32, dropout=0.0),
            link=LinkConfig(out_dim=16, eval_negatives=20, hits_at=(5, 10)),
            progress=False,
        )
    )
    straight = tmp_path / "straight"
    argv = _argv(spec, tmp_path / "a.json", "--epochs", "4", "--checkpoint-dir", str(straight))
    assert main(argv) == 0
    two = json.loads((tmp_path / "a.json").read_text())
    assert two["metric"] == "auc"
    assert set(two["link"]["test"]) == {"auc", "ap", "mrr", "hits@5", "hits@10"}
    assert abs(two["test_acc"] - one["test_acc"]) < 0.04, (two["test_acc"], one["test_acc"])
    assert two["link"]["edges"] == one["link"]["edges"]  # the same split
    stopped = tmp_path / "stopped"
    argv = _argv(spec, tmp_path / "b.json", "--checkpoint-dir", str(stopped))
    assert main([*argv, "--epochs", "2"]) == 0
    assert main([*argv, "--epochs", "4", "--resume"]) == 0
    assert_same_weights(final_weights(straight), final_weights(stopped))
    resumed = json.loads((tmp_path / "b.json").read_text())
    assert resumed["link"]["test"] == two["link"]["test"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_checkpoint_of_workers_infers_on_the_whole_graph(graph, tmp_path):
    """The partitions of training hold the training graph but name the dataset it was split from,
    so `shardgnn infer` runs the checkpoint on a partition of the whole graph; its embeddings
    equal the model over the whole graph."""
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.train.link import build_link_model

    save_graph(graph, tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    ckpt, parts, out = tmp_path / "ckpt", tmp_path / "parts", tmp_path / "out"
    argv = _argv(spec, tmp_path / "r.json", "--epochs", "1", "--checkpoint-dir", str(ckpt))
    assert main([*argv, "--predictor", "mlp"]) == 0
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", str(parts), "--out", str(out)]
    assert main(argv) == 0
    last = sorted(ckpt.glob("epoch-*"))[-1]
    config = TrainConfig.from_dict(json.loads((last / "meta.json").read_text())["config"])
    model = build_link_model(config, graph.num_features)
    model.load_state_dict(torch.load(last / "rank-0.pt", weights_only=True)["best_state"])
    model.eval()
    with torch.no_grad():
        expected = model.encoder(
            [MessageGraph.from_csr(graph.indptr, graph.indices)] * 2, torch.from_numpy(graph.x)
        ).numpy()
    embeddings = np.load(out / "embeddings.npy", allow_pickle=False)
    np.testing.assert_allclose(embeddings, expected, atol=1e-5, rtol=1e-5)
