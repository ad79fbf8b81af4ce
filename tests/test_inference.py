"""Layer-wise distributed inference (issue 7): equal to full-neighbour inference within 1e-5, in
chunks, on 2 and 3 ranks; ``shardgnn infer`` writes outputs in original node ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import ModelConfig, build_model
from shardgnn.partition.format import read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.train.epoch import EpochRun

from distributed_helpers import run_workers


@pytest.fixture(scope="module")
def graph():
    return generate(SyntheticConfig(nodes=900, degree=7, classes=3, features=10, seed=4))


def _parts(tmp_path, graph, parts):
    path = tmp_path / f"parts{parts}"
    result = partition_graph(graph, PartitionConfig(num_parts=parts, method="metis", seed=0))
    write_partitions(graph, result.assignment, path, method=result.method, settings=result.settings)
    return str(path)


def _model(kind, graph):
    torch.manual_seed(0)
    return build_model(
        ModelConfig(model=kind, hidden=12, num_layers=3), graph.num_features, graph.num_classes
    ).eval()


def _layerwise(ctx, path, kind, chunk_rows, per_chunk):
    import warnings

    from shardgnn.distributed.comm import Communicator
    from shardgnn.fullgraph.inference import LayerwiseInference
    from shardgnn.fullgraph.shard import Grid, load_shard

    pset = read_partitions(path, verify=False)
    graph = pset.reassemble()
    model = _model(kind, graph)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    # per_chunk: as `shardgnn infer --feature-storage disk` (features left in the mapped file)
    shard = load_shard(path, Grid(ctx.world_size, 1), ctx.rank, comm, mapped_features=per_chunk)
    assert isinstance(shard.x, np.memmap) == per_chunk
    engine = LayerwiseInference(
        shard, ctx.rank, comm, chunk_rows=chunk_rows, halo_per_chunk=per_chunk
    )
    assert len(engine.chunk_plans) == (
        -(-max(np.diff(pset.book.boundaries)) // chunk_rows) if per_chunk else 0
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        embeddings, logits = engine.run(model, torch.from_numpy(shard.x))
    return shard.own_start, logits.numpy(), embeddings.numpy()


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "world,kind,chunk_rows,per_chunk",
    [
        (2, "sage", 37, True),
        (3, "gcn", 100, False),
        (3, "gcn", 100, True),
        (2, "gin", 100000, False),
        (2, "gin", 41, False),
        (2, "gatv2", 53, True),
        (3, "gat", 100000, False),
        (2, "appnp", 29, True),
        (3, "sgc", 100000, True),
    ],
)
def test_layerwise_equals_full_neighbour_inference(
    tmp_path, graph, world, kind, chunk_rows, per_chunk
):
    """Layer-wise inference equals the whole graph's forward pass, with the halo fetched once
    per layer or each chunk's own (features read from the memory-mapped part file)."""
    path = _parts(tmp_path, graph, world)
    new_graph = read_partitions(path, verify=False).reassemble()
    model = _model(kind, new_graph)
    full = MessageGraph.from_csr(new_graph.indptr, new_graph.indices)
    with torch.no_grad():
        expected = model([full] * 3, torch.from_numpy(new_graph.x)).numpy()
    for start, logits, embeddings in run_workers(
        _layerwise, world, path, kind, chunk_rows, per_chunk
    ):
        heads = 4 if kind in ("gat", "gatv2") else 1  # the hidden layers' heads, concatenated
        # SGC has no hidden layer: its embeddings are its outputs
        width = logits.shape[1] if kind == "sgc" else 12 * heads
        assert embeddings.shape == (logits.shape[0], width)
        np.testing.assert_allclose(
            logits, expected[start : start + logits.shape[0]], atol=1e-5, rtol=1e-5
        )


