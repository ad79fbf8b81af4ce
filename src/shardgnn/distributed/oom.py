"""Why a worker died of SIGKILL: evidence that the kernel's out-of-memory killer chose it (Linux).

:class:`OomWatch` notes at a launch's start the kernel log's end and the OOM-kill counters of the
memory cgroups (v1 or v2) of the launcher and its workers; :meth:`OomWatch.explain` then names the
OOM killer if the kernel log or a counter shows it. :func:`memory_limit_hint` names an address-space
limit (``ulimit -v``), the usual cause of a ``MemoryError`` far below the machine's memory.

All best effort: on other systems, without permission or without the files, these functions return
``None`` and never raise. The ``parse_*`` functions take text, so they are tested on samples.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

_MAX_CLAUSE = 200
_UNLIMITED = 1 << 62  # cgroup v1 writes "no limit" as the largest page count in bytes, near 2**63
_KMSG_RECORD = re.compile(r"\d+,(\d+),\d+(?:,[^;]*)?;([^\n]*)")  # prio,seq,usec,flags;message
_VICTIM = re.compile(r"Killed process (\d+) \(|\boom-kill:.*,pid=(\d+)\b")


def parse_proc_cgroup(text: str) -> tuple[str, str] | None:
    """``("v1", path)`` from the memory controller's line of a ``/proc/<pid>/cgroup`` file, else
    ``("v2", path)`` from its ``0::`` line (hybrid systems have both), else ``None``."""
    unified = None
    for parts in (line.split(":", 2) for line in text.splitlines()):
        if len(parts) == 3 and "memory" in parts[1].split(","):
            return "v1", parts[2]
        if len(parts) == 3 and parts[0] == "0" and not parts[1]:
            unified = ("v2", parts[2])
    return unified


def parse_mountinfo(text: str) -> dict[str, tuple[str, str]]:
    """``{"v1" or "v2": (root inside the hierarchy, mount point)}`` for the cgroup v1 memory and
    cgroup2 hierarchies, from ``/proc/self/mountinfo``."""
    mounts: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), f) for f in fields[3:5])
        if tail[0] == "cgroup" and "memory" in tail[2].split(","):
            mounts.setdefault("v1", (root, point))
        elif tail[0] == "cgroup2":
            mounts.setdefault("v2", (root, point))
    return mounts


def cgroup_directory(path: str, root: str, mount_point: str) -> Path:
    """The folder of cgroup ``path`` in a hierarchy whose ``root`` is mounted at ``mount_point``."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]  # a container that sees its own cgroup as the hierarchy's root
    return Path(mount_point, path.lstrip("/"))


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill`` counter of a ``memory.events`` (v2) or ``memory.oom_control`` (v1) file."""
    match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
    return int(match[1]) if match else None


def parse_bytes(text: str) -> int | None:
    """A memory limit or usage file's value in bytes; ``None`` for no limit (``max``) or junk."""
    value = int(text.strip()) if text.strip().isdecimal() else _UNLIMITED
    return value if value < _UNLIMITED else None


def parse_kmsg_record(record: str) -> tuple[int, str] | None:
    """``(sequence number, message)`` of one ``/dev/kmsg`` record."""
    match = _KMSG_RECORD.match(record)
    return (int(match[1]), match[2]) if match else None


def oom_victim(message: str) -> int | None:
    """The pid a kernel message names as the out-of-memory killer's victim, else ``None``."""
    match = _VICTIM.search(message)
    return int(match[1] or match[2]) if match else None


