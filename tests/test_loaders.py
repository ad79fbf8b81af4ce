"""Dataset loaders: Planetoid, gnn-benchmark npz, OGB raw layout, edge lists, restricted unpickling.

Fixture tests build tiny files in every supported format under ``tmp_path`` and always run.
Real-data tests read the offline copies in ``../shared/data`` (see its README) and are skipped
when that folder is absent.
"""

from __future__ import annotations

import collections
import gzip
import io
import os
import pickle
import time
import urllib.error
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from shardgnn.errors import DatasetError
from shardgnn.graph import edgelist as edgelist_module
from shardgnn.graph import ogb as ogb_module
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.edgelist import header_line, load_edge_list, parse_numeric_table
from shardgnn.graph.gnnbenchmark import load_gnn_benchmark
from shardgnn.graph.ogb import load_ogb_nodeprop
from shardgnn.graph.planetoid import load_planetoid
from shardgnn.graph.safe_pickle import load_npz_safely, safe_load

from conftest import SHARED_DATA, requires_shared_data

needs_data = requires_shared_data


def edge_set(graph) -> set[tuple[int, int]]:
    src, dst = graph.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


def write_gz(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    return path


def truncate(path: Path, fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


# ====================================================================================== fixtures
# --- Planetoid: 517 nodes; allx = rows 0..509; test ids 510..516 minus 511 and 515 (the CiteSeer
# gap).
PLANETOID_TEST_IDS = [513, 510, 512, 514, 516]  # file order, deliberately unsorted
PLANETOID_EDGES = {0: [1, 2, 2, 0], 1: [0], 2: [], 510: [516], 516: [510, 3], 511: []}


def write_planetoid(
    folder: Path, name: str = "tiny", protocol: int = 2, tx_value: float = 1.0
) -> dict:
    """Pickle tiny ``ind.<name>.*`` files the way the real ones are built (protocol 2 like Python
    2)."""
    rng = np.random.default_rng(0)
    num_classes, num_features, num_allx = 3, 4, 510
    allx = sp.csr_matrix((rng.random((num_allx, num_features)) > 0.5).astype(np.float32))
    ally = np.eye(num_classes, dtype=np.int32)[rng.integers(0, num_classes, num_allx)]
    ally[7] = 0  # an all-zero one-hot row -> unlabelled
    tx_dense = np.arange(len(PLANETOID_TEST_IDS) * num_features, dtype=np.float32).reshape(
        -1, num_features
    )
    tx_dense[:, 0] = tx_value
    ty = np.eye(num_classes, dtype=np.int32)[[0, 1, 2, 0, 1]]
    graph = collections.defaultdict(list, {k: list(v) for k, v in PLANETOID_EDGES.items()})
    objects = {
        "x": allx[:4],
        "y": ally[:4],
        "tx": sp.csr_matrix(tx_dense),
        "ty": ty,
        "allx": allx,
        "ally": ally,
        "graph": graph,
    }
    folder.mkdir(parents=True, exist_ok=True)
    for part, obj in objects.items():
        (folder / f"ind.{name}.{part}").write_bytes(pickle.dumps(obj, protocol=protocol))
    (folder / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in PLANETOID_TEST_IDS))
    return {"allx": allx.toarray(), "ally": ally, "tx": tx_dense, "ty": ty}


# --- gnn-benchmark npz: 120 nodes, 2 classes of 60, a non-symmetric adjacency with a self-loop.
def npz_arrays(num_nodes: int = 120):
    rng = np.random.default_rng(1)
    rows = np.arange(num_nodes)
    cols = (rows + 1) % num_nodes
    adj = sp.csr_matrix(
        (np.ones(num_nodes + 1, np.float32), (np.append(rows, 5), np.append(cols, 5))),
        shape=(num_nodes, num_nodes),
    )  # a directed ring plus the self-loop 5->5
    attr = sp.csr_matrix(rng.random((num_nodes, 6)).astype(np.float32))
    labels = (rows % 2).astype(np.int32)
    return adj, attr, labels


def write_graphgallery_npz(path: Path, adj=None, attr=None, labels=None) -> Path:
    d_adj, d_attr, d_labels = npz_arrays()
    adj = d_adj if adj is None else adj
    attr = d_attr if attr is None else attr
    labels = d_labels if labels is None else labels
    np.savez(
        path,
        adj_matrix=adj,
        node_attr=attr,
        node_label=labels,
        metadata={"class_names": np.array(["even", "odd"])},
    )
    return path


def write_shchur_npz(path: Path) -> Path:
    adj, attr, labels = npz_arrays()
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=adj.shape,
        attr_data=attr.data,
        attr_indices=attr.indices,
        attr_indptr=attr.indptr,
        attr_shape=attr.shape,
        labels=labels,
    )
    return path


# --- OGB raw layout: 20 nodes, 3 features.
OGB_N = 20


def ogb_files(num_nodes: int = OGB_N) -> dict[str, str]:
    """Relative path -> text of a tiny ogbn-arxiv in OGB's raw layout."""
    edges = [(i, (i + 1) % num_nodes) for i in range(num_nodes)] + [(3, 3), (0, 1)]
    feats = np.arange(num_nodes * 3, dtype=np.float32).reshape(num_nodes, 3) / 7
    return {
        "raw/edge.csv.gz": "".join(f"{u},{v}\n" for u, v in edges),
        "raw/num-node-list.csv.gz": f"{num_nodes}\n",
        "raw/num-edge-list.csv.gz": f"{len(edges)}\n",
        "raw/node-feat.csv.gz": "".join(",".join(f"{v:.6f}" for v in row) + "\n" for row in feats),
        "raw/node-label.csv.gz": "".join(f"{i % 40}\n" for i in range(num_nodes)),
        "split/time/train.csv.gz": "".join(f"{i}\n" for i in range(0, 10)),
        "split/time/valid.csv.gz": "".join(f"{i}\n" for i in range(10, 15)),
        "split/time/test.csv.gz": "".join(f"{i}\n" for i in range(15, 20)),
    }


