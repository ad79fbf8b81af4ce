"""Results map back to the user's ids (issue 34): ``shardgnn convert`` keeps a node table's ids and
a label column's class names, partitions carry them, and ``shardgnn infer`` writes tables keyed
by them (predictions with class names, embeddings), for untyped and typed graphs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardgnn.cli import main
from shardgnn.errors import DatasetError
from shardgnn.graph.convert import ConvertConfig, convert
from shardgnn.graph.identity import fingerprint
from shardgnn.graph.io import load_graph, save_graph
from shardgnn.graph.typed import load_typed_graph
from shardgnn.partition.format import read_partitions, verify_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.partition.typed import partition_for_training
from shardgnn.train.tables import write_output_tables

pd = pytest.importorskip("pandas")

CLASSES = ("cat", "dog", "emu")


def _people(tmp_path, n: int = 120):
    """A node table with text ids (shuffled, two of them needing CSV quotes) and text labels
    that the features predict, and an edge table naming the ids."""
    rng = np.random.default_rng(0)
    ids = [f"user-{i:03d}" for i in rng.permutation(n)]
    ids[3], ids[7] = "smith, ann", 'the "boss"'
    cls = rng.integers(0, 3, n)
    x = rng.normal(size=(n, 4)) + 2.0 * cls[:, None]
    nodes = pd.DataFrame(
        {"id": ids, "label": np.array(CLASSES)[cls], **{f"f{j}": x[:, j] for j in range(4)}}
    )
    nodes.to_csv(tmp_path / "nodes.csv", index=False)
    src, dst = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    pd.DataFrame({"src": [ids[i] for i in src], "dst": [ids[i] for i in dst]}).to_csv(
        tmp_path / "edges.csv", index=False
    )
    return nodes


def _convert_people(tmp_path):
    nodes = _people(tmp_path)
    out = tmp_path / "g"
    convert(
        ConvertConfig(
            nodes=str(tmp_path / "nodes.csv"),
            edges=str(tmp_path / "edges.csv"),
            symmetric=True,
            out=str(out),
        )
    )
    return nodes, out


def _typed(tmp_path):
    """Papers (text ids, text labels, features) and featureless authors (text ids)."""
    rng = np.random.default_rng(1)
    papers, authors = 90, 40
    pids = [f"p{i}" for i in rng.permutation(papers)]
    aids = [f"author {i}" for i in rng.permutation(authors)]
    aids[0] = "doe, jane"
    cls = rng.integers(0, 3, papers)
    x = rng.normal(size=(papers, 4)) + 2.0 * cls[:, None]
    paper_table = pd.DataFrame(
        {"id": pids, "label": np.array(["db", "ml", "os"])[cls]}
        | {f"f{j}": x[:, j] for j in range(4)}
    )
    paper_table.to_csv(tmp_path / "papers.csv", index=False)
    author_table = pd.DataFrame({"id": aids})
    author_table.to_csv(tmp_path / "authors.csv", index=False)
    s, d = rng.integers(0, authors, 300), rng.integers(0, papers, 300)
    pd.DataFrame({"src": [aids[i] for i in s], "dst": [pids[i] for i in d]}).to_csv(
        tmp_path / "writes.csv", index=False
    )
    s, d = rng.integers(0, papers, 200), rng.integers(0, papers, 200)
    pd.DataFrame({"src": [pids[i] for i in s], "dst": [pids[i] for i in d]}).to_csv(
        tmp_path / "cites.csv", index=False
    )
    argv = [
        "convert",
        "--node-tables",
        f"paper={tmp_path / 'papers.csv'},author={tmp_path / 'authors.csv'}",
        "--edge-tables",
        f"author/writes/paper={tmp_path / 'writes.csv'},paper/cites/paper={tmp_path / 'cites.csv'}",
        "--out",
        str(tmp_path / "typed"),
    ]
    assert main(argv) == 0
    return paper_table, author_table, tmp_path / "typed"


def _read_csv(path):
    """A table as written: ids as text, nothing read as missing."""
    return pd.read_csv(path, dtype={"node_id": str, "class_name": str}, keep_default_na=False)


# ------------------------------------------------------------------------------ the graph directory
def test_node_table_ids_and_class_names_survive_save_and_load(tmp_path):
    nodes, out = _convert_people(tmp_path)
    graph = load_graph(out, mmap=True)
    assert graph.node_ids.dtype.kind == "U" and graph.node_ids.tolist() == nodes["id"].tolist()
    assert graph.class_names == CLASSES
    assert [graph.class_names[c] for c in graph.y] == nodes["label"].tolist()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["node_ids"]["file"] == "node_ids.npy" and meta["class_names"] == list(CLASSES)
    assert np.load(out / "node_ids.npy", allow_pickle=False).tolist() == nodes["id"].tolist()
    # the names are no part of the graph's identity, nor of the directory of a graph without them
    plain = dataclasses.replace(graph, node_ids=None, class_names=None)
    assert fingerprint(plain) == fingerprint(graph)
    save_graph(plain, tmp_path / "plain")
    plain_meta = json.loads((tmp_path / "plain" / "meta.json").read_text())
    assert "node_ids" not in plain_meta and "class_names" not in plain_meta
    assert plain_meta["arrays"] == meta["arrays"]
    assert not (tmp_path / "plain" / "node_ids.npy").exists()
    assert load_graph(tmp_path / "plain").node_ids is None


def test_integer_ids_stay_integers_and_integer_labels_name_no_classes(tmp_path):
    pd.DataFrame({"id": [10, 30, 20], "label": [1, 0, 1], "f": [0.0, 1.0, 2.0]}).to_csv(
        tmp_path / "n.csv", index=False
    )
    pd.DataFrame({"src": [10, 30], "dst": [30, 20]}).to_csv(tmp_path / "e.csv", index=False)
    convert(ConvertConfig(nodes=str(tmp_path / "n.csv"), edges=str(tmp_path / "e.csv"),
                          out=str(tmp_path / "g")))  # fmt: skip
    graph = load_graph(tmp_path / "g")
    assert graph.node_ids.dtype == np.int64 and graph.node_ids.tolist() == [10, 30, 20]
    assert graph.class_names is None


@pytest.mark.parametrize(
    "text, args, expected",
    [
        ("1 2\n2 3\n3 5\n", ["--base", "1"], [1, 2, 3, 4, 5]),
        ("src,dst\n1,2\n2,3\n", ["--base", "auto"], [1, 2, 3]),  # an edge table
        ("0 1\n1 2\n", [], None),  # ids 0..N-1: nothing to keep
    ],
)
def test_edge_lists_keep_ids_they_renumber(tmp_path, text, args, expected):
    (tmp_path / "edges.txt").write_text(text)
    assert main(["convert", "--edges", str(tmp_path / "edges.txt"), *args,
                 "--out", str(tmp_path / "g")]) == 0  # fmt: skip
    ids = load_graph(tmp_path / "g").node_ids
    assert (None if ids is None else ids.tolist()) == expected
    assert (tmp_path / "g" / "node_ids.npy").exists() == (expected is not None)


def test_typed_tables_keep_ids_per_type_and_the_target_class_names(tmp_path):
    papers, authors, out = _typed(tmp_path)
    graph = load_typed_graph(out)
    assert graph.node_ids["paper"].tolist() == papers["id"].tolist()
    assert graph.node_ids["author"].tolist() == authors["id"].tolist()
    assert graph.class_names == ("db", "ml", "os")
    assert [graph.class_names[c] for c in graph.y] == papers["label"].tolist()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["node_ids"]["author"]["file"] == "node_ids.1.npy"
    assert "node_ids.1" not in meta["arrays"]  # beside the arrays: the graph itself is unchanged


# --------------------------------------------------------------------------------------- partitions
def test_partitions_carry_the_ids_and_class_names(tmp_path):
    nodes, out = _convert_people(tmp_path)
    graph = load_graph(out)
    result = partition_graph(graph, PartitionConfig(num_parts=3, method="metis", seed=0))
    parts = tmp_path / "parts"
    write_partitions(graph, result.assignment, parts, method="metis")
    pset = read_partitions(parts)  # checksums of the names too
    assert pset.node_ids().tolist() == nodes["id"].tolist()  # by original id, not new id
    assert pset.class_names == CLASSES and "names/node_ids.npy" in pset.meta["sha256"]
    verify_partitions(parts)
    # a graph without names: the directory is as before
    plain = dataclasses.replace(graph, node_ids=None, class_names=None)
    write_partitions(plain, result.assignment, tmp_path / "plain", method="metis")
    plain_set = read_partitions(tmp_path / "plain")
    assert "names" not in plain_set.meta and not (tmp_path / "plain" / "names").exists()
    assert plain_set.node_ids() is None and plain_set.class_names is None
    assert plain_set.dataset == pset.dataset  # the same graph identity
    # meta.json naming an array it does not list is refused in one line
    meta = json.loads((parts / "meta.json").read_text())
    meta["names"]["node_ids"] = "names/elsewhere.npy"
    (parts / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="names lists 'names/elsewhere.npy'"):
        read_partitions(parts)


def test_typed_partitions_carry_the_ids_of_every_type(tmp_path):
    papers, authors, out = _typed(tmp_path)
    _, _, pset = partition_for_training(
        load_typed_graph(out), PartitionConfig(num_parts=2, method="metis"), tmp_path / "parts"
    )
    assert pset.node_ids("paper").tolist() == papers["id"].tolist()
    assert pset.node_ids("author").tolist() == authors["id"].tolist()
    assert pset.node_ids() is None and pset.class_names == ("db", "ml", "os")
    verify_partitions(tmp_path / "parts")


# ------------------------------------------------------------------------------------------- tables
@pytest.mark.parametrize("table_format", ["csv", "parquet"])
def test_output_tables_key_rows_by_id_and_name_the_classes(tmp_path, table_format):
    if table_format == "parquet":
        pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(5, 3)).astype(np.float32)
    predictions = np.array([1, 0, 2, 1, 0])
    np.save(tmp_path / "embeddings.npy", embeddings)
    np.save(tmp_path / "predictions.npy", predictions)
    ids = np.array(["a", "b,c", 'say "hi"', "line\nbreak", "e"])
    written = write_output_tables(tmp_path, table_format, ids, ("x", "y", "z"))
    assert set(written) == {"predictions_table", "embeddings_table"}
    read = _read_csv if table_format == "csv" else pd.read_parquet
    table = read(tmp_path / f"predictions.{table_format}")
    assert list(table.columns) == ["node_id", "class", "class_name"]
    assert table["node_id"].tolist() == ids.tolist()
    assert table["class"].tolist() == predictions.tolist()
    assert table["class_name"].tolist() == ["y", "x", "z", "y", "x"]
    emb = read(tmp_path / f"embeddings.{table_format}")
    assert list(emb.columns) == ["node_id", "emb_0", "emb_1", "emb_2"]
    # the same float32 values, row for row
    np.testing.assert_array_equal(emb[["emb_0", "emb_1", "emb_2"]].to_numpy(np.float32), embeddings)
    # no names: ids 0..N-1 and classes by number, the same shape; no predictions, no table
    written = write_output_tables(tmp_path, table_format, None, None)
    table = read(tmp_path / f"predictions.{table_format}")
    assert table["node_id"].astype(int).tolist() == list(range(5))
    assert table["class_name"].tolist() == [str(c) for c in predictions]
    assert set(write_output_tables(tmp_path, table_format, None, None, predictions=False)) == {
        "embeddings_table"
    }
    assert write_output_tables(tmp_path, "none", ids, None) == {}


def test_parquet_tables_without_pyarrow_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    argv = ["infer", "--checkpoint", str(tmp_path), "--partitions", str(tmp_path), "--out",
            str(tmp_path / "o"), "--table-format", "parquet"]  # fmt: skip
    assert main(argv) == 2
    assert "needs pyarrow" in capsys.readouterr().err


# ---------------------------------------------------------------------------- shardgnn infer, whole
def _check_joined_accuracy(table, users, label_col, test_rows, accuracy):
    """Joined on the user's ids (in another row order), the named predictions of the test nodes
    are right as often as inference.json says."""
    joined = users.merge(table.sample(frac=1, random_state=0), left_on="id", right_on="node_id")
    assert len(joined) == len(users)
    test = joined[joined["id"].isin(users["id"].iloc[test_rows])]
    assert (test["class_name"] == test[label_col]).mean() == pytest.approx(accuracy)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_infer_writes_tables_keyed_by_the_users_ids(tmp_path):
    nodes, graph_dir = _convert_people(tmp_path)
    spec = f"graph:{graph_dir}"
    assert main(["train", spec, "--fanouts", "4,4", "--hidden", "8", "--epochs", "2", "--quiet",
                 "--checkpoint-dir", str(tmp_path / "ckpt")]) == 0  # fmt: skip
    parts = str(tmp_path / "parts")
    assert main(["partition", spec, "--parts", "2", "--out", parts, "--quiet"]) == 0
    out = tmp_path / "out"
    assert main(["infer", "--checkpoint", str(tmp_path / "ckpt"), "--partitions", parts,
                 "--out", str(out)]) == 0  # fmt: skip
    summary = json.loads((out / "inference.json").read_text())
    assert summary["tables"]["node_id"] == "the graph's own ids"
    assert summary["outputs"]["predictions_table"] == str(out / "predictions.csv")
    predictions = np.load(out / "predictions.npy", allow_pickle=False)
    table = _read_csv(out / "predictions.csv")
    # row i is original node i, the node table's row i
    assert table["node_id"].tolist() == nodes["id"].tolist()
    assert table["class"].tolist() == predictions.tolist()
    assert table["class_name"].tolist() == [CLASSES[c] for c in predictions]
    emb = _read_csv(out / "embeddings.csv")
    assert emb["node_id"].tolist() == nodes["id"].tolist()
    np.testing.assert_array_equal(
        emb.drop(columns="node_id").to_numpy(np.float32), np.load(out / "embeddings.npy")
    )
    test_rows = load_graph(graph_dir).test_idx
    _check_joined_accuracy(table, nodes, "label", test_rows, summary["accuracy"]["test"])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_typed_infer_writes_tables_per_type_keyed_by_its_ids(tmp_path):
    pytest.importorskip("pyarrow")
    papers, authors, graph_dir = _typed(tmp_path)
    parts = str(tmp_path / "parts")
    assert main(["partition", f"hetero:{graph_dir}", "--parts", "2", "--out", parts,
                 "--quiet"]) == 0  # fmt: skip
    assert main(["train", "--partitions", parts, "--model", "rgcn", "--fanouts", "4,4",
                 "--hidden", "8", "--epochs", "1", "--quiet",
                 "--checkpoint-dir", str(tmp_path / "ckpt")]) == 0  # fmt: skip
    out = tmp_path / "out"
    assert main(["infer", "--checkpoint", str(tmp_path / "ckpt"), "--partitions", parts,
                 "--out", str(out), "--table-format", "parquet"]) == 0  # fmt: skip
    summary = json.loads((out / "inference.json").read_text())
    assert summary["tables"] == {
        "format": "parquet",
        "node_id": "the graph's own ids",
        "class_names": ["db", "ml", "os"],
    }
    predictions = np.load(out / "paper" / "predictions.npy", allow_pickle=False)
    table = pd.read_parquet(out / "paper" / "predictions.parquet")
    assert table["node_id"].tolist() == papers["id"].tolist()
    assert table["class"].tolist() == predictions.tolist()
    assert table["class_name"].tolist() == [("db", "ml", "os")[c] for c in predictions]
    for name, users in (("paper", papers), ("author", authors)):
        emb = pd.read_parquet(out / name / "embeddings.parquet")
        assert emb["node_id"].tolist() == users["id"].tolist()
        np.testing.assert_array_equal(
            emb.drop(columns="node_id").to_numpy(np.float32),
            np.load(out / name / "embeddings.npy"),
        )
    assert not (out / "author" / "predictions.parquet").exists()
    test_rows = load_typed_graph(graph_dir).test_idx
    _check_joined_accuracy(table, papers, "label", test_rows, summary["accuracy"]["test"])
