"""Partitioner quality, time and peak memory: random, METIS, LDG and Fennel for P = 2, 4, 8.

Datasets: ``coauthor-physics`` and ``soc-slashdot`` from ``--data-dir`` (skipped when their files
are absent) and the synthetic graph of ``--synthetic-spec`` (default 1M nodes, ~20M edges).

Every partition runs in a fresh child process. Its peak RSS is the child's own ``VmHWM`` from
``/proc/self/status``, read just before it exits. (The child's ``ru_maxrss``, from ``os.wait4``,
is recorded too but not used: Linux carries the high-water mark of the forked copy of the parent
across ``execve``, so it reports at least the parent's size.) The parent loads each dataset once
and writes what the children read:

* ``graph`` input: a structure-only graph directory (indptr, indices, train_idx; no features),
  loaded whole by the child, then ``partition_graph`` (METIS symmetrises it; LDG/Fennel stream
  its CSR rows, symmetrising a directed graph first).
* ``edges.npy`` input (streaming methods on the synthetic graph): an int32 ``[E, 2]`` edge array
  in CSR order, streamed by ``stream_partition`` with explicit chunked reads (1M edges per
  chunk), so the child never holds the graph: its RSS is O(nodes + chunk).

Children first run the method on a tiny graph (numba JIT / cache load), untimed. A ``baseline``
child that only imports and warms up every method gives the interpreter + library + JIT floor of
the RSS (about 300 MiB here), which dominates on small graphs. The parent
computes the metrics of every assignment (edge cut, connectivity-1 communication volume, max send
volume, max/mean balance of nodes, training nodes and in-edges).

Run ``python benchmarks/bench_partition.py --help``; ``--only``/``--parts``/``--methods`` subset.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from machine import machine_info  # noqa: E402  (benchmarks/machine.py)

REPO = Path(__file__).resolve().parents[1]
DATASETS = ("coauthor-physics", "soc-slashdot", "synthetic")
METHODS = ("random", "metis", "ldg", "fennel")
STREAM_METHODS = ("ldg", "fennel")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data-dir",
        default=str(REPO.parent / "shared" / "data"),
        help="folder of the real datasets",
    )
    p.add_argument(
        "--only", default=",".join(DATASETS), help=f"comma-separated subset of {','.join(DATASETS)}"
    )
    p.add_argument("--parts", default="2,4,8", help="comma-separated part counts")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of methods")
    p.add_argument(
        "--synthetic-spec",
        default="synthetic:nodes=1000000,degree=20,features=16",
        help="the synthetic dataset spec",
    )
    p.add_argument("--seed", type=int, default=0, help="random/metis seed")
    p.add_argument("--chunk-edges", type=int, default=1 << 20, help="streaming chunk size (edges)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per child process")
    p.add_argument(
        "--work-dir", default=None, help="scratch folder for graph/edge files (default: a temp dir)"
    )
    p.add_argument("--out", default="benchmarks/out/partition.json", help="results JSON")
    p.add_argument("--md", default="benchmarks/out/partition.md", help="results Markdown")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -------------------------------------------------------------------------------------------- child
def _warm_up(method: str) -> None:
    from shardgnn.graph.synthetic import SyntheticConfig, generate
    from shardgnn.partition import PartitionConfig, partition_graph, stream_partition

    tiny = generate(SyntheticConfig(nodes=200, degree=4, features=1))
    if method == "baseline":  # the floor: every import and every JIT-compiled kernel loaded
        for m in METHODS:
            _warm_up(m)
    elif method in STREAM_METHODS:
        from shardgnn.partition import StreamConfig

        stream_partition(np.stack(tiny.edge_index(), axis=1), 2, StreamConfig(method=method))
    else:
        partition_graph(tiny, PartitionConfig(num_parts=2, method=method))


def _vm_hwm_mib() -> float | None:
    """This process's peak resident set (``VmHWM``), reset by ``execve`` unlike ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def worker(spec: dict) -> None:
    """Child process: partition once, save the assignment and timings."""
    _warm_up(spec["method"])
    out: dict = {}
    if spec["method"] != "baseline":
        from shardgnn.graph.io import load_graph
        from shardgnn.partition import (
            PartitionConfig,
            StreamConfig,
            partition_graph,
            stream_partition,
        )

        start = time.perf_counter()
        if spec["input"] == "edges.npy":
            config = StreamConfig(
                method=spec["method"], chunk_edges=spec["chunk_edges"], num_nodes=spec["num_nodes"]
            )
            result = stream_partition(spec["edges"], spec["parts"], config)
            assignment, out["info"] = result.assignment, result.info()
            out["load_seconds"] = 0.0
            out["seconds"] = time.perf_counter() - start
        else:
            graph = load_graph(spec["graph_dir"])
            out["load_seconds"] = time.perf_counter() - start
            config = PartitionConfig(
                num_parts=spec["parts"],
                method=spec["method"],
                seed=spec["seed"],
                chunk_edges=spec["chunk_edges"],
            )
            result = partition_graph(graph, config)
            assignment, out["info"] = result.assignment, result.settings
            out["seconds"] = time.perf_counter() - start - out["load_seconds"]
        np.save(spec["assignment_out"], assignment)
    out["vm_hwm_mib"] = _vm_hwm_mib()
    with open(spec["result_out"], "w") as fh:
        json.dump(out, fh)


