r"""Fault tests across "hosts" made of Linux network namespaces: cut the network mid-job, measure
how long every host takes to end.

Needs Linux, root, ``ip`` (iproute2), ``unshare`` and ``hostname`` (util-linux); ``--gdb-at``
needs ``gdb``. Everything it creates is torn down in ``finally`` blocks (namespaces, veth pairs,
every process it started, its scratch directory), also on Ctrl-C, SIGTERM and errors, and a hard
deadline kills whatever is still running.

Topology. Host ``i`` (``0 .. N-1``) is the network namespace ``{prefix}-h{i}`` with one interface
``sgnet0`` at ``10.77.0.{i+1}/24``. ``--topology veth`` (2 hosts): the two interfaces are the two
ends of one veth pair. ``--topology bridge``: every host's veth ends on the bridge ``br0`` of a
"switch" namespace ``{prefix}-sw`` (port ``p{i}``). Every command runs through
``ip netns exec NS unshare --uts --mount``, with its own hostname ``h{i}`` and a private
``/etc/hosts`` naming every host, so the SAME command line runs on every host exactly as on a
cluster: ``--rdzv-endpoint h0:29500`` resolves, the c10d backend infers from the hostname that
``h0`` hosts the store, and torch publishes ``h0`` as ``MASTER_ADDR`` and gloo binds the address
of its own hostname (no ``--local-addr``, ``is_host`` or ``GLOO_SOCKET_IFNAME`` needed).

Faults (``--fault``). ``down``: ``ip link set sgnet0 down`` inside host ``--fault-host`` (with
veth, the peer loses its carrier; nothing is closed, packets just stop, as with a dead cable or
switch). ``switch-down``: the switch port of ``--fault-host`` goes down (bridge topology).
``drop`` (bridge topology): every switch port leaves the bridge (``ip link set pI nomaster``):
every link stays up with its carrier, the frames reach the switch and go nowhere.

Measurements (per host, seconds from the fault): the first output line matching each ``--event``
regex (default ``collective`` = CollectiveError, ``store`` = a rendezvous/store error), when the
host's command exited and its exit code, when its whole process tree was gone (every process it
ever started, re-parented orphans included: this process is a child subreaper; a zombie counts as
gone), whether the harness had to kill it at the deadline, and the last lines of its output.

Subcommands:

``run``: any command on every host; ``{host}``, ``{index}``, ``{addr}`` in the arguments are
replaced per host::

    python benchmarks/netns_hosts.py run --fault-after 10 -- sh -c 'echo {host}; sleep 30'

``partition``: the torchrun fault test. Partitions ``synthetic:nodes=N`` into 2 parts once (in
``--partitions``), starts one torchrun agent with one worker per host (``torchrun --nnodes 2
--nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint h0:PORT --rdzv-id ID [--torchrun-args]
-m shardgnn.run train synthetic:nodes=N --partitions DIR --epochs E --timeout T``), waits for the
first epoch line, takes the link down ``--fault-delay`` seconds later (mid-epoch) and measures.
``--launcher shardgnn`` runs the same agents as ``python -m shardgnn.torchrun`` (torchrun with
a watchdog for an agent blocked on an unreachable rendezvous store, see that module)::

    python benchmarks/netns_hosts.py partition --timeout 20 --json /tmp/run.json
    python benchmarks/netns_hosts.py partition --timeout 20 \
        --torchrun-args "--rdzv-conf read_timeout=5,close_timeout=5 --shutdown-timeout 5"
    python benchmarks/netns_hosts.py partition --launcher shardgnn --json /tmp/run.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from shardgnn.distributed.launch import proc_table

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
IFACE = "sgnet0"
DEFAULT_EVENTS = {
    "collective": r"CollectiveError",
    "store": r"RendezvousConnectionError|DistStoreError|DistNetworkError|Socket Timeout",
    "watchdog": r"torchrun watchdog:",
}
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


# ------------------------------------------------------------------------------ /proc helpers
def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


# ------------------------------------------------------------------------------ the hosts
class NetnsHosts:
    """N network namespaces joined by a veth pair (N=2) or a bridge; see the module docstring."""

    def __init__(
        self, n: int = 2, prefix: str = "sgnh", subnet: str = "10.77.0", topology: str = "veth"
    ):
        if topology == "veth" and n != 2:
            raise ValueError("--topology veth joins exactly 2 hosts; use --topology bridge")
        if len(prefix) > 8:
            raise ValueError("prefix: at most 8 characters (interface names have 15)")
        self.n, self.prefix, self.subnet, self.topology = n, prefix, subnet, topology
        self.ns = [f"{prefix}-h{i}" for i in range(n)]
        self.names = [f"h{i}" for i in range(n)]
        self.addrs = [f"{subnet}.{i + 1}" for i in range(n)]
        self.switch = f"{prefix}-sw"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
        self.hosts_file = self.dir / "hosts"
        self.up = False

    # -- lifecycle
    def _all_namespaces(self) -> list[str]:
        return [*self.ns, self.switch]

    def setup(self) -> None:
        self.teardown(leftovers_only=True)  # a killed earlier run of this harness
        self.up = True
        lines = ["127.0.0.1 localhost"] + [f"{a} {h}" for a, h in zip(self.addrs, self.names)]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        for ns in self.ns:
            _run(["ip", "netns", "add", ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        if self.topology == "veth":
            a, b = f"{self.prefix}-va", f"{self.prefix}-vb"
            _run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
            ends = [a, b]
        else:
            _run(["ip", "netns", "add", self.switch])
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
            ends = []
            for i in range(self.n):
                end, port = f"{self.prefix}-e{i}", f"{self.prefix}-p{i}"
                _run(["ip", "link", "add", end, "type", "veth", "peer", "name", port])
                _run(["ip", "link", "set", port, "netns", self.switch])
                _run(["ip", "-n", self.switch, "link", "set", port, "name", f"p{i}"])
                _run(["ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0"])
                _run(["ip", "-n", self.switch, "link", "set", f"p{i}", "up"])
                ends.append(end)
        for ns, end, addr in zip(self.ns, ends, self.addrs):
            _run(["ip", "link", "set", end, "netns", ns])
            _run(["ip", "-n", ns, "link", "set", end, "name", IFACE])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", IFACE])
            _run(["ip", "-n", ns, "link", "set", IFACE, "up"])

    def teardown(self, leftovers_only: bool = False) -> list[str]:
        """Kill every process inside our namespaces, delete them (their interfaces go with them)
        and any veth end left in the root namespace. Returns what it had to kill."""
        killed = self.kill_inside()
        existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
        for ns in self._all_namespaces():
            if ns in existing:
                _run(["ip", "netns", "del", ns], check=False)
        for name in [f"{self.prefix}-va", f"{self.prefix}-vb"] + [
            f"{self.prefix}-e{i}" for i in range(self.n)
        ]:
            if Path(f"/sys/class/net/{name}").exists():
                _run(["ip", "link", "del", name], check=False)
        if not leftovers_only:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.up = False
        return killed

    def kill_inside(self) -> list[str]:
        """SIGKILL every process inside our namespaces (until none is left); what it killed,
        as ``ns:pid:cmdline``."""
        killed = []
        existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
        for ns in self._all_namespaces():
            if ns not in existing:
                continue
            for _ in range(50):
                pids = _run(["ip", "netns", "pids", ns], check=False).stdout.split()
                if not pids:
                    break
                for pid in pids:
                    killed.append(f"{ns}:{pid}:{_cmdline(int(pid))}")
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.1)
        return killed

    # -- processes
    def wrap(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` as run on host i: its netns, its hostname, its /etc/hosts."""
        script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
        return [
            "ip",
            "netns",
            "exec",
            self.ns[i],
            "unshare",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            str(self.hosts_file),
            self.names[i],
            *argv,
        ]

    def subst(self, i: int, arg: str) -> str:
        return (
            arg.replace("{host}", self.names[i])
            .replace("{index}", str(i))
            .replace("{addr}", self.addrs[i])
        )

    # -- faults
    def fault(self, mode: str, host: int) -> str:
        if mode == "none":
            return "(none)"
        if mode == "down":
            argv = ["ip", "-n", self.ns[host], "link", "set", IFACE, "down"]
            _run(argv)
            return shlex.join(argv)
        if mode == "switch-down":
            if self.topology != "bridge":
                raise ValueError("--fault switch-down needs --topology bridge")
            argv = ["ip", "-n", self.switch, "link", "set", f"p{host}", "down"]
            _run(argv)
            return shlex.join(argv)
        if mode == "drop":
            if self.topology != "bridge":
                raise ValueError("--fault drop needs --topology bridge")
            done = []
            for i in range(self.n):  # the switch stops forwarding; every link stays up
                argv = ["ip", "-n", self.switch, "link", "set", f"p{i}", "nomaster"]
                _run(argv)
                done.append(shlex.join(argv))
            return "; ".join(done)
        raise ValueError(f"unknown fault {mode!r}")

    def heal(self, mode: str, host: int) -> None:
        """Undo :meth:`fault` ``mode`` on ``host`` (the cable is plugged back in)."""
        if mode == "down":
            _run(["ip", "-n", self.ns[host], "link", "set", IFACE, "up"])
        elif mode == "switch-down":
            _run(["ip", "-n", self.switch, "link", "set", f"p{host}", "up"])
        elif mode == "drop":
            for i in range(self.n):
                _run(["ip", "-n", self.switch, "link", "set", f"p{i}", "master", "br0"])
        elif mode != "none":
            raise ValueError(f"unknown fault {mode!r}")


