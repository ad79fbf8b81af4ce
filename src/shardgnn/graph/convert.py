"""Your own labelled graph, as a graph directory (``shardgnn convert``; train it as ``graph:DIR``).

Three ways in, all ending in :func:`~shardgnn.graph.io.save_graph`:

* **An edge list plus files**: ``--edges`` (text ``u v [weight]`` per line, whitespace or CSV,
  ``#`` comments, ``.gz``; or an ``.npy`` of shape ``[E, 2]``), with ``--features`` (``.npy`` or
  CSV, one row per node), ``--labels`` (one integer per node, -1 unlabelled) and ``--train``,
  ``--val``, ``--test`` (node ids, or a boolean ``.npy`` mask). Nodes no edge names (rows past
  the largest edge-list id) are added only when ``--num-nodes`` asks for them.
* **Tables** (CSV or Parquet, read with pandas): ``--nodes`` with an id column, optionally a
  label column (any values: sorted distinct values become classes 0..C-1), a split column
  (``train``/``val``/``test``) and feature columns; ``--edges`` with source and destination
  columns naming node ids (any values), optionally a weight column and edge feature columns
  (``--edge-feature-cols``).
* **Typed tables** (a heterogeneous graph; train it as ``hetero:DIR``): ``--node-tables
  TYPE=FILE,...``, one node table per node type (id column, feature columns: a type without
  numeric columns is featureless and gets learnt rows when trained), and ``--edge-tables
  SRC/REL/DST=FILE,...``, one edge table per relation whose source and destination columns name
  ids of its source and destination types. ``--target-type`` names the type whose label and
  split columns are read.
* **An ``.npz`` archive** (``--npz``): ``edge_index`` ``[2, E]`` (or ``src`` and ``dst``), ``x``,
  ``y`` (or DGL's names ``feat`` and ``label``), ``edge_attr`` ``[E, D]`` (edge features, in
  edge order), and ``train_idx``/``val_idx``/``test_idx`` or
  ``train_mask``/``val_mask``/``test_mask``.

A PyG ``Data`` converts through the Python API: ``save_graph(Graph.from_pyg(data), "my-graph")``
(its ``edge_attr`` included).

The graph keeps the user's names for what it numbers: a node table's ids (per node type for typed
tables) and a 1-based edge list's ids as ``node_ids``, a label column's values as
``class_names`` (see :mod:`shardgnn.graph.io`); ``shardgnn partition`` carries them into the
partition directory and ``shardgnn infer`` writes its tables keyed by them.

Labels without a split get a seeded random split of the labelled nodes (``--split``). Every
problem (a missing column, an edge naming an unknown node, a feature matrix of the wrong length,
a feature cell that is not a number, a ragged table row, an existing ``--out``) is a
:class:`~shardgnn.errors.DatasetError` or :class:`~shardgnn.errors.ConfigError` naming the file
and the fix; nothing is dropped silently (text columns left out of the features are named in a
warning).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import check_output_path
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.csr import Graph, as_node_ids, label_kind_problem, label_problem
from shardgnn.graph.edgelist import (
    NPY_FORMAT,
    BinaryFileError,
    format_base,
    header_line,
    load_edge_array,
    load_edge_list,
    parse_numeric_table,
    read_text_bytes,
    read_text_head,
    without_header,
)
from shardgnn.graph.io import (
    GRAPH_FORMAT,
    GRAPH_SET_FORMAT,
    TYPED_GRAPH_FORMAT,
    directory_format,
    load_npy,
    save_graph,
)
from shardgnn.graph.split import NONFINITE_POLICIES, check_finite_features
from shardgnn.graph.typed import TypedGraph, save_typed_graph
from shardgnn.options import changed_settings, check_choices, check_types, invalid, option

SPLITS = ("train", "val", "test")
_TABLE_SUFFIXES = (".parquet", ".pq")
_EVERY_MODE = ("out", "name", "overwrite", "split", "seed")
_TYPED_READS = (
    *_EVERY_MODE, "nonfinite", "node_tables", "edge_tables", "target_type", "id_col", "label_col",
    "label_kind", "split_col", "src_col", "dst_col",
)  # fmt: skip
"""what ``--node-tables``/``--edge-tables`` read; any other setting is refused"""
_MOLECULES_READS = (*_EVERY_MODE, "molecules", "smiles_col", "label_col", "label_kind")
"""what ``--molecules`` reads; any other setting is refused"""
_NPZ_READS = (*_EVERY_MODE, "npz", "label_kind", "symmetric", "nonfinite")
"""what ``--npz`` reads; any other setting is refused"""
_NODE_TABLE_COLUMNS = ("id_col", "label_col", "split_col", "feature_cols")
_EDGE_TABLE_COLUMNS = ("src_col", "dst_col", "weight_col", "edge_feature_cols")
_NODE_TABLE_READS = (
    *_EVERY_MODE, "edges", "nodes", *_NODE_TABLE_COLUMNS, *_EDGE_TABLE_COLUMNS, "label_kind",
    "symmetric", "nonfinite",
)  # fmt: skip
"""what ``--edges`` with ``--nodes`` reads; any other setting is refused"""


@dataclasses.dataclass(kw_only=True)
class ConvertConfig:
    """``shardgnn convert``: inputs, column names and the output directory."""

    out: str = option(
        metavar="DIR",
        help="the graph directory to write (train it with the dataset spec graph:DIR)",
    )
    edges: str | None = option(
        None,
        metavar="FILE",
        help="edges: a text edge list (u v [weight] per line; whitespace or CSV; .gz), a "
        "MatrixMarket .mtx or Graphs.jl .jlg (1-based by their format), an .npy [E, 2], or a "
        "table (.csv/.tsv with a header, or .parquet) with --src-col/--dst-col",
    )
    nodes: str | None = option(
        None,
        metavar="FILE",
        help="node table (.csv/.tsv with a header, or .parquet): --id-col, optionally --label-col, "
        "--split-col and feature columns",
    )
    node_tables: tuple[str, ...] = option(
        (),
        metavar="TYPE=FILE,...",
        help="typed graph: one node table per node type (.csv/.tsv with a header, or .parquet): "
        "--id-col and feature columns (a type with none is featureless), and on --target-type "
        "--label-col/--split-col",
    )
    edge_tables: tuple[str, ...] = option(
        (),
        metavar="SRC/REL/DST=FILE,...",
        help="typed graph: one edge table per relation, e.g. author/writes/paper=writes.csv; "
        "--src-col names ids of SRC's table, --dst-col ids of DST's",
    )
    target_type: str | None = option(
        None,
        metavar="TYPE",
        help="typed graph: the node type whose labels and splits are read (unset: the only node "
        "table with a --label-col column)",
    )
    npz: str | None = option(
        None,
        metavar="FILE.npz",
        help="an archive of arrays: edge_index [2, E] (or src, dst), x (or feat), y (or label), "
        "and train/val/test ids (*_idx) or masks (*_mask)",
    )
    molecules: str | None = option(
        None,
        metavar="FILE.csv",
        help="a graph set: one molecule per row of a CSV, its SMILES in --smiles-col (parsed by "
        "RDKit: atoms are nodes, bonds edges with features), its label in --label-col "
        "(--label-kind class or regression); split at random by --split and --seed",
    )
    smiles_col: str = option("smiles", help="--molecules: the SMILES column")
    features: str | None = option(
        None, metavar="FILE", help="feature matrix, one row per node (.npy or .csv)"
    )
    labels: str | None = option(
        None,
        metavar="FILE",
        help="one integer label per node, -1 for unlabelled (.npy, or text/.csv)",
    )
    label_kind: str = option(
        "class",
        metavar="KIND",
        help="what --labels (an --npz archive's y, or a node table's --label-col columns) "
        "holds: one class per node (class), a row "
        "of 0/1 per node (multilabel), a row of real targets per node (regression), or several "
        "tasks side by side (multitask:NAME=KIND/WIDTH*WEIGHT,..., e.g. "
        "multitask:topic=class/7,tags=multilabel/20,views=regression*0.5: a class task takes "
        "one column of class ids); NaN marks an unknown entry",
    )
    train: str | None = option(
        None, metavar="FILE", help="training node ids (.npy, text/.csv) or a boolean .npy mask"
    )
    val: str | None = option(None, metavar="FILE", help="validation node ids or mask (as --train)")
    test: str | None = option(None, metavar="FILE", help="test node ids or mask (as --train)")
    num_nodes: int | None = option(
        None,
        metavar="N",
        help="edge list: the node count, when nodes no edge names (isolated nodes) come after the "
        "largest id; --features and --labels then have N rows (unset: the largest id + 1)",
    )
    split: tuple[float, ...] = option(
        (0.6, 0.2, 0.2),
        metavar="TRAIN,VAL,TEST",
        help="fractions of a random split of the labelled nodes, used when no split is given",
    )
    seed: int = option(0, help="seed of the random split")
    base: str = option(
        "0",
        choices=("0", "1", "auto"),
        help=(
            "the first node id in text edge lists and split files: 0, 1, or auto (1 iff the "
            "smallest edge-list id is 1)"
        ),
    )
    symmetric: bool = option(False, help="add the reverse of every edge (an undirected graph)")
    id_col: str = option("id", help="node table: the node id column (node ids may be any values)")
    label_col: str = option(
        "label",
        metavar="COL[,COL...]",
        help="node table: the label column (absent: no labels); with a --label-kind other than "
        "class, the label table's columns, comma-separated (0/1 per label, real targets, or "
        "several tasks' columns side by side; an empty cell is unknown)",
    )
    split_col: str = option(
        "split", help="node table: the split column, train/val/test per node (absent: none)"
    )
    feature_cols: tuple[str, ...] | None = option(
        None,
        metavar="COL,...",
        help="node table: the feature columns (unset: every other numeric column)",
    )
    src_col: str = option("src", help="edge table: the source node column")
    dst_col: str = option("dst", help="edge table: the destination node column")
    weight_col: str | None = option(None, help="edge table: an edge weight column")
    edge_feature_cols: tuple[str, ...] | None = option(
        None,
        metavar="COL,...",
        help="edge table: the edge feature columns (unset: the edges carry no features; "
        "--model gine reads them)",
    )
    nonfinite: str = option(
        "error",
        choices=NONFINITE_POLICIES,
        help="NaN or infinite feature values (node and edge features; an empty feature cell of a "
        "table is NaN): refused, naming the file and the first row (error), or replaced by 0 "
        "with a warning (zero)",
    )
    name: str | None = option(
        None, help="the dataset name recorded in the graph (unset: the output folder's name)"
    )
    overwrite: bool = option(False, help="replace an existing graph directory")

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.num_nodes is not None and self.num_nodes < 1:
            raise invalid(self, "num_nodes", "must be >= 1")
        if self.num_nodes is not None and (self.node_tables or self.npz or self.nodes):
            raise invalid(
                self,
                "num_nodes",
                "applies to --edges without --nodes; drop it (a node table or an .npz archive "
                "gives the node count itself)",
            )
        if (problem := label_kind_problem(self.label_kind)) is not None:
            raise invalid(self, "label_kind", problem)
        if "" in _label_columns(self):
            raise invalid(self, "label_col", "an entry is empty; give comma-separated column names")
        if self.node_tables or self.edge_tables:
            if not (self.node_tables and self.edge_tables):
                raise ConfigError(
                    "a typed graph needs both --node-tables TYPE=FILE,... and --edge-tables "
                    "SRC/REL/DST=FILE,..."
                )
            if self.edges or self.npz or self.nodes or self.features or self.labels:
                raise ConfigError(
                    "--node-tables/--edge-tables describe a whole typed graph: drop --edges, "
                    "--nodes, --npz, --features and --labels"
                )
            self._refuse_unread(
                _TYPED_READS,
                "a typed graph (--node-tables/--edge-tables: a node table's features are its "
                "numeric columns; its edges carry no weights or features, and training adds "
                "every relation's reverse itself)",
            )
            return
        if self.target_type is not None:
            raise ConfigError("--target-type names a node type of --node-tables; give those")
        if self.molecules is not None:
            if self.edges or self.npz or self.nodes or self.features or self.labels:
                raise ConfigError(
                    "--molecules describes a whole graph set: drop --edges, --nodes, --npz, "
                    "--features and --labels"
                )
            if self.label_kind not in ("class", "regression"):
                raise invalid(self, "label_kind", "a molecule's label is class or regression")
            self._refuse_unread(
                _MOLECULES_READS, "--molecules (RDKit gives the atoms' and bonds' features)"
            )
            return
        if changed_settings(self, ("smiles_col",)):
            raise ConfigError(
                "--smiles-col names a column of --molecules FILE; give it, or drop it"
            )
        if self.label_kind != "class" and not (self.labels or self.npz or self.nodes):
            raise ConfigError(
                "--label-kind describes the rows of --labels FILE, of an --npz archive's y or of "
                "a node table's --label-col columns; give one, or drop --label-kind"
            )
        if (self.edges is None) == (self.npz is None):
            raise ConfigError(
                "give the edges once: --edges FILE (with optional --nodes, --features, --labels, "
                "--train/--val/--test) or --npz FILE"
            )
        if self.npz is not None and self.nodes is not None:
            raise ConfigError(
                "--nodes describes the nodes of an --edges table; an --npz archive holds its own"
            )
        if self.nodes is not None and (
            self.features or self.labels or any(getattr(self, s) for s in SPLITS)
        ):
            raise ConfigError(
                "with --nodes, features, labels and splits come from the node table's columns; "
                "drop --features/--labels/--train/--val/--test (or drop --nodes)"
            )
        if (
            len(self.split) != 3
            or min(self.split) < 0
            or not 0 < sum(self.split) <= 1 + 1e-9
            or self.split[0] <= 0
        ):
            raise invalid(
                self,
                "split",
                "three non-negative fractions train,val,test with a positive train "
                "fraction, summing to at most 1 (e.g. 0.6,0.2,0.2)",
            )
        if self.npz is not None:
            self._refuse_unread(
                _NPZ_READS, "an --npz archive (it holds the edges, features, labels and splits)"
            )
        elif self.nodes is not None:
            self._refuse_unread(_NODE_TABLE_READS, "--edges with a node table (--nodes)")
        elif given := changed_settings(self, _NODE_TABLE_COLUMNS):
            raise ConfigError(
                f"{', '.join(given)} name{'s' if len(given) == 1 else ''} columns of a node "
                "table: give one (--nodes FILE), or drop " + ("it" if len(given) == 1 else "them")
            )

    def _refuse_unread(self, reads: tuple[str, ...], what: str) -> None:
        """Refuse, in one line, every setting given that ``what`` does not read (``reads``)."""
        names = tuple(f.name for f in dataclasses.fields(self) if f.name not in reads)
        if given := changed_settings(self, names):
            verb, them = ("does", "it") if len(given) == 1 else ("do", "them")
            raise ConfigError(f"{', '.join(given)} {verb} not apply to {what}; drop {them}")


def convert(config: ConvertConfig) -> Any:
    """Build the graph ``config`` describes and write it to ``config.out``; return it."""
    _check_out(config)
    name = config.name or Path(config.out).expanduser().resolve().name
    if config.molecules is not None:
        from shardgnn.graph.graphset import save_graphset
        from shardgnn.graph.graphset_data import molecules

        graphs = molecules(
            config.molecules, smiles=config.smiles_col, target=config.label_col,
            task=config.label_kind, seed=config.seed, split=config.split[:2], name=name,
        )  # fmt: skip
        save_graphset(graphs, Path(config.out).expanduser(), overwrite=config.overwrite)
        return graphs
    if config.node_tables:
        typed = _from_typed_tables(config, name)
        save_typed_graph(typed, Path(config.out).expanduser(), overwrite=config.overwrite)
        return typed
    if config.npz is not None:
        graph = _from_npz(Path(config.npz), name, config.label_kind, config.nonfinite)
    elif config.nodes is not None or _is_table(Path(config.edges)):  # type: ignore[arg-type]
        graph = _from_tables(config, name)
    else:
        if given := changed_settings(config, _EDGE_TABLE_COLUMNS):
            raise ConfigError(
                f"{', '.join(given)} name{'s' if len(given) == 1 else ''} columns of an edge "
                f"table, and {config.edges} is a plain edge list (no header line: u v [weight] "
                "per line); give the edges as a table (a CSV with a header: src,dst,<columns>) "
                "or drop " + ("it" if len(given) == 1 else "them")
            )
        graph = _from_edge_list(config, name)
    graph = _finite(graph, config)
    if config.symmetric:
        graph = graph.symmetrize()
    graph = _with_split(graph, config)
    save_graph(graph, Path(config.out).expanduser(), overwrite=config.overwrite)  # validates it
    return graph


def _finite(graph: Graph, config: ConvertConfig) -> Graph:
    """``graph`` with its node features checked for NaN/inf (``--nonfinite``: refused naming the
    file and row they came from, or replaced by 0). Edge weights and features are checked where
    they are read (:func:`_finite_weights`), in the input's edge order (the graph holds them in
    CSR order)."""
    fields: dict[str, Any] = {}
    if graph.x is not None:
        node_source = config.npz or config.nodes or config.features
        fields["x"] = check_finite_features(graph.x, node_source, config.nonfinite)
    return dataclasses.replace(graph, **fields) if fields else graph


def _finite_weights(weight: np.ndarray | None, source: str | Path) -> np.ndarray | None:
    """``weight`` if every edge weight is finite: a NaN weight has no replacement that keeps the
    graph's meaning, so it is refused whatever ``--nonfinite`` says."""
    if weight is not None and not np.isfinite(weight).all():
        bad = int((~np.isfinite(weight)).sum())
        raise DatasetError(
            f"{bad} edge weights are NaN or infinite (an empty weight cell is NaN)",
            source,
            "give every edge a finite weight, or drop the weights",
        )
    return weight


