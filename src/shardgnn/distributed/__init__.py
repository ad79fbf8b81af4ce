"""The distributed layer: one context object (rank, world, device, process groups) built by one
init function, and one communicator through which every byte that crosses ranks passes."""

from shardgnn.distributed.comm import Communicator, CommStats
from shardgnn.distributed.context import DistContext, init_distributed

__all__ = ["Communicator", "CommStats", "DistContext", "init_distributed"]
