"""Temporal models and training (issue 17): TGN's memory against a sequential per-event
reference and against PyG's ``TGNMemory``, the temporal attention against PyG's
``TransformerConv``, no leakage from a batch's own events, chronological batches with random
chunk scheduling, historical negatives, and the command line."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import torch

from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.loader.temporal import EventBatches
from shardgnn.nn.temporal import NodeMemory, TemporalAttention, TimeEncoder
from shardgnn.train.config import TrainConfig
from shardgnn.train.epoch import EpochRun
from shardgnn.train.temporal import TemporalLinkSteps, historical_negatives


def small_stream(nodes=40, events=600, features=3, seed=0) -> TemporalGraph:
    """Distinct times (no ties within a node's batch) and event features."""
    g = generate_temporal(TemporalStreamConfig(nodes=nodes, events=events, seed=seed))
    feat = np.random.default_rng(seed).normal(size=(events, features)).astype(np.float32)
    return TemporalGraph.from_events(g.src, g.dst, g.t, feat, num_nodes=nodes)


def sequential_memory(memory: NodeMemory, g: TemporalGraph, batches) -> torch.Tensor:
    """The reference: per event, in order, remember it as its endpoints' latest event of the
    batch; at the batch's end, per node of the batch, one GRU step on the message of its pending
    event (the one from the node's previous batch), from memories as they were before the
    batch. Plain loops, one node at a time."""
    n, dim = memory.num_nodes, memory.dim
    state = torch.zeros(n, dim)
    last = torch.zeros(n, dtype=torch.float64)
    pending: dict[int, tuple[int, int]] = {}  # node -> (other endpoint, event id)
    with torch.no_grad():
        for lo, hi in batches:
            batch_latest: dict[int, tuple[int, int]] = {}
            for e in range(lo, hi):
                u, v = int(g.src[e]), int(g.dst[e])
                batch_latest[u] = (v, e)
                batch_latest[v] = (u, e)
            before, last_before = state.clone(), last.clone()
            for node in sorted(batch_latest):
                if node in pending:
                    other, e = pending[node]
                    dt = torch.tensor([g.t[e] - last_before[node].item()], dtype=torch.float64)
                    message = torch.cat(
                        [
                            before[node],
                            before[other],
                            memory.event_feat_EF[e],
                            memory.time_encoder(dt)[0],
                        ]
                    )
                    last[node] = float(g.t[e])
                else:
                    message = torch.zeros(memory.gru.input_size)
                state[node] = memory.gru(message[None], before[node][None])[0]
            pending.update(batch_latest)
    return state, last


def stream_memory(memory: NodeMemory, g: TemporalGraph, batches) -> None:
    """What a training epoch does to memory: read the batch's nodes, store, observe."""
    src, dst = torch.from_numpy(g.src), torch.from_numpy(g.dst)
    t = torch.from_numpy(g.t)
    memory.train()
    for lo, hi in batches:
        nodes = torch.unique(torch.cat([src[lo:hi], dst[lo:hi]]))
        memory.store(nodes, *memory.updated(nodes))
        memory.observe(src[lo:hi], dst[lo:hi], t[lo:hi], torch.arange(lo, hi))


def test_memory_after_batches_equals_a_sequential_per_event_reference():
    g = small_stream()
    torch.manual_seed(0)
    feat = torch.from_numpy(g.edge_feat)
    memory = NodeMemory(g.num_nodes, 8, TimeEncoder(6), feat)
    batches = [(lo, min(lo + 50, g.num_events)) for lo in range(0, g.num_events, 50)]
    stream_memory(memory, g, batches)
    expected, last = sequential_memory(memory, g, batches)
    torch.testing.assert_close(memory.memory, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(memory.last_update, last)


def test_memory_equals_pyg_tgn_memory():
    """The same GRU, time encoder and events in PyG's TGNMemory (identity message, last
    aggregator) give the same memory after every batch, and the same read of every node.

    The first batch touches every node, so that every later read has a message for every node:
    without torch_scatter, PyG's fallback ``scatter_argmax`` gives a node without messages the
    index ``N - 1``, a real message whenever a read covers more messages than nodes (ours gives
    it the zero message, as TGN)."""
    tgn = pytest.importorskip("torch_geometric.nn.models.tgn")
    g = small_stream(seed=1)
    n = g.num_nodes
    chain = np.arange(n - 1)  # events i -> i + 1: the first batch, covering every node
    src = np.r_[chain, g.src]
    dst = np.r_[chain + 1, g.dst]
    times = np.arange(src.size) * 7.0 + 3  # integer (PyG keeps int64 times) and distinct
    feat = np.random.default_rng(2).normal(size=(src.size, 3)).astype(np.float32)
    g = TemporalGraph.from_events(src, dst, times, feat, num_nodes=n)
    feat = torch.from_numpy(g.edge_feat)
    torch.manual_seed(0)
    ours = NodeMemory(n, 8, TimeEncoder(6), feat)
    theirs = tgn.TGNMemory(n, 3, 8, 6, tgn.IdentityMessage(3, 8, 6), tgn.LastAggregator())
    theirs.gru.load_state_dict(ours.gru.state_dict())
    # one time encoder for both: ours rounds ``dt * w + b`` once (a fused multiply-add wherever
    # ATen's AVX2/AVX-512 kernels run), PyG's linear layer twice; cos of arguments in the
    # thousands turns that one rounding into ~1e-6 of memory. The encoders are compared on
    # their own below, with a tolerance derived from the rounding.
    theirs.time_enc = ours.time_encoder
    theirs.train()
    src, dst = torch.from_numpy(g.src), torch.from_numpy(g.dst)
    t = torch.from_numpy(g.t).long()
    everyone = torch.arange(n)
    bounds = [0, *range(n - 1, g.num_events, 60), g.num_events]
    with torch.no_grad():
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            stream_memory(ours, g, [(lo, hi)])
            theirs.update_state(src[lo:hi], dst[lo:hi], t[lo:hi], feat[lo:hi])
            torch.testing.assert_close(ours.memory, theirs.memory, rtol=1e-5, atol=1e-6)
            read, last = ours.updated(everyone)
            their_read, their_last = theirs(everyone)
            torch.testing.assert_close(read, their_read, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(last.numpy(), their_last.numpy())
    assert ours.memory.abs().sum() > 0


def test_time_encoder_equals_pyg_time_encoder_to_the_rounding_of_its_argument():
    """``cos(dt * w + b)`` against PyG's ``TimeEncoder`` (a linear layer, then cos): the two
    round the argument differently (one fused rounding or two), so they may differ by the
    argument's rounding, a few ulps of ``|dt * w| + |b|``, and by no more."""
    tgn = pytest.importorskip("torch_geometric.nn.models.tgn")
    torch.manual_seed(0)
    ours = TimeEncoder(16)
    theirs = tgn.TimeEncoder(16)
    theirs.lin.load_state_dict(ours.lin.state_dict())
    dt = torch.cat([torch.arange(0, 100, dtype=torch.float32), torch.arange(0, 1e6, 997.0)])
    with torch.no_grad():
        arg = dt[:, None] * ours.lin.weight.view(-1) + ours.lin.bias
        bound = 4 * torch.finfo(torch.float32).eps * (arg.abs() + ours.lin.bias.abs()) + 1e-6
        diff = (ours(dt) - theirs(dt)).abs()
    assert bool((diff <= bound).all()), float((diff - bound).max())


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_time_encoder_onnx_file_equals_training_on_gaps_up_to_1e9(tmp_path):
    """Training forms the encoding's argument as ONNX Runtime does (a multiply, then an add: two
    roundings, not a fused multiply-add), so the encoder's ONNX file equals it on gaps where
    one rounding of the argument is a sizeable angle (at 1e6 s a fused argument was 0.06 off)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    encoder = TimeEncoder(32).eval()
    with torch.no_grad():
        encoder.lin.bias.uniform_(-1.0, 1.0)  # an add that rounds: the case the fusion changed
    dt = torch.cat([torch.rand(2000) * 10.0**k for k in range(10)])
    path = tmp_path / "encoder.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(encoder, (dt,), str(path), input_names=["dt"], dynamo=True)
    got = onnxruntime.InferenceSession(str(path)).run(None, {"dt": dt.numpy()})[0]
    with torch.no_grad():
        want = encoder(dt).numpy()
        w, b = encoder.lin.weight.view(-1).double(), encoder.lin.bias.double()
        fused = torch.cos((dt.double()[:, None] * w + b).float()).numpy()  # rounded once, as FMA
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    assert np.abs(fused - got).max() > 1e-2  # what the file would be off by from a fused one


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_memory_equals_pyg_tgn_memory_under_every_cpu_kernel(capability):
    """The comparison with PyG holds whichever vectorised kernels ATen picks (a fresh machine
    picks AVX2/AVX-512 ones, which fuse multiply-adds; ``default`` does not): the same test,
    run in a process started with ``ATEN_CPU_CAPABILITY``."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch_geometric.nn.models.tgn")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    test = f"{__file__}::test_memory_equals_pyg_tgn_memory"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_temporal_attention_equals_pyg_transformer_conv():
    nn_pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    ours = TemporalAttention(12, 8, 5, heads=2, dropout=0.0)
    theirs = nn_pyg.TransformerConv(12, 4, heads=2, dropout=0.0, edge_dim=5)
    for name in ("lin_query", "lin_key", "lin_value", "lin_edge", "lin_skip"):
        getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())
    x_src = torch.randn(30, 12, requires_grad=True)
    x_dst = torch.randn(10, 12, requires_grad=True)
    src = torch.randint(0, 30, (60,))
    dst = torch.randint(0, 9, (60,))  # destination 9 has no events: skip term only
    attr = torch.randn(60, 5)
    out = ours(x_dst, x_src, src, dst, attr)
    expected = theirs((x_src, x_dst), torch.stack([src, dst]), attr)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), [x_src, x_dst])
    expected_grads = torch.autograd.grad(expected.square().sum(), [x_src, x_dst])
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def temporal_config(model="tgn", **over) -> TrainConfig:
    data = {
        "dataset": "synthetic-temporal:nodes=300,events=8000",
        "task": "link",
        "model": {"model": model, "heads": 2, "dropout": 0.0},
        "batch_size": 50,
        "optim": {"epochs": 1, "lr": 1e-3},
        "link": {"val": 0.15, "test": 0.15, "out_dim": 16},
        "temporal": {
            "memory_dim": 16,
            "time_dim": 8,
            "neighbors": [5] if model != "tgat" else [4, 3],
        },
        "progress": False,
    }
    for key, value in over.items():
        data[key] = value
    return TrainConfig.from_dict(data)