def test_an_earlier_inference_is_found_from_any_folder(tmp_path, monkeypatch):
    """The files an earlier `shardgnn infer` wrote, from its summary's paths (relative to the
    folder that run ran in), inside --out only."""
    from shardgnn.cli.infer import earlier_inference

    out = tmp_path / "runs" / "emb"
    (out / "paper").mkdir(parents=True)
    for name in ("embeddings.npy", "paper/embeddings.npy", "mine.txt", "../elsewhere.npy"):
        (out / name).write_text("x")
    outputs = {  # run from tmp_path, from runs/, gone since, outside --out
        "embeddings": "runs/emb/embeddings.npy",
        "paper/embeddings": "emb/paper/embeddings.npy",
        "scores": "emb/scores.npy",
        "other": str(tmp_path / "runs" / "elsewhere.npy"),
    }
    (out / "inference.json").write_text(json.dumps({"outputs": outputs}))
    monkeypatch.chdir(out / "paper")  # neither folder the earlier run could have run in
    found = [out / name for name in ("inference.json", "embeddings.npy", "paper/embeddings.npy")]
    assert earlier_inference(out) == [p.resolve() for p in found]
    assert earlier_inference(Path("..")) == [p.resolve() for p in found]
    (out / "inference.json").write_text("{not json")
    assert earlier_inference(out) == [(out / "inference.json").resolve()]
    assert earlier_inference(tmp_path) == []


def _bag_of_words(graph):
    """``graph`` with 5% of its feature entries kept (mostly-zero rows, held as CSR)."""
    import dataclasses

    keep = np.random.default_rng(0).random(graph.x.shape) < 0.05
    return dataclasses.replace(graph, x=(graph.x * keep).astype(np.float32))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("rows", ["dense", "bag-of-words"])
