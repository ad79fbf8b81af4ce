"""The graph container, transforms, save/load and the synthetic generator."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardgnn.errors import DatasetError
from shardgnn.graph import Graph, load_dataset, load_graph, save_graph
from shardgnn.graph.datasets import load_temporal_dataset
from shardgnn.graph.synthetic import SyntheticConfig, generate


def _edges(graph: Graph) -> set[tuple[int, int]]:
    src, dst = graph.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


def test_csr_holds_in_edges():
    g = Graph.from_edge_index(np.array([0, 1, 2, 2]), np.array([1, 2, 0, 1]), 3)
    # Row v lists the sources of v's in-edges.
    assert g.indices[g.indptr[1] : g.indptr[2]].tolist() == [0, 2]
    assert g.in_degree().tolist() == [1, 2, 1]
    assert g.out_degree().tolist() == [1, 1, 2]
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert _edges(g) == {(0, 1), (1, 2), (2, 0), (2, 1)}


def test_transforms():
    g = Graph.from_edge_index(np.array([0, 0, 1, 2, 2]), np.array([1, 1, 1, 0, 2]), 3)
    assert _edges(g.coalesce()) == {(0, 1), (1, 1), (2, 0), (2, 2)} and g.coalesce().num_edges == 4
    assert _edges(g.remove_self_loops()) == {(0, 1), (2, 0)}
    looped = g.add_self_loops()
    # keeps dup 0->1
    assert _edges(looped) == {(0, 1), (2, 0), (0, 0), (1, 1), (2, 2)} and looped.num_edges == 6
    sym = g.symmetrize()
    assert sym.is_symmetric() and not g.is_symmetric()
    assert _edges(sym) == {(0, 1), (1, 0), (1, 1), (2, 0), (0, 2), (2, 2)}


def test_from_edge_index_rejects_out_of_range_ids():
    with pytest.raises(DatasetError, match=r"\[0, 3\)"):
        Graph.from_edge_index(np.array([0, 5]), np.array([1, 2]), 3)
    with pytest.raises(DatasetError):
        Graph.from_edge_index(np.array([-1]), np.array([1]), 3)


def test_validate_catches_inconsistent_node_data(small_graph):
    with pytest.raises(DatasetError, match="labels for"):
        dataclasses.replace(small_graph, y=small_graph.y[:-1]).validate()
    with pytest.raises(DatasetError, match="overlap"):
        dataclasses.replace(small_graph, val_idx=small_graph.train_idx[:5]).validate()
    with pytest.raises(DatasetError, match="features have shape"):
        dataclasses.replace(small_graph, x=small_graph.x[:10]).validate()


def test_save_load_roundtrip(tmp_path, small_graph):
    path = save_graph(small_graph, tmp_path / "g")
    for mmap in (False, True):
        back = load_graph(path, mmap=mmap)
        for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
            np.testing.assert_array_equal(np.asarray(getattr(back, key)), getattr(small_graph, key))
        assert back.num_classes == small_graph.num_classes and back.name == small_graph.name
    assert isinstance(load_graph(path, mmap=True).x, np.memmap)
    with pytest.raises(FileExistsError):
        save_graph(small_graph, path)
    save_graph(small_graph, path, overwrite=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], (
        "temporary files left behind"
    )


def test_load_rejects_truncated_and_mismatched_files(tmp_path, small_graph):
    path = save_graph(small_graph, tmp_path / "g")
    data = (path / "x.npy").read_bytes()
    (path / "x.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="x.npy"):
        load_graph(path)
    save_graph(small_graph, path, overwrite=True)
    np.save(path / "y.npy", small_graph.y[:-3])
    with pytest.raises(DatasetError, match="y.npy"):
        load_graph(path)
    meta = json.loads((path / "meta.json").read_text())
    meta["version"] = 99
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="version"):
        load_graph(path)


def test_pyg_roundtrip(small_graph):
    pytest.importorskip("torch_geometric")
    data = small_graph.to_pyg()
    assert data.edge_index.shape == (2, small_graph.num_edges)
    back = Graph.from_pyg(data, name="back")
    np.testing.assert_array_equal(back.indptr, small_graph.indptr)
    assert _edges(back) == _edges(small_graph)
    np.testing.assert_array_equal(back.x, small_graph.x)
    np.testing.assert_array_equal(back.test_idx, small_graph.test_idx)


def test_pyg_objects_of_the_wrong_shape_are_refused_in_one_line(small_graph):
    """A transposed ``[E, 2]`` edge_index was read as two edges, an index list in a mask's place
    as a mask of its values (both silently); floats, a missing edge_index or a dict were
    tracebacks. The same reader serves HeteroData and lists of Data."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data, HeteroData

    from shardgnn.graph.graphset import GraphSet
    from shardgnn.graph.typed import TypedGraph

    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    x, y = torch.ones(3, 2), torch.tensor([0, 1, 2])
    shape = r"edge_index is int64 \[3, 2\], not \[2, E\] integers"
    cases = [
        (Data(edge_index=ei.t().contiguous(), num_nodes=3), "pyg: " + shape),
        (Data(edge_index=ei.float(), num_nodes=3), r"pyg: edge_index is float32 \[2, 3\]"),
        (Data(x=x), "pyg: has no edge_index"),
        ({"edge_index": ei}, "pyg: expected a torch_geometric.data.Data, got dict"),
        (Data(edge_index=ei, x=x, y=y, train_mask=torch.tensor([0, 2])),
         r"pyg: train_mask is int64 \[2\], not one bool per node \(\[3\]\)"),
        (Data(edge_index=ei, x=x, y=y, val_mask=torch.tensor([True, False])),
         r"pyg: val_mask is bool \[2\], not one bool per node"),
    ]  # fmt: skip
    for data, message in cases:
        with pytest.raises(DatasetError, match=message):
            Graph.from_pyg(data)
    masks = Data(edge_index=ei, x=x, y=y, train_mask=torch.tensor([1, 0, 1], dtype=torch.uint8))
    assert Graph.from_pyg(masks).train_idx.tolist() == [0, 2]  # PyG's old 0/1 masks
    hetero = HeteroData()
    hetero["a"].num_nodes = 3
    hetero["a", "to", "a"].edge_index = ei.t().contiguous()
    with pytest.raises(DatasetError, match="pyg-hetero: edge type a/to/a's " + shape):
        TypedGraph.from_pyg(hetero)
    graphs = [Data(edge_index=ei, x=x, y=torch.tensor([i % 2])) for i in range(9)]
    graphs.append(Data(edge_index=ei.t().contiguous(), x=x, y=torch.tensor([1])))
    with pytest.raises(DatasetError, match="pyg: graph 9: " + shape):
        GraphSet.from_pyg(graphs)