def batch_losses(steps: TemporalLinkSteps) -> list[float]:
    losses = []
    original = steps._train_step

    def record(*args):
        out = original(*args)
        losses.append(out[0])
        return out

    steps._train_step = record
    steps.train_epoch(EpochRun(0, False))
    return losses


@pytest.mark.parametrize("model", ["tgn", "jodie", "tgat"])
def test_a_batch_never_sees_its_own_or_later_events(model):
    """Changing the features of the events from a batch on leaves the earlier batches' losses
    unchanged, and for memory models that batch's loss too: its events reach memory and
    neighbourhoods only after it is scored. (TGAT samples before each pair's own time, so its
    pairs may see the batch's earlier events: that batch differs.) The check can fail: the
    next batch sees the change."""
    g = small_stream(nodes=60, events=1000, seed=3)
    first = 300  # the first changed event: the first of batch 6
    changed = g.edge_feat.copy()
    changed[first:] += 5.0
    other = TemporalGraph.from_events(g.src, g.dst, g.t, changed, num_nodes=g.num_nodes)
    config = temporal_config(model)
    a = batch_losses(TemporalLinkSteps(config, g))
    b = batch_losses(TemporalLinkSteps(config, other))
    same = first // 50 + (model != "tgat")
    assert a[:same] == b[:same]
    assert a[same] != b[same]


