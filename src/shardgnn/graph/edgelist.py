"""Edge-list files (SNAP text, CSV, Graphs.jl ``.jlg``, MatrixMarket ``.mtx``) and the shared
numeric text-table reader.

Text formats accepted by :func:`load_edge_list`:

* one edge ``u v`` per line, separated by whitespace and/or commas; optionally gzip-compressed
  (detected from the gzip magic bytes, whatever the suffix). SNAP ``.txt`` files are exactly this.
* lines whose first non-blank character is ``#`` or ``%`` are comments; blank lines are skipped.
* a first line (after any comments) that names the columns (``src,dst,weight``: it does not
  start with a number) is a header and skipped; the columns are read by position all the same,
  so a header that names them in another order (``dst,src``, or ``u v time``, whose third
  column would be read as a weight) is refused.
* a third column is read as a float edge weight; columns after the third are ignored. A third
  column of integers all past 10^8 (Unix times from 1973 on: SNAP's temporal files, ``SRC DST
  UNIXTS`` without a header, put timestamps there) is refused, unless a header names it a
  weight. Every non-blank line must have the same number of
  columns, else the first deviating line is named in the error.
* Graphs.jl ``.jlg`` files (detected by the suffix or by their header line ``n,m,d|u,name``):
  gzip text whose header gives the node count ``n``, the edge count ``m`` (checked: a mismatch
  means a truncated file) and ``d``/``u`` (directed/undirected; ``u`` always symmetrises). Ids in
  ``.jlg`` files are always 1-based, whatever ``base`` says.
* MatrixMarket ``.mtx`` files (the SuiteSparse Matrix Collection's and Network Repository's
  format; detected by their ``%%MatrixMarket`` banner, or refused when a ``.mtx`` file lacks it):
  a sparse ``matrix coordinate`` whose entry ``i j`` is the edge ``i -> j``; the size line's
  ``n n nnz`` gives the node count (isolated nodes kept; a rectangular matrix is refused) and
  the entry count (checked, as for ``.jlg``); field ``pattern`` (no weight), ``real`` or
  ``integer`` (the value is the edge's weight; ``complex`` is refused); symmetry ``general``
  or ``symmetric`` (the lower triangle stored: symmetrised; ``skew-symmetric`` and
  ``hermitian``, whose mirrored entries change sign or are conjugated, are refused). Ids are
  1-based, whatever ``base`` says.

Duplicate edges are dropped (the first weight is kept) and each CSR row is sorted; self-loops are
kept, so a graph reproduces its file's edge count (SNAP counts self-loops as edges).

Parsing is vectorised (``np.fromstring`` plus a numpy token scan for the row structure), so a
1M-edge file loads in well under a second; there is no per-line Python loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.io import load_npy

_GZIP_MAGIC = b"\x1f\x8b"
_COMMENT_LINE = re.compile(rb"^[ \t]*[#%][^\n]*", re.MULTILINE)
_JLG_HEADER = re.compile(rb"^[ \t]*(\d+)[ \t]*,[ \t]*(\d+)[ \t]*,[ \t]*([du])[ \t]*,([^\n]*)$")
_IS_SPACE = np.zeros(256, dtype=bool)
_IS_SPACE[[9, 10, 11, 12, 13, 32]] = True
_MAX_EXACT_FLOAT_ID = 2**53  # ids are parsed as float64, exact below this
CHUNK_BYTES = 4 << 20  # text parsed per vectorised step (bounds the scratch memory)


# a line that starts with a number (a data row, not a header)
_NUMBER_LINE = re.compile(rb"^[\s,]*[-+]?(\d|\.\d|nan|inf)", re.IGNORECASE)


def _is_skipped(line: bytes) -> bool:
    """Whether a text table's line is blank or a ``#``/``%`` comment."""
    stripped = line.strip()
    return not stripped or stripped.startswith((b"#", b"%"))