def run_child_rss(spec: dict, timeout: float) -> dict:
    """Run :func:`worker` in a fresh interpreter, reaped with ``os.wait4`` to read its own peak RSS
    (``ru_maxrss``; ``RUSAGE_CHILDREN`` would give the maximum over all children so far)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        start = time.perf_counter()
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"error": f"timeout after {timeout:.0f} s"}
            time.sleep(0.05)
        # so Popen does not try to reap it again
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            lines = err.read().strip().splitlines()
            return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    result = json.loads(Path(spec["result_out"]).read_text())
    result["child_wall_seconds"] = wall
    # Linux reports KiB; includes the parent's copy
    result["ru_maxrss_mib"] = usage.ru_maxrss / 1024.0
    result["peak_rss_mib"] = (
        result["vm_hwm_mib"] if result.get("vm_hwm_mib") is not None else result["ru_maxrss_mib"]
    )
    return result


# ------------------------------------------------------------------------------------------- parent
def load(name: str, args: argparse.Namespace):
    from shardgnn.errors import DatasetError
    from shardgnn.graph.datasets import load_dataset

    spec = args.synthetic_spec if name == "synthetic" else name
    try:
        return load_dataset(spec, args.data_dir)
    except DatasetError as exc:
        print(f"skipping {name}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return None


def prepare(graph, name: str, work: Path) -> dict:
    """Write the structure-only graph directory and (synthetic) the edge array the children read."""
    from shardgnn.graph.csr import Graph
    from shardgnn.graph.io import save_graph

    folder = work / name
    structure = Graph(
        indptr=graph.indptr, indices=graph.indices, train_idx=graph.train_idx, name=graph.name
    )
    save_graph(structure, folder / "graph", overwrite=True)
    paths = {"graph_dir": str(folder / "graph")}
    if name == "synthetic":
        src, dst = graph.edge_index()
        edges = np.empty((graph.num_edges, 2), dtype=np.int32)
        edges[:, 0], edges[:, 1] = src, dst
        np.save(folder / "edges.npy", edges)
        paths["edges"] = str(folder / "edges.npy")
        del edges, src, dst
    return paths


def fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(report: dict) -> str:
    lines = [
        "# Partitioning benchmark",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {report['machine']['nproc']} CPUs, {report['machine']['platform']}; baseline "
        "child RSS (python + imports + every method warmed up on a tiny graph, incl. numba JIT) "
        f"{fmt(report['baseline_rss_mib'], 0)} MiB.",
        "",
    ]
    for name, info in report["datasets"].items():
        lines += [
            f"## {name}",
            "",
            f"{info['num_nodes']:,} nodes, {info['num_edges']:,} edges "
            f"(symmetric: {info['symmetric']}, training nodes: {info['train_nodes']:,}).",
            "",
            "| method | P | input | time s | load s | peak RSS MiB | edge cut | comm vol | max "
            "send | bal nodes | bal train | bal edges |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["runs"]:
            if r["dataset"] != name:
                continue
            if "error" in r:
                lines.append(
                    f"| {r['method']} | {r['parts']} | {r['input']} | error: {r['error']} |||||||||"
                )
                continue
            m = r["metrics"]
            lines.append(
                f"| {r['method']} | {r['parts']} | {r['input']} | {fmt(r['seconds'], 2)} | "
                f"{fmt(r['load_seconds'], 2)} | {fmt(r['peak_rss_mib'], 0)} | "
                f"{fmt(m['edge_cut'])} | {fmt(m['comm_volume'])} | {fmt(m['max_send_volume'])} | "
                f"{fmt(m['balance_nodes'])} | {fmt(m['balance_train'])} | "
                f"{fmt(m['balance_edges'])} |"
            )
        lines.append("")
    lines += ["## Targets", "", "| target | dataset | P | value | ok |", "|---|---|---|---|---|"]
    for t in report["targets"]:
        lines.append(
            f"| {t['target']} | {t['dataset']} | {t['parts']} | {t['value']} | "
            f"{'yes' if t['ok'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def targets(report: dict) -> list[dict]:
    out = []
    runs = {(r["dataset"], r["method"], r["parts"]): r for r in report["runs"] if "error" not in r}
    for (name, method, p), r in sorted(runs.items()):
        if method != "metis":
            continue
        rnd = runs.get((name, "random", p))
        cut = r["metrics"]["edge_cut"]
        if rnd and name != "synthetic":
            ratio = cut / rnd["metrics"]["edge_cut"]
            out.append(
                {
                    "target": "METIS cut <= 0.5 x random",
                    "dataset": name,
                    "parts": p,
                    "value": f"{ratio:.3f}",
                    "ok": ratio <= 0.5,
                }
            )
        if name == "synthetic":
            out.append(
                {
                    "target": "METIS time <= 180 s",
                    "dataset": name,
                    "parts": p,
                    "value": f"{r['seconds']:.1f} s",
                    "ok": r["seconds"] <= 180,
                }
            )
        for stream in STREAM_METHODS:
            s = runs.get((name, stream, p))
            if s is None:
                continue
            if rnd:
                between = cut <= s["metrics"]["edge_cut"] <= rnd["metrics"]["edge_cut"]
                out.append(
                    {
                        "target": f"{stream} cut between METIS and random",
                        "dataset": name,
                        "parts": p,
                        "value": (
                            f"{cut:.3f} <= {s['metrics']['edge_cut']:.3f} <= "
                            f"{rnd['metrics']['edge_cut']:.3f}"
                        ),
                        "ok": between,
                    }
                )
            if name == "synthetic":
                ratio = s["peak_rss_mib"] / r["peak_rss_mib"]
                out.append(
                    {
                        "target": f"{stream} RSS <= 1/3 METIS RSS",
                        "dataset": name,
                        "parts": p,
                        "value": (
                            f"{s['peak_rss_mib']:.0f} / {r['peak_rss_mib']:.0f} MiB = {ratio:.2f}"
                        ),
                        "ok": ratio <= 1 / 3,
                    }
                )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        worker(json.loads(args.worker))
        return 0
    from shardgnn.atomic import atomic_open, save_json
    from shardgnn.partition import compute_metrics

    only = [d.strip() for d in args.only.split(",") if d.strip()]
    unknown = [d for d in only if d not in DATASETS]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if unknown or any(m not in METHODS for m in methods):
        raise SystemExit(f"--only must name datasets among {DATASETS}, --methods among {METHODS}")
    parts = [int(p) for p in args.parts.split(",") if p.strip()]

    tmp_ctx = (
        tempfile.TemporaryDirectory(prefix="bench_partition.") if args.work_dir is None else None
    )
    work = Path(args.work_dir or tmp_ctx.name)
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "machine": machine_info(),
        "command": shlex.join([sys.executable, *sys.argv]),
        "config": {k: v for k, v in vars(args).items() if k != "worker"},
        "datasets": {},
        "runs": [],
    }
    base = run_child_rss(
        {"method": "baseline", "result_out": str(work / "baseline.json")}, args.timeout
    )
    report["baseline_rss_mib"] = base.get("peak_rss_mib")
    try:
        for name in only:
            start = time.perf_counter()
            graph = load(name, args)
            if graph is None:
                continue
            print(
                f"{name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges "
                f"(loaded in {time.perf_counter() - start:.1f} s)",
                file=sys.stderr,
            )
            paths = prepare(graph, name, work)
            report["datasets"][name] = {
                "spec": args.synthetic_spec if name == "synthetic" else name,
                "num_nodes": graph.num_nodes,
                "num_edges": graph.num_edges,
                "symmetric": bool(graph.is_symmetric()),
                "train_nodes": 0 if graph.train_idx is None else int(graph.train_idx.size),
            }
            for p in parts:
                for method in methods:
                    use_edges = method in STREAM_METHODS and "edges" in paths
                    spec = {
                        "method": method,
                        "parts": p,
                        "seed": args.seed,
                        "chunk_edges": args.chunk_edges,
                        "input": "edges.npy" if use_edges else "graph",
                        "num_nodes": graph.num_nodes,
                        "assignment_out": str(work / "assignment.npy"),
                        "result_out": str(work / "result.json"),
                        **paths,
                    }
                    res = run_child_rss(spec, args.timeout)
                    row = {
                        "dataset": name,
                        "method": method,
                        "parts": p,
                        "input": "edges.npy (chunked reads)" if use_edges else "graph (in memory)",
                        **res,
                    }
                    if "error" not in res:
                        assignment = np.load(spec["assignment_out"])
                        row["metrics"] = compute_metrics(graph, assignment, p).to_dict()
                        print(
                            f"  {method:7s} P={p}: {res['seconds']:7.2f} s, RSS "
                            f"{res['peak_rss_mib']:7.0f} MiB, cut "
                            f"{row['metrics']['edge_cut']:.3f}",
                            file=sys.stderr,
                        )
                    else:
                        print(f"  {method:7s} P={p}: {res['error']}", file=sys.stderr)
                    report["runs"].append(row)
            del graph
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    report["targets"] = targets(report)
    save_json(args.out, report)
    text = markdown(report)
    with atomic_open(args.md, "w") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