def test_event_batches_cover_the_span_and_chunks_move_the_boundaries():
    plain = EventBatches(10, 1000, 100)
    plain.set_epoch(3)
    assert [span for _, span in plain][0] == (10, 110)
    starts = set()
    for epoch in range(8):
        batches = EventBatches(10, 1000, 100, chunks=4, seed=1)
        batches.set_epoch(epoch)
        spans = [span for _, span in batches]
        assert spans[0][0] == 10 and spans[-1][1] == 1000
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert all(hi - lo <= 100 for lo, hi in spans)
        starts.add(spans[0][1] - 10)
    assert starts <= {25, 50, 75, 100} and len(starts) > 1
    batches.set_epoch(7, start=2)
    assert [i for i, _ in batches][0] == 2 and len(batches) == len(spans) - 2
    assert list(EventBatches(5, 5, 10)) == []


def test_more_chunks_than_events_per_batch_is_refused(capsys):
    """A chunk holds at least one event, so --chunks above --batch-size would start an epoch's
    first batch past a batch's worth of events (one run trained on a first batch of 2,550)."""
    from shardgnn.cli import main

    args = ["train", "synthetic-temporal:nodes=200,events=500", "--model", "tgn", "--epochs", "1"]
    assert main([*args, "--batch-size", "50", "--chunks", "51"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--chunks 51 splits each batch of 50 events (--batch-size) into chunks of at least one "
            "event: give at most 50"
        )
    )
    with pytest.raises(AssertionError):
        EventBatches(0, 100, 10, chunks=11)


