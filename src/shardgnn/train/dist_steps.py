"""What every distributed kind of training shares: one rank's context, its communicator and the
reductions over ranks, the model wrapped in DDP (its gradient all-reduce counted), and the
record of the partitioned dataset. The kinds extend :class:`DistSteps`: sampled training
(:mod:`shardgnn.train.dist_sampled`), full-graph, relational and temporal training.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.partition.format import PartitionSet, read_partitions
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.loop import Steps
from shardgnn.train.setup import labels_record


# no annotations: DDP compares them to dist.GradBucket by identity
def _counted_allreduce_hook(comm, bucket):
    """DDP gradient averaging routed through the communicator, so its bytes are counted."""
    buffer = bucket.buffer()
    buffer.div_(comm.world_size)
    comm.all_reduce(buffer, "allreduce")
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(buffer)
    return future


def partition_dataset_record(
    pset: PartitionSet, num_features: int, num_classes: int, split_sizes: dict[str, int]
) -> dict[str, Any]:
    """What results and checkpoints record of the partitioned dataset (as ``dataset_record``)."""
    identity = pset.dataset
    labels = pset.meta.get("labels") or {}
    edge_dim = pset.load_part(0, verify=False).edge_dim
    edge_features = {"edge_features": edge_dim} if edge_dim else {}
    return {
        **identity,
        "num_nodes": pset.num_nodes,
        "num_edges": pset.num_edges,
        "num_features": num_features,
        **edge_features,
        "num_classes": num_classes,
        **labels_record(labels.get("kind", "class"), (0, labels.get("width", 0))),
        **split_sizes,
        "partitions": {"path": str(pset.path), "parts": pset.num_parts, "method": pset.method},
    }


class DistSteps(Steps):
    """What every distributed kind of training shares: the context, the communicators and the
    reductions over ranks."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        self.config, self.ctx = config, ctx
        self.rank, self.world_size = ctx.rank, ctx.world_size
        apply_process_settings(config)
        self.main_comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
        self.main_comm.rank_order_sums = config.run.sum_order == "rank"
        self.timer = StageTimer()
        assert config.run.partitions is not None
        self.pset = read_partitions(config.run.partitions, verify=False)
        if self.pset.num_parts != ctx.world_size:
            raise ConfigError(
                f"{self.pset.path} holds {self.pset.num_parts} parts but {ctx.world_size} workers "
                f"run; use --workers {self.pset.num_parts} or re-partition with --parts "
                f"{ctx.world_size}"
            )
        if config.feature_norm == "standard":
            raise ConfigError(
                "--feature-norm standard needs global statistics; use row or none when distributed"
            )

    def sum(self, values: list[float], stage: str = "metrics") -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        self.main_comm.all_reduce(t, stage)
        return t.tolist()

    def barrier(self) -> None:
        self.ctx.barrier()

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """The gradients of ``params`` summed over ranks in one all-reduce (each rank's loss is
        its share of the global loss); a missing gradient counts as zeros, so every rank sends
        the same size."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.main_comm.all_reduce(flat, "allreduce")
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    def broadcast_weights(self, model: torch.nn.Module) -> None:
        """Rank 0's weights everywhere (identical by seeding already; made certain here)."""
        for tensor in model.state_dict().values():
            self.main_comm.broadcast(tensor, src=0, stage="setup")

    def data_parallel(self, module: torch.nn.Module) -> DistributedDataParallel:
        """``module`` in DDP over the job's group, its gradient all-reduce counted by the
        communicator; buffers are never broadcast (sharded rows attached to a model are
        rank-local)."""
        ctx = self.ctx
        with warnings.catch_warnings():
            # torch deprecates broadcast_buffers in favour of forward_sync_buffers, which still
            # syncs buffers at init; rank-local buffers (the sharded rows) need the old switch,
            # as the warning itself advises until init_sync_buffers exists.
            warnings.filterwarnings(
                "ignore", message=".*broadcast_buffers.*", category=FutureWarning
            )
            ddp = DistributedDataParallel(
                module,
                device_ids=None if ctx.device.type == "cpu" else [ctx.device],
                process_group=ctx.group,
                init_sync=False,
                broadcast_buffers=False,
            )
        ddp.register_comm_hook(self.main_comm, _counted_allreduce_hook)
        return ddp

    def _check_labelled(self, has_features: bool, has_labels: bool) -> None:
        if not (has_features and has_labels):
            raise ConfigError(
                f"{self.pset.path} holds no {'features' if not has_features else 'labels'}; "
                "partition a labelled dataset (or give yours features and labels with "
                "`shardgnn convert`)"
            )
