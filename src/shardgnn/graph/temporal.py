"""Temporal graphs: timestamped events and the temporal CSR (T-CSR) of TGL.

A :class:`TemporalGraph` holds events ``src -> dst at time t`` in chronological order (an
event's id is its position), optionally with a feature row per event, and the T-CSR: every
node's incident events sorted by time, with the times beside the neighbour ids, so "the
neighbours of ``v`` before ``t``" is one binary search in ``v``'s row. By default an event is in
the rows of both endpoints (TGL and PyG's ``LastNeighborLoader`` treat interactions as
undirected for neighbourhoods); ``directed=True`` keeps it in its destination's row only.

Events may carry a class label of their source at that time (JODIE's state labels: dynamic node
classification, e.g. a Wikipedia editor banned after an edit): ``labels``, -1 where none.

Ingest: :func:`load_temporal_events` reads ``SRC DST TIME [LABEL] [features...]`` rows
(whitespace or commas, an optional header line, ``#`` comments, ``.gz``): a non-numeric or
negative time, a fractional node id, a label that is no class id, or a feature width that
changes from row to row is one error naming the file and line; rows out of time order are
sorted (stable) with a warning saying how many.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import check_edge_range, edge_id_arrays
from shardgnn.graph.edgelist import (
    BinaryFileError,
    NotANumberError,
    parse_numeric_table,
    read_text_bytes,
    without_positional_header,
)
from shardgnn.graph.split import FINITE_FIX, check_finite_features


def event_arrays(
    src: Any, dst: Any, t: Any, name: str = "temporal"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events' endpoints and times as int64, int64 and float64 arrays, checked (one line each,
    naming ``name``): 1-D and of one length, integer ids, times finite numbers ``>= 0``, in time
    order (non-decreasing)."""
    src, dst = (a.astype(np.int64, copy=False) for a in edge_id_arrays(src, dst, name, "event"))
    try:
        t = np.asarray(t, dtype=np.float64)
    except (TypeError, ValueError) as exc:  # text, objects: numpy's traceback before
        raise DatasetError(
            f"event times must be numbers ({exc})",
            name,
            "times are numbers >= 0 (e.g. unix seconds)",
        ) from None
    if not (src.shape == dst.shape == t.shape and src.ndim == 1):
        raise DatasetError(f"src, dst and t must be 1-D of one length, got {src.shape}, "
                           f"{dst.shape}, {t.shape}")  # fmt: skip
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))  # NaN passes the time-order check
    if bad.size:
        raise DatasetError(
            f"event {bad[0]}'s time {float(t[bad[0]])} is not a finite non-negative number",
            name,
            "times are numbers >= 0 (e.g. unix seconds)",
        )
    if t.size and np.any(np.diff(t) < 0):
        raise DatasetError("events are not in time order", name, "sort them by time first")
    return src, dst, t


