"""Temporal link prediction (TGN, JODIE, TGAT) on a stream of timestamped events, one process.

The events are split chronologically (:meth:`TemporalGraph.split_points`). An epoch streams the
training events in time order in batches (:class:`~shardgnn.loader.temporal.EventBatches`):
each batch is scored against uniform random negatives (BCE loss), and only then do its events
reach node memory, so no prediction sees its own or later events. Neighbourhoods are sampled
strictly before the batch's first event time (``recent_subgraph``, TGN) or before each pair's
own time (TGAT), so nothing of the batch leaks through them either.

Evaluation continues the stream (:mod:`shardgnn.train.temporal_eval`): from the memory at the end
of training, the validation events (and for the test split, validation then test events) are
scored batch by batch, then applied.
Each positive ``(u, v, t)`` is scored against fixed negatives drawn once (``--link-split-seed``):

* ``random``: a uniform node ``(u, w)`` (AP, AUC; ``ap_batch_mean``: the mean of per-batch APs,
  the figure PyG's TGN example prints);
* ``historical``: a node ``u`` sent to in the training events, other than ``v``, when it has one
  (Poursafaei et al.'s harder negatives: they test memorising past partners);
* ``new_nodes``: the random metrics over events with an endpoint that never occurs in training
  (inductive evaluation).
"""

from __future__ import annotations

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import canonical_spec, load_temporal_dataset
from shardgnn.graph.temporal import TemporalGraph, chronological_split
from shardgnn.loader.temporal import EventBatches, EventStream
from shardgnn.nn.link import link_loss
from shardgnn.nn.temporal import HopTensors, TemporalLinkModel
from shardgnn.sampling.temporal import TemporalNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun, StepResult, batch_epoch
from shardgnn.train.loop import Steps
from shardgnn.train.setup import EVAL_STREAM, adam, resolve_device
from shardgnn.train.temporal_eval import TemporalStreamEvaluation


def historical_negatives(
    src: np.ndarray, dst: np.ndarray, train_end: int, num_nodes: int, rng: np.random.Generator
) -> np.ndarray:
    """Per event ``i >= train_end``: a destination its source sent to in the training events
    ``[0, train_end)``, other than ``dst[i]``, drawn uniformly; a uniform node when it has none.
    (Entries before ``train_end`` are unused: -1.)"""
    pairs = np.unique(src[:train_end] * num_nodes + dst[:train_end])
    owner, partner = pairs // num_nodes, pairs % num_nodes
    start = np.searchsorted(owner, np.arange(num_nodes + 1))
    s, d = src[train_end:], dst[train_end:]
    count = start[s + 1] - start[s]
    pick = (rng.random(s.size) * np.maximum(count, 1)).astype(np.int64)
    if partner.size:
        chosen = partner[np.minimum(start[s] + pick, partner.size - 1)]
    else:
        chosen = d.copy()  # written below: never into the caller's events
    # the positive itself is no negative: take the next past partner instead
    clash = (count > 1) & (chosen == d)
    chosen[clash] = partner[start[s[clash]] + (pick[clash] + 1) % count[clash]]
    none = (count == 0) | ((count == 1) & (chosen == d))
    chosen[none] = rng.integers(0, num_nodes, int(none.sum()))
    return np.concatenate([np.full(train_end, -1, dtype=np.int64), chosen.astype(np.int64)])