def test_edge_arrays_built_in_python_are_integers_of_one_length():
    """Float ids were truncated to node ids (0.5 became node 0) by every Python constructor;
    text ids and unequal lengths were numpy tracebacks; a typed graph's bad relation key or
    node count too. Each is one line now, naming the graph or relation."""
    from shardgnn.graph.graphset import GraphSet
    from shardgnn.graph.temporal import TemporalGraph
    from shardgnn.graph.typed import TypedGraph

    halves, whole = np.array([0.5, 1.0]), np.array([1, 2])
    integers = "edge ids must be integers, got float64"
    with pytest.raises(DatasetError, match=integers):
        Graph.from_edge_index(halves, whole)
    with pytest.raises(DatasetError, match="edge ids must be integers, got <U1"):
        Graph.from_edge_index(np.array(["0", "1"]), np.array(["1", "2"]))
    with pytest.raises(DatasetError, match=r"1-D and of equal length, got \[3\] and \[2\]"):
        Graph.from_edge_index(np.array([0, 1, 2]), whole)
    assert Graph.from_edge_index([], [], 3).num_edges == 0  # an empty list is no float
    with pytest.raises(DatasetError, match="temporal: event ids must be integers"):
        TemporalGraph.from_events(halves, whole, [0.0, 1.0])
    counts, rel = {"a": 3, "b": 3}, ("a", "to", "b")
    with pytest.raises(DatasetError, match="relation a/to/b: " + integers):
        TypedGraph.from_typed_edges(counts, {rel: (halves, whole)})
    with pytest.raises(DatasetError, match=r"relation \('a', 'b'\) is not \(source type, name"):
        TypedGraph.from_typed_edges(counts, {("a", "b"): (whole, whole)})
    with pytest.raises(DatasetError, match="node type 'a' has count -1"):
        TypedGraph.from_typed_edges({"a": -1, "b": 3}, {})
    assert TypedGraph.from_typed_edges(counts, {rel: ([0, 1], [1, 2])}).num_edges == 2
    x = [np.ones((3, 2), np.float32)] * 10
    splits = (np.arange(8), np.array([8]), np.array([9]))
    with pytest.raises(DatasetError, match="graphs: graph 0: " + integers):
        GraphSet.from_graphs([(halves, whole, 3)] * 10, x, np.arange(10) % 2, splits)
    with pytest.raises(DatasetError, match="graph 0: edge arrays must be 1-D and of equal"):
        GraphSet.from_graphs([(whole, whole[:1], 3)] * 10, x, np.arange(10) % 2, splits)


