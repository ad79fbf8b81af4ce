"""One-pass streaming vertex partitioners: LDG and Fennel, over a Graph, an edge file or a ``.npy``.

Stream model
------------
A streaming vertex partitioner places each vertex, once, when it arrives together with its
neighbour list, using only the parts of the neighbours placed before it. We turn every input into
one sequence of ``(key, neighbour)`` edge entries and define a *vertex record* as a maximal run of
consecutive entries with the same key:

* a :class:`~shardgnn.graph.csr.Graph`: its in-edge CSR rows in id order (key = destination
  ``v``, neighbours = ``v``'s in-neighbours). Symmetrise a directed graph first if both
  directions should count (:func:`shardgnn.partition.methods.partition_graph` does).
* an edge file (text ``u v [weight]`` per line, optionally gzip, ``#``/``%`` comments, or a
  Graphs.jl ``.jlg`` file) or an integer ``.npy`` edge array (``[E, 2]`` rows ``(src, dst)``, or
  ``[2, E]`` PyG ``edge_index`` layout; ``[2, 2]`` is read as ``[2, E]``): the key is the column
  the file is grouped by. ``key="auto"`` picks the column with fewer runs (ties: ``dst``), which
  is the sorted column of a sorted file (SNAP files are sorted by source).

Vertex ``v`` is placed when its record ends (``argmax`` of the score below). Ids skipped between
two records (no entry with that key) are placed in id order with an empty neighbourhood, so a
file sorted by its key column gives *exactly* the result of the CSR stream of the same graph. If
the input is not grouped, a vertex is placed at its first record and later records of the same
vertex are skipped (counted as ``revisited_runs``, with a warning): sort the file for exact
streaming.

Scores (``|P_i|`` = current size of part ``i``, ``n_i`` = neighbours already placed in ``i``):

* LDG (Stanton & Kliot 2012): ``n_i * (1 - |P_i| / C)``
* Fennel (Tsourakakis et al. 2014): ``n_i - alpha * gamma * |P_i| ** (gamma - 1)`` with
  ``alpha = M * P ** (gamma - 1) / N ** gamma`` (``sqrt(P) * M / N ** 1.5`` for ``gamma = 1.5``)
  and ``M`` = the number of streamed edge entries (``graph.num_edges``). For a symmetric graph
  that is twice the paper's undirected ``m``; with the hard capacity below this stronger balance
  term gave lower cuts than ``m`` on every graph we tried (soc-slashdot, synthetic).

Hard capacity ``C = max(ceil(N / P), floor((1 + slack) * N / P))`` nodes: full parts are never
chosen. Ties go to the least-loaded part, then to the lowest part id. There is no randomness.

Memory and chunk-size invariance
--------------------------------
The numba kernel scans the entries sequentially and carries its whole state (current key, the
neighbour counts of the open record, the fill cursor) from one chunk to the next, so the result
is *identical for every chunk size* by construction (a record may span chunks). Memory is
``O(N)`` (int32 assignment + a float penalty table of ``C + 1`` entries) plus ``O(chunk)``; the
inputs are never loaded whole:

* Graph: slices of the CSR of ``chunk_edges`` entries (the CSR itself is the caller's).
* ``.npy``: explicit ``read`` calls of ``chunk_edges`` rows (not ``mmap``: touched mapped pages
  would count toward the resident set and grow it to the file size).
* text: ``chunk_bytes`` of text at a time, cut at the last newline, parsed with
  :func:`shardgnn.graph.edgelist.parse_numeric_table`.

Files are read twice: a first pass counts entries and finds the id range (needed for ``N``,
Fennel's ``alpha`` and the capacity) and the run counts per column (for ``key="auto"``); the
second pass partitions.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator

import numba
import numpy as np
from tqdm.auto import tqdm

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.edgelist import parse_numeric_table, read_text_head, without_edge_list_header
from shardgnn.partition.config import StreamConfig

_GZIP_MAGIC = b"\x1f\x8b"
_JLG_HEADER = re.compile(rb"^[ \t]*(\d+)[ \t]*,[ \t]*(\d+)[ \t]*,[ \t]*([du])[ \t]*,")
_MAX_EXACT_FLOAT_ID = 2**53


# ------------------------------------------------------------------------------------------- kernel
@numba.njit(cache=True, nogil=True)
def _place(v, assign, loads, counts, mult, pen, cap):  # pragma: no cover - compiled
    """Put ``v`` in the best non-full part; reset the neighbour counts."""
    best = -1
    best_score = 0.0
    for i in range(loads.shape[0]):
        li = loads[i]
        if li >= cap:
            continue
        s = counts[i] * mult[li] - pen[li]
        if best < 0 or s > best_score or (s == best_score and li < loads[best]):
            best = i
            best_score = s
    assign[v] = best
    loads[best] += 1
    counts[:] = 0


@numba.njit(cache=True, nogil=True)
# pragma: no cover - compiled
def _stream_chunk(keys, nbrs, assign, loads, counts, state, mult, pen, cap):
    """Consume one chunk of ``(key, neighbour)`` entries.

    ``state`` = [open key (-1: none), fill cursor, records, revisited records]. Every id below
    the fill cursor is placed, except the open key while its record is being read.
    """
    for e in range(keys.shape[0]):
        k = keys[e]
        if k != state[0]:
            cur = state[0]
            if cur >= 0 and assign[cur] < 0:
                _place(cur, assign, loads, counts, mult, pen, cap)
            nf = state[1]
            while nf < k:  # ids without a record of their own, in id order
                if assign[nf] < 0:
                    _place(nf, assign, loads, counts, mult, pen, cap)
                nf += 1
            if nf == k:
                nf = k + 1
            state[1] = nf
            state[0] = k
            state[2] += 1
            if assign[k] >= 0:
                state[3] += 1
        if assign[k] < 0:
            p = assign[nbrs[e]]
            if p >= 0:
                counts[p] += 1


@numba.njit(cache=True, nogil=True)
def _stream_finish(assign, loads, counts, state, mult, pen, cap):  # pragma: no cover - compiled
    cur = state[0]
    if cur >= 0 and assign[cur] < 0:
        _place(cur, assign, loads, counts, mult, pen, cap)
    for v in range(state[1], assign.shape[0]):
        if assign[v] < 0:
            _place(v, assign, loads, counts, mult, pen, cap)
    state[0] = -1
    state[1] = assign.shape[0]


@dataclasses.dataclass(kw_only=True)
class StreamResult:
    """The output of :func:`stream_partition`.

    Attributes:
        assignment: int32 ``[N]`` part of every node.
        num_nodes, num_entries: ``N`` and the number of streamed edge entries.
        capacity: the hard per-part node limit.
        alpha: Fennel's alpha (0 for LDG).
        input: ``graph``, ``npy``, ``array`` or ``text``.
        key: the column that formed vertex records (``dst`` for a Graph).
        records: number of vertex records (maximal runs of one key).
        revisited_records: records whose vertex was already placed (input not grouped).
        seconds: wall time of the partitioning pass(es).
    """

    assignment: np.ndarray
    num_nodes: int
    num_entries: int
    capacity: int
    alpha: float
    input: str
    key: str
    records: int
    revisited_records: int
    seconds: float

    def info(self) -> dict:
        """Everything except the assignment, for results files."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "assignment"}


