"""``shardgnn export`` (issue 31): the serving graph equals the training graph's aggregations,
every layer-wise model runs on it, and the written ONNX / torch.export / TorchScript files compute
what ``shardgnn infer`` computes, on the training graph and on graphs of other sizes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from shardgnn.cli import main
from shardgnn.graph.csr import csr_from_edges
from shardgnn.graph.kg import load_kg_triples
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.nn.config import ModelConfig
from shardgnn.nn.message_graph import MessageGraph, spmm
from shardgnn.nn.models import build_model
from shardgnn.nn.serving import EdgeListGraph, ServingModel
from shardgnn.train.config_rules import LAYERWISE_MODELS
from shardgnn.train.inference.export import (
    TOLERANCE,
    _index_add_by_scatter,
    random_graph,
    trained_outputs,
)
from shardgnn.train.inference.run import resolve_checkpoint

from conftest import random_known_answers, write_cluster_triples

onnxruntime = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("norm", ["sum", "mean", "gcn"])
def test_edge_list_graph_aggregates_as_the_training_graph(norm):
    """Self-loop edges, duplicate edges and nodes without in-edges included."""
    x, edge_index = random_graph(300, 7, seed=2)
    src, dst = edge_index.numpy()
    want = spmm(MessageGraph.from_csr(*csr_from_edges(src, dst, 300)[:2]), x, norm)
    got = spmm(EdgeListGraph(edge_index, 300), x, norm)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", LAYERWISE_MODELS)
@pytest.mark.parametrize("feature_norm", ["none", "row"])
def test_serving_model_computes_what_training_computes(name, feature_norm):
    torch.manual_seed(0)
    model = build_model(ModelConfig(model=name, hidden=16, num_layers=3), 9, 4).eval()
    serving = ServingModel(model, model.num_layers, feature_norm).eval()
    x, edge_index = random_graph(200, 9, seed=3)
    with torch.no_grad():
        got = serving(x, edge_index)
    torch.testing.assert_close(got, trained_outputs(serving, x, edge_index), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("conv", ["rgcn", "hetero-sage", "hgt"])
def test_typed_serving_model_computes_what_training_computes(conv):
    """Two featured types of their own widths and a featureless one, over edges in any order:
    the serving module (reverse relations added inside, ungrouped layers) equals the training
    model on the grouped message graph, and so does its torch.export program at another size."""
    from shardgnn.nn.serving import TypedServingModel
    from shardgnn.nn.typed import TypedInput, TypedNodeModel, typed_encoder
    from shardgnn.train.inference.export import random_typed_graph, trained_outputs

    torch.manual_seed(0)
    types = ["paper", "author", "venue"]
    relations = [("author", "writes", "paper"), ("paper", "cites", "paper"),
                 ("paper", "at", "venue"), ("venue", "hosts", "author")]  # fmt: skip
    message = relations + [(d, f"rev_{r}", s) for s, r, d in relations]
    config = ModelConfig(model=conv, hidden=8, num_layers=2, heads=2, num_bases=2, dropout=0.0)
    encoder = typed_encoder(config, message, types, out_dim=5)
    model = TypedNodeModel(TypedInput([0, 0, 7], [6, 3, 0], 8), encoder).eval()
    learnt = {2: torch.randn(7, 8)}
    serving = TypedServingModel(model, types, learnt, relations).eval()
    assert serving.input_names == ("x_paper", "x_author", "edge_index", "edge_type")
    inputs = random_typed_graph(serving, 40, seed=3)
    perm = torch.randperm(inputs[-1].shape[0])  # edges in no order of relation
    inputs = (*inputs[:2], inputs[2][:, perm], inputs[3][perm])
    with torch.no_grad():
        want = trained_outputs(serving, *inputs)
        torch.testing.assert_close(serving(*inputs), want, atol=1e-5, rtol=1e-5)
    names = serving.input_names
    nodes = {name: {0: torch.export.Dim(f"n_{name}", min=2)} for name in names[:2]}
    edges = torch.export.Dim("edges", min=1)
    dynamic = ((nodes["x_paper"], nodes["x_author"], {1: edges}, {0: edges}),)
    program = torch.export.export(serving, inputs, dynamic_shapes=dynamic)
    other = random_typed_graph(serving, 90, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(
            program.module()(*other), trained_outputs(serving, *other), atol=1e-5, rtol=1e-5
        )


def test_index_add_by_scatter_equals_index_add():
    gen = torch.Generator().manual_seed(0)
    for shape in ((50, 3), (50, 2, 4)):
        base = torch.randn(10, *shape[1:], generator=gen)
        source = torch.randn(*shape, generator=gen)
        index = torch.randint(0, 10, (shape[0],), generator=gen)
        want = base.index_add(0, index, source, alpha=2.0)
        torch.testing.assert_close(_index_add_by_scatter(base, 0, index, source, 2.0), want)


# ---------------------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A GAT trained on a small graph (row-normalised features), its checkpoint, a 1-part
    partition and `shardgnn infer`'s outputs for it."""
    root = tmp_path_factory.mktemp("export")
    spec = "synthetic:nodes=600,degree=6,classes=4,features=12,seed=5"
    ck, parts, out = root / "ck", root / "parts", root / "infer"
    train = ["train", spec, "--model", "gat", "--hidden", "8", "--epochs", "2", "--quiet"]
    assert main([*train, "--feature-norm", "row", "--checkpoint-dir", str(ck)]) == 0
    assert main(["partition", spec, "--parts", "1", "--method", "random", "--out", str(parts)]) == 0
    assert (
        main(["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(out)]) == 0
    )
    graph = generate(SyntheticConfig(nodes=600, degree=6, classes=4, features=12, seed=5))
    return root, ck, graph, np.load(out / "logits.npy")


def _edge_index(graph) -> np.ndarray:
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    return np.stack([np.asarray(graph.indices, dtype=np.int64), dst])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("suffix", [".onnx", ".pt2", ".pt"])
def test_exported_file_computes_infers_logits(trained, suffix, capsys):
    root, ck, graph, logits = trained
    path = root / f"model{suffix}"
    assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(
        f"exported gat (node classification: 12 features -> 4 class logits) to {path}"
    )
    assert "checked with" in line and "max |difference|" in line
    assert line.endswith(f"; inputs and output in {path}.json")
    signature = json.loads(Path(f"{path}.json").read_text())
    assert signature["inputs"] == [
        {"name": "x", "dtype": "float32", "shape": ["N", 12]},
        {"name": "edge_index", "dtype": "int64", "shape": [2, "E"]},
    ]
    assert [o["shape"] for o in signature["outputs"]] == [["N", 4]]
    x, edge_index = graph.x.astype(np.float32), _edge_index(graph)
    if suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(path))
        assert [i.name for i in session.get_inputs()] == ["x", "edge_index"]
        got = session.run(None, {"x": x, "edge_index": edge_index})[0]
    elif suffix == ".pt2":
        got = torch.export.load(path).module()(torch.from_numpy(x), torch.from_numpy(edge_index))
    else:
        got = torch.jit.load(str(path))(torch.from_numpy(x), torch.from_numpy(edge_index))
    # float32 sums in another order (edge order, not CSR order), through attention: the
    # export's own check allows TOLERANCE of the outputs' scale
    got = got.detach().numpy() if torch.is_tensor(got) else got
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(got, logits, atol=TOLERANCE * scale, rtol=0)
    assert np.array_equal(got.argmax(1), logits.argmax(1))
    assert sorted(p.name for p in root.glob(".model*")) == []  # no temporary file left


@pytest.mark.slow
def test_onnx_file_is_right_on_every_thread_count(trained):
    """ONNX Runtime's ScatterND (what index_add exports to) loses additions to repeated indices
    when it runs on several threads; the exported file uses ScatterElements, exact on any."""
    import onnx

    root, ck, graph, logits = trained
    path = root / "threads.onnx"
    assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "ScatterND" not in ops and "ScatterElements" in ops
    x, edge_index = random_graph(4000, 12, seed=7)
    feed = {"x": x.numpy(), "edge_index": edge_index.numpy()}
    outputs = []
    for threads in (1, 2, 4):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        outputs.append(onnxruntime.InferenceSession(str(path), options).run(None, feed)[0])
    for out in outputs[1:]:
        np.testing.assert_allclose(out, outputs[0], atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_onnx_file_has_the_opset_asked_for_or_none(trained, capsys):
    """--opset N writes opset N; one the exporter cannot convert to (it fell back to 18 and
    said so only in a log) is refused in one line and no file is left. --format names the
    format of a file whose suffix names none."""
    import onnx

    root, ck, _, _ = trained
    base = ["export", "--checkpoint", str(ck), "--check-nodes", "50"]
    path = root / "opset.onnx"
    assert main([*base, "--out", str(path), "--opset", "20"]) == 0
    capsys.readouterr()
    assert {e.domain: e.version for e in onnx.load(str(path)).opset_import}[""] == 20
    newest = onnx.defs.onnx_opset_version()
    assert main([*base, "--out", str(root / "too_new.onnx"), "--opset", str(newest + 50)]) == 2
    said = f"--opset {newest + 50}: the ONNX exporter wrote opset 18 instead (the installed onnx"
    assert said in _error(capsys)
    assert not list(root.glob("*too_new*")) and not list(root.glob(".too_new*"))
    binary = root / "model.bin"
    assert main([*base, "--out", str(binary), "--format", "pt2"]) == 0
    assert "(torch.export, " in capsys.readouterr().out
    with open(binary, "rb") as file:
        assert torch.export.load(file).module()(*random_graph(40, 12, seed=1)).shape == (40, 4)


@pytest.mark.slow
def test_link_model_exports_its_encoder(tmp_path, capsys):
    spec = "synthetic:nodes=500,degree=6,features=10,seed=2"
    ck = tmp_path / "ck"
    argv = ["train", spec, "--task", "link", "--model", "gcn", "--hidden", "8", "--epochs", "1"]
    assert main([*argv, "--quiet", "--checkpoint-dir", str(ck)]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(tmp_path / "enc.pt2")]) == 0
    line = capsys.readouterr().out
    assert "link prediction: 10 features -> 64-wide embeddings" in line, line


def _error(capsys) -> str:
    """The error line (a "fix:" line may follow it, nothing else)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 or (len(err) == 2 and err[1].startswith("  fix:")), err
    return err[0]


def test_export_refuses_what_it_cannot_serve(tmp_path, capsys):
    base = ["export", "--checkpoint", str(tmp_path / "ck")]
    assert main([*base, "--out", str(tmp_path / "m.onx")]) == 2
    assert "no format for suffix '.onx'" in _error(capsys)
    assert main([*base, "--out", str(tmp_path / "m.pt"), "--opset", "19"]) == 2
    assert "--opset 19: applies to ONNX files" in _error(capsys)
    assert main([*base, "--out", str(tmp_path / "m.onnx"), "--opset", "17"]) == 2
    assert "--opset 17: must be >= 18" in _error(capsys)
    assert main([*base, "--out", str(tmp_path / "m.onnx"), "--format", "pt2"]) == 2
    said = f"--format pt2: --out {tmp_path / 'm.onnx'} has the suffix of ONNX files; name it "
    assert said + "model.pt2, or drop --format" in _error(capsys)
    assert main(["export", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "m.onnx")]) == 2
    assert "holds no complete checkpoint" in _error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_refuses_learnt_rows_in_one_line(tmp_path, capsys):
    ck = tmp_path / "ck"
    argv = ["train", "synthetic:nodes=400,features=6", "--embedding-dim", "4", "--epochs", "1"]
    assert main([*argv, "--hidden", "8", "--quiet", "--checkpoint-dir", str(ck)]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(tmp_path / "m.onnx")]) == 2
    assert "--embedding-dim 4: its learnt rows belong to the training graph" in _error(capsys)
    meta = json.loads(sorted(ck.glob("epoch-*"))[-1].joinpath("meta.json").read_text())
    assert meta["config"]["embedding"]["dim"] == 4


UNTRACEABLE = """
import numpy as np
from torch import nn


class NumpyInside(nn.Module):
    def __init__(self, in_dim, out_dim, config):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)

    def forward(self, graphs, x):
        degree = np.bincount(graphs[0].edge_index()[1].numpy(), minlength=graphs[0].num_dst)
        return self.lin(x[: graphs[-1].num_dst]) * float(degree.max())
