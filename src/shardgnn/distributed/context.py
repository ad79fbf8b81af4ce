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

from shardgnn.distributed.comm import collective_guard
from shardgnn.distributed.config import DEFAULT_TIMEOUT_S
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
            with collective_guard(stage, "barrier"):
                dist.barrier(group=self.group)


def init_distributed(
    *, device: str = "auto", backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S
) -> DistContext:
    """Join the job described by the environment (``torchrun`` conventions) and build the context.

    ``device='auto'`` picks ``cuda:LOCAL_RANK`` when CUDA is available, else CPU; ``backend='auto'``
    picks NCCL for CUDA devices and gloo otherwise. The data group always uses gloo on CPU
    tensors (sampling runs on CPU), NCCL only carries gradients.
    """
    env = os.environ
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in env]
    if missing:
        raise ConfigError(
            f"distributed environment variables {missing} are not set; start workers with "
            "`shardgnn train --workers N` or `torchrun ... -m shardgnn.run ...`"
        )
    rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank = int(env.get("LOCAL_RANK", rank))
    local_world_size = int(env.get("LOCAL_WORLD_SIZE", world_size))
    if device == "auto":
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    torch_device = torch.device(device)
    if torch_device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {device!r} requested but CUDA is not available; use --device cpu"
            )
        torch.cuda.set_device(torch_device)
    if backend == "auto":
        backend = "nccl" if torch_device.type == "cuda" else "gloo"
    if timeout_s <= 0:
        raise ConfigError(f"collective timeout {timeout_s} s must be > 0")
    timeout = datetime.timedelta(seconds=timeout_s)
    if not dist.is_initialized():
        store, _, _ = next(
            dist.rendezvous("env://", rank=rank, world_size=world_size, timeout=timeout)
        )
        # Under `torchrun --max-restarts` every attempt talks through the same store; scoping our
        # keys by attempt keeps a restarted group from reading the dead attempt's gloo addresses
        # (seen as "Connection refused" while creating the data group).
        store = dist.PrefixStore(
            f"shardgnn/attempt-{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store
        )
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
