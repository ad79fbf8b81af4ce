"""shardgnn against DGL / DistDGL on the same graph, in the same run.

Runs with the project's Python (shardgnn installed); the DGL side runs in the DGL venv
(``--dgl-python``, built by ``bash benchmarks/peers/setup_dgl.sh``). Steps:

1. **graph** — ``gen_graph.py`` (DGL venv) writes the synthetic graph once to
   ``WORKDIR/peers_n{nodes}_e{edges}_f{feat}_c{classes}.npz``; a sidecar ``.json`` records its
   parameters and the graph is reused while they match.
2. **shardgnn copy** — the same arrays (``x`` = feat, ``y`` = label, the same ``train_idx``, plus
   ``--val-size`` / ``--test-size`` validation and test nodes drawn from the non-training nodes
   with ``--split-seed``) go through ``shardgnn convert --npz`` into a graph directory, trained as
   ``graph:DIR`` (reused while the sidecar matches).
3. **comparisons** (``--what``), each pair alternated ``--rounds`` times (round 0: DGL first,
   round 1: shardgnn first, ...):

   * ``single`` — ``dgl_sage.py`` against ``shardgnn train graph:DIR`` (GraphSAGE-mean, hidden
     256, fanouts 10,10,10, batch 1024, no dropout, Adam lr 1e-3 on both sides);
   * ``sample`` — ``dgl_sage.py --sample-only`` (sampling + feature gather, no model) against the
     ``sample`` + ``fetch`` stage seconds of shardgnn's training epochs (shardgnn has no
     sample-only mode; with ``single`` also selected, the stages of that round's ``single`` run
     are used, else a training run is made for them);
   * ``dist2`` — DistDGL (``dgl_partition.py`` METIS, 2 parts; ``run_distdgl.sh``: 2 simulated
     machines on this host, 1 server + 1 trainer each; needs root) against ``shardgnn partition``
     (METIS, 2 parts) + ``shardgnn train --partitions DIR --workers 2``;
   * ``netns`` (not in the default set) — the same two partitions across two network
     namespaces joined by a veth pair (``benchmarks/netns_hosts.py run --fault none``): DistDGL
     with one machine (1 server + 1 trainer) per namespace (``TRANSPORT=netns
     run_distdgl.sh``) against shardgnn with one ``torchrun`` agent + 1 worker per namespace;
     needs root and iproute2.

Per run, the epoch time is the median over epochs 2..N (epoch 1 holds numba JIT compilation and
first-touch costs; with ``--epochs 1`` it is epoch 1); per comparison, the median over rounds.
shardgnn's epoch time is its training loop only (the validation pass after each epoch is
separate), as DGL's. Outputs (atomic, rewritten after every run): ``--out`` (JSON: every command,
every per-epoch number, logs, versions, machine) and ``--md`` (the table), and the table on
stdout: run | DGL | shardgnn | ratio (shardgnn / DGL: below 1 = shardgnn faster).

``--variant NAME[@ROWS]=ARGS`` (repeatable) adds a shardgnn run with ARGS appended to its command
line, in every round right after shardgnn's default run of each row in ROWS (comma-separated,
default: every row of ``--what``); the table gets a row per variant and row (variant / DGL and
default / variant). Every run's peak RSS and minor page faults (``wait4`` on the command, plus a
/proc poll of its process tree every ``--poll`` s) go into the JSON and a second table; for
``dist2`` / ``netns`` a third table holds shardgnn's bytes per communication stage.

    python benchmarks/peers/compare.py                      # the headline 1M-node comparison
    python benchmarks/peers/compare.py --nodes 20000 --edges 200000 --epochs 1 --rounds 1 \\
        --workdir /tmp/peers-smoke --out /tmp/peers.json --md /tmp/peers.md
    python benchmarks/peers/compare.py --what single,dist2 \\
        --variant "heap-system@single=--heap system" \\
        --variant "no-host-sharing@dist2=--host-sharing off"
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_open, save_json
from shardgnn.train.progress import format_table

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from machine import machine_info  # noqa: E402

WHAT = ("single", "sample", "dist2", "netns")
HOME = Path(os.path.expanduser("~"))
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
ROW_LABELS = {
    "single": "single process, epoch (s)",
    "sample": "sampling + feature gather, epoch (s) [1]",
    "dist2": "2 partitions (METIS), 2 workers, one host, epoch (s) [2]",
    "netns": "2 partitions (METIS), 2 netns hosts (veth), epoch (s) [3]",
}


# ========================================================================================= options
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dgl-python",
        default=str(HOME / "peers" / "dglvenv" / "bin" / "python"),
        help="the DGL venv's interpreter (bash benchmarks/peers/setup_dgl.sh builds it)",
    )
    p.add_argument(
        "--workdir",
        default=str(HOME / "peers"),
        help="graphs, converted graph, partitions and logs (reused across invocations)",
    )
    g = p.add_argument_group("graph (gen_graph.py)")
    g.add_argument("--nodes", type=int, default=1_000_000)
    g.add_argument(
        "--edges",
        type=int,
        default=20_000_000,
        help="directed edges requested (self loops and duplicates dropped: a little fewer)",
    )
    g.add_argument("--feat", type=int, default=128, help="feature dimension")
    g.add_argument("--classes", type=int, default=40)
    g.add_argument("--train-frac", type=float, default=0.1)
    g.add_argument("--kind", choices=("powerlaw", "uniform"), default="powerlaw")
    g.add_argument("--graph-seed", type=int, default=0)
    g.add_argument(
        "--val-size",
        type=int,
        default=10_000,
        help="shardgnn validation nodes, drawn from the non-training nodes (at most half of them)",
    )
    g.add_argument("--test-size", type=int, default=10_000, help="shardgnn test nodes (as above)")
    g.add_argument("--split-seed", type=int, default=0)
    w = p.add_argument_group("workload (both sides)")
    w.add_argument("--epochs", type=int, default=4)
    w.add_argument(
        "--fanouts",
        default="10,10,10",
        help="shardgnn order, output layer first; handed to DGL reversed (input layer first)",
    )
    w.add_argument("--hidden", type=int, default=256)
    w.add_argument("--batch", type=int, default=1024, help="seed nodes per mini-batch")
    w.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (DGL's is fixed)")
    w.add_argument(
        "--threads",
        type=int,
        default=0,
        help="single/sample: torch threads on both sides (0: each side's default, every core)",
    )
    w.add_argument(
        "--dist-batch",
        choices=("per-worker", "global"),
        default="per-worker",
        help="dist2/netns: per-worker (default) gives shardgnn the global batch workers x --batch, "
        "so each worker takes --batch seeds per step as a DistDGL trainer does; global gives "
        "shardgnn --batch over all workers (--batch / 2 per worker, twice the steps)",
    )
    w.add_argument(
        "--heap",
        choices=("reuse", "system"),
        default=None,
        help="pass --heap to every shardgnn run (unset: shardgnn's default; a --variant's "
        "own --heap overrides it for that variant)",
    )
    w.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set in the environment of both sides' runs (e.g. GLIBC_TUNABLES=...)",
    )
    r = p.add_argument_group("runs")
    r.add_argument(
        "--what",
        default="single,sample,dist2",
        help=f"comma-separated comparisons, from {','.join(WHAT)}",
    )
    r.add_argument("--rounds", type=int, default=3, help="alternate DGL / shardgnn this many times")
    r.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME[@ROWS]=ARGS",
        help="an extra shardgnn run per round, right after shardgnn's default run: ARGS (shell-"
        "split) are appended to its command line; ROWS (comma-separated, from --what; default: "
        "every row of --what) restricts the rows it runs for. Repeatable, e.g. "
        "--variant 'heap-system@single=--heap system' "
        "--variant 'no-host-sharing@dist2=--host-sharing off'",
    )
    r.add_argument(
        "--poll",
        type=float,
        default=0.5,
        help="seconds between reads of /proc for the process tree of every run (per-process "
        "peak RSS, summed over processes); 0: off",
    )
    r.add_argument(
        "--job-timeout",
        type=float,
        default=7200.0,
        help="seconds any one command may take before it is killed (0: no limit)",
    )
    r.add_argument("--out", default=str(BENCH / "out" / "peers.json"), help="results JSON")
    r.add_argument("--md", default=str(BENCH / "out" / "peers.md"), help="results Markdown table")
    args = p.parse_args(argv)
    args.what_list = [x.strip() for x in args.what.split(",") if x.strip()]
    bad = [x for x in args.what_list if x not in WHAT]
    if bad or not args.what_list:
        p.error(f"--what: {bad or 'nothing'}; choose from {','.join(WHAT)}")
    args.fanouts_list = [int(f) for f in args.fanouts.split(",")]
    if args.epochs < 1 or args.rounds < 1:
        p.error("--epochs and --rounds must be >= 1")
    for item in args.env:
        if "=" not in item:
            p.error(f"--env {item!r}: KEY=VALUE")
    args.variants = []
    for spec in args.variant:
        head, eq, rest = spec.partition("=")
        name, at, rows = head.strip().partition("@")
        if not eq or not VARIANT_NAME.fullmatch(name) or name in ("default", "dgl", "shardgnn"):
            p.error(
                f"--variant {spec!r}: NAME[@ROWS]=ARGS, NAME of letters, digits, '_.+-' (not "
                "default/dgl/shardgnn)"
            )
        if name in [v["name"] for v in args.variants]:
            p.error(f"--variant {spec!r}: the name {name!r} is taken")
        row_list = [x.strip() for x in rows.split(",") if x.strip()] if at else args.what_list
        off = [x for x in row_list if x not in args.what_list]
        if off or not row_list:
            p.error(f"--variant {spec!r}: rows {off or 'none'}; choose from --what {args.what}")
        try:
            extra = shlex.split(rest)
        except ValueError as exc:
            p.error(f"--variant {spec!r}: {exc}")
        if not extra:
            p.error(f"--variant {spec!r}: no shardgnn arguments after '='")
        args.variants.append({"name": name, "rows": row_list, "args": extra, "spec": spec})
    if args.poll < 0:
        p.error("--poll must be >= 0")
    if not Path(args.dgl_python).exists():
        # No DGL here (CI never builds it): nothing to compare against, so skip, successfully.
        print(
            f"skipped: --dgl-python {args.dgl_python} does not exist; build the venv with "
            "`bash benchmarks/peers/setup_dgl.sh` (PEERS=DIR for another place than ~/peers)"
        )
        raise SystemExit(0)
    if {"dist2", "netns"} & set(args.what_list) and os.geteuid() != 0:
        p.error("dist2 and netns need root (mount namespaces, network namespaces)")
    return args


# ======================================================================================= processes
def proc_tree(root: int) -> dict[int, int]:
    """``{pid: start time}`` of ``root`` and all its live descendants (by parent pid: elastic
    starts each worker in a session of its own, so sessions or process groups would miss them)."""
    kids: dict[int, list[int]] = {}
    start: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        pid = int(entry)
        kids.setdefault(int(fields[1]), []).append(pid)  # fields: state, ppid, ...
        start[pid] = int(fields[19])  # field 22 of stat: start time (clock ticks)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in start and pid not in tree:
            tree[pid] = start[pid]
            todo += kids.get(pid, [])
    return tree


def proc_status_kb(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS / RssAnon (KiB) of ``pid`` (empty when it is gone or a zombie)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS", "RssAnon"):
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


class TreeWatch:
    """Reads /proc every ``interval`` s while a command runs: each process of its tree keeps its
    largest VmHWM (its peak RSS so far), and the largest concurrent sums of VmRSS and RssAnon over
    the tree are kept. Growth in a process's last ``interval`` before it exits is missed."""

    def __init__(self, root: int, interval: float):
        self.root, self.interval = root, interval
        self.procs: dict[tuple[int, int], dict[str, Any]] = {}
        self.max_sum_rss_kb = self.max_sum_anon_kb = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if interval > 0:
            self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - measurement only, never fail a run on it
                pass
            if self._stop.wait(self.interval):
                return

    def poll(self) -> None:
        rss = anon = 0
        for pid, start in proc_tree(self.root).items():
            st = proc_status_kb(pid)
            if not st:
                continue
            rec = self.procs.get((pid, start))
            if rec is None:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    cmd = "?"
                rec = self.procs[(pid, start)] = {"pid": pid, "cmd": cmd[:200], "vmhwm_kb": 0}
            rec["vmhwm_kb"] = max(rec["vmhwm_kb"], st.get("VmHWM", 0))
            rss += st.get("VmRSS", 0)
            anon += st.get("RssAnon", 0)
        self.samples += 1
        self.max_sum_rss_kb = max(self.max_sum_rss_kb, rss)
        self.max_sum_anon_kb = max(self.max_sum_anon_kb, anon)

    def stop(self) -> dict[str, Any] | None:
        if self.interval <= 0:
            return None
        self._stop.set()
        self._thread.join()
        procs = sorted(self.procs.values(), key=lambda r: -r["vmhwm_kb"])
        return {
            "interval_s": self.interval,
            "samples": self.samples,
            "sum_vmhwm_kb": sum(r["vmhwm_kb"] for r in procs),
            "max_vmhwm_kb": max((r["vmhwm_kb"] for r in procs), default=0),
            "max_concurrent_sum_rss_kb": self.max_sum_rss_kb,
            "max_concurrent_sum_anon_kb": self.max_sum_anon_kb,
            "processes": procs,
        }


