"""Explaining a worker's SIGKILL (shardgnn.distributed.oom): parsing on sample kernel files, and a
real out-of-memory kill in a memory cgroup with a 64 MiB limit (root on Linux only; else skipped).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from shardgnn.distributed import oom
from shardgnn.distributed.oom import OomWatch

# Samples as a 6.x kernel writes them (the v1 lines are from the test machine).
PROC_CGROUP_V1 = """\
9:name=systemd:/
4:memory:/process_api/68dfde09
1:cpu:/
0::/
"""
PROC_CGROUP_V2 = "0::/user.slice/session-3.scope\n"
MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/my\\040unified rw,relatime - cgroup2 cgroup2 rw
"""
OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
MEMORY_EVENTS = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"
KILLED = (
    "Memory cgroup out of memory: Killed process 4242 (python3) total-vm:540868kB, "
    "anon-rss:68352kB, file-rss:6732kB, shmem-rss:0kB, UID:0 pgtables:196kB oom_score_adj:0"
)
OOM_KILL = (
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/a/b,task_memcg=/a/b,task=python3,pid=4242,uid=0"
)
TABLE_ROW = "[   4242]     0  4242   135217    18771    17088     1683         0   200704  python3"

# Reads 512 MiB, touching every page (a fresh bytearray is zeroed pages nobody has touched yet),
# once told to on stdin, so the test can first move it into the cgroup.
ALLOCATE = (
    "import sys\nsys.stdin.readline()\nb = bytearray(512 << 20)\n"
    "for i in range(0, len(b), 4096):\n    b[i] = 1\nprint('survived')\n"
)


# ------------------------------------------------------------------------------------- parsing
def test_proc_cgroup_prefers_the_v1_memory_controller():
    assert oom.parse_proc_cgroup(PROC_CGROUP_V1) == ("v1", "/process_api/68dfde09")
    assert oom.parse_proc_cgroup(PROC_CGROUP_V2) == ("v2", "/user.slice/session-3.scope")
    assert oom.parse_proc_cgroup("1:cpu:/\n") is None
    assert oom.parse_proc_cgroup("") is None


def test_mountinfo_and_cgroup_directory():
    mounts = oom.parse_mountinfo(MOUNTINFO + "garbage\n")
    assert mounts == {
        "v1": ("/docker/abc", "/sys/fs/cgroup/memory"),
        "v2": ("/", "/sys/fs/cgroup/my unified"),
    }
    # a container that sees its own cgroup mounted as the hierarchy's root
    assert oom.cgroup_directory("/docker/abc/w", *mounts["v1"]) == Path("/sys/fs/cgroup/memory/w")
    assert oom.cgroup_directory("/docker/abc", *mounts["v1"]) == Path("/sys/fs/cgroup/memory")
    assert oom.cgroup_directory("/a/b", "/", "/sys/fs/cgroup") == Path("/sys/fs/cgroup/a/b")


def test_counters_and_limits():
    assert oom.parse_oom_kills(OOM_CONTROL) == 3
    assert oom.parse_oom_kills(MEMORY_EVENTS) == 2  # not oom_group_kill's 0
    assert oom.parse_oom_kills("oom 1\n") is None
    assert oom.parse_bytes("67108864\n") == 64 << 20
    assert oom.parse_bytes("max\n") is None
    assert oom.parse_bytes("9223372036854771712\n") is None  # cgroup v1's "no limit"
    assert oom._size(64 << 20) == "64 MiB"
    assert oom._size(3 << 29) == "1.5 GiB"


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_available_memory_stays_within_the_cgroups_room(tmp_path, version):
    """What a process can still take: the kernel's MemAvailable, and inside a memory cgroup at
    most the room below its limit (limit minus what the cgroup uses now)."""
    machine = oom.available_memory(None)
    assert machine is not None and machine > 0
    limit, used = ("memory.limit_in_bytes", "memory.usage_in_bytes") if version == "v1" else (
        "memory.max", "memory.current"
    )  # fmt: skip
    (tmp_path / limit).write_text(f"{64 << 20}\n")
    (tmp_path / used).write_text(f"{24 << 20}\n")
    group = oom.MemoryCgroup(version, "/job", tmp_path)
    assert group.usage() == 24 << 20
    assert oom.available_memory(group) == 40 << 20
    (tmp_path / used).write_text(f"{80 << 20}\n")  # over its limit: no room
    assert oom.available_memory(group) == 0
    (tmp_path / limit).write_text("max\n" if version == "v2" else "9223372036854771712\n")
    assert oom.available_memory(group) == pytest.approx(machine, rel=0.2)  # no limit


