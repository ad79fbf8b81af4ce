"""Sparse input rows in one process's mini-batches: which rows are gathered sparse, and that
training on them is training on the dense rows."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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


def _stored_parts(tmp_path, density: float, sizes=(70, 0, 50)) -> list[np.ndarray]:
    """Feature rows of a row group's parts as ``load_shard`` leaves them: memory-mapped files."""
    rng = np.random.default_rng(2)
    parts = []
    for i, n in enumerate(sizes):
        x = (rng.random((n, 40)) * (rng.random((n, 40)) < density)).astype(np.float32)
        x[:3] = 0.0  # all-zero rows keep their place
        np.save(tmp_path / f"x{i}.npy", x)
        parts.append(np.load(tmp_path / f"x{i}.npy", mmap_mode="r"))
    return parts


@pytest.mark.parametrize("norm", ["none", "row"])
@pytest.mark.parametrize("density,sparse", [(0.04, True), (0.5, False)])
def test_input_rows_read_a_chunk_at_a_time_are_the_rows_read_whole(tmp_path, norm, density, sparse):
    """Full-graph training's and inference's input rows, read from the part files a chunk at a
    time (sparse ones never dense), are bit for bit the rows read whole, normalised and made
    sparse where mostly zero, as they were before."""
    import torch

    from shardgnn.distributed.comm import Communicator
    from shardgnn.fullgraph.shard import input_rows
    from shardgnn.graph.features import normalize_features
    from shardgnn.nn.functional import to_sparse_if_sparse

    parts = _stored_parts(tmp_path, density)
    whole = torch.from_numpy(normalize_features(np.concatenate(parts), norm))
    expected = to_sparse_if_sparse(whole)
    got = input_rows(parts, norm, Communicator(0, 1, None), chunk_rows=16)
    assert got.is_sparse == expected.is_sparse == sparse
    if sparse:
        assert got.is_coalesced() and got.shape == expected.shape
        assert torch.equal(got.indices(), expected.indices())
        assert torch.equal(got.values(), expected.values())
    else:
        assert got.dtype == torch.float32 and torch.equal(got, expected)


@pytest.mark.parametrize("norm", ["none", "row"])
def test_input_rows_never_hold_the_dense_matrix(tmp_path, norm):
    """Mostly-zero rows are read a chunk at a time into their non-zeros: the reading's numpy
    memory peaks at a small fraction of the dense matrix (which the reading before made whole,
    and with ``row`` normalisation twice); dense ones are one copy."""
    import tracemalloc

    from shardgnn.distributed.comm import Communicator
    from shardgnn.fullgraph.shard import input_rows
    from shardgnn.store.feature import dense_rows

    rng = np.random.default_rng(3)
    x = np.zeros((4096, 512), np.float32)  # 8 MB, 1 % non-zero
    x[rng.random(x.shape) < 0.01] = 1.0
    np.save(tmp_path / "x.npy", x)
    stored = [np.load(tmp_path / "x.npy", mmap_mode="r")]
    del x
    input_rows(stored, norm, Communicator(0, 1, None), chunk_rows=256)  # imports, compiles
    tracemalloc.start()
    try:
        sparse = input_rows(stored, norm, Communicator(0, 1, None), chunk_rows=256)
        _, sparse_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        dense = dense_rows(stored, norm, chunk_rows=256)
        _, dense_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sparse.is_sparse and sparse._nnz() == np.count_nonzero(stored[0])
    assert sparse_peak < dense.nbytes / 4, (sparse_peak, dense.nbytes)
    assert dense.nbytes <= dense_peak < 1.25 * dense.nbytes, (dense_peak, dense.nbytes)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status")
def test_stored_rows_are_read_without_keeping_the_files_pages(tmp_path):
    """Reading a part file a chunk at a time releases each chunk's pages once it is consumed:
    the process's file-backed memory never grows by more than a few chunks and what the kernel
    maps around them (it grew by the whole file, released only at its end, before)."""
    from shardgnn.store.feature import _row_chunks

    def file_rss_kb() -> int:
        status = Path("/proc/self/status").read_text().splitlines()
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))

    np.save(tmp_path / "x.npy", np.ones((8192, 1024), np.float32))  # 32 MB
    stored = np.load(tmp_path / "x.npy", mmap_mode="r")
    before, grown = file_rss_kb(), []
    for chunk in _row_chunks([stored], chunk_rows=256):  # 1 MB chunks
        assert float(np.asarray(chunk).sum()) == chunk.size  # read every page
        grown.append(file_rss_kb() - before)
    assert len(grown) == 32 and max(grown) < 8 * 1024, grown  # the file: 32 MB