def test_historical_negatives_are_past_partners_other_than_the_positive():
    src = np.array([0, 0, 0, 1, 2, 0, 0, 1, 3])
    dst = np.array([1, 2, 3, 2, 0, 1, 4, 2, 1])
    neg = historical_negatives(src, dst, 5, 5, np.random.default_rng(0))
    assert np.all(neg[:5] == -1)
    assert neg[5] in (2, 3)  # 0 sent to 1, 2, 3; the positive is 1
    assert neg[6] in (1, 2, 3)
    # node 1's only past partner is the positive: a uniform node instead; node 3: no past
    assert 0 <= neg[7] < 5 and 0 <= neg[8] < 5


@pytest.mark.parametrize("model", ["tgn", "jodie", "tgat"])
def test_temporal_training_learns_the_synthetic_stream(model):
    """Recurring partners are predictable: every model beats chance clearly on the test
    events, and evaluation leaves the trained state untouched (same AP twice)."""
    # tgat without node or event features only sees times: learnt node rows give it identity
    rows = {"embedding": {"dim": 16}} if model == "tgat" else {}
    config = temporal_config(model, optim={"epochs": 3, "lr": 3e-3}, **rows)
    from shardgnn.train.single import run_training

    results = run_training(config)
    test = results["link"]["test"]
    assert test["ap"] > 0.7 and test["auc"] > 0.7
    assert {"ap_historical", "ap_new_nodes", "ap_batch_mean"} <= test.keys()
    assert results["epochs"][-1]["loss"] < results["epochs"][0]["loss"]


def test_cli_trains_a_temporal_file_and_writes_results(tmp_path, capsys):
    from shardgnn.cli import main

    g = small_stream(nodes=50, events=800, features=0, seed=4)
    rows = "\n".join(f"{s} {d} {int(t)}" for s, d, t in zip(g.src, g.dst, g.t))
    (tmp_path / "events.txt").write_text("src dst time\n" + rows + "\n")
    out = tmp_path / "results.json"
    code = main(
        [
            "train", f"temporal:{tmp_path / 'events.txt'}", "--task", "link", "--model", "tgn",
            "--epochs", "2", "--batch-size", "100", "--memory-dim", "16", "--time-dim", "8",
            "--out-dim", "16", "--heads", "2", "--chunks", "4", "--results", str(out),
            "--quiet",
        ]
    )  # fmt: skip
    assert code == 0
    results = json.loads(out.read_text())
    assert results["status"] == "complete" and len(results["epochs"]) == 2
    assert 0.0 <= results["link"]["test"]["ap"] <= 1.0
    assert "val ap" in capsys.readouterr().out


def _train_distributed(ctx, config_dict):
    from shardgnn.train.worker import train_with_context

    results = train_with_context(TrainConfig.from_dict(config_dict), ctx)
    return [e["loss"] for e in results["epochs"]], results["link"]["test"], results.get("comm")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("model,world", [("tgn", 2), ("tgn", 3), ("jodie", 2), ("tgat", 2)])
def test_distributed_training_equals_one_process(tmp_path, model, world):
    """Memory sharded by owner, batches split by rank, sampling by owner: the epochs' losses and
    the test metrics equal one process's (dropout 0; float rounding only: the gradient sums
    differ in their last bits, which Adam turns into steps of full size on near-zero gradients,
    so the learning rate is kept small). Contiguous parts keep node ids, so both runs see the
    same graph in the same ids."""
    from shardgnn.partition.temporal import write_temporal_partitions
    from shardgnn.train.single import run_training

    from distributed_helpers import run_workers

    g = small_stream(nodes=60, events=1200, seed=5)
    assignment = np.arange(g.num_nodes) * world // g.num_nodes
    write_temporal_partitions(g, assignment, tmp_path / "parts", method="range")
    config = temporal_config(model, optim={"epochs": 2, "lr": 1e-4})
    single = run_training(config, g)
    data = config.to_dict()
    data["run"]["partitions"] = str(tmp_path / "parts")
    ranks = run_workers(_train_distributed, world, data)
    losses, test, comm = ranks[0]
    np.testing.assert_allclose(losses, [e["loss"] for e in single["epochs"]], rtol=2e-5)
    for key in ("ap", "auc", "ap_historical", "ap_new_nodes"):
        # scores of never-seen nodes tie exactly in one process; rounding splits the ties
        assert abs(test[key] - single["link"]["test"][key]) < 5e-3, key
    assert model == "jodie" or comm["sample"]["bytes_sent"] > 0  # jodie samples nothing
    assert model == "tgat" or comm["memory"]["bytes_sent"] > 0  # tgat has no memory