def _score_tables(
    config: StreamConfig, n: int, entries: int, num_parts: int
) -> tuple[int, float, np.ndarray, np.ndarray]:
    """``(capacity, alpha, mult, pen)``: a part with ``l`` nodes scores a vertex with ``c``
    neighbours in it ``c * mult[l] - pen[l]`` (LDG: ``mult`` falls to 0 at the capacity; Fennel:
    ``pen`` grows as ``l ** (gamma - 1)``)."""
    cap = capacity(n, num_parts, config.slack)
    loads_range = np.arange(cap + 1, dtype=np.float64)
    if config.method == "ldg":
        return cap, 0.0, 1.0 - loads_range / cap, np.zeros(cap + 1)
    alpha = (
        math.sqrt(num_parts) * entries / n**1.5
        if config.gamma == 1.5
        else entries * num_parts ** (config.gamma - 1) / n**config.gamma
    )
    return cap, alpha, np.ones(cap + 1), alpha * config.gamma * loads_range ** (config.gamma - 1)


def capacity(num_nodes: int, num_parts: int, slack: float) -> int:
    """The hard node limit per part: ``max(ceil(N / P), floor((1 + slack) * N / P))``."""
    return max(-(-num_nodes // num_parts), int(math.floor((1.0 + slack) * num_nodes / num_parts)))


# ------------------------------------------------------------------------------------------ sources
class _Source:
    """A sequence of ``(src, dst)`` int64 chunks, readable any number of times."""

    kind = "?"
    num_nodes: int | None = None  # known up front (Graph, .jlg header)
    num_entries: int | None = None

    def chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        raise NotImplementedError


class _GraphSource(_Source):
    kind = "graph"

    def __init__(self, graph: Graph, chunk_edges: int):
        self.graph, self.chunk_edges = graph, chunk_edges
        self.num_nodes, self.num_entries = graph.num_nodes, graph.num_edges

    def chunks(self, rows: tuple[int, int] | None = None):
        """The in-edges of every row, or of rows ``[lo, hi)`` only."""
        indptr, indices = self.graph.indptr, self.graph.indices
        lo, hi = rows if rows is not None else (0, self.num_nodes)
        e_start, e_total = int(indptr[lo]), int(indptr[hi])
        for e0 in range(e_start, e_total, self.chunk_edges):
            e1 = min(e0 + self.chunk_edges, e_total)
            r0 = int(np.searchsorted(indptr, e0, side="right")) - 1
            # rows r0..r1-1 overlap [e0, e1)
            r1 = int(np.searchsorted(indptr, e1 - 1, side="right"))
            per_row = np.diff(np.clip(indptr[r0 : r1 + 1], e0, e1))
            dst = np.repeat(np.arange(r0, r1, dtype=np.int64), per_row)
            yield np.asarray(indices[e0:e1], dtype=np.int64), dst


class _ArraySource(_Source):
    kind = "array"

    def __init__(self, edges: np.ndarray, chunk_edges: int, source: str = "edge array"):
        if edges.ndim != 2 or 2 not in edges.shape:
            raise DatasetError(
                f"edge array has shape {edges.shape}; expected [E, 2] or [2, E]",
                source,
                "store edges as rows (src, dst) or as a PyG edge_index [2, E]",
            )
        if not np.issubdtype(edges.dtype, np.integer):
            raise DatasetError(
                f"edge array has dtype {edges.dtype}; node ids must be integers",
                source,
                "save the edges with an integer dtype (int32 or int64)",
            )
        self.edges = edges if edges.shape[0] == 2 else edges.T  # [2, E] view
        self.chunk_edges = chunk_edges
        self.num_entries = int(self.edges.shape[1])

    def chunks(self):
        for e0 in range(0, self.num_entries, self.chunk_edges):
            block = np.asarray(self.edges[:, e0 : e0 + self.chunk_edges], dtype=np.int64)
            yield block[0], block[1]


class _NpySource(_Source):
    kind = "npy"

    def __init__(self, path: Path, chunk_edges: int):
        self.path, self.chunk_edges = path, chunk_edges
        try:
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
                self.offset = fh.tell()
        except FileNotFoundError:
            raise DatasetError("file is missing", path, "check the path of the edge file") from None
        except (ValueError, OSError) as exc:
            raise DatasetError(
                f"not a readable .npy array ({exc})",
                path,
                "write the edges with numpy.save (no pickle)",
            ) from None
        if len(shape) != 2 or 2 not in shape:
            raise DatasetError(
                f".npy edge array has shape {shape}; expected [E, 2] or [2, E]",
                path,
                "store edges as rows (src, dst) or as a PyG edge_index [2, E]",
            )
        if dtype.hasobject or not np.issubdtype(dtype, np.integer):
            raise DatasetError(
                f".npy edge array has dtype {dtype}; node ids must be integers",
                path,
                "save the edges with an integer dtype (int32 or int64)",
            )
        self.dtype = dtype
        two_by_e = shape[0] == 2
        self.num_entries = int(shape[1] if two_by_e else shape[0])
        # Bytes on disk are (src, dst) pairs when the C-order shape is [E, 2] (or Fortran [2, E]).
        self.interleaved = two_by_e == bool(fortran)
        needed = self.offset + 2 * self.num_entries * dtype.itemsize
        size = path.stat().st_size
        if size < needed:
            raise DatasetError(
                f"file is truncated: {size} bytes, the header needs {needed}",
                path,
                "rewrite the edge array",
            )

    def _read(self, fh, start: int, count: int) -> np.ndarray:
        fh.seek(self.offset + start * self.dtype.itemsize)
        out = np.fromfile(fh, dtype=self.dtype, count=count)
        if out.shape[0] != count:
            raise DatasetError("file ended early", self.path, "rewrite the edge array")
        return out.astype(np.int64, copy=False)

    def chunks(self):
        e_total = self.num_entries
        with open(self.path, "rb") as fh:
            for e0 in range(0, e_total, self.chunk_edges):
                k = min(self.chunk_edges, e_total - e0)
                if self.interleaved:
                    pairs = self._read(fh, 2 * e0, 2 * k).reshape(k, 2)
                    yield pairs[:, 0], pairs[:, 1]
                else:
                    yield self._read(fh, e0, k), self._read(fh, e_total + e0, k)


class _TextSource(_Source):
    kind = "text"

    def __init__(self, path: Path, chunk_bytes: int, base: int | str):
        self.path, self.chunk_bytes, self.base = path, chunk_bytes, base
        if not path.is_file():
            raise DatasetError("file is missing", path, "check the path of the edge file")
        with open(path, "rb") as raw:
            self.gzip = raw.read(2) == _GZIP_MAGIC
        self.leading_lines = 0
        self.declared_edges: int | None = None
        with self._open() as fh:
            first = fh.readline()
        match = _JLG_HEADER.match(first)
        if match is not None:  # Graphs.jl: n,m,d|u,name ; 1-based ids
            self.num_nodes, self.declared_edges = int(match.group(1)), int(match.group(2))
            self.leading_lines, self.base = 1, 1
            if match.group(3) == b"u":
                warnings.warn(
                    f"{path}: undirected .jlg lists every edge once, so a streaming pass sees each "
                    "edge from one endpoint only; quality is lower than on a symmetric edge list",
                    stacklevel=3,
                )
        elif path.suffix.lower() == ".jlg":
            raise DatasetError(
                "missing Graphs.jl header line `n,m,d|u,name`",
                path,
                "the file is not a .jlg graph, or its first line is damaged",
            )
        else:  # a header line naming the columns (after any comments) is skipped, as file: does
            _, first_line = without_edge_list_header(read_text_head(path), path)
            self.leading_lines = first_line - 1

    def _open(self):
        return gzip.open(self.path, "rb") if self.gzip else open(self.path, "rb")

    def _text_chunks(self) -> Iterator[tuple[bytes, int]]:
        """Newline-aligned text pieces and the file line number of their first line."""
        line = 1
        try:
            with self._open() as fh:
                for _ in range(self.leading_lines):  # a header and the comments before it
                    fh.readline()
                    line += 1
                rest = b""
                while True:
                    data = fh.read(self.chunk_bytes)
                    if not data:
                        if rest:
                            yield rest, line
                        return
                    data = rest + data
                    cut = data.rfind(b"\n")
                    if cut < 0:  # one line longer than a chunk: keep reading
                        rest = data
                        continue
                    piece, rest = data[: cut + 1], data[cut + 1 :]
                    yield piece, line
                    line += piece.count(b"\n")
        except (EOFError, gzip.BadGzipFile, OSError) as exc:
            raise DatasetError(
                f"cannot read ({exc}); gzip data may be truncated or corrupt",
                self.path,
                "re-download or re-compress the file",
            ) from None

    def chunks(self):
        ncols = None
        for text, first_line in self._text_chunks():
            values, lines = parse_numeric_table(
                text,
                self.path,
                np.float64,
                comments=self.declared_edges is None,
                first_line=first_line,
            )
            if values.shape[0] == 0:
                continue
            if ncols is None:
                ncols = values.shape[1]
                if ncols < 2:
                    raise DatasetError(
                        f"line {lines[0]} has 1 column; an edge needs two node ids `u v`",
                        self.path,
                        "give one `u v` edge per line",
                    )
            elif values.shape[1] != ncols:
                raise DatasetError(
                    f"ragged rows: line {lines[0]} has {values.shape[1]} columns, earlier lines "
                    f"have {ncols}",
                    self.path,
                    "give every row the same number of columns (the file may be truncated)",
                )
            ids = values[:, :2]
            bad = ~np.isfinite(ids) | (ids != np.floor(ids)) | (np.abs(ids) >= _MAX_EXACT_FLOAT_ID)
            if bad.any():
                row = int(np.flatnonzero(bad.any(axis=1))[0])
                raise DatasetError(
                    f"line {lines[row]}: node ids must be integers below 2^53, got "
                    f"{ids[row].tolist()}",
                    self.path,
                    "renumber the nodes 0..N-1",
                )
            ids = ids.astype(np.int64)
            yield ids[:, 0].copy(), ids[:, 1].copy()


def _open_source(source, config: StreamConfig) -> _Source:
    if isinstance(source, Graph):
        return _GraphSource(source, config.chunk_edges)
    if isinstance(source, np.ndarray):
        return _ArraySource(source, config.chunk_edges)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        if path.suffix.lower() == ".npy":
            return _NpySource(path, config.chunk_edges)
        return _TextSource(path, config.chunk_bytes or 16 * config.chunk_edges, config.base)
    raise TypeError(
        f"cannot stream a {type(source).__name__}: give a Graph, an edge array or a file path"
    )


# ------------------------------------------------------------------------------------------- driver
def _bar(total: int, desc: str, enabled: bool):
    return tqdm(
        total=total,
        desc=desc,
        unit="edge",
        unit_scale=True,
        leave=False,
        dynamic_ncols=True,
        file=sys.stderr,
        disable=not (enabled and sys.stderr.isatty()),
    )


@dataclasses.dataclass
class _Scan:
    entries: int = 0
    lo: int = np.iinfo(np.int64).max
    hi: int = -1
    runs_src: int = 0
    runs_dst: int = 0
    last_src: int = -(2**62)
    last_dst: int = -(2**62)


def _runs(col: np.ndarray, last: int) -> int:
    """Number of positions where ``col`` changes value, continuing from the previous chunk's
    ``last``."""
    return int(col[0] != last) + int(np.count_nonzero(col[1:] != col[:-1]))


def _scan(src: _Source, progress: bool) -> _Scan:
    scan = _Scan()
    with _bar(src.num_entries or 0, "scan edges", progress) as bar:
        for s, d in src.chunks():
            if s.size == 0:
                continue
            scan.entries += s.size
            scan.lo = min(scan.lo, int(s.min()), int(d.min()))
            scan.hi = max(scan.hi, int(s.max()), int(d.max()))
            scan.runs_src += _runs(s, scan.last_src)
            scan.runs_dst += _runs(d, scan.last_dst)
            scan.last_src, scan.last_dst = int(s[-1]), int(d[-1])
            bar.update(s.size)
    return scan


def stream_partition(
    source: Graph | np.ndarray | str | os.PathLike,
    num_parts: int,
    config: StreamConfig | None = None,
    *,
    progress: bool = False,
    segments: np.ndarray | None = None,
) -> StreamResult:
    """Partition a graph with LDG or Fennel in one streaming pass (see the module docstring).

    Args:
        source: a :class:`Graph` (its CSR rows are streamed), an integer edge array ``[E, 2]`` or
            ``[2, E]``, or the path of an edge file (``.npy``, text, gzip text or ``.jlg``).
        num_parts: ``P >= 1``.
        config: method, slack, chunk sizes, key column, id base.
        progress: show tqdm bars on stderr (only when it is a terminal).
        segments: Graph input only: id boundaries ``[0, ..., N]`` of ranges balanced apart (a
            typed graph's node types): each range gets its own capacity and loads, so every
            part holds about ``1/P`` of each. ``capacity`` is then the sum of the ranges'.

    Returns:
        A :class:`StreamResult`; ``assignment`` is int32 ``[N]``.

    Raises: ConfigError: a bad setting. DatasetError: a missing/corrupt/truncated file, non-integer
        or negative ids, ids beyond ``num_nodes``, a ``.jlg`` edge count that disagrees with its
        header.
    """
    config = (config or StreamConfig()).validate()
    if num_parts < 1:
        raise ConfigError(f"num_parts={num_parts} must be >= 1")
    start = time.perf_counter()
    src = _open_source(source, config)
    where = getattr(src, "path", src.kind)

    if isinstance(src, _GraphSource):
        n, entries, key, shift = src.num_nodes, src.num_entries, "dst", 0
        if entries and (int(np.min(source.indices)) < 0 or int(np.max(source.indices)) >= n):
            raise DatasetError(
                f"neighbour ids must lie in [0, {n})", source.name, "validate the graph"
            )
    else:
        scan = _scan(src, progress)
        entries = scan.entries
        if (
            isinstance(src, _TextSource)
            and src.declared_edges is not None
            and entries != src.declared_edges
        ):
            raise DatasetError(
                f"the header declares {src.declared_edges} edges but the file holds {entries}",
                where,
                "the file is truncated or corrupt; re-download it",
            )
        base = src.base if isinstance(src, _TextSource) else 0
        if base == "auto":
            base = 1 if entries and scan.lo == 1 else 0
        shift = int(base)
        if entries and scan.lo - shift < 0:
            fix = "load it with base=0 (or base=auto)" if shift else "node ids must be >= 0"
            raise DatasetError(f"node id {scan.lo} is below the id base {shift}", where, fix)
        n = config.num_nodes or src.num_nodes or (scan.hi - shift + 1 if entries else 0)
        if entries and scan.hi - shift >= n:
            raise DatasetError(
                f"node id {scan.hi} is out of range for {n} nodes (base {shift})",
                where,
                "raise num_nodes or drop the offending edges",
            )
        if config.key == "auto":
            key = "src" if scan.runs_src < scan.runs_dst else "dst"
        else:
            key = config.key
    if n < 1:
        raise DatasetError(
            "the graph has no nodes", where, "give a non-empty edge list (or num_nodes)"
        )

    assign = np.full(n, -1, dtype=np.int32)
    if segments is None:
        bounds = np.array([0, n], dtype=np.int64)
    else:
        bounds = np.asarray(segments, dtype=np.int64)
        if not isinstance(src, _GraphSource):
            raise ConfigError("id segments balanced apart need a Graph input")
        assert bounds[0] == 0 and bounds[-1] == n and np.all(np.diff(bounds) >= 0), bounds
    records = revisited = 0
    caps, alphas = [], []
    with _bar(entries, f"{config.method} P={num_parts}", progress) as bar:
        # Each id segment (a typed graph's node type) is streamed with its own loads and
        # capacity, so every part gets its share of every segment; neighbour counts see every
        # node placed before, of any segment.
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi == lo:
                continue
            seg_entries = (
                entries if segments is None else int(src.graph.indptr[hi] - src.graph.indptr[lo])
            )
            cap, alpha, mult, pen = _score_tables(config, hi - lo, seg_entries, num_parts)
            caps.append(cap)
            alphas.append(alpha)
            loads = np.zeros(num_parts, dtype=np.int64)
            counts = np.zeros(num_parts, dtype=np.int64)
            state = np.array([-1, lo, 0, 0], dtype=np.int64)
            chunks = src.chunks() if segments is None else src.chunks((lo, hi))
            for s, d in chunks:
                if shift:
                    s, d = s - shift, d - shift
                keys, nbrs = (d, s) if key == "dst" else (s, d)
                _stream_chunk(keys, nbrs, assign, loads, counts, state, mult, pen, cap)
                bar.update(s.size)
            _stream_finish(assign[:hi], loads, counts, state, mult, pen, cap)
            assert int(loads.sum()) == hi - lo and loads.max() <= cap
            records += int(state[2])
            revisited += int(state[3])
    assert assign.min() >= 0
    cap, alpha = sum(caps), alphas[0] if len(alphas) == 1 else float(np.mean(alphas))

    result = StreamResult(
        assignment=assign,
        num_nodes=n,
        num_entries=entries,
        capacity=cap,
        alpha=alpha,
        input=src.kind,
        key=key,
        records=records,
        revisited_records=revisited,
        seconds=time.perf_counter() - start,
    )
    if result.revisited_records:
        warnings.warn(
            f"{where}: {result.revisited_records} of {result.records} vertex records name a "
            f"vertex that was already placed: the edges are not grouped by their {key} column, so "
            "such vertices were placed using their first record only; sort the edges by that "
            "column for exact streaming",
            stacklevel=2,
        )
    return result


def ldg_partition(
    source,
    num_parts: int,
    *,
    slack: float = 0.05,
    chunk_edges: int = 1 << 20,
    progress: bool = False,
    **options,
) -> np.ndarray:
    """LDG assignment (int32 ``[N]``); see :func:`stream_partition` for ``source`` and options."""
    config = StreamConfig(method="ldg", slack=slack, chunk_edges=chunk_edges, **options)
    return stream_partition(source, num_parts, config, progress=progress).assignment


def fennel_partition(
    source,
    num_parts: int,
    *,
    slack: float = 0.05,
    gamma: float = 1.5,
    chunk_edges: int = 1 << 20,
    progress: bool = False,
    **options,
) -> np.ndarray:
    """Fennel assignment (int32 ``[N]``); see :func:`stream_partition` for ``source`` and
    options."""
    config = StreamConfig(
        method="fennel", slack=slack, gamma=gamma, chunk_edges=chunk_edges, **options
    )
    return stream_partition(source, num_parts, config, progress=progress).assignment


__all__ = [
    "StreamResult",
    "stream_partition",
    "ldg_partition",
    "fennel_partition",
    "capacity",
]
