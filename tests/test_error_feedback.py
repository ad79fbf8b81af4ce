"""Error-compensated low-bit exchange (``--error-feedback``): the residual plus what arrives is
exactly what was meant to be sent; repeated sends of a constant row average to the row (the error
shrinks as 1/T instead of 1/sqrt(T)); fetched feature rows and full-graph training on 2 ranks use
it; 32 bits stay exact and the flag is refused there."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shardgnn.distributed.codec import AlignedResiduals, RowResiduals, make_codec
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.config import FullGraphConfig
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.partition.format import read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.train.config import RunConfig, TrainConfig

from distributed_helpers import run_workers, run_workers_each


def test_residual_plus_what_arrives_is_what_was_meant():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(50, 19, generator=gen) * 3
    for bits in (1, 2, 4, 8, 16):
        codec = make_codec(bits, seed=bits)
        residual = torch.randn(50, 19, generator=gen) * 0.1
        meant = x + residual
        payload = codec.encode_compensated(x, residual)
        arrived = codec.decode(payload, 19)
        torch.testing.assert_close(residual + arrived, meant, atol=1e-5, rtol=1e-6)


def test_repeated_sends_of_a_constant_row_average_to_it():
    """With feedback the mean of T 1-bit sends is off by |r_T| / T <= one step / T; without, by
    about a step / sqrt(T)."""
    x = torch.tensor([[0.0, 0.3, 0.77, 1.0, 0.5, 0.125]])
    step = 1.0 * (1 + 2**-7)  # the row's (bfloat16-widened) range at 1 bit
    errors = {}
    for feedback in (False, True):
        codec = make_codec(1, seed=3)
        residuals = AlignedResiduals().stream("constant")
        total = torch.zeros_like(x)
        sends = 2000
        for _ in range(sends):
            if feedback:
                payload = codec.encode_compensated(x, residuals.take(0, x))
            else:
                payload = codec.encode(x)
            total += codec.decode(payload, x.shape[1])
        errors[feedback] = float((total / sends - x).abs().max())
    assert errors[True] <= 2 * step / sends
    assert errors[False] > 5 * errors[True]


def test_row_residuals_follow_each_table_row():
    codec, table = make_codec(2, seed=0), RowResiduals(10, 4)
    x = torch.rand(10, 4)
    rows = torch.tensor([3, 7])
    table.select([rows])
    residual = table.take(0, x[rows])
    codec.encode_compensated(x[rows], residual)
    table.put(0, residual)
    assert torch.equal(table.table[rows], residual) and table.table[[0, 1, 2]].abs().sum() == 0
    assert table.nbytes == 10 * 4 * 4


def test_error_feedback_needs_low_bits():
    with pytest.raises(ConfigError, match="--error-feedback compensates .* --fetch-bits is 32"):
        TrainConfig(error_feedback=True, run=RunConfig(workers=2))
    with pytest.raises(ConfigError, match="--error-feedback compensates .* --bits is 32"):
        TrainConfig(error_feedback=True, mode="full", run=RunConfig(workers=2))
    with pytest.raises(ConfigError, match="--error-feedback .* one process"):
        TrainConfig(error_feedback=True, fetch_bits=1)
    TrainConfig(
        error_feedback=True, mode="full", full=FullGraphConfig(bits=1), run=RunConfig(workers=2)
    )


def _bag_of_words(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """``x`` with about 10 % of its entries kept (mostly-zero rows: held as CSR), every 7th
    row empty."""
    kept = x * (np.random.default_rng(seed).random(x.shape) < 0.1)
    kept[::7] = 0
    return kept.astype(np.float32)


@pytest.mark.parametrize("held", ["csr", "dense"])
def test_a_reply_with_feedback_carries_each_values_error_into_its_next_send(held):
    """A reply of a CSR owner's rows keeps one residual per non-zero (its zeros arrive exact
    and keep none), a dense owner's one per entry: what arrives plus the residual is what was
    meant, and T replies of the same rows average to them within a step over T."""
    from shardgnn.store.dist_feature import pack_reply, residuals_for, unpack_reply
    from shardgnn.store.feature import LocalFeatureStore, SparseRowStore, csr_rows

    x = _bag_of_words(np.random.default_rng(1).random((60, 40), dtype=np.float32) * 3)
    store = csr_rows(x, "none") if held == "csr" else LocalFeatureStore(x)
    residuals = residuals_for(store, sparse_replies=True)
    nonzeros = int(np.count_nonzero(x))
    assert residuals.table.shape == ((nonzeros,) if held == "csr" else (60, 40))
    ids = torch.tensor([4, 7, 0, 59, 13, 22])  # 7 and 0: rows without non-zeros
    want = torch.from_numpy(x[ids.numpy()])
    if held == "csr":
        entries = store.nonzero_positions(ids.numpy())
        starts, ends = store.indptr[ids.numpy()], store.indptr[ids.numpy() + 1]
        expected = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)])
        assert np.array_equal(entries, expected)
    else:
        entries = ids.numpy()
    codec, sends, total = make_codec(2, seed=3), 400, torch.zeros_like(want)
    for _ in range(sends):
        residuals.select([torch.from_numpy(entries)])
        message = pack_reply(store, ids, codec, residuals, 0)
        rows = unpack_reply(message, len(ids), 40, codec)
        if isinstance(rows, SparseRowStore):
            got = torch.zeros_like(want)
            rows.gather_into(torch.arange(len(ids)), got, np.arange(len(ids)))
            assert torch.equal(got != 0, want != 0)  # zeros exact, none sent
        else:
            got = rows
        total += got
    # the widest row range (with 0 for a dense row), widened to bfloat16
    step = float(want.amax() - want.amin()) * (1 + 2**-7) / 3
    assert float((total / sends - want).abs().max()) <= 2 * step / sends
    assert int(residuals.table.ne(0).sum()) > 0


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    graph = generate(SyntheticConfig(nodes=400, degree=6, classes=3, features=10, seed=4))
    path = tmp_path_factory.mktemp("ef") / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="random", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method)
    return str(path)


@pytest.fixture(scope="module")
def sparse_parts(tmp_path_factory):
    """``parts``' graph with bag-of-words rows (40 features, about 10 % non-zero)."""
    import dataclasses

    graph = generate(SyntheticConfig(nodes=400, degree=6, classes=3, features=40, seed=4))
    graph = dataclasses.replace(graph, x=_bag_of_words(graph.x))
    path = tmp_path_factory.mktemp("ef-bow") / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="random", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method)
    return str(path)


