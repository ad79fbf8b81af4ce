"""The distributed context: rank, world size, device and process groups, built once.

``init_distributed`` is the only function in shardgnn that reads ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and
``TORCHELASTIC_RESTART_COUNT`` (set by ``torchrun``, SLURM wrappers or our own launcher); everything
below receives the resulting :class:`DistContext` explicitly.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import socket

import torch
import torch.distributed as dist

from shardgnn.distributed.comm import CollectiveError, collective_guard
from shardgnn.distributed.config import BACKENDS, DEFAULT_TIMEOUT_S, device_problem
from shardgnn.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DistContext:
    """Who this process is in the job, and the process groups it talks through.

    Attributes:
        rank, world_size: position in the job.
        local_rank: position on this machine (selects the GPU).
        local_world_size: workers on this machine (they share its cores).
        device: the torch device this rank computes on.
        backend: ``gloo`` or ``nccl``.
        timeout_s: deadline of every collective; a rank that dies makes the others fail by then.
        group: the default process group (gradients, metrics).
        data_group: a second group for the data pipeline, so a background thread can sample and
            fetch batch i+1 while the main thread all-reduces gradients of batch i (collectives
            of one group must be issued in the same order on every rank; two groups, one per
            thread, keeps that true).
        host_ranks: the ranks on this rank's host, itself included, ascending: they can read each
            other's memory and files (found at start-up from a host key every rank sends, see
            :func:`host_key`; no setting to get right).
    """

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    timeout_s: float
    group: dist.ProcessGroup | None
    data_group: dist.ProcessGroup | None
    host_ranks: tuple[int, ...] = ()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self, stage: str = "barrier") -> None:
        if self.group is not None:
            # NCCL's barrier runs on a device: this rank's, not one guessed from the rank
            ids = [self.device.index] if self.backend == "nccl" else None
            with collective_guard(stage, "barrier"):
                dist.barrier(group=self.group, device_ids=ids)


def choose_placement(
    device: str, backend: str, *, local_rank: int, local_world_size: int, cuda_devices: int
) -> tuple[str, str]:
    """``(device, backend)`` of one rank: pure, so it is tested without GPUs or processes.

    Device: ``auto`` is ``cuda`` when this machine has CUDA devices (``cuda_devices`` > 0), else
    ``cpu``; ``cuda`` is ``cuda:(local_rank % cuda_devices)`` (one GPU per local rank, ranks
    beyond the GPU count sharing them round-robin); ``cuda:N`` is taken as given (every local
    rank on GPU N); ``cpu`` stays. Backend: ``auto`` is ``nccl`` when the device is CUDA and
    every local rank has a GPU of its own, else ``gloo`` (NCCL refuses two ranks on one GPU, and
    carries no CPU tensors); ``nccl`` on CPU or with ranks sharing a GPU is refused.

    Raises:
        ConfigError: CUDA asked for where there is none, ``cuda:N`` beyond the GPUs, a backend
            that is not one of :data:`BACKENDS`, or ``nccl`` where it cannot run (one line each).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if (problem := device_problem(device)) is not None:
        raise ConfigError(f"--device {device!r}: {problem}")
    if device == "auto":
        device = "cuda" if cuda_devices > 0 else "cpu"
    parsed = torch.device(device)
    if parsed.type == "cuda":
        if cuda_devices < 1:
            raise ConfigError(
                f"--device {device}: CUDA is not available here; use --device cpu (or auto)"
            )
        if parsed.index is None:
            parsed = torch.device("cuda", local_rank % cuda_devices)
        elif parsed.index >= cuda_devices:
            raise ConfigError(
                f"--device {device}: this machine has {cuda_devices} CUDA device(s) "
                f"(cuda:0..cuda:{cuda_devices - 1}); use --device cuda for one per worker"
            )
    own_gpu = parsed.type == "cuda" and (
        local_world_size <= cuda_devices if device == "cuda" else local_world_size == 1
    )
    if backend == "auto":
        backend = "nccl" if own_gpu else "gloo"
    elif backend == "nccl" and not own_gpu:
        why = (
            "runs on CUDA devices and this run is on the CPU"
            if parsed.type != "cuda"
            else f"needs a GPU per rank and {local_world_size} workers share "
            f"{cuda_devices if device == 'cuda' else 1} GPU(s) here"
        )
        raise ConfigError(f"--backend nccl {why}; use --backend gloo or auto")
    return str(parsed), backend


