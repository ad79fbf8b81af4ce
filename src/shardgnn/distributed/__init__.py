"""The distributed layer: one context object (rank, world, device, process groups) built by one
init function (:mod:`~shardgnn.distributed.context`), one communicator through which every byte
that crosses ranks passes (:mod:`~shardgnn.distributed.comm`), the low-bit row codec and the
local launcher. Nothing is imported here, so :mod:`shardgnn.distributed.config` stays light."""
