"""Partitioning a graph set: whole graphs per part (a graph is never cut), so each worker holds
a share of the graphs and trains on it data-parallel.

The set's disjoint union is written as any graph is (:func:`~shardgnn.partition.format.
write_partitions`, the standard sections: every part's CSR, node features), its edge features
follow their edges (:class:`~shardgnn.partition.sections.EdgeArraysSection`: ``attr``, the edge
classes ``y`` and each edge's position in the set's CSR, ``ids``), and
:class:`GraphSetSection` adds per part the graphs it holds: their node bounds
(``graph_ptr.npy``), original graph ids, labels and split positions, with
``meta.json["graphset"]``. :func:`load_graph_part` reads one part back as a
:class:`~shardgnn.graph.graphset.GraphSet` of its own graphs.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np

from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.datasets import readable_spec
from shardgnn.graph.graphset import GraphSet
from shardgnn.partition.format import (
    PartitionSet,
    _check_files,
    _load_array,
    part_dir_name,
    write_partitions,
)
from shardgnn.partition.methods import PartitionResult
from shardgnn.partition.metrics import compute_metrics
from shardgnn.partition.sections import (
    ArrayWriter,
    EdgeArraysSection,
    PartRows,
    Relabelled,
    Section,
)

GRAPH_SPLITS = ("train", "val", "test")
METHOD = "whole-graphs"


def assign_graphs(graphs: GraphSet, num_parts: int) -> np.ndarray:
    """int64 ``[G]``: the part of every graph. Within each split (train, val, test, then graphs
    in none), the largest graphs first, each to the part holding the fewest graphs of that split
    so far (ties: the fewest nodes), so parts differ by at most one graph per split and their
    node counts stay close."""
    sizes = np.diff(graphs.graph_ptr)
    part_of = np.full(graphs.num_graphs, -1, dtype=np.int64)
    nodes = np.zeros(num_parts, dtype=np.int64)
    in_split = np.zeros(graphs.num_graphs, dtype=bool)
    groups = []
    for split in GRAPH_SPLITS:
        ids = np.asarray(getattr(graphs, f"{split}_idx"), dtype=np.int64)
        in_split[ids] = True
        groups.append(ids)
    groups.append(np.flatnonzero(~in_split))
    for ids in groups:
        count = np.zeros(num_parts, dtype=np.int64)
        for g in ids[np.argsort(-sizes[ids], kind="stable")]:
            p = int(np.lexsort((nodes, count))[0])
            part_of[g] = p
            count[p] += 1
            nodes[p] += sizes[g]
    return part_of


@dataclasses.dataclass(frozen=True)
class GraphSetSection(Section):
    """The graphs of each part: ``graph_ptr.npy`` (local node bounds), ``graph_ids.npy``
    (original graph ids), ``graph_y.npy`` (labels), ``graph_<split>.npy`` (local positions of
    the part's graphs in each split); ``meta.json["graphset"]``."""

    graphs: GraphSet

    def write_part(self, data: Relabelled, out: ArrayWriter, part: PartRows, info: dict) -> None:
        gs = self.graphs
        graph_of = np.searchsorted(gs.graph_ptr, part.rows, side="right") - 1
        ids = np.unique(graph_of)
        sizes = np.diff(gs.graph_ptr)[ids]
        assert sizes.sum() == len(part.rows), "a graph set's part must hold whole graphs"
        ptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        out.write(f"{part.folder}/graph_ptr.npy", ptr)
        out.write(f"{part.folder}/graph_ids.npy", ids.astype(np.int64))
        if gs.y is not None:
            out.write(f"{part.folder}/graph_y.npy", np.asarray(gs.y)[ids])
        for split in GRAPH_SPLITS:
            local = np.flatnonzero(np.isin(ids, getattr(gs, f"{split}_idx"))).astype(np.int64)
            out.write(f"{part.folder}/graph_{split}.npy", local)
            info[f"num_{split}_graphs"] = int(local.shape[0])
        info["num_graphs"] = int(len(ids))

    def describe(self, data: Relabelled, meta: dict[str, Any]) -> None:
        gs = self.graphs
        meta["graphset"] = {
            "num_graphs": gs.num_graphs,
            "label_kind": gs.label_kind,
            "num_classes": int(gs.num_classes),
            "width": gs.out_width,
            "graph_labels": gs.y is not None,
            "edge_classes": int(gs.edge_classes),
            "edge_label_kind": gs.edge_label_kind,
            "edge_dim": gs.edge_dim,
            "fingerprint": gs.fingerprint(),
            "splits": {s: int(len(getattr(gs, f"{s}_idx"))) for s in GRAPH_SPLITS},
        }


def write_graphset_partitions(
    graphs: GraphSet, num_parts: int, out_dir: str | os.PathLike, **written: Any
) -> tuple[PartitionResult, PartitionSet]:
    """Write ``graphs`` into ``num_parts`` parts of whole graphs (:func:`assign_graphs`);
    ``written``: more :func:`write_partitions` arguments (overwrite, dataset_spec, progress).
    Returns the node assignment with its method and seconds, and the directory."""
    if num_parts > graphs.num_graphs:  # as a graph's parts may not outnumber its nodes
        raise ConfigError(
            f"--parts {num_parts} exceeds the {graphs.num_graphs:,} graphs of "
            f"{readable_spec(graphs.name)}: some parts would hold none (a part holds whole "
            f"graphs); use --parts {graphs.num_graphs} or fewer"
        )
    start = time.perf_counter()
    part_of_graph = assign_graphs(graphs, num_parts)
    assignment = np.repeat(part_of_graph, np.diff(graphs.graph_ptr))
    result = PartitionResult(
        assignment=assignment, method=METHOD, settings={}, seconds=time.perf_counter() - start
    )
    union = graphs.union()
    per_edge = {"ids": np.arange(graphs.num_edges, dtype=np.int64)}
    if graphs.edge_attr is not None:
        per_edge["attr"] = graphs.edge_attr
    if graphs.edge_y is not None:
        per_edge["y"] = graphs.edge_y
    sections: list[Section] = [GraphSetSection(graphs), EdgeArraysSection(per_edge)]
    pset = write_partitions(
        union,
        assignment,
        out_dir,
        method=METHOD,
        settings={},
        num_parts=num_parts,
        metrics=compute_metrics(union, assignment, num_parts),
        seconds=result.seconds,
        dataset_fingerprint=graphs.fingerprint(),
        sections=sections,
        **written,
    )
    return result, pset


def load_graph_part(pset: PartitionSet, part: int, *, verify: bool = False) -> GraphSet:
    """Part ``part`` of a graph-set partition directory as a :class:`GraphSet` of its own graphs
    (local node ids; splits are positions among them), its original graph ids in
    ``.graph_ids``."""
    info = pset.meta.get("graphset")
    if not isinstance(info, dict):
        raise DatasetError(
            "not a graph-set partition directory", pset.path,
            "partition a graph set (csl, freesolv, graphset:DIR) with `shardgnn partition`",
        )  # fmt: skip
    lp = pset.load_part(part, mmap=True, verify=verify)
    names = ["graph_ptr", "graph_ids", *(f"graph_{s}" for s in GRAPH_SPLITS)]
    names += ["graph_y"] if info.get("graph_labels", True) else []
    rels = {name: f"{part_dir_name(part)}/{name}.npy" for name in names}
    _check_files(pset.path, pset.meta, rels.values(), verify)
    arrays = {name: _load_array(pset.path, pset.meta, rel, False) for name, rel in rels.items()}
    ptr = arrays["graph_ptr"]
    if ptr.shape[0] < 1 or ptr[-1] != lp.end - lp.start:
        raise DatasetError(
            f"graph bounds end at {ptr[-1] if ptr.size else None}, the part has "
            f"{lp.end - lp.start} nodes", pset.path / rels["graph_ptr"],
            "the directory is damaged; partition the graph set again",
        )  # fmt: skip
    indices = np.asarray(lp.indices, dtype=np.int64) - lp.start  # whole graphs: no halo
    graphs = GraphSet(
        indptr=np.asarray(lp.indptr, dtype=np.int64),
        indices=indices,
        x=np.asarray(lp.x, dtype=np.float32),
        graph_ptr=ptr,
        y=arrays.get("graph_y"),
        train_idx=arrays["graph_train"],
        val_idx=arrays["graph_val"],
        test_idx=arrays["graph_test"],
        edge_attr=_edge_array(lp, "attr"),
        edge_y=_edge_array(lp, "y"),
        edge_classes=int(info.get("edge_classes", 0)),
        edge_label_kind=str(info.get("edge_label_kind", "class")),
        edge_ids=_edge_array(lp, "ids"),
        label_kind=str(info["label_kind"]),
        num_classes=int(info["num_classes"]),
        name=str(pset.meta.get("graph", "graphs")),
        graph_ids=arrays["graph_ids"],
    )
    return graphs.validate(str(pset.path / part_dir_name(part)))


def graph_part_ids(pset: PartitionSet, part: int, level: str) -> np.ndarray:
    """The original ids of part ``part``'s rows at ``level``: its graphs' ids (``"graph"``) or its
    edges' positions in the set's CSR (``"edge"``), read alone (memory-mapped, size checked),
    not the part: writing every part's outputs by original id needs these of the others and
    nothing else."""
    if level not in ("graph", "edge"):
        raise ValueError(f"level must be 'graph' or 'edge', got {level!r}")
    rel = f"{part_dir_name(part)}/{level}_ids.npy"  # graph_ids, or the edge array "ids"
    _check_files(pset.path, pset.meta, [rel], False)
    return _load_array(pset.path, pset.meta, rel, True)


def _edge_array(part: Any, name: str) -> np.ndarray | None:
    values = part.edge_arrays.get(name)
    return None if values is None else np.asarray(values)