def _is_header(line: bytes) -> bool:
    """Whether a text table's line names its columns (``src,dst``, ``u v time``): it is
    neither blank, a comment nor a row that starts with a number."""
    return not _is_skipped(line) and not _NUMBER_LINE.match(line)


def header_line(data: bytes) -> tuple[bytes, int, int] | None:
    """A text table's header: its first line that is neither blank nor a comment, when that line
    names the columns (:func:`_is_header`), as ``(line, line number, offset after the line)``;
    ``None`` when the table starts with a data row."""
    start, number = 0, 1
    while True:  # over the leading blank and comment lines only
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        if not _is_skipped(line) or end == len(data):
            return (line, number, end + 1) if _is_header(line) else None
        start, number = end + 1, number + 1


def without_header(data: bytes) -> tuple[bytes, int]:
    """``data`` without its header (:func:`header_line`) and the comment lines before it, and the
    file line number of the first line left (for :func:`parse_numeric_table`'s ``first_line``)."""
    header = header_line(data)
    return (data, 1) if header is None else (data[header[2] :], header[1] + 1)


# names a header may give a column of an edge or event, by the column's role (an ``_id`` suffix
# is dropped first: JODIE's header is ``user_id,item_id,timestamp,state_label,...``)
_COLUMN_NAMES = {
    "source": frozenset({"src", "source", "from", "u", "user", "sender", "head"}),
    "destination": frozenset(
        {"dst", "destination", "target", "to", "v", "item", "receiver", "tail"}
    ),
    "weight": frozenset({"weight", "w", "wt"}),
    "time": frozenset({"time", "timestamp", "ts", "date", "datetime", "unixtime"}),
    "label": frozenset({"label", "state_label", "y", "class"}),
}


def _column_role(name: str) -> str | None:
    name = name.strip("\"'").lower()
    name = name.removesuffix("_id")
    return next((role for role, names in _COLUMN_NAMES.items() if name in names), None)


def _header_names(header: tuple[bytes, int, int] | None) -> list[str]:
    """The column names of a text table's header (:func:`header_line`), split at commas and
    whitespace; none without a header."""
    return [] if header is None else header[0].decode("utf-8", "replace").replace(",", " ").split()


def without_positional_header(
    data: bytes, source: str | os.PathLike, roles: tuple[str, ...], layout: str, fix: str
) -> tuple[bytes, int]:
    """:func:`without_header` for a file whose columns are read by position: column ``i`` is a
    ``roles[i]`` (``source``, ``destination``, ``weight``, ``time``, ``label``), written
    ``layout`` in messages (e.g. ``u v [weight]``). A header that names a column after another
    role (``dst,src``; ``u v time`` where the third column is a weight) is refused, since reading
    it by position would be silently wrong (every edge reversed, times taken for weights).
    ``fix``: the refusal's fix line.

    Raises:
        DatasetError: the header names a column after a role other than its position's.
    """
    header = header_line(data)
    if header is None:
        return data, 1
    for column, (name, role) in enumerate(zip(_header_names(header), roles), start=1):
        named_role = _column_role(name)
        if named_role is not None and named_role != role:
            raise DatasetError(
                f"its header line (line {header[1]}) names column {column} {name!r}, a "
                f"{named_role}, but the columns are read by position, as {layout}: its "
                f"{named_role}s would be taken for {role}s",
                source,
                fix,
            )
    return data[header[2] :], header[1] + 1


EDGE_LIST_LAYOUT = "u v [weight]"