"""


@pytest.mark.slow
def test_a_user_model_exports_or_says_why_not(tmp_path, capsys):
    """A stack of PyG layers (the user-model contract's example) is written and checked in
    every format; a model whose forward leaves torch (numpy inside) is refused in one line."""
    pytest.importorskip("torch_geometric.nn")
    from test_user_model import PYG_STACK

    (tmp_path / "mine.py").write_text(PYG_STACK + UNTRACEABLE)
    spec = "synthetic:nodes=300,features=6"
    for name in ("StackedSAGE", "NumpyInside"):
        argv = ["train", spec, "--model", f"{tmp_path / 'mine.py'}:{name}", "--hidden", "8"]
        assert (
            main([*argv, "--epochs", "1", "--quiet", "--checkpoint-dir", str(tmp_path / name)]) == 0
        )
    capsys.readouterr()
    for suffix in (".onnx", ".pt2", ".pt"):
        out = tmp_path / f"stack{suffix}"
        assert (
            main(["export", "--checkpoint", str(tmp_path / "StackedSAGE"), "--out", str(out)]) == 0
        )
        assert "max |difference|" in capsys.readouterr().out
    out = tmp_path / "numpy.pt2"
    assert main(["export", "--checkpoint", str(tmp_path / "NumpyInside"), "--out", str(out)]) == 2
    line = _error(capsys)
    assert "torch.export cannot capture the" in line and "NumpyInside model" in line, line
    assert not out.exists()
    # `shardgnn infer` runs a user model batch by batch (its values: tests/test_user_model.py)
    parts = tmp_path / "parts"
    assert main(["partition", spec, "--parts", "1", "--method", "random", "--out", str(parts)]) == 0
    argv = ["infer", "--checkpoint", str(tmp_path / "StackedSAGE"), "--partitions", str(parts)]
    assert main([*argv, "--out", str(tmp_path / "inferred")]) == 0
    assert (tmp_path / "inferred" / "logits.npy").exists()


# ------------------------------------------------------------ a graph set's models (GIN, GINE)
@pytest.mark.parametrize("level,readout", [("graph", "sum"), ("graph", "mean"), ("graph", "max"),
                                           ("graph", "attention"), ("edge", "sum")])  # fmt: skip
@pytest.mark.parametrize("model", ["gin", "gine"])
def test_graph_set_serving_computes_what_training_computes(model, level, readout):
    """Batches from one lone node without edges up to hundreds of graphs; running batch-norm
    statistics set away from their defaults so that eval mode is what is compared."""
    from shardgnn.nn.graphlevel import GraphGNN
    from shardgnn.nn.serving import EdgeServingModel, GraphServingModel, graph_index_of
    from shardgnn.train.inference.export import example_inputs

    torch.manual_seed(0)
    gnn = GraphGNN(model, 7, 16, 3, 3, readout=readout, edge_dim=4, level=level)
    for norm in gnn.norms:
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
    serving_cls = GraphServingModel if level == "graph" else EdgeServingModel
    serving = serving_cls(gnn.eval(), 4 if model == "gine" or level == "edge" else 0).eval()
    one_atom = (torch.rand(1, 7), torch.zeros(2, 0, dtype=torch.int64), torch.tensor([0, 1]))
    for inputs in (example_inputs(serving, 400, 7, seed=3), one_atom):
        inputs = inputs[:2] + inputs[2:3] * (level == "graph")
        if serving.edge_dim and len(inputs) < len(serving.input_names):
            inputs = (*inputs, torch.randn(inputs[1].shape[1], 4))
        with torch.no_grad():
            got = serving(*inputs)
        torch.testing.assert_close(got, trained_outputs(serving, *inputs), atol=1e-5, rtol=1e-5)
    # graph_ptr with an empty graph in it (a repeated offset) skips that graph
    ptr = torch.tensor([0, 0, 2, 2, 5])
    assert graph_index_of(ptr, 5).tolist() == [1, 1, 3, 3, 3]


def _graph_set_inputs(gs, level: str) -> dict[str, np.ndarray]:
    """A whole graph set as one served batch: its CSR's edges in order, and its offsets."""
    dst = np.repeat(np.arange(gs.num_nodes), np.diff(gs.indptr))
    feed = {
        "x": np.asarray(gs.x, dtype=np.float32),
        "edge_index": np.stack([np.asarray(gs.indices, dtype=np.int64), dst]),
    }
    if level == "graph":
        feed["graph_ptr"] = np.asarray(gs.graph_ptr, dtype=np.int64)
    if gs.edge_attr is not None:
        feed["edge_attr"] = np.asarray(gs.edge_attr, dtype=np.float32)
    return feed


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "spec,argv,level,line",
    [
        ("csl", ["--model", "gin", "--readout", "mean"], "graph",
         "gin (graph classification: 1 feature -> 10 class logits per graph)"),
        ("tracks:events=8,particles=15", ["--model", "gine"], "edge",
         "gine (edge prediction: 4 features -> 2 outputs per edge)"),
    ],
)  # fmt: skip
def test_graph_set_model_file_computes_infers_logits(tmp_path, capsys, spec, argv, level, line):
    """A GIN graph classifier over CSL and a GINE edge classifier over particle tracks, trained,
    inferred on a 2-part partition and exported to the three formats: each file, fed the whole
    set as one batch, gives `shardgnn infer`'s logits (per graph; per edge in CSR order)."""
    from shardgnn.graph.datasets import load_graphset_dataset

    ck, parts, inferred = tmp_path / "ck", tmp_path / "parts", tmp_path / "inferred"
    train = ["train", spec, *argv, "--hidden", "16", "--epochs", "2", "--quiet"]
    assert main([*train, "--checkpoint-dir", str(ck)]) == 0
    assert main(["partition", spec, "--parts", "2", "--out", str(parts)]) == 0
    infer = ["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(inferred)]
    assert main(infer) == 0
    logits = np.load(inferred / "logits.npy")
    feed = _graph_set_inputs(load_graphset_dataset(spec), level)
    scale = max(1.0, float(np.abs(logits).max()))
    capsys.readouterr()
    for suffix in (".onnx", ".pt2", ".pt"):
        path = tmp_path / f"model{suffix}"
        assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
        printed = capsys.readouterr().out
        assert printed.startswith(f"exported {line} to {path}"), printed
        assert "nodes of random small graphs" in printed
        tensors = [torch.from_numpy(v) for v in feed.values()]
        if suffix == ".onnx":
            session = onnxruntime.InferenceSession(str(path))
            assert [i.name for i in session.get_inputs()] == list(feed)
            got = session.run(None, feed)[0]
        elif suffix == ".pt2":
            got = torch.export.load(path).module()(*tensors).detach().numpy()
        else:
            got = torch.jit.load(str(path))(*tensors).detach().numpy()
        assert got.shape == logits.shape
        np.testing.assert_allclose(got, logits, atol=TOLERANCE * scale, rtol=0)


def _export_checked(ck: Path, out: Path, checked_on: str, capsys) -> dict:
    """Export ``ck`` to ``out``: the line says the file was checked on ``checked_on``; returns
    the signature written beside it."""
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "checked with" in printed and checked_on in printed, printed
    return json.loads(out.with_name(out.name + ".json").read_text())


TGAT_STREAMS = {
    "link": "synthetic-temporal:nodes=60,events=600",
    "node": "synthetic-temporal:nodes=60,events=600,classes=3,features=4",
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("task", ["link", "node"])
def test_tgat_file_computes_what_training_does_from_the_samplers_hops(task, tmp_path, capsys):
    """TGAT exported to ONNX, torch.export and TorchScript (link prediction on a stream without
    event features; dynamic node classification on one with them): each file, fed the hops the
    temporal sampler draws on the training stream (features looked up by event id, times in
    float64), gives what the trained model computes from the same hops; one query at a time
    too."""
    from shardgnn.graph.datasets import load_temporal_dataset
    from shardgnn.nn.serving import temporal_inputs
    from shardgnn.sampling.temporal import TemporalNeighborSampler
    from shardgnn.train.inference.export import load_exported, serving_model, temporal_outputs

    spec, ck = TGAT_STREAMS[task], tmp_path / "ck"
    train = ["train", spec, "--task", task, "--model", "tgat", "--temporal-neighbors", "4,3"]
    assert main([*train, "--epochs", "1", "--quiet", "--checkpoint-dir", str(ck)]) == 0
    serving, *_ = serving_model(resolve_checkpoint(ck))
    graph = load_temporal_dataset(spec)
    feat = graph.edge_feat
    rows = np.zeros((graph.num_events, 0), np.float32) if feat is None else feat
    rng = np.random.default_rng(0)
    nodes = rng.integers(0, graph.num_nodes, size=50)
    times = rng.uniform(graph.t[0], graph.t[-1] + 1, size=50)
    sampler = TemporalNeighborSampler(graph, [4, 3], serving.mode)

    def feed_and_want(count: int):
        hops = sampler.sample_hops(nodes[:count], times[:count], 3)
        want = temporal_outputs(serving, hops, nodes[:count], rows).numpy()
        return temporal_inputs(hops, times[:count], feat), want

    (feed, want), (one, want_one) = feed_and_want(50), feed_and_want(1)
    assert want.shape == (50, 3 if task == "node" else 64)
    assert sum(int(t.shape[0]) for t in feed[1:3]) > 50  # events were sampled in both hops
    for suffix in (".onnx", ".pt2", ".pt"):
        out = tmp_path / f"m{suffix}"
        record = _export_checked(ck, out, "random stream", capsys)
        names = [entry["name"] for entry in record["inputs"]]
        assert names == list(serving.input_names)
        assert [entry["dtype"] for entry in record["inputs"][:3]] == ["float64", "int64", "float64"]
        assert record["hops"]["fanouts"] == [4, 3]
        assert ("event_attr_0" in names) == (feat is not None)
        run, _ = load_exported(out, serving.input_names)
        for inputs, expected in ((feed, want), (one, want_one)):
            got = run(*inputs).detach().numpy()
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    if task == "link":  # learnt rows of the training stream's nodes: refused in one line
        rows_ck = tmp_path / "rows"
        assert main([*train, "--embedding-dim", "8", "--epochs", "1", "--quiet",
                     "--checkpoint-dir", str(rows_ck)]) == 0  # fmt: skip
        capsys.readouterr()
        out = tmp_path / "rows.pt2"
        assert main(["export", "--checkpoint", str(rows_ck), "--out", str(out)]) == 2
        line = _error(capsys)
        assert "--embedding-dim 8: its learnt rows belong to the training stream's" in line, line
        assert not out.exists()


MEMORY_STREAMS = {
    ("tgn", "link"): "synthetic-temporal:nodes=60,events=600,features=4",
    ("jodie", "link"): "synthetic-temporal:nodes=60,events=600",
    ("tgn", "node"): "synthetic-temporal:nodes=60,events=600,classes=3,features=4",
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize(("model", "task"), list(MEMORY_STREAMS))
def test_memory_model_file_served_over_the_stream_equals_evaluation(model, task, tmp_path, capsys):
    """TGN and JODIE exported to ONNX, torch.export and TorchScript: the file, driven by
    ServedMemory over the training stream from empty memory (each batch embedded, then applied),
    gives what the training code's own evaluation path computes batch by batch (TemporalLinkSteps'
    `_embed_nodes` and `_apply`, the checkpoint's weights), and ends with the same memory, as
    does ServedMemory.replay of those events through the file."""
    from shardgnn.loader.temporal import EventBatches
    from shardgnn.nn.serving import ServedMemory
    from shardgnn.sampling.temporal import TemporalNeighborSampler
    from shardgnn.train.checkpoint import read_checkpoint_meta
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.inference.export import load_exported
    from shardgnn.train.inference.run import load_model_weights
    from shardgnn.train.temporal import TemporalLinkSteps
    from shardgnn.train.temporal_node import TemporalNodeSteps

    spec, ck = MEMORY_STREAMS[model, task], tmp_path / "ck"
    train = ["train", spec, "--task", task, "--model", model]
    train += ["--temporal-neighbors", "5"] if model == "tgn" else []
    assert main([*train, "--epochs", "1", "--quiet", "--checkpoint-dir", str(ck)]) == 0
    checkpoint = resolve_checkpoint(ck)
    config = TrainConfig.from_dict(read_checkpoint_meta(checkpoint)["config"])
    steps = (TemporalNodeSteps if task == "node" else TemporalLinkSteps)(config)
    steps.model.load_state_dict(load_model_weights(checkpoint))
    steps.model.eval()
    ev = steps.events
    feat = torch.from_numpy(steps.event_feat_EF.numpy())
    src, dst, t = (torch.from_numpy(np.asarray(a)) for a in (ev.src, ev.dst, ev.t))
    for suffix in (".onnx", ".pt2", ".pt"):
        out = tmp_path / f"m{suffix}"
        record = _export_checked(ck, out, "embedded then applied", capsys)
        names = [entry["name"] for entry in record["inputs"]]
        assert names[:5] == ["memory", "last_update", "has_message", "message_memory",
                             "message_time"]  # fmt: skip
        assert ("nbr_index" in names) == (model == "tgn")
        assert [o["name"] for o in record["outputs"]] == ["out", "memory_out", "last_update_out"]
        run, _ = load_exported(out, tuple(names))
        memory = steps.model.memory
        memory.reset()
        steps._restart_stream()
        served = ServedMemory(ev.num_nodes, memory.dim, feat.shape[1], model)
        sampler = TemporalNeighborSampler(steps.graph, [5])
        compared = 0
        for _, (lo, hi) in EventBatches(0, 300, 50):
            seeds = np.unique(np.r_[ev.src[lo:hi], ev.dst[lo:hi]])
            time = float(ev.t[lo])
            with torch.no_grad():
                (z,), _ = steps._embed_nodes([seeds], time, np.full(seeds.size, time), 0)
                want = steps.model.classify(z) if task == "node" else z
            if model == "tgn":
                n_id, edge_index, events = sampler.recent_subgraph(seeds, np.full(seeds.size, time))
                events = torch.from_numpy(events)
                recent = (torch.from_numpy(edge_index), t[events], feat[events])
                inputs = served.embed_inputs(torch.from_numpy(n_id), seeds.size, recent=recent)
            else:
                times = torch.full((seeds.size,), time, dtype=torch.float64)
                inputs = served.embed_inputs(torch.from_numpy(seeds), seeds.size, times)
            got, memory_out, last_out = run(*inputs)
            served.store(memory_out, last_out)
            np.testing.assert_allclose(got.detach().numpy(), want.numpy(), atol=1e-5, rtol=0)
            compared += int(want.shape[0])
            steps._apply(lo, hi)
            _, memory_out, last_out = run(*served.apply_inputs(src[lo:hi], dst[lo:hi], t[lo:hi],
                                                               feat[lo:hi]))  # fmt: skip
            served.store(memory_out, last_out)
        assert compared > 100 and float(memory.memory.abs().max()) > 0.1  # memory moved
        np.testing.assert_allclose(served.memory_NM.numpy(), memory.memory.numpy(), atol=1e-5)
        assert torch.equal(served.last_N, memory.last_update)
        replayed = ServedMemory(ev.num_nodes, memory.dim, feat.shape[1], model)
        replayed.replay(run, src[:300], dst[:300], t[:300], feat[:300], batch=50)
        np.testing.assert_allclose(replayed.memory_NM.numpy(), memory.memory.numpy(), atol=1e-5)
        assert torch.equal(replayed.last_N, memory.last_update)


def test_a_jodie_checkpoint_without_its_time_scale_resumes_and_is_not_exported(tmp_path, capsys):
    """A jodie checkpoint from before the time scale was a buffer: training resumes from it (the
    stream's scale, as computed); export, which has no stream, refuses it in one line."""
    ck = tmp_path / "ck"
    train = ["train", "synthetic-temporal:nodes=40,events=300", "--model", "jodie", "--quiet"]
    assert main([*train, "--epochs", "1", "--checkpoint-dir", str(ck)]) == 0
    checkpoint = resolve_checkpoint(ck)
    state = torch.load(checkpoint / "rank-0.pt", weights_only=True)
    for section in ("model", "best_state"):
        if state.get(section):
            del state[section]["time_scale"]
    torch.save(state, checkpoint / "rank-0.pt")
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(tmp_path / "j.pt2")]) == 2
    line = _error(capsys)
    assert "a jodie checkpoint written before its time scale was recorded" in line, line
    assert main([*train, "--epochs", "2", "--checkpoint-dir", str(ck), "--resume"]) == 0


def test_the_export_check_of_a_memory_model_tells_a_wrong_file():
    """The check drives the file over a stream: a file whose GRU differs from the trained one's,
    or one that forgets the messages, fails it."""
    import copy

    from shardgnn.nn.serving import MemoryServingModel
    from shardgnn.nn.temporal import TemporalLinkModel
    from shardgnn.train.inference.export import TOLERANCE, check_memory_stream

    torch.manual_seed(0)
    model = TemporalLinkModel("tgn", 1, torch.zeros(0, 3), memory_dim=8, time_dim=4,
                              embedding_dim=8, heads=2).eval()  # fmt: skip
    serving = MemoryServingModel(model, False, 4).eval()
    diff, scale, _ = check_memory_stream(serving, serving, 40)
    assert diff <= TOLERANCE * scale
    other = copy.deepcopy(serving)
    with torch.no_grad():
        other.model.memory.gru.weight_hh.add_(0.05)
    assert check_memory_stream(other, serving, 40)[0] > 10 * TOLERANCE * scale

    def forgetful(*inputs):
        inputs = list(inputs)
        inputs[2] = torch.zeros_like(inputs[2])  # has_message: never
        return serving(*inputs)

    assert check_memory_stream(forgetful, serving, 40)[0] > 10 * TOLERANCE * scale


def test_memory_stream_drift_is_measured_after_every_batch():
    """memory_stream_drift compares the file with the trained model after every batch: a file
    that strays from its 5th call on (batch 2's embedding) shows no difference before and one
    from then on, in the outputs and in the memory; one that misstates a time is told apart."""
    from shardgnn.nn.serving import MemoryServingModel
    from shardgnn.nn.temporal import TemporalLinkModel
    from shardgnn.train.inference.export import memory_stream_drift

    torch.manual_seed(0)
    model = TemporalLinkModel("jodie", 1, torch.zeros(0, 2), memory_dim=8, time_dim=4,
                              embedding_dim=8).eval()  # fmt: skip
    serving = MemoryServingModel(model, False, 4).eval()
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 30, size=(2, 100))
    t = np.sort(rng.uniform(0.0, 1e4, size=100))
    feat = rng.standard_normal((100, 2)).astype(np.float32)
    calls = []

    def straying(*inputs):
        out, memory_out, last_out = serving(*inputs)
        calls.append(1)
        return (
            (out + 1e-3, memory_out + 1e-3, last_out)
            if len(calls) > 4
            else (out, memory_out, last_out)
        )

    drift = memory_stream_drift(straying, serving, 30, src, dst, t, feat, 20)
    assert len(drift.output_diff) == len(drift.memory_diff) == 5 and drift.times_equal
    assert max(drift.output_diff[:2] + drift.memory_diff[:2]) < 1e-6
    assert min(drift.output_diff[2:]) > 5e-4 and min(drift.memory_diff[2:]) > 5e-4
    assert drift.largest == max(drift.output_diff + drift.memory_diff) and drift.scale >= 1.0

    def late(*inputs):
        out, memory_out, last_out = serving(*inputs)
        return out, memory_out, last_out + 1.0

    assert memory_stream_drift(late, serving, 30, src, dst, t, feat, 20).largest == float("inf")


