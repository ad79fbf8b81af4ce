"""A private one-node SLURM cluster for tests: munged, slurmctld and slurmd started in a temporary
directory (their own key, socket, ports, state and logs; nothing of the system's configuration is
read or changed), and stopped again. Needs root and Debian's ``slurm-wlm`` and ``munge``.

    with SlurmCluster() as cluster:       # raises ClusterUnavailable with a one-line reason
        job = cluster.sbatch(script_path)
        cluster.job(job)["JobState"]
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARIES = (
    "munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scontrol", "sinfo",
    "squeue", "scancel",
)  # fmt: skip


# root's daemons live in sbin, which a CI user's PATH may lack
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


class ClusterUnavailable(RuntimeError):
    """The cluster cannot be started here (binaries absent, not root, a daemon did not start)."""


def missing() -> str | None:
    """Why no cluster can be started here, or ``None``."""
    absent = [name for name in BINARIES if which(name) is None]
    if absent:
        return f"SLURM/munge not installed ({', '.join(absent)} not on PATH)"
    if os.geteuid() != 0:
        return "a private SLURM cluster needs root (slurmd runs jobs as their user)"
    try:
        socket.gethostbyname(socket.gethostname())
    except OSError:
        return f"this host's name ({socket.gethostname()}) does not resolve"
    return None


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"{path.name}: (no log)"
    return f"{path.name}: " + " | ".join(text[-lines:])


def _free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on every address a moment ago (the daemons bind all)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in socks]


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        argv = "?"
    return f"{pid} {argv}"


class SlurmCluster:
    """munged + slurmctld + slurmd on this host, in a fresh temporary directory."""

    def __init__(self, start_timeout_s: float = 30.0, requeue_delay_s: int = 5):
        self.start_timeout_s = start_timeout_s
        # AuthInfo's cred_expire: how long a requeued job waits before it may start again
        # (default 120 s)
        self.requeue_delay_s = requeue_delay_s
        # short: the munge socket's path must fit a sockaddr_un (108 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="slurm-"))
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge.socket"
        self.host = socket.gethostname()
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}
        for name in list(self.env):  # from an enclosing allocation, if any
            if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and name != "SLURM_CONF":
                del self.env[name]
        self.procs: dict[str, subprocess.Popen] = {}
        self.stray: list[str] = []
        self.cpus = 0  # the node's CPUs, once started

    # ------------------------------------------------------------------ start / stop
    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        reason = missing()
        if reason:
            raise ClusterUnavailable(reason)
        self._start_munge()
        for attempt in range(3):
            self._write_conf()  # fresh ports
            try:
                self._start_daemons()
                return
            except ClusterUnavailable as exc:
                # a port found free was taken before the daemon bound it: new ports
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
                self._stop_daemons()

    def _start_daemons(self) -> None:
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.root / f"{daemon}.out", "wb")  # the daemon keeps its own copy
            self.procs[daemon] = subprocess.Popen(
                [which(daemon) or daemon, "-D", "-f", str(self.conf)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
            log.close()
        deadline = time.monotonic() + self.start_timeout_s
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ClusterUnavailable(
                        f"{name} exited with {proc.returncode}: {self._logs(name)}"
                    )
            done = self.cli("sinfo", "-h", "-N", "-n", self.host, "-o", "%t", check=False)
            state = done.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise ClusterUnavailable(
            f"node {self.host} not idle after {self.start_timeout_s:g} s (sinfo: "
            f"{state or 'no answer'}): {self._logs('slurmctld')}; {self._logs('slurmd')}"
        )

    def _stop_daemons(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self.procs.clear()

    def _logs(self, name: str) -> str:
        """The tail of a daemon's log file (of its console output when it wrote no log)."""
        log = self.root / f"{name}.log"
        return _tail(log if log.exists() and log.stat().st_size else self.root / f"{name}.out")

    def _start_munge(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)  # owned by root, as munged runs here
        log = self.root / "munged.log"
        done = subprocess.run(
            [
                which("munged") or "munged",
                "--force",
                f"--socket={self.socket}",
                f"--key-file={key}",
                f"--pid-file={self.root / 'munged.pid'}",
                f"--log-file={log}",
                f"--seed-file={self.root / 'munged.seed'}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            detail = (done.stderr.strip() or _tail(log)).splitlines()
            raise ClusterUnavailable(f"munged failed: {' | '.join(detail[-3:])}")

    def _write_conf(self) -> None:
        r = self.root
        # what slurmd finds (`slurmd -C`): a node configured with more is drained
        found = subprocess.run(
            [which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=30
        ).stdout
        cpus = re.search(r"\bCPUs=(\d+)", found)
        memory = re.search(r"\bRealMemory=(\d+)", found)
        self.cpus = int(cpus.group(1)) if cpus else os.cpu_count() or 1
        memory_mb = min(1000, int(memory.group(1))) if memory else 1000
        (r / "plugstack.conf").write_text("")
        for name in ("state", "spool"):
            shutil.rmtree(r / name, ignore_errors=True)
            (r / name).mkdir()
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(
            f"""\
ClusterName=shardgnn-test
SlurmctldHost={self.host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket},cred_expire={self.requeue_delay_s}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "slurmctld.log"}
SlurmdLogFile={r / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={r / "plugstack.conf"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=600
SchedulerType=sched/builtin
MailProg=/bin/true
SchedulerParameters=sched_interval=1
NodeName={self.host} CPUs={self.cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )

    def stop(self) -> None:
        """Cancel every job and wait for it to end, stop the daemons and munged, end whatever
        process of this cluster is left (a job step's, found by its ``SLURM_CONF``), remove the
        directory."""
        ctld = self.procs.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            self.cli("scancel", "--full", "--user=root", check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if not self.cli("squeue", "-h", check=False).stdout.strip():
                    break
                time.sleep(0.5)
        self._stop_daemons()
        if (self.root / "munged.pid").exists():
            subprocess.run(
                [which("munged") or "munged", f"--socket={self.socket}", "--stop"],
                capture_output=True,
                timeout=30,
            )
        self.stray = [_command(pid) for pid in self.leftovers()]  # none when it stopped cleanly
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[int]:
        """Processes still running with this cluster's ``SLURM_CONF`` (slurmstepd, job tasks)."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in environ:
                found.append(int(name))
        return found

    # ------------------------------------------------------------------ the CLI
    def cli(
        self, *args: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess:
        """A SLURM command against this cluster."""
        return subprocess.run(
            list(args), capture_output=True, text=True, env=self.env, check=check, timeout=timeout
        )

    def sbatch(self, script: Path, *options: str, cwd: Path | None = None) -> str:
        """Submit ``script``; the job id."""
        done = subprocess.run(
            ["sbatch", "--parsable", *options, str(script)],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (``JobState``, ``Restarts``, ``ExitCode``, ...)."""
        out = self.cli("scontrol", "show", "job", "-o", job_id).stdout
        fields = {}
        for item in out.split():
            if "=" in item:
                key, value = item.split("=", 1)
                fields.setdefault(key, value)
        return fields