def _check_out(config: ConvertConfig) -> None:
    """Refuse an existing ``--out`` before any work; ``--overwrite`` replaces only a graph
    directory (or an empty folder), never another folder or a file."""
    out = Path(config.out).expanduser()
    if not (out.exists() or out.is_symlink()):
        check_output_path(out, "--out", folder=True)  # under a file, in /proc...
        return
    if not out.is_dir() or (any(out.iterdir()) and not _is_graph_dir(out)):
        raise ConfigError(
            f"--out {config.out}: already exists and is not a graph directory; choose another "
            "--out (a new folder)"
        )
    if not config.overwrite:
        raise ConfigError(
            f"--out {config.out}: the folder already exists; choose another --out, or pass "
            "--overwrite to replace it"
        )


def _is_graph_dir(path: Path) -> bool:
    return directory_format(path) in (GRAPH_FORMAT, TYPED_GRAPH_FORMAT, GRAPH_SET_FORMAT)


# -------------------------------------------------------------------------------- edge list + files
def _from_edge_list(config: ConvertConfig, name: str) -> Graph:
    path = Path(config.edges)  # type: ignore[arg-type]
    base: int | str = config.base if config.base == "auto" else int(config.base)
    if path.suffix == ".npy":
        graph, base = load_edge_array(path, base)
        graph.name = name
    else:
        graph = load_edge_list(path, base=base, symmetric=False)
        graph.name = name
        fixed = format_base(path)  # .jlg, .mtx: split files number nodes as the edges do
        if fixed is not None:
            base = fixed
        elif base == "auto":
            base = 1 if _smallest_id(path) == 1 else 0
    num_nodes = graph.num_nodes
    if config.num_nodes is not None:
        if num_nodes > config.num_nodes:
            raise DatasetError(
                f"names node {num_nodes - 1 + int(base):,}, beyond --num-nodes "
                f"{config.num_nodes:,} (ids {int(base)}..{config.num_nodes - 1 + int(base):,})",
                path,
                "raise --num-nodes to the node count, or leave it unset",
            )
        num_nodes = config.num_nodes
    x = y = None
    if config.features is not None:
        x = _read_array(Path(config.features), np.float32, "features")
        x = x.reshape(-1, 1) if x.ndim == 1 else x
        _node_count(num_nodes, x.shape[0], Path(config.features), "feature rows", config)
    if config.labels is not None:
        y = _read_array(Path(config.labels), np.float64, "labels")
        y = _labels(y, config.label_kind, Path(config.labels))
        _node_count(num_nodes, y.shape[0], Path(config.labels), "labels", config)
    if x is not None and y is not None and x.shape[0] != y.shape[0]:
        raise DatasetError(
            f"{y.shape[0]:,} labels but {x.shape[0]:,} feature rows",
            config.labels,
            "give one label and one feature row per node",
        )
    graph = _resize(graph, num_nodes)
    splits = {
        s: _read_split(Path(getattr(config, s)), num_nodes, int(base), s)
        for s in SPLITS
        if getattr(config, s) is not None
    }
    return dataclasses.replace(
        graph,
        x=x,
        y=y,
        num_classes=_num_classes(y) if config.label_kind == "class" else 0,
        label_kind=config.label_kind,
        node_ids=_numbered_ids(num_nodes, int(base)),
        **{f"{s}_idx": idx for s, idx in splits.items()},
    )