def without_edge_list_header(data: bytes, source: str | os.PathLike) -> tuple[bytes, int]:
    """:func:`without_positional_header` for an edge list, whose columns are ``u v [weight]``."""
    return without_positional_header(
        data,
        source,
        ("source", "destination", "weight"),
        EDGE_LIST_LAYOUT,
        f"reorder the columns as {EDGE_LIST_LAYOUT}, or convert the table by its column names: "
        "shardgnn convert --edges FILE --src-col NAME --dst-col NAME [--weight-col NAME] "
        "--out DIR; timestamped edges load as temporal:FILE",
    )


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turns a missing file and a read or gzip failure inside the block into one DatasetError."""
    if not path.is_file():
        raise DatasetError("file is missing", path, "check the path (and the data directory)")
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DatasetError(
            f"gzip data is truncated or corrupt ({exc})",
            path,
            "re-download or re-compress the file",
        ) from None
    except OSError as exc:
        raise DatasetError(f"cannot read ({exc})", path) from None


NPY_FORMAT = "a NumPy .npy array"
_BINARY_FORMATS = (
    (b"\x93NUMPY", NPY_FORMAT),
    (b"PAR1", "a Parquet table"),
    (b"PK\x03\x04", "a zip archive (an .npz, for one)"),
    (b"\x89HDF", "an HDF5 file"),
    (b"\x80", "a Python pickle"),
)


class BinaryFileError(DatasetError):
    """A text reader was given a binary file; ``kind`` says which (``a Parquet table``)."""

    def __init__(self, kind: str, path: str | os.PathLike, fix: str) -> None:
        super().__init__(f"is {kind}, not text rows", path, fix)
        self.kind = kind


def binary_format(data: bytes) -> str | None:
    """The binary format ``data`` starts as (``a Parquet table``), None for anything else."""
    return next((kind for magic, kind in _BINARY_FORMATS if data.startswith(magic)), None)


def read_text_bytes(path: str | os.PathLike) -> bytes:
    """The content of a text file, gunzipped when it starts with the gzip magic bytes.

    Raises:
        BinaryFileError: the file is a NumPy array, a Parquet table, a zip archive, HDF5 or a
            pickle (read as text, its bytes were reported as a bad number).
        DatasetError: the file is missing or unreadable, or its gzip stream is truncated/corrupt.
    """
    path = Path(path)
    with _reading(path):
        raw = path.read_bytes()
        data = gzip.decompress(raw) if raw[:2] == _GZIP_MAGIC else raw
    kind = binary_format(data)
    if kind is not None:
        raise BinaryFileError(kind, path, "give a text file of rows of numbers")
    return data


def read_text_head(path: str | os.PathLike) -> bytes:
    """The start of a text file (gunzipped as :func:`read_text_bytes` does) up to and including
    its first line that is neither blank nor a comment: enough for :func:`header_line`, without
    reading a large table whole.

    Raises:
        DatasetError: as :func:`read_text_bytes`.
    """
    path = Path(path)
    with _reading(path), open(path, "rb") as raw:
        compressed = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        head = []
        for line in gzip.GzipFile(fileobj=raw) if compressed else raw:
            head.append(line)
            if not _is_skipped(line):
                break
        return b"".join(head)


class NotANumberError(DatasetError):
    """A text table's token that is not a number: its file line, 0-based column and text (None:
    not found)."""

    def __init__(
        self, message: str, path: str | os.PathLike, fix: str, where: tuple | None
    ) -> None:
        super().__init__(message, path, fix)
        self.line, self.column, self.token = where or (None, None, None)

    @property
    def word(self) -> str:
        """The token as text (at most 40 characters)."""
        return (self.token or b"").decode(errors="replace")[:40]

    def names_a_node(self) -> bool:
        """Whether the token is a word in a ``u v ...`` table's id columns (``alice``): the
        nodes are named, where the reader numbers them."""
        return self.column in (0, 1) and self.word[:1].isalpha()


def _first_bad_token(data: bytes, dtype: np.dtype) -> tuple[int, bytes] | None:
    """Slow path for error messages only: the index and text of the first unparsable token."""
    convert = int if np.issubdtype(dtype, np.integer) else float
    for i, token in enumerate(data.split()):
        try:
            convert(token)
        except ValueError:
            return i, token
        if b"_" in token:  # Python accepts 1_000, numpy does not
            return i, token
    return None


def _parse_chunk(
    data: bytes, source: str | os.PathLike, dtype: np.dtype, comments: bool, first_line: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One newline-aligned piece of :func:`parse_numeric_table`: flat values, and the file line
    and column count of every non-blank row."""
    if comments and (b"#" in data or b"%" in data):
        data = _COMMENT_LINE.sub(b"", data)  # keeps the newline, so line numbers stay right
    data = data.replace(b",", b" ")
    raw = np.frombuffer(data, dtype=np.uint8)
    space = _IS_SPACE[raw]
    starts = ~space
    starts[1:] &= space[:-1]
    token_starts = np.flatnonzero(starts)
    del starts, space
    if token_starts.size == 0:  # (np.fromstring would turn blank text into [-1])
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros(0, dtype=dtype), empty, empty
    # 0-based line of each token
    token_line = np.searchsorted(np.flatnonzero(raw == 10), token_starts)
    del token_starts
    row_first = np.flatnonzero(np.concatenate(([True], token_line[1:] != token_line[:-1])))
    cols = np.diff(np.append(row_first, token_line.size))
    line_numbers = token_line[row_first].astype(np.int64) + first_line
    try:
        values = np.fromstring(data, dtype=dtype, sep=" ")
    except ValueError:
        values = None
    if values is None or values.size != token_line.size:
        bad = _first_bad_token(data, dtype)
        found = None
        if bad is not None:
            row = int(np.searchsorted(row_first, bad[0], side="right")) - 1
            found = (int(token_line[bad[0]]) + first_line, bad[0] - int(row_first[row]), bad[1])
        where = f" at line {found[0]}: {found[2][:40]!r}" if found else ""
        raise NotANumberError(
            f"not a valid {dtype.name} number{where}",
            source,
            "fix or remove the line (the file may be corrupt)",
            found,
        )
    return values, line_numbers, cols


