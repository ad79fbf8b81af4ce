"""The fault matrix: what a real fault does to a real ``shardgnn train --workers 2`` job.

Each fault is injected from outside, as a cluster would, into a job that is past its first epoch:

* ``kill9``    rank 1 gets SIGKILL (a crash, a node lost);
* ``sigstop``  rank 1 gets SIGSTOP (a hung process: it holds its sockets open and answers nothing);
* ``sigterm``  the launcher gets SIGTERM (preemption: SLURM ``scancel``, a requeue);
* ``oom``      rank 1 is moved into a memory cgroup with a small limit (the kernel's OOM killer);
* ``diskfull`` the checkpoint folder is a tmpfs that holds one checkpoint and not two;
* ``slow``     rank 1 is stopped 2/3 of the time (SIGSTOP/SIGCONT duty cycle: 3x slower), a
  straggler within the collective timeout, which must finish, not be killed.

Per fault it records: seconds from the fault to its detection (the first worker's error record,
or for preemption the stop checkpoint), to the launcher's exit and to the moment no process of the
job is left; the exit code and the console's error line(s); the checkpoints left complete; and,
after ``--resume`` from them, whether the final weights equal an uninterrupted run's bit for bit.

    python benchmarks/bench_faults.py --nodes 100000          # writes benchmarks/out/faults.*

Root is needed for ``oom`` (a memory cgroup) and ``diskfull`` (mounting a tmpfs); without it those
rows say "skipped". Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from machine import machine_info
from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.launch import free_port, worker_pids
from shardgnn.train.checkpoint import Checkpointer
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
FAULTS = ("kill9", "sigstop", "sigterm", "oom", "diskfull", "slow")


# ------------------------------------------------------------------------------------ processes
def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# ----------------------------------------------------------------------------------- injections
class MemoryCgroup:
    """A child of this process's cgroup-v1 memory cgroup with a limit (removed on exit)."""

    def __init__(self, limit_bytes: int):
        line = next(
            (x for x in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in x), None
        )
        if line is None:
            raise OSError("no cgroup-v1 memory controller")
        self.path = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
        self.path = self.path / f"shardgnn-fault-{os.getpid()}"
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def read(self, name: str) -> str:
        """The cgroup's file ``name`` (``memory.max_usage_in_bytes``, ...)."""
        return (self.path / name).read_text()

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def duty_cycle(pid: int, stop: threading.Event, period_s: float = 0.3) -> None:
    """Keep ``pid`` stopped 2/3 of every period: it runs at a third of its speed."""
    while not stop.is_set():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        time.sleep(period_s * 2 / 3)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        time.sleep(period_s / 3)


# ------------------------------------------------------------------------------------- one run
def train_command(args, checkpoint: Path, log_dir: Path, resume: bool = False) -> list[str]:
    """The job: ``shardgnn train --workers 2``, or 2 workers under (shardgnn's) torchrun."""
    train = [
        "train", args.dataset, "--partitions", str(args.parts), "--epochs", str(args.epochs),
        "--fanouts", "10,10", "--batch-size", str(args.batch_size),
        "--checkpoint-dir", str(checkpoint), "--overlap", "off", "--quiet",
        *(["--resume"] if resume else []),
    ]  # fmt: skip
    if args.launcher == "local":
        return [
            sys.executable,
            "-m",
            "shardgnn",
            *train,
            "--workers",
            "2",
            "--log-dir",
            str(log_dir),
        ]
    agent = ["torch.distributed.run"] if args.launcher == "torchrun" else ["shardgnn.torchrun"]
    return [
        sys.executable, "-m", *agent, "--nnodes", "1", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
        "-m", "shardgnn.run", *train,
    ]  # fmt: skip


def final_weights(checkpoint: Path) -> dict[str, torch.Tensor] | None:
    complete = Checkpointer(checkpoint).complete()
    if not complete:
        return None
    return torch.load(complete[-1] / "rank-0.pt", weights_only=True, map_location="cpu")["model"]


def same_weights(a, b) -> bool:
    return (
        a is not None
        and b is not None
        and a.keys() == b.keys()
        and all(torch.equal(a[k], b[k]) for k in a)
    )


