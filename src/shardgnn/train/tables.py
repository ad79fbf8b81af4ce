"""Tables keyed by the user's own node ids: what ``shardgnn infer`` writes beside its ``.npy``
outputs, so that results map back to the nodes of the user's files.

``FOLDER/predictions.<ext>``: ``node_id, class, class_name``, one row per node; ``class`` is the
predicted class number (``predictions.npy``), ``class_name`` its name (the label column's value
that ``shardgnn convert`` numbered; the number as text when the graph has no class names).
``FOLDER/embeddings.<ext>``: ``node_id, emb_0, ..., emb_{H-1}`` (``embeddings.npy``).

``node_id`` is the id the graph was built from (a node table's id column, a 1-based edge list's
ids), or ``0..N-1`` for a graph without ids of its own (built-in datasets). Row ``i`` of a table
is row ``i`` of the ``.npy`` beside it. ``<ext>`` is ``csv`` (floats with 9 significant digits:
they read back as the same float32) or ``parquet`` (needs pyarrow). Each file appears whole
(temporary name, then rename).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from shardgnn.atomic import atomic_open
from shardgnn.errors import ConfigError

TABLE_FORMATS = ("csv", "parquet", "none")
"""``shardgnn infer --table-format``: the tables' format (``none``: the ``.npy`` files only)."""
_CHUNK_ROWS = 1 << 16


def check_table_format(table_format: str) -> None:
    """Refuse an unknown format, and Parquet without pyarrow (before any work is done)."""
    if table_format not in TABLE_FORMATS:
        raise ConfigError(
            f"--table-format {table_format!r}: choose one of {', '.join(TABLE_FORMATS)}"
        )
    if table_format == "parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--table-format parquet needs pyarrow (pip install pyarrow), or use "
                "--table-format csv"
            ) from None


def write_table(path: str | Path, columns: dict[str, np.ndarray], table_format: str) -> Path:
    """Write ``columns`` (name -> ``[N]`` values, or ``[N, H]``: ``H`` columns ``name_0`` ..
    ``name_{H-1}``) as a CSV file with a header line or as Parquet, atomically, in chunks of rows
    (an ``[N, H]`` memory map is never read whole)."""
    check_table_format(table_format)
    path = Path(path)
    rows = {len(v) for v in columns.values()}
    assert len(rows) == 1, f"columns of unequal length: {sorted(rows)}"
    (num_rows,) = rows
    if table_format == "parquet":
        _write_parquet(path, columns, num_rows)
    else:
        _write_csv(path, columns, num_rows)
    return path


def _names(columns: dict[str, np.ndarray]) -> list[str]:
    names = []
    for name, values in columns.items():
        names += [f"{name}_{j}" for j in range(values.shape[1])] if values.ndim == 2 else [name]
    return names


def _csv_text(value: str) -> str:
    """``value`` as a CSV cell: quoted (quotes doubled) when it holds a comma, quote or newline."""
    if any(c in value for c in ',"\r\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_cells(values: np.ndarray) -> list[str]:
    """One CSV cell per row (an ``[n, H]`` block: its ``H`` cells joined by commas)."""
    if values.ndim == 2:
        line = ",".join(["%.9g"] * values.shape[1])
        return [line % tuple(row) for row in values.tolist()]
    if values.dtype.kind == "f":
        return ["%.9g" % v for v in values.tolist()]
    if values.dtype.kind in "iub":
        return [str(v) for v in values.tolist()]
    return [_csv_text(str(v)) for v in values.tolist()]


def _write_csv(path: Path, columns: dict[str, np.ndarray], num_rows: int) -> None:
    with atomic_open(path, "w") as fh:
        header = io.StringIO()
        csv.writer(header, lineterminator="\n").writerow(_names(columns))
        fh.write(header.getvalue())
        for start in range(0, num_rows, _CHUNK_ROWS):
            end = start + _CHUNK_ROWS
            cells = [_csv_cells(np.asarray(v[start:end])) for v in columns.values()]
            fh.write("".join(",".join(row) + "\n" for row in zip(*cells)))


def _write_parquet(path: Path, columns: dict[str, np.ndarray], num_rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def batch(start: int, end: int) -> "pa.Table":
        arrays = []
        for values in columns.values():
            block = np.asarray(values[start:end])
            if block.ndim == 2:
                arrays += [pa.array(np.ascontiguousarray(column)) for column in block.T]
            else:
                arrays.append(pa.array(block))
        return pa.Table.from_arrays(arrays, names=_names(columns))

    first = batch(0, min(num_rows, _CHUNK_ROWS))
    with atomic_open(path, "wb") as fh:
        with pq.ParquetWriter(fh, first.schema) as writer:
            writer.write_table(first)
            for start in range(_CHUNK_ROWS, num_rows, _CHUNK_ROWS):
                writer.write_table(batch(start, min(num_rows, start + _CHUNK_ROWS)))


def write_output_tables(
    folder: str | Path,
    table_format: str,
    node_ids: np.ndarray | None,
    class_names: tuple[str, ...] | None,
    key: str = "",
    predictions: bool = True,
    label_kind: str = "class",
    id_column: str = "node_id",
) -> dict[str, str]:
    """Beside ``folder/embeddings.npy`` (and, with ``predictions``, ``predictions.npy``) write
    ``embeddings.<ext>`` (and ``predictions.<ext>``) keyed by ``node_ids`` (``None``: 0..N-1),
    classes named by ``class_names`` (``None``: their numbers); labels of another ``label_kind``
    give ``probability_<j>`` (multi-label) or ``value_<j>`` (regression) columns; the rows are
    keyed by column ``id_column`` (``graph_id`` for a graph set's graphs). Returns
    ``{key + "embeddings_table": path, ...}``; nothing for ``table_format`` ``none``."""
    if table_format == "none":
        return {}
    folder = Path(folder)
    embeddings = np.load(folder / "embeddings.npy", mmap_mode="r", allow_pickle=False)
    num_nodes = embeddings.shape[0]
    ids = np.arange(num_nodes, dtype=np.int64) if node_ids is None else node_ids
    assert len(ids) == num_nodes, f"{len(ids)} node ids for {num_nodes} rows"
    written = {}
    if predictions and label_kind != "class":
        # one column per label (its probability) or per target (the predicted value)
        values = np.load(folder / "predictions.npy", mmap_mode="r", allow_pickle=False)
        column = "probability" if label_kind == "multilabel" else "value"
        target = folder / f"predictions.{table_format}"
        columns = {id_column: ids, column: values}
        written[f"{key}predictions_table"] = str(write_table(target, columns, table_format))
    elif predictions:
        classes = np.load(folder / "predictions.npy", allow_pickle=False)
        names = classes.astype(np.str_)
        if class_names:
            lookup = np.array(class_names, dtype=np.str_)
            known = classes < len(lookup)
            names = np.where(known, lookup[np.where(known, classes, 0)], names)
        target = folder / f"predictions.{table_format}"
        columns = {id_column: ids, "class": classes, "class_name": names}
        written[f"{key}predictions_table"] = str(write_table(target, columns, table_format))
    target = folder / f"embeddings.{table_format}"
    columns = {id_column: ids, "emb": embeddings}
    written[f"{key}embeddings_table"] = str(write_table(target, columns, table_format))
    return written


__all__ = ["TABLE_FORMATS", "check_table_format", "write_output_tables", "write_table"]