def _newline_aligned_chunks(data: bytes, size: int) -> list[tuple[int, int]]:
    """``(start, end)`` byte ranges of about ``size`` bytes that end just after a newline."""
    bounds, start = [], 0
    while start < len(data):
        end = data.find(b"\n", min(start + size, len(data)) - 1)
        end = len(data) if end < 0 else end + 1
        bounds.append((start, end))
        start = end
    return bounds


def parse_numeric_table(
    data: bytes,
    source: str | os.PathLike,
    dtype: np.dtype | type = np.int64,
    *,
    comments: bool = True,
    first_line: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Parse text rows of numbers separated by whitespace and/or commas into a 2-D array.

    Blank lines are skipped; with ``comments=True`` so are lines starting with ``#`` or ``%``.
    The text is processed in newline-aligned chunks of :data:`CHUNK_BYTES`, so the scratch memory
    stays bounded for very large files (only the result grows with the file).

    Args:
        data: the (decompressed) file content.
        source: the file named in error messages.
        dtype: the numpy dtype of the result.
        comments: whether ``#``/``%`` lines are comments.
        first_line: the file line number of ``data``'s first line (for messages after a header).

    Returns:
        ``(values, line_numbers)``: ``values`` is ``[rows, cols]`` (``[0, 0]`` for no data) and
        ``line_numbers[i]`` is the 1-based file line of row ``i``.

    Raises:
        DatasetError: rows have different column counts, or a token is not a number of ``dtype``;
        the message names the line.
    """
    dtype = np.dtype(dtype)
    parts = []
    for start, end in _newline_aligned_chunks(data, CHUNK_BYTES):
        chunk = data[start:end]
        parts.append(_parse_chunk(chunk, source, dtype, comments, first_line))
        first_line += chunk.count(b"\n")
    parts = [part for part in parts if part[0].size]
    if not parts:
        return np.zeros((0, 0), dtype=dtype), np.zeros(0, dtype=np.int64)
    values, lines, cols = (
        np.concatenate(arrays) if len(parts) > 1 else arrays[0] for arrays in zip(*parts)
    )
    ncols = int(cols[0])
    ragged = np.flatnonzero(cols != ncols)
    if ragged.size:
        i = ragged[0]
        raise DatasetError(
            f"ragged rows: line {lines[i]} has {cols[i]} columns but line {lines[0]} has {ncols}",
            source,
            "give every row the same number of columns (the file may be truncated or corrupt)",
        )
    return values.reshape(-1, ncols), lines


def read_numeric_table(
    path: str | os.PathLike, dtype: np.dtype | type = np.int64, *, comments: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`parse_numeric_table` on a (possibly gzip-compressed) text file."""
    return parse_numeric_table(read_text_bytes(path), path, dtype, comments=comments)


def _integral_ids(ids: np.ndarray, lines: np.ndarray, source: Path) -> np.ndarray:
    """float64 id columns -> int64, rejecting fractions, NaN/inf, negatives and huge values."""
    bad = ~np.isfinite(ids) | (ids != np.floor(ids)) | (np.abs(ids) >= _MAX_EXACT_FLOAT_ID)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DatasetError(
            f"line {lines[row]}: node ids must be integers below 2^53, got {ids[row].tolist()}",
            source,
            "renumber the nodes 0..N-1",
        )
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        row = int(np.flatnonzero((ids < 0).any(axis=1))[0])
        raise DatasetError(
            f"line {lines[row]}: negative node id in {ids[row].tolist()}",
            source,
            "node ids must be >= 0 (or >= 1 with base=1)",
        )
    return ids


# 10^8 s after the Unix epoch is 1973-03-03: a column of integers all past it holds times (SNAP's
# temporal edge lists, `SRC DST UNIXTS` without a header), not edge weights
_UNIX_TIME_FLOOR = 1e8


def _names_weight(header: tuple[bytes, int, int] | None, column: int) -> bool:
    """Whether a text table's header (:func:`header_line`) names its ``column`` (1-based) a
    weight."""
    names = _header_names(header)
    return len(names) >= column and _column_role(names[column - 1]) == "weight"


def _refuse_times_as_weights(column_E: np.ndarray, lines: np.ndarray, source: Path) -> None:
    """Refuse an edge list whose third column, read as weights, holds Unix times: integers, every
    one past :data:`_UNIX_TIME_FLOOR` (a temporal edge list given as a static one; read as
    weights, every edge would weigh about 10^9 and a weighted aggregation would be swamped). A
    header naming the column a weight is trusted instead."""
    if column_E.size == 0 or not column_E.min() >= _UNIX_TIME_FLOOR:
        return
    if not np.all(column_E == np.floor(column_E)):
        return
    first, last = (int(v) for v in (column_E.min(), column_E.max()))
    when = ""
    if last < 1e10:  # seconds: name the dates
        span = np.array([first, last], "datetime64[s]").astype("datetime64[D]")
        when = f" (as Unix times, {span[0]} to {span[1]})"
    raise DatasetError(
        f"column 3 (line {lines[0]}: {int(column_E[0])}) holds integers from {first:,} to "
        f"{last:,}{when}: timestamps, which an edge list ({EDGE_LIST_LAYOUT}) would take for "
        "weights",
        source,
        "load timestamped edges as temporal:FILE; for the static graph drop the third column "
        "(cut -d' ' -f1,2); if they are weights, name the column in a header line: u v weight",
    )


def _split_jlg(data: bytes) -> tuple[int, int, bool, bytes] | None:
    """``(n, m, undirected, body)`` if ``data`` starts with a Graphs.jl LG header, else ``None``."""
    header, _, body = data.partition(b"\n")
    match = _JLG_HEADER.match(header.rstrip(b"\r"))
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3) == b"u", body