def local_cuda_devices() -> int:
    """The CUDA devices this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_placement(device: str, backend: str, workers: int) -> None:
    """Refuse, before any worker starts, a device or backend that ``workers`` local workers could
    not use (:func:`choose_placement`'s checks for every local rank)."""
    for local_rank in range(workers):
        choose_placement(
            device,
            backend,
            local_rank=local_rank,
            local_world_size=workers,
            cuda_devices=local_cuda_devices(),
        )


def init_distributed(
    *, device: str = "auto", backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S
) -> DistContext:
    """Join the job described by the environment (``torchrun`` conventions) and build the context.

    The rank's device and the default group's backend are :func:`choose_placement`'s (``auto``:
    ``cuda:(LOCAL_RANK % GPUs)`` when CUDA is present, NCCL when every local rank has its own
    GPU, else gloo). The default group carries gradients and metrics; the data group always uses
    gloo (sampling and feature exchanges run on host tensors; the
    :class:`~shardgnn.distributed.comm.Communicator` moves any tensor to the device its group's
    backend needs and back).
    """
    env = os.environ
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise ConfigError(
            f"distributed environment variables {missing} are not set; start workers with "
            "`shardgnn train --workers N` or `torchrun ... -m shardgnn.run ...`"
        )
    world_size = _env_int("WORLD_SIZE", 1, None)
    rank = _env_int("RANK", 0, world_size, below="WORLD_SIZE")
    local_world_size = _env_int("LOCAL_WORLD_SIZE", 1, None, default=world_size)
    local_rank = _env_int("LOCAL_RANK", 0, local_world_size, default=rank, below="LOCAL_WORLD_SIZE")
    port = _env_int("MASTER_PORT", 1, 65536)
    device, backend = choose_placement(
        device,
        backend,
        local_rank=local_rank,
        local_world_size=local_world_size,
        cuda_devices=local_cuda_devices(),
    )
    torch_device = torch.device(device)
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    if timeout_s <= 0:
        raise ConfigError(f"collective timeout {timeout_s} s must be > 0")
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        try:
            store, _, _ = next(
                dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout)
            )
        except RuntimeError as exc:  # DistStoreError, DistNetworkError: peers absent, no store
            cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300].rstrip(".")
            raise CollectiveError(
                f"rank {rank}: the rendezvous of {world_size} workers at "
                f"{env['MASTER_ADDR']}:{port} failed within --timeout {timeout_s:g} s: {cause}; "
                "every worker starts with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE and "
                "its own RANK (torchrun sets them)"
            ) from exc
        # Under `torchrun --max-restarts` every attempt talks through the same store; scoping our
        # keys by attempt keeps a restarted group from reading the dead attempt's gloo addresses
        # (seen as "Connection refused" while creating the data group).
        store = dist.PrefixStore(
            f"shardgnn/attempt-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store
        )
        with collective_guard("setup", "process group's start"):
            dist.init_process_group(
                backend, store=store, rank=rank, world_size=world_size, timeout=timeout
            )
    data_group = dist.new_group(backend="gloo", timeout=timeout)
    host_ranks = _host_ranks(rank, world_size, data_group)
    return DistContext(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        device=torch_device,
        backend=backend,
        timeout_s=timeout_s,
        group=dist.group.WORLD,
        data_group=data_group,
        host_ranks=host_ranks,
    )


def _env_int(
    name: str, low: int, high: int | None, *, default: int | None = None, below: str = ""
) -> int:
    """The integer environment variable ``name`` (torchrun's), in ``[low, high)`` (``below``:
    the variable ``high`` came from, named in the message)."""
    text = os.environ.get(name)
    if text is None and default is not None:
        return default
    bound = f">= {low}" if high is None else f"in [{low}, {f'{below}={high}' if below else high})"
    try:
        value = int(text or "")
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value >= high):
        raise ConfigError(
            f"environment variable {name}={text!r}: must be an integer {bound}; torchrun sets "
            "it: start workers with `torchrun ... -m shardgnn.run ...` (or `shardgnn train "
            "--workers N` on one machine)"
        )
    return value


def host_key() -> str:
    """What identifies the machine this process runs on, as far as sharing memory and files goes:
    the host name, the kernel's boot id, and the network and mount namespaces (two namespaces of
    one machine are two hosts to us: they may not see each other's files, and a benchmark uses
    them to stand for separate machines)."""
    parts = [socket.gethostname()]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        pass
    for ns in ("net", "mnt"):
        try:
            parts.append(f"{ns}:{os.stat(f'/proc/self/ns/{ns}').st_ino}")
        except OSError:
            pass
    return "|".join(parts)


def _host_ranks(rank: int, world_size: int, group: dist.ProcessGroup) -> tuple[int, ...]:
    """The ranks whose :func:`host_key` equals this rank's (one all-gather of 8-byte digests)."""
    digest = hashlib.blake2b(host_key().encode(), digest_size=8).digest()
    mine = torch.tensor([int.from_bytes(digest, "little", signed=True)], dtype=torch.int64)
    keys = [torch.empty_like(mine) for _ in range(world_size)]
    with collective_guard("setup", "all-gather of host keys"):
        dist.all_gather(keys, mine, group=group)
    return tuple(p for p in range(world_size) if int(keys[p]) == int(mine))


def shutdown() -> None:
    """Leave the job (idempotent)."""
    if dist.is_initialized():
        dist.destroy_process_group()