def test_memory_checkpoints_re_shard_by_original_id():
    """Issue 33: TGN's memory held in 2 shards of one partition, checkpointed and re-sharded onto
    3 shards of another, holds every node's row, last update and pending event bit for bit, its
    pending partner named in the new partition's ids (in the checkpoint, by original id)."""
    from shardgnn.train.checkpoint import reshard

    n, dim, rng = 30, 4, np.random.default_rng(0)
    old_orig, new_orig = rng.permutation(n), rng.permutation(n)

    def shards(orig, bounds):
        models = []
        for first, end in zip(bounds[:-1], bounds[1:]):
            torch.manual_seed(0)  # the same GRU everywhere, as ranks start alike
            model = torch.nn.Module()
            model.memory = NodeMemory(
                n, dim, TimeEncoder(3), torch.zeros(50, 0), first=first, rows=end - first,
                orig_ids=orig,
            )  # fmt: skip
            models.append(model)
        return models

    old = shards(old_orig, [0, 14, 30])
    with torch.no_grad():
        for model in old:
            memory, rows = model.memory, model.memory.rows
            memory.memory.copy_(torch.randn(rows, dim))
            memory.last_update.copy_(torch.rand(rows, dtype=torch.float64))
            partner = np.where(rng.random(rows) < 0.3, -1, rng.integers(0, n, rows))
            memory.pending_other.copy_(torch.from_numpy(partner))
            memory.pending_time.copy_(torch.rand(rows, dtype=torch.float64))
            memory.pending_event.copy_(torch.from_numpy(rng.integers(0, 50, rows)))
    # every buffer in the old partition's id order (parts are contiguous, in rank order)
    every = {
        name: torch.cat([getattr(m.memory, name) for m in old])
        for name in ("memory", "last_update", "pending_other", "pending_time", "pending_event")
    }
    assert (every["pending_other"] >= 0).sum() > 10 and (every["pending_other"] < 0).any()
    states = [
        {
            "model": m.state_dict(),
            "best_state": {},
            "optimizer": {"state": {}, "param_groups": []},
            "torch_rng": torch.get_rng_state(),
            "comm_total": {},
        }
        for m in old
    ]
    partner = states[0]["model"]["memory.held.pending_other"]
    held = old[0].memory.pending_other
    assert torch.equal(partner >= 0, held >= 0)
    assert torch.equal(partner[held >= 0], torch.from_numpy(old_orig)[held[held >= 0]])
    old_position = np.argsort(old_orig)  # original id -> old id
    new_position = np.argsort(new_orig)  # original id -> new id
    new = shards(new_orig, [0, 9, 20, 30])
    for rank, model in enumerate(new):
        ids = model.memory.held.node_ids.numpy()
        np.testing.assert_array_equal(ids, new_orig[model.memory.held_ids().numpy()])
        model.load_state_dict(reshard(states, rank, {"memory.held.": ids})["model"])
        take = torch.from_numpy(old_position[ids])
        for name in ("memory", "last_update", "pending_time", "pending_event"):
            assert torch.equal(getattr(model.memory, name), every[name][take]), name
        was = every["pending_other"][take]
        now = model.memory.pending_other
        assert torch.equal(now >= 0, was >= 0)
        expected = new_position[old_orig[was[was >= 0].numpy()]]
        np.testing.assert_array_equal(now[now >= 0].numpy(), expected)
        assert torch.equal(model.memory.gru.weight_ih, old[0].memory.gru.weight_ih)