def _numbered_ids(num_nodes: int, base: int) -> np.ndarray | None:
    """The file's own ids of nodes numbered from ``base`` (None for 0: node ``i`` is id ``i``)."""
    return None if base == 0 else np.arange(num_nodes, dtype=np.int64) + base


def _smallest_id(path: Path) -> int:
    values, _ = parse_numeric_table(read_text_bytes(path), path, np.float64)
    return int(values[:, :2].min()) if values.size else 0


def _node_count(num_nodes: int, rows: int, path: Path, what: str, config: ConvertConfig) -> None:
    """A per-node file has one row per node: the edge list's nodes, or ``--num-nodes``. Isolated
    nodes (rows beyond the largest edge-list id) are added only when ``--num-nodes`` asks."""
    if rows == num_nodes:
        return
    if config.num_nodes is not None:
        raise DatasetError(
            f"{rows:,} {what} for --num-nodes {num_nodes:,}",
            path,
            f"give one row per node ({num_nodes:,} rows), or set --num-nodes to the node count",
        )
    if rows < num_nodes:
        raise DatasetError(
            f"{rows:,} {what}, but the edges name node {num_nodes - 1:,}",
            path,
            "give one row per node, for every node the edges name",
        )
    raise DatasetError(
        f"{rows:,} {what}, but the edge list {config.edges} names {num_nodes:,} nodes",
        path,
        f"if the extra rows are nodes without edges, pass --num-nodes {rows} to add them as "
        "isolated nodes; otherwise drop the extra rows",
    )


