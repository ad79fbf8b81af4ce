"""Shared fixtures. Real datasets are read in place from ``$SHARDGNN_TEST_DATA`` when set, else from
``../shared/data`` beside the repository; tests that need them skip cleanly when the folder is
absent."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import numpy as np
import pytest

from shardgnn.graph.synthetic import SyntheticConfig, generate


def shared_data_dir() -> Path:
    """``$SHARDGNN_TEST_DATA`` when set, else ``shared/data`` beside the repository."""
    override = os.environ.get("SHARDGNN_TEST_DATA")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "shared" / "data"


SHARED_DATA = shared_data_dir()
requires_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} is absent"
)


def setting_paths(cls, prefix=""):
    """The dotted path of every command-line setting of config class ``cls`` (nested
    components included)."""
    import dataclasses

    for field in dataclasses.fields(cls):
        if field.metadata.get("component"):
            yield from setting_paths(field.default_factory(), prefix + field.name + ".")
        elif field.metadata.get("cli", True):
            yield prefix + field.name


def final_weights(checkpoint_dir) -> dict:
    """Rank 0's model weights in the newest complete checkpoint of ``checkpoint_dir``."""
    import torch

    from shardgnn.train.checkpoint import Checkpointer

    last = Checkpointer(checkpoint_dir).complete()[-1]
    return torch.load(Path(last) / "rank-0.pt", weights_only=True)["model"]


def assert_same_weights(a: dict, b: dict) -> None:
    """Bit for bit: the same tensors under the same names."""
    import torch

    assert a.keys() == b.keys()
    for key in a:
        # what differs and by how much: a rounding-order difference or a different run
        assert torch.equal(a[key], b[key]), (
            key,
            [k for k in a if not torch.equal(a[k], b[k])],
            float((a[key].double() - b[key].double()).abs().max())
            if a[key].shape == b[key].shape
            else None,
        )


