"""Error-compensated low-bit exchange (``--error-feedback``): the residual plus what arrives is
exactly what was meant to be sent; repeated sends of a constant row average to the row (the error
shrinks as 1/T instead of 1/sqrt(T)); fetched feature rows and full-graph training on 2 ranks use
it; 32 bits stay exact and the flag is refused there."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    graph = generate(SyntheticConfig(nodes=400, degree=6, classes=3, features=10, seed=4))
    path = tmp_path_factory.mktemp("ef") / "parts"
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="random", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method)
    return str(path)


def _fetch_repeatedly(ctx, path, feedback, sends):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.partition.format import load_part
    from shardgnn.store.dist_feature import DistFeatureStore

    part = load_part(path, ctx.rank, verify=False)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    table = RowResiduals(*part.x.shape) if feedback else None
    store = DistFeatureStore(
        part.x, part.book, ctx.rank, comm, codec=make_codec(1, seed=ctx.rank), feedback=table
    )
    ids = torch.arange(0, part.book.num_nodes, 3)
    total = sum(store.gather(ids) for _ in range(sends)) / sends
    return ids.numpy(), total.numpy()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_fetched_rows_with_feedback_average_to_the_features(parts):
    x = read_partitions(parts, verify=False).reassemble().x
    sends, worst = 200, {}
    for feedback in (False, True):
        errors = []
        for ids, mean in run_workers(_fetch_repeatedly, 2, parts, feedback, sends):
            truth = x[ids]
            step = (truth.max(1) - truth.min(1)) * (1 + 2**-7) + 1e-6
            errors.append(np.abs(mean - truth).max(1) / step)  # in quantisation steps
        worst[feedback] = float(np.max(np.concatenate(errors)))
    assert worst[True] <= 2.0 / sends  # |r_T| / T: the residual stays within a step
    assert worst[False] > 5 * worst[True]


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


def test_row_residuals_rewind_takes_back_the_sends_made_ahead():
    """A prefetch thread's sends past the last trained batch are undone, the latest first (a row
    sent in two of them ends as it was before the earlier); sends before the tag stay."""
    residuals = RowResiduals(6, 2)

    def send(tag, rows, value):
        residuals.journal(tag)
        residuals.select([torch.tensor(rows)]).put(0, torch.full((len(rows), 2), value))

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
