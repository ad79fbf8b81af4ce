"""Your own graph: ``shardgnn convert`` from an edge list plus files, from CSV/Parquet tables and
from an .npz archive; a PyG ``Data`` through the Python API; ``graph:DIR`` as a dataset spec."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from shardgnn.cli import main
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.convert import ConvertConfig, convert
from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import canonical_spec, load_dataset
from shardgnn.graph.io import save_graph

# A 6-node graph: a triangle 0-1-2 and a path 3-4-5, joined by 2->3.
EDGES = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5)]
FEATURES = np.arange(18, dtype=np.float32).reshape(6, 3)
LABELS = np.array([0, 0, 0, 1, 1, -1])


def _edges_of(graph: Graph) -> set[tuple[int, int]]:
    src, dst = graph.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


def test_edge_list_with_feature_label_and_split_files(tmp_path, capsys):
    (tmp_path / "edges.txt").write_text(
        "# my graph\n" + "".join(f"{u + 1} {v + 1}\n" for u, v in EDGES)
    )
    np.save(tmp_path / "x.npy", FEATURES)
    (tmp_path / "y.csv").write_text("label\n" + "\n".join(map(str, LABELS)) + "\n")
    np.save(tmp_path / "train.npy", np.array([1, 4]))  # 1-based like the edge list
    (tmp_path / "val.txt").write_text("2\n")
    test_mask = np.zeros(6, dtype=bool)
    test_mask[[2, 4]] = True
    np.save(tmp_path / "test.npy", test_mask)  # a mask is in node order whatever --base says
    out = tmp_path / "g"
    assert (
        main(
            [
                "convert",
                "--edges",
                str(tmp_path / "edges.txt"),
                "--base",
                "1",
                "--features",
                str(tmp_path / "x.npy"),
                "--labels",
                str(tmp_path / "y.csv"),
                "--train",
                str(tmp_path / "train.npy"),
                "--val",
                str(tmp_path / "val.txt"),
                "--test",
                str(tmp_path / "test.npy"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert f"graph:{out}" in capsys.readouterr().out
    graph = load_dataset(f"graph:{out}")
    assert graph.name == "g" and _edges_of(graph) == set(EDGES)
    np.testing.assert_array_equal(graph.x, FEATURES)
    np.testing.assert_array_equal(graph.y, LABELS)
    assert graph.num_classes == 2
    assert (graph.train_idx.tolist(), graph.val_idx.tolist(), graph.test_idx.tolist()) == (
        [0, 3],
        [1],
        [2, 4],
    )


@pytest.mark.parametrize(
    "name, edges",
    [
        (
            "g.mtx",
            "%%MatrixMarket matrix coordinate pattern general\n% a comment\n7 7 6\n"
            + "".join(f"{u + 1} {v + 1}\n" for u, v in EDGES),
        ),
        ("g.txt", "7,6,d,graph\n" + "".join(f"{u + 1},{v + 1}\n" for u, v in EDGES)),  # .jlg
    ],
)
def test_formats_numbered_from_one_read_their_split_files_from_one(tmp_path, name, edges):
    """MatrixMarket and Graphs.jl files number nodes from 1, whatever --base says (the default,
    0, included): their split files do too. Before, with the default --base 0, the edges were
    read from 1 and the split files from 0: one node off, silently (a split naming the last
    node was refused as out of range), and the nodes' own ids recorded as 0-based."""
    (tmp_path / name).write_text(edges)
    (tmp_path / "train.txt").write_text("1\n4\n7\n")
    out = tmp_path / "g"
    argv = ["convert", "--edges", str(tmp_path / name), "--train", str(tmp_path / "train.txt")]
    assert main([*argv, "--out", str(out)]) == 0
    graph = load_dataset(f"graph:{out}")
    assert graph.num_nodes == 7 and _edges_of(graph) == set(EDGES)  # node 7 isolated, kept
    assert graph.train_idx.tolist() == [0, 3, 6]
    assert graph.node_ids.tolist() == list(range(1, 8))


def test_an_edge_table_of_names_needs_no_node_table(tmp_path):
    """Before: `columns src/dst hold object values; fix: give integer node ids, or a node table`.
    The nodes are the names the edges use, in the order the table first names them, and keep
    their names as ids; a column of numbers beside one of names names node 1 alike."""
    (tmp_path / "e.csv").write_text("src,dst,w\nalice,bob,0.5\nbob,carol,1\ncarol,1,2\n1,alice,3\n")
    out = tmp_path / "g"
    assert (
        main(
            ["convert", "--edges", str(tmp_path / "e.csv"), "--weight-col", "w", "--out", str(out)]
        )
        == 0
    )
    graph = load_dataset(f"graph:{out}")
    assert graph.node_ids.tolist() == ["alice", "bob", "carol", "1"]
    src, dst = graph.edge_index()
    weights = dict(zip(zip(src.tolist(), dst.tolist()), graph.edge_weight.tolist()))
    assert weights == {(0, 1): 0.5, (1, 2): 1.0, (2, 3): 2.0, (3, 0): 3.0}


