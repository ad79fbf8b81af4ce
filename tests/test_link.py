"""Link prediction: edge splits, target-edge exclusion, negatives, metrics, training end to end."""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import numpy as np
import pytest
import torch

import shardgnn.graph.linksplit as linksplit_module
from shardgnn.cli import main
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.linksplit import (
    LinkSplitSpec,
    edge_arrays,
    in_sorted,
    is_symmetric,
    pair_keys,
    sorted_unique,
    split_edges,
)
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.loader.link import (
    IndexedPairs,
    LinkSamplingStage,
    edge_batcher,
    target_exclusion,
    unique_ids,
)
from shardgnn.nn.config import ModelConfig
from shardgnn.nn.link import DotPredictor, LinkModel, MLPPredictor, link_loss
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.train.config import (
    CheckpointConfig,
    LinkConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
)
from shardgnn.train.link import SCORE_CHUNK_VALUES, score_pairs
from shardgnn.train.linkmetrics import auc, average_precision, link_metrics, ranks
from shardgnn.train.single import run_training

from conftest import SHARED_DATA, assert_same_weights, final_weights, requires_shared_data


@pytest.fixture(scope="module")
def link_graph():
    return generate(SyntheticConfig(nodes=1200, degree=8, classes=4, features=16, snr=4.0, seed=3))


def edge_set(graph: Graph) -> set[tuple[int, int]]:
    src, dst = edge_arrays(graph)
    return set(zip(src.tolist(), dst.tolist()))


# ---------------------------------------------------------------------------------- edge splits
def test_split_removes_held_out_edges_in_both_directions(link_graph):
    assert is_symmetric(link_graph)
    spec = LinkSplitSpec(val=0.05, test=0.1, eval_negatives=7, seed=4)
    train_graph, split = split_edges(link_graph, spec)
    full, kept = edge_set(link_graph), edge_set(train_graph)
    undirected = {(min(u, v), max(u, v)) for u, v in full if u != v}
    n_val, n_test = split.val_pos_2P.shape[1], split.test_pos_2P.shape[1]
    assert n_val == round(0.05 * len(undirected)) and n_test == round(0.1 * len(undirected))
    held = set()
    for pos in (split.val_pos_2P, split.test_pos_2P):
        for u, v in pos.T.tolist():
            assert (u, v) in full and u < v
            held |= {(u, v), (v, u)}
    assert kept == full - held  # exactly the held-out pairs left, both directions
    assert is_symmetric(train_graph)
    train_pairs = {tuple(p) for p in split.train_pos_2P.T.tolist()}
    assert train_pairs == {(u, v) for u, v in kept if u < v}
    # negatives: fixed, never an edge of the full graph, never a self-pair
    for pos, neg in ((split.val_pos_2P, split.val_neg_PK), (split.test_pos_2P, split.test_neg_PK)):
        assert neg.shape == (pos.shape[1], 7)
        for u, row in zip(pos[0].tolist(), neg.tolist()):
            for w in row:
                assert w != u and (u, w) not in full and (w, u) not in full
    # node data is untouched; the same spec gives the same split
    assert np.array_equal(train_graph.x, link_graph.x)
    again_graph, again = split_edges(link_graph, spec)
    assert np.array_equal(again.test_neg_PK, split.test_neg_PK)
    assert np.array_equal(again_graph.indices, train_graph.indices)
    other = split_edges(link_graph, dataclasses.replace(spec, seed=5))[1]
    assert not np.array_equal(other.test_pos_2P, split.test_pos_2P)


def test_split_of_a_directed_graph_removes_only_the_edge():
    src = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])
    dst = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 1])  # 1->0 and 2->1 reverse two edges
    graph = Graph.from_edge_index(src, dst, 10)
    assert not is_symmetric(graph)
    train_graph, split = split_edges(graph, LinkSplitSpec(val=0.1, test=0.2, eval_negatives=2))
    held = {tuple(p) for pos in (split.val_pos_2P, split.test_pos_2P) for p in pos.T.tolist()}
    assert edge_set(train_graph) == edge_set(graph) - held
    assert split.train_pos_2P.shape[1] + len(held) == 12


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"val": 0.0}, r"val fraction 0.0 must lie in \(0, 1\)"),
        ({"test": 1.5}, r"test fraction 1.5 must lie in \(0, 1\)"),
        ({"val": 0.5, "test": 0.5}, "leave no training edges"),
        ({"eval_negatives": 0}, "eval_negatives=0 must be >= 1"),
    ],
)
def test_split_spec_refuses_bad_fractions(kwargs, match):
    with pytest.raises(DatasetError, match=match):
        LinkSplitSpec(**kwargs)


