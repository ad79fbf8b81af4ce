"""Partitioners: node -> part assignments by hashing, METIS, streaming (LDG/Fennel) or a user file.

Every partitioner returns an int32 ``assignment`` array of length ``N`` with values in
``[0, P)``. :func:`partition_graph` dispatches on a :class:`PartitionConfig` and returns the
assignment together with the resolved settings (what is recorded in ``meta.json``).

* ``random``: ``splitmix64(node ^ splitmix64(seed)) % P``, vectorised over uint64; balanced in
  expectation, the baseline every other method must beat.
* ``metis``: k-way METIS on the symmetrised graph without self-loops, with one vertex weight per
  balance constraint (DistDGL's ``balance_ntypes``/``balance_edges``): ``nodes`` (1 per node),
  ``train`` (1 per training node), ``edges`` (the node's in-degree in the original graph, i.e.
  the edges its owner aggregates). Edge weights count the directed edges between two nodes, so
  METIS minimises exactly our ``cut_edges``. Allowed imbalance ``imbalance`` per constraint (METIS
  ``ufactor = 1000 * imbalance``; METIS treats it as a target and multi-constraint runs may
  overshoot by a point or two); seeded, hence deterministic. pymetis 2025.2's ``part_graph``
  always passes ``ncon = 1`` (extra weight columns are silently misread), so we call the
  ``METIS_PartGraphKway`` that pymetis's extension bundles and exports through ctypes (see
  :class:`_MetisC`); without it we fall back to ``part_graph`` with node balance only, and warn.
* ``hypergraph``: Mt-KaHyPar on the communication hypergraph, minimising the rows a full-graph
  layer sends (``comm_volume``) exactly instead of the edge cut; one balance weight (``nodes``,
  or ``edges``: in-degree + 1) within ``imbalance``; seeded and deterministic. See
  :mod:`shardgnn.partition.hypergraph`.
* ``ldg``/``fennel``: one-pass streaming, see :mod:`shardgnn.partition.streaming`.
* ``assignment``: a user-supplied ``.npy`` of part ids, validated by :func:`load_assignment`.

Empty parts are refused by default (a rank with no nodes cannot take part in training);
``allow_empty_parts=True`` turns the error into a warning and the format stores an empty range.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import readable_spec
from shardgnn.partition.config import (
    BALANCE_KEYS,
    STREAM_METHODS,
    VERTEX_CUT_METHODS,
    PartitionConfig,
    StreamConfig,
)
from shardgnn.partition.sections import EdgeArraysSection, Section
from shardgnn.partition.streaming import stream_partition
from shardgnn.partition.vertexcut import (
    grid_partition,
    hdrf_partition,
    most_square,
)
from shardgnn.seeding import splitmix64_array


class EmptyPartsError(DatasetError):
    """A partition left some part without nodes (``shardgnn train --workers N`` says so in terms
    of its own flag)."""


def random_partition(num_nodes: int, num_parts: int, seed: int = 0) -> np.ndarray:
    """Seeded hash partition: ``splitmix64(node ^ splitmix64(seed)) % P`` (int32 ``[N]``).

    The part of a node depends only on ``(node, seed, P)``, so any process can recompute it.
    """
    if num_parts < 1:
        raise ConfigError(f"num_parts={num_parts} must be >= 1")
    salt = splitmix64_array(np.array([seed & (2**64 - 1)], dtype=np.uint64))[0]
    h = splitmix64_array(np.arange(num_nodes, dtype=np.uint64) ^ salt)
    return (h % np.uint64(num_parts)).astype(np.int32)


# -------------------------------------------------------------------------------------------- METIS
def metis_input(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xadj, adjncy, adjwgt)`` int64 of the symmetrised graph without self-loops.

    The weight of undirected edge ``{u, v}`` is the number of directed edges between ``u`` and
    ``v`` (both directions, duplicates included), so METIS's weighted cut equals our
    ``cut_edges`` metric. Built with one sparse ``A + A^T`` instead of a global sort.
    """
    import scipy.sparse as sp

    n = graph.num_nodes
    # Copies: scipy keeps the arrays it is given, and sum_duplicates sorts them in place, which
    # would reorder the caller's rows (and misalign its per-edge arrays: weights, relations).
    a = sp.csr_matrix(
        (
            np.ones(graph.num_edges, dtype=np.int64),
            np.array(graph.indices, copy=True),
            np.array(graph.indptr, copy=True),
        ),
        shape=(n, n),
    )
    a.sum_duplicates()
    s = (a + a.T).tocsr()
    del a
    s.sum_duplicates()
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(s.indptr))
    keep = s.indices != rows  # drop self-loops
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=xadj[1:])
    del rows
    adjncy = s.indices[keep].astype(np.int64)
    adjwgt = s.data[keep].astype(np.int64)
    return xadj, adjncy, adjwgt