_MTX_BANNER = re.compile(
    rb"^%%MatrixMarket[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]*$", re.I
)
_MTX_FIELDS = ("pattern", "real", "integer", "double")
_MTX_SYMMETRIES = ("general", "symmetric")


def _is_mtx(data: bytes) -> bool:
    return data[:14].lower() == b"%%matrixmarket"


@dataclasses.dataclass(frozen=True)
class _MatrixMarket:
    """A MatrixMarket file's header: its node count, declared entries, whether it stores one
    triangle of a symmetric matrix and whether entries carry a value; ``body``, the entries from
    file line ``first_line`` on."""

    num_nodes: int
    entries: int
    symmetric: bool
    weighted: bool
    body: bytes
    first_line: int


def _split_mtx(data: bytes, path: Path) -> _MatrixMarket | None:
    """The header of a MatrixMarket file (None when ``data`` has no banner).

    Raises:
        DatasetError: a damaged banner or size line, or a matrix that is not a graph's adjacency
            (dense, complex, rectangular, skew-symmetric or hermitian)."""
    if not _is_mtx(data):
        return None
    banner, _, rest = data.partition(b"\n")
    match = _MTX_BANNER.match(banner.rstrip(b"\r"))
    if match is None:
        raise DatasetError(
            "its %%MatrixMarket banner does not name the object, format, field and symmetry",
            path,
            "the first line of a sparse graph reads `%%MatrixMarket matrix coordinate pattern "
            "general` (or real, integer; symmetric); the file is damaged",
        )
    obj, layout, field, symmetry = (g.decode("ascii", "replace").lower() for g in match.groups())
    if (obj, layout) != ("matrix", "coordinate"):
        raise DatasetError(
            f"holds a MatrixMarket {obj} in {layout} format, not a sparse matrix (`matrix "
            "coordinate`)",
            path,
            "give the graph's adjacency as a sparse `matrix coordinate` file",
        )
    if field not in _MTX_FIELDS:
        raise DatasetError(
            f"MatrixMarket field {field}: an edge has no value (pattern) or a real one (real, "
            "integer)",
            path,
            "give the adjacency with real weights, or as a pattern",
        )
    if symmetry not in _MTX_SYMMETRIES:
        raise DatasetError(
            f"MatrixMarket symmetry {symmetry}: its stored triangle stands for the other one "
            "with another sign or conjugated, which an edge weight cannot say",
            path,
            "store the matrix as general (every entry) or symmetric",
        )
    line, pos = 2, 0
    while True:  # the comments, then the size line
        end = rest.find(b"\n", pos)
        text = rest[pos:] if end < 0 else rest[pos:end]
        if not _is_skipped(text) or end < 0:
            break
        line, pos = line + 1, end + 1
    sizes = text.split()
    if not sizes:
        raise DatasetError(
            "ends before its MatrixMarket size line `rows columns entries`",
            path,
            "the file is truncated or corrupt; re-download it",
        )
    if len(sizes) != 3 or not all(token.isdigit() for token in sizes):
        raise DatasetError(
            f"line {line}: the MatrixMarket size line is {text.strip().decode(errors='replace')!r}"
            ", not `rows columns entries`",
            path,
            "the file is truncated or corrupt; re-download it",
        )
    rows, cols, entries = (int(token) for token in sizes)
    if rows != cols:
        raise DatasetError(
            f"holds a {rows:,} x {cols:,} matrix; a graph's adjacency matrix is square",
            path,
            "give the adjacency of a graph (a bipartite graph's: both sides numbered in one "
            "range of ids)",
        )
    body = b"" if end < 0 else rest[end + 1 :]
    return _MatrixMarket(rows, entries, symmetry == "symmetric", field != "pattern", body, line + 1)