def _resize(graph: Graph, num_nodes: int) -> Graph:
    """The graph with isolated nodes appended up to ``num_nodes`` (nodes no edge names)."""
    if num_nodes == graph.num_nodes:
        return graph
    indptr = np.concatenate(
        [graph.indptr, np.full(num_nodes - graph.num_nodes, graph.indptr[-1], np.int64)]
    )
    return dataclasses.replace(graph, indptr=indptr)


def _read_array(path: Path, dtype: Any, what: str) -> np.ndarray:
    """An ``.npy`` (no pickle; known by its suffix or its content) or a numeric text/CSV table
    (a header line is skipped)."""
    data = None
    if path.suffix != ".npy":
        try:
            data = read_text_bytes(path)
        except BinaryFileError as exc:
            if exc.kind != NPY_FORMAT:
                raise
    if data is None:  # memory-mapped: a feature matrix larger than memory is copied, not loaded
        array = load_npy(path, mmap=True)
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise DatasetError(f"holds {array.dtype} values; {what} must be numbers", path)
        return array.astype(dtype, copy=False)
    data, first_line = without_header(data)
    values, _ = parse_numeric_table(data, path, np.float64, first_line=first_line)
    if values.size == 0:
        raise DatasetError(f"holds no {what}", path)
    return values.astype(dtype, copy=False)


def _labels(y: np.ndarray, label_kind: str, path: Path) -> np.ndarray:
    """The labels of ``label_kind`` read from ``path``: one integer per node (``class``) or a
    float32 ``[N, W]`` table (a 1-D file is one column), checked as the graph checks them."""
    if label_kind == "class":
        return _integer_labels(y.reshape(-1), path)
    table = np.ascontiguousarray(y.reshape(len(y), -1) if y.ndim == 1 else y, dtype=np.float32)
    problem = label_problem(table, label_kind, 0, table.shape[0])
    if problem is not None:
        raise DatasetError(problem[0], path, problem[1])
    return table


def _integer_labels(y: np.ndarray, path: Path | str) -> np.ndarray:
    if not np.all(np.isfinite(y)) or np.any(y != np.floor(y)) or (y.size and y.min() < -1):
        raise DatasetError(
            "labels must be integers >= 0 (-1 for unlabelled nodes)",
            path,
            "map class names to 0..C-1 first, or use a node table (--nodes), whose labels may be "
            "any values",
        )
    return y.astype(np.int64)


def _num_classes(y: np.ndarray | None) -> int:
    return 0 if y is None or not (y >= 0).any() else int(y.max()) + 1


def _read_split(path: Path, num_nodes: int, base: int, split: str) -> np.ndarray:
    if path.suffix == ".npy":
        array = load_npy(path)
        if array.dtype == np.bool_:
            if array.shape != (num_nodes,):
                raise DatasetError(
                    f"a boolean mask of shape {list(array.shape)} for {num_nodes:,} nodes",
                    path,
                    "give one entry per node, or the node ids of the split",
                )
            return np.flatnonzero(array).astype(np.int64)
    ids = _read_array(path, np.float64, f"{split} node ids").reshape(-1)
    if not np.all(ids == np.floor(ids)):
        raise DatasetError(f"{split} node ids must be integers", path)
    ids = ids.astype(np.int64) - base
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        raise DatasetError(
            f"{split} node ids must lie in [{base}, {num_nodes - 1 + base}]; found "
            f"[{ids.min() + base}, {ids.max() + base}]",
            path,
            "use the node numbering of the edge list (--base says where it starts)",
        )
    return np.unique(ids)


# ------------------------------------------------------------------------------------------- tables
def _is_table(path: Path) -> bool:
    """A Parquet file, or a CSV whose first line is a header (text edge lists have none)."""
    if path.suffix.lower() in _TABLE_SUFFIXES:
        return True
    if path.suffix.lower() == ".npy" or not path.is_file():
        return False
    return header_line(read_text_head(path)) is not None


def _read_table(path: Path) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise DatasetError(
            "reading tables needs pandas (and pyarrow for Parquet)",
            path,
            "pip install pandas pyarrow",
        ) from None
    if not path.is_file():
        raise DatasetError("file is missing", path)
    try:
        if path.suffix.lower() in _TABLE_SUFFIXES:
            return pd.read_parquet(path)
        separator, leading_lines = _text_table_layout(path)
        with warnings.catch_warnings():
            # index_col=False: a first row longer than the header is an error (pandas would
            # otherwise take its first cells as row labels and shift every column)
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(
                path,
                sep=separator,
                comment="#",
                skiprows=leading_lines,
                skipinitialspace=True,
                index_col=False,
            )
    except ImportError as exc:
        raise DatasetError(f"cannot read Parquet ({exc})", path, "pip install pyarrow") from None
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:
        match = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        ragged = (
            tuple(map(int, match.groups()))
            if match
            else _long_first_row(path, separator, leading_lines)
        )
        if ragged is None:
            raise DatasetError(
                f"not a readable table ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})",
                path,
            ) from None
        expected, line, found = ragged
        raise DatasetError(
            f"line {line} has {found} fields but the header has {expected}",
            path,
            f"give every row one cell per header column ({_SEPARATOR_IN_A_CELL[separator]}), or "
            "name the extra column in the header",
        ) from None
    except Exception as exc:  # pandas/pyarrow raise many types for a damaged file
        raise DatasetError(
            f"not a readable table ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})", path
        ) from None