def find_oom_line(messages: Iterable[str], pid: int) -> str | None:
    """The kernel message saying the OOM killer killed ``pid``, "Killed process" lines first."""
    found = [m for m in messages if oom_victim(m) == pid]
    return next((m for m in found if "Killed process" in m), found[0] if found else None)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class MemoryCgroup:
    """A memory cgroup: ``version`` ("v1"/"v2"), ``path`` as ``/proc/<pid>/cgroup`` shows it, and
    its ``directory``. The methods return ``None`` when their file cannot be read."""

    version: str
    path: str
    directory: Path

    def _file(self, v1_name: str, v2_name: str) -> str:
        return _read(self.directory / (v1_name if self.version == "v1" else v2_name)) or ""

    def oom_kills(self) -> int | None:
        """Processes the OOM killer killed in this cgroup (v2: or below it) since its creation."""
        return parse_oom_kills(self._file("memory.oom_control", "memory.events"))

    def limit(self) -> int | None:
        """This cgroup's own memory limit in bytes; ``None`` if it has none."""
        return parse_bytes(self._file("memory.limit_in_bytes", "memory.max"))

    def peak(self) -> int | None:
        """The most memory this cgroup has used, in bytes."""
        return parse_bytes(self._file("memory.max_usage_in_bytes", "memory.peak"))

    def usage(self) -> int | None:
        """The memory this cgroup uses now, in bytes."""
        return parse_bytes(self._file("memory.usage_in_bytes", "memory.current"))


_OWN_CGROUP = object()


def available_memory(cgroup: MemoryCgroup | None | object = _OWN_CGROUP) -> int | None:
    """Bytes this process can still take: what the kernel reports available (``MemAvailable``),
    and within a memory cgroup's limit (default: this process's cgroup) at most its room
    below the limit; None where neither can be read."""
    available = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            pass
    group = memory_cgroup() if cgroup is _OWN_CGROUP else cgroup
    limit = None if group is None else group.limit()
    if limit is not None:
        room = max(0, limit - (group.usage() or 0))
        available = room if available is None else min(available, room)
    return available


def memory_cgroup(pid: int | str = "self") -> MemoryCgroup | None:
    """The memory cgroup of process ``pid`` (default: this one); ``None`` if not found, or the root
    cgroup, which limits nothing and counts kills anywhere on the machine."""
    found = parse_proc_cgroup(_read(f"/proc/{pid}/cgroup") or "")
    mounts = parse_mountinfo(_read("/proc/self/mountinfo") or "")
    if found is None or found[0] not in mounts or found[1] in ("", "/"):
        return None
    directory = cgroup_directory(found[1], *mounts[found[0]])
    return MemoryCgroup(*found, directory) if os.path.isdir(directory) else None


def kernel_log() -> list[tuple[int, str]] | None:
    """The kernel log as ``(sequence number, message)`` records, from ``/dev/kmsg`` as ``dmesg``
    reads it; ``None`` if unreadable (``kernel.dmesg_restrict`` without root, no device)."""
    records: list[tuple[int, str]] = []
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, AttributeError):
        fd = -1
    try:
        for _ in range(1 << 20 if fd >= 0 else 0):  # far more than a ring buffer holds
            try:
                chunk = os.read(fd, 8192)  # one record a read
            except BrokenPipeError:  # records overwritten before we read them: the next read skips
                continue
            except OSError:  # EAGAIN: no more records (or EPERM)
                break
            if not chunk:
                break
            record = parse_kmsg_record(chunk.decode("utf-8", "replace"))
            records += [record] if record else []
    finally:
        if fd >= 0:
            os.close(fd)
    return records or None


def _size(n: float) -> str:
    power = 0
    while n >= 1024 and power < 4:
        n, power = n / 1024, power + 1
    return f"{n:.1f}".removesuffix(".0") + " " + ("B", "KiB", "MiB", "GiB", "TiB")[power]