# ---------------------------------------------------------------------------- synthetic
def test_synthetic_is_deterministic_by_seed():
    a = generate(SyntheticConfig(nodes=2000, seed=3))
    b = generate(SyntheticConfig(nodes=2000, seed=3))
    c = generate(SyntheticConfig(nodes=2000, seed=4))
    for key in ("indptr", "indices", "x", "y", "train_idx"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.indices, c.indices)


def test_synthetic_statistics():
    cfg = SyntheticConfig(nodes=20000, degree=16, classes=5, homophily=0.6, seed=1)
    g = generate(cfg)
    g.validate()
    assert g.is_symmetric()
    assert np.sum(g.edge_index()[0] == g.edge_index()[1]) == 0
    assert abs(g.num_edges / (cfg.nodes * cfg.degree) - 1) < 0.01
    # Homophily: an edge is drawn inside its class w.p. h, and lands there by chance w.p. (1-h)/C.
    expected = cfg.homophily + (1 - cfg.homophily) / cfg.classes
    assert abs(g.edge_homophily() - expected) < 0.03
    # Power-law skew: the max degree is far above the mean, the median below it.
    deg = g.in_degree()
    assert deg.max() > 20 * deg.mean() and np.median(deg) < deg.mean()
    assert len(g.train_idx) == 2000 and len(g.val_idx) == 2000 and len(g.test_idx) == 16000


def test_synthetic_spec_and_bad_options():
    g = load_dataset("synthetic:nodes=500,degree=6,classes=3,features=5,seed=2")
    assert g.num_nodes == 500 and g.num_features == 5 and g.num_classes == 3
    assert load_dataset(g.name).num_edges == g.num_edges  # the name reproduces the graph
    with pytest.raises(DatasetError, match="homophily"):
        load_dataset("synthetic:homophily=1.5")
    with pytest.raises(DatasetError) as info:
        load_dataset("synthetic:nodez=10")
    assert str(info.value).startswith(
        "unknown option 'nodez' for dataset 'synthetic' (did you mean nodes for nodez?)\n"
        "  fix: its options: classes, degree, "
    )
    # every option its loader reads, those without a registry default too; none: said so
    for spec, message, fix in [
        (
            "temporal:/data/e.csv,direction=1",
            " 'direction' for dataset 'temporal' (did you mean directed for direction?)",
            "its options: base, bipartite, directed, labels, nonfinite",
        ),
        (
            "synthetic-temporal:x=1,y=2",
            "s 'x', 'y' for dataset 'synthetic-temporal'\n",
            "its options: classes, drift, events, exponent,",
        ),
        ("collegemsg:x=1", " 'x' for dataset 'collegemsg'\n", "collegemsg takes no options"),
    ]:
        with pytest.raises(DatasetError) as info:
            load_temporal_dataset(spec)
        assert f"unknown option{message}" in str(info.value) and f"  fix: {fix}" in str(info.value)
    with pytest.raises(DatasetError, match="not an integer"):
        load_dataset("synthetic:nodes=ten")
    # the last one silently won: which was meant?
    with pytest.raises(DatasetError, match="option 'seed' is given twice in dataset spec"):
        load_dataset("synthetic:nodes=50,seed=1,Seed=2")
    # an empty entry is an error, not one option fewer (as in --fanouts 10,,5)
    for spec, position in [("synthetic:nodes=50,,seed=1", 2), ("synthetic:nodes=50,", 2)]:
        with pytest.raises(DatasetError, match=f"entry {position} after synthetic: in dataset"):
            load_dataset(spec)
    with pytest.raises(DatasetError, match="entry 2 after file: in dataset spec"):
        load_dataset("file:/data/g.npz,,seed=1")
    assert load_dataset("synthetic:").num_nodes == load_dataset("synthetic").num_nodes
    with pytest.raises(DatasetError, match=r"degree=20.0 must lie in \(0, nodes=3\)"):
        load_dataset("synthetic:nodes=3")


def test_unknown_dataset_lists_known_names():
    with pytest.raises(DatasetError) as info:
        load_dataset("korra")
    assert "cora" in str(info.value) and "synthetic" in str(info.value)