def test_split_refuses_a_graph_with_too_few_edges():
    graph = Graph.from_edge_index(np.array([0, 1]), np.array([1, 0]), 3, name="tiny")
    with pytest.raises(DatasetError, match="'tiny': 1 candidate edges"):
        split_edges(graph, LinkSplitSpec())


def reference_eval_negatives(src_P, edge_keys, n, k, rng):
    """The rejection loop as first written: every round checks all ``P * K`` entries."""
    neg = rng.integers(0, n, size=(src_P.shape[0], k), dtype=np.int64)
    src_PK = np.broadcast_to(src_P[:, None], neg.shape)
    for _ in range(100):
        bad = (neg == src_PK) | np.isin(pair_keys(src_PK, neg, n), edge_keys)
        if not bad.any():
            return neg
        neg[bad] = rng.integers(0, n, size=int(bad.sum()), dtype=np.int64)
    raise DatasetError("100 rounds")


@pytest.mark.parametrize("check_chunk", [7, 1 << 20])
def test_eval_negatives_equal_the_full_rejection_loop(check_chunk, monkeypatch):
    """Rechecking only the redrawn entries (first check in chunks of rows) draws exactly what
    the loop that rechecks every entry draws: same generator calls, same accepted values."""
    monkeypatch.setattr(linksplit_module, "_CHECK_CHUNK", check_chunk)
    rng = np.random.default_rng(1)
    n = 40  # dense: about a third of the pairs are edges, so several rounds redraw
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    keys = sorted_unique(pair_keys(src, dst, n))
    src_P = rng.integers(0, n, 300)
    ours = linksplit_module._eval_negatives(src_P, keys, n, 9, np.random.default_rng(2))
    theirs = reference_eval_negatives(src_P, keys, n, 9, np.random.default_rng(2))
    assert np.array_equal(ours, theirs)
    assert not in_sorted(pair_keys(src_P[:, None], ours, n), keys).any()
    assert (ours != src_P[:, None]).all()
    complete = sorted_unique(pair_keys(*np.divmod(np.arange(n * n), n), n))
    with pytest.raises(DatasetError, match="in 100 rounds"):
        linksplit_module._eval_negatives(src_P, complete, n, 3, np.random.default_rng(0))


