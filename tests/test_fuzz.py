"""Property-based fuzzing (hypothesis) of every loader and of the partition reader: truncated and
malformed files, wrong dtypes and shapes, out-of-range ids, NaN. The property is always the same:
the call returns a valid result or raises a :class:`ShardgnnError` (a clear, user-facing error);
any other exception, a crash deep inside, fails the test. Example counts are bounded so the
whole module runs in well under a minute.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardgnn.errors import ShardgnnError
from shardgnn.graph.datasets import load_dataset
from shardgnn.graph.gnnbenchmark import load_gnn_benchmark
from shardgnn.graph.io import load_graph, save_graph
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.partition.format import read_partitions, write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph

from conftest import SHARED_DATA

FUZZ = settings(
    max_examples=int(os.environ.get("SHARDGNN_FUZZ_EXAMPLES", 30)),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _accepts_or_refuses(fn, *args, **kwargs):
    """Run a loader: a result must be valid; an error must be a ShardgnnError."""
    try:
        result = fn(*args, **kwargs)
    except ShardgnnError:
        return None
    if hasattr(result, "validate"):
        result.validate()
    return result


@pytest.fixture(scope="module")
def tiny():
    return generate(SyntheticConfig(nodes=60, degree=4, classes=3, features=5, seed=1))


# ---------------------------------------------------------------------------- byte-level mutations
@st.composite
def mutations(draw):
    """A way to damage a file: truncate it, overwrite bytes, or append junk."""
    kind = draw(st.sampled_from(["truncate", "overwrite", "append", "empty"]))
    return kind, draw(st.floats(0.0, 1.0)), draw(st.binary(min_size=1, max_size=24))


def _damage(path: Path, mutation) -> None:
    kind, where, junk = mutation
    data = path.read_bytes()
    at = int(where * len(data))
    if kind == "truncate":
        data = data[:at]
    elif kind == "overwrite":
        data = data[:at] + junk + data[at + len(junk) :]
    elif kind == "append":
        data = data + junk
    else:
        data = b""
    path.write_bytes(data)


# ---------------------------------------------------------------------------- edge lists
_token = st.one_of(
    st.integers(-5, 70).map(str),
    st.sampled_from(["1.5", "nan", "1e3", "x", "", "#", "%", "-"]),
    st.text(alphabet="0123456789abc.,-", max_size=4),
)


@FUZZ
@given(
    lines=st.lists(st.lists(_token, min_size=0, max_size=4), max_size=30),
    sep=st.sampled_from([" ", "\t", ",", "  "]),
    base=st.sampled_from(["0", "1", "auto"]),
)
def test_fuzz_edge_list_text(tmp_path, lines, sep, base):
    path = tmp_path / "edges.txt"
    path.write_text("\n".join(sep.join(tokens) for tokens in lines))
    graph = _accepts_or_refuses(load_dataset, f"file:{path},base={base}")
    if graph is not None:
        assert graph.num_nodes >= 1 and graph.indices.min(initial=0) >= 0


@FUZZ
@given(data=st.binary(max_size=300), gz=st.booleans())
def test_fuzz_edge_list_bytes(tmp_path, data, gz):
    import gzip

    path = tmp_path / ("edges.txt.gz" if gz else "edges.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    _accepts_or_refuses(load_dataset, f"file:{path}")


# ---------------------------------------------------------------------------- gnn-benchmark .npz
@st.composite
def npz_members(draw):
    n = draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    members = {
        "adj_data": np.ones(
            draw(st.integers(0, 8)), dtype=draw(st.sampled_from(["float32", "int64", "bool"]))
        ),
        "adj_indices": rng.integers(-2, n + 3, size=draw(st.integers(0, 8))),
        "adj_indptr": np.sort(rng.integers(0, 9, size=draw(st.integers(0, n + 2)))),
        "adj_shape": np.array(draw(st.sampled_from([[n, n], [n, n + 1], [n], [-1, n]]))),
        "attr_matrix": rng.normal(
            size=draw(st.sampled_from([(n, 3), (n + 1, 3), (n,), (n, 0)]))
        ).astype(draw(st.sampled_from(["float32", "float64", "int8"]))),
        "labels": rng.integers(-1, 4, size=draw(st.sampled_from([n, n + 1, 0]))),
    }
    if (
        draw(st.booleans())
        and members["attr_matrix"].size
        and members["attr_matrix"].dtype.kind == "f"
    ):
        members["attr_matrix"].flat[0] = np.nan
    drop = draw(st.sets(st.sampled_from(sorted(members)), max_size=2))
    return {k: v for k, v in members.items() if k not in drop}


@FUZZ
@given(members=npz_members())
def test_fuzz_gnn_benchmark_npz(tmp_path, members):
    path = tmp_path / "g.npz"
    np.savez(path, **members)
    _accepts_or_refuses(load_gnn_benchmark, path, "fuzz")


@FUZZ
@given(mutation=mutations())
def test_fuzz_damaged_npz_file(tmp_path, tiny, mutation):
    path = tmp_path / "g.npz"
    adj = tiny.indptr, tiny.indices
    np.savez(
        path,
        adj_data=np.ones(len(adj[1]), np.float32),
        adj_indices=adj[1],
        adj_indptr=adj[0],
        adj_shape=np.array([tiny.num_nodes, tiny.num_nodes]),
        attr_matrix=tiny.x,
        labels=tiny.y,
    )
    _damage(path, mutation)
    _accepts_or_refuses(load_gnn_benchmark, path, "fuzz")


def test_npz_with_pickled_object_member_is_refused(tmp_path):
    path = tmp_path / "g.npz"
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("adj_matrix.npy", buffer.getvalue())
    with pytest.raises(ShardgnnError):
        load_gnn_benchmark(path, "fuzz")


# ---------------------------------------------------------------------------- Planetoid raw files
@FUZZ
@given(
    part=st.sampled_from(["x", "y", "tx", "ty", "allx", "ally", "graph", "test.index"]),
    mutation=mutations(),
)
def test_fuzz_planetoid_files(tmp_path, part, mutation):
    source = SHARED_DATA / "cora"
    if not source.is_dir():
        pytest.skip(f"{source} is absent")
    folder = tmp_path / "cora"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, folder)
    _damage(folder / f"ind.cora.{part}", mutation)
    _accepts_or_refuses(load_dataset, "cora", tmp_path)


# ---------------------------------------------------------------------------- graph directories
@FUZZ
@given(
    target=st.sampled_from(
        ["meta.json", "indptr.npy", "indices.npy", "x.npy", "y.npy", "train_idx.npy"]
    ),
    mutation=mutations(),
)
def test_fuzz_graph_directory_files(tmp_path, tiny, target, mutation):
    path = tmp_path / "g"
    save_graph(tiny, path, overwrite=True)
    _damage(path / target, mutation)
    _accepts_or_refuses(load_graph, path)


_json_value = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 10**12),
        st.floats(allow_nan=True),
        st.text(max_size=6),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _set_path(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def _json_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(obj, list) and obj:
        yield from _json_paths(obj[0], prefix + (0,))


@FUZZ
@given(choice=st.integers(0, 10**6), value=_json_value)
def test_fuzz_graph_meta_json_values(tmp_path, tiny, choice, value):
    path = tmp_path / "g"
    save_graph(tiny, path, overwrite=True)
    meta = json.loads((path / "meta.json").read_text())
    paths = [p for p in _json_paths(meta) if p]
    _set_path(meta, paths[choice % len(paths)], value)
    (path / "meta.json").write_text(json.dumps(meta))
    _accepts_or_refuses(load_graph, path)


# ---------------------------------------------------------------------------- partition directories
@pytest.fixture(scope="module")
def partition_source(tmp_path_factory, tiny):
    path = tmp_path_factory.mktemp("fuzzparts") / "parts"
    result = partition_graph(tiny, PartitionConfig(num_parts=2, method="random", seed=0))
    write_partitions(tiny, result.assignment, path, method=result.method, settings=result.settings)
    return path


def _read_everything(path: Path, verify: bool):
    pset = read_partitions(path, verify=verify)
    for p in range(pset.num_parts):
        part = pset.load_part(p, mmap=False, verify=verify)
        assert part.indices.shape[0] == part.indptr[-1]
    return pset


@FUZZ
@given(data=st.data(), mutation=mutations(), verify=st.booleans())
def test_fuzz_partition_files(tmp_path, partition_source, data, mutation, verify):
    path = tmp_path / "parts"
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(partition_source, path)
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    target = data.draw(st.sampled_from(files))
    before = (path / target).read_bytes()
    _damage(path / target, mutation)
    changed = (path / target).read_bytes() != before
    try:
        _read_everything(path, verify)
    except ShardgnnError:
        return
    # Accepted: only possible when the damage left the bytes (or, unverified, the size) intact.
    assert not changed or not verify or target == "meta.json", target


@FUZZ
@given(choice=st.integers(0, 10**6), value=_json_value)
def test_fuzz_partition_meta_json_values(tmp_path, partition_source, choice, value):
    path = tmp_path / "parts"
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(partition_source, path)
    meta = json.loads((path / "meta.json").read_text())
    paths = [p for p in _json_paths(meta) if p]
    _set_path(meta, paths[choice % len(paths)], value)
    (path / "meta.json").write_text(json.dumps(meta))
    try:
        _read_everything(path, verify=True)
    except ShardgnnError:
        pass