def _fetch_repeatedly(ctx, path, feedback, sends, held):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.partition.format import load_part
    from shardgnn.store.dist_feature import DistFeatureStore, residuals_for
    from shardgnn.store.feature import LocalFeatureStore, csr_rows

    part = load_part(path, ctx.rank, verify=False)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    replies = held == "csr"  # rows travel as their non-zeros
    local = csr_rows(part.x, "none") if replies else LocalFeatureStore(np.array(part.x))
    table = residuals_for(local, replies) if feedback else None
    store = DistFeatureStore(
        local, part.book, ctx.rank, comm, codec=make_codec(1, seed=ctx.rank), feedback=table,
        sparse_replies=replies,
    )  # fmt: skip
    ids = torch.arange(0, part.book.num_nodes, 3)
    total = sum(store.gather(ids) for _ in range(sends)) / sends
    return ids.numpy(), total.numpy(), int(comm.reset()["fetch"].bytes_recv)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("held", ["dense", "csr"])
def test_fetched_rows_with_feedback_average_to_the_features(parts, sparse_parts, held):
    """1-bit fetches of the same rows, 200 times: with feedback their mean is within 2/200 of a
    step of the features, without it further off, in the same bytes. Bag-of-words rows held
    as CSR travel as their non-zeros, each carrying its own residual (the zeros arrive exact):
    the same bound on the non-zeros' own range."""
    path = sparse_parts if held == "csr" else parts
    x = read_partitions(path, verify=False).reassemble().x
    sends, worst, received = 200, {}, {}
    for feedback in (False, True):
        errors = []
        runs = run_workers(_fetch_repeatedly, 2, path, feedback, sends, held)
        for ids, mean, _ in runs:
            truth = x[ids]
            # CSR rows: the zeros exact, the non-zeros quantised on their own range
            sent = truth != 0 if held == "csr" else np.ones_like(truth, dtype=bool)
            assert np.array_equal(mean[~sent], truth[~sent])
            hi = np.where(sent, truth, -np.inf).max(1)
            lo = np.where(sent, truth, np.inf).min(1)
            with np.errstate(invalid="ignore"):  # rows without non-zeros: nothing to step
                # the range rounded outwards to bfloat16 (a row of one value has a range too)
                step = np.where(sent.any(1), hi - lo + (abs(hi) + abs(lo)) * 2**-7, 0) + 1e-6
            errors.append(np.abs(mean - truth).max(1) / step)  # in quantisation steps
        worst[feedback] = float(np.max(np.concatenate(errors)))
        received[feedback] = sum(run[2] for run in runs)
    assert worst[True] <= 2.0 / sends  # |r_T| / T: the residual stays within a step
    assert worst[False] > 5 * worst[True]
    assert received[True] == received[False]  # residuals cost no bytes