@dataclasses.dataclass
class TemporalGraph:
    """Chronological events and their T-CSR.

    Attributes:
        num_nodes: ``N``.
        src, dst: int64 ``[E]`` endpoints of every event, in time order (event id = position).
        t: float64 ``[E]`` non-decreasing event times.
        edge_feat: float32 ``[E, F]`` event features, or ``None``.
        labels: int64 ``[E]`` the source's class at each event (JODIE's "state label": dynamic
            node classification; ``-1``: that event carries none), or ``None``.
        indptr: int64 ``[N + 1]`` T-CSR rows.
        indices: int64 ``[M]`` the other endpoint of each incident event, row by row, by time.
        times: float64 ``[M]`` the event's time, beside ``indices``.
        eids: int64 ``[M]`` the event's id (ties in time keep event order).
        directed: events are in their destination's row only (else in both endpoints' rows).
        name: the dataset's name.
    """

    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    times: np.ndarray
    eids: np.ndarray
    edge_feat: np.ndarray | None = None
    directed: bool = False
    name: str = "temporal"
    labels: np.ndarray | None = None

    @classmethod
    def from_events(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        edge_feat: np.ndarray | None = None,
        *,
        num_nodes: int | None = None,
        directed: bool = False,
        name: str = "temporal",
        labels: np.ndarray | None = None,
    ) -> "TemporalGraph":
        """Build from events in time order (``t`` non-decreasing; :func:`load_temporal_events`
        sorts a file's rows); ``labels``: the source's class at each event (-1: none)."""
        src, dst, t = event_arrays(src, dst, t, name)
        n = int(
            num_nodes
            if num_nodes is not None
            else (max(src.max(), dst.max()) + 1 if src.size else 0)
        )
        check_edge_range(src, dst, n)
        eid = np.arange(src.size, dtype=np.int64)
        if directed:
            rows, nbrs, ev = dst, src, eid
        else:
            rows = np.concatenate([dst, src])
            nbrs = np.concatenate([src, dst])
            ev = np.concatenate([eid, eid])
        # by row, then time, then event id (events are in time order: event id orders ties)
        order = np.lexsort((ev, rows))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        feat = None if edge_feat is None else np.ascontiguousarray(edge_feat, dtype=np.float32)
        if feat is not None and feat.shape[0] != src.size:
            raise DatasetError(f"edge features have {feat.shape[0]} rows for {src.size} events")
        if feat is not None:
            check_finite_features(feat, name, what="event feature", fix=FINITE_FIX)
        return cls(
            num_nodes=n, src=src, dst=dst, t=t, indptr=indptr, indices=nbrs[order],
            times=t[ev[order]], eids=ev[order], edge_feat=feat, directed=directed, name=name,
            labels=None if labels is None else event_labels(labels, src.size, name),
        )  # fmt: skip

    def validate(self, source: str | None = None) -> "TemporalGraph":
        """Check the T-CSR invariants (every row sorted by time; one or two entries per
        event); raise :class:`DatasetError` naming ``source``."""
        where = source or self.name
        entries = self.num_events * (1 if self.directed else 2)
        if self.indptr.shape != (self.num_nodes + 1,) or int(self.indptr[-1]) != entries:
            raise DatasetError(f"T-CSR has {int(self.indptr[-1])} entries for {entries}", where)
        step = np.diff(self.times)
        row_start = np.zeros(self.times.shape[0], dtype=bool)
        row_start[self.indptr[:-1][self.indptr[:-1] < self.times.shape[0]]] = True
        if np.any((step < 0) & ~row_start[1:]):
            raise DatasetError("a T-CSR row is not sorted by time", where)
        return self

    def split_points(self, val: float, test: float) -> tuple[int, int]:
        """Chronological split: ``(val_start, test_start)`` event positions, training events
        ``[0, val_start)``, validation ``[val_start, test_start)``, test the rest. The cuts are
        the time quantiles ``1 - val - test`` and ``1 - test`` (events at a cut's time go before
        it), as PyG's ``TemporalData.train_val_test_split``: no time is in two splits."""
        if self.num_events == 0:
            raise DatasetError("holds no events to split", self.name)
        return chronological_split(self.t, val, test)

    @property
    def num_events(self) -> int:
        return int(self.src.shape[0])

    def summary(self) -> dict:
        """Sizes and time span, for ``shardgnn info``."""
        pairs = np.unique(self.src * max(self.num_nodes, 1) + self.dst).size if self.src.size else 0
        return {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "num_events": self.num_events,
            "distinct_pairs": int(pairs),
            "time_span": [float(self.t[0]), float(self.t[-1])] if self.t.size else None,
            "edge_features": 0 if self.edge_feat is None else int(self.edge_feat.shape[1]),
            "directed": self.directed,
            **({} if self.labels is None else label_summary(self.labels)),
        }


def event_labels(labels: np.ndarray, num_events: int, source: str | Path) -> np.ndarray:
    """``labels`` as int64 ``[E]`` class ids (``-1``: unlabelled event), checked.

    Raises:
        DatasetError: another length, a fractional or negative (other than -1) class, or no
            labelled event at all.
    """
    values = np.asarray(labels)
    if values.shape != (num_events,):
        raise DatasetError(f"labels have shape {values.shape} for {num_events} events", source)
    as_int = values.astype(np.int64)
    bad = np.flatnonzero((as_int != values) | (as_int < -1))
    if bad.size:
        raise DatasetError(
            f"event {int(bad[0])}: label {values[bad[0]]} is not a class id",
            source,
            "labels are integers >= 0 (-1: the event carries no label)",
        )
    if not np.any(as_int >= 0):
        raise DatasetError("no event carries a label (all are -1)", source)
    return as_int


def label_summary(labels: np.ndarray) -> dict:
    """Classes and labelled events of an event stream's labels, for ``shardgnn info``."""
    known = labels[labels >= 0]
    return {
        "classes": int(known.max()) + 1,
        "labelled_events": int(known.size),
        "class_sizes": np.bincount(known).tolist(),
    }


def chronological_split(t: np.ndarray, val: float, test: float) -> tuple[int, int]:
    """:meth:`TemporalGraph.split_points` of non-decreasing event times ``t`` (non-empty)."""
    val_time, test_time = np.quantile(t, [1.0 - val - test, 1.0 - test])
    return int(np.sum(t <= val_time)), int(np.sum(t <= test_time))