def _train_temporal(ctx, config_dict, signal_rank=None, step_number=0):
    """A distributed temporal training rank; rank ``signal_rank`` receives SIGUSR1 at its
    optimiser step ``step_number``: its message then, else ``(epoch losses, test metrics)``."""
    import signal

    from shardgnn.errors import Preempted
    from shardgnn.train.dist_temporal import DistTemporalLinkSteps
    from shardgnn.train.loop import TrainingLoop

    from conftest import signal_self_at_step

    config = TrainConfig.from_dict(config_dict)
    steps = DistTemporalLinkSteps(config, ctx)
    if ctx.rank == signal_rank:
        signal_self_at_step(steps.optimizer, step_number, signal.SIGUSR1)
    try:
        results = TrainingLoop(config, steps).run()
    except Preempted as exc:
        return str(exc)
    return [e["loss"] for e in results["epochs"]], results["link"]["test"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tgn_preempted_on_4_workers_resumes_on_2_and_3(tmp_path):
    """Issue 33: a TGN job on 4 workers, preempted mid-epoch, resumes on 2 and on 3 workers with
    its memory re-sharded (rows, last updates, pending events): the epochs' losses and the test
    metrics equal the uninterrupted 4-worker run's to rounding (contiguous parts keep node ids,
    and memory updates follow one process's order whatever the worker count)."""
    import shutil

    from shardgnn.partition.temporal import write_temporal_partitions
    from shardgnn.train.checkpoint import Checkpointer, read_checkpoint_meta

    from distributed_helpers import run_workers

    g = small_stream(nodes=60, events=1200, seed=5)
    for parts in (4, 3, 2):
        assignment = np.arange(g.num_nodes) * parts // g.num_nodes
        write_temporal_partitions(g, assignment, tmp_path / f"parts{parts}", method="range")

    def config(parts, directory, resume=False):
        checkpoint = {"dir": str(directory), "resume": resume}
        data = temporal_config("tgn", optim={"epochs": 2, "lr": 1e-4}, checkpoint=checkpoint)
        data = data.to_dict()
        data["run"]["partitions"] = str(tmp_path / f"parts{parts}")
        return data

    losses, test = run_workers(_train_temporal, 4, config(4, tmp_path / "straight"))[0]
    interrupted = tmp_path / "interrupted"
    message = run_workers(_train_temporal, 4, config(4, interrupted), 2, 5)[0]
    assert message.startswith("stopped by SIGUSR1 in epoch 1 after batch 5"), message
    for world in (2, 3):
        directory = tmp_path / f"on{world}"
        shutil.copytree(interrupted, directory)
        resumed = run_workers(_train_temporal, world, config(world, directory, resume=True))[0]
        np.testing.assert_allclose(resumed[0], losses, rtol=2e-5)
        for key in ("ap", "auc"):
            assert abs(resumed[1][key] - test[key]) < 5e-3, (world, key)
        latest = Checkpointer(directory).complete()[-1]
        assert read_checkpoint_meta(latest)["world_size"] == world


def _tgat_rows_after_resume(ctx, config_dict):
    """A distributed TGAT rank that resumes ``config_dict``'s checkpoint (its epochs all done):
    its learnt rows and their Adam moments, by original node id."""
    from shardgnn.train.dist_temporal import DistTemporalLinkSteps
    from shardgnn.train.loop import TrainingLoop

    config = TrainConfig.from_dict(config_dict)
    steps = DistTemporalLinkSteps(config, ctx)
    TrainingLoop(config, steps).run()
    rows = steps.model.node_rows
    moments = steps.optimizer.state[rows.weight]
    order = torch.argsort(rows.node_ids)
    return [
        t.detach()[order].clone() for t in (rows.weight, moments["exp_avg"], moments["exp_avg_sq"])
    ]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tgat_learnt_rows_resume_on_another_worker_count_and_order(tmp_path):
    """Issue 33: TGAT's learnt rows are one table in the partition's node order. A 2-worker
    checkpoint resumes on 3 workers of a partition that orders the nodes otherwise: every node
    keeps its row and its Adam moments (bit for bit, by original id), and training goes on."""
    from shardgnn.partition.temporal import write_temporal_partitions
    from shardgnn.train.checkpoint import Checkpointer

    from distributed_helpers import run_workers

    g = small_stream(nodes=60, events=1200, seed=5)
    for parts in (2, 3):  # node v in part v % parts: each count orders the nodes its own way
        write_temporal_partitions(g, np.arange(60) % parts, tmp_path / f"p{parts}", method="mod")

    def config(parts, epochs, resume):
        data = temporal_config(
            "tgat",
            optim={"epochs": epochs, "lr": 1e-3},
            embedding={"dim": 8},
            checkpoint={"dir": str(tmp_path / "ck"), "resume": resume},
        ).to_dict()
        data["run"]["partitions"] = str(tmp_path / f"p{parts}")
        return data

    run_workers(_train_temporal, 2, config(2, 1, False))
    saved = torch.load(
        Checkpointer(tmp_path / "ck").complete()[-1] / "rank-0.pt", weights_only=True
    )
    ids = saved["model"]["node_rows.node_ids"]
    assert not torch.equal(ids, torch.arange(60))  # the 2-part order is not the original one
    weight = saved["model"]["node_rows.weight"]
    (moments,) = [
        m for m in saved["optimizer"]["state"].values() if m["exp_avg"].shape == weight.shape
    ]
    order = torch.argsort(ids)
    expected = [weight[order], moments["exp_avg"][order], moments["exp_avg_sq"][order]]
    for got in run_workers(_tgat_rows_after_resume, 3, config(3, 1, True)):
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
    losses, _ = run_workers(_train_temporal, 3, config(3, 2, True))[0]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_partition_command_writes_the_event_stream_in_new_ids(tmp_path, capsys):
    from shardgnn.cli import main
    from shardgnn.graph.datasets import load_temporal_dataset
    from shardgnn.partition.format import read_partitions

    spec = "synthetic-temporal:nodes=200,events=3000"
    out = tmp_path / "parts"
    assert main(["partition", spec, "--parts", "2", "--method", "random", "--out", str(out)]) == 0
    pset = read_partitions(out, verify=True)
    g = load_temporal_dataset(spec)
    new_id = pset.new_id_of_orig()
    np.testing.assert_array_equal(pset.shared_array("events/src.npy"), new_id[g.src])
    np.testing.assert_array_equal(pset.shared_array("events/dst.npy"), new_id[g.dst])
    np.testing.assert_array_equal(pset.shared_array("events/t.npy"), g.t)
    assert pset.meta["temporal"]["num_events"] == 3000
    assert (
        main(
            ["partition", spec, "--parts", "2", "--task", "link", "--out", str(out), "--overwrite"]
        )
        == 2
    )
    assert "its split is chronological" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("how", ["one process", "workers", "partitions"])
def test_a_split_without_validation_events_is_refused_before_any_work(tmp_path, capsys, how):
    """Every event at one time: the chronological split's cuts put them all in training. Refused
    in one line, with workers before the events are partitioned, and with a partition directory
    before any worker starts (every worker refused it before, each with its rank and log)."""
    from shardgnn.cli import main

    rng = np.random.default_rng(0)
    path = tmp_path / "same.txt"
    path.write_text("".join(f"{a} {b} 5\n" for a, b in rng.integers(0, 20, size=(200, 2))))
    dataset = [f"temporal:{path}"]
    if how == "partitions":
        parts = str(tmp_path / "parts")
        assert main(["partition", *dataset, "--parts", "2", "--out", parts]) == 0
        capsys.readouterr()
        dataset = ["--partitions", parts]
    workers = ["--workers", "2"] if how == "workers" else []
    argv = ["train", *dataset, "--model", "tgn", "--epochs", "1", *workers]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "shardgnn train: error: temporal graph 'same': the split --link-val 0.05 --link-test 0.1 "
        "leaves an empty training or validation span (200 / 0 events); give more events or other "
        "fractions"
    ), captured.err
    assert "partition" not in captured.out + captured.err  # nothing was partitioned


