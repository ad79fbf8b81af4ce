"""A graph larger than memory, end to end, inside a memory cgroup.

Every command of the job runs inside one cgroup-v1 memory cgroup with a hard limit (``--limit-gb``,
default 2): the kernel kills a process that needs more. The graph is generated (in chunks, by this
script, also inside the cgroup) as the files a user brings: an ``[E, 2]`` int64 edge ``.npy``
sorted by source, a float32 feature ``.npy``, labels and a training split, together at least
``--ratio`` (1.5) times the limit. Then, each a separate command in the cgroup:

1. ``shardgnn convert``: the files into a graph directory;
2. ``shardgnn partition --method fennel``: streaming partitioning into 2 parts;
3. ``shardgnn train --workers 2 --feature-storage disk``: one epoch of mini-batch training, rows
   read from the memory-mapped partition files;
4. ``shardgnn infer --feature-storage disk``: layer-wise inference over every node, features
   read from the mapped part files, each chunk's halo rows fetched on their own.

A sampler thread reads, every 0.2 s, every process in the cgroup (``cgroup.procs``) and keeps its
peak resident set (``VmHWM``, which counts the pages of mapped files) and the largest anonymous
resident set it saw (``RssAnon``: what the kernel cannot drop; the figure that must fit the
limit); the cgroup's own peak (``memory.max_usage_in_bytes``: resident plus page cache, which the
kernel reclaims before it kills) is recorded per step, and so are the OOM kills
(``memory.oom_control``). Training and inference start with a cold page cache (root drops it).
``--compare`` trains the same partition again outside the cgroup, also cold, for the epoch time
without the limit. A failed step (an OOM kill included) is recorded with the job's error line
and ends the run; the report is written either way.

    python benchmarks/bench_out_of_core.py --limit-gb 2 --work /tmp/ooc   # out/out_of_core.*

Root and a cgroup-v1 memory controller are needed (as in bench_faults.py's ``oom`` fault).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench_faults import MemoryCgroup
from machine import machine_info
from shardgnn.atomic import atomic_open, save_json
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30


# ------------------------------------------------------------------------------------- the graph
def generate(
    out: Path, nodes: int, degree: int, features: int, classes: int, train: float, seed: int
) -> dict:
    """Write ``edges.npy`` ([E, 2], sorted by source), ``x.npy`` (float32 [N, F]), ``y.npy`` and
    ``train.npy``/``val.npy``/``test.npy`` (``train`` of the nodes, 1% each) into ``out``, a
    chunk of nodes at a time (memory: O(N) ids, not O(E) or O(N F)).

    A planted partition: node ``v`` has class ``y[v]``; each of its ``degree`` out-edges goes to a
    node of its own class with probability 0.8, else to any node; its features are its class's
    centroid plus unit noise, so the labels are learnable from both. The ids of a class are one
    contiguous range, the locality of crawl- or time-ordered real graphs (a chunk of consecutive
    rows reads its neighbours mostly from its own class's range)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    y = np.sort(rng.integers(0, classes, nodes)).astype(np.int64)  # classes are id ranges
    members = [np.flatnonzero(y == c) for c in range(classes)]
    centroids = rng.normal(0, 1, (classes, features)).astype(np.float32)
    edges = np.lib.format.open_memmap(out / "edges.npy", "w+", np.int64, (nodes * degree, 2))
    x = np.lib.format.open_memmap(out / "x.npy", "w+", np.float32, (nodes, features))
    chunk = max(1, (64 << 20) // (features * 4))
    for lo in range(0, nodes, chunk):
        hi = min(nodes, lo + chunk)
        src = np.repeat(np.arange(lo, hi, dtype=np.int64), degree)
        dst = rng.integers(0, nodes, src.size)
        same = rng.random(src.size) < 0.8
        for c in range(classes):
            pick = same & (y[src] == c)
            dst[pick] = members[c][rng.integers(0, members[c].size, int(pick.sum()))]
        edges[lo * degree : hi * degree, 0] = src
        edges[lo * degree : hi * degree, 1] = dst
        noise = rng.standard_normal((hi - lo, features), dtype=np.float32)
        x[lo:hi] = centroids[y[lo:hi]] + noise
    edges.flush()
    x.flush()
    del edges, x
    np.save(out / "y.npy", y)
    picked = rng.choice(nodes, int(train * nodes) + 2 * (nodes // 100), replace=False)
    train_idx, val_idx, test_idx = np.split(picked, [int(train * nodes), -(nodes // 100)])
    for split, idx in (("train", train_idx), ("val", val_idx), ("test", test_idx)):
        np.save(out / f"{split}.npy", np.sort(idx))
    return {
        "nodes": nodes,
        "edges": nodes * degree,
        "features": features,
        "classes": classes,
        "bytes": sum(f.stat().st_size for f in out.glob("*.npy")),
    }


# ----------------------------------------------------------------------------------- measuring
class PeakSampler:
    """Polls the processes of ``cgroup`` every ``interval`` seconds: peak RSS per process."""

    def __init__(self, cgroup: MemoryCgroup | None, interval: float = 0.2):
        self.cgroup, self.interval = cgroup, interval
        self.peaks: dict[int, tuple[int, str]] = {}  # pid -> (VmHWM bytes, command)
        self.anon: dict[int, int] = {}  # pid -> the largest RssAnon seen, bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _pids(self) -> list[int]:
        if self.cgroup is not None:
            text = (self.cgroup.path / "cgroup.procs").read_text()
            return [int(p) for p in text.split()]
        return []

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self._pids():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    if FORKSERVER in cmd and not _forked_by_forkserver(pid):
                        cmd = f"[forkserver] {cmd}"  # its workers' command lines are its own
                except OSError:
                    continue
                fields = dict(ln.split(":", 1) for ln in status.splitlines() if ":" in ln)
                if "VmHWM" not in fields:
                    continue
                peak, anon = (int(fields[k].split()[0]) << 10 for k in ("VmHWM", "RssAnon"))
                if peak >= self.peaks.get(pid, (0, ""))[0]:
                    self.peaks[pid] = (peak, cmd.strip())
                self.anon[pid] = max(anon, self.anon.get(pid, 0))
            self._stop.wait(self.interval)


FORKSERVER = "multiprocessing.forkserver"


def _forked_by_forkserver(pid: int) -> bool:
    """Whether ``pid``'s parent is multiprocessing's forkserver (it is one of the workers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        parent = int(stat[stat.rfind(b")") + 2 :].split()[1])
        return FORKSERVER.encode() in Path(f"/proc/{parent}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return False


def role(cmd: str) -> str:
    """A short name for a process of the job."""
    if "resource_tracker" in cmd:
        return "resource tracker"
    if cmd.startswith("[forkserver]"):
        return "forkserver"
    if "multiprocessing" in cmd or "spawn_main" in cmd:
        return "worker"
    for word in ("convert", "partition", "train", "infer", "generate"):
        if f" {word} " in f" {cmd} " or f"{word}" in cmd.split("bench_out_of_core.py")[-1][:20]:
            return f"shardgnn {word}" if word != "generate" else "generator"
    return cmd[:60]


def drop_caches() -> bool:
    """Write back and drop the page cache (root), so a step starts from the disk as a first epoch
    on a graph larger than memory does; False where not allowed."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError:
        return False
    return True


def run_step(name: str, argv: list[str], cgroup: MemoryCgroup | None, log: Path) -> dict:
    """Run ``argv`` inside ``cgroup`` (a child moves itself in before ``exec``); time it and read
    its processes' peak RSS and the cgroup's peak and OOM kills. Training and inference start
    with a cold page cache (:func:`drop_caches`)."""
    cold = name.startswith(("train", "infer")) and drop_caches()
    if cgroup is not None:
        (cgroup.path / "memory.max_usage_in_bytes").write_text("0")
        kills_before = oom_kills(cgroup)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    pre = (lambda: cgroup.add(os.getpid())) if cgroup is not None else None
    t0 = time.perf_counter()
    with PeakSampler(cgroup) as sampler, open(log, "ab") as sink:
        sink.write(f"\n$ {' '.join(argv)}\n".encode())
        sink.flush()
        proc = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, preexec_fn=pre)
    seconds = time.perf_counter() - t0
    record = {
        "step": name,
        "rc": proc.returncode,
        "seconds": round(seconds, 1),
        "cold_cache": cold,
        "processes": sorted(
            ({"role": role(cmd), "pid": pid, "peak_rss_mb": round(peak / 2**20),
              "peak_anon_mb": round(sampler.anon[pid] / 2**20)}
             for pid, (peak, cmd) in sampler.peaks.items()),
            key=lambda r: -r["peak_rss_mb"],
        ),
    }  # fmt: skip
    if cgroup is not None:
        record["cgroup_peak_mb"] = round(int(cgroup.read("memory.max_usage_in_bytes")) / 2**20)
        record["oom_kills"] = oom_kills(cgroup) - kills_before
    if proc.returncode != 0:  # the job's own one-line error is the last line of its log
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        record["error"] = next((ln for ln in reversed(lines) if "error" in ln.lower()), lines[-1])
    return record


def oom_kills(cgroup: MemoryCgroup) -> int:
    for line in cgroup.read("memory.oom_control").splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return 0


def epoch_seconds(results: Path) -> float:
    data = json.loads(results.read_text())
    return float(data["epochs"][-1]["time_s"])


# ---------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit-gb", type=float, default=2.0)
    parser.add_argument("--ratio", type=float, default=1.5, help="data bytes / limit, at least")
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--degree", type=int, default=10)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--train", type=float, default=0.02, help="fraction of training nodes")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--heap", default="reuse", help="shardgnn train's --heap")
    parser.add_argument("--keep", action="store_true", help="keep the input files and graph dir")
    parser.add_argument("--chunk-rows", type=int, default=1024, help="shardgnn infer's")
    parser.add_argument("--nodes", type=int, default=None, help="(unset: from --ratio)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/shardgnn-out-of-core"))
    parser.add_argument("--compare", action="store_true", help="train again without the limit")
    parser.add_argument("--name", default="out_of_core")
    args = parser.parse_args()

    limit = int(args.limit_gb * GiB)
    per_node = args.features * 4 + args.degree * 16 + 8
    nodes = args.nodes or int(np.ceil(args.ratio * limit / per_node))
    cgroup = MemoryCgroup(limit)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    log.write_text("")
    py = [sys.executable]
    steps: list[dict] = []
    result = {"machine": machine_info(), "limit_mb": round(limit / 2**20), "steps": steps}
    raw, graph, parts = work / "raw", work / "graph", work / "parts"
    cli = [*py, "-m", "shardgnn"]
    gen = [*py, __file__, "--generate", str(raw), str(nodes), str(args.degree),
           str(args.features), str(args.classes), str(args.train)]  # fmt: skip
    convert = [*cli, "convert", "--edges", str(raw / "edges.npy"),
        "--features", str(raw / "x.npy"), "--labels", str(raw / "y.npy"),
        "--train", str(raw / "train.npy"), "--val", str(raw / "val.npy"),
        "--test", str(raw / "test.npy"), "--out", str(graph), "--overwrite"]  # fmt: skip
    partition = [*cli, "partition", f"graph:{graph}", "--parts", "2",
        "--method", "fennel", "--out", str(parts), "--overwrite", "--quiet"]  # fmt: skip
    train = [*cli, "train", "--partitions", str(parts), "--workers", "2", "--epochs", "1",
             "--feature-storage", "disk", "--fanouts", "10,5",
             "--batch-size", str(args.batch_size), "--eval-batch-size", str(args.batch_size),
             "--heap", args.heap,
             "--checkpoint-dir", str(work / "ckpt")]  # fmt: skip
    infer = [*cli, "infer", "--partitions", str(parts),
        "--checkpoint", str(work / "ckpt"), "--out", str(work / "emb"), "--overwrite",
        "--table-format", "none", "--chunk-rows", str(args.chunk_rows),
        "--feature-storage", "disk"]  # fmt: skip
    plan = [
        ("generate", gen, None),
        ("convert", convert, [raw / "edges.npy", raw / "x.npy"]),  # one copy of the data on disk
        ("partition", partition, [graph]),
        ("train", [*train, "--results", str(work / "train.json")], None),
        ("infer", infer, None),
    ]
    try:
        for name, argv, done_with in plan:
            steps.append(run_step(name, argv, cgroup, log))
            if name == "generate":
                result["graph"] = json.loads((raw / "info.json").read_text())
                result["data_over_limit"] = round(result["graph"]["bytes"] / limit, 2)
            if "error" in steps[-1]:
                break
            for path in () if args.keep else done_with or ():
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        if (work / "train.json").exists():
            result["epoch_seconds_limited"] = epoch_seconds(work / "train.json")
        if args.compare and (work / "train.json").exists():
            free = run_step("train (no limit)",
                            [*train, "--results", str(work / "free.json")], None, log)  # fmt: skip
            result["unlimited"] = free
            result["epoch_seconds_unlimited"] = epoch_seconds(work / "free.json")
    finally:
        cgroup.remove()
    out = REPO / "benchmarks" / "out"
    save_json(out / f"{args.name}.json", result)
    rows = [
        [
            s["step"],
            p["role"],
            p["peak_rss_mb"],
            p["peak_anon_mb"],
            s["cgroup_peak_mb"],
            s["oom_kills"],
            s["seconds"],
        ]
        for s in steps
        for p in s["processes"]
        if p["peak_rss_mb"] >= 50
    ]
    data_mb = result.get("graph", {}).get("bytes", 0) / 2**20
    errors = "".join(f"\n{s['step']} failed: {s['error']}\n" for s in steps if "error" in s)
    table = format_table(
        ["step", "process", "peak RSS MB", "peak anonymous MB", "cgroup peak MB", "OOM kills", "s"],
        rows,
    )
    with atomic_open(out / f"{args.name}.md", "w") as f:
        f.write(f"limit {result['limit_mb']} MB; data {data_mb:.0f} MB "
                f"({result.get('data_over_limit')}x)\n\n{table}\n{errors}")  # fmt: skip
    print(table)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--generate":
        out, n, d, f, c, t = sys.argv[2:8]
        info = generate(Path(out), int(n), int(d), int(f), int(c), float(t), seed=0)
        (Path(out) / "info.json").write_text(json.dumps(info))
    else:
        main()