def test_infer_command_writes_original_ids(tmp_path, graph, capsys, rows):
    """Inference's logits are the checkpoint's model's on the original graph, row for row
    (bag-of-words rows: its first layer multiplies their non-zeros)."""
    from shardgnn.cli import main

    graph = _bag_of_words(graph) if rows == "bag-of-words" else graph
    path = _parts(tmp_path, graph, 2)
    ckpt = tmp_path / "ckpt"
    assert (
        main(
            [
                "train",
                "--partitions",
                path,
                "--model",
                "gcn",
                "--fanouts",
                "5,5",
                "--hidden",
                "8",
                "--epochs",
                "2",
                "--quiet",
                "--checkpoint-dir",
                str(ckpt),
            ]
        )
        == 0
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "infer",
                "--checkpoint",
                str(ckpt),
                "--partitions",
                path,
                "--out",
                str(out),
                "--chunk-rows",
                "64",
            ]
        )
        == 0
    )
    summary = json.loads((out / "inference.json").read_text())
    assert summary["sparse_input"] == (rows == "bag-of-words")
    logits = np.load(out / "logits.npy", allow_pickle=False)
    predictions = np.load(out / "predictions.npy", allow_pickle=False)
    assert logits.shape == (graph.num_nodes, graph.num_classes) and predictions.dtype == np.int64
    assert np.load(out / "embeddings.npy", allow_pickle=False).shape == (graph.num_nodes, 8)
    # The checkpoint's model on the ORIGINAL graph gives the same logits row for row.
    state = torch.load(sorted(ckpt.glob("epoch-*"))[-1] / "rank-0.pt", weights_only=True)
    model = build_model(
        ModelConfig(model="gcn", hidden=8, num_layers=2), graph.num_features, graph.num_classes
    )
    model.load_state_dict(state["best_state"])
    model.eval()
    with torch.no_grad():
        expected = model(
            [MessageGraph.from_csr(graph.indptr, graph.indices)] * 2, torch.from_numpy(graph.x)
        ).numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-5)
    test_acc = float((expected.argmax(1)[graph.test_idx] == graph.y[graph.test_idx]).mean())
    assert summary["accuracy"]["test"] == pytest.approx(test_acc)
    assert np.array_equal(predictions, logits.argmax(1))
    # a graph without ids or class names of its own: the tables are keyed by 0..N-1 and name
    # classes by number (the same columns as a converted graph's)
    assert summary["tables"]["node_id"] == "row numbers 0..N-1"
    table = np.genfromtxt(out / "predictions.csv", delimiter=",", names=True, dtype=np.int64)
    assert table.dtype.names == ("node_id", "class", "class_name")
    # Disk-backed: the part files' features read chunk by chunk, each chunk's halo on its own.
    disk = tmp_path / "disk"
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", path, "--chunk-rows", "64"]
    assert main([*argv, "--out", str(disk), "--feature-storage", "disk"]) == 0
    np.testing.assert_allclose(np.load(disk / "logits.npy"), logits, atol=1e-6, rtol=1e-6)
    moved = json.loads((disk / "inference.json").read_text())["comm"]["infer"]["bytes_sent"]
    assert moved > summary["comm"]["infer"]["bytes_sent"]  # a row moves once per chunk reading it
    assert np.array_equal(table["node_id"], np.arange(graph.num_nodes))
    assert np.array_equal(table["class"], predictions)
    assert np.array_equal(table["class_name"], predictions)
    embeddings = np.loadtxt(out / "embeddings.csv", delimiter=",", skiprows=1, dtype=np.float64)
    assert np.array_equal(embeddings[:, 0], np.arange(graph.num_nodes))
    assert np.array_equal(embeddings[:, 1:].astype(np.float32), np.load(out / "embeddings.npy"))
    # an earlier inference in --out: refused before any work; --overwrite removes its files
    # first (tables this run does not write would pass for its own), not the folder's others
    (out / "notes.txt").write_text("mine")
    written = (out / "logits.npy").stat().st_mtime_ns
    capsys.readouterr()
    again = [*argv, "--out", str(out), "--table-format", "none"]
    assert main(again) == 2
    assert capsys.readouterr().err.strip() == (
        f"shardgnn infer: error: --out {out}: holds an earlier inference ({out}/inference.json "
        "and the 5 output(s) it lists); pass --overwrite to replace it, or choose another --out"
    )
    assert (out / "logits.npy").stat().st_mtime_ns == written
    assert main([*again, "--overwrite"]) == 0
    assert not (out / "predictions.csv").exists() and not (out / "embeddings.csv").exists()
    assert (out / "notes.txt").read_text() == "mine"
    np.testing.assert_allclose(np.load(out / "logits.npy"), logits, atol=1e-6, rtol=1e-6)
    # the partition was written from a graph in memory: nothing names it to partition again
    capsys.readouterr()
    assert main(["infer", "--checkpoint", str(ckpt), "--out", str(tmp_path / "again")]) == 2
    assert "records no dataset to partition" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_without_partitions_partitions_the_checkpoints_dataset(tmp_path, capfd):
    """`shardgnn infer --checkpoint CK --out DIR`: the dataset the checkpoint names, partitioned
    on the fly into as many parts as trained it (one here) or --workers; the outputs are those
    of a partition given by hand."""
    from shardgnn.cli import main

    spec = "synthetic:nodes=600,degree=6,classes=3,features=8"
    ckpt, outputs = tmp_path / "ck", {}
    train = ["train", spec, "--mode", "full", "--model", "gcn", "--hidden", "8", "--epochs", "1"]
    assert main([*train, "--quiet", "--checkpoint-dir", str(ckpt)]) == 0
    parts = tmp_path / "p3"
    assert main(["partition", spec, "--parts", "3", "--out", str(parts), "--quiet"]) == 0
    capfd.readouterr()
    for name, extra in (("one", []), ("two", ["--workers", "2"]), ("p3", ["--partitions", parts])):
        out = tmp_path / name
        assert main(["infer", "--checkpoint", str(ckpt), "--out", str(out), *map(str, extra)]) == 0
        outputs[name] = np.load(out / "logits.npy", allow_pickle=False)
    said = capfd.readouterr().out
    assert "into 1 part (random)" in said and "into 2 parts (metis)" in said
    assert outputs["one"].shape == (600, 3)
    for name in ("two", "p3"):
        np.testing.assert_allclose(outputs[name], outputs["one"], atol=1e-6, rtol=1e-6)
    argv = ["infer", "--checkpoint", str(ckpt), "--partitions", str(parts), "--workers", "2"]
    assert main([*argv, "--out", str(tmp_path / "no")]) == 2
    err = capfd.readouterr().err
    assert "--workers 2: does not apply: the partition's parts are the workers" in err
    # what the graph's kind refuses is said before it is partitioned, naming the dataset
    assert main(["infer", "--checkpoint", str(ckpt), "--out", str(tmp_path / "at"), "--at", "5"])
    captured = capfd.readouterr()
    assert "partitioned" not in captured.out
    assert "--at 5: synthetic:nodes=600,degree=6.0" in captured.err  # its canonical spec
    assert "(partitioned on the fly) holds a homogeneous graph" in captured.err
    # and what the checkpoint's task refuses: pairs scored by a node model
    pairs = tmp_path / "pairs.npy"
    np.save(pairs, np.array([[0, 1]]))
    argv = [
        "infer",
        "--checkpoint",
        str(ckpt),
        "--out",
        str(tmp_path / "pr"),
        "--pairs",
        str(pairs),
    ]
    assert main(argv) == 2
    captured = capfd.readouterr()
    assert "partitioned" not in captured.out
    assert "holds a node-classification model; pairs are scored" in captured.err
    # and a device the workers could not use (it was said after partitioning)
    if not torch.cuda.is_available():
        argv = ["infer", "--checkpoint", str(ckpt), "--out", str(tmp_path / "gpu")]
        assert main([*argv, "--device", "cuda", "--workers", "2"]) == 2
        captured = capfd.readouterr()
        assert "partitioned" not in captured.out
        assert "--device cuda: CUDA is not available here" in captured.err