def metis_weights(
    graph: Graph, balance: tuple[str, ...], node_type: np.ndarray | None = None
) -> np.ndarray:
    """int64 ``[N * ncon]`` vertex weights, node-major (METIS layout: ``w[v * ncon + c]``).
    With ``node_type`` (typed graphs), ``nodes`` becomes one column per node type: every type is
    balanced on its own (DistDGL's ``balance_ntypes``)."""
    columns = []
    for key in balance:
        if key == "nodes" and node_type is not None:
            for t in range(int(node_type.max()) + 1):
                columns.append((node_type == t).astype(np.int64))
        elif key == "nodes":
            columns.append(np.ones(graph.num_nodes, dtype=np.int64))
        elif key == "train":
            col = np.zeros(graph.num_nodes, dtype=np.int64)
            col[np.asarray(graph.train_idx)] = 1
            columns.append(col)
        else:
            columns.append(graph.in_degree().astype(np.int64))
    return np.ascontiguousarray(np.stack(columns, axis=1)).reshape(-1)


def resolve_balance(graph: Graph, balance: tuple[str, ...] | str | None) -> tuple[str, ...]:
    """The METIS balance constraints: the requested subset of ``nodes,train,edges``, or every
    one that applies (``train`` needs training nodes, ``edges`` needs edges)."""
    has_train = graph.train_idx is not None and graph.train_idx.size > 0
    if balance is None:
        return tuple(
            k
            for k in BALANCE_KEYS
            if k == "nodes"
            or (k == "train" and has_train)
            or (k == "edges" and graph.num_edges > 0)
        )
    if isinstance(balance, str):
        balance = tuple(b.strip() for b in balance.split(",") if b.strip())
    unknown = [b for b in balance if b not in BALANCE_KEYS]
    if unknown or not balance:
        raise ConfigError(
            f"--balance {','.join(balance)!r}: give a comma-separated subset of "
            f"{','.join(BALANCE_KEYS)} (unknown: {','.join(unknown) or 'none given'})"
        )
    if "train" in balance and not has_train:
        raise ConfigError(
            f"balance constraint 'train' needs training nodes, but {graph.name} has none; "
            "drop it from --balance"
        )
    return tuple(dict.fromkeys(balance))  # unique, order kept