def test_served_memory_replay_goes_on_from_the_replayed_events():
    """ServedMemory.replay of a stream's first events leaves the memory serving them (embedded,
    then applied) leaves, so serving the rest gives what serving the whole stream gives; events
    out of time order, older than the memory, of unequal rows, naming nodes outside the memory or
    at a NaN time, and a batch of 0 are refused in one line."""
    from shardgnn.nn.serving import MemoryServingModel, ServedMemory
    from shardgnn.nn.temporal import TemporalLinkModel

    torch.manual_seed(0)
    model = TemporalLinkModel("tgn", 1, torch.zeros(0, 2), memory_dim=8, time_dim=4,
                              embedding_dim=8).eval()  # fmt: skip
    serving = MemoryServingModel(model, False, 4).eval()
    rng = np.random.default_rng(0)
    src, dst = (torch.from_numpy(a) for a in rng.integers(0, 30, size=(2, 100)))
    t = torch.from_numpy(np.sort(rng.uniform(1e3, 1e4, size=100)))
    feat = torch.from_numpy(rng.standard_normal((100, 2)).astype(np.float32))

    def serve(memory: ServedMemory, lo: int, hi: int) -> None:
        for start in range(lo, hi, 20):
            end = start + 20
            seeds = torch.unique(torch.cat([src[start:end], dst[start:end]]))
            recent = (torch.zeros(2, 0, dtype=torch.int64), t[:0], feat[:0])
            _, memory_out, last_out = serving(*memory.embed_inputs(seeds, seeds.numel(),
                                                                   recent=recent))  # fmt: skip
            memory.store(memory_out, last_out)
            _, memory_out, last_out = serving(
                *memory.apply_inputs(src[start:end], dst[start:end], t[start:end], feat[start:end])
            )
            memory.store(memory_out, last_out)

    served, replayed = (ServedMemory(30, 8, 2, "tgn") for _ in range(2))
    serve(served, 0, 100)
    arrays = (a[:60].numpy() for a in (src, dst, t, feat))  # NumPy arrays are taken too
    replayed.replay(serving, *arrays, batch=20)
    assert bool(replayed.last_N.any()) and float(replayed.memory_NM.abs().max()) > 0
    serve(replayed, 60, 100)
    assert torch.equal(replayed.memory_NM, served.memory_NM)
    assert torch.equal(replayed.last_N, served.last_N)

    with pytest.raises(ValueError, match="not in time order"):
        replayed.replay(serving, src[:20], dst[:20], t[:20], feat[:20])  # older than the memory
    fresh = ServedMemory(30, 8, 2, "tgn")
    with pytest.raises(ValueError, match="not in time order"):
        fresh.replay(serving, src[:20], dst[:20], t[:20].flip(0), feat[:20])
    with pytest.raises(ValueError, match="batch is 0"):
        fresh.replay(serving, src, dst, t, feat, batch=0)
    with pytest.raises(ValueError, match=r"have \[100, 99, 100, 100\] rows"):
        fresh.replay(serving, src, dst[:99], t, feat)
    with pytest.raises(ValueError, match=r"edge ids must lie in \[0, 30\), found range \[0, 30\]"):
        fresh.replay(serving, src, dst + 1, t, feat)
    with pytest.raises(ValueError, match="event 3's time nan is not a finite non-negative"):
        fresh.replay(serving, src[:4], dst[:4], torch.tensor([1.0, 2.0, 3.0, np.nan]), feat[:4])
    assert not fresh.last_N.any()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_surel_file_scores_infers_pairs_from_the_walk_samplers_walks(tmp_path, capsys):
    """A SUREL model exported to the three formats: each file, fed the walks the walk sampler
    draws on the training graph (a 1-part partition's CSR: original ids) with evaluation's seed,
    gives `shardgnn infer --pairs`'s scores; a knowledge-graph flag is refused in one line."""
    from shardgnn.graph.linksplit import LINK_SPLIT_DIR, load_link_split
    from shardgnn.nn.surel import evaluation_walk_seed, query_walks
    from shardgnn.partition.format import read_partitions
    from shardgnn.sampling.walks import node_walks

    spec = "synthetic:nodes=300,degree=6,classes=3,features=8"
    ck, parts = tmp_path / "ck", tmp_path / "parts"
    train = ["train", spec, "--task", "link", "--model", "surel", "--walks", "8"]
    assert main([*train, "--epochs", "2", "--quiet", "--checkpoint-dir", str(ck)]) == 0
    assert main(["partition", spec, "--task", "link", "--parts", "1", "--out", str(parts)]) == 0
    split = load_link_split(parts / LINK_SPLIT_DIR)
    pos, neg = split.test_pos_2P.T, np.stack([split.test_pos_2P[0], split.test_neg_PK[:, 0]], 1)
    pairs = np.concatenate([pos, neg])
    np.save(tmp_path / "pairs.npy", pairs)
    infer = ["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out"]
    assert main([*infer, str(tmp_path / "inferred"), "--pairs", str(tmp_path / "pairs.npy")]) == 0
    scores = np.load(tmp_path / "inferred" / "scores.npy")
    pset = read_partitions(parts, verify=False)
    assert np.array_equal(pset.orig_ids, np.arange(300))
    part = pset.load_part(0)

    def draw(nodes):
        return node_walks(part.indptr, part.indices, nodes, 8, 4, evaluation_walk_seed(0))

    walks = query_walks(pairs[:, 0], pairs[:, 1], draw)
    assert walks.shape == (len(pairs), 2, 8, 5)
    capsys.readouterr()
    for suffix in (".onnx", ".pt2", ".pt"):
        path = tmp_path / f"model{suffix}"
        assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
        printed = capsys.readouterr().out
        assert printed.startswith(
            f"exported surel (link prediction: 8 walks of 4 steps from each end of (u, v) -> a "
            f"logit per query) to {path}"
        ), printed
        assert "random queries on a random graph of 1,000 nodes" in printed, printed
        if suffix == ".onnx":
            got = onnxruntime.InferenceSession(str(path)).run(None, {"walks": walks.numpy()})[0]
        elif suffix == ".pt2":
            got = torch.export.load(path).module()(walks).detach().numpy()
        else:
            got = torch.jit.load(str(path))(walks).detach().numpy()
        assert got.shape == scores.shape
        np.testing.assert_allclose(got, scores, atol=1e-5, rtol=0)
        shape = json.loads(Path(f"{path}.json").read_text())["inputs"][0]["shape"]
        assert shape == ["Q", 2, 8, 5]
    assert main(["export", "--checkpoint", str(ck), "--out", str(path), "--top-k", "3"]) == 2
    assert "--top-k 3: applies to knowledge-graph models" in _error(capsys)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,suffix", [("rgcn", ".onnx"), ("hetero-sage", ".pt"), ("hgt", ".pt2")]
)
def test_typed_model_file_computes_infers_logits(tmp_path, model, suffix, capsys):
    """A typed node model's file, run on the training graph (the papers' features, every typed
    edge, the featureless types' learnt rows inside it), gives `shardgnn infer`'s logits."""
    from shardgnn.graph.datasets import load_typed_dataset

    spec = "synthetic-hetero:papers=300,authors=200,institutions=10,fields=8,classes=4,features=6"
    ck, parts, out, path = tmp_path / "ck", tmp_path / "parts", tmp_path / "infer", tmp_path / "m"
    path = path.with_suffix(suffix)
    train = ["train", spec, "--model", model, "--hidden", "8", "--epochs", "2", "--quiet"]
    assert main([*train, "--checkpoint-dir", str(ck)]) == 0
    assert main(["partition", spec, "--parts", "1", "--method", "random", "--out", str(parts)]) == 0
    infer = ["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(out)]
    assert main(infer) == 0
    logits = np.load(out / "paper" / "logits.npy")
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
    line = capsys.readouterr().out.strip()
    assert f"exported {model} (node prediction: 6 features -> 4 outputs per node" in line, line
    assert "on a random typed graph of" in line and "max |difference|" in line
    refused = ["export", "--checkpoint", str(ck), "--out", str(tmp_path / "k.pt"), "--top-k", "3"]
    assert main(refused) == 2
    assert "--top-k 3: applies to knowledge-graph models" in _error(capsys)
    assert main([*refused[:-2], "--filter-known"]) == 2
    assert "--filter-known: applies to knowledge-graph models" in _error(capsys)
    graph = load_typed_dataset(spec)
    signature = json.loads(Path(f"{path}.json").read_text())
    assert [i["name"] for i in signature["inputs"]] == ["x_paper", "edge_index", "edge_type"]
    assert signature["node_types"] == [
        {"name": "paper", "features": 6, "nodes": "any"},
        {"name": "author", "features": 0, "nodes": 200},
        {"name": "institution", "features": 0, "nodes": 10},
        {"name": "field", "features": 0, "nodes": 8},
    ]
    assert signature["relations"] == [list(rel) for rel in graph.relations]
    src, dst, etype = graph.edge_arrays()
    x = np.asarray(graph.x["paper"], dtype=np.float32)
    inputs = (x, np.stack([src, dst]), etype)
    if suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(path))
        names = [i.name for i in session.get_inputs()]
        assert names == ["x_paper", "edge_index", "edge_type"]
        got = session.run(None, dict(zip(names, inputs)))[0]
    else:
        tensors = [torch.from_numpy(a) for a in inputs]
        run = torch.export.load(path).module() if suffix == ".pt2" else torch.jit.load(str(path))
        got = run(*tensors).detach().numpy()
    assert got.shape == (graph.num_nodes, 4)
    papers = got[: graph.num_nodes_of("paper")]  # papers are numbered first
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(papers, logits, atol=TOLERANCE * scale, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("workers,suffix", [(1, ".pt2"), (2, ".onnx")])
def test_knowledge_graph_file_scores_queries_as_infer_embeds(tmp_path, workers, suffix, capsys):
    """A knowledge-graph model's file (one process's checkpoint or two workers'), asked
    ``(entity, relation)`` queries, scores every entity as DistMult does over the entity rows and
    relation rows `shardgnn infer` writes; without the training graph it says so in one line."""
    spec = write_cluster_triples(tmp_path / "triples")
    ck, parts, out = tmp_path / "ck", tmp_path / "parts", tmp_path / "infer"
    path = (tmp_path / "kg").with_suffix(suffix)
    train = ["train", spec, "--epochs", "2", "--quiet", "--checkpoint-dir", str(ck)]
    assert main(train + (["--workers", str(workers)] if workers > 1 else [])) == 0
    assert main(["partition", spec, "--parts", "1", "--out", str(parts), "--quiet"]) == 0
    assert (
        main(["infer", "--checkpoint", str(ck), "--partitions", str(parts), "--out", str(out)]) == 0
    )
    entities = torch.from_numpy(np.load(out / "entity" / "embeddings.npy"))
    relations = torch.from_numpy(np.load(out / "relations.npy"))
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(ck), "--out", str(path)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(
        "exported rgcn (knowledge-graph completion: (entity, relation) queries -> scores of the "
        "60 entities per query (4 relations, 8 with reciprocals))"
    ), line
    signature = json.loads(Path(f"{path}.json").read_text())
    assert [o["shape"] for o in signature["outputs"]] == [["Q", 60]]
    assert len(signature["relations"]) == 8
    entity = torch.arange(60) % 60
    relation = torch.arange(60) % 8  # tail queries and (r + 4) head queries
    if suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(path))
        feed = {"entity": entity.numpy(), "relation": relation.numpy()}
        got = torch.from_numpy(session.run(None, feed)[0])
    else:
        got = torch.export.load(path).module()(entity, relation)
    want = (entities[entity] * relations[relation]) @ entities.T
    torch.testing.assert_close(got, want, atol=1e-4 * max(1.0, float(want.abs().max())), rtol=0)
    # --top-k: each query's best entities, best first, and their scores
    best = path.with_name(f"best{suffix}")
    assert main(["export", "--checkpoint", str(ck), "--out", str(best), "--top-k", "5"]) == 0
    assert "the 5 best of the 60 entities per query" in capsys.readouterr().out
    if suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(best))
        assert [o.name for o in session.get_outputs()] == ["entities", "scores"]
        where, scores = (torch.from_numpy(a) for a in session.run(None, feed))
    else:
        where, scores = torch.export.load(best).module()(entity, relation)
    top = torch.topk(want, 5, dim=1)
    assert torch.equal(where, top.indices)
    torch.testing.assert_close(scores, top.values, atol=1e-4 * float(want.abs().max()), rtol=0)
    assert main(["export", "--checkpoint", str(ck), "--out", str(best), "--top-k", "61"]) == 2
    line = _error(capsys)
    assert "--top-k 61: " in line and "has 60 entities" in line, line
    # --filter-known: the graph's facts (every split, both directions) are never an answer
    graph = load_kg_triples(tmp_path / "triples")
    known = torch.zeros(60, 8, 60, dtype=torch.bool)  # entity, query relation, answer
    for h, r, t in np.concatenate(list(graph.triples.values())).tolist():
        known[h, r, t] = known[t, r + 4, h] = True
    mask = known[entity, relation]
    assert 0 < int(mask.sum()) < mask.numel()
    filtered = want.masked_fill(mask, -torch.inf)
    for k in (None, 7):
        new = path.with_name(f"new{k}{suffix}")
        top = ["--top-k", str(k)] if k else []
        assert (
            main(["export", "--checkpoint", str(ck), "--out", str(new), "--filter-known", *top])
            == 0
        )
        assert "known answers score -inf" in capsys.readouterr().out
        assert json.loads(Path(f"{new}.json").read_text())["known_answers"] == "score -inf"
        if suffix == ".onnx":
            out = onnxruntime.InferenceSession(str(new)).run(None, feed)
            out = [torch.from_numpy(a) for a in out]
        else:
            out = torch.export.load(new).module()(entity, relation)
            out = [out] if k is None else list(out)
        if k is None:
            assert torch.equal(torch.isinf(out[0]), mask)
            torch.testing.assert_close(
                out[0], filtered, atol=1e-4 * float(want.abs().max()), rtol=0
            )
        else:
            assert torch.equal(out[0], torch.topk(filtered, k, dim=1).indices)
            assert not bool(mask.gather(1, out[0]).any())  # no known answer among the best
    if workers > 1:
        # infer's workers read their own entities' rows alone: equal to the whole table's
        from shardgnn.train.inference.run import load_entity_rows

        epoch = resolve_checkpoint(ck)
        weights, table_ND = load_entity_rows(epoch, 60)
        some = np.array([59, 3, 17, 0, 42])
        kept_weights, some_ND = load_entity_rows(epoch, 60, keep=some)
        assert torch.equal(some_ND, table_ND[some]) and kept_weights.keys() == weights.keys()
        # a file whose ranks do not hold every entity once: one line, both ways
        shutil.copyfile(epoch / "rank-0.pt", epoch / "rank-1.pt")
        again = ["--checkpoint", str(ck), "--out", str(tmp_path / "again")]
        assert main(["export", *again[:3], f"{again[3]}.pt2"]) == 2
        assert "holds 30 of the 60 entities here" in _error(capsys)
        # infer's workers refuse it (the launcher's second line says where the log is)
        assert main(["infer", *again, "--partitions", str(parts)]) == 2
        line = capsys.readouterr().err.splitlines()[0]
        assert "holds 30 of the 60 entities here (rank 0)" in line, line
    # the entities are encoded over the training graph: without it, one line
    (tmp_path / "triples").rename(tmp_path / "moved")
    assert main(["export", "--checkpoint", str(ck), "--out", str(tmp_path / "again.pt2")]) == 2
    assert "the knowledge graph it was trained on" in _error(capsys)