def evaluation_negatives(
    src: np.ndarray, dst: np.ndarray, num_nodes: int, train_end: int, split_seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The fixed negative destinations of every event (used after ``train_end``): uniform, and
    historical (:func:`historical_negatives`), drawn once from ``split_seed``."""
    rng = np.random.default_rng(mix_seed(split_seed, EVAL_STREAM))
    uniform = rng.integers(0, num_nodes, src.shape[0]).astype(np.int64)
    past = historical_negatives(np.asarray(src), np.asarray(dst), train_end, num_nodes, rng)
    return uniform, past


def mean_gap(src: np.ndarray, dst: np.ndarray, t: np.ndarray, train_end: int) -> float:
    """JODIE's time scale: about the mean time between a node's consecutive training events
    (the training span times the active nodes over the event endpoints)."""
    span = float(t[max(train_end - 1, 0)] - t[0])
    active = max(np.unique(np.r_[src[:train_end], dst[:train_end]]).size, 1)
    return max(span * active / max(2 * train_end, 1), 1e-9)


def split_events(config: TrainConfig, t_E: np.ndarray, name: str) -> tuple[int, int]:
    """``(val_start, test_start)``: the chronological split of the events at times ``t_E`` (of
    temporal graph ``name``) by ``--link-val`` and ``--link-test``.

    Raises:
        ConfigError: the split leaves no training or no validation event.
    """
    val_start, test_start = chronological_split(np.asarray(t_E), config.link.val, config.link.test)
    if val_start == 0 or test_start == val_start:
        raise ConfigError(
            f"temporal graph {name!r}: the split --link-val {config.link.val} --link-test "
            f"{config.link.test} leaves an empty training or validation span "
            f"({val_start} / {test_start - val_start} events); give more events or other "
            "fractions"
        )
    return val_start, test_start


def temporal_model(
    config: TrainConfig,
    events: EventStream,
    event_feat_EF: torch.Tensor,
    train_end: int,
    memory_rows: tuple[int, int] | None,
    device: torch.device,
    orig_ids: np.ndarray | None = None,
    num_classes: int = 0,
) -> TemporalLinkModel:
    """The model ``config`` names, from the initial weights of ``config.seed``, on ``device``;
    ``memory_rows``: ``(first, count)`` of the nodes whose memory this process holds (``None``:
    all of them); ``orig_ids``: every node id's original id (a partition's; ``None``: the
    same); ``num_classes``: a classifier head's classes (0: none)."""
    kind, temporal, ev = config.model.model, config.temporal, events
    torch.manual_seed(config.seed)
    return TemporalLinkModel(
        kind,
        ev.num_nodes,
        event_feat_EF,
        memory_dim=temporal.memory_dim,
        time_dim=temporal.time_dim,
        embedding_dim=config.link.out_dim,
        heads=config.model.heads,
        dropout=config.model.dropout,
        layers=len(temporal.neighbors),
        time_scale=mean_gap(ev.src, ev.dst, ev.t, train_end) if kind == "jodie" else 1.0,
        node_rows=config.embedding.dim if config.embedding.enabled else 0,
        memory_rows=memory_rows,
        orig_ids=orig_ids,
        num_classes=num_classes,
    ).to(device)


def new_endpoint_events(events: EventStream, train_end: int) -> np.ndarray:
    """Per event: whether an endpoint never occurs in the training events ``[0, train_end)``
    (the ``new_nodes`` metrics' events)."""
    seen = np.zeros(events.num_nodes, dtype=bool)
    seen[events.src[:train_end]] = True
    seen[events.dst[:train_end]] = True
    return ~seen[events.src] | ~seen[events.dst]