class _MetisC:
    """The METIS C API bundled in pymetis's extension module, called through ctypes.

    pymetis 2025.2 passes ``ncon = 1`` to METIS whatever ``vweights`` holds, so multi-constraint
    partitioning is impossible through :func:`pymetis.part_graph`. Its extension exports the
    METIS symbols, so we call ``METIS_PartGraphKway`` ourselves. ``idx_t`` must be 64-bit; that
    is checked by letting ``METIS_SetDefaultOptions`` fill a sentinel buffer.
    """

    _instance: "_MetisC | None | bool" = False

    def __init__(self) -> None:
        import ctypes

        from pymetis import _internal

        self.lib = ctypes.CDLL(_internal.__file__)
        self.noptions = int(_internal.Options._len())
        self.index = _internal.options_indices
        for name in ("METIS_PartGraphKway", "METIS_SetDefaultOptions"):
            fn = getattr(self.lib, name)
            fn.restype = ctypes.c_int
        probe = np.full(self.noptions + 1, 12345, dtype=np.int64)
        self.lib.METIS_SetDefaultOptions(ctypes.c_void_p(probe.ctypes.data))
        if not (np.all(probe[:-1] == -1) and probe[-1] == 12345):
            raise OSError("METIS idx_t is not 64-bit")

    @classmethod
    def get(cls) -> "_MetisC | None":
        if cls._instance is False:
            try:
                cls._instance = cls()
            except (ImportError, OSError, AttributeError):
                cls._instance = None
        return cls._instance  # type: ignore[return-value]

    def part_kway(self, xadj, adjncy, adjwgt, vwgt, ncon, nparts, seed, ufactor) -> np.ndarray:
        import ctypes

        n = xadj.shape[0] - 1
        options = np.empty(self.noptions, dtype=np.int64)
        self.lib.METIS_SetDefaultOptions(ctypes.c_void_p(options.ctypes.data))
        options[self.index.SEED] = seed
        options[self.index.UFACTOR] = ufactor
        options[self.index.NUMBERING] = 0
        scalars = np.array([n, ncon, nparts, 0], dtype=np.int64)  # nvtxs, ncon, nparts, edgecut
        part = np.zeros(n, dtype=np.int64)
        arrays = [xadj, adjncy, vwgt, adjwgt]
        assert all(a is None or (a.dtype == np.int64 and a.flags.c_contiguous) for a in arrays)
        ptr = lambda a, off=0: None if a is None else ctypes.c_void_p(a.ctypes.data + 8 * off)  # noqa: E731
        status = self.lib.METIS_PartGraphKway(
            ptr(scalars, 0),
            ptr(scalars, 1),
            ptr(xadj),
            ptr(adjncy),
            ptr(vwgt),
            None,
            ptr(adjwgt),
            ptr(scalars, 2),
            None,
            None,
            ptr(options),
            ptr(scalars, 3),
            ptr(part),
        )
        if status != 1:  # METIS_OK
            kind = {-2: "input error", -3: "out of memory", -4: "error"}.get(
                status, f"status {status}"
            )
            raise ConfigError(
                f"METIS_PartGraphKway failed ({kind}) for {n} nodes, {nparts} parts, "
                f"{ncon} constraints; try fewer balance constraints or a larger --imbalance"
            )
        return part


@contextlib.contextmanager
def _native_stdout_captured() -> Iterator[list[str]]:
    """What native code prints on file descriptor 1 while the block runs (METIS's ``printf``:
    "***Cannot bisect a graph with 0 vertices!"), collected in the yielded list instead of
    reaching stdout, where it would break ``--json`` output. C's buffer is flushed on both sides
    so that nothing printed before or after is caught or lost."""
    import ctypes

    lines: list[str] = []
    try:
        libc = ctypes.CDLL(None)
        sys.stdout.flush()
        libc.fflush(None)
        saved = os.dup(1)
    except (OSError, AttributeError, ValueError):  # no libc or no fd 1: nothing to capture
        yield lines
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield lines
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            lines += [line.strip() for line in text.splitlines() if line.strip()]