def test_known_answers_lookup_marks_exactly_each_querys_answers():
    """The file's known-answer lookup (a binary search over the sorted keys, written out)
    marks exactly every query's known answers, also for keys with many and queries with none;
    the search equals torch.searchsorted on both sides, at every size."""
    from shardgnn.nn.serving import KnowledgeGraphServingModel, sorted_position
    from shardgnn.nn.typed import DistMult

    rng = np.random.default_rng(3)
    for size in (0, 1, 2, 7, 64, 1000):
        sorted_K = torch.from_numpy(np.sort(rng.integers(0, 50, size)))
        key_Q = torch.from_numpy(rng.integers(-2, 53, 200))
        for right in (False, True):
            want = torch.searchsorted(sorted_K, key_Q, right=right)
            assert torch.equal(sorted_position(sorted_K, key_Q, right), want), (size, right)
    n, relations = 40, 6
    known, pairs = random_known_answers(rng, n, relations, 30, 25)
    serving = KnowledgeGraphServingModel(DistMult(relations, 5), torch.randn(n, 5), known=pairs)
    entity = torch.arange(n).repeat_interleave(relations)
    relation = torch.arange(relations).repeat(n)
    got = serving.known_answers(entity, relation)
    assert torch.equal(got, known[entity, relation])
    assert torch.equal(torch.isinf(serving(entity, relation)), got)
