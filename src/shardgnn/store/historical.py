"""Historical embeddings of remote nodes (DistGNN-MB's historical embedding cache, HEC;
GNNAutoScale's historical embeddings on one machine).

A sampled mini-batch needs, at layer ``l``, the hidden embedding ``h^l`` of every source node of
block ``l``. For a node another rank owns, computing it exactly means sampling its neighbourhood
one hop further out and fetching the input rows below it, most of them remote too. With
historical embeddings from layer ``L`` on (``--historical L:age``) a rank keeps, per layer
``l >= L``, a table of ``h^l`` of its halo (the remote in-neighbours of its own nodes) that the
owners pushed: the sampler serves such a node from the table instead of expanding it (its
subtree below layer ``l`` is never sampled nor fetched) when the entry is at most ``age`` steps
old, and expands it exactly otherwise.

The tables are filled from what owners compute anyway, in one of two modes (stage
``historical`` either way):

* ``push`` (DistGNN-MB): after every training step a rank sends the ``h^l`` its batch computed
  for its own nodes to every rank whose halo holds them, each node to each rank at most once
  every ``push_every`` steps (one all-to-all for the ids, one for the rows, per layer).
  ``push_every = age`` re-sends a row just as the copy it replaces reaches the age bound. Rows
  move whether or not anyone reads them.
* ``pull``: owners keep the latest ``h^l`` their batches computed for their boundary nodes; when
  the sampler meets remote nodes it holds no fresh entry for, it asks their owners (ids out,
  stamps back, then the rows of the fresh ones). Only rows that are read move, at the price of
  one more exchange per layer while sampling. An entry pushed after
step ``t`` is stamped ``t`` and may serve steps ``t + 1 .. t + age``: age 0 serves nothing, and
training is then exact bit for bit. Served entries are detached (no gradient flows to their
owners), as in both papers.

Scope ``all`` (GNNAutoScale's historical embeddings, ``--historical-scope all``) also serves the
rank's *own* nodes from a local table of what its batches computed: a layer's src nodes outside
its dst nodes are served whoever owns them, so a batch expands only what no fresh entry covers.
Nothing moves for own nodes; this saves sampling, feature rows and compute even on one host,
where remote bytes cost little. Remote nodes are served as in the mode chosen.

Collective ordering: the constructor is a collective (ranks tell the owners which of their nodes
they watch). In push mode :meth:`HistoricalEmbeddings.after_step` is a collective made by every
rank after every training step; in pull mode :meth:`prune` is one, made inside sampling, which
every rank runs the same number of times with the same layers in the same order. :meth:`read`
is local.
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import PartitionBook, bucket_by_owner
from shardgnn.store.config import HISTORICAL_MODES, HISTORICAL_SCOPES

NEVER = np.iinfo(np.int64).min // 2
"""Stamp of an entry no owner has pushed yet."""


def sorted_lookup(sorted_ids: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(found, pos)``: which ``nodes`` occur in the sorted unique ``sorted_ids``, and where
    (``pos`` is only meaningful where ``found``)."""
    if not sorted_ids.shape[0]:
        return np.zeros(nodes.shape[0], dtype=bool), np.zeros(nodes.shape[0], dtype=np.int64)
    pos = np.minimum(np.searchsorted(sorted_ids, nodes), sorted_ids.shape[0] - 1)
    return sorted_ids[pos] == nodes, pos


def halo_of(indices: np.ndarray, start: int, end: int) -> np.ndarray:
    """The sorted remote in-neighbours of a part (sources of its in-edges outside
    ``[start, end)``; ``indices`` in new global ids)."""
    indices = np.asarray(indices, dtype=np.int64)
    return np.unique(indices[(indices < start) | (indices >= end)])