class OomWatch:
    """Evidence, gathered from a launch's start, that the OOM killer sent a worker's SIGKILL.

    Make it with :meth:`start` before the workers start, call :meth:`note_worker` for each worker
    while it is alive (with cgroup v1 a kill counts only in the victim's own cgroup, which may be
    below the launcher's) and :meth:`explain` after one died of SIGKILL; from any threads.
    """

    def __init__(self) -> None:
        self._log_seq: int | None = None  # the last kernel log record at the start
        self._launcher: MemoryCgroup | None = None
        self._workers: dict[int, MemoryCgroup] = {}
        self._counts: dict[Path, int] = {}  # cgroup folder -> its oom_kill counter when first seen

    @classmethod
    def start(cls) -> OomWatch:
        """Note the kernel log's end and the launcher's memory cgroup."""
        watch = cls()
        watch._log_seq = max((seq for seq, _ in kernel_log() or ()), default=None)
        watch._launcher = watch._track(memory_cgroup())
        return watch

    def _track(self, cgroup: MemoryCgroup | None) -> MemoryCgroup | None:
        kills = cgroup.oom_kills() if cgroup and cgroup.directory not in self._counts else None
        if kills is not None:
            self._counts[cgroup.directory] = kills
        return cgroup

    def note_worker(self, pid: int) -> None:
        """Note the memory cgroup worker ``pid`` runs in (call while it is alive)."""
        cgroup = self._track(memory_cgroup(pid))
        if cgroup is not None:
            self._workers[pid] = cgroup

    def _messages(self) -> list[str] | None:
        """The kernel log's messages since :meth:`start`; ``None`` if unreadable then or now."""
        records = kernel_log() if self._log_seq is not None else None
        return None if records is None else [m for n, m in records if n > self._log_seq]

    def explain(self, pid: int) -> str | None:
        """A clause to follow "killed by SIGKILL: " if the kernel's out-of-memory killer killed
        ``pid``: its kernel log line, else the rise of the OOM-kill counter of the worker's memory
        cgroup ("probably"). One line, at most 200 characters. ``None`` without evidence since
        :meth:`start`, or when the readable kernel log names other victims only."""
        messages = self._messages()
        line = find_oom_line(messages or (), pid)
        if line is None and messages is not None:
            time.sleep(0.1)  # the killer logs its victim just after sending it SIGKILL
            messages = self._messages()
            line = find_oom_line(messages or (), pid)
        cgroup = self._workers.get(pid, self._launcher)
        limit = cgroup.limit() if cgroup is not None else None
        if line is not None:
            head = "the kernel's out-of-memory killer chose it"
            head += f" (memory cgroup limit {_size(limit)})" if limit is not None else ""
            room = _MAX_CLAUSE - len(head) - len('; kernel log: ""')
            return (
                f'{head}; kernel log: "{line if len(line) <= room else line[: room - 3] + "..."}"'
            )
        if messages and any(oom_victim(m) is not None for m in messages):
            return None  # the counter below counts those victims, not this process
        if cgroup is None or cgroup.directory not in self._counts:
            return None
        kills = (cgroup.oom_kills() or 0) - self._counts[cgroup.directory]
        if kills <= 0:
            return None
        peak = cgroup.peak()
        details = [f"limit {_size(limit)}"] if limit is not None else []
        details += [f"peak {_size(peak)}"] if peak is not None else []
        name = cgroup.path if len(cgroup.path) <= 60 else "..." + cgroup.path[-57:]
        return (
            f"probably the kernel's out-of-memory killer: memory cgroup {name} counted {kills} "
            f"OOM kill{'s' if kills > 1 else ''} since launch"
            + (f" ({', '.join(details)})" if details else "")
        )


def memory_limit_hint() -> str | None:
    """A clause naming this process's address-space limit (``ulimit -v``, ``RLIMIT_AS``) and
    data-segment limit (``ulimit -d``) if set: allocations past one fail with ``MemoryError`` or
    torch's "DefaultCPUAllocator: can't allocate memory" however much memory is free. ``None`` if
    neither is set, or without the ``resource`` module."""
    hints = []
    for flag, name in (("RLIMIT_AS", "address-space"), ("RLIMIT_DATA", "data-segment")):
        try:
            soft = resource.getrlimit(getattr(resource, flag))[0]
        except (AttributeError, OSError, ValueError):  # AttributeError: resource is None
            continue
        if soft != resource.RLIM_INFINITY and soft >= 0:
            option = "-v" if flag == "RLIMIT_AS" else "-d"
            hints.append(f"the {name} limit (ulimit {option}) is {_size(soft)}")
    return "; ".join(hints) or None