def test_cli_trains_temporal_events_with_workers(tmp_path, capsys):
    """`shardgnn train DATASET --workers 2` partitions the events, trains, and reports the bytes
    of memory and sampling; a static model on the temporal partition is refused in one line."""
    from shardgnn.cli import main

    out = tmp_path / "results.json"
    args = [
        "train", "synthetic-temporal:nodes=200,events=3000", "--task", "link", "--model", "tgn",
        "--epochs", "1", "--batch-size", "100", "--memory-dim", "16", "--time-dim", "8",
        "--out-dim", "16", "--heads", "2", "--results", str(out), "--quiet",
    ]  # fmt: skip
    assert main([*args, "--workers", "2"]) == 0
    results = json.loads(out.read_text())
    assert results["workers"] == 2
    assert results["comm"]["memory"]["bytes_sent"] > 0
    assert results["comm"]["sample"]["bytes_sent"] > 0
    assert 0.5 < results["link"]["test"]["ap"] <= 1.0
    parts = tmp_path / "parts"
    assert main(["partition", args[1], "--parts", "2", "--out", str(parts)]) == 0
    capsys.readouterr()
    # nothing given, its recipe trains it (TGN); a static model given is refused
    assert main(["train", "--partitions", str(parts), "--epochs", "1", "--model", "sage"]) == 2
    assert "holds a temporal graph: train it with --task link" in capsys.readouterr().err


@pytest.mark.parametrize("window", [1, 3])
def test_snapshot_deltas_rebuild_every_snapshot_exactly(window):
    from shardgnn.graph.snapshots import build_snapshots, pair_keys

    g = small_stream(nodes=80, events=3000, seed=6)
    seq = build_snapshots(g, 12, window)
    keys = None
    for t in range(12):
        lo, hi = seq.period_starts[max(t - window + 1, 0)], seq.period_starts[t + 1]
        direct = pair_keys(g.src[lo:hi], g.dst[lo:hi], g.num_nodes)
        keys = seq.edges(t, keys)  # from the previous snapshot and the delta
        np.testing.assert_array_equal(keys, direct)
        np.testing.assert_array_equal(seq.edges(t), direct)  # from the base and every delta
        indptr, indices = seq.csr(keys)
        assert indptr[-1] == 2 * direct.size  # both directions
        rows = np.repeat(np.arange(g.num_nodes), np.diff(indptr))
        np.testing.assert_array_equal(
            np.unique(np.minimum(rows, indices) * g.num_nodes + np.maximum(rows, indices)), direct
        )
    storage = seq.storage()
    assert storage["stored_bytes"] < storage["full_bytes"]
    if window > 1:  # overlapping windows share most edges: the deltas are small
        assert storage["saved_fraction"] > 0.5