class HistoricalEmbeddings:
    """Per-layer tables of the halo's hidden embeddings, pushed by their owners.

    Args:
        book: the partition book (part ``p`` is owned by rank ``p``).
        rank: this rank.
        comm: the communicator (stage ``stage``; set-up under ``stage + "_setup"``).
        halo: the nodes this rank keeps entries for (:func:`halo_of` its part).
        layers: the block layers served from the tables (``L .. num_layers - 1``, ``L >= 1``).
        max_age: an entry serves at most this many steps after the step that computed it.
        push_every: push mode: an owner sends a node's row to a watching rank at most once
            every this many steps (and only after steps that computed it).
        mode: ``push`` or ``pull`` (module docstring).
        scope: ``remote`` (serve remote nodes only) or ``all`` (own nodes too, from a local
            table; module docstring).
        orig_ids: every global id's original node id (default: the same); a state dict names
            its entries' nodes by original id, so a checkpoint re-shards onto another
            partition (:meth:`load_resharded`).
    """

    def __init__(
        self,
        book: PartitionBook,
        rank: int,
        comm: Communicator,
        halo: np.ndarray,
        layers: range,
        max_age: int,
        push_every: int = 1,
        stage: str = "historical",
        mode: str = "push",
        scope: str = "remote",
        orig_ids: np.ndarray | None = None,
    ):
        assert min(layers) >= 1 and max_age >= 0 and push_every >= 1
        assert mode in HISTORICAL_MODES and scope in HISTORICAL_SCOPES, (mode, scope)
        self.pull = mode == "pull"
        self.mode, self.scope = mode, scope
        self.book, self.rank, self.comm, self.stage = book, rank, comm, stage
        self.layers, self.max_age, self.push_every = layers, max_age, push_every
        self.orig_ids = None if orig_ids is None else np.asarray(orig_ids, dtype=np.int64)
        self.watch = np.asarray(halo, dtype=np.int64)
        assert np.all(book.owner(self.watch) != rank) and np.all(np.diff(self.watch) > 0)
        self.stamps = {layer: np.full(self.watch.shape[0], NEVER, np.int64) for layer in layers}
        self.rows: dict[int, torch.Tensor] = {}  # allocated at the first push (width known then)
        self.step = 0
        comm.declare(stage)
        # Tell every owner which of its nodes this rank watches: owners push only those.
        owners = book.owner(self.watch)
        order, counts = bucket_by_owner(self.watch, owners, comm.world_size)
        asks = np.split(self.watch[order], np.cumsum(counts)[:-1])
        got = comm.all_to_all([torch.from_numpy(a) for a in asks], stage + "_setup")
        self.subscribers = {
            q: np.sort(t.numpy()) for q, t in enumerate(got) if q != rank and t.numel()
        }
        # push: per layer and watching rank, the step each watched node was last sent at
        self.sent = {
            layer: {q: np.full(w.shape[0], NEVER, np.int64) for q, w in self.subscribers.items()}
            for layer in layers
        }
        # The own nodes whose latest computed rows (and the steps that computed them) this rank
        # keeps: pull mode answers from them (its boundary nodes, watched by some rank), scope
        # all serves its own batches from them (every own node).
        self._own_start = int(book.part_range(rank)[0])
        if scope == "all":
            self.own_ids = np.arange(self._own_start, int(book.part_range(rank)[1]), dtype=np.int64)
        elif self.pull:
            self.own_ids = np.unique(
                np.concatenate([np.zeros(0, np.int64), *self.subscribers.values()])
            )
        else:
            self.own_ids = np.zeros(0, np.int64)
        self.own_stamps = {
            layer: np.full(self.own_ids.shape[0], NEVER, np.int64) for layer in layers
        }
        self.own_rows: dict[int, torch.Tensor] = {}
        self.reset_counters()

    def reset_counters(self) -> None:
        """Zero the counters of :meth:`counters` (per epoch)."""
        self.lookups = self.hits = self.sent_rows = 0
        self.ages = np.zeros(self.max_age + 1, dtype=np.int64)

    def counters(self) -> list[float]:
        """``[lookups, hits, rows sent, served at age 0, 1, ..., max_age]`` since the last
        :meth:`reset_counters` (``lookups``: remote nodes the tables' layers needed; rows sent:
        pushed, or sent in reply to pulls; lookups count the nodes in scope: remote ones, or with
        scope ``all`` every src node outside the block's dst nodes)."""
        return [self.lookups, self.hits, self.sent_rows, *self.ages.tolist()]

    @property
    def nbytes(self) -> int:
        """Memory of the tables (rows and stamps; in pull mode or scope ``all`` also the rows of
        own nodes)."""
        tables = [*self.rows.values(), *self.own_rows.values()]
        rows = sum(t.numel() * t.element_size() for t in tables)
        stamps = [*self.stamps.values(), *self.own_stamps.values()]
        return rows + sum(s.nbytes for s in stamps)

    def _positions(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(watched, pos)``: which ``nodes`` the tables watch, and their table rows."""
        return sorted_lookup(self.watch, nodes)

    def _fresh(self, layer: int, pos: np.ndarray, watched: np.ndarray) -> np.ndarray:
        age = self.step - self.stamps[layer][pos]
        return watched & (age <= self.max_age)

    def _own_lookup(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found, pos)`` of ``nodes`` in ``own_ids``; with scope ``all`` that is the whole
        part range, so positions are offsets (a search per node would cost more than the
        subtrees that serving saves on large parts)."""
        if self.scope != "all":
            return sorted_lookup(self.own_ids, nodes)
        pos = nodes - self._own_start
        found = (pos >= 0) & (pos < self.own_ids.shape[0])
        return found, np.where(found, pos, 0)

    def _own_fresh(self, layer: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(fresh, pos)``: which own ``nodes`` have a kept row at most ``max_age`` steps old,
        and their rows in the own table."""
        found, pos = self._own_lookup(nodes)
        return found & (self.step - self.own_stamps[layer][pos] <= self.max_age), pos

    def prune(self, layer: int, src_nodes: np.ndarray, num_dst: int) -> np.ndarray | None:
        """Which ``src_nodes`` of block ``layer`` take ``h^layer`` from the table (a bool mask;
        None: the layer keeps none). The block's dst nodes are always computed (their own
        ``h^layer`` is needed exactly where it is computed); of the others, a node is served when
        its entry is at most ``max_age`` steps old at the current step."""
        if layer not in self.layers:
            return None
        mask = np.zeros(src_nodes.shape[0], dtype=bool)
        others = src_nodes[num_dst:]
        own = self.book.owner(others) == self.rank
        remote = np.flatnonzero(~own)
        self.lookups += int(others.shape[0] if self.scope == "all" else remote.shape[0])
        watched, pos = self._positions(others[remote])
        fresh = self._fresh(layer, pos, watched)
        if self.pull:  # ask the owners for what this rank holds no fresh entry of
            self._pull(layer, others[remote[watched & ~fresh]])
            fresh = self._fresh(layer, pos, watched)
        mask[num_dst + remote] = fresh
        if self.scope == "all":
            own_at = np.flatnonzero(own)
            mask[num_dst + own_at] = self._own_fresh(layer, others[own_at])[0]
        return mask

    def _pull(self, layer: int, ids: np.ndarray) -> None:
        """Ask the owners of ``ids`` (watched) for entries at most ``max_age`` steps old, and
        answer what the other ranks ask of this one (collective: ids out; stamps back, NEVER
        where the owner has nothing fresh; then the fresh rows)."""
        world = self.comm.world_size
        order, counts = bucket_by_owner(ids, self.book.owner(ids), world)
        asks = np.split(ids[order], np.cumsum(counts)[:-1])
        asked = self.comm.all_to_all([torch.from_numpy(a) for a in asks], self.stage)
        own_rows = self.own_rows.get(layer)
        width = 0 if own_rows is None else int(own_rows.shape[1])
        stamps_out, rows_out = [], []
        for request in asked:
            nodes = request.numpy()
            found, pos = self._own_lookup(nodes)
            assert found.all(), "a rank asked for a node it does not watch"
            stamp = self.own_stamps[layer][pos]
            fresh = self.step - stamp <= self.max_age
            stamps_out.append(torch.from_numpy(np.where(fresh, stamp, NEVER)))
            rows = torch.zeros((0, width)) if own_rows is None else own_rows[pos[fresh]]
            rows_out.append(rows)
            self.sent_rows += int(fresh.sum())
        got_stamps = self.comm.all_to_all(
            stamps_out, self.stage, recv_counts=[a.shape[0] for a in asks]
        )
        # an owner sends a row for every fresh stamp: the sizes are known here
        fresh_rows = [int((stamp != NEVER).sum()) for stamp in got_stamps]
        got_rows = self.comm.all_to_all(rows_out, self.stage, recv_counts=fresh_rows)
        for nodes, stamp_t, rows in zip(asks, got_stamps, got_rows):
            stamp = stamp_t.numpy()
            fresh = stamp != NEVER
            if not fresh.any():
                continue
            if layer not in self.rows:
                self.rows[layer] = torch.zeros((self.watch.shape[0], rows.shape[1]))
            _, pos = self._positions(nodes[fresh])
            self.rows[layer][torch.from_numpy(pos)] = rows
            self.stamps[layer][pos] = stamp[fresh]

    def read(self, layer: int, nodes: np.ndarray) -> torch.Tensor:
        """The table rows of ``nodes`` (served by :meth:`prune` at this step); each entry's age is
        checked against the bound and counted."""
        if nodes.shape[0] == 0:
            return torch.zeros((0, 0), dtype=torch.float32)
        own = self.book.owner(nodes) == self.rank
        watched, pos = self._positions(nodes[~own])
        stamps = self.stamps[layer][pos]
        found = watched.all()
        if own.any():
            own_found, own_pos = self._own_lookup(nodes[own])
            found = found and own_found.all()
            stamps = np.concatenate([stamps, self.own_stamps[layer][own_pos]])
        ages = self.step - stamps
        if not (found and np.all((ages >= 1) & (ages <= self.max_age))):
            raise AssertionError(
                f"historical layer {layer}: an entry served at step {self.step} is missing or "
                f"older than {self.max_age} steps (ages {np.unique(ages).tolist()})"
            )
        self.hits += int(nodes.shape[0])
        self.ages += np.bincount(ages, minlength=self.max_age + 1)[: self.max_age + 1]
        if not own.any():
            return self.rows[layer][torch.from_numpy(pos)]
        rows = self.own_rows[layer].new_empty((nodes.shape[0], self.own_rows[layer].shape[1]))
        rows[torch.from_numpy(own)] = self.own_rows[layer][torch.from_numpy(own_pos)]
        if (~own).any():
            rows[torch.from_numpy(~own)] = self.rows[layer][torch.from_numpy(pos)]
        return rows

    @torch.no_grad()
    def after_step(self, computed: dict[int, tuple[np.ndarray, torch.Tensor]]) -> None:
        """End of a training step (collective). ``computed[l] = (nodes, h_DF)``: the
        ``h^l`` this rank's batch computed, and for which nodes. Every owner sends its own
        nodes' rows, stamped with this step, to the ranks that watch them, each row to each rank
        at most once every ``push_every`` steps."""
        for layer in self.layers:
            nodes, h_DF = computed[layer]
            nodes, h_DF = np.asarray(nodes, dtype=np.int64), h_DF.detach().float().cpu()
            if self.own_ids.shape[0]:
                self._keep_own(layer, nodes, h_DF)
            if not self.pull:
                self._push(layer, nodes, h_DF)
        self.step += 1

    def _keep_own(self, layer: int, nodes: np.ndarray, h_DF: torch.Tensor) -> None:
        """Remember the rows this step computed for the own nodes kept (``own_ids``)."""
        if layer not in self.own_rows:
            self.own_rows[layer] = torch.zeros((self.own_ids.shape[0], int(h_DF.shape[1])))
        found, pos = self._own_lookup(nodes)
        hit = np.flatnonzero(found)
        self.own_rows[layer][torch.from_numpy(pos[hit])] = h_DF[torch.from_numpy(hit)]
        self.own_stamps[layer][pos[hit]] = self.step

    def _push(self, layer: int, nodes: np.ndarray, h_DF: torch.Tensor) -> None:
        world, width = self.comm.world_size, int(h_DF.shape[1])
        empty_ids, empty_rows = torch.zeros(0, dtype=torch.int64), h_DF.new_zeros((0, width))
        own = np.flatnonzero(self.book.owner(nodes) == self.rank)
        ids_out, rows_out = [empty_ids] * world, [empty_rows] * world
        for q, watched in self.subscribers.items():
            found, pos = sorted_lookup(watched, nodes[own])
            sent = self.sent[layer][q]
            due = found & (self.step - sent[pos] >= self.push_every)
            sent[pos[due]] = self.step
            ids_out[q] = torch.from_numpy(nodes[own[due]])
            rows_out[q] = h_DF[torch.from_numpy(own[due])]
        got_ids = self.comm.all_to_all(ids_out, self.stage)
        got_rows = self.comm.all_to_all(
            rows_out, self.stage, recv_counts=[int(t.shape[0]) for t in got_ids]
        )
        if layer not in self.rows:
            self.rows[layer] = torch.zeros((self.watch.shape[0], width), dtype=torch.float32)
        ids = torch.cat(got_ids).numpy()
        watched, pos = self._positions(ids)
        assert watched.all(), "an owner pushed a node this rank does not watch"
        self.rows[layer][torch.from_numpy(pos)] = torch.cat(got_rows)
        self.stamps[layer][pos] = self.step
        self.sent_rows += int(sum(int(t.shape[0]) for t in rows_out))

    def _original(self, ids: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(ids.copy() if self.orig_ids is None else self.orig_ids[ids])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The tables, their stamps, the step and the original ids of the tables' nodes
        (``watch_ids``, ``own_node_ids``; a checkpoint holds one per rank)."""
        state = {
            "step": torch.tensor(self.step),
            "watch_ids": self._original(self.watch),
            "own_node_ids": self._original(self.own_ids),
        }
        for layer in self.layers:
            state[f"stamps.{layer}"] = torch.from_numpy(self.stamps[layer].copy())
            for q, sent in self.sent[layer].items():
                state[f"sent.{layer}.{q}"] = torch.from_numpy(sent.copy())
            state[f"own_stamps.{layer}"] = torch.from_numpy(self.own_stamps[layer].copy())
            if layer in self.own_rows:
                state[f"own_rows.{layer}"] = self.own_rows[layer].clone()
            if layer in self.rows:
                state[f"rows.{layer}"] = self.rows[layer].clone()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.step = int(state["step"])
        for layer in self.layers:
            self.stamps[layer] = state[f"stamps.{layer}"].numpy().astype(np.int64)
            for q in self.sent[layer]:
                self.sent[layer][q] = state[f"sent.{layer}.{q}"].numpy().astype(np.int64)
            self.own_stamps[layer] = state[f"own_stamps.{layer}"].numpy().astype(np.int64)
            if f"own_rows.{layer}" in state:
                self.own_rows[layer] = state[f"own_rows.{layer}"].to(torch.float32).clone()
            if f"rows.{layer}" in state:
                self.rows[layer] = state[f"rows.{layer}"].to(torch.float32).clone()

    def load_resharded(self, states: list[dict[str, torch.Tensor]]) -> None:
        """Fill the tables from the :meth:`state_dict` of every rank of a job of another size
        or partition: per layer, each node's entry is the freshest any of them kept of it (in a
        watch table or its owner's own table; the copies stamped ``t`` of a node all hold what
        its owner computed at step ``t``, so they are equal). Push bookkeeping starts afresh:
        every watched row is due at its next computation."""
        self.step = int(states[0]["step"])
        watch, own = self._original(self.watch).numpy(), self._original(self.own_ids).numpy()
        for layer in self.layers:
            ids, stamps, rows = [], [], []
            for state in states:
                for id_key, table in (("watch_ids", ""), ("own_node_ids", "own_")):
                    stamp = state[f"{table}stamps.{layer}"].numpy()
                    kept = stamp != NEVER
                    if kept.any():
                        ids.append(state[id_key].numpy()[kept])
                        stamps.append(stamp[kept])
                        rows.append(state[f"{table}rows.{layer}"][torch.from_numpy(kept)])
            if not ids:
                continue
            every_id, every_stamp = np.concatenate(ids), np.concatenate(stamps)
            every_row = torch.cat(rows).to(torch.float32)
            order = np.lexsort((every_stamp, every_id))  # by node, then stamp: freshest last
            last = np.r_[every_id[order][1:] != every_id[order][:-1], True]
            freshest = order[last]
            node, stamp = every_id[freshest], every_stamp[freshest]
            for targets, stamps_of, rows_of in (
                (watch, self.stamps, self.rows),
                (own, self.own_stamps, self.own_rows),
            ):
                found, pos = sorted_lookup(node, targets)
                stamps_of[layer] = np.where(found, stamp[pos], NEVER)
                table = torch.zeros((targets.shape[0], int(every_row.shape[1])))
                hit = torch.from_numpy(np.flatnonzero(found))
                table[hit] = every_row[torch.from_numpy(freshest[pos[found]])]
                rows_of[layer] = table