def signal_self_at_step(optimizer, step_number: int, signum: int) -> None:
    """Send ``signum`` to this process during optimiser step ``step_number`` (1-based), as a
    scheduler would at an arbitrary moment."""
    step, calls = optimizer.step, [0]

    def step_and_signal(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step_number:
            os.kill(os.getpid(), signum)
        return step(*args, **kwargs)

    optimizer.step = step_and_signal


_SHARED_GRAPHS: list[tuple[str, object, dict[str, np.ndarray]]] = []
"""The session's shared graphs: (fixture, graph, a copy of each of its arrays as made)"""


def shared_graph(name: str, graph):
    """``graph``, shared by every test of the session: each test's end checks that its arrays
    are as made (a test that wrote into them would change what the tests after it see, by the
    order they run in: a failure that comes and goes with the workers' scheduling)."""
    import dataclasses

    made = {
        f.name: getattr(graph, f.name).copy()
        for f in dataclasses.fields(graph)
        if isinstance(getattr(graph, f.name), np.ndarray)
    }
    _SHARED_GRAPHS.append((name, graph, made))
    return graph


@pytest.fixture(autouse=True)
def _shared_graphs_stay_as_made():
    """Fail the test that wrote into a shared graph (numpy or an in-place torch op on a view),
    naming the arrays, and put them back so that the tests after it see the graph as made."""
    yield
    for name, graph, made in _SHARED_GRAPHS:
        changed = [k for k, a in made.items() if not np.array_equal(getattr(graph, k), a)]
        for k in changed:
            np.copyto(getattr(graph, k), made[k])
        if changed:
            pytest.fail(f"the test wrote into the shared {name}'s {', '.join(changed)}: copy first")


def fixed_port() -> int:
    """A TCP port, free now, for a process started later to bind (a torchrun rendezvous endpoint,
    a SLURM job's): below the kernel's ephemeral range, from which every ``bind`` to port 0
    (``free_port``) and every outgoing connection of the tests running beside it under
    pytest-xdist draw theirs, so that none of them takes it in the meantime (a SLURM job's
    rendezvous store once found its port taken, and its agents timed out connecting)."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    draw = random.Random()  # not seeded: two pytest workers must not draw alike
    for _ in range(100):
        port = draw.randrange(max(1024, low - 16384), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))  # every address, as a rendezvous store binds
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free TCP port below {low} (the ephemeral range's start)")


@pytest.fixture(scope="session")
def checkpoint_graph():
    """A 1,500-node synthetic graph with 150 training nodes, for checkpoint and fault tests."""
    graph = generate(SyntheticConfig(nodes=1500, degree=8, classes=4, features=16, seed=2))
    return shared_graph("checkpoint_graph", graph)


@pytest.fixture(scope="session")
def small_graph():
    """A 3,000-node synthetic graph (power-law degrees, 4 classes)."""
    graph = generate(SyntheticConfig(nodes=3000, degree=12, classes=4, features=16, seed=7))
    return shared_graph("small_graph", graph)


@pytest.fixture(scope="session")
def arange_graph(small_graph):
    """The small graph with ``x[i] = i`` in every column, so a fetched row names its node."""
    import dataclasses

    x = np.repeat(np.arange(small_graph.num_nodes, dtype=np.float32)[:, None], 3, axis=1)
    return shared_graph("arange_graph", dataclasses.replace(small_graph, x=x))


def pytest_collection_modifyitems(config, items):
    """Every multi-process test is slow too, so `-m "not slow"` (the fast tier) starts no job."""
    unmarked = [
        item.nodeid
        for item in items
        if item.get_closest_marker("multiprocess") and not item.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(
            f"multiprocess tests must also be marked slow: {', '.join(unmarked)}"
        )
    # The `gpu` tier runs where CUDA is (benchmarks/gpu_check.sh); elsewhere it is skipped.
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (the gpu tier: benchmarks/gpu_check.sh)")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


def pytest_runtest_logreport(report):
    """With ``SHARDGNN_STREAM_FAILURES`` set (benchmarks/gpu_check.sh), a failed test's traceback
    is printed the moment it fails: a tier cut off by its time limit (the GPU machine's minutes
    are few) still says why each failure failed, not only that it did."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # under xdist the controller prints it
    if report.failed and os.environ.get("SHARDGNN_STREAM_FAILURES") and not worker:
        import sys

        sys.stderr.write(f"\n=== FAILED {report.nodeid} ({report.when})\n")
        sys.stderr.write(report.longreprtext[-4000:] + "\n")
        sys.stderr.flush()


def random_known_answers(rng, entities: int, relations: int, queries: int, most: int):
    """Random known triples for a knowledge-graph file's filtered lookup: ``queries`` (entity,
    relation) pairs drawn, each with 1 to ``most - 1`` distinct answers. Returns the
    ``[entities, relations, entities]`` bool mask and the file's ``known`` pair (keys
    ``relation * entities + entity`` sorted, and their answers)."""
    import torch

    known = torch.zeros(entities, relations, entities, dtype=torch.bool)
    for e, r in rng.integers([0, 0], [entities, relations], size=(queries, 2)).tolist():
        known[e, r, rng.choice(entities, size=int(rng.integers(1, most)), replace=False)] = True
    e, r, a = (t.numpy() for t in torch.nonzero(known, as_tuple=True))
    keys = r * entities + e
    order = np.argsort(keys, kind="stable")
    return known, (keys[order], a[order])


def write_cluster_triples(folder, entities: int = 60, relations: int = 4, clusters: int = 6):
    """A knowledge graph's triples folder (``train``/``valid``/``test``, split 80/10/10) whose
    relations join clusters: entity ``e`` is in cluster ``e % clusters``, relation ``r`` leads
    from cluster ``c`` to two random members of cluster ``c + r + 1``. Returns its ``kg:`` spec."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = set()
    for e in range(entities):
        for r in range(relations):
            for tail in rng.integers(entities // clusters, size=2) * clusters:
                rows.add((f"e{e}", f"r{r}", f"e{tail + (e + r + 1) % clusters}"))
    rows = sorted(rows)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    cut = len(rows) // 10
    folder.mkdir(parents=True)
    for name, part in (
        ("train", rows[2 * cut :]),
        ("valid", rows[:cut]),
        ("test", rows[cut : 2 * cut]),
    ):
        (folder / f"{name}.txt").write_text("".join("\t".join(r) + "\n" for r in part))
    return f"kg:{folder}"
