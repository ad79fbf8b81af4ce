"""Distributed temporal link prediction: node memory sharded by owner, sampling by owner.

One process per part of a temporal partition (``write_temporal_partitions``: the T-CSR rows of a
part's nodes, and the event stream in new ids beside the parts). Every global batch of events is
split into ``P`` contiguous shares, one per rank; per step, every rank, in this order (each a
collective, so every rank takes part, with an empty share too):

1. samples its seeds' recent events (TGN) or hops (TGAT) from their owners
   (:func:`~shardgnn.sampling.dist_temporal.dist_temporal_hop`; stage ``sample``);
2. reads the memory of its subgraph's nodes from their owners: rows, last update and pending
   event; in training also the memory of each pending event's other endpoint that is not in the
   subgraph already, and applies the GRU step itself (stage ``memory``);
3. scores its share, backward, and sums the gradients over ranks (one all-reduce, stage
   ``grad``): the loss is the global batch's mean, so the sum is one process's gradient;
4. sends to the owners the memory it read for its events' nodes and the events themselves
   (stage ``memory``); each owner stores the rows, then makes the events pending in event
   order, exactly as one process does with the whole batch.

What changes with ``P``: nothing but float rounding. The negatives are drawn per global batch and
sliced, memory follows one process's update order, and the sampler's draws depend on the seed,
not on who asks. Dropout masks (torch's generator) differ per rank: with ``--dropout 0`` a run on
``P`` ranks matches one process to rounding (tested).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.loader.temporal import EventStream
from shardgnn.nn.temporal import MemoryState, NodeMemory
from shardgnn.partition.book import bucket_by_owner
from shardgnn.sampling.dist_temporal import dist_temporal_hop
from shardgnn.sampling.kernels import relabel
from shardgnn.seeding import mix_seed
from shardgnn.store.dist_graph import DistGraphStore
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_steps import DistSteps
from shardgnn.train.loop import EpochRecord
from shardgnn.train.temporal import TemporalLinkSteps
from shardgnn.train.temporal_node import TemporalNodeTask


class DistTemporalLinkSteps(TemporalLinkSteps, DistSteps):
    """One rank of distributed TGN / JODIE / TGAT training (see the module docstring); the
    reductions over ranks are :class:`DistSteps`'."""

    def __init__(self, config: TrainConfig, ctx: DistContext):
        DistSteps.__init__(self, config, ctx)  # the partition, its part count, main_comm
        self.data_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        self.comms = (self.data_comm, self.main_comm)
        pset = self.pset
        if "temporal" not in pset.meta:
            raise ConfigError(
                f"{pset.path} holds a static graph; --model {config.model.model} trains on "
                "timestamped events: partition a temporal dataset (shardgnn partition "
                "synthetic-temporal ...) or give the dataset with --workers N"
            )
        self.store = DistGraphStore.open(pset.path, ctx.rank, ctx.world_size, self.data_comm)
        arrays = pset.meta["arrays"]
        # every rank reads every batch's events: held in memory (private, writable copies)
        events = EventStream(
            src=np.array(pset.shared_array("events/src.npy")),
            dst=np.array(pset.shared_array("events/dst.npy")),
            t=np.array(pset.shared_array("events/t.npy")),
            feat=(
                np.array(pset.shared_array("events/feat.npy"))
                if "events/feat.npy" in arrays
                else None
            ),
            num_nodes=pset.num_nodes,
            name=pset.dataset["name"],
            labels=(
                np.array(pset.shared_array("events/label.npy"))
                if "events/label.npy" in arrays
                else None
            ),
        )
        self.spec = pset.dataset.get("spec")
        start, end = self.store.start, self.store.end
        self._setup(config, events, (start, end - start), pset.orig_ids)
        self.node_map = np.full(pset.num_nodes, -1, dtype=np.int64)  # relabelling scratch
        self.mode = config.temporal_sampling

    # ------------------------------------------------------------------ hooks
    def _share(self, lo: int, hi: int) -> tuple[int, int]:
        per = -(-(hi - lo) // self.world_size)
        return min(lo + self.rank * per, hi), min(lo + (self.rank + 1) * per, hi)

    def _neighbourhood(self, seeds: np.ndarray, time: float):
        hop = dist_temporal_hop(
            self.store, self.data_comm, seeds, np.full(seeds.size, time),
            self.config.temporal.neighbors[0], self.mode,
        )  # fmt: skip
        n_id, local_nbr = relabel(seeds, hop.nbr, self.node_map)
        seed_index = np.repeat(np.arange(seeds.size), np.diff(hop.offsets))
        return n_id, np.stack([local_nbr, seed_index]), hop.eids

    def _hops(self, nodes: np.ndarray, times: np.ndarray, seed: int):
        hops = []
        for layer, fanout in enumerate(self.config.temporal.neighbors):
            hop = dist_temporal_hop(
                self.store, self.data_comm, nodes, times, fanout, self.mode, mix_seed(seed, layer)
            )
            hops.append(hop)
            nodes, times = hop.nbr, hop.nbr_times
        return hops

    def _restart_stream(self) -> None:
        pass  # owners binary-search their rows: no cursors to rewind

    # ------------------------------------------------------------------ memory exchange
    def _fetch(self, nodes: np.ndarray, rows_only: bool = False) -> MemoryState | torch.Tensor:
        """:func:`fetch_memory` of ``nodes`` (collective)."""
        memory = self.model.memory
        return fetch_memory(self.store, self.data_comm, memory, self.device, nodes, rows_only)

    def _others_memory(self, state: MemoryState, known: np.ndarray | None = None) -> torch.Tensor:
        """The memory rows of each pending event's other endpoint (collective). ``known``: the
        global ids whose rows ``state`` already holds (a batch's subgraph nodes, whose pending
        partners are often among them): only the others are fetched."""
        others = state.other_B[state.other_B >= 0].cpu().numpy()
        unique, inverse = np.unique(others, return_inverse=True)
        rows = state.memory_BM.new_empty(unique.size, state.memory_BM.shape[1])
        have = np.zeros(unique.size, dtype=bool)
        if known is not None and known.size and unique.size:
            sorter = np.argsort(known, kind="stable")
            pos = np.minimum(np.searchsorted(known, unique, sorter=sorter), known.size - 1)
            have = known[sorter[pos]] == unique
            rows[torch.from_numpy(have)] = state.memory_BM[torch.from_numpy(sorter[pos[have]])]
        rows[torch.from_numpy(~have)] = self._fetch(unique[~have], rows_only=True)
        return rows[torch.from_numpy(inverse)]

    def _read(self, n_id_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n_id = n_id_B.cpu().numpy()
        state = self._fetch(n_id)
        if not self.model.memory.training:
            return state.memory_BM, state.last_B
        return self.model.memory.step(state, self._others_memory(state, n_id))

    def _send_events(self, a: int, b: int) -> torch.Tensor:
        """Events ``[a, b)`` to the owners of their endpoints (once per owner); returns the
        events this rank's nodes took part in, ``[m, 4]`` (src, dst, time bits, id), in event
        order (collective)."""
        ids = np.arange(a, b)
        src, dst = self.events.src[a:b], self.events.dst[a:b]
        owner_src, owner_dst = self.store.owner(src), self.store.owner(dst)
        # an event goes to its source's owner, and to its destination's when that is another
        which = np.concatenate([ids, ids[owner_dst != owner_src]])
        owners = np.concatenate([owner_src, owner_dst[owner_dst != owner_src]])
        order, counts = bucket_by_owner(which, owners, self.world_size)
        times = np.asarray(self.events.t[which]).view(np.int64)
        rows = np.stack([self.events.src[which], self.events.dst[which], times, which], axis=1)
        groups = np.split(rows[order], np.cumsum(counts)[:-1])
        got = self.data_comm.all_to_all([torch.from_numpy(g) for g in groups], "memory")
        events = torch.cat(got) if got else torch.zeros(0, 4, dtype=torch.int64)
        return events[torch.argsort(events[:, 3], stable=True)]

    def _observe(self, events: torch.Tensor) -> torch.Tensor:
        events = events.to(self.device)  # arrived on the host; the memory's buffers may not be
        return self.model.memory.observe(
            events[:, 0], events[:, 1], events[:, 2].contiguous().view(torch.float64), events[:, 3]
        )

    def _commit(self, nodes, memory_BM, last_B, a: int, b: int) -> None:
        """The owners store the rows this rank read for its events' nodes (every reader of a
        node read the same), then make the global batch's events pending (collective)."""
        order, counts, _ = owner_requests(self.store, self.world_size, nodes.cpu().numpy())
        sort = torch.from_numpy(order)
        # one message per owner: node id and last update (as 4 float32 columns), then the row
        key_B2 = torch.stack([nodes, last_B.view(torch.int64)], dim=1)[sort]
        packed = torch.cat([_as_float32(key_B2), memory_BM.detach()[sort]], dim=1)
        memory = self.model.memory
        for got in self.data_comm.all_to_all(list(torch.split(packed, counts)), "memory"):
            key_B2 = _as_int64(got[:, :4])
            memory.store(key_B2[:, 0], got[:, 4:], key_B2[:, 1].contiguous().view(torch.float64))
        self._observe(self._send_events(a, b))

    def _apply_pending(self, nodes: torch.Tensor) -> None:
        """Held ``nodes`` take their pending messages (collective: other endpoints' rows)."""
        memory = self.model.memory
        state = memory.state(nodes)
        memory.store(nodes, *memory.step(state, self._others_memory(state)))

    @torch.no_grad()
    def _apply(self, a: int, b: int) -> None:
        self._apply_pending(self._observe(self._send_events(a, b)))

    @torch.no_grad()
    def _flush(self) -> None:
        self._apply_pending(self.model.memory.held_ids())

    def _sync_gradients(self) -> None:
        params = [p for p in self.model.parameters() if p.requires_grad]
        flat = torch.cat(
            [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
        )
        self.main_comm.all_reduce(flat, "grad")
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    def _all_scores(self, index: np.ndarray, scores_KN: np.ndarray) -> np.ndarray:
        """Every rank's scores of a split, by event (each rank gets all of them)."""
        mine = torch.from_numpy(np.vstack([index.astype(np.float64), scores_KN]).T.copy())
        got = self.data_comm.all_to_all([mine] * self.world_size, "eval")
        everything = torch.cat(got).numpy()
        everything = everything[np.argsort(everything[:, 0], kind="stable")]
        return everything[:, 1:].T

    # ------------------------------------------------------------------ records
    def dataset_info(self) -> dict[str, Any]:
        record = super().dataset_info()
        record["partitions"] = str(self.pset.path)
        return record

    def _fingerprint(self) -> dict[str, Any] | None:
        return self.pset.dataset.get("fingerprint")  # the events here are in new ids

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra = super().results_extra(history)
        extra["sampled_edges_per_s"] = None  # sampling waits on peers: see the comm stages
        return extra


def owner_requests(
    store: DistGraphStore, world_size: int, ids: np.ndarray
) -> tuple[np.ndarray, list[int], list[torch.Tensor]]:
    """``(order, counts, requests)``: ``ids`` grouped by owner, one request per rank."""
    order, counts = bucket_by_owner(ids, store.owner(ids), world_size)
    groups = np.split(ids[order], np.cumsum(counts)[:-1])
    return order, counts.tolist(), [torch.from_numpy(np.ascontiguousarray(g)) for g in groups]


def fetch_memory(
    store: DistGraphStore,
    comm: Communicator,
    memory: NodeMemory,
    device: torch.device,
    nodes: np.ndarray,
    rows_only: bool = False,
) -> MemoryState | torch.Tensor:
    """The memory state of global ``nodes`` from their owners (collective over ``comm``: one
    all-to-all of ids, one of replies; each owner answers from its shard ``memory``, on
    ``device``); ``rows_only``: the memory rows alone."""
    order, counts, requests = owner_requests(store, comm.world_size, nodes)
    incoming = comm.all_to_all(requests, "memory")
    replies = []
    for ids in incoming:
        state = memory.state(ids.to(device))
        if rows_only:
            replies.append(state.memory_BM)
            continue
        meta_B4 = torch.stack(
            [state.last_B.view(torch.int64), state.other_B, state.time_B.view(torch.int64),
             state.event_B], dim=1,
        )  # fmt: skip
        # one reply per owner: the rows, then the 32 bytes of metadata as 8 float32 columns
        replies.append(torch.cat([state.memory_BM, _as_float32(meta_B4)], dim=1))
    got = comm.all_to_all(replies, "memory", recv_counts=counts)
    width = memory.dim + (0 if rows_only else 8)
    back = torch.from_numpy(np.argsort(order, kind="stable"))
    packed = torch.cat(got)[back] if nodes.size else memory.memory.new_zeros(0, width)
    if rows_only:
        return packed
    meta_B4 = _as_int64(packed[:, memory.dim :])
    return MemoryState(
        packed[:, : memory.dim],
        meta_B4[:, 0].contiguous().view(torch.float64),
        meta_B4[:, 1].contiguous(),
        meta_B4[:, 2].contiguous().view(torch.float64),
        meta_B4[:, 3].contiguous(),
    )


def _as_float32(values_BK: torch.Tensor) -> torch.Tensor:
    """int64 columns as twice as many float32 columns, bit for bit (to travel with rows)."""
    return values_BK.contiguous().view(torch.float32)


def _as_int64(columns_B2K: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`_as_float32`."""
    return columns_B2K.contiguous().view(torch.int64)


class DistTemporalNodeSteps(TemporalNodeTask, DistTemporalLinkSteps):
    """One rank of distributed dynamic node classification: the link steps' exchanges, the
    node task's loss and metrics (:mod:`shardgnn.train.temporal_node`)."""