@dataclass
class HostRun:
    """One host's command: its output lines (timestamped) and its process tree."""

    index: int
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    root: tuple[int, int] | None = None  # (pid, starttime)
    lines: list[tuple[float, str]] = field(default_factory=list)
    tracked: dict[tuple[int, int], dict] = field(default_factory=dict)
    exit_status: int | None = None
    exited_at: float | None = None
    gone_at: float | None = None
    killed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, env: dict[str, str]) -> None:
        def child_setup() -> None:  # die with the harness (SIGKILLed harness: no orphans)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=child_setup,
        )
        pid = self.proc.pid
        start = proc_table().get(pid, (0, "?", 0, 0))[2]
        self.root = (pid, start)
        self.tracked[self.root] = {"cmd": shlex.join(self.argv)[:200], "gone_at": None}
        threading.Thread(target=self._read, daemon=True, name=f"read-h{self.index}").start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        buf = b""
        with open(self.log_path, "w") as log:
            while True:
                chunk = self.proc.stdout.read1(65536)
                if not chunk:
                    break
                now = time.monotonic()
                buf += chunk
                parts = re.split(rb"\r\n|\r|\n", buf)
                buf = parts.pop()
                for raw in parts:
                    text = raw.decode(errors="replace")
                    with self.lock:
                        self.lines.append((now, text))
                    log.write(f"{now:.3f} {text}\n")
                log.flush()
            if buf:
                with self.lock:
                    self.lines.append((time.monotonic(), buf.decode(errors="replace")))

    def alive(self) -> list[tuple[int, int]]:
        return [k for k, v in self.tracked.items() if v["gone_at"] is None]

    def first_match(self, pattern: str, after: float = 0.0) -> tuple[float, str] | None:
        regex = re.compile(pattern)
        with self.lock:
            for t, text in self.lines:
                if t >= after and regex.search(text):
                    return t, text
        return None