def test_kernel_log_records():
    record = f"3,419,1386165191,-;{KILLED}\n SUBSYSTEM=memory\n"
    assert oom.parse_kmsg_record(record) == (419, KILLED)
    assert oom.parse_kmsg_record("3,7,12,-,caller=T1;hello\n") == (7, "hello")
    assert oom.parse_kmsg_record("not a record") is None


def test_victims_are_matched_by_exact_pid():
    assert oom.oom_victim(KILLED) == 4242
    assert oom.oom_victim(OOM_KILL) == 4242
    assert oom.oom_victim(TABLE_ROW) is None
    assert oom.oom_victim("python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0") is None
    assert oom.find_oom_line([OOM_KILL, KILLED], 4242) == KILLED
    assert oom.find_oom_line([OOM_KILL, TABLE_ROW], 4242) == OOM_KILL
    assert oom.find_oom_line([KILLED, OOM_KILL], 424) is None
    assert oom.find_oom_line([KILLED.replace("4242", "42420")], 4242) is None


@pytest.fixture
def no_cgroup(monkeypatch):
    """Keep this machine's memory cgroup (its limit, its counter) out of the clauses."""
    monkeypatch.setattr(oom, "memory_cgroup", lambda pid="self": None)


def test_explain_reads_only_the_log_written_since_start(monkeypatch, no_cgroup):
    log = [(10, KILLED)]  # pid 4242 killed before the launch: a reused pid must not match
    monkeypatch.setattr(oom, "kernel_log", lambda: list(log))
    watch = OomWatch.start()
    assert watch.explain(4242) is None
    log += [(11, OOM_KILL), (12, KILLED.replace("4242", "4243"))]
    clause = watch.explain(4243)
    assert clause.startswith("the kernel's out-of-memory killer chose it; kernel log: \"Memory")
    assert "Killed process 4243 (python3)" in clause
    assert len(clause) == 200 and clause.endswith('..."') and "\n" not in clause  # cut short
    # since the start only the oom-kill line names 4242
    assert watch.explain(4242).endswith(f'chose it; kernel log: "{OOM_KILL}"')


def test_a_log_unreadable_at_the_start_is_not_used(monkeypatch, no_cgroup):
    log = None
    monkeypatch.setattr(oom, "kernel_log", lambda: log)
    watch = OomWatch.start()
    log = [(10, KILLED)]  # without a start position, this may be from before the launch
    assert watch.explain(4242) is None


def test_nothing_to_read_means_no_explanation(monkeypatch):
    monkeypatch.setattr(oom, "kernel_log", lambda: None)
    monkeypatch.setattr(oom, "_read", lambda path: None)
    watch = OomWatch.start()
    watch.note_worker(os.getpid())
    assert watch.explain(os.getpid()) is None
    assert oom.memory_cgroup(99999999) is None


def test_memory_limit_hint(monkeypatch):
    assert oom.memory_limit_hint() is None or "ulimit" in oom.memory_limit_hint()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY and hard < 1 << 40:
        pytest.skip(f"the hard address-space limit {hard} is below 1 TiB")
    resource.setrlimit(resource.RLIMIT_AS, (1 << 40, hard))  # far above what the tests use
    try:
        assert "the address-space limit (ulimit -v) is 1 TiB" in oom.memory_limit_hint()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    monkeypatch.setattr(oom, "resource", None)
    assert oom.memory_limit_hint() is None