def _not_a_number(exc: NotANumberError, path: Path) -> DatasetError:
    """An event file's token that is not a number, said for its column: a node's name, or a
    time written as a date (Reddit's hyperlink events, for one, carry both)."""
    if exc.names_a_node():
        return DatasetError(
            f"line {exc.line}: {exc.word!r} is not a node id: the events read here number "
            "their nodes",
            path,
            "number the nodes first, 0.. or 1.. (names in order of first appearance: "
            "pandas.factorize)",
        )
    if exc.column == 2:
        return DatasetError(
            f"line {exc.line}: {exc.word!r} is not a time: times are numbers (Unix seconds, or any "
            "unit)",
            path,
            "write dates as numbers first (pandas.to_datetime(column).astype('int64') // 10**9 "
            "gives Unix seconds)",
        )
    return exc


def load_temporal_events(
    path: str | Path,
    *,
    base: int | str = "auto",
    directed: bool = False,
    name: str | None = None,
    labels: bool = False,
    bipartite: bool = False,
    nonfinite: str = "error",
) -> TemporalGraph:
    """Read ``SRC DST TIME [features...]`` rows (see the module docstring). ``base``: the first
    node id (0, 1, or ``auto``: 1 when the smallest id is 1); ``labels``: the fourth column is
    the source's class at the event (JODIE's ``user,item,timestamp,state_label,features...``
    rows; -1: none), the features follow it; ``bipartite``: sources and destinations number
    their own ids from the base (JODIE's users and items): the destinations' ids follow the
    sources' (item ``i`` becomes node ``max user + 1 + i``, as TGN's preprocessing does);
    ``nonfinite``: ``"error"`` refuses NaN/inf feature values (naming the line), ``"zero"``
    replaces them by 0 with a warning."""
    path = Path(path)
    layout = "SRC DST TIME LABEL [features...]" if labels else "SRC DST TIME [features...]"
    try:
        data = read_text_bytes(path)
    except BinaryFileError as exc:
        raise BinaryFileError(
            exc.kind,
            path,
            f"events are a text file of {layout} rows (CSV too: pandas' to_csv writes one)",
        ) from None
    roles = (
        ("source", "destination", "time", "label") if labels else ("source", "destination", "time")
    )
    # a header line ("src dst time") is skipped
    data, first_line = without_positional_header(
        data, path, roles, layout, f"reorder the columns as {layout}"
    )
    try:
        rows, lines = parse_numeric_table(data, path, np.float64, first_line=first_line)
    except NotANumberError as exc:
        raise _not_a_number(exc, path) from None
    if rows.shape[0] == 0:
        raise DatasetError("holds no events", path, "give SRC DST TIME rows")
    first_feature = 4 if labels else 3
    if rows.shape[1] < first_feature:
        raise DatasetError(f"rows have {rows.shape[1]} columns; an event is {layout}", path)
    ids, t = rows[:, :2], rows[:, 2]
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if bad.size:
        raise DatasetError(
            f"line {lines[bad[0]]}: time {float(t[bad[0]])} is not a finite non-negative number",
            path,
            "times are numbers >= 0 (e.g. unix seconds)",
        )
    bad = np.flatnonzero((ids != np.floor(ids)).any(axis=1) | (ids < 0).any(axis=1))
    if bad.size:
        raise DatasetError(
            f"line {lines[bad[0]]}: node ids {ids[bad[0]].tolist()} are not non-negative integers",
            path,
        )
    if labels:
        label = rows[:, 3]
        bad = np.flatnonzero(~np.isfinite(label) | (label != np.floor(label)) | (label < -1))
        if bad.size:
            raise DatasetError(
                f"line {lines[bad[0]]}: label {float(label[bad[0]])} is not a class id", path,
                "the fourth column is the source's class: an integer >= 0 (-1: none)",
            )  # fmt: skip
    if rows.shape[1] > first_feature:  # checked in file order, so the line named is the user's
        rows[:, first_feature:] = check_finite_features(
            rows[:, first_feature:], path, nonfinite, what="event feature", lines=lines
        )
    ids = ids.astype(np.int64)
    offset = (1 if ids.min() == 1 else 0) if base == "auto" else int(base)
    if ids.min() - offset < 0:
        raise DatasetError(f"node id {ids.min()} is below the id base {offset}", path)
    ids -= offset
    if bipartite:  # two id spaces: the destinations after the sources, never the same node
        ids[:, 1] += ids[:, 0].max() + 1
    order = np.argsort(t, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    if moved:
        warnings.warn(
            f"{path}: {moved} of {t.size} events were not in time order; sorted them by time "
            "(stable: rows with equal times keep their file order)",
            stacklevel=2,
        )
        ids, t, rows = ids[order], t[order], rows[order]
    feat = rows[:, first_feature:] if rows.shape[1] > first_feature else None
    return TemporalGraph.from_events(
        ids[:, 0], ids[:, 1], t, feat, directed=directed, name=name or path.stem,
        labels=rows[:, 3] if labels else None,
    )  # fmt: skip