# how a cell may hold its table's separator, by separator (for the ragged-row fix)
_SEPARATOR_IN_A_CELL = {
    ",": "quote a cell that holds a comma",
    "\t": "quote a cell that holds a tab",
    r"\s+": "the cells are separated by spaces, so a cell cannot hold one",
}


def _text_table_layout(path: Path) -> tuple[str, int]:
    """A text table's cell separator and the comment lines before its header (pandas skips only
    ``#`` comments, and only after the header). The separator is a tab in a ``.tsv``; otherwise
    the header line tells it: a comma, else a tab, else runs of spaces between several names (as
    edge lists may use; not in a ``.csv``, whose one column's name may hold a space)."""
    header = header_line(read_text_head(path))
    leading_lines = 0 if header is None else header[1] - 1
    suffix = Path(path.name.removesuffix(".gz")).suffix.lower()
    line = b"" if header is None else header[0]
    if suffix == ".tsv" or (b"\t" in line and b"," not in line):
        return "\t", leading_lines
    if b"," in line or suffix == ".csv" or len(line.split()) < 2:
        return ",", leading_lines
    return r"\s+", leading_lines


def _long_first_row(path: Path, separator: str, leading_lines: int) -> tuple[int, int, int] | None:
    """``(header fields, line, fields)`` of the first data row when it is longer than the header
    (for the error message only), in a table laid out as :func:`_text_table_layout` found."""
    import csv

    rows = []
    text = read_text_bytes(path).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        if number > leading_lines and line.strip():
            if separator == r"\s+":
                cells = line.split()
            else:
                cells = next(csv.reader([line], delimiter=separator, skipinitialspace=True))
            rows.append((number, len(cells)))
            if len(rows) == 2:
                return (rows[0][1], *rows[1]) if rows[1][1] > rows[0][1] else None
    return None


def _column(table: Any, column: str, path: Path, flag: str) -> Any:
    if column not in table.columns:
        raise _no_column(table, column, path, flag)
    return table[column]


def _no_column(table: Any, column: Any, path: Path, flag: str) -> DatasetError:
    """A missing column, the table's columns, and a close match (a typo) if there is one."""
    names = [str(c) for c in table.columns]
    if len(names) == 1 and str(column) in names[0].split():
        # a .csv is read with commas whatever its header looks like (one column's name may hold
        # a space), so a space-separated one is a single column named by its whole header
        return DatasetError(
            f"has one column, {names[0]!r}, and no column {column!r} (named by {flag}): its "
            "header separates the names by spaces, but a .csv's cells are separated by commas",
            path,
            "separate the cells with commas, or give the file a .txt suffix (cells separated by "
            "spaces)",
        )
    close = difflib.get_close_matches(str(column), names, n=1)
    shown = ", ".join(names[:30]) + (f", ... ({len(names) - 30} more)" if len(names) > 30 else "")
    return DatasetError(
        f"has no column {column!r} (named by {flag}"
        + (f"; did you mean {close[0]!r}?" if close else "")
        + f"); its columns: {shown}",
        path,
        (
            f"replace {column!r} by {close[0]!r} in {flag}"
            if flag == "--feature-cols"
            else f"{flag} {close[0]}"
        )
        if close
        else f"name one of its columns with {flag}",
    )


_DEFAULT_COLUMNS = {"label_col": "label", "split_col": "split"}


def _check_named_columns(table: Any, path: Path, config: ConvertConfig) -> None:
    """A --label-col/--split-col the user set must name a column (a typo would otherwise write a
    graph without labels or splits); the default one may be absent."""
    for field, default in _DEFAULT_COLUMNS.items():
        column, flag = getattr(config, field), "--" + field.replace("_", "-")
        if field == "label_col":
            column = _label_columns(config)[0]
        if column in table.columns:
            continue
        if column != default:
            raise _no_column(table, column, path, flag)
        close = difflib.get_close_matches(column, [str(c) for c in table.columns], n=1)
        if close:
            warnings.warn(
                f"{path}: no column {column!r}, so no {field[:-4]}s; if column {close[0]!r} "
                f"holds them, pass {flag} {close[0]}",
                stacklevel=3,
            )


def _check_target_columns(
    config: ConvertConfig,
    target: str | None,
    labelled: dict[str, tuple[Path, Any]],
    node_files: dict[str, Path],
) -> None:
    """Typed tables: a --target-type whose table lacks the label column, or a --label-col or
    --split-col that no table read has, is refused (rather than a graph without labels)."""
    if target is not None and target in labelled:
        _check_named_columns(labelled[target][1], labelled[target][0], config)
    elif target is not None:
        path = node_files[target]
        raise _no_column(_read_table(path), _label_columns(config)[0], path, "--label-col")
    elif config.label_col != _DEFAULT_COLUMNS["label_col"] or (
        config.split_col != _DEFAULT_COLUMNS["split_col"]
    ):
        raise ConfigError(
            f"no node table has a {config.label_col!r} column (--label-col); name the label "
            "column of one table (and --target-type its type), or drop --label-col/--split-col"
        )


def _numbers(column: Any, name: Any, path: Path, what: str, fix: str) -> np.ndarray:
    """The float64 values of a table column (missing cells NaN); a cell that is not a number is
    refused, naming its row and value."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype

    if _numeric(column) or is_bool_dtype(column.dtype):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)
    numbers = pd.to_numeric(column, errors="coerce")
    bad = (column.notna() & numbers.isna()).to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetError(
            f"{what} column {name!r} holds {column.iloc[row]!r}, not a number, at data row "
            f"{row + 1} (1-based, the header not counted)",
            path,
            fix,
        )
    return numbers.to_numpy(dtype=np.float64, na_value=np.nan)


def _feature_columns(table: Any, used: set, path: Path, typed: bool = False) -> list:
    """The feature columns when --feature-cols is unset: every other numeric column. A column of
    numbers but for some cells is refused (naming the first); text columns are left out, and a
    warning names them. ``typed``: a table of --node-tables (which --feature-cols does not
    name)."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype

    columns, left_out = [], []
    for column in table.columns:
        values = table[column]
        if column in used:
            continue
        if _numeric(values):
            columns.append(column)
            continue
        present = int(values.notna().sum())
        numbers = int(pd.to_numeric(values, errors="coerce").notna().sum())
        if is_bool_dtype(values.dtype) or not present or 2 * numbers < present:
            left_out.append(column)
            continue
        _numbers(  # mostly numbers: raises at the first cell that is not one
            values,
            column,
            path,
            "feature",
            "fix or empty that cell"
            + (
                ""
                if typed
                else ", or name the feature columns with --feature-cols (leaving it out)"
            ),
        )
        columns.append(column)
    if left_out:
        warnings.warn(
            f"{path}: left out non-numeric column(s) {', '.join(map(repr, left_out))} (not "
            "features)" + ("" if typed else "; --feature-cols names the feature columns"),
            stacklevel=3,
        )
    return columns