def test_snapshot_training_overlaps_preparation_and_learns():
    """T-GCN on snapshots of the synthetic stream beats chance; preparing snapshots in a
    background thread changes nothing in the results."""
    from shardgnn.train.single import run_training

    results = {}
    for overlap in ("on", "off"):
        config = temporal_config(
            "tgcn",
            optim={"epochs": 3, "lr": 1e-2},
            temporal={"snapshots": 12, "snapshot_window": 2},
            run={"overlap": overlap},
        )
        results[overlap] = run_training(config)
    on, off = results["on"], results["off"]
    assert [e["loss"] for e in on["epochs"]] == [e["loss"] for e in off["epochs"]]
    assert on["link"]["test"] == off["link"]["test"]
    assert on["link"]["test"]["ap"] > 0.6
    snap = on["snapshots"]
    assert snap["overlap"] and not off["snapshots"]["overlap"]
    assert snap["prep_s"] > 0 and 0 < snap["saved_fraction"] < 1


@pytest.mark.parametrize("model", ["tgn", "tgcn"])
def test_a_temporal_checkpoint_is_never_paired_with_another_stream(tmp_path, model):
    """Resume and inference check the events' fingerprint (original ids), as for static graphs:
    another stream of the same size is refused in one line; the checkpoint's own stream, one
    process or partitioned (new ids), is accepted."""
    from shardgnn.errors import ConfigError
    from shardgnn.graph.datasets import load_temporal_dataset
    from shardgnn.partition.config import PartitionConfig
    from shardgnn.partition.format import read_partitions
    from shardgnn.partition.temporal import partition_temporal
    from shardgnn.train.checkpoint import Checkpointer, check_resumable
    from shardgnn.train.inference.run import check_inference_pair
    from shardgnn.train.single import run_training

    extra = {"temporal": {"snapshots": 8}} if model == "tgcn" else {}
    spec, other = (
        "synthetic-temporal:nodes=300,events=8000",
        "synthetic-temporal:nodes=300,events=8000,seed=1",
    )
    checkpoint = {"dir": str(tmp_path / "ck"), "resume": True}
    run_training(temporal_config(model, checkpoint=checkpoint, **extra))
    refusal = r"was made from .*\(300 nodes, 8,000 edges.*seed=1.*resume on the graph"
    with pytest.raises(ConfigError, match=refusal):
        run_training(temporal_config(model, dataset=other, checkpoint=checkpoint, **extra))
    if model == "tgcn":
        return  # snapshots train in one process only: no partitions
    path, meta = Checkpointer(tmp_path / "ck").latest()
    for name, parts_of in (("same", spec), ("other", other)):
        partition_temporal(
            load_temporal_dataset(parts_of), PartitionConfig(num_parts=2, method="random"),
            tmp_path / name, dataset_spec=parts_of,
        )  # fmt: skip
    same, moved = read_partitions(tmp_path / "same"), read_partitions(tmp_path / "other")
    check_inference_pair(path, same)
    check_resumable(path, meta, meta["config"], same.dataset)
    with pytest.raises(ConfigError, match="infer on a partition of the graph the model was"):
        check_inference_pair(path, moved)


@pytest.mark.parametrize("model", ["tgn", "tgcn"])
def test_temporal_training_resumes_exactly(tmp_path, model):
    """Stopped after an epoch and resumed, training ends with the weights and node memory (model
    buffers) of an uninterrupted run, bit for bit."""
    from shardgnn.train.single import run_training

    from conftest import assert_same_weights, final_weights

    extra = {"temporal": {"snapshots": 8}} if model == "tgcn" else {}
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    def train(epochs: int, where, resume: bool = False) -> None:
        checkpoint = {"dir": str(where), "resume": resume}
        optim = {"epochs": epochs, "lr": 1e-3}
        run_training(temporal_config(model, optim=optim, checkpoint=checkpoint, **extra))

    train(2, straight)
    train(1, resumed)
    train(2, resumed, resume=True)
    assert_same_weights(final_weights(straight), final_weights(resumed))