def _named_nodes_refused(exc: NotANumberError, path: Path) -> DatasetError:
    """A token of an edge list that is a word (``alice``): its nodes are named, which an edge
    list read here cannot number; ``shardgnn convert`` can. Any other bad token: ``exc``."""
    if not exc.names_a_node():
        return exc
    return DatasetError(
        f"line {exc.line}: {exc.word!r} is not a node id: an edge list read here numbers its nodes",
        path,
        "a graph whose nodes are named converts with `shardgnn convert --edges FILE --out DIR` "
        "(a header line naming the columns first: src and dst; the names become the nodes' "
        "ids), then trains as graph:DIR",
    )


def load_edge_array(path: str | os.PathLike, base: int | str = 0) -> tuple[Graph, int]:
    """The edges of an ``.npy`` array of ``[E, 2]`` integer node ids (``u v`` rows, numbered
    from ``base``; ``"auto"``: 1 when the smallest is 1), and the base taken.

    Raises:
        DatasetError: not an integer ``[E, 2]`` array, or ids below the base."""
    path = Path(path)
    pairs = load_npy(path)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise DatasetError(
            f"holds a {pairs.dtype} array of shape {list(pairs.shape)}, not integer [E, 2] edges",
            path,
            "save the edges as numpy.save(path, np.stack([src, dst], axis=1))",
        )
    offset = (1 if pairs.size and pairs.min() == 1 else 0) if base == "auto" else int(base)
    if pairs.size and pairs.min() < offset:
        row = int(np.flatnonzero((pairs < offset).any(axis=1))[0])
        raise DatasetError(
            f"row {row}: node id {int(pairs[row].min())} is below the first id, {offset}",
            path,
            "give ids from 0 (or from 1 with base 1)",
        )
    name = Path(path.name.removesuffix(".gz")).stem
    return Graph.from_edge_index(pairs[:, 0] - offset, pairs[:, 1] - offset, name=name), offset