def _features(table: Any, columns: list, path: Path, flag: str = "--feature-cols") -> np.ndarray:
    """The float32 feature matrix of ``columns`` (each must exist and hold numbers; ``flag``:
    the option that named them)."""
    for column in columns:
        _column(table, column, path, flag)
    return np.ascontiguousarray(
        np.stack(
            [
                _numbers(
                    table[column],
                    column,
                    path,
                    "feature",
                    f"fix or empty that cell, or leave the column out of {flag}",
                )
                for column in columns
            ],
            axis=1,
        ),
        dtype=np.float32,
    )


def _from_tables(config: ConvertConfig, name: str) -> Graph:
    edges_path = Path(config.edges)  # type: ignore[arg-type]
    edges = _read_table(edges_path)
    _check_endpoint_columns(edges, edges_path, config)
    src = _column(edges, config.src_col, edges_path, "--src-col").to_numpy()
    dst = _column(edges, config.dst_col, edges_path, "--dst-col").to_numpy()
    weight = None
    if config.weight_col is not None:
        weight = _numbers(
            _column(edges, config.weight_col, edges_path, "--weight-col"),
            config.weight_col,
            edges_path,
            "weight",
            "fix that cell, or leave --weight-col unset",
        ).astype(np.float32)
        weight = _finite_weights(weight, edges_path)
    edge_attr = None
    if config.edge_feature_cols:
        edge_attr = check_finite_features(
            _features(edges, list(config.edge_feature_cols), edges_path, "--edge-feature-cols"),
            edges_path,
            config.nonfinite,
            what="edge feature",
        )
    if config.nodes is None:
        given = [f"--{s}" for s in ("features", "labels", *SPLITS) if getattr(config, s)]
        if given:  # read by the plain edge list path only: refuse rather than drop them
            raise ConfigError(
                f"{'/'.join(given)} with an edge table ({edges_path} has a header line): give "
                "the node data as columns of a node table (--nodes), or the edges as a plain "
                "edge list without a header"
            )
        ids = np.stack([src, dst], axis=1)
        if ids.dtype == object:
            return _named_nodes(ids, config, edges_path, weight, edge_attr, name)
        # No node table: ids are integers, numbered from --base.
        if not np.issubdtype(ids.dtype, np.integer):
            raise DatasetError(
                f"columns {config.src_col}/{config.dst_col} hold {ids.dtype} values",
                edges_path,
                "give integer node ids, or names, or a node table (--nodes) that lists every id",
            )
        offset = (
            (1 if ids.size and ids.min() == 1 else 0) if config.base == "auto" else int(config.base)
        )
        if config.num_nodes is not None and ids.size and ids.max() - offset >= config.num_nodes:
            raise DatasetError(
                f"names node {ids.max()}, beyond --num-nodes {config.num_nodes:,}",
                edges_path,
                "raise --num-nodes to the node count, or leave it unset",
            )
        graph = Graph.from_edge_index(
            ids[:, 0] - offset,
            ids[:, 1] - offset,
            config.num_nodes,
            edge_weight=weight,
            edge_attr=edge_attr,
            name=name,
        )
        return dataclasses.replace(graph, node_ids=_numbered_ids(graph.num_nodes, offset))
    nodes_path = Path(config.nodes)
    nodes = _read_table(nodes_path)
    index = _node_index(nodes, config.id_col, nodes_path)
    src_i, dst_i = (
        _map_ids(values, index, edges_path, column, nodes_path)
        for values, column in ((src, config.src_col), (dst, config.dst_col))
    )
    num_nodes = len(index)
    _check_named_columns(nodes, nodes_path, config)
    fields: dict[str, Any] = {"node_ids": as_node_ids(nodes[config.id_col])}
    used = {config.id_col}
    if _has_labels(nodes, config):
        fields.update(_node_table_labels(nodes, nodes_path, config))
        used.update(_label_columns(config))
    if config.split_col in nodes.columns:
        fields.update(_table_splits(nodes[config.split_col], nodes_path, config.split_col))
        used.add(config.split_col)
    columns = (
        list(config.feature_cols)
        if config.feature_cols
        else _feature_columns(nodes, used, nodes_path)
    )
    if columns:
        fields["x"] = _features(nodes, columns, nodes_path)
    return Graph.from_edge_index(
        src_i, dst_i, num_nodes, edge_weight=weight, edge_attr=edge_attr, name=name, **fields
    )


def _check_endpoint_columns(edges: Any, path: Path, config: ConvertConfig) -> None:
    """A text edge table that names neither endpoint column and holds two or three columns,
    none close to them: likely an edge list whose first edge (``alice bob``, names) was taken for
    its header; both readings are named. (A typo in a column's name is :func:`_no_column`'s, as
    is a Parquet table's missing column: its names are no line of the file.)"""
    if path.suffix.lower() in _TABLE_SUFFIXES:  # a Parquet table's columns have names
        return
    names = [str(c) for c in edges.columns]
    wanted = (config.src_col, config.dst_col)
    if any(c in names or difflib.get_close_matches(c, names, n=1) for c in wanted):
        return
    if len(names) in (2, 3):
        raise DatasetError(
            f"has no columns {wanted[0]!r} and {wanted[1]!r} (named by --src-col and "
            f"--dst-col): its first line, {', '.join(names)}, was read as the names of its "
            "columns",
            path,
            f"if that line is an edge, put a header line above it naming the columns "
            f"({wanted[0]} and {wanted[1]}: node ids may be names); if it names them, give "
            f"--src-col {names[0]} --dst-col {names[1]}",
        )


def _named_nodes(
    ids: np.ndarray,
    config: ConvertConfig,
    path: Path,
    weight: np.ndarray | None,
    edge_attr: np.ndarray | None,
    name: str,
) -> Graph:
    """An edge table whose ids are names (``alice,bob``) and no node table: the nodes are the
    names the edges use, numbered in the order the table first names them (a source before its
    destination), and keep their names as their ids (predictions and embeddings carry them)."""
    import pandas as pd

    if config.base != "0":
        raise ConfigError(
            f"--base {config.base} does not apply: {path}'s node ids are names, numbered in the "
            "order the edges name them; drop it"
        )
    missing = pd.isna(ids).any(axis=1)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise DatasetError(
            f"row {row + 1} has no {config.src_col if pd.isna(ids[row, 0]) else config.dst_col} "
            "(an empty cell)",
            path,
            "give every edge both of its node ids, or drop the row",
        )
    # as text: a column of numbers beside one of names must name node 1 alike in both
    cells = pd.Series(ids.reshape(-1)).astype(str)  # row-major: each edge's source first
    codes, names = pd.factorize(cells)
    num_nodes = len(names)
    if config.num_nodes is not None and config.num_nodes != num_nodes:
        raise ConfigError(
            f"--num-nodes {config.num_nodes:,} does not apply: {path}'s edges name "
            f"{num_nodes:,} nodes, and a node named by no edge has no name; list every node in "
            "a node table (--nodes), or drop --num-nodes"
        )
    codes = codes.reshape(-1, 2)
    return Graph.from_edge_index(
        codes[:, 0],
        codes[:, 1],
        num_nodes,
        edge_weight=weight,
        edge_attr=edge_attr,
        name=name,
        node_ids=as_node_ids(names),
    )