@pytest.mark.parametrize(
    "table, flags, match",
    [
        ("src,dst\nalice,\nbob,carol\n", [], r"e\.csv: row 1 has no dst \(an empty cell\)"),
        ("src,dst\nalice,bob\n", ["--base", "1"], "--base 1 does not apply: .* names"),
        ("src,dst\nalice,bob\n", ["--num-nodes", "5"], "--num-nodes 5 does not apply: .* 2 nodes"),
    ],
)
def test_an_edge_table_of_names_refuses_what_it_cannot_number(
    tmp_path, capsys, table, flags, match
):
    (tmp_path / "e.csv").write_text(table)
    argv = ["convert", "--edges", str(tmp_path / "e.csv"), *flags, "--out", str(tmp_path / "g")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err, err
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("name", ["e.txt", "e.csv"])
def test_a_headerless_edge_list_of_names_is_told_both_readings_of_its_first_line(
    tmp_path, capsys, name
):
    """Before: `has no column 'src'; its columns: alice, bob; fix: name one of its columns with
    --src-col`: the first edge was taken for a header, and the fix named a node as a column."""
    sep = "," if name.endswith(".csv") else " "
    (tmp_path / name).write_text(f"alice{sep}bob\nbob{sep}carol\n")
    assert main(["convert", "--edges", str(tmp_path / name), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert "its first line, alice, bob, was read as the names of its columns" in err
    assert "if that line is an edge, put a header line above it" in err
    assert "if it names them, give --src-col alice --dst-col bob" in err
    # a Parquet table's columns have names: no "first line" there
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame({"u": [0], "v": [1]}).to_parquet(tmp_path / "uv.parquet")
    assert (
        main(["convert", "--edges", str(tmp_path / "uv.parquet"), "--out", str(tmp_path / "g")])
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "has no column 'src' (named by --src-col); its columns: u, v" in err and "line" not in err
    )
    # and as a dataset spec, which numbers its nodes: the way to train it
    with pytest.raises(DatasetError, match=r"line 2: 'bob' is not a node id.*\n.*shardgnn convert"):
        load_dataset(f"file:{tmp_path / name}")


def test_isolated_nodes_and_a_random_split_when_none_is_given(tmp_path):
    (tmp_path / "edges.csv").write_text("0,1\n1,2\n")
    np.save(tmp_path / "x.npy", np.ones((10, 2), dtype=np.float32))  # nodes 3..9 have no edges
    np.save(tmp_path / "y.npy", np.arange(10) % 2)
    config = ConvertConfig(
        edges=str(tmp_path / "edges.csv"),
        features=str(tmp_path / "x.npy"),
        labels=str(tmp_path / "y.npy"),
        out=str(tmp_path / "g"),
        num_nodes=10,  # isolated nodes are added only when asked
        symmetric=True,
        seed=3,
    )
    graph = convert(config)
    assert graph.num_nodes == 10 and _edges_of(graph) == {(0, 1), (1, 0), (1, 2), (2, 1)}
    sizes = [len(graph.train_idx), len(graph.val_idx), len(graph.test_idx)]
    assert sizes == [6, 2, 2]
    assert sorted(
        np.concatenate([graph.train_idx, graph.val_idx, graph.test_idx]).tolist()
    ) == list(range(10))
    again = convert(ConvertConfig(**{**config.__dict__, "out": str(tmp_path / "h")}))
    assert again.train_idx.tolist() == graph.train_idx.tolist()  # seeded


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_node_and_edge_tables(tmp_path, suffix):
    pd = pytest.importorskip("pandas")
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    names = ["ann", "bob", "cy", "dee", "eve", "fay"]
    nodes = pd.DataFrame(
        {
            "user": names,
            "kind": ["cat", "cat", "cat", "dog", "dog", None],
            "split": ["train", "val", "test", "train", "test", ""],
            "f0": FEATURES[:, 0],
            "f1": FEATURES[:, 1],
            "note": ["x"] * 6,
        }
    )
    edges = pd.DataFrame(
        {
            "from": [names[u] for u, _ in EDGES],
            "to": [names[v] for _, v in EDGES],
            "w": np.linspace(0.5, 1.0, len(EDGES)),
        }
    )
    write = {
        ".csv": lambda df, p: df.to_csv(p, index=False),
        ".parquet": lambda df, p: df.to_parquet(p),
    }[suffix]
    write(nodes, tmp_path / f"nodes{suffix}")
    write(edges, tmp_path / f"edges{suffix}")
    out = tmp_path / "g"
    assert (
        main(
            [
                "convert",
                "--nodes",
                str(tmp_path / f"nodes{suffix}"),
                "--edges",
                str(tmp_path / f"edges{suffix}"),
                "--id-col",
                "user",
                "--label-col",
                "kind",
                "--src-col",
                "from",
                "--dst-col",
                "to",
                "--weight-col",
                "w",
                "--name",
                "people",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    graph = load_dataset(f"graph:{out}")
    assert graph.name == "people" and _edges_of(graph) == set(EDGES)
    np.testing.assert_array_equal(graph.x, FEATURES[:, :2])  # the numeric columns; "note" is text
    # cat < dog, None unlabelled
    assert graph.y.tolist() == [0, 0, 0, 1, 1, -1] and graph.num_classes == 2
    assert (graph.train_idx.tolist(), graph.val_idx.tolist(), graph.test_idx.tolist()) == (
        [0, 3],
        [1],
        [2, 4],
    )
    assert graph.edge_weight is not None and graph.edge_weight.min() == pytest.approx(0.5)


def test_npz_archive(tmp_path):
    mask = np.zeros(6, dtype=bool)
    mask[[0, 1, 3]] = True
    np.savez(
        tmp_path / "g.npz",
        edge_index=np.array(EDGES).T,
        x=FEATURES,
        y=LABELS,
        train_mask=mask,
        val_idx=np.array([2]),
        test_idx=np.array([4]),
    )
    graph = convert(ConvertConfig(npz=str(tmp_path / "g.npz"), out=str(tmp_path / "g")))
    assert _edges_of(graph) == set(EDGES) and graph.train_idx.tolist() == [0, 1, 3]
    assert load_dataset(f"graph:{tmp_path / 'g'}").num_classes == 2


def test_npz_archive_with_dgl_names(tmp_path):
    """The peer benchmarks' graph files (benchmarks/peers/gen_graph.py) name features and labels
    as DGL does; two names for one array are refused."""
    src, dst = np.array(EDGES).T
    np.savez(tmp_path / "g.npz", src=src, dst=dst, feat=FEATURES, label=LABELS)
    graph = convert(ConvertConfig(npz=str(tmp_path / "g.npz"), out=str(tmp_path / "g")))
    np.testing.assert_array_equal(graph.x, FEATURES)
    np.testing.assert_array_equal(graph.y, LABELS)
    np.savez(tmp_path / "both.npz", src=src, dst=dst, x=FEATURES, feat=FEATURES)
    with pytest.raises(DatasetError, match="holds both x and feat"):
        convert(ConvertConfig(npz=str(tmp_path / "both.npz"), out=str(tmp_path / "both")))


def test_pyg_data_through_the_python_api(tmp_path):
    torch = pytest.importorskip("torch")
    data_module = pytest.importorskip("torch_geometric.data")
    masks = [torch.zeros(6, dtype=torch.bool) for _ in range(3)]
    masks[0][:3], masks[1][3], masks[2][4] = True, True, True
    data = data_module.Data(
        edge_index=torch.tensor(EDGES).T,
        x=torch.from_numpy(FEATURES),
        y=torch.from_numpy(LABELS),
        train_mask=masks[0],
        val_mask=masks[1],
        test_mask=masks[2],
    )
    save_graph(Graph.from_pyg(data, name="from-pyg"), tmp_path / "g")
    graph = load_dataset(f"graph:{tmp_path / 'g'}")
    assert (
        graph.name == "from-pyg"
        and _edges_of(graph) == set(EDGES)
        and graph.train_idx.tolist() == [0, 1, 2]
    )


def _random_networkx(directed: bool):
    import networkx as nx

    rng = np.random.default_rng(7)
    graph = nx.DiGraph() if directed else nx.Graph()
    names = [f"n{i}" for i in rng.permutation(30)]  # keys neither sorted nor numbered
    for i, key in enumerate(names):
        graph.add_node(key, x=rng.random(4).tolist(), y=int(i % 3), train_mask=bool(i % 2))
    for _ in range(80):
        u, v = rng.choice(names, 2)
        graph.add_edge(u, v, weight=float(rng.integers(1, 9)))
    return graph


@pytest.mark.parametrize("directed", [True, False])
def test_a_networkx_graph_equals_what_pyg_makes_of_it(tmp_path, directed):
    """PyG's ``from_networkx`` is the reference: the same edges, weights, features, labels and
    mask; the nodes keep their keys as ids, and the graph saves and loads."""
    utils = pytest.importorskip("torch_geometric.utils")
    graph = _random_networkx(directed)
    data = utils.from_networkx(graph)
    reference = Graph.from_pyg(data)
    mine = Graph.from_networkx(graph, name="nx")
    assert mine.node_ids.tolist() == list(graph.nodes)
    assert _edges_of(mine) == _edges_of(reference) and mine.is_symmetric() == (not directed)
    src, dst = mine.edge_index()
    weight = {
        (int(u), int(v)): w for u, v, w in zip(*data.edge_index.tolist(), data.weight.tolist())
    }
    assert mine.edge_weight.tolist() == [weight[(u, v)] for u, v in zip(src.tolist(), dst.tolist())]
    np.testing.assert_array_equal(mine.x, data.x.numpy())
    np.testing.assert_array_equal(mine.y, data.y.numpy())
    assert mine.train_idx.tolist() == np.flatnonzero(data.train_mask.numpy()).tolist()
    save_graph(mine, tmp_path / "g")
    assert load_dataset(f"graph:{tmp_path / 'g'}").node_ids.tolist() == list(graph.nodes)


def test_networkx_attributes_some_nodes_lack_are_refused_by_node():
    import networkx as nx

    graph = nx.Graph()
    graph.add_node("a", x=[1.0, 2.0])
    graph.add_node("b")
    graph.add_edge("a", "b", weight=1.0)
    with pytest.raises(
        DatasetError, match=r"nx: node 'b' has no 'x' attribute, and others have one"
    ):
        Graph.from_networkx(graph, name="nx")
    graph.nodes["b"]["x"] = [1.0]
    with pytest.raises(DatasetError, match=r"the 'x' attributes are not numbers of one length"):
        Graph.from_networkx(graph, name="nx")
    graph.nodes["b"]["x"] = [3.0, 4.0]
    graph.add_node("c", x=[5.0, 6.0])
    graph.add_edge("b", "c")  # no weight
    with pytest.raises(DatasetError, match=r"edge \('b', 'c'\) has no 'weight' attribute"):
        Graph.from_networkx(graph, name="nx")
    # a class label may be absent (unlabelled: -1); the mixture of classes and None is fine
    plain = nx.path_graph(3)
    plain.nodes[0]["y"] = 1
    assert Graph.from_networkx(plain).y.tolist() == [1, -1, -1]
    with pytest.raises(DatasetError, match="expected a networkx graph, got list"):
        Graph.from_networkx([(0, 1)])


def test_networkx_tuple_keys_are_one_id_each(tmp_path):
    """A grid graph keys its nodes by (row, column): each tuple is one id (it was a row of a
    2-D id array, which no graph directory holds)."""
    import networkx as nx

    grid = Graph.from_networkx(nx.grid_2d_graph(2, 3))
    assert grid.node_ids.tolist()[:2] == ["(0, 0)", "(0, 1)"] and grid.num_edges == 14
    save_graph(grid, tmp_path / "g")
    assert load_dataset(f"graph:{tmp_path / 'g'}").node_ids.shape == (6,)


def test_a_converted_graph_trains_and_its_spec_is_canonical(tmp_path, capsys):
    from shardgnn.graph.synthetic import SyntheticConfig, generate

    save_graph(
        generate(SyntheticConfig(nodes=400, degree=6, classes=3, features=8, seed=2)),
        tmp_path / "mine",
    )
    results = tmp_path / "r.json"
    assert (
        main(
            [
                "train",
                f"graph:{tmp_path / 'mine'}",
                "--fanouts",
                "4,4",
                "--hidden",
                "8",
                "--epochs",
                "1",
                "--quiet",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    dataset = json.loads(results.read_text())["dataset"]
    assert (
        dataset["spec"]
        == f"graph:{(tmp_path / 'mine').resolve()}"
        == canonical_spec(f"graph:{tmp_path / 'mine'}")
    )
    assert (
        dataset["fingerprint"]["num_nodes"] == 400
        and len(dataset["fingerprint"]["csr_sha256"]) == 64
    )


@pytest.mark.parametrize(
    "setup, args, error, match",
    [
        (
            lambda d: (d / "e.txt").write_text("0 1\n1 2\n"),
            ["--edges", "{d}/e.txt", "--features", "{d}/x.npy"],
            DatasetError,
            "2 feature rows, but the edges name node 2",
        ),
        (
            lambda d: (d / "e.txt").write_text("0 1\n"),
            ["--edges", "{d}/e.txt", "--labels", "{d}/y.txt"],
            DatasetError,
            "labels must be integers",
        ),
        (
            lambda d: (d / "e.csv").write_text("a,b\n0,1\n"),
            ["--edges", "{d}/e.csv"],
            DatasetError,
            r"no columns 'src' and 'dst' \(named by --src-col and --dst-col\): its first line, "
            "a, b,",
        ),
        (
            lambda d: None,
            ["--edges", "{d}/e.txt", "--npz", "{d}/g.npz"],
            ConfigError,
            "give the edges once",
        ),
        (
            lambda d: None,
            ["--edges", "{d}/e.txt", "--split", "0.6,0.5,0.2"],
            ConfigError,
            "^--split 0.6,0.5,0.2: ",
        ),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, capsys, setup, args, error, match):
    np.save(tmp_path / "x.npy", np.ones((2, 2), dtype=np.float32))
    (tmp_path / "y.txt").write_text("0.5\n1\n")
    setup(tmp_path)
    argv = ["convert", *[a.format(d=tmp_path) for a in args], "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardgnn convert: error: ") and "Traceback" not in err
    from shardgnn.cli import build_parser
    from shardgnn.cli.flags import config_from_args

    with pytest.raises(error, match=match):
        convert(config_from_args(ConvertConfig, build_parser().parse_args(argv)))
    assert not (tmp_path / "out").exists()


def test_edges_naming_a_node_the_node_table_lacks(tmp_path):
    pytest.importorskip("pandas")
    (tmp_path / "nodes.csv").write_text("id,label\na,0\nb,1\n")
    (tmp_path / "edges.csv").write_text("src,dst\na,b\nb,zed\n")
    with pytest.raises(DatasetError, match="row 2 of column 'dst' names node 'zed'"):
        convert(
            ConvertConfig(
                nodes=str(tmp_path / "nodes.csv"),
                edges=str(tmp_path / "edges.csv"),
                out=str(tmp_path / "g"),
            )
        )


# ------------------------------------------------------------------------------------- typed tables
def _typed_tables(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame(
        {
            "id": ["p0", "p1", "p2", "p3"],
            "f0": [0.0, 1.0, 2.0, 3.0],
            "f1": [1.0, 1.0, 0.0, 0.0],
            "label": ["db", "ml", "ml", None],
            "split": ["train", "val", "test", ""],
        }
    ).to_csv(tmp_path / "papers.csv", index=False)
    # no numeric column: a featureless type (learnt rows when trained)
    pd.DataFrame({"id": ["ann", "bob", "cy"], "country": ["x", "y", "x"]}).to_csv(
        tmp_path / "authors.csv", index=False
    )
    pd.DataFrame({"src": ["ann", "bob", "cy", "ann"], "dst": ["p0", "p1", "p1", "p3"]}).to_csv(
        tmp_path / "writes.csv", index=False
    )
    pd.DataFrame({"src": ["p1", "p2"], "dst": ["p0", "p0"]}).to_parquet(tmp_path / "cites.parquet")
    return [
        "convert",
        "--node-tables",
        f"paper={tmp_path / 'papers.csv'},author={tmp_path / 'authors.csv'}",
        "--edge-tables",
        f"author/writes/paper={tmp_path / 'writes.csv'},"
        f"paper/cites/paper={tmp_path / 'cites.parquet'}",
        "--out",
        str(tmp_path / "g"),
    ]


def test_typed_node_and_edge_tables_make_a_typed_graph(tmp_path, capsys):
    from shardgnn.graph.datasets import load_typed_dataset

    assert main(_typed_tables(tmp_path)) == 0
    assert f"shardgnn train hetero:{tmp_path / 'g'}" in capsys.readouterr().out
    g = load_typed_dataset(f"hetero:{tmp_path / 'g'}")
    assert g.node_types == ("paper", "author") and g.num_nodes_of("author") == 3
    assert g.relations == (("author", "writes", "paper"), ("paper", "cites", "paper"))
    assert set(g.x) == {"paper"}
    np.testing.assert_array_equal(g.x["paper"], [[0, 1], [1, 1], [2, 0], [3, 0]])
    src, dst, etype = g.edge_arrays()
    edges = {(int(s), int(d), int(r)) for s, d, r in zip(src, dst, etype)}
    # authors are global ids 4, 5, 6
    assert edges == {(4, 0, 0), (5, 1, 0), (6, 1, 0), (4, 3, 0), (1, 0, 1), (2, 0, 1)}
    assert g.target_type == "paper" and g.y.tolist() == [0, 1, 1, -1] and g.num_classes == 2
    assert (g.train_idx.tolist(), g.val_idx.tolist(), g.test_idx.tolist()) == ([0], [1], [2])


def test_typed_tables_refuse_unknown_types_and_nodes_in_one_line(tmp_path, capsys):
    argv = _typed_tables(tmp_path)
    bad_type = [a.replace("author/writes", "person/writes") for a in argv]
    assert main(bad_type) == 2
    err = capsys.readouterr().err
    assert "names node type 'person', which no node table lists" in err
    (tmp_path / "writes.csv").write_text("src,dst\nann,p0\nzed,p1\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "row 2 of column 'src' names node 'zed'" in err
    assert main(["convert", "--node-tables", "paper=x.csv", "--out", str(tmp_path / "h")]) == 2
    assert "needs both --node-tables" in capsys.readouterr().err


def test_settings_a_typed_graph_or_a_graph_set_does_not_read_are_refused(tmp_path, capsys):
    """A typed graph's edge tables carry no weights or features, and --feature-cols, --symmetric
    or split files are not read for it; a graph set reads its molecules' CSV alone, an .npz
    archive holds its own arrays, node-table columns need a node table and edge-table columns an
    edge table: each is refused in one line naming the flags, never ignored (they were)."""
    import pandas as pd

    argv = _typed_tables(tmp_path)
    for extra, named in (
        (["--edge-feature-cols", "w"], "--edge-feature-cols does not apply to a typed graph"),
        (["--weight-col", "w", "--symmetric"], "--symmetric, --weight-col do not apply"),
        (["--feature-cols", "f0"], "--feature-cols does not apply to a typed graph"),
        (["--train", "t.npy"], "--train does not apply to a typed graph"),
    ):
        assert main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert named in err and "drop" in err and len(err.strip().splitlines()) <= 2, err
        assert not (tmp_path / "g").exists()
    pd.DataFrame({"smiles": ["CCO"], "label": [1.0]}).to_csv(tmp_path / "m.csv", index=False)
    molecules = ["convert", "--molecules", str(tmp_path / "m.csv"), "--out", str(tmp_path / "m")]
    assert main([*molecules, "--id-col", "name"]) == 2
    assert "--id-col does not apply to --molecules" in capsys.readouterr().err
    assert main(["convert", "--edges", "e.txt", "--smiles-col", "s", "--out", "x"]) == 2
    assert "--smiles-col names a column of --molecules FILE" in capsys.readouterr().err
    out = ["--out", str(tmp_path / "h")]
    for args, named in (
        (["--npz", "g.npz", "--features", "x.npy", "--test", "t.txt"], "--features, --test do not"),
        (["--npz", "g.npz", "--src-col", "a"], "--src-col does not apply to an --npz archive"),
        (["--edges", "e.csv", "--nodes", "n.csv", "--base", "1"], "--base does not apply to"),
        (["--edges", "e.txt", "--feature-cols", "a,b"], "--feature-cols names columns of a node"),
        (["--edges", "e.txt", "--id-col", "u", "--split-col", "s"], "--id-col, --split-col name"),
    ):
        assert main(["convert", *args, *out]) == 2
        assert named in capsys.readouterr().err, args
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    for flags, named in (
        (["--src-col", "u"], "--src-col names"),
        (["--weight-col", "w"], "--weight"),
    ):
        assert main(["convert", "--edges", str(tmp_path / "e.txt"), *flags, *out]) == 2
        err = capsys.readouterr().err
        assert named in err and "is a plain edge list" in err, err
    # a random split where the input has its own (the papers' split column), or no labels
    assert main([*argv, "--split", "0.5,0.25,0.25"]) == 2
    assert "--split: the input holds its own split" in capsys.readouterr().err
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    assert main(["convert", "--edges", str(tmp_path / "e.txt"), "--seed", "3", *out]) == 2
    assert "--seed: the input has no labels to split" in capsys.readouterr().err
    assert main(argv) == 0  # the same tables without them


def test_node_tables_give_label_tables_from_the_columns_label_col_names(tmp_path, capsys):
    """Issue 31: ``--label-kind`` other than class reads a node table's ``--label-col`` columns
    (comma-separated) as a label table, for a typed graph's target type and for a plain graph's
    node table; those columns are not features; a missing column or a value the kind refuses is
    one line."""
    from shardgnn.graph.datasets import load_dataset, load_typed_dataset

    pd = pytest.importorskip("pandas")
    argv = _typed_tables(tmp_path)
    # the label columns' empty cells are unknown labels; where a column is a feature instead,
    # its empty cells are NaN features, replaced by 0 here
    argv = [argv[0], "--nonfinite", "zero", *argv[1:]]
    table = pd.read_csv(tmp_path / "papers.csv")
    table["score"] = [0.5, None, -1.25, 2.0]
    table["tag_a"], table["tag_b"] = [1, 0, 1, None], [0, 0, 1, 1]
    table.to_csv(tmp_path / "papers.csv", index=False)

    assert main([*argv, "--label-kind", "regression", "--label-col", "score"]) == 0
    g = load_typed_dataset(f"hetero:{tmp_path / 'g'}")
    assert g.label_kind == "regression" and g.num_classes == 0 and g.y.dtype == np.float32
    np.testing.assert_array_equal(g.y[:, 0], [0.5, np.nan, -1.25, 2.0])
    assert g.x["paper"].shape[1] == 4  # f0, f1, tag_a, tag_b: the label column is not a feature
    out = str(tmp_path / "g2")
    multilabel = ["--label-kind", "multilabel", "--label-col", "tag_a, tag_b", "--out", out]
    assert main([*argv[:-2], *multilabel]) == 0
    g = load_typed_dataset(f"hetero:{out}")
    assert g.label_kind == "multilabel" and g.y.shape == (4, 2)
    np.testing.assert_array_equal(g.y, [[1, 0], [0, 0], [1, 1], [np.nan, 1]])
    assert g.x["paper"].shape[1] == 3  # f0, f1, score
    capsys.readouterr()
    plain = [
        "--edges", str(tmp_path / "chain.csv"), "--nodes", str(tmp_path / "papers.csv"),
        "--src-col", "src", "--dst-col", "dst", "--out", str(tmp_path / "plain"),
    ]  # fmt: skip
    (tmp_path / "chain.csv").write_text("src,dst\np0,p1\np1,p2\np2,p3\n")
    regression = ["--label-kind", "regression", "--label-col", "score", "--nonfinite", "zero"]
    assert main(["convert", *plain, *regression]) == 0
    g = load_dataset(f"graph:{tmp_path / 'plain'}")
    assert g.label_kind == "regression" and g.y.shape == (4, 1)
    again = [*argv[1:], "--overwrite", "--label-kind", "multilabel", "--label-col"]
    err = _refused([*again, "tag_a,tag_c"], capsys)
    assert "has no column 'tag_c' (named by --label-col" in err
    err = _refused([*again, "score"], capsys)
    assert "multi-label entry" in err and "neither 0 nor 1" in err
    for stray in ("tag_a,,tag_b", "tag_a,tag_b,"):  # a column lost to a stray comma?
        err = _refused([*again, stray], capsys)
        assert f"--label-col {stray}: an entry is empty" in err


# ------------------------------------------------------------ nothing lost silently, no traceback
def _refused(argv: list[str], capsys) -> str:
    """The error of a refused ``shardgnn convert``: exit 2, one ``error:`` line (and its ``fix:``
    line), no traceback."""
    assert main(["convert", *argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    while lines and lines[0].startswith("shardgnn convert: warning: "):
        lines.pop(0)  # (a typed table's text columns, named as they are read)
    assert lines and lines[0].startswith("shardgnn convert: error: "), lines
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  fix: ")), lines
    return "\n".join(lines)


def _people(tmp_path, f2=("2", "5", "8")):
    """A node table (text column 'name', numeric f0..f3, f2 given as text cells) and an edge
    table."""
    pytest.importorskip("pandas")
    rows = [
        f"{i},{seg},{i}.0,1,{cell},3,nm{i},train"
        for i, (seg, cell) in enumerate(zip(["a", "b", "a"], f2))
    ]
    (tmp_path / "nodes.csv").write_text("id,segment,f0,f1,f2,f3,name,split\n" + "\n".join(rows))
    (tmp_path / "edges.csv").write_text("src,dst,w\n0,1,0.5\n1,2,1.0\n")
    return ["--nodes", str(tmp_path / "nodes.csv"), "--edges", str(tmp_path / "edges.csv")]


def test_a_feature_column_with_a_cell_that_is_not_a_number_is_refused(tmp_path, capsys):
    base = _people(tmp_path, f2=("2", "abc", "8"))
    out = ["--label-col", "segment", "--out", str(tmp_path / "g")]
    err = _refused([*base, *out], capsys)
    assert "nodes.csv: feature column 'f2' holds 'abc', not a number, at data row 2" in err
    assert "--feature-cols" in err and not (tmp_path / "g").exists()
    # a text column asked for as a feature: refused at its first cell
    err = _refused([*base, *out, "--feature-cols", "f0,name"], capsys)
    assert "feature column 'name' holds 'nm0', not a number, at data row 1" in err
    # leaving the column out works
    assert main(["convert", *base, *out, "--feature-cols", "f0,f1,f3"]) == 0
    np.testing.assert_array_equal(
        load_dataset(f"graph:{tmp_path / 'g'}").x, [[0, 1, 3], [1, 1, 3], [2, 1, 3]]
    )


def test_text_columns_left_out_of_the_features_are_named(tmp_path, capsys):
    base = _people(tmp_path)
    assert main([*["convert", *base], "--label-col", "segment", "--out", str(tmp_path / "g")]) == 0
    err = capsys.readouterr().err
    assert err == (
        f"shardgnn convert: warning: {tmp_path / 'nodes.csv'}: left out non-numeric column(s) "
        "'name' (not features); --feature-cols names the feature columns\n"
    )
    assert load_dataset(f"graph:{tmp_path / 'g'}").x.shape == (3, 4)  # f0..f3, all four


@pytest.mark.parametrize(
    "flag, value, close",
    [
        ("--label-col", "segmnt", "segment"),
        ("--split-col", "splits", "split"),
        ("--id-col", "idd", "id"),
        ("--src-col", "source", None),
        ("--dst-col", "dest", "dst"),
        ("--weight-col", "weight", None),
        ("--feature-cols", "f0,ff1", "f1"),
    ],
)
def test_a_mistyped_column_is_refused_with_the_columns_and_a_close_match(
    tmp_path, capsys, flag, value, close
):
    base = _people(tmp_path)
    err = _refused([*base, flag, value, "--out", str(tmp_path / "g")], capsys)
    missing = value.split(",")[-1]
    assert f"has no column {missing!r} (named by {flag}" in err
    assert "its columns: " in err
    if close is not None:
        fix = f"replace {missing!r} by {close!r} in" if "," in value else f"{flag} {close}"
        assert f"did you mean {close!r}?" in err and f"fix: {fix}" in err
    assert not (tmp_path / "g").exists()


def test_a_csv_with_a_space_separated_header_is_refused_as_one_column(tmp_path, capsys):
    (tmp_path / "e.csv").write_text("src dst\n0 1\n1 2\n")
    err = _refused(["--edges", str(tmp_path / "e.csv"), "--out", str(tmp_path / "g")], capsys)
    assert "e.csv: has one column, 'src dst', and no column 'src' (named by --src-col)" in err
    assert "fix: separate the cells with commas, or give the file a .txt suffix" in err
    # the fix works: the same file as .txt is read by its spaces
    (tmp_path / "e.txt").write_text("src dst\n0 1\n1 2\n")
    assert main(["convert", "--edges", str(tmp_path / "e.txt"), "--out", str(tmp_path / "g")]) == 0
    assert load_dataset(f"graph:{tmp_path / 'g'}").num_edges == 2


def test_typed_tables_refuse_a_mistyped_label_or_split_column(tmp_path, capsys):
    argv = _typed_tables(tmp_path)[1:]  # without "convert"
    err = _refused([*argv, "--label-col", "topic"], capsys)
    assert "no node table has a 'topic' column (--label-col)" in err
    err = _refused([*argv, "--split-col", "splt"], capsys)
    assert "papers.csv: has no column 'splt' (named by --split-col; did you mean 'split'?)" in err
    err = _refused([*argv, "--target-type", "author"], capsys)
    assert "authors.csv: has no column 'label' (named by --label-col)" in err


@pytest.mark.parametrize("what", ["labels", "features"])
def test_more_rows_than_the_edge_list_has_nodes_need_num_nodes(tmp_path, capsys, what):
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")  # 3 nodes
    (tmp_path / "labels.txt").write_text("0\n1\n0\n1\n")
    np.save(tmp_path / "features.npy", np.ones((4, 2), dtype=np.float32))
    file = tmp_path / ("labels.txt" if what == "labels" else "features.npy")
    argv = ["--edges", str(tmp_path / "e.txt"), f"--{what}", str(file)]
    err = _refused([*argv, "--out", str(tmp_path / "g")], capsys)
    rows = "4 labels" if what == "labels" else "4 feature rows"
    assert f"{file}: {rows}, but the edge list {tmp_path / 'e.txt'} names 3 nodes" in err
    assert "pass --num-nodes 4" in err and not (tmp_path / "g").exists()
    err = _refused([*argv, "--num-nodes", "5", "--out", str(tmp_path / "g")], capsys)
    assert f"{file}: {rows} for --num-nodes 5" in err
    err = _refused([*argv, "--num-nodes", "2", "--out", str(tmp_path / "g")], capsys)
    assert "e.txt: names node 2, beyond --num-nodes 2" in err
    assert main(["convert", *argv, "--num-nodes", "4", "--out", str(tmp_path / "g")]) == 0
    assert load_dataset(f"graph:{tmp_path / 'g'}").num_nodes == 4  # node 3 isolated, as asked
    _people(tmp_path)
    err = _refused(
        ["--nodes", str(tmp_path / "nodes.csv"), "--edges", str(tmp_path / "edges.csv")]
        + ["--num-nodes", "4", "--out", str(tmp_path / "h")],
        capsys,
    )
    assert "--num-nodes 4: applies to --edges without --nodes" in err


def test_tables_and_arrays_may_open_with_comment_lines(tmp_path):
    """A CSV whose header follows comment lines is a table (read by column name); a tab- or
    space-separated one is read by its header's separator; a label file's header after comments
    is skipped."""
    pytest.importorskip("pandas")
    (tmp_path / "e.csv").write_text("# exported 2026-12-03\n\ndst,src\n1,0\n2,1\n")
    assert main(["convert", "--edges", str(tmp_path / "e.csv"), "--out", str(tmp_path / "g")]) == 0
    g = load_dataset(f"graph:{tmp_path / 'g'}")
    assert g.num_nodes == 3 and _edges_of(g) == {(0, 1), (1, 2)}  # by name, not position
    for name, sep in [("t.tsv", "\t"), ("s.txt", " ")]:
        text = "dst src w\n1 0 1\n2 1 2\n".replace(" ", sep)
        (tmp_path / name).write_text("% from the wiki\n" + text)
        out = tmp_path / f"g-{name}"
        argv = ["--edges", str(tmp_path / name), "--weight-col", "w", "--out", str(out)]
        assert main(["convert", *argv]) == 0
        g = load_dataset(f"graph:{out}")
        assert _edges_of(g) == {(0, 1), (1, 2)} and sorted(g.edge_weight.tolist()) == [1, 2]
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    (tmp_path / "y.csv").write_text("# classes\nlabel\n0\n1\n1\n")
    argv = ["--edges", str(tmp_path / "e.txt"), "--labels", str(tmp_path / "y.csv")]
    assert main(["convert", *argv, "--out", str(tmp_path / "h")]) == 0
    assert load_dataset(f"graph:{tmp_path / 'h'}").y.tolist() == [0, 1, 1]


def test_node_files_next_to_an_edge_table_are_refused_not_dropped(tmp_path, capsys):
    (tmp_path / "e.csv").write_text("src,dst\n0,1\n1,2\n")
    np.save(tmp_path / "x.npy", np.ones((3, 2), dtype=np.float32))
    argv = ["--edges", str(tmp_path / "e.csv"), "--features", str(tmp_path / "x.npy")]
    err = _refused([*argv, "--out", str(tmp_path / "g")], capsys)
    assert "--features with an edge table" in err and "(--nodes)" in err


@pytest.mark.parametrize(
    "name, edges, line, found, cell",
    [
        ("e.csv", "src,dst\n0,1\n1,2,3\n2,0\n", 3, 3, "quote a cell that holds a comma"),
        ("e.csv", "src,dst\n\n0,1,2\n1,2\n", 3, 3, "quote a cell that holds a comma"),
        ("e.csv", "% c\n# c\nsrc\tdst\n0\t1\n1\t2\t3\n", 5, 3, "quote a cell that holds a tab"),
        (
            "e.txt",
            "src dst\n0 1\n1 2 3\n",
            3,
            3,
            "the cells are separated by spaces, so a cell cannot hold one",
        ),
    ],
)
def test_a_ragged_table_names_the_line(tmp_path, capsys, name, edges, line, found, cell):
    """The fix says how a cell may hold the table's own separator (it spoke of commas in a
    tab- or space-separated table)."""
    pytest.importorskip("pandas")
    (tmp_path / name).write_text(edges)
    err = _refused(["--edges", str(tmp_path / name), "--out", str(tmp_path / "g")], capsys)
    assert f"{name}: line {line} has {found} fields but the header has 2" in err
    assert f"fix: give every row one cell per header column ({cell}), or name" in err


def test_an_existing_out_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    # refused before reading the (missing) labels file
    argv = ["--edges", str(tmp_path / "e.txt"), "--labels", str(tmp_path / "nope.txt")]
    err = _refused([*argv, "--out", str(mine)], capsys)
    assert f"--out {mine}: already exists and is not a graph directory" in err
    # --overwrite replaces a graph directory only, never another folder
    err = _refused([*argv, "--out", str(mine), "--overwrite"], capsys)
    assert "is not a graph directory" in err and (mine / "notes.txt").read_text() == "keep me"
    argv = ["--edges", str(tmp_path / "e.txt")]
    assert main(["convert", *argv, "--out", str(tmp_path / "g")]) == 0
    err = _refused([*argv, "--symmetric", "--out", str(tmp_path / "g")], capsys)
    assert (
        f"--out {tmp_path / 'g'}: the folder already exists; choose another --out, or pass "
        "--overwrite to replace it" in err
    )
    assert load_dataset(f"graph:{tmp_path / 'g'}").num_edges == 2  # untouched
    assert main(["convert", *argv, "--symmetric", "--out", str(tmp_path / "g"), "--overwrite"]) == 0
    assert load_dataset(f"graph:{tmp_path / 'g'}").num_edges == 4


# ------------------------------------------------------------------------ NaN and infinite values
def _nan_inputs(tmp_path, kind: str) -> tuple[list[str], str, str]:
    """``kind``'s input with one NaN or infinite value: (argv, the file to name, what it holds)."""
    d = tmp_path
    if kind == "features-npy":
        (d / "e.txt").write_text("0 1\n1 2\n2 0\n")
        np.save(d / "x.npy", np.array([[1, 2], [3, np.nan], [5, 6]], dtype=np.float32))
        return ["--edges", str(d / "e.txt"), "--features", str(d / "x.npy")], "x.npy", "feature"
    if kind == "node-table":
        pytest.importorskip("pandas")
        (d / "n.csv").write_text("id,a,b\nu,1,2\nv,3,\nw,5,6\n")  # an empty feature cell
        (d / "e.csv").write_text("src,dst\nu,v\nv,w\n")
        return ["--nodes", str(d / "n.csv"), "--edges", str(d / "e.csv")], "n.csv", "feature"
    if kind == "edge-table":
        pytest.importorskip("pandas")
        (d / "e.csv").write_text("src,dst,f\n0,1,0.5\n1,2,inf\n")
        argv = ["--edges", str(d / "e.csv"), "--edge-feature-cols", "f"]
        return argv, "e.csv", "edge feature"
    if kind == "npz":
        attr = np.array([[0.5], [np.inf], [1.0]], dtype=np.float32)
        np.savez(d / "g.npz", edge_index=np.array([[0, 1, 2], [1, 2, 0]]), edge_attr=attr)
        return ["--npz", str(d / "g.npz")], "g.npz", "edge feature"
    assert kind == "typed"
    argv = _typed_tables(tmp_path)[1:-2]
    papers = (d / "papers.csv").read_text().replace("p1,1.0,", "p1,,")
    assert papers != (d / "papers.csv").read_text()
    (d / "papers.csv").write_text(papers)
    return argv, "papers.csv", "feature"


@pytest.mark.parametrize("kind", ["features-npy", "node-table", "edge-table", "npz", "typed"])
def test_nan_and_infinite_values_are_refused_or_replaced_by_zero(tmp_path, capsys, kind):
    argv, source, what = _nan_inputs(tmp_path, kind)
    out = ["--out", str(tmp_path / "g")]
    err = _refused([*argv, *out], capsys)
    assert f"{source}: 1 non-finite {what} value in 1 row (the first: row 1, counted from 0)" in err
    assert "`--nonfinite zero` (shardgnn convert)" in err and not (tmp_path / "g").exists()
    assert main(["convert", *argv, *out, "--nonfinite", "zero"]) == 0
    warning = f"warning: {tmp_path / source}: replaced 1 non-finite {what} value in 1 row by 0"
    assert warning in capsys.readouterr().err
    if kind == "typed":
        from shardgnn.graph.datasets import load_typed_dataset

        x = load_typed_dataset(f"hetero:{tmp_path / 'g'}").x["paper"]
    else:
        graph = load_dataset(f"graph:{tmp_path / 'g'}")
        x = graph.x if what == "feature" else graph.edge_attr
    values = np.asarray(x)
    assert np.isfinite(values).all() and (values == 0).sum() >= 1


def test_a_stored_array_given_nan_or_inf_after_saving_is_refused_when_loaded(tmp_path, capsys):
    """Saving refuses NaN and infinity; a file rewritten by hand afterwards is refused when the
    directory is loaded (memory-mapped or not, plain, typed, graph set, and through `shardgnn
    train`: one line naming the file and the first row), not trained to a NaN loss."""
    from shardgnn.graph.graphset import GraphSet, load_graphset, save_graphset
    from shardgnn.graph.io import load_graph
    from shardgnn.graph.typed import TypedGraph, load_typed_graph, save_typed_graph

    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    graph = Graph.from_edge_index(
        src, dst, x=np.ones((4, 2), np.float32), edge_attr=np.ones((4, 3), np.float32),
        y=np.array([0, 1, 0, 1]), num_classes=2, train_idx=np.array([0, 1]), name="mine",
    )  # fmt: skip
    for key, what in (("x", "feature"), ("edge_attr", r"edge feature \(CSR order\)")):
        path = save_graph(graph, tmp_path / key)
        values = np.load(path / f"{key}.npy")
        values[2, 1] = np.nan
        np.save(path / f"{key}.npy", values)  # same shape and dtype: meta.json still agrees
        line = rf"{key}\.npy: 1 non-finite {what} value in 1 row \(the first: row 2, counted"
        for load in (load_graph, lambda d: load_graph(d, mmap=True), lambda d: load_dataset(
            f"graph:{d}")):  # fmt: skip
            with pytest.raises(DatasetError, match=line + r".*\n  fix: the saving call refuses"):
                load(path)
    assert main(["train", f"graph:{tmp_path / 'x'}", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "x.npy: 1 non-finite feature value" in err[0] and len(err) <= 2, err

    typed = TypedGraph.from_typed_edges(
        {"a": 2, "b": 2},
        {("a", "to", "b"): (np.array([0, 1]), np.array([1, 0]))},
        x={"a": np.ones((2, 2), np.float32), "b": np.ones((2, 2), np.float32)},
    )
    path = save_typed_graph(typed, tmp_path / "typed")
    np.save(path / "x.1.npy", np.array([[1, 1], [0, -np.inf]], np.float32))
    with pytest.raises(DatasetError, match=r"x\.1\.npy: 1 non-finite 'b' feature value in 1 "
                       r"row \(the first: row 1"):  # fmt: skip
        load_typed_graph(path)

    graphs = [(np.array([0, 1]), np.array([1, 0]), 2), (np.array([0]), np.array([0]), 1)]
    x = [np.ones((2, 2), np.float32), np.ones((1, 2), np.float32)]
    attrs = [np.ones((2, 1), np.float32), np.array([[np.nan]], np.float32)]
    split = (np.array([0]), np.array([1]), np.array([], int))
    with pytest.raises(DatasetError, match="edge_attr holds NaN or infinite values"):
        GraphSet.from_graphs(graphs, x, np.array([0, 1]), split, edge_attr=attrs)
    attrs[1][0, 0] = 1.0
    gs = GraphSet.from_graphs(graphs, x, np.array([0, 1]), split, edge_attr=attrs)
    gs.edge_attr[2, 0] = np.inf  # changed after building: caught on saving
    with pytest.raises(DatasetError, match=r"1 non-finite edge feature value in 1 row \(the "
                       r"first: row 2"):  # fmt: skip
        save_graphset(gs, tmp_path / "set")
    assert not (tmp_path / "set").exists()
    gs.edge_attr[2, 0] = 1.0
    path = save_graphset(gs, tmp_path / "set")
    np.save(path / "x.npy", np.array([[1, 1], [1, 1], [np.nan, 1]], np.float32))
    with pytest.raises(DatasetError, match=r"set/x\.npy: 1 non-finite feature value in 1 row"):
        load_graphset(path)


def test_a_graph_built_in_python_with_nan_or_inf_values_is_refused(tmp_path):
    """Through the Python API (no file, no ``nonfinite``), NaN or inf in features, edge weights
    or edge features is refused when the graph is built or saved, naming the array and the
    first row, rather than trained to a NaN loss an epoch later."""
    from shardgnn.graph.typed import TypedGraph, save_typed_graph

    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0])
    x = np.ones((4, 2), np.float32)
    x[2, 1] = np.nan
    with pytest.raises(DatasetError, match=r"mine: 1 non-finite feature value in 1 row \(the "
                       r"first: row 2, counted from 0\)\n  fix: replace them first"):  # fmt: skip
        save_graph(Graph.from_edge_index(src, dst, x=x), tmp_path / "mine")
    assert not (tmp_path / "mine").exists()
    for key, what in (("edge_weight", "edge weight"), ("edge_attr", "edge feature")):
        values = np.ones(4 if key == "edge_weight" else (4, 3), np.float32)
        values[3] = -np.inf  # the caller's fourth edge, whatever the CSR's order
        with pytest.raises(DatasetError, match=rf"edges: .* non-finite {what} values? in 1 row "
                           r"\(the first: row 3, counted from 0\)"):  # fmt: skip
            Graph.from_edge_index(src, dst, **{key: values})
        graph = Graph.from_edge_index(src, dst, **{key: np.ones_like(values)})
        getattr(graph, key)[0] = np.nan  # changed after building: caught on saving
        with pytest.raises(DatasetError, match=rf"non-finite {what} \(CSR order\) value"):
            save_graph(graph, tmp_path / "mine")
    typed = TypedGraph.from_typed_edges(
        {"a": 2, "b": 2},
        {("a", "to", "b"): (np.array([0, 1]), np.array([1, 0]))},
        x={"a": np.ones((2, 2), np.float32), "b": np.array([[1, np.inf], [0, 0]], np.float32)},
    )
    with pytest.raises(DatasetError, match=r"1 non-finite 'b' feature value in 1 row"):
        save_typed_graph(typed, tmp_path / "typed")
    assert not (tmp_path / "typed").exists()


def test_a_nan_edge_weight_is_refused_whatever_nonfinite_says(tmp_path, capsys):
    pytest.importorskip("pandas")
    (tmp_path / "e.csv").write_text("src,dst,w\n0,1,0.5\n1,2,\n")
    argv = ["--edges", str(tmp_path / "e.csv"), "--weight-col", "w", "--out", str(tmp_path / "g")]
    for extra in ([], ["--nonfinite", "zero"]):
        err = _refused([*argv, *extra], capsys)
        assert "e.csv: 1 edge weights are NaN or infinite (an empty weight cell is NaN)" in err
    assert not (tmp_path / "g").exists()


def test_nonfinite_does_not_apply_to_molecules_and_object_arrays_are_named(tmp_path, capsys):
    err = _refused(
        ["--molecules", str(tmp_path / "m.csv"), "--nonfinite", "zero", "--out", str(tmp_path)],
        capsys,
    )
    assert "--nonfinite does not apply to --molecules" in err
    (tmp_path / "e.txt").write_text("0 1\n")
    np.save(tmp_path / "x.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    argv = ["--edges", str(tmp_path / "e.txt"), "--features", str(tmp_path / "x.npy")]
    err = _refused([*argv, "--out", str(tmp_path / "g")], capsys)
    assert "x.npy: holds Python objects (an object-dtype array" in err
    assert "fix: save numbers: numpy.save(" in err


def test_an_npy_that_is_gzipped_or_a_pickle_is_named_as_such(tmp_path, capsys):
    """Before: both were told they hold Python objects (numpy read them as pickles)."""
    import gzip
    import pickle

    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    np.save(tmp_path / "x.npy", FEATURES[:3])
    (tmp_path / "x.npy.gz").write_bytes(gzip.compress((tmp_path / "x.npy").read_bytes()))
    (tmp_path / "p.npy").write_bytes(pickle.dumps(FEATURES[:3].tolist()))
    for name, said in (
        (
            "x.npy.gz",
            "is gzip-compressed, and an .npy array is read as it is (memory-mapped)\n"
            "  fix: decompress it: gunzip ",
        ),
        ("p.npy", "is a Python pickle, which shardgnn never runs on a file"),
    ):
        argv = ["--edges", str(tmp_path / "e.txt"), "--features", str(tmp_path / name)]
        err = _refused([*argv, "--out", str(tmp_path / "g")], capsys)
        assert f"{name}: {said}" in err, err
    np.save(tmp_path / "e.npy", np.array([[0, 1], [1, 2]]))
    (tmp_path / "e.npy.gz").write_bytes(gzip.compress((tmp_path / "e.npy").read_bytes()))
    with pytest.raises(DatasetError, match="e.npy.gz: is gzip-compressed"):
        load_dataset(f"file:{tmp_path / 'e.npy.gz'}")