def metis_partition(
    graph: Graph,
    num_parts: int,
    *,
    balance: tuple[str, ...] | str | None = None,
    imbalance: float = 0.03,
    seed: int = 0,
    node_type: np.ndarray | None = None,
) -> np.ndarray:
    """k-way METIS with multi-constraint balance (see the module docstring); int32 ``[N]``.
    ``node_type`` (typed graphs): balance every node type separately (:func:`metis_weights`).

    Raises:
        ConfigError: pymetis is missing, or a bad ``balance``/``imbalance``.
    """
    try:
        import pymetis
    except ImportError:
        raise ConfigError(
            "the metis method needs pymetis: `pip install pymetis` (or use --method ldg)"
        ) from None
    if not 0.0 < imbalance <= 1.0:
        raise ConfigError(
            f"imbalance={imbalance} must lie in (0, 1] (0.03 = parts up to 3% above average)"
        )
    balance = resolve_balance(graph, balance)
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int32)
    ufactor = max(1, int(round(1000 * imbalance)))
    seed = int(seed) % (2**31)
    xadj, adjncy, adjwgt = metis_input(graph)
    metis = _MetisC.get()
    if metis is not None:
        # k-way (not recursive bisection): it balances several constraints much better.
        typed = node_type is not None and "nodes" in balance and int(node_type.max()) > 0
        vwgt = (
            None
            if balance == ("nodes",) and not typed
            else metis_weights(graph, balance, node_type if typed else None)
        )
        ncon = len(vwgt) // graph.num_nodes if vwgt is not None else 1
        with _native_stdout_captured() as said:
            parts = metis.part_kway(xadj, adjncy, adjwgt, vwgt, ncon, num_parts, seed, ufactor)
    else:
        if balance != ("nodes",) or node_type is not None:
            warnings.warn(
                "this pymetis build does not expose the METIS C API, and pymetis.part_graph "
                f"supports one balance constraint only: balancing nodes, not {','.join(balance)}",
                stacklevel=2,
            )
        with _native_stdout_captured() as said:
            _, parts = pymetis.part_graph(
                num_parts,
                pymetis.CSRAdjacency(xadj, adjncy),
                eweights=adjwgt,
                recursive=False,
                options=pymetis.Options(seed=seed, ufactor=ufactor),
            )
    if said:  # e.g. more parts than the graph can be cut into: empty parts follow
        warnings.warn(f"METIS: {'; '.join(dict.fromkeys(said))}", stacklevel=2)
    return np.asarray(parts, dtype=np.int32)


# ---------------------------------------------------------------------------------------- user file
def check_assignment(
    assignment: np.ndarray,
    num_nodes: int,
    num_parts: int,
    *,
    source: str | os.PathLike = "assignment",
    allow_empty_parts: bool = False,
    fix: str | None = None,
) -> np.ndarray:
    """Validate a node -> part array; returns it as int32.

    Raises:
        DatasetError: not 1-D, not integer, wrong length, a value outside ``[0, P)``, or (unless
        ``allow_empty_parts``) a part with no node. The message names ``source``; ``fix``: what
        to do about empty parts (default: fewer parts or ``--allow-empty-parts``).
    """
    a = np.asarray(assignment)
    if a.ndim != 1:
        raise DatasetError(
            f"assignment has shape {a.shape}; expected a 1-D array of {num_nodes} part ids",
            source,
            "save a flat array: np.save(path, parts.reshape(-1))",
        )
    if not np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
        raise DatasetError(
            f"assignment has dtype {a.dtype}; part ids must be integers",
            source,
            "save it with an integer dtype, e.g. parts.astype(np.int32)",
        )
    if a.shape[0] != num_nodes:
        raise DatasetError(
            f"assignment has {a.shape[0]} entries but the graph has {num_nodes} nodes",
            source,
            "give exactly one part id per node, in node id order",
        )
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= num_parts:
            bad = int(np.flatnonzero((a < 0) | (a >= num_parts))[0])
            raise DatasetError(
                f"part ids must lie in [0, {num_parts}) but node {bad} has part {int(a[bad])} "
                f"(range [{lo}, {hi}])",
                source,
                f"use --parts {hi + 1} or fix the file",
            )
    counts = np.bincount(a.astype(np.int64), minlength=num_parts)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        message = f"{empty.size} of {num_parts} parts own no node (e.g. part {int(empty[0])})"
        if not allow_empty_parts:
            raise EmptyPartsError(
                message,
                source,
                fix or "use fewer parts, or pass --allow-empty-parts to accept empty parts",
            )
        warnings.warn(f"{source}: {message}; the empty parts get empty id ranges", stacklevel=2)
    return a.astype(np.int32, copy=False)


