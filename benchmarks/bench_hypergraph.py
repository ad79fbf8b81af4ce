"""Hypergraph partitioning (Mt-KaHyPar) against METIS and streaming, and the vertex-cut of each
partition: predicted and measured communication of full-graph training on a power-law graph
(issue 32).

* ``volume`` — for P in ``--parts``: each partitioner's communication volume (rows a full-graph
  layer sends with ``--spmm 1d-sparse``: the connectivity-1 of the communication hypergraph,
  which Mt-KaHyPar minimises and reports as its prediction), the rows the same partition's
  vertex-cut sends (``--spmm vertex-cut``: pulled rows and pushed partial sums, a minimum cover
  per pair of parts, :mod:`shardgnn.partition.cover`), edge cut, node and in-edge balance,
  seconds;
* ``measured`` — at ``--train-parts`` workers: full-graph GCN training with ``1d-sparse`` and
  with ``vertex-cut`` on the METIS and hypergraph partitions (vertex-cut alone on the
  vertex-cut partitioners' HDRF and 2D-hash placements, :mod:`shardgnn.partition.vertexcut`),
  the SpMM bytes a training epoch sent against the bytes the predicted rows imply (rows x 4
  bytes x the aggregated widths, forward and backward), and the epoch time.

``--partitioners`` picks some of the partitioners (labels as in the tables).

The graph is the peers benchmark's power-law generator (``benchmarks/peers/gen_graph.py``:
Chung-Lu weights (i + 1) ** -0.8, symmetrised), with random features and labels.

    python benchmarks/bench_hypergraph.py --out benchmarks/out/hypergraph.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_graph import make_graph  # noqa: E402

from bench_fullgraph import run_job, summarize  # noqa: E402
from machine import machine_info  # noqa: E402
from shardgnn.atomic import atomic_open, save_json  # noqa: E402
from shardgnn.fullgraph.spmm import FullGraphConfig  # noqa: E402
from shardgnn.graph.csr import Graph, csr_from_edges  # noqa: E402
from shardgnn.nn.models import ModelConfig  # noqa: E402
from shardgnn.partition.cover import cut_rows  # noqa: E402
from shardgnn.partition.format import write_partitions  # noqa: E402
from shardgnn.partition.methods import PartitionConfig, partition_graph  # noqa: E402
from shardgnn.partition.metrics import comm_volume, edge_cut  # noqa: E402
from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig  # noqa: E402
from shardgnn.train.progress import format_table  # noqa: E402

# (label, method, balance): METIS with its default constraints and with nodes alone, the
# hypergraph partitioner balancing nodes or in-edges, a streaming and the hashing baseline
VARIANTS = (
    ("metis", "metis", None),
    ("metis (nodes)", "metis", ("nodes",)),
    ("hypergraph (nodes)", "hypergraph", ("nodes",)),
    ("hypergraph (edges)", "hypergraph", ("edges",)),
    ("ldg", "ldg", None),
    ("random", "random", None),
    ("hdrf", "hdrf", None),
    ("2d-hash", "2d-hash", None),
)
TRAINED = ("metis", "hypergraph (nodes)", "hypergraph (edges)", "hdrf", "2d-hash")
"""the partitions trained on at ``--train-parts`` workers"""
FEATURES, HIDDEN, CLASSES = 64, 64, 8


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--parts", default="2,4,8")
    p.add_argument("--train-parts", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--out", default="benchmarks/out/hypergraph.json")
    p.add_argument(
        "--partitioners",
        default=",".join(label for label, _, _ in VARIANTS),
        help="comma-separated labels (metis is always run: the tables' reference)",
    )
    return p.parse_args(argv)


def power_law_graph(nodes: int, edges: int, seed: int = 0) -> Graph:
    src, dst = make_graph(nodes, edges, "powerlaw", 0.8, seed)
    indptr, indices = csr_from_edges(src, dst, nodes)[:2]
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(nodes)
    tenth = nodes // 10
    return Graph(
        indptr=indptr, indices=indices,
        x=rng.standard_normal((nodes, FEATURES), dtype=np.float32),
        y=rng.integers(0, CLASSES, nodes), train_idx=np.sort(perm[:tenth]),
        val_idx=np.sort(perm[tenth : 2 * tenth]), test_idx=np.sort(perm[2 * tenth : 3 * tenth]),
        num_classes=CLASSES, name=f"power-law-{nodes}",
    )  # fmt: skip


def vertex_cut_rows(graph: Graph, result, parts: int) -> int:
    """Rows a ``--spmm vertex-cut`` layer sends on this partition (pulled rows + pushed sums;
    a vertex-cut partitioner's edges where it placed them)."""
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    _, pulls, pushes = cut_rows(
        np.asarray(graph.indices, np.int64), dst, result.assignment, parts, result.edge_part
    )
    return int(pulls.shape[0] + pushes.shape[0])


def volumes(graph: Graph, parts: list[int], chosen: set[str]) -> tuple[list[dict], dict]:
    rows, assignments = [], {}
    in_degree = graph.in_degree()
    for p in parts:
        for label, method, balance in VARIANTS:
            if label not in chosen:
                continue
            start = time.perf_counter()
            result = partition_graph(
                graph, PartitionConfig(num_parts=p, method=method, balance=balance)
            )
            seconds = time.perf_counter() - start
            a = result.assignment
            nodes = np.bincount(a, minlength=p)
            work = np.bincount(a, weights=in_degree, minlength=p)
            rows.append(
                {
                    "parts": p, "partitioner": label, "comm_volume": comm_volume(graph, a, p),
                    "vertex_cut_rows": vertex_cut_rows(graph, result, p),
                    "replication_factor": result.settings.get("replication_factor"),
                    "predicted": result.settings.get("predicted_comm_volume"),
                    "edge_cut": edge_cut(graph, a, p),
                    "node_balance": float(nodes.max() / nodes.mean()),
                    "edge_balance": float(work.max() / work.mean()), "seconds": seconds,
                }
            )  # fmt: skip
            assignments[(p, label)] = result
            print(rows[-1], flush=True)
    return rows, assignments


def measured(graph: Graph, assignments: dict, p: int, epochs: int) -> list[dict]:
    """Full-graph GCN training on each partition, 1D sparse and vertex-cut; SpMM bytes against
    the rows each predicts."""
    out = []
    # GCN, 2 layers: aggregation at the narrower width of each layer (64 -> 64: 64; 64 -> 8: 8);
    # layer 0's input needs no gradient, so its backward exchange is skipped
    widths = [min(FEATURES, HIDDEN), min(HIDDEN, CLASSES)]
    per_row = 4 * (sum(widths) + sum(widths[1:]))
    for label in TRAINED:
        if (p, label) not in assignments:
            continue
        result = assignments[(p, label)]
        rows = {"vertex-cut": vertex_cut_rows(graph, result, p)}
        if result.edge_part is None:  # the sparse 1D plan of a node partition too
            rows = {"1d-sparse": comm_volume(graph, result.assignment, p), **rows}
        with tempfile.TemporaryDirectory(prefix="bench_hypergraph_") as tmp:
            path = Path(tmp) / "parts"
            write_partitions(
                graph, result.assignment, path, method=result.method, settings=result.settings,
                sections=result.sections(),
            )  # fmt: skip
            for spmm, volume in rows.items():
                config = TrainConfig(
                    dataset="bench", mode="full",
                    model=ModelConfig(model="gcn", hidden=HIDDEN, num_layers=2, dropout=0.0),
                    optim=OptimConfig(epochs=epochs, lr=0.01), full=FullGraphConfig(spmm=spmm),
                    progress=False, threads=1, run=RunConfig(workers=p),
                )  # fmt: skip
                summary = summarize(run_job(config, path, p, 120.0))
                out.append(
                    {
                        "partitioner": label, "spmm": spmm, "parts": p, "rows": volume,
                        "predicted_bytes": volume * per_row,
                        "measured_bytes": summary["spmm_bytes_per_epoch"],
                        "epoch_s": summary["epoch_time_s"], "comm_s": summary["comm_s"],
                    }
                )  # fmt: skip
                print(out[-1], flush=True)
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    parts = sorted({int(p) for p in args.parts.split(",")} | {args.train_parts})
    start = time.perf_counter()
    graph = power_law_graph(args.nodes, args.edges)
    report: dict = {
        "command": "python " + " ".join(sys.argv),
        "machine": machine_info(),
        "graph": {"nodes": graph.num_nodes, "edges": graph.num_edges},
    }
    chosen = {"metis", *args.partitioners.split(",")}
    unknown = chosen - {label for label, _, _ in VARIANTS}
    if unknown:
        raise SystemExit(f"--partitioners: unknown {', '.join(sorted(unknown))}")
    report["volume"], assignments = volumes(graph, parts, chosen)
    report["measured"] = measured(graph, assignments, args.train_parts, args.epochs)
    report["total_s"] = time.perf_counter() - start
    metis = {r["parts"]: r["comm_volume"] for r in report["volume"] if r["partitioner"] == "metis"}
    table = format_table(
        ["P", "partitioner", "comm volume (rows/layer)", "vs metis", "predicted",
         "vertex-cut rows/layer", "vs metis", "replicas/node", "edge cut", "node balance",
         "edge balance", "s"],
        [
            [r["parts"], r["partitioner"], r["comm_volume"],
             f"{r['comm_volume'] / metis[r['parts']]:.3f}",
             "-" if r["predicted"] is None else r["predicted"], r["vertex_cut_rows"],
             f"{r['vertex_cut_rows'] / metis[r['parts']]:.3f}",
             "-" if r["replication_factor"] is None else f"{r['replication_factor']:.3f}",
             f"{r['edge_cut']:.3f}",
             f"{r['node_balance']:.3f}", f"{r['edge_balance']:.3f}", f"{r['seconds']:.1f}"]
            for r in report["volume"]
        ],
    )  # fmt: skip
    table += "\n\n" + format_table(
        ["P", "partitioner", "spmm", "predicted SpMM bytes/epoch", "measured", "epoch s",
         "comm s"],
        [
            [m["parts"], m["partitioner"], m["spmm"], m["predicted_bytes"],
             int(m["measured_bytes"]),
             f"{m['epoch_s']:.3f}", f"{m['comm_s']:.3f}"]
            for m in report["measured"]
        ],
    )  # fmt: skip
    save_json(args.out, report)
    with atomic_open(Path(args.out).with_suffix(".md"), "w") as fh:
        fh.write(f"<!-- written by: {report['command']} -->\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
