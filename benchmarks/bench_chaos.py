"""A chaos run: one long ``shardgnn train`` job that meets every fault of the fault matrix, at
random times, restarts itself after each, changes its worker count along the way, and must end
with the weights of the same schedule run without faults.

The job trains ``synthetic:nodes=N`` from partitions ``parts-{parts}`` (one per worker count),
checkpointing every epoch. Its schedule is a list of segments ``(workers, last epoch)``: segment
``k`` runs ``--workers W_k --epochs E_k --resume`` until it completes, so the worker count changes
at epoch boundaries (re-sharding the checkpoint). Within a segment the driver injects, at a
random time in ``[--gap-min, --gap-max]`` seconds after the attempt's first epoch line, the next
fault of a shuffled cycle of :data:`bench_faults.FAULTS`' external faults:

* ``kill9``    a worker gets SIGKILL (a crash, a machine lost);
* ``sigstop``  a worker gets SIGSTOP (a hung process: its peers' collectives time out);
* ``sigterm``  the launcher gets SIGTERM (preemption: a mid-epoch checkpoint, exit 75);
* ``oom``      (only with ``--faults``) a worker is moved into a memory cgroup with a small
  limit (the OOM killer, once it allocates);
* ``diskfull`` the checkpoint folder (a tmpfs) is filled up to a few KiB: the next checkpoint
  cannot be written (one line naming the free space) and the previous one stays; the driver
  "cleans the disk" (deletes the filler) before restarting.

After every end of an attempt, the driver restarts the segment with ``--resume``.

``--hosts netns``: the job runs on two "hosts", network namespaces joined by a veth pair
(:class:`netns_hosts.NetnsHosts`), one ``python -m shardgnn.torchrun --nnodes 2 --nproc-per-node
W/2`` agent on each (c10d rendezvous, the store on ``h0``, a fresh rendezvous id and port per
attempt), training with ``python -m shardgnn.run train``: the torchrun setup of a cluster, with
one more fault in the cycle:

* ``netcut``   host ``h1``'s link goes down mid-epoch (``ip link set sgnet0 down``); the driver
  plugs it back in once the attempt has ended, before the restart.

The worker counts of ``--schedule`` are then even (``W/2`` per host); ``sigterm`` goes to both
agents (a scheduler preempts the whole job); the victim of ``kill9`` and ``sigstop`` is the last
worker of ``h1``. The reference runs locally (``shardgnn train --workers W``): the torchrun job
must end with the local launcher's weights.

Per fault the report gives the exit code and the console's last line, the downtime (from the
fault to the restarted job's first epoch line) and the work lost (epochs of progress at the fault
minus the position of the checkpoint it resumed from). A reference runs the same segments without
faults beside it (``--reference concurrent``, on the same cores) or after it; the final weights
of every rank must be equal bit for bit.

    python benchmarks/bench_chaos.py --minutes 30          # writes benchmarks/out/chaos.{json,md}
    python benchmarks/bench_chaos.py --minutes 30 --hosts netns --schedule 2:0.4,4:0.7,2:1.0 \
        --out benchmarks/out/chaos-netns.json

Root is needed for ``oom`` and ``diskfull`` (a memory cgroup, a tmpfs) and for ``--hosts netns``
(``ip netns``). Linux only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from bench_faults import MemoryCgroup, alive, same_weights, tmpfs
from machine import machine_info
from netns_hosts import NetnsHosts, base_env
from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.launch import worker_pids
from shardgnn.train.checkpoint import Checkpointer, read_checkpoint_meta
from shardgnn.train.progress import format_table

REPO = Path(__file__).resolve().parents[1]
CHAOS_FAULTS = ("kill9", "sigstop", "sigterm", "diskfull")
NETNS_FAULTS = (*CHAOS_FAULTS, "netcut")
"""the cycle of ``--hosts netns``"""
CUT_HOST = 1
"""the host whose link ``netcut`` takes down (not the rendezvous store's)"""
"""the default cycle; ``oom`` (``--faults``) acts only if the worker allocates new pages after
the move: cgroup v1 here cannot move a process's existing charges"""
_EPOCH = re.compile(r"^epoch +(\d+)/(\d+) ")
_OF_BATCHES = re.compile(r"after batch \d+ of (\d+)")
_POINTERS = ("full traceback:", "worker logs:", "shardgnn train: warning:")
"""console lines that point elsewhere or warn: the error line is the one before"""
_CAUSE = re.compile(
    r"CollectiveError|^shardgnn\.torchrun:|^worker rank \d|^stopped by|cannot write|"
    r"^shardgnn train:|Error: "
)
"""under torchrun, the lines that name a cause (torchrun's own failure report follows them)"""


def train_args(args, epochs: int, checkpoint: Path, log_dir: Path) -> list[str]:
    """The training flags of one attempt of a segment (after ``train``)."""
    return [
        args.dataset, "--partitions", str(args.work / "parts-{parts}"), "--epochs", str(epochs),
        "--fanouts", "10,10", "--batch-size", str(args.batch_size), "--checkpoint-dir",
        str(checkpoint), "--keep-checkpoints", "2", "--resume", "--overlap", "off",
        "--timeout", str(args.timeout), "--log-dir", str(log_dir), "--seed", str(args.seed),
    ]  # fmt: skip


def command(args, workers: int, epochs: int, checkpoint: Path, log_dir: Path) -> list[str]:
    """One attempt of one segment, on this host."""
    return [
        sys.executable, "-m", "shardgnn", "train", *train_args(args, epochs, checkpoint, log_dir),
        "--workers", str(workers),
    ]  # fmt: skip


def host_commands(
    args, hosts: NetnsHosts, attempt: int, workers: int, epochs: int, checkpoint: Path,
    log_dir: Path,
) -> list[list[str]]:  # fmt: skip
    """One attempt of one segment on the two hosts: the same torchrun command on each."""
    argv = [
        sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "2", "--nproc-per-node",
        str(workers // 2), "--rdzv-backend", "c10d", "--rdzv-endpoint",
        f"h0:{args.port + attempt % 1000}", "--rdzv-id", f"chaos-{attempt}", "--max-restarts",
        "0", "-m", "shardgnn.run", "train", *train_args(args, epochs, checkpoint, log_dir),
    ]  # fmt: skip
    return [hosts.wrap(i, argv) for i in range(2)]


class Attempt:
    """A running attempt: its processes (the launcher, or one torchrun agent per host) and the
    epoch lines they printed, with their times."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str] | None = None):
        self.procs = [
            subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                stdin=subprocess.DEVNULL,
            )
            for argv in argvs
        ]  # fmt: skip
        self.epochs: list[tuple[float, int]] = []  # (time, epoch finished)
        self.first_line = threading.Event()
        self.stderr: list[str] = []
        for proc in self.procs:
            threading.Thread(target=self._read_out, args=(proc,), daemon=True).start()
            threading.Thread(
                target=lambda p=proc: self.stderr.extend(p.stderr), daemon=True
            ).start()

    def _read_err(self, proc: subprocess.Popen) -> None:
        self.stderr.extend(proc.stderr)

    def _read_out(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            match = _EPOCH.match(line)
            if match:
                self.epochs.append((time.time(), int(match.group(1))))
                self.first_line.set()

    def poll(self) -> int | None:
        """None while any process runs; then the first nonzero exit code, else 0."""
        codes = [proc.poll() for proc in self.procs]
        if any(code is None for code in codes):
            return None
        return next((code for code in codes if code), 0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for every process (``subprocess.TimeoutExpired`` past ``timeout`` seconds)."""
        end = None if timeout is None else time.time() + timeout
        for proc in self.procs:
            proc.wait(None if end is None else max(0.0, end - time.time()))
        return self.poll()

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()

    def terminate(self) -> None:
        """SIGTERM to every launcher (a scheduler preempting the job)."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)

    def workers(self) -> list[int]:
        """The live workers: the launcher's, or the last host's (``kill9`` and ``sigstop``
        take the last one: on two hosts, a worker away from the rendezvous store)."""
        return list(worker_pids(self.procs[-1].pid, descendants=True).values())

    def progress(self, at: float, resumed_from: float) -> float:
        """Epochs of training done at time ``at`` (the last finished epoch plus the elapsed share
        of the next, at the mean epoch time so far)."""
        done = [(t, e) for t, e in self.epochs if t <= at]
        if len(done) < 2:
            return float(done[-1][1]) if done else resumed_from
        per_epoch = (done[-1][0] - done[0][0]) / (done[-1][1] - done[0][1])
        return done[-1][1] + min(1.0, (at - done[-1][0]) / per_epoch)


def position(checkpoint: Path, console: list[str] = ()) -> float:
    """Epochs of progress of the newest complete checkpoint (0 when none); a mid-epoch one's
    batches as a share of the epoch's count, which a stop signal's line names ("after batch B of
    N")."""
    complete = Checkpointer(checkpoint).complete()
    if not complete:
        return 0.0
    meta = read_checkpoint_meta(complete[-1])
    batches = meta.get("batch", 0)
    counts = [int(m.group(1)) for m in map(_OF_BATCHES.search, console) if m]
    return meta["epoch"] + (batches / counts[-1] if batches and counts else 0.0)


def inject(
    fault: str, attempt: Attempt, checkpoint: Path, cgroup: MemoryCgroup | None,
    hosts: NetnsHosts | None,
) -> None:  # fmt: skip
    pids = attempt.workers()
    victim = pids[-1] if pids else None
    if fault == "kill9" and victim:
        os.kill(victim, signal.SIGKILL)
    elif fault == "sigstop" and victim:
        os.kill(victim, signal.SIGSTOP)
    elif fault == "sigterm":
        attempt.terminate()
    elif fault == "oom" and victim and cgroup is not None:
        cgroup.add(victim)
    elif fault == "netcut" and hosts is not None:
        hosts.fault("down", CUT_HOST)
    elif fault == "diskfull":
        free = os.statvfs(checkpoint)
        room = free.f_bavail * free.f_frsize - 4096
        with open(checkpoint / "filler", "wb") as fh:  # the disk fills up (another job's files)
            fh.truncate(0)
            chunk = b"\0" * (1 << 20)
            while room > 0:
                written = fh.write(chunk[: min(len(chunk), room)])
                room -= written
                fh.flush()


def clean_up(
    checkpoint: Path, pids: list[int], hosts: NetnsHosts | None, fault: str | None
) -> list[str]:
    """After an attempt ended: delete the filler, end any worker left behind (a stopped one),
    plug a cut link back in; what had to be killed on the hosts."""
    with contextlib.suppress(FileNotFoundError):
        (checkpoint / "filler").unlink()
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if hosts is None:
        return []
    if fault == "netcut":
        hosts.heal("down", CUT_HOST)
    return hosts.kill_inside()


def run_segments(
    args, name: str, faults: bool, rows: list[dict], hosts: NetnsHosts | None = None
) -> dict:
    """Run every segment (with faults or without; on ``hosts``, or on this one); returns
    timings."""
    checkpoint, logs = args.work / f"ck-{name}", args.work / f"logs-{name}"
    rng = random.Random(args.seed)
    cycle: list[str] = []
    start = time.time()
    attempts = 0
    with contextlib.ExitStack() as stack:
        stack.enter_context(tmpfs(checkpoint, args.disk_mb << 20))
        cgroup = None
        if faults:
            cgroup = MemoryCgroup(args.oom_limit_mb << 20)
            stack.callback(cgroup.remove)
            # a worker moved in brings its memory along: over the limit at once, as a job whose
            # usage grows past its allocation (without, it is charged only for new pages)
            with contextlib.suppress(OSError):
                (cgroup.path / "memory.move_charge_at_immigrate").write_text("1")
        for workers, epochs in args.schedule:
            while True:
                resumed_from = position(checkpoint)
                if hosts is None:
                    attempt = Attempt([command(args, workers, epochs, checkpoint, logs)])
                else:
                    argvs = host_commands(args, hosts, attempts, workers, epochs, checkpoint, logs)
                    attempt = Attempt(argvs, env=args.host_env)
                attempts += 1
                pids: list[int] = []
                row = None
                if faults:
                    # the first epoch line, or the end (a segment resumed at its last epoch)
                    began = time.time()
                    while not attempt.first_line.wait(0.5) and time.time() - began < 600:
                        if attempt.poll() is not None:
                            break
                    if rows and rows[-1].get("downtime_s") is None:
                        first = attempt.epochs[0][0] if attempt.epochs else time.time()
                        rows[-1]["downtime_s"] = round(first - rows[-1]["at"], 1)
                    deadline = time.time() + rng.uniform(args.gap_min, args.gap_max)
                    while time.time() < deadline and attempt.poll() is None:
                        time.sleep(0.2)
                    if attempt.poll() is None:
                        if not cycle:
                            cycle = list(args.faults)
                            rng.shuffle(cycle)
                        fault = cycle.pop()
                        pids = attempt.workers()
                        at = time.time()
                        inject(fault, attempt, checkpoint, cgroup, hosts)
                        row = {
                            "fault": fault,
                            "workers": workers,
                            "at": at,
                            "minute": round((at - start) / 60, 1),
                            "progress": round(attempt.progress(at, resumed_from), 2),
                        }
                try:
                    code = attempt.wait(timeout=args.deadline_s if row else None)
                except subprocess.TimeoutExpired:
                    attempt.kill()
                    code = attempt.wait()
                    if row is not None:
                        row["hung"] = True
                time.sleep(0.5)  # the stderr reader's last lines
                left = clean_up(checkpoint, pids, hosts, row["fault"] if row else None)
                if row is not None:
                    if left:
                        row["left_behind"] = left  # processes the hosts still held
                    resumes_from = position(checkpoint, attempt.stderr)
                    row.update(
                        exit_code=code,
                        console=console_line(attempt.stderr, torchrun=hosts is not None)[:200],
                        resumes_from=round(resumes_from, 2),
                        lost_epochs=round(max(0.0, row["progress"] - resumes_from), 2),
                        downtime_s=None,
                    )
                    if code == 0:  # the segment ended before the fault could act: none met
                        row["missed"] = True
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if code == 0:
                    break
                if row is None:
                    raise RuntimeError(
                        f"{name}: an attempt failed without a fault (exit {code}): "
                        + "".join(attempt.stderr[-5:])
                    )
            print(f"{name}: segment done ({workers} workers to epoch {epochs})", flush=True)
        weights = final_weights(checkpoint)
    return {"seconds": round(time.time() - start, 1), "attempts": attempts, "weights": weights}


def console_line(stderr: list[str], torchrun: bool) -> str:
    """The line of an attempt's console that says why it ended: the last one (not a pointer
    elsewhere, nor a warning), or under torchrun the first that names a cause (torchrun's
    failure report and the other host's lines follow it)."""
    lines = [x.strip() for x in stderr if x.strip()]
    if torchrun:
        cause = next((x for x in lines if _CAUSE.search(x)), None)
        if cause is not None:
            return cause
    return next((x for x in reversed(lines) if not x.startswith(_POINTERS)), "")


def final_weights(checkpoint: Path) -> list[dict[str, torch.Tensor]]:
    """Every rank's model state in the newest checkpoint."""
    newest = Checkpointer(checkpoint).complete()[-1]
    return [
        torch.load(f, weights_only=True, map_location="cpu")["model"]
        for f in sorted(newest.glob("rank-*.pt"))
    ]


def same(a: list[dict], b: list[dict]) -> bool:
    """Every rank's weights equal, bit for bit."""
    return len(a) == len(b) and all(same_weights(x, y) for x, y in zip(a, b))


def markdown(report: dict) -> str:
    where = (
        "torchrun on two network-namespace hosts"
        if report.get("hosts") == "netns"
        else "shardgnn train --workers, one host"
    )
    head = ["minute", "fault", "workers", "exit", "console (last line)", "progress at fault",
            "resumed from", "work lost (epochs)", "downtime (s)"]  # fmt: skip
    rows = [
        [r["minute"], r["fault"], r["workers"], r["exit_code"], r["console"][:110] or "-",
         r["progress"], r["resumes_from"], r["lost_epochs"], r.get("downtime_s", "-")]
        for r in report["faults"]
    ]  # fmt: skip
    return (
        f"Chaos run ({where}): "
        f"`{report['dataset']}`, schedule {report['schedule']} (workers, last epoch), "
        f"{report['chaos_minutes']} min with faults ({report['faults_met']} met, "
        f"{report['survived']} survived; {report['attempts']} attempts), reference "
        f"{report['reference_minutes']} min; final weights equal the reference's: "
        f"{'yes' if report['bit_exact'] else 'NO'}\n\n" + format_table(head, rows) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--schedule",
        default="2:0.4,3:0.6,1:0.8,2:1.0",
        help="segments WORKERS:SHARE (share of --epochs at which each segment ends)",
    )
    parser.add_argument("--epochs", type=int, default=None, help="default: from --minutes")
    parser.add_argument("--minutes", type=float, default=30.0, help="training time to aim for")
    parser.add_argument("--gap-min", type=float, default=60.0)
    parser.add_argument("--gap-max", type=float, default=180.0)
    parser.add_argument("--timeout", type=int, default=20, help="the job's collective timeout")
    parser.add_argument("--deadline-s", type=float, default=180.0)
    parser.add_argument("--oom-limit-mb", type=int, default=64)
    parser.add_argument("--disk-mb", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--faults",
        default=None,
        help=f"the cycle (default {','.join(CHAOS_FAULTS)}; with --hosts netns, also netcut)",
    )
    parser.add_argument("--reference", choices=["concurrent", "after"], default="concurrent")
    parser.add_argument(
        "--hosts",
        choices=["local", "netns"],
        default="local",
        help="the job on this host (shardgnn train --workers), or under torchrun on two network "
        "namespace hosts (root, iproute2); see the module docstring",
    )
    parser.add_argument("--port", type=int, default=29600, help="--hosts netns: rendezvous ports")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "chaos.json"))
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the finally blocks run on these too
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    if os.geteuid() != 0:
        parser.error("needs root (a memory cgroup for oom, a tmpfs for diskfull)")
    args.dataset = f"synthetic:nodes={args.nodes}"
    default = NETNS_FAULTS if args.hosts == "netns" else CHAOS_FAULTS
    args.faults = args.faults.split(",") if args.faults else list(default)
    if "netcut" in args.faults and args.hosts != "netns":
        parser.error("--faults netcut cuts a link between hosts: add --hosts netns")
    schedule_counts = [int(s.split(":")[0]) for s in args.schedule.split(",")]
    if args.hosts == "netns" and any(w % 2 for w in schedule_counts):
        parser.error(f"--schedule {args.schedule}: give even worker counts (W/2 per host)")
    with tempfile.TemporaryDirectory(prefix="shardgnn-chaos-") as tmp:
        args.work = Path(tmp)
        counts = sorted({int(s.split(":")[0]) for s in args.schedule.split(",")})
        for parts in counts:
            subprocess.run(
                [sys.executable, "-m", "shardgnn", "partition", args.dataset, "--parts",
                 str(parts), "--out", str(args.work / f"parts-{parts}"), "--quiet"],
                check=True, capture_output=True,
            )  # fmt: skip
        if args.epochs is None:  # time one epoch on 2 workers
            probe = args.work / "probe"
            began = time.time()
            subprocess.run(
                command(args, 2, 2, probe, args.work / "logs-probe") + ["--seed", "99"],
                check=True, capture_output=True,
            )  # fmt: skip
            per_epoch = (time.time() - began) / 2
            args.epochs = max(8, math.ceil(args.minutes * 60 / per_epoch))
            print(f"about {per_epoch:.1f} s per epoch: {args.epochs} epochs", flush=True)
        args.schedule = [
            (int(w), max(1, round(float(share) * args.epochs)))
            for w, share in (s.split(":") for s in args.schedule.split(","))
        ]
        rows: list[dict] = []
        reference: dict = {}
        thread = threading.Thread(
            target=lambda: reference.update(run_segments(args, "reference", False, []))
        )
        hosts = None
        with contextlib.ExitStack() as stack:
            if args.hosts == "netns":
                hosts = NetnsHosts(2, prefix="sgchaos", subnet="10.78.0")
                stack.callback(hosts.teardown)
                hosts.setup()
                args.host_env = dict(base_env([]), TMPDIR=str(hosts.dir))
            if args.reference == "concurrent":
                thread.start()
            chaos = run_segments(args, "chaos", True, rows, hosts)
            if args.reference == "after":
                thread.start()
            thread.join()
    for row in rows:
        row.pop("at", None)
    rows = [r for r in rows if not r.get("missed")] + [r for r in rows if r.get("missed")]
    report = {
        "machine": machine_info(),
        "hosts": args.hosts,
        "dataset": args.dataset,
        "epochs": args.epochs,
        "schedule": args.schedule,
        "chaos_minutes": round(chaos["seconds"] / 60, 1),
        "reference_minutes": round(reference["seconds"] / 60, 1),
        "attempts": chaos["attempts"],
        "faults": rows,
        "faults_met": sum(1 for r in rows if not r.get("missed")),
        "survived": sum(1 for r in rows if not r.get("missed") and not r.get("hung")),
        "bit_exact": same(chaos["weights"], reference["weights"]),
        "max_lost_epochs": max(
            (r["lost_epochs"] for r in rows if not r.get("missed")), default=0.0
        ),
    }
    out = Path(args.out)
    save_json(out, report)
    with atomic_open(out.with_suffix(".md"), "w") as fh:
        fh.write(markdown(report))
    print(markdown(report))
    return 0 if report["bit_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