def load_assignment(
    path: str | os.PathLike, num_nodes: int, num_parts: int, *, allow_empty_parts: bool = False
) -> np.ndarray:
    """Read and validate a user-supplied node -> part ``.npy`` (never unpickled); int32 ``[N]``."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DatasetError("assignment file is missing", path, "check the --assignment path")
    try:
        a = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise DatasetError(
            f"not a readable .npy array ({exc})",
            path,
            "write it with numpy.save(path, parts) with an integer array (no pickle)",
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read ({exc})", path) from None
    if not isinstance(a, np.ndarray):  # .npz archives
        raise DatasetError("not a single .npy array", path, "write it with numpy.save(path, parts)")
    return check_assignment(
        a, num_nodes, num_parts, source=path, allow_empty_parts=allow_empty_parts
    )


# ----------------------------------------------------------------------------------------- dispatch
@dataclasses.dataclass(kw_only=True)
class PartitionResult:
    """An assignment plus the resolved settings and timing that produced it."""

    assignment: np.ndarray
    method: str
    settings: dict[str, Any]
    seconds: float
    edge_part: np.ndarray | None = None
    """a vertex-cut's (:mod:`shardgnn.partition.vertexcut`): int32 ``[E]`` the part computing
    every edge, in the graph's CSR order (``assignment``: the masters); else ``None``"""

    def sections(self) -> tuple[Section, ...]:
        """What the partition adds to the directory written from it
        (:func:`~shardgnn.partition.format.write_partitions`' ``sections``): a vertex-cut's
        placement, with its edges into every part (``edge_part.npy``)."""
        if self.edge_part is None:
            return ()
        return (EdgeArraysSection({"part": self.edge_part}),)


def _type_segments(node_type: np.ndarray) -> np.ndarray:
    """The id boundaries of the node types (a typed graph's types are contiguous id ranges)."""
    change = np.flatnonzero(np.diff(node_type)) + 1
    assert np.all(np.diff(node_type) >= 0), "node types must be contiguous id ranges"
    return np.concatenate([[0], change, [node_type.shape[0]]]).astype(np.int64)