def run_fault(fault: str, args, work: Path, reference) -> dict:
    """Start the job, inject ``fault`` early in epoch 2, watch it end, resume, compare."""
    checkpoint, logs = work / f"ck-{fault}", work / f"logs-{fault}"
    shutil.rmtree(logs, ignore_errors=True)
    row: dict = {"fault": fault}
    stack = contextlib.ExitStack()
    cgroup = None
    try:
        if fault == "diskfull":
            one = sum(f.stat().st_size for f in args.checkpoint_example.rglob("*") if f.is_file())
            stack.enter_context(tmpfs(checkpoint, int(one * 1.5) + 64 * 1024))
        if fault == "oom":
            cgroup = MemoryCgroup(args.oom_limit_mb << 20)
            stack.callback(cgroup.remove)
        proc = subprocess.Popen(
            train_command(args, checkpoint, logs),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stderr_lines: list[str] = []
        reader = threading.Thread(target=lambda: stderr_lines.extend(proc.stderr), daemon=True)
        reader.start()
        for line in proc.stdout:
            if re.match(r"epoch +1/", line):
                break
        threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
        time.sleep(args.into_epoch_s)
        pids = worker_pids(proc.pid)
        fault_time = time.time()
        stop_duty = threading.Event()
        if fault == "kill9":
            os.kill(pids[1], signal.SIGKILL)
        elif fault == "sigstop":
            os.kill(pids[1], signal.SIGSTOP)
        elif fault == "sigterm":
            proc.send_signal(signal.SIGTERM)
        elif fault == "oom":
            cgroup.add(pids[1])
        elif fault == "slow":
            threading.Thread(target=duty_cycle, args=(pids[1], stop_duty), daemon=True).start()
        try:
            code = proc.wait(timeout=args.deadline_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            row["hung"] = True
        exit_time = time.time()
        stop_duty.set()
        while any(alive(pid) for pid in pids.values()) and time.time() - exit_time < 60:
            time.sleep(0.05)
        gone_time = time.time()
        reader.join(timeout=5)
        records = list(logs.glob("rank-*.error.json"))
        complete = Checkpointer(checkpoint).complete()
        if fault == "sigterm" and complete:
            detected = (complete[-1] / "meta.json").stat().st_mtime
        elif records:
            detected = min(p.stat().st_mtime for p in records)
        else:
            detected = None
        row.update(
            exit_code=code,
            detect_s=None if detected is None else round(detected - fault_time, 2),
            exit_s=round(exit_time - fault_time, 2),
            all_gone_s=round(gone_time - fault_time, 2),
            console=[
                line.rstrip()
                for line in stderr_lines
                if line.strip() and (args.launcher == "local" or "shardgnn" in line)
            ][-2:],
            saved=[p.name for p in complete],
            workers_left=sum(alive(pid) for pid in pids.values()),
        )
        if fault == "diskfull":  # the disk is "cleaned up": resume from what it kept
            subprocess.run(["mount", "-o", f"remount,size={64 << 20}", str(checkpoint)], check=True)
        if code != 0 and complete:
            resumed = subprocess.run(
                train_command(args, checkpoint, logs, resume=True),
                capture_output=True,
                text=True,
            )
            row["resume_exit_code"] = resumed.returncode
            row["resume_bit_exact"] = resumed.returncode == 0 and same_weights(
                final_weights(checkpoint), reference
            )
        elif code == 0:
            row["resume_bit_exact"] = same_weights(final_weights(checkpoint), reference)
    finally:
        stack.close()
    return row


def markdown(report: dict) -> str:
    rows = [
        [
            r["fault"],
            "skipped: " + r["skipped"] if "skipped" in r else r.get("detect_s", "-"),
            r.get("exit_s", "-"),
            r.get("all_gone_s", "-"),
            r.get("exit_code", "-"),
            " / ".join(r.get("console", []))[:160] or "-",
            ", ".join(r.get("saved", [])) or "-",
            {True: "yes", False: "NO", None: "-"}[r.get("resume_bit_exact")],
        ]
        for r in report["rows"]
    ]
    head = [
        "fault",
        "detected (s)",
        "launcher exit (s)",
        "all gone (s)",
        "exit code",
        "console",
        "checkpoints left",
        "resume bit-exact",
    ]
    return (
        f"Fault matrix, 2 workers ({report['launcher']}), `{report['dataset']}`, "
        f"{report['epochs']} epochs "
        f"(seconds after the fault)\n\n" + format_table(head, rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument(
        "--into-epoch-s", type=float, default=0.5, help="fault this long after epoch 1"
    )
    parser.add_argument("--deadline-s", type=float, default=180.0)
    parser.add_argument("--oom-limit-mb", type=int, default=64)
    parser.add_argument(
        "--launcher",
        choices=["local", "torchrun", "shardgnn-torchrun"],
        default="local",
        help="`shardgnn train --workers 2`, plain torchrun, or `python -m shardgnn.torchrun`",
    )
    parser.add_argument("--out", default=None, help="default: benchmarks/out/faults-LAUNCHER.json")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(REPO / "benchmarks" / "out" / f"faults-{args.launcher}.json")
    args.dataset = f"synthetic:nodes={args.nodes}"
    with tempfile.TemporaryDirectory(prefix="shardgnn-faults-") as tmp:
        work = Path(tmp)
        args.parts = work / "parts"
        subprocess.run(
            [sys.executable, "-m", "shardgnn", "partition", args.dataset, "-k", "2", "--out",
             str(args.parts), "--quiet"],
            check=True, capture_output=True,
        )  # fmt: skip
        reference_dir = work / "ck-reference"
        subprocess.run(
            train_command(args, reference_dir, work / "logs-reference"),
            check=True,
            capture_output=True,
        )
        reference = final_weights(reference_dir)
        args.checkpoint_example = Checkpointer(reference_dir).complete()[-1]
        rows = []
        for fault in args.faults.split(","):
            needs_root = fault in ("oom", "diskfull")
            if needs_root and os.geteuid() != 0:
                rows.append({"fault": fault, "skipped": "needs root"})
                continue
            try:
                rows.append(run_fault(fault, args, work, reference))
            except OSError as exc:
                rows.append({"fault": fault, "skipped": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(rows[-1]), flush=True)
    report = {
        "machine": machine_info(),
        "dataset": args.dataset,
        "epochs": args.epochs,
        "launcher": args.launcher,
        "rows": rows,
    }
    out = Path(args.out)
    save_json(out, report)
    with atomic_open(out.with_suffix(".md"), "w") as fh:
        fh.write(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