def test_infer_refuses_a_folder_without_checkpoints(tmp_path, capsys):
    from shardgnn.cli import main

    assert (
        main(
            [
                "infer",
                "--checkpoint",
                str(tmp_path),
                "--partitions",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "no complete checkpoint" in capsys.readouterr().err


def test_infer_refuses_a_checkpoint_of_another_graph(tmp_path, graph, capsys):
    """Checked in the parent, before any worker starts: one line naming both graphs."""
    from shardgnn.cli import main
    from shardgnn.graph.io import save_graph

    save_graph(graph, tmp_path / "g")
    assert (
        main(
            [
                "train",
                f"graph:{tmp_path / 'g'}",
                "--mode",
                "full",
                "--model",
                "gcn",
                "--hidden",
                "8",
                "--epochs",
                "1",
                "--quiet",
                "--checkpoint-dir",
                str(tmp_path / "ckpt"),
            ]
        )
        == 0
    )
    other = generate(
        SyntheticConfig(
            nodes=graph.num_nodes + 10, degree=6, classes=3, features=graph.num_features, seed=5
        )
    )
    save_graph(other, tmp_path / "other")
    assert (
        main(
            [
                "partition",
                f"graph:{tmp_path / 'other'}",
                "--parts",
                "2",
                "--out",
                str(tmp_path / "parts"),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "infer",
                "--checkpoint",
                str(tmp_path / "ckpt"),
                "--partitions",
                str(tmp_path / "parts"),
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "was made from graph:" in err
        and f"{graph.num_nodes:,} nodes" in err
    ), err
    assert not (tmp_path / "o").exists()


def _eval_layerwise(ctx, path):
    from shardgnn.nn.models import ModelConfig
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.store.feature import SparseRowStore
    from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
    from shardgnn.train.dist_node import DistMiniBatchSteps

    config = TrainConfig(
        model=ModelConfig(model="gcn", hidden=8, num_layers=2),
        sampler=SamplerConfig(fanouts=(4, 4)),
        eval_fanouts=(-1, -1),
        optim=OptimConfig(epochs=1),
        batch_size=128,
        progress=False,
        run=RunConfig(partitions=path, overlap="off"),
    )
    steps = DistMiniBatchSteps(config, ctx)
    steps.train_epoch(EpochRun(0, show_progress=False))
    # the run's end scores both splits from one layer-wise pass, as each alone would
    each = {split: steps.evaluate(split) for split in ("val", "test")}
    passes = _count_calls(steps.layerwise, "run")
    assert steps.evaluate_splits(("val", "test")) == each and passes == [1]
    sparse = isinstance(steps.x_store, SparseRowStore)  # bag-of-words rows: held as CSR
    return each["test"], {k: v.clone() for k, v in steps.model.state_dict().items()}, sparse


def _count_calls(obj, name: str) -> list[int]:
    """``obj.name`` still runs, each call counted in the returned one-item list."""
    method, calls = getattr(obj, name), [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return method(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


@pytest.mark.parametrize("kind", ["full", "layerwise", "sampled"])
def test_the_runs_end_scores_val_and_test_from_one_pass_where_it_can(graph, kind):
    """Full-graph and layer-wise evaluation compute every node's output: the run's end scores
    both splits from one pass, with the metrics and details of evaluating each split alone."""
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig, TrainConfig
    from shardgnn.train.single import LocalSteps

    config = TrainConfig(
        mode="full" if kind == "full" else "minibatch",
        model=ModelConfig(model="sage", hidden=8, num_layers=2),
        sampler=SamplerConfig(fanouts=(4, 4)),
        eval_fanouts=(-1, -1) if kind == "layerwise" else None,
        optim=OptimConfig(epochs=1),
        progress=False,
    )
    steps = LocalSteps(config, graph)
    steps.train_epoch(EpochRun(0, show_progress=False))
    each = {split: steps.evaluate(split) for split in ("val", "test")}
    details = dict(steps.details)
    if kind == "full":
        forwards = [0]
        steps.model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
        passes = [forwards]
    elif kind == "layerwise":
        passes = [_count_calls(steps.layerwise, "run")]
    else:  # each split's own batches
        passes = [_count_calls(steps.eval_loaders[split], "set_epoch") for split in each]
    both = steps.evaluate_splits(("val", "test"))
    assert both == each and steps.details == details
    assert passes == [[1]] * len(passes)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("rows", ["dense", "bag-of-words"])
def test_trainers_evaluate_full_neighbourhoods_layer_wise(tmp_path, graph, rows):
    """Workers and one process evaluate full neighbourhoods layer-wise, as the whole model on
    the whole graph does; bag-of-words rows (held as CSR) from their sparse matrix."""
    from shardgnn.sampling.neighbor import SamplerConfig
    from shardgnn.train.config import OptimConfig, TrainConfig
    from shardgnn.train.single import LocalSteps

    graph = _bag_of_words(graph) if rows == "bag-of-words" else graph
    path = _parts(tmp_path, graph, 2)
    new_graph = read_partitions(path, verify=False).reassemble()
    full = MessageGraph.from_csr(new_graph.indptr, new_graph.indices)
    for acc, state, sparse in run_workers(_eval_layerwise, 2, path):
        assert sparse == (rows == "bag-of-words")
        model = build_model(
            ModelConfig(model="gcn", hidden=8, num_layers=2), graph.num_features, graph.num_classes
        )
        model.load_state_dict(state)
        model.eval()
        with torch.no_grad():
            pred = model([full] * 2, torch.from_numpy(new_graph.x)).argmax(1).numpy()
        assert acc == pytest.approx(
            float((pred[new_graph.test_idx] == new_graph.y[new_graph.test_idx]).mean())
        )
    # The single-process trainer takes the same path.
    trainer = LocalSteps(
        TrainConfig(
            model=ModelConfig(model="sage", hidden=8, num_layers=2),
            sampler=SamplerConfig(fanouts=(4, 4)),
            eval_fanouts=(-1, -1),
            optim=OptimConfig(epochs=1),
            progress=False,
        ),
        graph,
    )
    assert trainer.layerwise is not None
    assert (trainer.csr_rows is not None) == (rows == "bag-of-words")
    with torch.no_grad():
        trainer.model.eval()
        pred = trainer.model(
            [MessageGraph.from_csr(graph.indptr, graph.indices)] * 2, torch.from_numpy(graph.x)
        )
    expected = float((pred.argmax(1).numpy()[graph.val_idx] == graph.y[graph.val_idx]).mean())
    assert trainer.evaluate("val") == pytest.approx(expected)


def _infer_bytes(ctx, path, split):
    """Bytes this rank sends in stage ``infer`` for a 3-layer GCN 10 -> 4 -> 4 -> 3, with the
    layers that project first doing so (``split``) or every layer exchanging its input."""
    import warnings

    from shardgnn.distributed.comm import Communicator
    from shardgnn.fullgraph.inference import LayerwiseInference
    from shardgnn.fullgraph.shard import Grid, load_shard

    torch.manual_seed(0)
    model = build_model(ModelConfig(model="gcn", hidden=4, num_layers=3), 10, 3).eval()
    if not split:
        for layer in model.layers:
            layer.projects_first = lambda h: False
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    shard = load_shard(path, Grid(ctx.world_size, 1), ctx.rank, comm)
    engine = LayerwiseInference(shard, ctx.rank, comm, chunk_rows=64)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        _, logits = engine.run(model, torch.from_numpy(shard.x))
    return comm.stats["infer"].bytes_sent, logits.numpy()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_halo_rows_travel_after_the_layers_first_product(tmp_path, graph):
    """A layer whose first product narrows the rows (10 -> 4, then 4 -> 3) applies it before
    the exchange: 4 + 4 + 3 columns travel per halo row instead of 10 + 4 + 4, same outputs."""
    path = _parts(tmp_path, graph, 2)
    split = run_workers(_infer_bytes, 2, path, True)
    whole = run_workers(_infer_bytes, 2, path, False)
    for (sent, logits), (sent_whole, logits_whole) in zip(split, whole):
        assert sent * 18 == sent_whole * 11, (sent, sent_whole)
        np.testing.assert_allclose(logits, logits_whole, atol=1e-5, rtol=1e-5)
