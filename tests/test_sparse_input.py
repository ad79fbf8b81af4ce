"""Sparse input rows in one process's mini-batches: which rows are gathered sparse, and that
training on them is training on the dense rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.config import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.feature import LocalFeatureStore, SparseRowStore
from shardgnn.train.config import LinkConfig, OptimConfig, TrainConfig
from shardgnn.train.link import LinkLocalSteps
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.single import LocalSteps


def _bag_of_words_graph(density: float):
    graph = generate(SyntheticConfig(nodes=600, degree=6, classes=3, features=64, seed=1))
    rng = np.random.default_rng(0)
    x = (graph.x * (rng.random(graph.x.shape) < density)).astype(np.float32)
    return dataclasses.replace(graph, x=x)


def _config(model: str = "sage", **changes) -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(model=model, hidden=16, input_dropout=0.2),
        sampler=SamplerConfig(fanouts=(4, 4)),
        optim=OptimConfig(epochs=3),
        progress=False,
        **changes,
    )


def _features(steps: LocalSteps):
    return steps.train_loader.stages.features


def _assert_train_alike(config: TrainConfig, sparse, dense) -> None:
    """Training on the sparse batches gives the dense batches' losses (within 1e-5: the first
    product's sums round differently) and their test metric (within 0.01)."""
    ran = {
        name: TrainingLoop(config, steps).run()
        for name, steps in (("sparse", sparse), ("dense", dense))
    }
    for a, b in zip(ran["sparse"]["epochs"], ran["dense"]["epochs"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    assert ran["sparse"]["test_acc"] == pytest.approx(ran["dense"]["test_acc"], abs=0.01)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gin", "sgc"])
def test_sparse_batches_train_as_the_dense_rows_do(model):
    graph = _bag_of_words_graph(0.05)
    config = _config(model)
    sparse = LocalSteps(config, graph)
    assert isinstance(_features(sparse), SparseRowStore) and _features(sparse).sparse_batches
    dense = LocalSteps(config, graph)
    rows = LocalFeatureStore(dense.x)  # the same normalised rows, gathered dense
    for loader in (dense.train_loader, *dense.eval_loaders.values()):
        loader.stages.features = rows
    _assert_train_alike(config, sparse, dense)


@pytest.mark.parametrize(
    "density, changes, sparse",
    [
        (0.05, {}, True),
        (0.3, {}, False),  # beyond SPARSE_MAX_DENSITY: a dense product is as cheap
        (0.05, {"embedding": EmbeddingConfig(dim=4)}, False),  # rows joined to learnable ones
    ],
)
def test_which_features_are_gathered_sparse(density, changes, sparse):
    steps = LocalSteps(_config(**changes), _bag_of_words_graph(density))
    store = _features(steps)
    assert (isinstance(store, SparseRowStore) and store.sparse_batches) is sparse


def test_link_prediction_batches_are_gathered_sparse_and_train_as_the_dense_rows_do():
    """Link prediction's encoder reads the same sparse batches: its training losses and held-out
    AUC are those of the same rows gathered dense (its evaluation embeds through the store too)."""
    graph = _bag_of_words_graph(0.05)
    config = _config(task="link", batch_size=128, link=LinkConfig(out_dim=8, eval_negatives=10))
    sparse = LinkLocalSteps(config, graph)
    assert isinstance(sparse.features, SparseRowStore) and sparse.features.sparse_batches
    dense = LinkLocalSteps(config, graph)
    rows = LocalFeatureStore(sparse.features.to_dense())
    dense.features = dense.train_stages.features = rows
    _assert_train_alike(config, sparse, dense)


@pytest.mark.parametrize(
    "model, layers",
    [("sage", 2), ("sage", 1), ("gcn", 2), ("gat", 2), ("gatv2", 2), ("gin", 2), ("appnp", 2),
     ("sgc", 2)],
)  # fmt: skip
def test_layer_wise_evaluation_multiplies_the_csr_rows_as_the_dense_ones(model, layers):
    """Full-neighbourhood evaluation of rows held as CSR runs layer-wise on their sparse matrix
    (the first layer multiplies its non-zeros, chunk by chunk): the dense rows' logits and
    embeddings (one layer: the input rows, dense) within 1e-5, and the trainer's metrics equal
    theirs."""
    import torch

    from shardgnn.nn.functional import is_sparse

    graph = _bag_of_words_graph(0.05)
    config = TrainConfig(
        model=ModelConfig(model=model, hidden=16, num_layers=layers),
        sampler=SamplerConfig(fanouts=(4,) * layers),
        eval_fanouts=(-1,) * layers,
        optim=OptimConfig(epochs=1),
        progress=False,
    )
    steps = LocalSteps(config, graph)
    assert steps.layerwise is not None and steps.csr_rows is not None
    steps.layerwise.chunk_rows = 128  # rows sliced from the sparse matrix at other offsets
    steps.model.eval()
    x_NF = steps.csr_rows.to_sparse()
    assert is_sparse(x_NF)
    sparse_ND, sparse_NC = steps.layerwise.run(steps.model, x_NF)
    dense_ND, dense_NC = steps.layerwise.run(steps.model, torch.from_numpy(np.asarray(steps.x)))
    assert not is_sparse(sparse_ND)
    torch.testing.assert_close(sparse_ND, dense_ND, atol=1e-5, rtol=0)
    torch.testing.assert_close(sparse_NC, dense_NC, atol=1e-5, rtol=0)
    metrics = steps.evaluate_splits(("val", "test"))
    steps.csr_rows = None  # the shard's dense rows
    assert steps.evaluate_splits(("val", "test")) == metrics


def test_row_slice_of_a_sparse_matrix_is_the_dense_rows_slice():
    import torch

    from shardgnn.nn.functional import row_slice

    x_NF = torch.from_numpy(_bag_of_words_graph(0.05).x[:50])
    sparse = x_NF.to_sparse()
    for start, end in [(0, 50), (0, 7), (7, 50), (13, 29), (20, 20), (45, 80)]:
        rows = row_slice(sparse, start, end)
        assert rows.is_coalesced() and rows.shape == x_NF[start:end].shape
        assert torch.equal(rows.to_dense(), x_NF[start:end])
        assert torch.equal(row_slice(x_NF, start, end), x_NF[start:end])