def partition_graph(
    graph: Graph,
    config: PartitionConfig,
    *,
    progress: bool = False,
    node_type: np.ndarray | None = None,
) -> PartitionResult:
    """Run the partitioner ``config`` names on ``graph``. ``node_type`` (typed graphs): METIS and
    the streaming partitioners balance each node type on its own instead of the node count.

    For ``ldg``/``fennel`` the neighbourhood of a node is its in- and out-neighbours: a directed
    graph is symmetrised in memory first (``settings["neighbourhood"]`` records which).

    Raises:
        ConfigError: bad settings, or more parts than nodes. DatasetError: a bad assignment file,
        or a computed partition with an empty part (unless ``allow_empty_parts``).
    """
    config.validate()
    n, p = graph.num_nodes, config.num_parts
    if p > n and not config.allow_empty_parts:
        raise ConfigError(
            f"--parts {p} exceeds the {n:,} nodes of {readable_spec(graph.name)}: some parts "
            f"would be empty; use --parts {n} or fewer (or --allow-empty-parts)"
        )
    settings: dict[str, Any] = {"num_parts": p}
    edge_part = None
    start = time.perf_counter()
    if config.method == "random":
        settings["seed"] = config.seed
        assignment = random_partition(n, p, config.seed)
    elif config.method == "metis":
        balance = resolve_balance(graph, config.balance)
        c_api = _MetisC.get() is not None
        settings.update(
            seed=config.seed,
            balance=list(balance) if c_api else ["nodes"],
            imbalance=config.imbalance,
            ufactor=max(1, int(round(1000 * config.imbalance))),
            objective="edge-cut",
            kway=True,
            api="METIS_PartGraphKway (ctypes)" if c_api else "pymetis.part_graph (nodes only)",
        )
        assignment = metis_partition(
            graph,
            p,
            balance=balance,
            imbalance=config.imbalance,
            seed=config.seed,
            node_type=node_type,
        )
        if node_type is not None and c_api:
            settings["balance_node_types"] = True
    elif config.method == "hypergraph":
        if node_type is not None:
            raise ConfigError(
                "--method hypergraph balances node counts only; a typed graph balances each node "
                "type: use --method metis, ldg or fennel"
            )
        from shardgnn.partition.hypergraph import hypergraph_partition

        balance = config.balance or ("nodes",)
        if len(balance) != 1 or balance[0] not in ("nodes", "edges"):
            raise ConfigError(
                f"--balance {','.join(balance)} with --method hypergraph: Mt-KaHyPar balances one "
                "weight per node; give --balance nodes (the default) or edges (in-degree + 1: "
                "the aggregation work)"
            )
        weights = None if balance[0] == "nodes" else graph.in_degree().astype(np.int64) + 1
        assignment, km1 = hypergraph_partition(
            graph, p, imbalance=config.imbalance, seed=config.seed, node_weights=weights
        )
        settings.update(
            seed=config.seed,
            balance=list(balance),
            imbalance=config.imbalance,
            objective="connectivity-1 (rows sent per layer)",
            predicted_comm_volume=km1,
            partitioner="Mt-KaHyPar, deterministic preset",
        )
    elif config.method in VERTEX_CUT_METHODS:
        if node_type is not None:
            raise ConfigError(vertex_cut_refusal(config.method, "a typed graph"))
        settings["seed"] = config.seed
        if config.method == "hdrf":
            cut = hdrf_partition(
                graph, p, seed=config.seed, balance_weight=config.hdrf_balance,
                imbalance=config.imbalance,
            )  # fmt: skip
            settings.update(
                balance_weight=config.hdrf_balance, imbalance=config.imbalance, order="random"
            )
        else:
            cut = grid_partition(graph, p, random_partition(n, p, config.seed))
            rows = most_square(p)
            settings["grid"] = f"{rows}x{p // rows}"
        assignment, edge_part = cut.master, cut.edge_part
        settings.update(cut.stats(graph, p))
    elif config.method in STREAM_METHODS:
        symmetric = graph.is_symmetric()
        source = graph if symmetric else graph.symmetrize()
        result = stream_partition(
            source,
            p,
            StreamConfig(method=config.method, slack=config.slack, chunk_edges=config.chunk_edges),
            progress=progress,
            segments=None if node_type is None else _type_segments(node_type),
        )
        del source
        assignment = result.assignment
        settings.update(
            slack=config.slack,
            capacity=result.capacity,
            order="node id",
            neighbourhood="in (graph is symmetric)" if symmetric else "in + out (symmetrised)",
        )
        if config.method == "fennel":
            settings.update(gamma=1.5, alpha=result.alpha)
        if node_type is not None:
            settings["balance_node_types"] = True
    else:
        assert config.assignment is not None
        settings["file"] = str(Path(config.assignment).expanduser().resolve())
        assignment = load_assignment(
            config.assignment, n, p, allow_empty_parts=config.allow_empty_parts
        )
    seconds = time.perf_counter() - start
    if config.method != "assignment":
        several = config.method == "metis" and len(settings["balance"]) > 1
        assignment = check_assignment(
            assignment,
            n,
            p,
            source=f"{config.method} partition of {graph.name}",
            allow_empty_parts=config.allow_empty_parts,
            # METIS with several constraints empties parts where node counts alone do not
            # (coauthor-physics from 128 parts, its training nodes spread thin)
            fix=(
                f"METIS balanced {','.join(settings['balance'])}, which empties parts sooner than "
                "--balance nodes (node counts alone); or use fewer parts, or --allow-empty-parts"
            )
            if several
            else None,
        )
    return PartitionResult(
        assignment=assignment,
        method=config.method,
        settings=settings,
        seconds=seconds,
        edge_part=edge_part,
    )


def vertex_cut_refusal(method: str, what: str) -> str:
    """The line refusing a vertex-cut partitioner for data whose parts hold nodes only."""
    return (
        f"--method {method} places edges for full-graph training of a homogeneous graph (--spmm "
        f"vertex-cut); {what} is partitioned by node: use --method metis, ldg or fennel"
    )


__all__ = [
    "PartitionResult",
    "partition_graph",
    "random_partition",
    "metis_partition",
    "metis_input",
    "metis_weights",
    "resolve_balance",
    "check_assignment",
    "load_assignment",
    "vertex_cut_refusal",
]