def _node_index(table: Any, id_col: str, path: Path) -> dict[Any, int]:
    """Row of every node id of a node table (ids of any values, each listed once)."""
    ids = _column(table, id_col, path, "--id-col")
    if ids.duplicated().any():
        raise DatasetError(
            # tolist: the id as written (1 or 'a'), not numpy's repr (np.int64(1))
            f"node id {ids[ids.duplicated()].tolist()[0]!r} appears twice in column {id_col!r}",
            path,
            "list every node once",
        )
    return {value: i for i, value in enumerate(ids.tolist())}


def _named_files(entries: tuple[str, ...], flag: str, example: str) -> dict[str, Path]:
    """``NAME=FILE`` entries as a dict (in the given order)."""
    out: dict[str, Path] = {}
    for entry in entries:
        name, sep, file = entry.partition("=")
        if not sep or not name.strip() or not file.strip():
            raise ConfigError(f"{flag} entry {entry!r} is not NAME=FILE (e.g. {example})")
        if name.strip() in out:
            raise ConfigError(f"{flag} names {name.strip()!r} twice")
        out[name.strip()] = Path(file.strip()).expanduser()
    return out


def _from_typed_tables(config: ConvertConfig, name: str) -> TypedGraph:
    """A typed graph from one node table per type and one edge table per relation."""
    node_files = _named_files(config.node_tables, "--node-tables", "paper=papers.csv")
    edge_files = _named_files(config.edge_tables, "--edge-tables", "author/writes/paper=w.csv")
    counts: dict[str, int] = {}
    index: dict[str, dict[Any, int]] = {}
    node_ids: dict[str, np.ndarray] = {}
    x: dict[str, np.ndarray] = {}
    labelled: dict[str, tuple[Path, Any]] = {}
    used = {config.id_col, *_label_columns(config), config.split_col}
    for node_type, path in node_files.items():
        table = _read_table(path)
        index[node_type] = _node_index(table, config.id_col, path)
        counts[node_type] = len(index[node_type])
        node_ids[node_type] = as_node_ids(table[config.id_col])
        columns = _feature_columns(table, used, path, typed=True)
        if columns:
            x[node_type] = check_finite_features(
                _features(table, columns, path), path, config.nonfinite
            )
        if _has_labels(table, config):
            labelled[node_type] = (path, table)
    target = config.target_type
    if target is None and len(labelled) == 1:
        target = next(iter(labelled))
    elif target is None and len(labelled) > 1:
        raise ConfigError(
            f"node tables of {sorted(labelled)} have a {config.label_col!r} column; name the one "
            "to learn with --target-type"
        )
    elif target is not None and target not in counts:
        raise ConfigError(
            f"--target-type {target}: no node table of that type (types: {', '.join(counts)})"
        )
    _check_target_columns(config, target, labelled, node_files)
    edges: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
    for key, path in edge_files.items():
        relation = tuple(part.strip() for part in key.split("/"))
        if len(relation) != 3 or not all(relation):
            raise ConfigError(
                f"--edge-tables relation {key!r} is not SRC/REL/DST (e.g. author/writes/paper)"
            )
        for node_type in (relation[0], relation[2]):
            if node_type not in counts:
                raise DatasetError(
                    f"relation {key} names node type {node_type!r}, which no node table lists "
                    f"(types: {', '.join(counts)})",
                    path,
                    f"add {node_type}=FILE to --node-tables, or fix the relation's types",
                )
        table = _read_table(path)
        src = _column(table, config.src_col, path, "--src-col").to_numpy()
        dst = _column(table, config.dst_col, path, "--dst-col").to_numpy()
        edges[relation] = (  # type: ignore[index]
            _map_ids(src, index[relation[0]], path, config.src_col, node_files[relation[0]]),
            _map_ids(dst, index[relation[2]], path, config.dst_col, node_files[relation[2]]),
        )
    fields: dict[str, Any] = {"x": x, "name": name, "node_ids": node_ids}
    if target is not None and target in labelled:
        path, table = labelled[target]
        fields.update(_node_table_labels(table, path, config))
        fields["target_type"] = target
        if config.split_col in table.columns:
            fields.update(_table_splits(table[config.split_col], path, config.split_col))
            _refuse_random_split(config, "holds its own split")
        else:
            fields.update(random_split(fields["y"], config.split, config.seed))
    else:
        _refuse_random_split(config, "has no labels to split")
    return TypedGraph.from_typed_edges(counts, edges, **fields)