def write_ogb(data_dir: Path, overrides: dict[str, str] | None = None) -> Path:
    folder = data_dir / "ogbn_arxiv"
    for rel, text in {**ogb_files(), **(overrides or {})}.items():
        write_gz(folder / rel, text)
    return folder


class _Evil:
    """Unpickling this would run a shell command."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


# ============================================================================ restricted unpickler
@pytest.mark.parametrize("protocol", range(0, 6))
def test_safe_load_roundtrips_dataset_objects(tmp_path, protocol):
    objs = {
        "csr": sp.csr_matrix(np.eye(3, dtype=np.float32)),
        "csc": sp.csc_matrix(np.eye(3)),
        "coo": sp.coo_matrix(np.eye(3)),
        "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
        "dd": collections.defaultdict(list, {0: [1, 2], 3: []}),
        "objarr": np.array([{"a": np.str_("x"), "b": np.int64(3)}, None], dtype=object),
    }
    for key, obj in objs.items():
        loaded = safe_load(io.BytesIO(pickle.dumps(obj, protocol=protocol)), f"{key}.pkl")
        assert type(loaded) is type(obj)
        if sp.issparse(obj):
            assert (loaded != obj).nnz == 0
        elif isinstance(obj, np.ndarray) and obj.dtype != object:
            np.testing.assert_array_equal(loaded, obj)
        else:
            assert repr(loaded) == repr(obj)


@pytest.mark.parametrize(
    "forbidden",
    [
        "os system",
        "builtins eval",
        "subprocess Popen",
        "numpy load",
        "builtins getattr",
        "posix system",
    ],
)
def test_safe_load_refuses_forbidden_globals(tmp_path, forbidden):
    module, name = forbidden.split()
    payload = f"c{module}\n{name}\n(S'echo pwned'\ntR.".encode()  # protocol 0: GLOBAL, then call
    with pytest.raises(DatasetError) as info:
        safe_load(io.BytesIO(payload), "evil.pkl")
    assert "evil.pkl" in str(info.value) and f"{module}.{name}" in str(info.value)


def test_forbidden_global_is_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "ind.evil.graph"
    evil.write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(
        DatasetError, match=r"ind\.evil\.graph.*forbidden global (os|posix)\.system"
    ):
        safe_load(evil)
    assert not marker.exists()

    # The same payload as an object member of an npz archive.
    member = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        member, {"descr": "|O", "fortran_order": False, "shape": ()}
    )
    member.write(pickle.dumps(_Evil(marker), protocol=3))
    archive = tmp_path / "evil.npz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("adj_matrix.npy", member.getvalue())
    with pytest.raises(DatasetError, match=r"evil\.npz.*forbidden global"):
        load_npz_safely(archive)
    assert not marker.exists()


def test_restricted_helpers_are_narrowed():
    codec = b"c_codecs\nencode\n(Vabc\nVrot13\ntR."  # _codecs.encode with a codec other than latin1
    with pytest.raises(DatasetError, match="not a readable pickle"):
        safe_load(io.BytesIO(codec), "codec.pkl")
    reconstruct = (
        b"ccopy_reg\n_reconstructor\n(ccollections\ndefaultdict\nc__builtin__\nobject\nNtR."
    )
    with pytest.raises(DatasetError, match="not a readable pickle"):
        safe_load(io.BytesIO(reconstruct), "reconstruct.pkl")


def test_load_npz_safely_plain_and_object_members(tmp_path):
    path = write_graphgallery_npz(tmp_path / "g.npz")
    arrays = load_npz_safely(path)
    assert sp.issparse(arrays["adj_matrix"]) and sp.issparse(arrays["node_attr"])
    assert arrays["node_label"].dtype == np.int32
    assert list(arrays["metadata"]["class_names"]) == ["even", "odd"]


# ============================================================================ Planetoid fixtures
@pytest.mark.parametrize("protocol", [2, 4])
def test_planetoid_fixture_matches_kipf(tmp_path, protocol):
    raw = write_planetoid(tmp_path, protocol=protocol)
    g = load_planetoid(tmp_path, "tiny")
    assert g.num_nodes == 517 and g.num_features == 4 and g.num_classes == 3 and g.name == "tiny"
    assert g.x.dtype == np.float32 and g.y.dtype == np.int64
    np.testing.assert_array_equal(g.x[:510], raw["allx"])
    for j, node in enumerate(PLANETOID_TEST_IDS):  # row j of tx/ty belongs to test.index line j
        np.testing.assert_array_equal(g.x[node], raw["tx"][j])
        assert g.y[node] == raw["ty"][j].argmax()
    for gap in (511, 515):  # test-range ids without a test.index line: zero features, unlabelled
        assert not g.x[gap].any() and g.y[gap] == -1
    assert g.y[7] == -1  # all-zero one-hot row
    np.testing.assert_array_equal(g.train_idx, np.arange(4))
    np.testing.assert_array_equal(g.val_idx, np.arange(4, 504))
    np.testing.assert_array_equal(g.test_idx, sorted(PLANETOID_TEST_IDS))
    # symmetrised, deduplicated, no self-loops
    assert edge_set(g) == {
        (0, 1),
        (1, 0),
        (0, 2),
        (2, 0),
        (510, 516),
        (516, 510),
        (3, 516),
        (516, 3),
    }


def test_planetoid_missing_file(tmp_path):
    write_planetoid(tmp_path)
    (tmp_path / "ind.tiny.graph").unlink()
    with pytest.raises(DatasetError, match=r"ind\.tiny\.graph.*missing"):
        load_planetoid(tmp_path, "tiny")


@pytest.mark.parametrize("part", ["allx", "graph", "ty"])
def test_planetoid_truncated_pickle(tmp_path, part):
    write_planetoid(tmp_path)
    truncate(tmp_path / f"ind.tiny.{part}")
    with pytest.raises(
        DatasetError, match=rf"ind\.tiny\.{part}.*(not a readable pickle|truncated)"
    ):
        load_planetoid(tmp_path, "tiny")


def test_planetoid_truncated_test_index(tmp_path):
    write_planetoid(tmp_path)
    (tmp_path / "ind.tiny.test.index").write_text("513\n510\n")
    with pytest.raises(DatasetError, match=r"ind\.tiny\.tx.*ind\.tiny\.test\.index"):
        load_planetoid(tmp_path, "tiny")


def test_planetoid_garbage_file(tmp_path):
    write_planetoid(tmp_path)
    (tmp_path / "ind.tiny.x").write_bytes(b"this is not a pickle at all")
    with pytest.raises(DatasetError, match=r"ind\.tiny\.x.*not a readable pickle"):
        load_planetoid(tmp_path, "tiny")


def test_planetoid_nonfinite_features(tmp_path):
    write_planetoid(tmp_path, tx_value=np.inf)
    with pytest.raises(DatasetError, match=r"ind\.tiny\.tx.*non-finite"):
        load_planetoid(tmp_path, "tiny")
    with pytest.warns(UserWarning, match="non-finite"):
        g = load_planetoid(tmp_path, "tiny", nonfinite="zero")
    assert np.isfinite(g.x).all() and (g.x[PLANETOID_TEST_IDS, 0] == 0).all()


# =========================================================================== gnn-benchmark fixtures
@pytest.mark.parametrize(
    "writer", [write_graphgallery_npz, write_shchur_npz], ids=["graphgallery", "shchur"]
)
def test_gnn_benchmark_fixture_layouts(tmp_path, writer):
    path = writer(tmp_path / "tiny.npz")
    g = load_gnn_benchmark(path, "tiny", seed=4)
    n = 120
    assert (
        g.num_nodes == n and g.num_features == 6 and g.num_classes == 2 and g.x.dtype == np.float32
    )
    assert g.num_edges == 2 * n and g.is_symmetric()  # ring symmetrised, self-loop 5->5 removed
    assert (5, 5) not in edge_set(g)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (40, 60, 20)
    assert np.bincount(g.y[g.train_idx]).tolist() == [20, 20]
    g2 = load_gnn_benchmark(path, "tiny", split="60-20-20", seed=4)
    assert (len(g2.train_idx), len(g2.val_idx), len(g2.test_idx)) == (72, 24, 24)
    # the split is reproducible from the seed
    np.testing.assert_array_equal(load_gnn_benchmark(path, "tiny", seed=4).train_idx, g.train_idx)


def test_gnn_benchmark_missing_file_and_key(tmp_path):
    with pytest.raises(DatasetError, match=r"nope\.npz.*missing"):
        load_gnn_benchmark(tmp_path / "nope.npz", "x")
    path = tmp_path / "nolabels.npz"
    adj, attr, _ = npz_arrays()
    np.savez(path, adj_matrix=adj, node_attr=attr)
    with pytest.raises(DatasetError, match=r"nolabels\.npz.*missing key 'node_label'"):
        load_gnn_benchmark(path, "x")


def test_gnn_benchmark_truncated(tmp_path):
    path = write_graphgallery_npz(tmp_path / "cut.npz")
    truncate(path)
    with pytest.raises(DatasetError, match=r"cut\.npz.*(truncated|not a readable)"):
        load_gnn_benchmark(path, "x")


def test_gnn_benchmark_label_count(tmp_path):
    path = write_graphgallery_npz(tmp_path / "short.npz", labels=np.zeros(119, np.int32))
    with pytest.raises(DatasetError, match=r"short\.npz.*119 labels for 120 nodes"):
        load_gnn_benchmark(path, "x")


def test_gnn_benchmark_shape_mismatch(tmp_path):
    _, attr, _ = npz_arrays()
    path = write_graphgallery_npz(tmp_path / "shape.npz", attr=attr[:100])
    with pytest.raises(DatasetError, match=r"shape\.npz.*features have shape \(100, 6\)"):
        load_gnn_benchmark(path, "x")
    path = write_graphgallery_npz(tmp_path / "nonsquare.npz", adj=sp.csr_matrix((120, 119)))
    with pytest.raises(DatasetError, match=r"nonsquare\.npz.*square"):
        load_gnn_benchmark(path, "x")


def test_gnn_benchmark_nonfinite(tmp_path):
    _, attr, _ = npz_arrays()
    attr = attr.tolil()
    attr[3, 2] = np.nan
    path = write_graphgallery_npz(tmp_path / "nan.npz", attr=attr.tocsr())
    with pytest.raises(DatasetError, match=r"nan\.npz.*1 non-finite feature value in 1 row"):
        load_gnn_benchmark(path, "x")
    with pytest.warns(UserWarning, match="non-finite"):
        g = load_gnn_benchmark(path, "x", nonfinite="zero")
    assert g.x[3, 2] == 0 and np.isfinite(g.x).all()


# ============================================================================ OGB fixtures
def test_ogb_fixture(tmp_path):
    write_ogb(tmp_path)
    g = load_ogb_nodeprop(tmp_path, "ogbn-arxiv", download=False)
    assert g.num_nodes == OGB_N and g.num_classes == 40 and g.name == "ogbn-arxiv"
    assert g.num_edges == 2 * OGB_N and g.is_symmetric()  # ring, duplicate and self-loop dropped
    np.testing.assert_allclose(g.x[2], np.array([6, 7, 8]) / 7, rtol=1e-5)
    np.testing.assert_array_equal(g.y, np.arange(OGB_N) % 40)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (10, 5, 5)
    # reachable through the dataset registry as well
    assert load_dataset("ogbn-arxiv:download=0", data_dir=tmp_path).num_nodes == OGB_N


def test_ogb_download_false_missing_folder(tmp_path):
    with pytest.raises(DatasetError) as info:
        load_ogb_nodeprop(tmp_path, "ogbn-arxiv", download=False)
    text = str(info.value)
    assert "ogbn_arxiv" in text and "download" in text
    assert str(tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz") in text


def test_ogb_download_failure_is_clear(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(ogb_module.urllib.request, "urlopen", offline)
    with pytest.raises(DatasetError) as info:
        load_ogb_nodeprop(tmp_path, "ogbn-arxiv")
    text = str(info.value)
    assert "download" in text and "failed" in text and "arxiv.zip" in text
    assert (
        ":download=0" in text
        and str(tmp_path / "ogbn_arxiv" / "split" / "time" / "test.csv.gz") in text
    )
    assert not (tmp_path / "ogbn_arxiv").exists()
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp leftovers


def test_ogb_download_extracts_atomically(tmp_path, monkeypatch):
    payload = io.BytesIO()
    with zipfile.ZipFile(payload, "w") as zf:
        for rel, text in ogb_files().items():
            zf.writestr(f"arxiv/{rel}", gzip.compress(text.encode()))
    calls = []

    def fake_urlopen(url, timeout):
        calls.append((url, timeout))
        return io.BytesIO(payload.getvalue())

    monkeypatch.setattr(ogb_module.urllib.request, "urlopen", fake_urlopen)
    g = load_ogb_nodeprop(tmp_path, "ogbn-arxiv")
    assert calls == [("http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip", 30)]
    assert g.num_nodes == OGB_N and (tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv"]


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"raw/node-feat.csv.gz": "1,2,3\n4,5\n"}, r"node-feat\.csv\.gz.*line 2 has 2 columns"),
        (
            {"raw/edge.csv.gz": "0,1\n1,20\n"},
            r"edge\.csv\.gz.*line 2: node id \[1, 20\] is out of range",
        ),
        (
            {"raw/edge.csv.gz": "0,1\n-1,2\n"},
            r"edge\.csv\.gz.*line 2: node id \[-1, 2\] is out of range",
        ),
        (
            {"split/time/test.csv.gz": "15\n99\n"},
            r"test\.csv\.gz.*line 2: node id \[99\] is out of range",
        ),
        ({"raw/node-label.csv.gz": "1\n" * 19}, r"node-label\.csv\.gz.*19 labels for 20 nodes"),
        (
            {"raw/node-label.csv.gz": "1\n" * 19 + "40\n"},
            r"node-label\.csv\.gz.*label 40\.0 .* \[0, 40\)",
        ),
        (
            {"split/time/valid.csv.gz": "9\n10\n"},
            r"valid\.csv\.gz.*overlapping splits.*train\.csv\.gz",
        ),
        (
            {"raw/edge.csv.gz": "0,1\n1,2\n"},
            r"edge\.csv\.gz.*holds 2 edges but num-edge-list.*declares 22",
        ),
        ({"raw/node-feat.csv.gz": "1,2,3\n" * 19 + "1,nan,3\n"}, r"node-feat\.csv\.gz.*non-finite"),
        (
            {"raw/node-feat.csv.gz": "1,2,3\n" * 19 + "1,x,3\n"},
            r"node-feat\.csv\.gz.*line 20: b'x'",
        ),
    ],
    ids=[
        "ragged",
        "id-out-of-range",
        "id-negative",
        "split-out-of-range",
        "label-count",
        "label-range",
        "overlap",
        "edge-count",
        "nonfinite",
        "garbage",
    ],
)
def test_ogb_bad_input(tmp_path, overrides, match):
    write_ogb(tmp_path, overrides)
    with pytest.raises(DatasetError, match=match):
        load_ogb_nodeprop(tmp_path, "ogbn-arxiv", download=False)


def test_ogb_nonfinite_zero_policy(tmp_path):
    write_ogb(tmp_path, {"raw/node-feat.csv.gz": "1,2,3\n" * 19 + "1,inf,3\n"})
    with pytest.warns(UserWarning, match="non-finite"):
        g = load_ogb_nodeprop(tmp_path, "ogbn-arxiv", download=False, nonfinite="zero")
    np.testing.assert_array_equal(g.x[19], [1, 0, 3])


def test_ogb_missing_and_truncated_files(tmp_path):
    folder = write_ogb(tmp_path)
    (folder / "split" / "time" / "valid.csv.gz").unlink()
    (folder / "raw" / "node-label.csv.gz").unlink()
    with pytest.raises(DatasetError) as info:
        load_ogb_nodeprop(tmp_path, "ogbn-arxiv", download=False)
    assert "node-label.csv.gz" in str(info.value) and "valid.csv.gz" in str(info.value)

    folder = write_ogb(tmp_path / "cut")
    truncate(folder / "raw" / "node-feat.csv.gz")
    with pytest.raises(DatasetError, match=r"node-feat\.csv\.gz.*(truncated|corrupt)"):
        load_ogb_nodeprop(tmp_path / "cut", "ogbn-arxiv", download=False)


# ============================================================================ edge-list fixtures
EDGES = [(0, 1), (1, 2), (2, 0), (3, 1), (1, 2)]  # one duplicate
UNIQUE = set(EDGES)


@pytest.mark.parametrize(
    "filename, text, kwargs",
    [
        (
            "plain.txt",
            "# SNAP-style header\n% another comment\n0 1\n1\t2\n\n  2   0\n3 1\r\n1 2\n",
            {},
        ),
        ("plain.csv", "0,1\n1,2\n2,0\n3, 1\n1,2\n", {}),
        # a header line names the columns; they are read by position all the same
        ("header.csv", "src,dst\n0,1\n1,2\n2,0\n3, 1\n1,2\n", {}),
        ("header.tsv", "u\tv\n1\t2\n2\t3\n3\t1\n4\t2\n2\t3\n", {"base": "auto"}),
        # ... after comment and blank lines too (an export's provenance lines)
        ("late.csv", "# exported 2026-12-03\n\n%\nsrc_id,dst_id\n0,1\n1,2\n2,0\n3,1\n1,2\n", {}),
        ("one.txt", "1 2\n2 3\n3 1\n4 2\n2 3\n", {"base": 1}),
        ("auto.txt", "1 2\n2 3\n3 1\n4 2\n2 3\n", {"base": "auto"}),
        ("auto0.txt", "0 1\n1 2\n2 0\n3 1\n1 2\n", {"base": "auto"}),
    ],
)
def test_edge_list_text_formats(tmp_path, filename, text, kwargs):
    path = tmp_path / filename
    path.write_text(text)
    g = load_edge_list(path, **kwargs)
    assert g.num_nodes == 4 and edge_set(g) == UNIQUE and g.name == Path(filename).stem
    assert g.x is None and g.y is None and g.edge_weight is None
    gz = write_gz(tmp_path / f"{filename}.gz", text)
    assert edge_set(load_edge_list(gz, **kwargs)) == UNIQUE
    assert load_edge_list(gz, **kwargs).name == Path(filename).stem
    sym = load_edge_list(path, symmetric=True, **kwargs)
    assert sym.is_symmetric() and edge_set(sym) == UNIQUE | {(v, u) for u, v in UNIQUE}


def test_edge_list_weights_and_extra_columns(tmp_path):
    path = tmp_path / "w.tsv"
    path.write_text("0 1 0.5 99\n1 2 2.0 98\n0 1 7.0 97\n")
    g = load_edge_list(path)
    src, dst = g.edge_index()
    weights = dict(zip(zip(src.tolist(), dst.tolist()), g.edge_weight.tolist()))
    assert weights == {(0, 1): 0.5, (1, 2): 2.0}  # 4th column ignored, first duplicate kept


def test_edge_list_jlg(tmp_path):
    directed = write_gz(tmp_path / "d.jlg", "4,5,d,graph\n1,1\n1,2\n2,3\n3,1\n4,2\n")
    g = load_edge_list(directed, base=0)  # base is ignored: .jlg is always 1-based
    assert g.num_nodes == 4 and edge_set(g) == {(0, 0), (0, 1), (1, 2), (2, 0), (3, 1)}
    # header-detected (no .jlg suffix), 'u' symmetrises, header n allows isolated nodes
    undirected = write_gz(tmp_path / "u.txt.gz", "6,3,u,graph\n1,2\n2,3\n3,3\n")
    g = load_edge_list(undirected)
    assert (
        g.num_nodes == 6
        and g.is_symmetric()
        and edge_set(g) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 2)}
    )
    assert load_dataset(f"file:{undirected}", data_dir=tmp_path).num_edges == 5


@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
@pytest.mark.parametrize("field", ["real", "integer", "pattern"])
def test_matrix_market_equals_scipys_reading(tmp_path, field, symmetry):
    """A MatrixMarket file as scipy writes it (the reference reader: ``scipy.io.mmread``): the
    same edges, weights and node count, isolated nodes included; gzip too."""
    import scipy.io

    rng = np.random.default_rng(3)
    n = 40
    dense = np.where(rng.random((n, n)) < 0.08, rng.integers(1, 9, (n, n)), 0).astype(float)
    dense[-3:, :] = dense[:, -3:] = 0  # nodes 37..39 isolated
    if symmetry == "symmetric":
        dense = np.triu(dense) + np.triu(dense, 1).T
    if field == "real":
        dense = dense / 4.0
    path = tmp_path / "m.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix(dense), field=field, symmetry=symmetry)
    assert path.read_text().startswith(f"%%MatrixMarket matrix coordinate {field} {symmetry}")
    reference = sp.csr_matrix(scipy.io.mmread(path))
    for source in (path, write_gz(tmp_path / "m.mtx.gz", path.read_text())):
        graph = load_edge_list(source, base=0)  # ids are 1-based, whatever base says
        src, dst = graph.edge_index()
        assert graph.num_nodes == n and graph.num_edges == reference.nnz
        assert edge_set(graph) == set(zip(*reference.nonzero()))
        if field == "pattern":
            assert graph.edge_weight is None
        else:
            np.testing.assert_array_equal(graph.edge_weight, reference[src, dst].A1)
        assert graph.is_symmetric() == (symmetry == "symmetric") or graph.is_symmetric()


@pytest.mark.parametrize(
    "content, match",
    [
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "in array format"),
        ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", "field complex"),
        (
            "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1\n2 1 1\n",
            "symmetry skew-symmetric: its stored triangle stands for the other one with another "
            "sign",
        ),
        ("%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 2\n", "2 x 3 matrix"),
        (
            "%%MatrixMarket matrix coordinate pattern general\n%c\n3 3 4\n1 2\n2 3\n",
            "the size line declares 4 entries but the file holds 2",
        ),
        (
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2\n2 3\n",
            r"line 3 has 2 columns; an entry of this matrix has 3: `i j value`",
        ),
        (
            "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 5\n",
            r"line 3 has 3 columns; an entry of this matrix has 2: `i j`",
        ),
        (
            "%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 4\n",
            r"line 4: node id 4 is out of range \[1, 3\]",
        ),
        ("%%MatrixMarket matrix\n3 3 1\n1 2\n", "banner does not name the object"),
        ("%%MatrixMarket matrix coordinate pattern general\n% c\n", "ends before its"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 x 1\n", r"line 2: .* size line"),
        ("1 2\n2 3\n", "missing the MatrixMarket banner"),
    ],
)
def test_matrix_market_bad_input(tmp_path, content, match):
    """Before: a MatrixMarket file was read as a headerless edge list: its size line met the
    first entry as `ragged rows: line 4 has 2 columns but line 3 has 3`."""
    path = tmp_path / "bad.mtx"
    path.write_text(content)
    with pytest.raises(DatasetError, match=r"bad\.mtx: (.* )?" + match):
        load_edge_list(path)


@pytest.mark.parametrize(
    "data, header",
    [
        (b"src,dst\n0,1\n", (b"src,dst", 1, 8)),
        (b"# c\r\n\r\n  % d\nu v w\r\n0 1 2\n", (b"u v w\r", 4, 20)),
        (b"src dst", (b"src dst", 1, 8)),  # no newline: the offset is past the end
        (b"0,1\nsrc,dst\n", None),  # only the first line that is not a comment may be one
        (b"# c\n-1 2\n", None),
        (b" .5 nan\n", None),
        (b"# only comments\n\n", None),
        (b"", None),
    ],
)
def test_header_line_is_the_first_line_that_is_not_a_comment_naming_columns(data, header):
    assert header_line(data) == header


@pytest.mark.parametrize(
    "filename, content, kwargs, match",
    [
        ("ragged.txt", "0 1\n1 2 3\n", {}, r"ragged\.txt.*line 2 has 3 columns but line 1 has 2"),
        ("odd.txt", "0 1 2 3 4\n", {}, None),  # 5 columns is fine (weights + ignored)
        ("single.txt", "# c\n0\n1\n", {}, r"single\.txt.*line 2 has 1 column"),
        ("neg.txt", "0 1\n2 -3\n", {}, r"neg\.txt.*line 2: negative node id"),
        ("zero.txt", "1 2\n0 1\n", {"base": 1}, r"zero\.txt.*line 2: node id 0 in a 1-based file"),
        ("frac.txt", "0 1\n1.5 2\n", {}, r"frac\.txt.*line 2: node ids must be integers"),
        (
            "word.txt",
            "0 1\n\n# ok\n1 two\n",
            {},
            r"word\.txt: line 4: 'two' is not a node id.*\n  fix: .*shardgnn convert --edges",
        ),
        ("empty.txt", "", {}, r"empty\.txt.*no edges"),
        ("head.csv", "src,dst\n", {}, r"head\.csv.*no edges.*only a header"),
        (
            "rev.csv",
            "dst,src\n0,1\n",
            {},
            r"rev\.csv: its header line \(line 1\) names column 1 'dst', a destination, .* read "
            r"by position, as u v \[weight\]: its destinations would be taken for sources",
        ),
        ("rev2.tsv", "node source\n0 1\n", {}, r"rev2\.tsv.*column 2 'source', a source"),
        (
            "time.csv",
            "# c\nsrc,dst,Timestamp,weight\n0,1,5,1\n",
            {},
            r"time\.csv: its header line \(line 2\) names column 3 'Timestamp', a time.*times "
            r"would be taken for weights\n  fix: .*timestamped edges load as temporal:FILE",
        ),
        ("kg.csv", "head,relation,tail\n0,1,2\n", {}, r"kg\.csv.*column 3 'tail', a destination"),
        ("headbad.csv", "src,dst\n0,1\nx,2\n", {}, r"headbad\.csv: line 3: 'x' is not a node id"),
        (
            "latebad.csv",
            "# c\n\nsrc,dst\n0,1\nx,2\n",
            {},
            r"latebad\.csv: line 5: 'x' is not a node id",
        ),
        ("late.csv", "# c\nsrc,dst\n", {}, r"late\.csv.*no edges.*only a header"),
        # only the first line that is not a comment may be a header
        ("two.csv", "src,dst\nfrom,to\n0,1\n", {}, r"two\.csv: line 2: 'from' is not a node id"),
        (
            "headrag.csv",
            "src,dst\n0,1\n1,2,3\n",
            {},
            r"headrag\.csv.*line 3 has 3 columns but line 2",
        ),
        ("comments.txt", "# only\n%comments\n\n", {}, r"comments\.txt.*no edges"),
        (
            "range.jlg",
            "3,2,d,graph\n1,2\n2,4\n",
            {},
            r"range\.jlg.*line 3: node id 4 is out of range \[1, 3\]",
        ),
        (
            "short.jlg",
            "3,3,d,graph\n1,2\n2,3\n",
            {},
            r"short\.jlg.*declares 3 edges but the file holds 2",
        ),
        (
            "zero.jlg",
            "3,2,d,graph\n0,1\n1,2\n",
            {},
            r"zero\.jlg.*line 2: node id 0 in a 1-based file",
        ),
        ("nohead.jlg", "1,2\n2,3\n", {}, r"nohead\.jlg.*header"),
        # SNAP's temporal files without their header: times are not weights
        (
            "times.txt",
            "# c\n1 2 1082040961\n3 4 1098777142\n",
            {},
            r"times\.txt: column 3 \(line 2: 1082040961\) holds integers from 1,082,040,961 to "
            r"1,098,777,142 \(as Unix times, 2004-04-15 to 2004-10-26\): timestamps.*\n  fix: "
            r"load timestamped edges as temporal:FILE",
        ),
        ("ms.txt", "1 2 1082040961000\n", {}, r"ms\.txt.*to 1,082,040,961,000: timestamps"),
        ("named.txt", "u v weight\n1 2 1082040961\n", {}, None),  # a header says weights
        ("some.txt", "1 2 1082040961\n2 3 7\n", {}, None),  # not all past 10^8
        ("frac.csv", "1,2,100000000.5\n", {}, None),  # not integers
        # a word in the weight column is no node name: the plain refusal
        (
            "wword.txt",
            "0 1 2\n1 2 high\n",
            {},
            r"wword\.txt: not a valid float64 number at line 2: b'high'",
        ),
        ("num.txt", "0 1\n1 2.x\n", {}, r"num\.txt: not a valid float64 number at line 2: b'2.x'"),
    ],
)
def test_edge_list_bad_input(tmp_path, filename, content, kwargs, match):
    path = tmp_path / filename
    if filename.endswith(".jlg"):
        write_gz(path, content)
    else:
        path.write_text(content)
    if match is None:
        assert load_edge_list(path, **kwargs).num_edges == content.count("\n") - (
            "weight" in content
        )
        return
    with pytest.raises(DatasetError, match=match):
        load_edge_list(path, **kwargs)


def test_an_npy_of_edges_loads_as_shardgnn_convert_reads_it(tmp_path):
    """Before: `file:edges.npy` was parsed as text, and its bytes reported as a bad number."""
    from shardgnn.graph.convert import ConvertConfig, convert
    from shardgnn.graph.io import load_graph

    pairs = np.array([[1, 2], [2, 3], [3, 1], [3, 5]])
    np.save(tmp_path / "e.npy", pairs)
    graph = load_edge_list(tmp_path / "e.npy", base="auto")
    assert graph.num_nodes == 5 and edge_set(graph) == {(0, 1), (1, 2), (2, 0), (2, 4)}
    assert edge_set(load_dataset(f"file:{tmp_path / 'e.npy'},base=auto,symmetric=1")) == edge_set(
        graph
    ) | {
        (1, 0),
        (2, 1),
        (0, 2),
        (4, 2),
    }
    convert(ConvertConfig(edges=str(tmp_path / "e.npy"), base="auto", out=str(tmp_path / "g")))
    assert edge_set(load_graph(tmp_path / "g")) == edge_set(graph)
    with pytest.raises(DatasetError, match=r"e\.npy: row 0: node id 1 is below the first id, 2"):
        edgelist_module.load_edge_array(tmp_path / "e.npy", base=2)


def _npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "write, kind",
    [
        (
            lambda p: __import__("pandas").DataFrame({"src": [0], "dst": [1]}).to_parquet(p),
            "a Parquet table",
        ),
        (lambda p: p.write_bytes(_npz_bytes(edges=np.zeros((2, 2)))), "a zip archive"),
        (lambda p: p.write_bytes(pickle.dumps([(0, 1)])), "a Python pickle"),
    ],
)
def test_a_binary_file_is_named_as_such_not_as_a_bad_number(tmp_path, write, kind):
    """Before: `not a valid float64 number at line 2: b'$\\x02\\x00...'` (its bytes as text)."""
    from shardgnn.graph.temporal import load_temporal_events

    path = tmp_path / "data.bin"
    write(path)
    with pytest.raises(
        DatasetError,
        match=rf"data\.bin: is {kind}.*, not text rows\n  fix: an "
        "edge list is a text file .*shardgnn convert --edges FILE",
    ):
        load_edge_list(path)
    with pytest.raises(DatasetError, match=rf"is {kind}.*\n  fix: events are a text file"):
        load_temporal_events(path)
    with pytest.raises(DatasetError, match=rf"is {kind}.*\n  fix: give a text file"):
        parse_numeric_table(edgelist_module.read_text_bytes(path), path)


def test_edge_list_missing_and_truncated_gzip(tmp_path):
    with pytest.raises(DatasetError, match=r"absent\.txt.*missing"):
        load_edge_list(tmp_path / "absent.txt")
    body = "".join(f"{i + 1},{i + 2}\n" for i in range(5000))
    path = write_gz(tmp_path / "cut.jlg", f"5001,5000,d,graph\n{body}")
    truncate(path)
    with pytest.raises(DatasetError, match=r"cut\.jlg.*gzip data is truncated"):
        load_edge_list(path)
    with pytest.raises(DatasetError, match="base must be"):
        load_edge_list(tmp_path / "absent.txt", base=2)


def test_parse_numeric_table_chunk_boundaries(monkeypatch):
    rng = np.random.default_rng(3)
    table = rng.integers(0, 10**6, size=(500, 3))
    lines = [" ".join(map(str, row)) for row in table]
    lines[100:100] = ["# a comment", ""]
    text = "\n".join(lines).encode()
    expected_lines = np.array([i + 1 if i < 100 else i + 3 for i in range(500)])
    for chunk in (7, 64, 1000, 1 << 20):
        monkeypatch.setattr(edgelist_module, "CHUNK_BYTES", chunk)
        values, line_numbers = parse_numeric_table(text, "t.txt", np.int64)
        np.testing.assert_array_equal(values, table)
        np.testing.assert_array_equal(line_numbers, expected_lines)
    monkeypatch.setattr(edgelist_module, "CHUNK_BYTES", 64)
    ragged = text + b"\n1 2\n"
    with pytest.raises(DatasetError, match="line 503 has 2 columns but line 1 has 3"):
        parse_numeric_table(ragged, "t.txt", np.int64)


# ============================================================================ registry
def test_unknown_dataset_lists_known_names(tmp_path):
    with pytest.raises(DatasetError) as info:
        load_dataset("not-a-dataset", data_dir=tmp_path)
    text = str(info.value)
    assert "not-a-dataset" in text
    for name in ("cora", "coauthor-cs", "ogbn-arxiv", "soc-slashdot", "file"):
        assert name in text


def test_registry_reaches_fixture_loaders(tmp_path):
    write_planetoid(tmp_path / "cora", name="cora")
    assert load_dataset("cora", data_dir=tmp_path).num_nodes == 517
    (tmp_path / "coauthor_cs").mkdir()
    write_graphgallery_npz(tmp_path / "coauthor_cs" / "coauthor_cs.npz")
    g = load_dataset("coauthor-cs:split=60-20-20,seed=1", data_dir=tmp_path)
    assert g.name == "coauthor-cs" and len(g.train_idx) == 72


# ============================================================================ real data
@needs_data
@pytest.mark.parametrize(
    "name, nodes, edges, features, classes, split, unlabelled",
    [
        ("cora", 2708, 10556, 1433, 7, (140, 500, 1000), 0),
        ("citeseer", 3327, 9104, 3703, 6, (120, 500, 1000), 15),
    ],
)
def test_real_planetoid(name, nodes, edges, features, classes, split, unlabelled):
    g = load_dataset(name, data_dir=SHARED_DATA)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (
        nodes,
        edges,
        features,
        classes,
    )
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == split
    assert int((g.y == -1).sum()) == unlabelled
    assert g.is_symmetric() and not (g.edge_index()[0] == g.edge_index()[1]).any()
    if name == "cora":
        assert np.bincount(g.y).tolist() == [351, 217, 418, 818, 426, 298, 180]
        assert int(np.count_nonzero(g.x)) == 49216


@needs_data
def test_real_pubmed_reports_missing_allx():
    with pytest.raises(DatasetError) as info:
        load_dataset("pubmed", data_dir=SHARED_DATA)
    text = str(info.value)
    assert "ind.pubmed.allx" in text and "known to be missing" in text


@needs_data
@pytest.mark.parametrize(
    "name, nodes, undirected_edges, features, classes",
    [
        ("amazon-computers", 13752, 245861, 767, 10),
        ("amazon-photo", 7650, 119081, 745, 8),
        ("coauthor-cs", 18333, 81894, 6805, 15),
        ("coauthor-physics", 34493, 247962, 8415, 5),
    ],
)
def test_real_gnn_benchmark(name, nodes, undirected_edges, features, classes):
    g = load_dataset(name, data_dir=SHARED_DATA)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (
        nodes,
        2 * undirected_edges,
        features,
        classes,
    )
    assert (len(g.train_idx), len(g.val_idx)) == (20 * classes, 30 * classes)
    assert len(g.test_idx) == nodes - 50 * classes
    assert g.is_symmetric() and g.x.dtype == np.float32


@needs_data
def test_real_snap_edge_lists():
    start = time.perf_counter()
    g = load_dataset("soc-slashdot", data_dir=SHARED_DATA)
    elapsed = time.perf_counter() - start
    src, dst = g.edge_index()
    # SNAP's 948,464 directed edges include 78,303 self-loops; the file has no duplicates.
    assert (g.num_nodes, g.num_edges, int((src == dst).sum())) == (82168, 948464, 78303)
    assert elapsed < 5.0, f"soc-slashdot took {elapsed:.2f}s (target < 3 s)"

    g = load_dataset("ego-twitter", data_dir=SHARED_DATA)
    src, dst = g.edge_index()
    # 1,342,310 undirected edges (u <= v) of which 14 are self-loops: each non-loop edge becomes two
    # directed edges, each self-loop stays one, so 2 * 1,342,310 - 14.
    assert (g.num_nodes, g.num_edges, int((src == dst).sum())) == (81306, 2 * 1342310 - 14, 14)
    assert g.is_symmetric()