def test_eval_negatives_memory_is_the_output_plus_a_chunk(monkeypatch):
    """The first rejection check runs in chunks of rows: beyond the ``[P, K]`` result, the draw
    holds O(chunk) temporaries, not several arrays of ``P * K`` keys (the old loop's ``np.isin``
    over every entry of soc-slashdot's test split held ~1 GB)."""
    monkeypatch.setattr(linksplit_module, "_CHECK_CHUNK", 4096)
    rng = np.random.default_rng(0)
    n = 5000
    keys = sorted_unique(pair_keys(rng.integers(0, n, 20000), rng.integers(0, n, 20000), n))
    src_P = rng.integers(0, n, 4000)
    out_bytes = 4000 * 100 * 8
    tracemalloc.start()
    try:
        neg = linksplit_module._eval_negatives(src_P, keys, n, 100, np.random.default_rng(1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert neg.shape == (4000, 100)
    assert peak < out_bytes + 20 * 4096 * 8, (peak, out_bytes)  # the reference: > 4x out_bytes


def test_set_helpers_equal_numpys():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1000, 5000)
    keys = rng.integers(0, 1000, 300)
    assert np.array_equal(sorted_unique(values), np.unique(values))
    assert sorted_unique(values[:0]).size == 0
    assert np.array_equal(in_sorted(values, np.unique(keys)), np.isin(values, keys))
    assert not in_sorted(values, keys[:0]).any()
    nodes, inverse = unique_ids(values)
    ref_nodes, ref_inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(nodes, ref_nodes) and nodes.dtype == ref_nodes.dtype
    assert np.array_equal(inverse, ref_inverse) and inverse.dtype == np.int64
    assert unique_ids(values[:0])[0].size == 0
    sparse = values * 10**9  # ids of a huge graph: sorted instead of marked
    nodes, inverse = unique_ids(sparse)
    assert np.array_equal(nodes, ref_nodes * 10**9) and np.array_equal(inverse, ref_inverse)
    assert inverse.dtype == np.int64


def test_config_refuses_bad_link_settings():
    with pytest.raises(ConfigError, match="--link-val"):
        LinkConfig(val=1.0)
    with pytest.raises(ConfigError, match="--link-test"):
        LinkConfig(val=0.6, test=0.5)
    # a margin the loss never reads, and a rank reported twice: refused, not ignored
    with pytest.raises(ConfigError, match="^--margin 2.0: applies to --link-loss margin, not bce$"):
        LinkConfig(margin=2.0)
    assert LinkConfig(loss="margin", margin=2.0).margin == 2.0
    with pytest.raises(ConfigError, match="^--hits-at 10,10: names a rank twice; give each once$"):
        LinkConfig(hits_at=(10, 10))
    # Hits@K over eval_negatives + 1 candidates is 1 for every K above eval_negatives: refused
    # when asked for, left out of the default ranks
    with pytest.raises(
        ConfigError, match=r"^--hits-at 5,30: Hits@30 ranks each positive among 21 "
    ):
        LinkConfig(eval_negatives=20, hits_at=(5, 30))
    assert LinkConfig(eval_negatives=20, hits_at=(5, 20)).reported_hits_at() == (5, 20)
    assert LinkConfig(eval_negatives=60).reported_hits_at() == (10, 50)
    assert LinkConfig(eval_negatives=5).reported_hits_at() == ()
    assert LinkConfig().reported_hits_at() == (10, 50, 100)
    assert TrainConfig(task="link", run=RunConfig(workers=2)).run.distributed
    assert TrainConfig(task="link", mode="full", run=RunConfig(workers=2)).run.distributed


# ---------------------------------------------------------------------------- edge mini-batches
@pytest.mark.parametrize("kind", ["uniform", "in-batch"])
def test_target_edges_never_appear_in_their_batch_blocks(link_graph, kind):
    train_graph, split = split_edges(link_graph, LinkSplitSpec(seed=1))
    n = train_graph.num_nodes
    sampler = NeighborSampler(
        train_graph.indptr, train_graph.indices, SamplerConfig(fanouts=(-1, 5))
    )
    batches = edge_batcher(split.train_pos_2P.shape[1], 64, shuffle=True, seed=0)
    stage = LinkSamplingStage(
        batches,
        split.train_pos_2P,
        sampler,
        NegativeSampler(kind, n, 2, np.diff(train_graph.indptr)),
        num_nodes=n,
        symmetric=True,
        seed=9,
    )
    batches.set_epoch(1)
    batches_seen = 0
    for _, sample in stage:
        src = sample.seeds[sample.pos_src_P].numpy()
        dst = sample.seeds[sample.pos_dst_P].numpy()
        excluded = set(target_exclusion(src, dst, n, True).tolist())
        assert len(excluded) == 2 * src.shape[0]
        for block in sample.blocks:
            s = block.src_nodes_S[block.indices_E].numpy()
            d = block.dst_nodes_D[block.dst_index_E()].numpy()
            keys = pair_keys(s, d, n)
            assert not excluded & set(keys.tolist())
        # the seeds hold every endpoint; negatives start at the positive's source
        assert set(np.unique(np.concatenate([src, dst])).tolist()) <= set(sample.seeds.tolist())
        assert sample.neg_dst_PK.shape == (src.shape[0], 2)
        # the full-fanout output layer lost exactly the targets' edges, both directions
        full = sampler.sample(sample.seeds, 0).blocks[-1]
        assert full.num_edges - sample.blocks[-1].num_edges == 2 * src.shape[0]
        batches_seen += 1
    assert batches_seen == len(batches)


def test_in_batch_negatives_are_other_positives_destinations():
    sampler = NegativeSampler("in-batch", 100, 3)
    src, dst = np.arange(5), np.array([10, 11, 12, 13, 14])
    neg = sampler.sample(src, dst, 0)
    assert neg.tolist()[0] == [11, 12, 13] and neg.tolist()[4] == [10, 11, 12]
    assert sampler.sample(src[:2], dst[:2], 0).shape == (2, 1)  # capped at P - 1


@pytest.mark.parametrize("kind", ["uniform", "degree"])
def test_negatives_follow_the_requested_distribution(kind):
    """Chi-square goodness of fit on 12 nodes (critical value of chi2(11) at p = 0.001: 31.3)."""
    degree = np.array([1, 2, 3, 4, 5, 6, 8, 10, 12, 20, 30, 50])
    sampler = NegativeSampler(kind, degree.shape[0], 50, degree)
    draws = np.concatenate(
        [
            sampler.sample(np.zeros(100, np.int64), np.zeros(100, np.int64), s).ravel()
            for s in range(8)
        ]
    )
    observed = np.bincount(draws, minlength=degree.shape[0])
    p = np.ones(12) if kind == "uniform" else degree**0.75
    expected = draws.shape[0] * p / p.sum()
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 31.3, (kind, chi2)
    if kind == "degree":  # and clearly not uniform
        uniform = draws.shape[0] / 12
        assert float(((observed - uniform) ** 2 / uniform).sum()) > 100


# ------------------------------------------------------------------------------------- metrics
def test_metrics_against_brute_force():
    rng = np.random.default_rng(0)
    pos = np.round(rng.normal(1, 1, 40), 1)  # rounded: ties on purpose
    neg = np.round(rng.normal(0, 1, (40, 6)), 1)
    pairs = [(p, q) for p in pos for q in neg[:, 0]]
    brute_auc = np.mean([1.0 if p > q else 0.5 if p == q else 0.0 for p, q in pairs])
    assert auc(pos, neg[:, 0]) == pytest.approx(brute_auc)
    # AP by its definition: precision at each distinct threshold, weighted by the recall step
    scores = np.concatenate([pos, neg[:, 0]])
    labels = np.r_[np.ones(40), np.zeros(40)]
    ap, prev_recall = 0.0, 0.0
    for t in sorted(set(scores.tolist()), reverse=True):
        chosen = scores >= t
        recall = labels[chosen].sum() / 40
        ap += (recall - prev_recall) * labels[chosen].mean()
        prev_recall = recall
    assert average_precision(pos, neg[:, 0]) == pytest.approx(ap)
    r = ranks(pos, neg)
    for i in range(40):
        better = (neg[i] > pos[i]).sum()
        ties = (neg[i] == pos[i]).sum()
        assert r[i] == 1 + better + ties / 2
    m = link_metrics(pos, neg, (1, 3))
    assert m["mrr"] == pytest.approx(np.mean(1 / r))
    assert m["hits@3"] == pytest.approx(np.mean(r <= 3))
    assert auc([2.0, 3.0], [0.0, 1.0]) == 1.0 and average_precision([2.0], [1.0, 0.0]) == 1.0


def test_predictors_and_losses():
    h_u, h_v = torch.randn(5, 4), torch.randn(5, 4)
    assert torch.allclose(DotPredictor()(h_u, h_v), (h_u * h_v).sum(1))
    assert MLPPredictor(4, 8)(h_u, h_v).shape == (5,)
    pos, neg = torch.tensor([2.0, -1.0]), torch.tensor([[0.5, 3.0], [-2.0, 0.0]])
    margin = link_loss(pos, neg, "margin", 1.0)
    expected = np.mean([max(0, 1 - 2 + 0.5), max(0, 1 - 2 + 3), max(0, 1 + 1 - 2), max(0, 1 + 1)])
    assert margin.item() == pytest.approx(expected)
    bce = link_loss(pos, neg, "bce", 1.0)
    ref = torch.nn.functional.binary_cross_entropy_with_logits
    expected = ref(pos, torch.ones(2)) + ref(neg, torch.zeros(2, 2))
    assert bce.item() == pytest.approx(expected.item())
    # softmax: each positive is class 0 among itself and its negatives
    softmax = link_loss(pos, neg, "softmax", 1.0)
    logits = torch.cat([pos[:, None], neg], dim=1)
    expected = torch.nn.functional.cross_entropy(logits, torch.zeros(2, dtype=torch.long))
    assert softmax.item() == pytest.approx(expected.item())


class OperandSpy(torch.nn.Module):
    """A predictor that records the largest operand it is given (then scores as ``inner``)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.largest = inner, 0

    def forward(self, h_u, h_v):
        self.largest = max(self.largest, h_u.numel(), h_v.numel())
        return self.inner(h_u, h_v)


@pytest.mark.parametrize("predictor", [DotPredictor, lambda: MLPPredictor(64, 32)])
def test_scoring_an_evaluation_split_holds_o_chunk_rows(predictor):
    """Regression: evaluation scored 65,536 positives at a time, each with its K negatives, so a
    split with K = 100 and D = 64 put three [6.5M, 64] operands (1.7 GB each) in memory at
    once (soc-slashdot: 7.4 GB peak RSS). A chunk's operands now stay within
    ``SCORE_CHUNK_VALUES``, whatever the split's size, and the scores equal one-chunk scoring
    bit for bit."""
    rng = np.random.default_rng(0)
    num_nodes, p, k, d = 3000, 700, 100, 64  # one 700-positive chunk: 4.5M values
    pos_2P = rng.integers(0, num_nodes, (2, p))
    pairs = IndexedPairs.of(pos_2P, rng.integers(0, num_nodes, (p, k)))
    h_ND = torch.randn(len(pairs.nodes), d)
    spy = OperandSpy(predictor())
    model = LinkModel(torch.nn.Identity(), spy)
    pos, neg = score_pairs(model, h_ND, pairs)
    assert 0 < spy.largest <= SCORE_CHUNK_VALUES < p * k * d
    spy.largest = 0
    one_pos, one_neg = score_pairs(model, h_ND, pairs, chunk_values=p * (1 + k) * d)
    assert spy.largest == p * k * d  # one chunk: the whole split at once
    assert pos.dtype == one_pos.dtype == np.float32 and neg.shape == (p, k)
    assert np.array_equal(pos, one_pos) and np.array_equal(neg, one_neg)
    small_pos, small_neg = score_pairs(model, h_ND, pairs, chunk_values=7 * (1 + k) * d)
    if isinstance(spy.inner, DotPredictor):  # a product and a sum per row: any chunking
        assert np.array_equal(small_pos, pos) and np.array_equal(small_neg, neg)
    else:  # a GEMM over 7 rows may take another kernel than over 648, rounding differently
        assert np.allclose(small_pos, pos, rtol=1e-5, atol=1e-6)
        assert np.allclose(small_neg, neg, rtol=1e-5, atol=1e-6)
    empty = IndexedPairs.of(pos_2P[:, :0], np.zeros((0, k), dtype=np.int64))
    none_pos, none_neg = score_pairs(model, h_ND, empty)
    assert none_pos.shape == (0,) and none_neg.shape == (0, k)


# ------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_link_training_learns_and_reports_every_metric(link_graph, mode, tmp_path):
    config = TrainConfig(
        task="link",
        mode=mode,
        sampler=SamplerConfig(fanouts=(10, 10)),
        batch_size=256,
        optim=OptimConfig(epochs=4 if mode == "minibatch" else 40, lr=0.01),
        model=ModelConfig(hidden=32, dropout=0.0),
        link=LinkConfig(out_dim=16, eval_negatives=20, hits_at=(5, 10)),
        results=str(tmp_path / "r.json"),
        progress=False,
    )
    results = run_training(config, link_graph)
    assert results["metric"] == "auc" and results["task"] == "link"
    link = results["link"]
    assert set(link["test"]) == {"auc", "ap", "mrr", "hits@5", "hits@10"}
    assert link["test"]["auc"] == results["test_acc"]
    # The raw features alone (cosine of x_u, x_v) score about 0.70 on this split; a model that
    # learns from the graph's structure and its homophily must do clearly better.
    _, split = split_edges(link_graph, LinkSplitSpec(eval_negatives=20))
    x = torch.nn.functional.normalize(torch.as_tensor(link_graph.x, dtype=torch.float32), dim=1)
    u, v = split.test_pos_2P
    baseline = auc((x[u] * x[v]).sum(1).numpy(), (x[u] * x[split.test_neg_PK[:, 0]]).sum(1).numpy())
    assert results["test_acc"] > baseline + 0.04, (results["test_acc"], baseline)
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["link"]["val"]["auc"] == results["val_acc"]
    again = run_training(config, link_graph)
    assert again["test_acc"] == results["test_acc"]  # reproducible


@pytest.mark.parametrize("mode", ["minibatch", "full"])
def test_link_resume_is_bit_exact(link_graph, mode, tmp_path):
    """Split, negatives and sampling are pure functions of (seed, epoch, batch), so training two
    epochs, stopping and resuming equals four epochs straight."""

    def config(directory, epochs, resume=False):
        return TrainConfig(
            task="link",
            mode=mode,
            sampler=SamplerConfig(fanouts=(5, 5)),
            batch_size=512,
            optim=OptimConfig(epochs=epochs, lr=0.01),
            model=ModelConfig(hidden=16, dropout=0.5),
            link=LinkConfig(out_dim=8, eval_negatives=5, negatives=2),
            checkpoint=CheckpointConfig(dir=str(directory), resume=resume),
            seed=5,
            threads=1,  # bit-exact: one summation order in the sparse products
            progress=False,
        )

    straight = run_training(config(tmp_path / "a", 4), link_graph)
    run_training(config(tmp_path / "b", 2), link_graph)
    resumed = run_training(config(tmp_path / "b", 4, resume=True), link_graph)
    assert_same_weights(final_weights(tmp_path / "a"), final_weights(tmp_path / "b"))
    assert [e["loss"] for e in resumed["epochs"]] == [e["loss"] for e in straight["epochs"]]
    assert resumed["link"] == straight["link"]


def test_link_cli_runs_and_refuses_a_featureless_graph(tmp_path, capsys):
    out = tmp_path / "r.json"
    spec = "synthetic:nodes=800,degree=6,classes=3,features=8"
    argv = ["train", spec, "--task", "link", "--fanouts", "5,5", "--epochs", "1", "--quiet"]
    assert main([*argv, "--results", str(out), "--negative-sampler", "degree"]) == 0
    printed = capsys.readouterr().out
    assert "val auc" in printed and "test mrr" in printed
    assert json.loads(out.read_text())["link"]["test"]["hits@100"] >= 0
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{i} {(i * 7 + 1) % 50}\n" for i in range(50)))
    featureless = ["train", f"file:{edges}", "--task", "link", "--epochs", "1", "--quiet"]
    # asked for no learnt rows, a featureless graph is refused; by default its recipe gives
    # every node learnt rows (--embedding-dim 64) and it trains
    assert main([*featureless, "--embedding-dim", "0"]) == 2
    assert "no node features" in capsys.readouterr().err
    assert main([*featureless, "--results", str(tmp_path / "f.json")]) == 0
    assert json.loads((tmp_path / "f.json").read_text())["config"]["embedding"]["dim"] == 64
    # `shardgnn plot` names what a link run's curves hold.
    from shardgnn.cli.plot import training_figure

    figure = training_figure([(out, json.loads(out.read_text()))])
    assert [ax.get_title() for ax in figure.axes][2] == "validation AUC"


@requires_shared_data
def test_gae_on_cora_reaches_the_paper_auc():
    """GAE (Kipf & Welling 2016): 2-layer GCN 32 -> 16, inner product, 85/5/10 split, 200 epochs,
    lr 0.01: AUC 91.0, AP 92.0 in the paper."""
    if not (SHARED_DATA / "cora").is_dir():
        pytest.skip("cora is absent")
    config = TrainConfig(
        dataset="cora",
        data_dir=str(SHARED_DATA),
        task="link",
        mode="full",
        model=ModelConfig(model="gcn", hidden=32, dropout=0.0, num_layers=2),
        optim=OptimConfig(epochs=200, lr=0.01),
        link=LinkConfig(out_dim=16),
        progress=False,
    )
    results = run_training(config)
    assert results["link"]["test"]["auc"] > 0.89, results["link"]["test"]