class TemporalLinkSteps(TemporalStreamEvaluation, Steps):
    """One process's temporal link prediction (``graph``: given, else loaded from the spec).

    Every batch is a global range of events; :meth:`_share` is the part this process scores
    (all of it here). The hooks a distributed trainer replaces: :meth:`_neighbourhood` and
    :meth:`_hops` (sampling), :meth:`_read` (memory), :meth:`_commit` and :meth:`_apply`
    (memory updates), :meth:`_all_scores` and :meth:`_sync_gradients`."""

    metric = "ap"

    def __init__(self, config: TrainConfig, graph: TemporalGraph | None = None):
        apply_process_settings(config)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        g = graph if graph is not None else load_temporal_dataset(config.dataset, config.data_dir)
        self.graph = g
        self._setup(config, EventStream.of(g), None)
        self.sampler = TemporalNeighborSampler(
            g, list(config.temporal.neighbors), config.temporal_sampling
        )

    def _setup(
        self,
        config: TrainConfig,
        events: EventStream,
        memory_rows: tuple[int, int] | None,
        orig_ids: np.ndarray | None = None,
    ) -> None:
        """Everything but the sampler: split, event tensors, model, optimiser, negatives
        (``memory_rows``, ``orig_ids``: :func:`temporal_model`'s)."""
        self.config, self.events = config, events
        self.device = dev = resolve_device(config.device)
        ev = events
        self.val_start, self.test_start = split_events(config, ev.t, ev.name)
        self.src_E = torch.from_numpy(np.asarray(ev.src)).to(dev)
        self.dst_E = torch.from_numpy(np.asarray(ev.dst)).to(dev)
        self.t_E = torch.from_numpy(np.asarray(ev.t)).to(dev)
        feat = ev.feat if ev.feat is not None else np.zeros((ev.num_events, 0), np.float32)
        self.event_feat_EF = torch.from_numpy(np.ascontiguousarray(feat)).to(dev)
        self.model = temporal_model(
            config, ev, self.event_feat_EF, self.val_start, memory_rows, dev, orig_ids,
            num_classes=self._num_classes(),
        )  # fmt: skip
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.batches = EventBatches(
            0, self.val_start, config.item_batch_size, config.temporal.chunks, seed=config.seed
        )
        self.timer = StageTimer()
        self.eval_neg, self.eval_neg_hist = evaluation_negatives(
            ev.src, ev.dst, ev.num_nodes, self.val_start, config.link.split_seed
        )
        self.new_event = new_endpoint_events(ev, self.val_start)
        self.last_metrics: dict[str, dict[str, float]] = {}
        self.sampled_events = 0

    def _num_classes(self) -> int:
        """The classes the model's classifier head predicts (link prediction: none)."""
        return 0

    def extra_state(self) -> dict[str, torch.Tensor]:
        """TGAT's learnt rows: their order (original ids), for their optimiser state, which a
        re-sharded resume puts in the new order (:meth:`load_resharded_extra_state`)."""
        rows = getattr(self.model, "node_rows", None)
        return {} if rows is None else {"learnt_rows_order": rows.node_ids.clone()}

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        """Nothing to restore: :meth:`extra_state` is the order the model's state has."""

    def load_resharded_extra_state(self, states: list[dict[str, torch.Tensor]]) -> None:
        """The optimiser's per-row state of TGAT's learnt rows (Adam's moments), loaded in the
        order of the partition that wrote the checkpoint, put in this one's (the rows
        themselves were, by :func:`~shardgnn.train.checkpoint.reshard`)."""
        rows = getattr(self.model, "node_rows", None)
        if rows is None:
            return super().load_resharded_extra_state(states)
        old_order = states[0]["learnt_rows_order"].numpy()
        position = np.empty(int(old_order.max()) + 1, dtype=np.int64)
        position[old_order] = np.arange(old_order.shape[0])
        take = torch.from_numpy(position[rows.node_ids.cpu().numpy()]).to(rows.weight.device)
        for name, value in self.optimizer.state.get(rows.weight, {}).items():
            if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == take.shape[0]:
                self.optimizer.state[rows.weight][name] = value[take].contiguous()

    # ------------------------------------------------------------------ hooks
    def _share(self, lo: int, hi: int) -> tuple[int, int]:
        """The events of the global batch ``[lo, hi)`` this process scores."""
        return lo, hi

    def _neighbourhood(self, seeds: np.ndarray, time: float):
        """TGN: ``(n_id, edge_index, event ids)`` of the seeds' recent events before ``time``."""
        n_id, edge_index, events = self.sampler.recent_subgraph(seeds, np.full(seeds.size, time))
        return n_id, edge_index, events

    def _hops(self, nodes: np.ndarray, times: np.ndarray, seed: int):
        """TGAT: the multi-hop sample of ``(nodes, times)``."""
        return self.sampler.sample_hops(nodes, times, seed=seed)

    def _read(self, n_id_B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.memory.read(n_id_B)

    def _commit(self, nodes, memory_BM, last_B, a: int, b: int) -> None:
        """After a training step: the scored nodes take the memory they were read with, then the
        events ``[a, b)`` become pending."""
        memory = self.model.memory
        memory.store(nodes, memory_BM, last_B)
        memory.observe(self.src_E[a:b], self.dst_E[a:b], self.t_E[a:b], _arange(a, b, self.device))

    def _apply(self, a: int, b: int) -> None:
        """Evaluation: the events ``[a, b)`` reach memory at once."""
        memory = self.model.memory
        nodes = memory.observe(
            self.src_E[a:b], self.dst_E[a:b], self.t_E[a:b], _arange(a, b, self.device)
        )
        memory.apply_pending(nodes)

    def _flush(self) -> None:
        self.model.memory.flush()

    def _all_scores(self, index: np.ndarray, scores_KN: np.ndarray) -> np.ndarray:
        """Every process's scores ``[K, n]`` of a split's events ``index``, in event order (one
        process: its own)."""
        return scores_KN

    def _sync_gradients(self) -> None:
        """Sum the gradients over processes (one process: nothing to do)."""

    # ------------------------------------------------------------------ one batch
    def _embed(
        self, a: int, b: int, time: float, others: list[np.ndarray], seed: int
    ) -> tuple[list[torch.Tensor], tuple | None]:
        """Embeddings of the sources and destinations of events ``[a, b)`` and of every array
        of ``others`` (destinations scored against the sources), at the batch's start ``time``
        (TGAT, JODIE: each pair's own time); and, for memory models, ``(nodes, memory, last
        update)`` read for the events' own nodes (to store after a training step)."""
        ev, dev = self.events, self.device
        src, dst = np.asarray(ev.src[a:b]), np.asarray(ev.dst[a:b])
        z, read = self._embed_nodes([src, dst, *others], time, np.asarray(ev.t[a:b]), seed)
        if read is None:
            return z, None
        seeds, memory_BM, last_B = read
        own = np.unique(np.r_[src, dst])
        own_rows = torch.from_numpy(np.searchsorted(seeds, own)).to(dev)
        return z, (torch.from_numpy(own).to(dev), memory_BM[own_rows], last_B[own_rows])

    def _embed_nodes(
        self, queried: list[np.ndarray], time: float, times_P: np.ndarray, seed: int
    ) -> tuple[list[torch.Tensor], tuple | None]:
        """Embeddings ``[P, D]`` of every array of ``P`` nodes of ``queried``: TGN's from the
        events before ``time``, TGAT's and JODIE's at each row's own time ``times_P``; and, for
        memory models, ``(seeds, memory, last update)``: the distinct nodes queried and what was
        read for them."""
        model, dev = self.model, self.device
        if model.kind == "tgat":
            nodes = np.concatenate(queried)
            times = np.tile(times_P, len(queried))
            with self.timer("sample"):
                hops = self._hops(nodes, times, seed)
                self.sampled_events += sum(hop.num_events for hop in hops)
                hops = [HopTensors.of(hop, dev) for hop in hops]
            with self.timer("compute"):
                z = model.embed_hops(hops, torch.from_numpy(nodes).to(dev))
            return list(torch.split(z, times_P.shape[0])), None
        seeds = np.unique(np.concatenate(queried))
        rows = [torch.from_numpy(np.searchsorted(seeds, q)).to(dev) for q in queried]
        if model.kind == "tgn":
            with self.timer("sample"):
                n_id, edge_index, events = self._neighbourhood(seeds, time)
                self.sampled_events += int(events.size)
            n_id_B = torch.from_numpy(n_id).to(dev)
            with self.timer("memory"):
                memory_BM, last_B = self._read(n_id_B)
            events_E = torch.from_numpy(events).to(dev)
            with self.timer("compute"):
                z_QD = model.embed_recent(
                    memory_BM,
                    last_B,
                    torch.from_numpy(edge_index).to(dev),
                    events_E,
                    self.t_E[events_E],
                    seeds.size,
                )
                z = [z_QD.index_select(0, r) for r in rows]
        else:  # jodie
            n_id_B = torch.from_numpy(seeds).to(dev)
            with self.timer("memory"):
                memory_BM, last_B = self._read(n_id_B)
            t_P = torch.from_numpy(times_P).to(dev)
            with self.timer("compute"):
                z = [
                    model.embed_projected(memory_BM.index_select(0, r), last_B[r], t_P)
                    for r in rows
                ]
        return z, (seeds, memory_BM, last_B)

    def _train_step(self, epoch: int, index: int, lo: int, hi: int) -> StepResult:
        model = self.model
        a, b = self._share(lo, hi)
        before = self.sampled_events
        seed = mix_seed(self.config.seed, epoch, index)
        # the global batch's negatives, whoever scores which share of it
        neg = np.random.default_rng(seed).integers(0, self.events.num_nodes, hi - lo)
        self.optimizer.zero_grad(set_to_none=True)
        # _embed times its own stages (sample, memory, compute): the stages never overlap
        (z_src, z_dst, z_neg), read = self._embed(
            a, b, float(self.events.t[lo]), [neg[a - lo : b - lo]], seed
        )
        with self.timer("compute"):
            pos, negs = model.score(z_src, [z_dst, z_neg])
            # the mean over the global batch: the shares' gradients add up to the batch's
            loss = link_loss(pos, negs[:, None], "bce", 1.0, num_pos=hi - lo, num_neg=hi - lo)
            loss, result = self._task_loss(loss, pos, negs, z_src, (a, b), (lo, hi))
            loss.backward()
        with self.timer("comm"):
            self._sync_gradients()
        with self.timer("compute"):
            self.optimizer.step()
        if model.memory is not None:
            with self.timer("memory"):
                self._commit(*read, a, b)
        return result._replace(sampled_edges=self.sampled_events - before)

    def _task_loss(
        self,
        loss: torch.Tensor,
        pos: torch.Tensor,
        negs: torch.Tensor,
        z_src: torch.Tensor,
        share: tuple[int, int],
        batch: tuple[int, int],
    ) -> tuple[torch.Tensor, StepResult]:
        """The loss to minimise and what the step reports (its ``sampled_edges`` filled in
        later), from the link ``loss`` of this process's ``share`` ``[a, b)`` of the global
        ``batch`` ``[lo, hi)``, its scores and its sources' embeddings ``z_src``: link
        prediction minimises ``loss`` itself."""
        (a, b), (lo, hi) = share, batch
        correct = int((pos > 0).sum()) + int((negs <= 0).sum())
        # the epoch's loss averages per pair: this share's pairs' mean (its loss is their sum
        # over the global batch's count)
        share_mean = loss.item() * (hi - lo) / max(b - a, 1)
        return loss, StepResult(share_mean, correct, 2 * (b - a), 0)

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        self.model.train()
        if run.resumed is None and self.model.memory is not None:
            self.model.memory.reset()
        self._restart_stream()
        step = lambda batch: self._train_step(run.epoch, batch[0], *batch[1])  # noqa: E731
        sums = batch_epoch(run, self.batches, step)
        if sums is None:
            return None
        loss_sum, correct, count = self.sum([sums.loss_sum, sums.correct, sums.count])
        return loss_sum / max(count, 1), correct / max(count, 1)

    def _restart_stream(self) -> None:
        self.sampler.restart_stream()


def _arange(lo: int, hi: int, device: torch.device) -> torch.Tensor:
    return torch.arange(lo, hi, device=device)
