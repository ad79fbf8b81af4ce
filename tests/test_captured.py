"""The padded step behind ``--cuda-graphs`` (shardgnn.train.captured), on the CPU: a batch padded
to its bucket trains as the batch itself (loss, score and every gradient), dropout included; the
capture and replay themselves are the gpu tier's (tests/test_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.loader.config import DeviceConfig
from shardgnn.loader.pipeline import MiniBatchLoader
from shardgnn.nn.config import ModelConfig
from shardgnn.nn.models import build_model
from shardgnn.nn.targets import ClassTarget
from shardgnn.sampling.config import SamplerConfig
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.train.captured import CapturedSteps, _Captured, bucket, padded_shape
from shardgnn.train.config import TrainConfig
from shardgnn.train.minibatch import batch_graphs


def test_buckets_pad_by_at_most_an_eighth():
    for n in [*range(1, 300), 171_239, 269_153, 2**20, 2**20 + 1, 10**9 + 7]:
        b = bucket(n)
        assert n <= b and (b <= 16 or (b - n) * 8 <= n), n
        assert bucket(b) == b  # a bucket is its own
    assert len({bucket(n) for n in range(160_000, 176_000)}) <= 2


def _batch(graph, batch_size=64, seed=3):
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(5, 4)))
    loader = MiniBatchLoader(
        graph.train_idx, sampler,
        LocalFeatureStore(torch.from_numpy(np.asarray(graph.x))),
        LocalFeatureStore(torch.from_numpy(np.asarray(graph.y))), batch_size=batch_size,
        shuffle=True, seed=seed,
    )  # fmt: skip
    loader.set_epoch(0)
    return next(iter(loader))


@pytest.mark.parametrize("model", ["sage", "gin"])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_a_padded_batch_trains_as_the_batch(small_graph, model, dropout):
    """Padded rows never reach a real one: the padded step's loss, score and gradients are the
    batch's own (up to the order of a GEMM's additions at another shape), with the dropout masks
    drawn from the seeds the captured step fills in (the eager step's)."""
    g = small_graph
    batch = _batch(g)
    target = ClassTarget(g.num_classes)
    torch.manual_seed(0)
    module = build_model(ModelConfig(model=model, hidden=16, num_layers=2, dropout=dropout),
                         g.x.shape[1], g.num_classes)  # fmt: skip
    module.train()
    module.use_hashed_dropout(11)
    module.dropout_step = 5

    def gradients(loss):
        module.zero_grad(set_to_none=True)
        loss.backward()
        return [p.grad.clone() for p in module.parameters()]

    logits = module(batch_graphs(batch, torch.device("cpu")), batch.x_SF)
    loss = target.loss_sum(logits, batch.y) / batch.y.shape[0]
    score = target.score_sum(logits, batch.y)
    grads = gradients(loss)

    key = padded_shape(batch)
    rows, edges = key
    blocks = batch.sample.blocks
    assert all(r > b.num_src for r, b in zip(rows, blocks)) and rows[-1] > blocks[-1].num_dst
    assert all(e >= b.num_edges for e, b in zip(edges, blocks))
    entry = _Captured.allocate(key, batch)
    seeds = [mix_seed(11, 5, layer) for layer in range(2)]
    entry.fill(batch, seeds)
    for layer, b in enumerate(blocks):
        # the padded edges: padded src rows into padded dst rows only, spread evenly over both
        indptr, indices = entry.indptr[layer], entry.indices[layer]
        assert torch.equal(indptr[: b.num_dst + 1], b.indptr_D1)
        assert torch.equal(indices[: b.num_edges], b.indices_E)
        pad = indices[b.num_edges :]
        assert len(pad) == edges[layer] - b.num_edges and int(indptr[-1]) == edges[layer]
        degrees = torch.diff(indptr[b.num_dst :])
        assert int(degrees.max()) - int(degrees.min()) <= 1
        assert pad.numel() == 0 or int(pad.min()) >= b.num_src
        uses = torch.bincount(pad - b.num_src, minlength=rows[layer] - b.num_src)
        assert int(uses.max()) - int(uses.min()) <= 1 and len(uses) == rows[layer] - b.num_src
    module.dropout_step = 5
    module.dropout_seeds = entry.seeds
    padded = module(entry.graphs(), entry.x_SF)
    module.dropout_seeds = None
    assert padded.shape[0] == rows[-1]
    torch.testing.assert_close(padded[: batch.y.shape[0]], logits, rtol=1e-5, atol=1e-6)
    padded_loss = target.loss_sum(padded, entry.y_B) / entry.count
    torch.testing.assert_close(padded_loss, loss, rtol=1e-6, atol=0.0)
    assert int(target.score_sum(padded, entry.y_B)) == int(score)  # padded seeds score nothing
    for a, b in zip(gradients(padded_loss), grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

    # a smaller batch in the same bucket leaves none of the larger one's rows in play
    small = _batch(g, batch_size=60, seed=4)
    if padded_shape(small) == key:
        entry.fill(small, seeds)
        assert int((entry.y_B != -100).sum()) == small.y.shape[0]


def test_batches_a_captured_step_does_not_take_run_eagerly(small_graph):
    """Rows on the host (no GPU here) are left to the eager step: ``step`` returns None."""
    g = small_graph
    module = build_model(ModelConfig(model="sage", hidden=8, num_layers=2), g.x.shape[1], 4)
    optimizer = torch.optim.Adam(module.parameters())
    steps = CapturedSteps(module, optimizer, ClassTarget(g.num_classes))
    assert steps.step(_batch(g)) is None and steps.replays == 0 and not steps.captured


@pytest.mark.parametrize(
    "settings, refused",
    [
        (dict(device="cpu"), "--device is cpu"),
        (dict(device="cuda", model=ModelConfig(model="gcn")), "--model is gcn"),
        (dict(device="cuda", model=ModelConfig(model="gat")), "--model is gat"),
        (dict(device="cuda", precision="bf16"), "--precision is bf16"),
        (dict(device="cuda", sampler=SamplerConfig(ladies=(64, 64))), "--ladies"),
    ],
)
def test_cuda_graphs_refuses_what_it_does_not_capture(settings, refused):
    with pytest.raises(ConfigError, match=f"--cuda-graphs .*{refused}"):
        TrainConfig(dataset="synthetic", gpu=DeviceConfig(cuda_graphs=True), **settings)