class Tracker:
    """Polls /proc: follows every host's process tree, reaps our (re-parented) children."""

    def __init__(self, runs: list[HostRun], period: float = 0.05):
        self.runs, self.period = runs, period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="tracker")

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.period)

    def poll(self) -> None:
        now = time.monotonic()
        table = proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _state, _start, _st) in table.items():
            children.setdefault(ppid, []).append(pid)
        me = os.getpid()
        for run in self.runs:
            if run.root is None:
                continue
            with run.lock:
                # grow: every descendant of a live tracked process
                frontier = [pid for (pid, start) in run.alive() if pid in table]
                while frontier:
                    pid = frontier.pop()
                    for child in children.get(pid, ()):
                        key = (child, table[child][2])
                        if key not in run.tracked:
                            run.tracked[key] = {"cmd": _cmdline(child), "gone_at": None}
                            frontier.append(child)
                for key in run.alive():
                    pid, start = key
                    info = table.get(pid)
                    dead = info is None or info[2] != start or info[1] in "ZX"
                    if info is not None and info[1] == "Z" and info[0] == me:
                        with contextlib.suppress(ChildProcessError):
                            reaped, status = os.waitpid(pid, os.WNOHANG)
                            if reaped == 0:  # a zombie leader whose other threads still exit
                                continue
                            if key == run.root and run.exit_status is None:
                                run.exit_status = os.waitstatus_to_exitcode(status)
                    if dead:
                        run.tracked[key]["gone_at"] = now
                        if key == run.root and run.exited_at is None:
                            run.exited_at = now
                if run.gone_at is None and not run.alive():
                    run.gone_at = now

    def kill_all(self) -> None:
        """SIGKILL every live process of every host tree."""
        for run in self.runs:
            with run.lock:
                alive = run.alive()
            if alive and run.gone_at is None:
                run.killed = True
            for pid, _start in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def native_stacks(pid: int, frames: int = 14) -> list[str]:
    """The native stack of every thread of ``pid`` (gdb -batch), one string per thread, keeping
    the frames that name a function (torch's c10d symbols are exported)."""
    if shutil.which("gdb") is None:
        return ["gdb not installed"]
    proc = subprocess.run(
        ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
         "-ex", f"thread apply all bt {frames}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    threads, current = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("Thread "):
            if current:
                threads.append("\n".join(current))
            current = [line.strip()]
        elif line.startswith("#") and current:
            m = re.match(r"#(\d+)\s+(?:0x[0-9a-f]+ in )?(.+?) \(", line)
            current.append(f"  #{m.group(1)} {m.group(2)[:150]}" if m else "  " + line[:150])
    if current:
        threads.append("\n".join(current))
    return threads or [proc.stderr[-500:]]


class Deadline(Exception):
    pass


def run_hosts(
    hosts: NetnsHosts,
    argvs: list[list[str]],
    env: dict[str, str],
    *,
    ready_pattern: str | None,
    ready_timeout: float,
    fault_after: float,
    fault_mode: str,
    fault_host: int,
    deadline: float,
    events: dict[str, str],
    log_dir: Path,
    tail: int = 8,
    term_after: float | None = None,
    gdb_at: float | None = None,
) -> dict:
    """Start ``argvs[i]`` on host i, wait until ``ready_pattern`` appears in any host's output
    (or not at all when None), wait ``fault_after`` more seconds, inject the fault, wait until
    every host's tree is gone or ``deadline`` seconds have passed since the fault (then SIGKILL
    what is left), and return the measurements. Processes are always killed on the way out."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    log_dir.mkdir(parents=True, exist_ok=True)
    runs = [
        HostRun(i, hosts.wrap(i, argv), log_dir / f"{hosts.names[i]}.log")
        for i, argv in enumerate(argvs)
    ]
    tracker = Tracker(runs)
    result: dict = {"hosts": [], "fault": None}
    t_start = time.monotonic()
    t_fault = None
    try:
        for run in runs:
            run.start(env)
        tracker.start()
        # 1. ready
        if ready_pattern:
            end = t_start + ready_timeout
            while True:
                hit = [r.first_match(ready_pattern) for r in runs]
                if any(hit):
                    result["ready_s"] = round(min(h[0] for h in hit if h) - t_start, 2)
                    break
                if all(r.gone_at is not None for r in runs):
                    raise RuntimeError("every host exited before training started: see the logs")
                if time.monotonic() > end:
                    raise Deadline(f"no line matching {ready_pattern!r} within {ready_timeout} s")
                time.sleep(0.1)
        # 2. fault
        time.sleep(fault_after)
        if all(r.gone_at is not None for r in runs):
            raise RuntimeError("every host exited before the fault")
        t_fault = time.monotonic()
        result["fault"] = {
            "command": hosts.fault(fault_mode, fault_host),
            "at_s_from_start": round(t_fault - t_start, 2),
            "host": hosts.names[fault_host],
        }
        print(
            f"[netns_hosts] fault at {t_fault - t_start:.1f} s: {result['fault']['command']}",
            flush=True,
        )
        # 3. wait for every tree to be gone (SIGTERM to every host's command at term_after)
        termed = term_after is None
        while time.monotonic() < t_fault + deadline:
            if all(r.gone_at is not None for r in runs):
                break
            if (
                gdb_at is not None
                and "stacks" not in result
                and time.monotonic() >= t_fault + gdb_at
            ):
                result["stacks"] = {
                    hosts.names[r.index]: native_stacks(r.root[0])
                    for r in runs
                    if r.root is not None and r.exited_at is None
                }
            if not termed and time.monotonic() >= t_fault + term_after:
                termed = True
                for run in runs:
                    if run.root is not None and run.exited_at is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(run.root[0], signal.SIGTERM)
                result["sigterm_at_s"] = round(time.monotonic() - t_fault, 2)
                print(
                    f"[netns_hosts] SIGTERM to every host's command at +{term_after} s", flush=True
                )
            time.sleep(0.1)
        else:
            print(
                f"[netns_hosts] deadline {deadline} s after the fault: killing what is left",
                flush=True,
            )
    finally:
        tracker.poll()
        tracker.kill_all()
        for _ in range(50):
            tracker.poll()
            if all(not r.alive() for r in runs):
                break
            time.sleep(0.1)
        tracker.stop.set()
        time.sleep(0.3)  # readers drain
    ref = t_fault if t_fault is not None else t_start
    result["time_origin"] = "fault" if t_fault is not None else "start"

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - ref, 2)

    for run, host in zip(runs, hosts.names):
        nonempty = [text for _t, text in run.lines if re.search(r"[A-Za-z0-9]", text)]
        entry = {
            "host": host,
            "command": shlex.join(run.argv),
            "exit_code": run.exit_status,
            "exited_s": rel(run.exited_at),
            "all_gone_s": rel(run.gone_at),
            "killed_by_harness": run.killed,
            "events": {},
            "last_line": nonempty[-1] if nonempty else "",
            "tail": nonempty[-tail:],
            "log": str(run.log_path),
            "processes": [
                {
                    "pid": pid,
                    "cmd": info["cmd"],
                    "gone_s": rel(info["gone_at"]),
                }
                for (pid, _s), info in run.tracked.items()
            ],
        }
        for name, pattern in events.items():
            hit = run.first_match(pattern, after=ref)
            entry["events"][name] = (
                None if hit is None else {"s": rel(hit[0]), "line": hit[1][:300]}
            )
        result["hosts"].append(entry)
    return result


def print_summary(result: dict) -> None:
    origin = result.get("time_origin", "fault")
    print(f"\nseconds from the {origin}; '-' = never")
    fmt = "{:<4} {:>10} {:>10} {:>9} {:>8} {:>6} {:>7}  {}"
    print(
        fmt.format(
            "host", "collective", "store-err", "exited", "all gone", "exit", "killed", "last line"
        )
    )

    def s(v):
        return "-" if v is None else f"{v:.1f}"

    for h in result["hosts"]:
        ev = h["events"]
        print(
            fmt.format(
                h["host"],
                s((ev.get("collective") or {}).get("s")),
                s((ev.get("store") or {}).get("s")),
                s(h["exited_s"]),
                s(h["all_gone_s"]),
                "-" if h["exit_code"] is None else h["exit_code"],
                "yes" if h["killed_by_harness"] else "no",
                h["last_line"][:150],
            )
        )


# ------------------------------------------------------------------------------ scenarios
def ensure_partitions(nodes: int, out: Path, env: dict[str, str]) -> Path:
    if (out / "meta.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "shardgnn",
        "partition",
        f"synthetic:nodes={nodes}",
        "-k",
        "2",
        "--out",
        str(out),
        "--quiet",
    ]
    print(f"[netns_hosts] {shlex.join(argv)}", flush=True)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return out


def torchrun_argv() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def base_env(extra: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    for item in extra:
        key, _, value = item.partition("=")
        env[key] = value
    return env


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--topology", choices=["veth", "bridge"], default="veth")
    p.add_argument("--prefix", default="sgnh", help="namespace/interface name prefix")
    p.add_argument("--subnet", default="10.77.0", help="hosts get SUBNET.1, SUBNET.2, ...")
    p.add_argument("--fault", choices=["down", "switch-down", "drop", "none"], default="down")
    p.add_argument("--fault-host", type=int, default=1, help="host whose link goes down")
    p.add_argument(
        "--deadline",
        type=float,
        default=180.0,
        help="seconds after the fault after which everything left is SIGKILLed",
    )
    p.add_argument(
        "--event",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="also time the first output line matching REGEX after the fault",
    )
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--gdb-at",
        type=float,
        default=None,
        help="this many seconds after the fault, record the native stacks of every thread of "
        "each host's command still running (gdb -batch; shows which store call blocks)",
    )
    p.add_argument(
        "--term-after",
        type=float,
        default=None,
        help="send SIGTERM to every host's command this many seconds after the fault "
        "(what an outer `timeout` or a scheduler would do)",
    )
    p.add_argument("--json", default=None, help="write the measurements here")
    p.add_argument("--logs", default=None, help="keep the per-host logs in this folder")
    p.add_argument("--label", default="", help="free text stored in the JSON")


def execute(
    args,
    argvs: list[list[str]],
    env: dict[str, str],
    ready: str | None,
    ready_timeout: float,
    fault_after: float,
    extra: dict,
) -> dict:
    events = dict(DEFAULT_EVENTS)
    for item in args.event:
        name, _, pattern = item.partition("=")
        events[name] = pattern
    hosts = NetnsHosts(args.hosts, args.prefix, args.subnet, args.topology)
    log_dir = Path(args.logs) if args.logs else hosts.dir / "logs"
    result: dict = {}
    try:
        hosts.setup()
        env = dict(env, TMPDIR=str(hosts.dir))  # torchelastic's log dirs go with the scratch dir
        result = run_hosts(
            hosts,
            [[hosts.subst(i, a) for a in argv] for i, argv in enumerate(argvs)],
            env,
            ready_pattern=ready,
            ready_timeout=ready_timeout,
            fault_after=fault_after,
            fault_mode=args.fault,
            fault_host=args.fault_host,
            deadline=args.deadline,
            events=events,
            log_dir=log_dir,
            term_after=args.term_after,
            gdb_at=args.gdb_at,
        )
    finally:
        leftovers = hosts.teardown()
        if leftovers:
            print(f"[netns_hosts] teardown killed: {leftovers}", flush=True)
    result.update(extra)
    result["label"] = args.label
    result["harness"] = shlex.join([sys.executable, *sys.argv])
    result["teardown_killed"] = leftovers
    print_summary(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser("run", help="any command on every host ({host} {index} {addr})")
    add_common(run)
    run.add_argument("--ready", default=None, help="regex: the fault waits for it")
    run.add_argument("--ready-timeout", type=float, default=120.0)
    run.add_argument("--fault-after", type=float, default=5.0)
    run.add_argument("command", nargs=argparse.REMAINDER)

    part = sub.add_parser("partition", help="the torchrun network-partition test")
    add_common(part)
    part.add_argument("--nodes", type=int, default=100_000)
    part.add_argument("--epochs", type=int, default=50)
    part.add_argument("--timeout", type=float, default=None, help="shardgnn --timeout (s)")
    part.add_argument(
        "--partitions",
        default="/tmp/netns-hosts-parts",
        help="partition directory (written once, then reused)",
    )
    part.add_argument("--port", type=int, default=29500)
    part.add_argument("--rdzv-id", default="netns-fault")
    part.add_argument("--torchrun-args", default="", help="extra torchrun flags (one string)")
    part.add_argument("--train-args", default="", help="extra shardgnn train flags (one string)")
    part.add_argument(
        "--launcher",
        choices=["torchrun", "shardgnn"],
        default="torchrun",
        help="plain torchrun, or `python -m shardgnn.torchrun` (torchrun bounded on faults)",
    )
    part.add_argument("--ready", default=r"^epoch\s+\d+/", help="regex: training has started")
    part.add_argument("--ready-timeout", type=float, default=240.0)
    part.add_argument(
        "--fault-delay",
        type=float,
        default=2.0,
        help="seconds after the first epoch line (mid-epoch)",
    )
    args = parser.parse_args(argv)

    for sig in (signal.SIGTERM, signal.SIGHUP):  # finally blocks run on these too
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    if os.geteuid() != 0:
        parser.error("needs root (ip netns)")
    env = base_env(args.env)

    if args.cmd == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run: give a command after --")
        execute(
            args, [command] * args.hosts, env, args.ready, args.ready_timeout, args.fault_after, {}
        )
        return 0

    if args.hosts != 2:
        parser.error("partition: 2 hosts (the partition directory has 2 parts)")
    parts = ensure_partitions(args.nodes, Path(args.partitions), env)
    if args.launcher == "torchrun":
        launcher = torchrun_argv()
    else:
        launcher = [sys.executable, "-m", "shardgnn.torchrun"]
    command = [
        *launcher,
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"h0:{args.port}",
        "--rdzv-id",
        args.rdzv_id,
        *shlex.split(args.torchrun_args),
        "-m",
        "shardgnn.run",
        "train",
        f"synthetic:nodes={args.nodes}",
        "--partitions",
        str(parts),
        "--epochs",
        str(args.epochs),
        *(["--timeout", str(args.timeout)] if args.timeout is not None else []),
        *shlex.split(args.train_args),
    ]
    extra = {"scenario": "partition", "per_host_command": shlex.join(command)}
    print(f"[netns_hosts] on every host: {shlex.join(command)}", flush=True)
    execute(args, [command] * 2, env, args.ready, args.ready_timeout, args.fault_delay, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