def run_command(
    argv: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 0.0,
    echo: bool = True,
    poll: float = 0.0,
) -> dict[str, Any]:
    """Run ``argv`` in its own session, its output (stdout + stderr) to ``log`` and, prefixed, to
    our stdout. Killed (its whole process group) after ``timeout`` s. Returns rc, seconds, output
    and the resources of the command and its descendants: ``rusage`` (``wait4`` on the command:
    ``ru_maxrss`` is the largest RSS of any one process of the tree that was waited for,
    ``ru_minflt`` etc. the sums over them) and, with ``poll`` > 0, ``tree`` (:class:`TreeWatch`).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"$ {shlex.join(argv)}", flush=True)
    t0 = time.perf_counter()
    lines: list[str] = []
    timed_out = threading.Event()
    with open(log, "w") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
            bufsize=1,
        )

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill) if timeout > 0 else None
        if timer:
            timer.daemon = True
            timer.start()
        watch = TreeWatch(proc.pid, poll)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                fh.flush()
                lines.append(line.rstrip("\n"))
                if echo:
                    print(f"  | {line.rstrip()}", flush=True)
            _, status, ru = os.wait4(proc.pid, 0)  # proc.wait() without the rusage
            rc = proc.returncode = os.waitstatus_to_exitcode(status)
        except BaseException:  # Ctrl-C: take our child down with us
            kill()
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
            tree = watch.stop()
    seconds = time.perf_counter() - t0
    if timed_out.is_set():
        lines.append(f"[compare.py] killed after the --job-timeout of {timeout} s")
    return {
        "command": shlex.join(argv),
        "rc": rc,
        "wall_s": round(seconds, 3),
        "timed_out": timed_out.is_set(),
        "log": str(log),
        "output": lines,
        "rusage": {
            "maxrss_kb": ru.ru_maxrss,
            "minflt": ru.ru_minflt,
            "majflt": ru.ru_majflt,
            "utime_s": round(ru.ru_utime, 3),
            "stime_s": round(ru.ru_stime, 3),
            "nvcsw": ru.ru_nvcsw,
            "nivcsw": ru.ru_nivcsw,
        },
        "tree": tree,
        "peak_rss_gb": round(ru.ru_maxrss * 1024 / 1e9, 4),
        "sum_peak_rss_gb": round(tree["sum_vmhwm_kb"] * 1024 / 1e9, 4) if tree else None,
        "minor_faults": ru.ru_minflt,
    }


class RunError(RuntimeError):
    pass


def check(res: dict[str, Any], what: str) -> dict[str, Any]:
    if res["rc"] != 0:
        tail = "\n".join(res["output"][-15:])
        why = " after the --job-timeout" if res["timed_out"] else ""
        raise RunError(f"{what} failed (exit {res['rc']}{why}; log {res['log']}):\n{tail}")
    return res


def result_line(output: list[str]) -> dict[str, Any]:
    """The last ``RESULT {json}`` line a DGL script printed (common.summarize)."""
    for line in reversed(output):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RunError("no RESULT line in the output")


def steady(values: list[float]) -> list[float]:
    """Epochs 2..N (epoch 1: JIT and first-touch costs), or the only epoch."""
    return values[1:] if len(values) > 1 else values


def median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


# ============================================================================================ data
def read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_sidecar(path: Path, obj: dict[str, Any]) -> None:
    save_json(path, obj)


def now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


class Peers:
    """One invocation: the prepared inputs, every run, the report."""

    def __init__(self, args: argparse.Namespace, command: str):
        self.args = args
        self.work = Path(args.workdir).resolve()
        # one folder per invocation: the JSON points at these logs, a later run must not reuse them
        self.logs = self.work / "logs" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.work.mkdir(parents=True, exist_ok=True)
        self.tag = f"n{args.nodes}_e{args.edges}_f{args.feat}_c{args.classes}"
        self.env = dict(os.environ)
        for item in args.env:
            key, _, value = item.partition("=")
            self.env[key] = value
        self.failed = False
        load = os.getloadavg()[0]
        if load > 0.5:
            print(
                f"[compare.py] WARNING: load average {load:.2f} before the first run: something "
                "else is using the cores, the times will be distorted",
                flush=True,
            )
        self.report: dict[str, Any] = {
            "benchmark": "peers",
            "command": command,
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "args": {k: v for k, v in vars(args).items()},
            "started": now(),
            "machine": dict(machine_info(), loadavg_before=list(os.getloadavg())),
            "env_overrides": dict(kv.partition("=")[::2] for kv in args.env),
            "env_threads": {
                k: os.environ.get(k)
                for k in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS")
            },
            "versions": {},
            "prepare": {},
            "runs": [],
            "summary": {},
            "errors": [],
        }

    # -------------------------------------------------------------------------------- bookkeeping
    def save(self) -> None:
        self.report["machine"]["loadavg_now"] = list(os.getloadavg())
        table, notes = self.table()
        extra = self.extra_tables()
        self.report["table_md"] = table
        self.report["extra_tables_md"] = extra
        save_json(self.args.out, self.report)
        with atomic_open(self.args.md, "w") as fh:
            fh.write(f"{self.title()}\n\n{table}\n\n{notes}\n\n")
            if extra:
                fh.write(f"{extra}\n\n")
            fh.write(f"Command: `{self.report['command']}`\n")

    def error(self, where: str, exc: BaseException) -> None:
        self.failed = True
        msg = f"{where}: {type(exc).__name__}: {exc}"
        print(f"[compare.py] ERROR {msg}", flush=True)
        self.report["errors"].append(msg)

    def run(self, argv: list[str], name: str, **kw) -> dict[str, Any]:
        kw.setdefault("env", self.env)
        kw.setdefault("poll", self.args.poll)
        return run_command(argv, self.logs / f"{name}.log", timeout=self.args.job_timeout, **kw)

    # ------------------------------------------------------------------------------------ versions
    def versions(self) -> None:
        v: dict[str, Any] = {}
        try:
            v["shardgnn"] = importlib.metadata.version("shardgnn")
        except importlib.metadata.PackageNotFoundError:
            v["shardgnn"] = None
        git = ["git", "-C", str(REPO)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
        v["shardgnn_git_commit"] = head.stdout.strip() or None
        v["shardgnn_git_dirty_files"] = [ln for ln in dirty.stdout.splitlines() if ln.strip()]
        v["project_python"] = sys.executable
        code = (
            "import json, platform, dgl, numpy, torch; print(json.dumps({'python': "
            "platform.python_version(), 'dgl': dgl.__version__, 'torch': torch.__version__, "
            "'numpy': numpy.__version__, 'torch_threads': torch.get_num_threads()}))"
        )
        res = subprocess.run(
            [self.args.dgl_python, "-c", code], capture_output=True, text=True, env=self.env
        )
        try:
            v["dgl_venv"] = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            v["dgl_venv"] = {"error": res.stderr.strip()[-2000:]}
            self.report["versions"] = v
            raise RunError(
                f"{self.args.dgl_python} cannot import dgl: {res.stderr.strip()[-500:]}"
            ) from None
        v["dgl_venv"]["executable"] = self.args.dgl_python
        self.report["versions"] = v
        print(
            f"shardgnn {v['shardgnn']} ({(v['shardgnn_git_commit'] or '?')[:12]}"
            f"{', dirty tree' if v['shardgnn_git_dirty_files'] else ''}); DGL venv: dgl "
            f"{v['dgl_venv']['dgl']}, torch {v['dgl_venv']['torch']}",
            flush=True,
        )

    # --------------------------------------------------------------------------------------- graph
    def graph_params(self) -> dict[str, Any]:
        a = self.args
        return {
            "nodes": a.nodes,
            "edges": a.edges,
            "feat": a.feat,
            "classes": a.classes,
            "train_frac": a.train_frac,
            "kind": a.kind,
            "seed": a.graph_seed,
        }

    def ensure_graph(self) -> None:
        a, params = self.args, self.graph_params()
        self.npz = self.work / f"peers_{self.tag}.npz"
        side = self.npz.with_suffix(".npz.json")
        meta = read_sidecar(side)
        if self.npz.is_file() and meta and meta.get("params") == params:
            print(f"graph: reusing {self.npz} ({meta.get('summary')})", flush=True)
            self.report["prepare"]["graph"] = dict(meta, reused=True, path=str(self.npz))
            self.graph_meta = meta
            return
        side.unlink(missing_ok=True)
        argv = [
            a.dgl_python,
            str(HERE / "gen_graph.py"),
            "--nodes",
            str(a.nodes),
            "--edges",
            str(a.edges),
            "--feat",
            str(a.feat),
            "--classes",
            str(a.classes),
            "--train-frac",
            str(a.train_frac),
            "--kind",
            a.kind,
            "--seed",
            str(a.graph_seed),
            "--out",
            str(self.npz),
        ]
        res = check(self.run(argv, f"prepare_gen_graph_{self.tag}"), "gen_graph.py")
        summary = next((ln for ln in res["output"] if ln.startswith("nodes=")), "")
        m = re.search(r"\bedges=(\d+)", summary)
        meta = {
            "params": params,
            "created": now(),
            "command": res["command"],
            "wall_s": res["wall_s"],
            "summary": summary,
            "num_edges": int(m.group(1)) if m else None,
        }
        write_sidecar(side, meta)
        self.report["prepare"]["graph"] = dict(meta, reused=False, path=str(self.npz))
        self.graph_meta = meta

    def ensure_shardgnn_graph(self) -> None:
        """The same graph as a shardgnn graph directory (``graph:DIR``)."""
        a = self.args
        self.sg_dir = self.work / f"peers_{self.tag}_sg"
        side = self.work / f"peers_{self.tag}_sg.json"
        key = {
            "graph_created": self.graph_meta["created"],
            "graph_params": self.graph_params(),
            "val_size": a.val_size,
            "test_size": a.test_size,
            "split_seed": a.split_seed,
        }
        meta = read_sidecar(side)
        if self.sg_dir.is_dir() and meta and meta.get("key") == key:
            print(f"shardgnn graph: reusing {self.sg_dir}", flush=True)
            self.report["prepare"]["shardgnn_graph"] = dict(meta, reused=True)
            self.sg_meta = meta
            return
        side.unlink(missing_ok=True)
        t0 = time.perf_counter()
        z = np.load(self.npz)
        n = int(z["num_nodes"])
        train_idx = z["train_idx"]
        rest = np.setdiff1d(np.arange(n, dtype=np.int64), train_idx)
        rest = np.random.default_rng(a.split_seed).permutation(rest)
        nval, ntest = min(a.val_size, len(rest) // 2), min(a.test_size, len(rest) // 2)
        if nval < 1 or ntest < 1:
            raise RunError("no non-training nodes left for validation/test")
        val_idx, test_idx = np.sort(rest[:nval]), np.sort(rest[nval : nval + ntest])
        sg_npz = self.work / f"peers_{self.tag}_sg.npz"
        np.savez(
            sg_npz,
            src=z["src"],
            dst=z["dst"],
            x=z["feat"],
            y=z["label"],
            train_idx=train_idx,
            val_idx=val_idx,
            test_idx=test_idx,
        )
        del z
        write_s = time.perf_counter() - t0
        argv = [
            sys.executable,
            "-m",
            "shardgnn",
            "convert",
            "--npz",
            str(sg_npz),
            "--out",
            str(self.sg_dir),
            "--name",
            f"peers-{self.tag}",
            "--overwrite",
        ]
        try:
            res = check(self.run(argv, f"prepare_convert_{self.tag}"), "shardgnn convert")
        finally:
            sg_npz.unlink(missing_ok=True)  # a copy of the graph; the graph directory holds it
        meta = {
            "key": key,
            "created": now(),
            "num_train": int(len(train_idx)),
            "num_val": int(nval),
            "num_test": int(ntest),
            "npz_write_s": round(write_s, 3),
            "command": res["command"],
            "wall_s": res["wall_s"],
            "output_tail": res["output"][-10:],
        }
        write_sidecar(side, meta)
        self.report["prepare"]["shardgnn_graph"] = dict(meta, reused=False)
        self.sg_meta = meta

    def ensure_partitions(self) -> None:
        """METIS, 2 parts, for DistDGL and for shardgnn (each reused while its sidecar matches)."""
        a = self.args
        self.dgl_parts = self.work / f"peers_{self.tag}_dgl_metis2"
        self.sg_parts = self.work / f"peers_{self.tag}_sg_metis2"
        out = self.report["prepare"].setdefault("partitions", {})
        specs = [
            (
                "dgl",
                self.dgl_parts,
                {"graph_created": self.graph_meta["created"], "parts": 2, "method": "metis"},
                [
                    a.dgl_python,
                    str(HERE / "dgl_partition.py"),
                    "--graph",
                    str(self.npz),
                    "--parts",
                    "2",
                    "--method",
                    "metis",
                    "--name",
                    "synth",
                    "--out",
                    str(self.dgl_parts),
                ],
            ),
            (
                "shardgnn",
                self.sg_parts,
                {"graph_created": self.sg_meta["created"], "parts": 2, "method": "metis"},
                [
                    sys.executable,
                    "-m",
                    "shardgnn",
                    "partition",
                    f"graph:{self.sg_dir}",
                    "--parts",
                    "2",
                    "--method",
                    "metis",
                    "--out",
                    str(self.sg_parts),
                    "--overwrite",
                    "--quiet",
                ],
            ),
        ]
        for side_name, path, key, argv in specs:
            side = path.with_name(path.name + ".json")
            meta = read_sidecar(side)
            if path.is_dir() and meta and meta.get("key") == key:
                print(f"{side_name} partitions: reusing {path}", flush=True)
                out[side_name] = dict(meta, reused=True, path=str(path))
                continue
            side.unlink(missing_ok=True)
            if side_name == "dgl" and path.exists():
                shutil.rmtree(path)
            res = check(self.run(argv, f"prepare_partition_{side_name}_{self.tag}"), argv[1])
            m = re.search(r"PARTITION .* time=([\d.]+)s", "\n".join(res["output"]))
            meta = {
                "key": key,
                "created": now(),
                "command": res["command"],
                "wall_s": res["wall_s"],
                "partition_s": float(m.group(1)) if m else None,
                "output_tail": res["output"][-12:],
            }
            write_sidecar(side, meta)
            out[side_name] = dict(meta, reused=False, path=str(path))

    # ---------------------------------------------------------------------------------------- runs
    def shardgnn_common(self, batch: int) -> list[str]:
        a = self.args
        argv = [
            "--model",
            "sage",
            "--hidden",
            str(a.hidden),
            "--fanouts",
            ",".join(map(str, a.fanouts_list)),
            "--batch-size",
            str(batch),
            "--epochs",
            str(a.epochs),
            "--dropout",
            "0",
            "--lr",
            str(a.lr),
            "--quiet",
        ]
        if a.heap:
            argv += ["--heap", a.heap]
        return argv

    def dgl_common(self) -> list[str]:
        a = self.args
        return [
            "--fanouts",
            ",".join(map(str, reversed(a.fanouts_list))),  # DGL: input layer first
            "--batch",
            str(a.batch),
            "--hidden",
            str(a.hidden),
            "--epochs",
            str(a.epochs),
        ]

    @staticmethod
    def shardgnn_record(res: dict[str, Any], results_path: Path) -> dict[str, Any]:
        results = json.loads(results_path.read_text())
        if results.get("status") != "complete":
            raise RunError(f"{results_path}: status {results.get('status')!r}")
        epochs = results["epochs"]
        times = [e["time_s"] for e in epochs]
        comm = {
            stage: {k: st.get(k) for k in ("bytes_sent", "bytes_recv", "host_bytes")}
            for stage, st in (results.get("comm") or {}).items()
        }
        sample_fetch = [
            e["stages"].get("sample", 0.0) + e["stages"].get("fetch", 0.0) for e in epochs
        ]
        return dict(
            res,
            results_json=str(results_path),
            epochs_s=times,
            value_s=median(steady(times)),
            sample_fetch_s=sample_fetch,
            sample_fetch_value_s=median(steady(sample_fetch)),
            stages=[e["stages"] for e in epochs],
            workers=results.get("workers"),
            comm=comm or None,
            val_acc=results.get("val_acc"),
            test_acc=results.get("test_acc"),
            results=results,
        )

    def run_shardgnn_single(self, name: str, extra: list[str]) -> dict[str, Any]:
        a = self.args
        path = self.logs / f"{name}.results.json"
        path.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "shardgnn", "train", f"graph:{self.sg_dir}"]
        argv += self.shardgnn_common(a.batch) + ["--results", str(path)]
        if a.threads:
            argv += ["--threads", str(a.threads)]
        argv += extra  # a variant's flags last: they override the ones above
        res = check(self.run(argv, name), "shardgnn train")
        return self.shardgnn_record(res, path)

    def run_dgl_single(self, name: str, sample_only: bool) -> dict[str, Any]:
        a = self.args
        argv = [a.dgl_python, str(HERE / "dgl_sage.py"), "--graph", str(self.npz)]
        argv += self.dgl_common()
        if sample_only:
            argv.append("--sample-only")
        if a.threads:
            argv += ["--threads", str(a.threads)]
        res = check(self.run(argv, name), "dgl_sage.py")
        rec = result_line(res["output"])
        return dict(res, result=rec, epochs_s=rec["runs_s"], value_s=median(steady(rec["runs_s"])))

    def dist_batch(self) -> int:
        return self.args.batch * (2 if self.args.dist_batch == "per-worker" else 1)

    def run_shardgnn_dist2(self, name: str, extra: list[str]) -> dict[str, Any]:
        path = self.logs / f"{name}.results.json"
        path.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "shardgnn", "train", "--partitions", str(self.sg_parts)]
        argv += ["--workers", "2"] + self.shardgnn_common(self.dist_batch())
        argv += ["--results", str(path), "--log-dir", str(self.logs / f"{name}.workers")]
        argv += extra
        res = check(self.run(argv, name), "shardgnn train --workers 2")
        return self.shardgnn_record(res, path)

    def run_dgl_dist2(self, name: str, transport: str = "loopback") -> dict[str, Any]:
        """DistDGL, 2 machines of 1 server + 1 trainer: simulated on this host (``loopback``) or
        one per network namespace (``netns``, the same two-host setup as shardgnn's netns run)."""
        a = self.args
        argv = ["bash", str(HERE / "run_distdgl.sh"), *self.dgl_common()]
        argv += ["--classes", str(a.classes)]
        env = dict(
            self.env,
            PY=a.dgl_python,
            SG_PY=sys.executable,
            PEERS=str(self.work),
            PART_CONFIG=str(self.dgl_parts / "synth.json"),
            NUM_MACHINES="2",
            TRANSPORT=transport,
            LOGDIR=str(self.logs / f"{name}.distdgl"),
        )
        if a.job_timeout:  # the harness's own deadline first, so it removes its namespaces
            env["DEADLINE"] = str(max(30.0, a.job_timeout - 60))
        res = check(self.run(argv, name, env=env), "run_distdgl.sh")
        rec = result_line(res["output"])
        keys = ("PY", "PEERS", "PART_CONFIG", "NUM_MACHINES", "TRANSPORT", "LOGDIR")
        return dict(
            res,
            env={k: env[k] for k in keys},
            result=rec,
            epochs_s=rec["runs_s"],
            value_s=median(steady(rec["runs_s"])),
        )

    def run_shardgnn_netns(self, name: str, extra: list[str], port: int) -> dict[str, Any]:
        """shardgnn on the 2-part partition, one torchrun agent + 1 worker per netns host."""
        out = self.logs / f"{name}.hosts"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        results = out / "results-{host}.json"
        host_cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"h0:{port}",
            "--rdzv-id",
            f"peers-{name}",
            "-m",
            "shardgnn.run",
            "train",
            "--partitions",
            str(self.sg_parts),
            *self.shardgnn_common(self.dist_batch()),
            "--threads",
            "1",  # two "hosts" share this machine's cores, as the 2 local workers of dist2 do
            *extra,
            "--results",
            str(results),
        ]
        argv = [
            sys.executable,
            str(BENCH / "netns_hosts.py"),
            "run",
            "--prefix",
            "sgpeers",
            "--fault",
            "none",
            "--fault-after",
            "0",
            "--deadline",
            # the harness's own deadline first, so it tears its namespaces down itself
            str(max(30.0, self.args.job_timeout - 60) if self.args.job_timeout else 7200.0),
            "--logs",
            str(out / "logs"),
            "--json",
            str(out / "netns.json"),
            "--",
            *host_cmd,
        ]
        res = check(self.run(argv, name), "netns_hosts.py run")
        done = [
            p
            for p in sorted(out.glob("results-h*.json"))
            if (read_sidecar(p) or {}).get("status") == "complete"
        ]
        if not done:
            tail = []
            for log in sorted((out / "logs").glob("*.log")):
                tail += [f"{log.name}: {ln}" for ln in log.read_text().splitlines()[-8:]]
            raise RunError("no host wrote complete results:\n" + "\n".join(tail))
        return dict(self.shardgnn_record(res, done[0]), per_host_command=shlex.join(host_cmd))

    def record(
        self, what: str, side: str, rnd: int, fn, *fn_args, variant: str | None = None
    ) -> dict[str, Any] | None:
        label = side if variant is None else f"{side}.{variant}"
        name = f"{what}_{label}_r{rnd}"
        print(f"\n=== round {rnd + 1}/{self.args.rounds}: {what} / {label} ===", flush=True)
        entry: dict[str, Any] = {
            "what": what,
            "side": side,
            "variant": variant,
            "round": rnd,
            "started": now(),
        }
        if variant is not None:
            entry["variant_args"] = self.variant(variant)["args"]
        try:
            rec = fn(name, *fn_args)
        except Exception as exc:  # noqa: BLE001 - recorded, the other runs go on
            self.error(name, exc)
            entry["error"] = f"{type(exc).__name__}: {exc}"
            rec = None
        else:
            rec.pop("output", None)  # the log file holds it
            entry.update(rec)
            print(
                f"--- {name}: epochs {[round(t, 3) for t in rec['epochs_s']]} s -> "
                f"{rec['value_s']:.3f} s; peak RSS {rec['peak_rss_gb']:.3f} GB, "
                f"{rec['minor_faults'] / 1e6:.3f} M minor faults",
                flush=True,
            )
        self.report["runs"].append(entry)
        self.summarize()
        self.save()
        return rec

    # ------------------------------------------------------------------------------------ schedule
    def variant(self, name: str) -> dict[str, Any]:
        return next(v for v in self.args.variants if v["name"] == name)

    def shardgnn_runs(self, what: str) -> list[tuple[str | None, list[str]]]:
        """(variant, extra flags) of every shardgnn run of row ``what``: the default first."""
        return [(None, [])] + [
            (v["name"], v["args"]) for v in self.args.variants if what in v["rows"]
        ]

    def sample_source(self, variant: str | None) -> str:
        """Which runs give the `sample` row its shardgnn numbers: that round's `single` run of the
        same variant when there is one, else a training run made for the `sample` row."""
        rows = WHAT if variant is None else self.variant(variant)["rows"]
        return "single" if "single" in self.args.what_list and "single" in rows else "sample"

    def plan(self) -> None:
        whats = self.args.what_list
        for rnd in range(self.args.rounds):
            dgl_first = rnd % 2 == 0
            for what in WHAT:
                if what not in whats:
                    continue
                sg = self.shardgnn_runs(what)
                if what == "sample":
                    # shardgnn's side: the stage times of this round's `single` runs, if any
                    sg = [(v, e) for v, e in sg if self.sample_source(v) == "sample"]
                dgl_fn, dgl_args = {
                    "single": (self.run_dgl_single, (False,)),
                    "sample": (self.run_dgl_single, (True,)),
                    "dist2": (self.run_dgl_dist2, ("loopback",)),
                    "netns": (self.run_dgl_dist2, ("netns",)),
                }[what]
                dgl_steps = [("dgl", None, dgl_fn, dgl_args)]
                if what == "netns":  # a fresh rendezvous port per run
                    sg_steps = [
                        ("shardgnn", v, self.run_shardgnn_netns, (e, 29600 + (rnd * 8 + k) % 50))
                        for k, (v, e) in enumerate(sg)
                    ]
                else:
                    sg_fn = self.run_shardgnn_dist2 if what == "dist2" else self.run_shardgnn_single
                    sg_steps = [("shardgnn", v, sg_fn, (e,)) for v, e in sg]
                # DGL, then shardgnn's default run, then each variant (reversed every other
                # round: shardgnn's default and variants, then DGL)
                for side, variant, fn, fn_args in (
                    dgl_steps + sg_steps if dgl_first else sg_steps + dgl_steps
                ):
                    self.record(what, side, rnd, fn, *fn_args, variant=variant)

    def runs_of(self, what: str, side: str, variant: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.report["runs"]
            if r["what"] == what
            and r["side"] == side
            and r.get("variant") == variant
            and "error" not in r
        ]

    def epoch_values(self, what: str, variant: str | None) -> list[float]:
        """shardgnn's per-round epoch seconds of row ``what`` (default run or a variant)."""
        if what == "sample":
            src = self.sample_source(variant)
            return [r["sample_fetch_value_s"] for r in self.runs_of(src, "shardgnn", variant)]
        return [r["value_s"] for r in self.runs_of(what, "shardgnn", variant)]

    def summarize(self) -> None:
        s: dict[str, Any] = {}
        names = [v["name"] for v in self.args.variants]
        for what in [w for w in WHAT if w in self.args.what_list]:
            dgl = [r["value_s"] for r in self.runs_of(what, "dgl")]
            sg = self.epoch_values(what, None)
            d, g = median(dgl), median(sg)
            s[what] = {
                "dgl_s": d,
                "shardgnn_s": g,
                "ratio_shardgnn_over_dgl": round(g / d, 4) if d and g is not None else None,
                "dgl_per_round_s": dgl,
                "shardgnn_per_round_s": sg,
            }
            variants = {}
            for name, _ in self.shardgnn_runs(what)[1:]:
                vals = self.epoch_values(what, name)
                x = median(vals)
                variants[name] = {
                    "args": self.variant(name)["args"],
                    "variant_s": x,
                    "variant_per_round_s": vals,
                    "ratio_variant_over_dgl": round(x / d, 4) if d and x is not None else None,
                    "ratio_default_over_variant": (
                        round(g / x, 4) if x and g is not None else None
                    ),
                }
            if variants:
                s[what]["variants"] = variants
        parts = self.report["prepare"].get("partitions", {})
        if "dgl" in parts and "shardgnn" in parts:
            d, g = parts["dgl"]["wall_s"], parts["shardgnn"]["wall_s"]
            s["partition"] = {
                "dgl_s": d,
                "shardgnn_s": g,
                "ratio_shardgnn_over_dgl": g / d if d else None,
                "reused": [parts["dgl"]["reused"], parts["shardgnn"]["reused"]],
            }
        # every shardgnn run's command: memory and minor page faults (median over rounds)
        resources = []
        for what in WHAT:
            for variant in [None, *names]:
                runs = self.runs_of(what, "shardgnn", variant)
                if not runs:
                    continue
                per_round = {
                    k: [r.get(k) for r in runs]
                    for k in ("value_s", "peak_rss_gb", "sum_peak_rss_gb", "minor_faults")
                }
                resources.append(
                    {
                        "what": what,
                        "variant": variant,
                        "rounds": len(runs),
                        **{
                            k: median([x for x in v if x is not None]) for k, v in per_round.items()
                        },
                        "per_round": per_round,
                    }
                )
        s["resources"] = resources
        # dist2 / netns: bytes per communication stage, summed over ranks (median over rounds)
        comm: dict[str, Any] = {}
        for what in ("dist2", "netns"):
            for variant in [None, *names]:
                runs = [r for r in self.runs_of(what, "shardgnn", variant) if r.get("comm")]
                if not runs:
                    continue
                stages = sorted({st for r in runs for st in r["comm"]})
                comm.setdefault(what, {})[variant or "default"] = {
                    st: {
                        k: median(
                            [
                                r["comm"][st][k]
                                for r in runs
                                if r["comm"].get(st, {}).get(k) is not None
                            ]
                        )
                        for k in ("bytes_sent", "bytes_recv", "host_bytes")
                    }
                    for st in stages
                }
        s["comm"] = comm
        self.report["summary"] = s

    # -------------------------------------------------------------------------------------- report
    def title(self) -> str:
        a = self.args
        m = self.graph_meta.get("num_edges") if hasattr(self, "graph_meta") else None
        edges = f"{m:,}" if m else f"~{a.edges:,}"
        return (
            f"shardgnn vs DGL on the same synthetic graph ({a.kind}, {a.nodes:,} nodes, {edges} "
            f"edges, {a.feat} features, {a.classes} classes, {int(a.nodes * a.train_frac):,} "
            f"training nodes): GraphSAGE-mean, hidden {a.hidden}, fanouts "
            f"{','.join(map(str, a.fanouts_list))} (output layer first), batch {a.batch}, no "
            f"dropout; {a.epochs} epoch(s) per run, {a.rounds} round(s) alternating DGL / shardgnn"
        )

    def table(self) -> tuple[str, str]:
        def fmt(x: float | None) -> str:
            return "-" if x is None else (f"{x:.1f}" if x >= 10 else f"{x:.3f}")

        def fmt_ratio(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        has_variants = bool(self.args.variants)
        rows = []
        for what in [w for w in WHAT if w in self.args.what_list]:
            s = self.report["summary"].get(what, {})
            rows.append(
                [
                    ROW_LABELS[what],
                    fmt(s.get("dgl_s")),
                    fmt(s.get("shardgnn_s")),
                    fmt_ratio(s.get("ratio_shardgnn_over_dgl")),
                ]
                + ([""] if has_variants else [])
            )
            for name, v in s.get("variants", {}).items():
                rows.append(
                    [
                        f"↳ variant {name} [5]",
                        fmt(s.get("dgl_s")),
                        fmt(v["variant_s"]),
                        fmt_ratio(v["ratio_variant_over_dgl"]),
                        fmt_ratio(v["ratio_default_over_variant"]),
                    ]
                )
        part = self.report["summary"].get("partition")
        if part:
            rows.append(
                [
                    "METIS into 2 parts, whole command (s) [4]",
                    fmt(part["dgl_s"]),
                    fmt(part["shardgnn_s"]),
                    f"{part['ratio_shardgnn_over_dgl']:.2f}",
                ]
                + ([""] if has_variants else [])
            )
        headers = ["run", "DGL", "shardgnn", "ratio (shardgnn/DGL)"]
        if has_variants:
            headers.append("ratio (default/variant)")
        table = format_table(headers, rows)
        a = self.args
        b = self.dist_batch()
        notes = [
            "Seconds: median over rounds of each run's median epoch (epochs 2..N; epoch 1 holds "
            "numba JIT and first-touch costs; with 1 epoch, epoch 1). Training loop only on "
            "both sides (shardgnn's validation pass after each epoch is not counted). "
            "Ratio < 1: shardgnn faster. Compare ratios: absolute times move by ~10 % "
            "between runs.",
            "[1] DGL: `dgl_sage.py --sample-only` (sampler + feature gather, no model). "
            "shardgnn has no sample-only mode: its column is the `sample` + `fetch` stage "
            "seconds of its training epochs"
            + (" (the `single` runs)." if "single" in a.what_list else "."),
            f"[2] DistDGL: `run_distdgl.sh`, 2 simulated machines on this host (1 server + 1 "
            f"trainer each, 1 OMP thread each), {a.batch} seeds per trainer per step, epoch = "
            f"max over trainers. shardgnn: `shardgnn train --partitions DIR --workers 2`, "
            f"global batch {b} ({b // 2} per worker per step), epoch = mean over ranks; "
            "both METIS, 2 parts.",
            "[3] The same partitions on 2 network namespaces joined by a veth pair "
            "(`benchmarks/netns_hosts.py run --fault none`), so every byte between the two "
            "sides crosses the veth: DistDGL with 1 server + 1 trainer per namespace "
            "(`TRANSPORT=netns run_distdgl.sh`), shardgnn with one torchrun agent + 1 worker "
            "(1 torch thread) per namespace; batches as in [2].",
            "[4] one run each, not alternated (wall time of `dgl_partition.py` / "
            "`shardgnn partition`, graph loading and writing included); taken from the "
            "sidecar when the partition was reused.",
        ]
        keep = [notes[0]]
        keep += [n for n, w in zip(notes[1:4], ("sample", "dist2", "netns")) if w in a.what_list]
        if part:
            keep.append(notes[4])
        if has_variants:
            keep.append(
                "[5] shardgnn variants, each run in every round right after shardgnn's default "
                "run of its rows (DGL first in even rounds, last in odd ones), its flags appended "
                "to the default run's command line: "
                + "; ".join(
                    f"`{v['name']}` = `{shlex.join(v['args'])}` ({', '.join(v['rows'])})"
                    for v in a.variants
                )
                + ". Its row: DGL = the same DGL runs as the row above, shardgnn = the variant, "
                "ratio (shardgnn/DGL) = variant / DGL, ratio (default/variant) = shardgnn's "
                "default run / the variant (above 1: the variant is faster)."
            )
        if self.report["errors"]:
            keep.append("Errors: " + "; ".join(e.splitlines()[0] for e in self.report["errors"]))
        return table, "\n\n".join(keep)

    def extra_tables(self) -> str:
        """Markdown: memory and minor faults of every shardgnn run; bytes per stage of dist2 /
        netns."""
        s = self.report["summary"]
        out = []

        def num(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
            return "-" if x is None else f"{x / scale:.{digits}f}"

        res = s.get("resources") or []
        if res:
            rows = [
                [
                    r["what"],
                    r["variant"] or "default",
                    r["rounds"],
                    num(r["value_s"]),
                    num(r["peak_rss_gb"]),
                    num(r["sum_peak_rss_gb"]),
                    num(r["minor_faults"], 1e6),
                ]
                for r in res
            ]
            table = format_table(
                [
                    "run",
                    "shardgnn",
                    "rounds",
                    "epoch (s)",
                    "peak RSS (GB)",
                    "Σ peak RSS, all processes (GB)",
                    "minor faults (M)",
                ],
                rows,
            )
            poll = (
                f"each process's VmHWM read from /proc every {self.args.poll:g} s while the "
                "command runs, summed over the command's process tree (launcher and workers; "
                "pages shared between processes, such as mapped partition files, count once per "
                "process; growth in a process's last poll interval is missed)"
                if self.args.poll > 0
                else "not measured (--poll 0)"
            )
            out.append(
                "shardgnn runs: memory and page faults (whole command: start-up, loading, every "
                "epoch and evaluation; median over rounds)\n\n"
                + table
                + "\n\npeak RSS (GB, 1e9 bytes): the largest resident set of any one process of "
                "the command (`ru_maxrss` from `wait4` on it: the maximum over the command and "
                "every descendant it waited for; with workers, the largest single process, not "
                f"a sum). Σ peak RSS: {poll}. minor faults (M): `ru_minflt` from `wait4`, summed "
                "over the command and its waited-for descendants. shardgnn's results JSON records "
                "no RSS, so these are measured from outside. The `sample` row uses the `single` "
                "runs when there are any, so it has no line of its own then."
            )
        comm = s.get("comm") or {}
        for what, per in comm.items():
            labels = list(per)
            stages = sorted({st for v in per.values() for st in v})
            headers = ["stage"]
            for lab in labels:
                headers += [f"{lab}: MB cross-process", f"{lab}: MB same-host"]
            rows = []
            for st in stages:
                row = [st]
                for lab in labels:
                    c = per[lab].get(st, {})
                    row += [num(c.get("bytes_sent"), 1e6), num(c.get("host_bytes"), 1e6)]
                rows.append(row)
            out.append(
                f"{what}: shardgnn's bytes per communication stage (`comm` of its results JSON, "
                "whole run: every epoch and evaluation, summed over ranks; median over rounds)\n\n"
                + format_table(headers, rows)
                + "\n\nMB cross-process: `bytes_sent` (through the collectives backend, between "
                "processes; summed over ranks, equal to `bytes_recv`); MB same-host: `host_bytes` "
                "(rows read straight from a peer's mapped partition files on the same host, no "
                "collective; '-' when this shardgnn does not count them)."
            )
        return "\n\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    command = shlex.join([sys.executable, *(sys.argv if argv is None else [__file__, *argv])])
    peers = Peers(args, command)
    try:
        peers.versions()
        peers.ensure_graph()
        peers.ensure_shardgnn_graph()
        if {"dist2", "netns"} & set(args.what_list):
            peers.ensure_partitions()
    except (RunError, OSError, subprocess.SubprocessError) as exc:
        peers.error("prepare", exc)
        peers.save()
        return 1
    peers.summarize()
    peers.save()
    peers.plan()
    peers.report["finished"] = now()
    peers.save()
    table, notes = peers.table()
    extra = peers.extra_tables()
    print(
        f"\n{peers.title()}\n\n{table}\n\n{notes}\n\n{extra}\n\nwrote {args.out} and {args.md}",
        flush=True,
    )
    return 1 if peers.failed else 0


if __name__ == "__main__":
    sys.exit(main())