def test_a_failed_allocation_becomes_out_of_memory():
    """numpy's MemoryError and torch's CPU and CUDA allocator errors are an OutOfMemory (a user
    error: one line with what to shrink, the cause kept for the log); other errors are not."""
    import numpy as np
    import torch

    from shardgnn.errors import OutOfMemory, ShardgnnError

    cpu = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 256000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0 ...")
    try:
        np.empty((1 << 58,), dtype=np.int64)
    except MemoryError as exc:  # 2 EiB: never allocated, whatever the machine's overcommit
        numpy = exc
    for exc, said in [
        (cpu, "out of memory (can't allocate memory: you tried to allocate 256000000000 bytes."),
        (
            cuda,
            "out of memory (CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0 ...)",
        ),  # no host limit
        (numpy, "out of memory (Unable to allocate 2.00 EiB for an array with shape"),
    ]:
        error = OutOfMemory.from_allocation(exc, "the address-space limit (ulimit -v) is 1 GiB")
        assert isinstance(error, ShardgnnError) and error.__cause__ is exc
        first, fix = str(error).split("\n")
        assert first.startswith(said)
        assert (exc is cuda) != first.endswith("; the address-space limit (ulimit -v) is 1 GiB)")
        assert fix.startswith("  fix: a smaller dataset or model (--hidden")
    assert OutOfMemory.from_allocation(RuntimeError("shape mismatch")) is None
    assert OutOfMemory.from_allocation(ValueError("can't allocate memory")) is None


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_model_too_large_for_memory_is_one_line(tmp_path, workers):
    """`shardgnn train --hidden 100000` under a 6 GiB address-space limit: a 40 GB weight cannot be
    allocated; the job ends with one line naming the allocation, the limit and what to shrink
    (it ended with torch's traceback, from every worker), exit status 2."""
    limit = 6 << 30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))

    argv = [sys.executable, "-m", "shardgnn", "train", "synthetic:nodes=300", "--epochs", "1",
            "--hidden", "100000"]  # fmt: skip
    if workers > 1:  # else in this process
        argv += ["--workers", str(workers), "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert done.returncode == 2, done.stderr
    err = [line for line in done.stderr.splitlines() if not line.startswith("partitioned ")]
    assert "Traceback" not in done.stderr, done.stderr
    assert err[0].startswith("shardgnn train: error: out of memory (can't allocate memory: you "
                             "tried to allocate 40000000000 bytes"), err  # fmt: skip
    assert "the address-space limit (ulimit -v) is 6 GiB)" in err[0]
    assert err[1].startswith("  fix: a smaller dataset or model"), err
    if workers > 1:
        assert err[0].endswith("(ranks 0, 1)") and err[2].startswith("  full traceback:"), err
        log = (tmp_path / "logs" / "rank-0.log").read_text()
        assert "DefaultCPUAllocator" in log and "The above exception was the direct cause" in log


# ----------------------------------------------------------------------------------- real kills
def _limited_cgroup(limit: int) -> Path:
    """A new memory cgroup below this process's own, limited to ``limit`` bytes; skips the test
    when it cannot be made (not root, not Linux, read-only or no memory controller)."""
    own = oom.memory_cgroup()
    if own is None:
        pytest.skip("this process has no memory cgroup of its own (or it cannot be read)")
    path = own.directory / f"shardgnn-oom-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup under {own.directory}: {exc}")
    try:
        if own.version == "v1":
            (path / "memory.limit_in_bytes").write_text(str(limit))
            if (path / "memory.memsw.limit_in_bytes").exists():  # else swap would take the rest
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        else:
            (path / "memory.max").write_text(str(limit))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
    except OSError as exc:
        _remove_cgroup(path)
        pytest.skip(f"cannot limit the memory of cgroup {path}: {exc}")
    return path


def _remove_cgroup(path: Path) -> None:
    for _ in range(50):  # a killed process leaves its cgroup only once the kernel freed it
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    path.rmdir()


def _start_in(cgroup: Path, code: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
    except OSError:
        child.kill()
        child.wait()
        raise
    return child


@pytest.mark.slow
def test_a_real_oom_kill_is_explained_and_a_kill_dash_9_is_not(monkeypatch):
    cgroup = _limited_cgroup(64 << 20)
    children = []
    try:
        watch = OomWatch.start()
        bystander = _start_in(cgroup, "import sys; sys.stdin.readline()")
        victim = _start_in(cgroup, ALLOCATE)
        children += [bystander, victim]
        watch.note_worker(bystander.pid)
        watch.note_worker(victim.pid)
        victim.stdin.write(b"go\n")
        victim.stdin.close()
        assert victim.wait(timeout=60) == -signal.SIGKILL
        os.kill(bystander.pid, signal.SIGKILL)  # same cgroup, same signal, not the OOM killer
        assert bystander.wait(timeout=60) == -signal.SIGKILL

        clause = watch.explain(victim.pid)
        print(clause)
        assert clause is not None and "out-of-memory killer" in clause
        if oom.kernel_log() is not None:
            assert "chose it (memory cgroup limit 64 MiB); kernel log: " in clause
            assert f"Killed process {victim.pid} " in clause
            assert watch.explain(bystander.pid) is None

        # Without the kernel log, the cgroup's counter is the evidence (a probable one: it counts
        # the cgroup's kills, not the process's).
        monkeypatch.setattr(oom, "kernel_log", lambda: None)
        clause = watch.explain(victim.pid)
        print(clause)
        assert clause.startswith("probably the kernel's out-of-memory killer: memory cgroup ")
        assert f"{cgroup.name} counted 1 OOM kill since launch (limit 64 MiB, peak " in clause
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
        _remove_cgroup(cgroup)


@pytest.mark.slow
def test_a_plain_kill_dash_9_is_not_blamed_on_the_oom_killer():
    watch = OomWatch.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch.note_worker(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert watch.explain(child.pid) is None