def _train_coded(ctx, path, host_sharing):
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig
    from shardgnn.train.worker import train_with_context

    config = TrainConfig(
        model=ModelConfig(hidden=8, num_layers=2),
        sampler=SamplerConfig(fanouts=(3, 3)),
        optim=OptimConfig(epochs=1),
        batch_size=64,
        progress=False,
        fetch_bits=8,
        run=RunConfig(partitions=path, overlap="off", host_sharing=host_sharing),
    )
    return train_with_context(config, ctx)["comm"]["fetch"]["bytes_sent"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_workers_sharing_a_host_refuse_fetch_bits_themselves(parts):
    """Under torchrun (no local launch to check first) each worker finds every owner on its host
    and refuses `--fetch-bits`; with sharing off the same run fetches coded rows."""
    from shardgnn.distributed.launch import WorkerFailedError

    with pytest.raises(WorkerFailedError, match="--fetch-bits 8: this worker reads every feature"):
        run_workers(_train_coded, 2, parts, "auto")
    assert all(sent > 0 for sent in run_workers(_train_coded, 2, parts, "off"))


def _train_full(ctx, config):
    from shardgnn.train.worker import train_with_context

    return train_with_context(config, ctx)


def _compensated_streams(ctx, config):
    """Train, and name the exchanges that kept residuals (``(layer, kind)``)."""
    from shardgnn.train.fullgraph import DistFullNodeSteps
    from shardgnn.train.loop import TrainingLoop

    steps = DistFullNodeSteps(config, ctx)
    TrainingLoop(config, steps).run()
    return sorted({key[:2] for key in steps.graph.residuals.blocks})


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("spmm", ["1d-sparse", "1d"])
def test_full_graph_training_with_feedback(parts, spmm):
    """1-bit halos on 2 ranks: error feedback changes the run (residuals are kept and reported)
    and the model learns; only the gradient exchanges of each layer are compensated (forward rows
    change every step: a carried error would only add variance to what the next layer reads)."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.train.config import OptimConfig

    def config(feedback):
        return TrainConfig(
            mode="full",
            model=ModelConfig(model="gcn", hidden=16, num_layers=2, dropout=0.0),
            optim=OptimConfig(epochs=30, lr=0.02),
            full=FullGraphConfig(bits=1, spmm=spmm),
            error_feedback=feedback,
            seed=3,
            progress=False,
            threads=1,
            run=RunConfig(partitions=parts),
        )

    plain, compensated = (
        r[0] for r in run_workers_each(_train_full, 2, [(config(False),), (config(True),)])
    )
    assert plain["residual_mb"] == 0 and compensated["residual_mb"] > 0
    assert compensated["error_feedback"] is True
    losses = [e["loss"] for e in compensated["epochs"]]
    assert losses != [e["loss"] for e in plain["epochs"]]
    assert losses[-1] < losses[0] and compensated["test_acc"] > 0.5
    grad_stream = "halo_grad" if spmm == "1d-sparse" else "reduce"
    streams = run_workers(_compensated_streams, 2, config(True))[0]
    # layer 0 aggregates the input features, which take no gradient: nothing flows back there
    assert streams == [(1, grad_stream)]


@pytest.mark.parametrize("width", [2, None])
def test_row_residuals_rewind_takes_back_the_sends_made_ahead(width):
    """A prefetch thread's sends past the last trained batch are undone, the latest first (a row
    sent in two of them ends as it was before the earlier); sends before the tag stay. The same
    for a table of one residual per entry (a CSR part's non-zeros: ``width`` None)."""
    residuals = RowResiduals(6, width)

    def send(tag, rows, value):
        residuals.journal(tag)
        shape = (len(rows),) if width is None else (len(rows), width)
        residuals.select([torch.tensor(rows)]).put(0, torch.full(shape, value))

    send((0, 0), [0, 1], 1.0)
    send((0, 1), [1, 2], 2.0)
    trained = residuals.table.clone()
    send((0, 2), [2, 3], 3.0)  # fetched ahead of the stop
    send((0, 3), [3, 2, 4], 4.0)  # in flight
    residuals.rewind((0, 2))
    assert torch.equal(residuals.table, trained)
    # a rewind past what the journal keeps would be silently wrong: it is refused
    for batch in range(residuals._journal.keep + 1):
        send((1, batch), [5], float(batch))
    with pytest.raises(AssertionError, match="not all kept"):
        residuals.rewind((1, 0))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_bag_of_words_rows_with_feedback_resume_bit_exact_and_on_other_workers(tmp_path, capfd):
    """4-bit fetches of bag-of-words rows with ``--error-feedback`` (issue 32): owners reply
    with their rows' non-zeros, quantised, each carrying its own residual (a table the size of
    the part's non-zeros, not of its dense rows), in the bytes of the replies without feedback;
    the residuals travel with the checkpoint, so a run cut after epoch 2 and resumed ends with
    the uninterrupted run's weights, and 3 workers over another partition resume from it (the
    residuals re-sharded by original id and column)."""
    import dataclasses

    from shardgnn.cli import main
    from shardgnn.graph.datasets import load_dataset
    from shardgnn.graph.io import save_graph

    from conftest import assert_same_weights, final_weights

    graph = load_dataset("synthetic:nodes=1500,degree=8,features=64")
    save_graph(dataclasses.replace(graph, x=_bag_of_words(graph.x)), tmp_path / "g")
    spec = f"graph:{tmp_path / 'g'}"
    for workers in (2, 3):
        out = str(tmp_path / f"p{workers}")
        assert main(["partition", spec, "--parts", str(workers), "--out", out, "--quiet"]) == 0
    argv = ["train", spec, "--hidden", "16", "--fanouts", "5,5", "--host-sharing", "off"]
    argv += ["--fetch-bits", "4", "--batch-size", "64", "--quiet"]
    two = [*argv, "--workers", "2", "--partitions", str(tmp_path / "p2")]

    def train(name, *flags):
        out = [
            "--checkpoint-dir",
            str(tmp_path / name),
            "--results",
            str(tmp_path / f"{name}.json"),
        ]
        assert main([*two, *flags, *out]) == 0
        return json.loads((tmp_path / f"{name}.json").read_text())

    uncompensated = train("plain", "--epochs", "3")
    two.append("--error-feedback")
    compensated = train("straight", "--epochs", "3")
    train("cut", "--epochs", "2")
    train("cut", "--epochs", "3", "--resume")
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(tmp_path / "cut"))
    nonzeros = int(np.count_nonzero(_bag_of_words(graph.x)))
    assert compensated["residual_mb"] == pytest.approx(4 * nonzeros / 1e6, rel=1e-3)
    fetched = [r["comm"]["fetch"]["bytes_recv"] for r in (compensated, uncompensated)]
    assert fetched[0] == fetched[1]  # the same rows, in the same messages
    capfd.readouterr()
    three = [*argv, "--workers", "3", "--partitions", str(tmp_path / "p3"), "--error-feedback"]
    resume = ["--epochs", "4", "--checkpoint-dir", str(tmp_path / "cut"), "--resume"]
    assert main([*three, *resume]) == 0
    assert "written by 2 workers, re-sharded for 3" in capfd.readouterr().out