def _numeric(column: Any) -> bool:
    """Whether a pandas column holds numbers (not text, not booleans)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_numeric_dtype(column.dtype) and not is_bool_dtype(column.dtype)


def _map_ids(
    values: np.ndarray, index: dict[Any, int], path: Path, column: str, nodes_path: Path
) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values.tolist()):
        position = index.get(value)
        if position is None:
            raise DatasetError(
                f"row {i + 1} of column {column!r} names node {value!r}, which the node table does "
                f"not list",
                path,
                f"add it to {nodes_path} or drop the edge",
            )
        out[i] = position
    return out


def _label_columns(config: ConvertConfig) -> list[str]:
    """The node tables' label columns: ``--label-col``; with labels other than classes, the
    comma-separated columns it names (a label table's, in order)."""
    if config.label_kind == "class":
        return [config.label_col]
    return [c.strip() for c in config.label_col.split(",")]


def _has_labels(table: Any, config: ConvertConfig) -> bool:
    """Whether ``table`` holds the labels: its first label column is there (a missing other one
    is refused when they are read)."""
    return _label_columns(config)[0] in table.columns


def _node_table_labels(table: Any, path: Path, config: ConvertConfig) -> dict[str, Any]:
    """``y``, ``num_classes``, ``label_kind`` and ``class_names`` of a node table's label
    column(s): classes of any values (:func:`_table_labels`), or a float32 label table of
    ``--label-kind`` from numeric columns (an empty cell is unknown, NaN)."""
    if config.label_kind == "class":
        y, num_classes, names = _table_labels(table[config.label_col], path)
        return {"y": y, "num_classes": num_classes, "class_names": names}
    columns = _label_columns(config)
    for column in columns:
        if column not in table.columns:
            raise _no_column(table, column, path, "--label-col")
    fix = f"{config.label_kind} labels are numbers; leave a cell empty for an unknown entry"
    y = np.stack([_numbers(table[c], c, path, "label", fix) for c in columns], axis=1)
    y = np.ascontiguousarray(y, dtype=np.float32)
    problem = label_problem(y, config.label_kind, 0, y.shape[0])
    if problem is not None:
        raise DatasetError(f"label columns {columns}: {problem[0]}", path, problem[1])
    return {"y": y, "num_classes": 0, "label_kind": config.label_kind, "class_names": None}


def _table_labels(column: Any, path: Path) -> tuple[np.ndarray, int, tuple[str, ...] | None]:
    """Labels of any values: missing -> -1; integers >= 0 kept; anything else -> sorted distinct
    values numbered 0..C-1. Returns the labels, the class count and the class names (None for
    integer labels: a class is its number)."""
    present = column.notna().to_numpy()
    values = column[present]
    y = np.full(len(column), -1, dtype=np.int64)
    classes: list[str] | None = None
    if _numeric(values) and np.all(
        values.to_numpy(dtype=np.float64) == np.floor(values.to_numpy(dtype=np.float64))
    ):
        y[present] = values.to_numpy().astype(np.int64)
        if (y[present] < -1).any():
            raise DatasetError(
                "integer labels must be >= 0 (-1 or empty for unlabelled nodes)", path
            )
    else:
        classes = sorted(set(values.astype(str).tolist()))
        lookup = {c: i for i, c in enumerate(classes)}
        y[present] = [lookup[v] for v in values.astype(str).tolist()]
    return y, _num_classes(y), None if classes is None else tuple(classes)


def _table_splits(column: Any, path: Path, name: str) -> dict[str, np.ndarray]:
    values = column.fillna("").astype(str).str.strip().str.lower().to_numpy()
    unknown = sorted(set(values) - {"train", "val", "valid", "validation", "test", ""})
    if unknown:
        raise DatasetError(
            f"column {name!r} holds {unknown[:3]}; a split is train, val (or valid) or test, or "
            "empty",
            path,
        )
    return {
        "train_idx": np.flatnonzero(values == "train").astype(np.int64),
        "val_idx": np.flatnonzero(np.isin(values, ("val", "valid", "validation"))).astype(np.int64),
        "test_idx": np.flatnonzero(values == "test").astype(np.int64),
    }


# ---------------------------------------------------------------------------------------------- npz
def _from_npz(path: Path, name: str, label_kind: str = "class", nonfinite: str = "error") -> Graph:
    if not path.is_file():
        raise DatasetError("file is missing", path)
    try:
        archive = np.load(path, allow_pickle=False)
        arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetError(
            f"not a readable .npz archive ({type(exc).__name__}: {exc})",
            path,
            "write it with numpy.savez(path, edge_index=..., x=..., y=...)",
        ) from None
    if "edge_index" in arrays:
        edge_index = arrays["edge_index"]
        if edge_index.ndim != 2 or edge_index.shape[0] != 2:
            raise DatasetError(f"edge_index has shape {list(edge_index.shape)}, not [2, E]", path)
        src, dst = edge_index
    elif "src" in arrays and "dst" in arrays:
        src, dst = arrays["src"], arrays["dst"]
    else:
        raise DatasetError(
            f"holds no edges (arrays: {', '.join(sorted(arrays)) or 'none'})",
            path,
            "store them as edge_index [2, E], or as src and dst",
        )
    # DGL's node-data names (feat, label) are accepted too: the peer benchmarks' graph files
    # (benchmarks/peers/gen_graph.py) use them.
    x, y = (_one_of(arrays, names, path) for names in (("x", "feat"), ("y", "label")))
    num_nodes = max(  # a list: an archive of edges alone has one candidate
        [
            int(max(src.max(initial=-1), dst.max(initial=-1))) + 1,
            *(a.shape[0] for a in (x, y) if a is not None),
        ]
    )
    fields: dict[str, Any] = {"name": name}
    if x is not None:
        fields["x"] = np.ascontiguousarray(x.reshape(len(x), -1), dtype=np.float32)
    if y is not None:
        fields["y"] = _labels(y.astype(np.float64), label_kind, path)
        fields["num_classes"] = _num_classes(fields["y"]) if label_kind == "class" else 0
        fields["label_kind"] = label_kind
    for split in SPLITS:
        if f"{split}_idx" in arrays:
            fields[f"{split}_idx"] = np.unique(arrays[f"{split}_idx"].astype(np.int64))
        elif f"{split}_mask" in arrays:
            fields[f"{split}_idx"] = np.flatnonzero(arrays[f"{split}_mask"].astype(bool)).astype(
                np.int64
            )
    weight, attr = _finite_weights(arrays.get("edge_weight"), path), arrays.get("edge_attr")
    if attr is not None and (attr.ndim not in (1, 2) or attr.shape[0] != src.shape[0]):
        raise DatasetError(
            f"edge_attr has shape {list(attr.shape)}, not [{src.shape[0]}, D] (one row per edge)",
            path,
            "store one feature row per edge, in the order of the edges",
        )
    if attr is not None:
        attr = check_finite_features(attr, path, nonfinite, what="edge feature")
    return Graph.from_edge_index(src, dst, num_nodes, edge_weight=weight, edge_attr=attr, **fields)


def _one_of(arrays: dict[str, np.ndarray], names: tuple[str, ...], path: Path):
    """The array stored under one of ``names`` (None: none of them); two of them is ambiguous."""
    present = [n for n in names if n in arrays]
    if len(present) > 1:
        raise DatasetError(
            f"holds both {' and '.join(present)}", path, f"keep one of them (named {names[0]})"
        )
    return arrays[present[0]] if present else None


# ------------------------------------------------------------------------------------------- splits
def _with_split(graph: Graph, config: ConvertConfig) -> Graph:
    """A random split of the labelled nodes when the graph has labels and no split at all; a
    ``--split``/``--seed`` given for a graph that has its own (or no labels) is refused."""
    if graph.y is None or any(
        getattr(graph, f"{s}_idx") is not None and len(getattr(graph, f"{s}_idx")) for s in SPLITS
    ):
        has = "has no labels to split" if graph.y is None else "holds its own split"
        _refuse_random_split(config, has)
        return graph
    return dataclasses.replace(graph, **random_split(graph.y, config.split, config.seed))


def _refuse_random_split(config: ConvertConfig, has: str) -> None:
    """``--split``/``--seed`` cut a random split of labels that come without one: refused where
    the input ``has`` ("holds its own split", "has no labels to split") otherwise."""
    if given := changed_settings(config, ("split", "seed")):
        raise ConfigError(
            f"{', '.join(given)}: the input {has}, and {' and '.join(given)} "
            f"cut{'s' if len(given) == 1 else ''} a random split of labels given without one; "
            "drop " + ("it" if len(given) == 1 else "them")
        )


def random_split(y: np.ndarray, fractions: tuple[float, ...], seed: int) -> dict[str, np.ndarray]:
    """``train_idx``/``val_idx``/``test_idx``: the labelled nodes (``y >= 0``; of a label table,
    rows with a known entry) shuffled by ``seed`` and cut by ``fractions``, each sorted."""
    y = np.asarray(y)
    known = (y >= 0) if y.ndim == 1 else ~np.isnan(y).all(axis=1)
    labelled = np.random.default_rng(seed).permutation(np.flatnonzero(known))
    ends = np.cumsum([int(round(f * labelled.size)) for f in fractions]).clip(max=labelled.size)
    parts = [np.sort(part) for part in np.split(labelled[: ends[-1]], ends[:-1])]
    return dict(zip(("train_idx", "val_idx", "test_idx"), parts))


__all__ = ["ConvertConfig", "convert"]