def format_base(path: str | os.PathLike) -> int | None:
    """The first node id a file's format fixes: 1 for Graphs.jl ``.jlg`` and MatrixMarket files,
    whatever a ``base`` says; None where the base is the reader's to choose.

    Raises:
        DatasetError: as :func:`read_text_bytes`."""
    head = read_text_head(path)
    return 1 if _is_mtx(head) or _split_jlg(head) is not None else None


def load_edge_list(path: str | os.PathLike, base: int | str = 0, symmetric: bool = False) -> Graph:
    """Load an edge-list file (see the module docstring for the accepted formats).

    Args: path: the file (``.txt``, ``.csv``, ``.tsv``, ``.gz``, ``.jlg`` or ``.mtx``). base:
        ``0`` (ids start at 0), ``1`` (ids start at 1; an id 0 is an error) or ``"auto"``
        (1-based iff the smallest id is 1). Ignored for ``.jlg`` and MatrixMarket files, which
        are always 1-based (:func:`format_base`).
        symmetric: add every reverse edge (always done for an undirected ``.jlg`` header).

    Returns:
        A :class:`Graph` without features or labels, ``num_nodes = max id + 1`` (or the ``.jlg``
        header's ``n``, the MatrixMarket size line's), named after the file stem.

    Raises:
        DatasetError: missing/empty/truncated file, ragged rows, non-integer, negative or
        out-of-range ids, a ``.jlg`` or MatrixMarket edge count that disagrees with its
        header, a matrix that is no graph's adjacency, or a third column of Unix times (a
        temporal edge list).
    """
    path = Path(path)
    if base not in (0, 1, "auto"):
        raise DatasetError(f"base must be 0, 1 or 'auto', got {base!r}", path)
    try:
        data = read_text_bytes(path)
    except BinaryFileError as exc:
        if exc.kind != NPY_FORMAT:
            raise BinaryFileError(
                exc.kind,
                path,
                "an edge list is a text file (or an .npy of [E, 2] integer edges); `shardgnn "
                "convert --edges FILE --out DIR` reads a Parquet table's src and dst columns "
                "(--src-col, --dst-col) into a graph directory to train as graph:DIR",
            ) from None
        graph, _ = load_edge_array(path, base)
        return graph.symmetrize() if symmetric else graph.coalesce()
    name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    name = Path(name).stem

    jlg = _split_jlg(data)
    if jlg is None and suffix == ".jlg":
        raise DatasetError(
            "missing Graphs.jl header line `n,m,d|u,name`",
            path,
            "the file is not a .jlg graph, or its first line is damaged",
        )
    mtx = _split_mtx(data, path)
    if mtx is None and suffix == ".mtx":
        raise DatasetError(
            "missing the MatrixMarket banner `%%MatrixMarket matrix coordinate ...` on its first "
            "line",
            path,
            "the file is not a MatrixMarket matrix, or its first line is damaged",
        )
    num_nodes: int | None = None
    if mtx is not None:
        num_nodes, symmetric, base = mtx.num_nodes, symmetric or mtx.symmetric, 1
        values, lines = parse_numeric_table(mtx.body, path, np.float64, first_line=mtx.first_line)
        if values.shape[0] != mtx.entries:
            raise DatasetError(
                f"the size line declares {mtx.entries:,} entries but the file holds "
                f"{values.shape[0]:,}",
                path,
                "the file is truncated or corrupt; re-download it",
            )
        columns = 3 if mtx.weighted else 2
        if values.size and values.shape[1] != columns:
            raise DatasetError(
                f"line {lines[0]} has {values.shape[1]} columns; an entry of this matrix has "
                f"{columns}: `i j{' value' if mtx.weighted else ''}` (its banner's field says so)",
                path,
                "the banner's field (pattern: no value; real, integer: a value) or the entries "
                "are wrong",
            )
    elif jlg is not None:
        num_nodes, declared_edges, undirected, data = jlg
        symmetric = symmetric or undirected
        base = 1
        values, lines = parse_numeric_table(data, path, np.float64, comments=False, first_line=2)
        if values.shape[0] != declared_edges:
            raise DatasetError(
                f"the header declares {declared_edges} edges but the file holds {values.shape[0]}",
                path,
                "the file is truncated or corrupt; re-download it",
            )
    else:
        header = header_line(data)
        data, first_line = without_edge_list_header(data, path)
        try:
            values, lines = parse_numeric_table(data, path, np.float64, first_line=first_line)
        except NotANumberError as exc:
            raise _named_nodes_refused(exc, path) from None
        if values.ndim == 2 and values.shape[1] >= 3 and not _names_weight(header, 3):
            _refuse_times_as_weights(values[:, 2], lines, path)
    if values.shape[0] == 0:
        raise DatasetError(
            "holds no edges (the file is empty, all comments or only a header)",
            path,
            "give one `u v` edge per line",
        )
    if values.shape[1] < 2:
        raise DatasetError(
            f"line {lines[0]} has 1 column; an edge needs two node ids `u v`",
            path,
            "give one `u v` edge per line",
        )

    ids = _integral_ids(values[:, :2], lines, path)
    weight = values[:, 2].astype(np.float32) if values.shape[1] >= 3 else None
    if base == "auto":
        base = 1 if ids.min() == 1 else 0
    if base == 1:
        if ids.min() == 0:
            row = int(np.flatnonzero((ids == 0).any(axis=1))[0])
            raise DatasetError(
                f"line {lines[row]}: node id 0 in a 1-based file",
                path,
                "load it with base=0 (or base=auto)",
            )
        ids -= 1
    if num_nodes is None:
        num_nodes = int(ids.max()) + 1
    elif ids.max() >= num_nodes:
        row = int(np.flatnonzero((ids >= num_nodes).any(axis=1))[0])
        raise DatasetError(
            f"line {lines[row]}: node id {ids[row].max() + 1} is out of range [1, {num_nodes}]",
            path,
            "the header's node count or the edge is wrong; re-download the file",
        )

    graph = Graph.from_edge_index(ids[:, 0], ids[:, 1], num_nodes, edge_weight=weight, name=name)
    return graph.symmetrize() if symmetric else graph.coalesce()


__all__ = [
    "format_base",
    "load_edge_array",
    "load_edge_list",
    "parse_numeric_table",
    "read_numeric_table",
    "read_text_bytes",
]
