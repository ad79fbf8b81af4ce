"""Temporal link prediction (TGN, JODIE, TGAT) on a stream of timestamped events, one process.

The events are split chronologically (:meth:`TemporalGraph.split_points`). An epoch streams the
training events in time order in batches (:class:`~shardgnn.loader.temporal.EventBatches`):
each batch is scored against uniform random negatives (BCE loss), and only then do its events
reach node memory, so no prediction sees its own or later events. Neighbourhoods are sampled
strictly before the batch's first event time (``recent_subgraph``, TGN) or before each pair's
own time (TGAT), so nothing of the batch leaks through them either.

Evaluation continues the stream: from the memory at the end of training, the validation events
(and for the test split, validation then test events) are scored batch by batch, then applied.
Each positive ``(u, v, t)`` is scored against fixed negatives drawn once (``--link-split-seed``):

* ``random``: a uniform node ``(u, w)`` (AP, AUC; ``ap_batch_mean``: the mean of per-batch APs,
  the figure PyG's TGN example prints);
* ``historical``: a node ``u`` sent to in the training events, other than ``v``, when it has one
  (Poursafaei et al.'s harder negatives: they test memorising past partners);
* ``new_nodes``: the random metrics over events with an endpoint that never occurs in training
  (inductive evaluation).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from shardgnn.graph.datasets import canonical_spec, load_temporal_dataset
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.loader.temporal import EventBatches
from shardgnn.nn.link import link_loss
from shardgnn.nn.temporal import HopTensors, TemporalLinkModel
from shardgnn.sampling.temporal import TemporalNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun, batch_epoch
from shardgnn.train.linkmetrics import auc, average_precision
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import resolve_device

EVAL_STREAM = 0x45564E47  # the fixed evaluation negatives: mix_seed(split_seed, EVAL_STREAM)


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
    chosen = partner[np.minimum(start[s] + pick, max(partner.size - 1, 0))] if partner.size else d
    # the positive itself is no negative: take the next past partner instead
    clash = (count > 1) & (chosen == d)
    chosen[clash] = partner[start[s[clash]] + (pick[clash] + 1) % count[clash]]
    none = (count == 0) | ((count == 1) & (chosen == d))
    chosen[none] = rng.integers(0, num_nodes, int(none.sum()))
    return np.concatenate([np.full(train_end, -1, dtype=np.int64), chosen.astype(np.int64)])


def events_sha256(graph: TemporalGraph) -> str:
    """SHA-256 of the events (sources, destinations, times): a checkpoint's graph identity."""
    digest = hashlib.sha256()
    for array, dtype in ((graph.src, "<i8"), (graph.dst, "<i8"), (graph.t, "<f8")):
        digest.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return digest.hexdigest()


def stream_metrics(pos, neg, neg_hist, new, batch_ap) -> dict[str, float]:
    """The evaluation metrics of one split (see the module docstring)."""
    metrics = {
        "ap": average_precision(pos, neg),
        "auc": auc(pos, neg),
        "ap_batch_mean": float(np.mean(batch_ap)) if batch_ap else float("nan"),
        "ap_historical": average_precision(pos, neg_hist),
        "auc_historical": auc(pos, neg_hist),
        "ap_new_nodes": average_precision(pos[new], neg[new]),
        "auc_new_nodes": auc(pos[new], neg[new]),
        "new_node_events": int(new.sum()),
    }
    return metrics


class TemporalLinkSteps(Steps):
    """One process's temporal link prediction (``graph``: given, else loaded from the spec)."""

    metric = "ap"

    def __init__(self, config: TrainConfig, graph: TemporalGraph | None = None):
        self.config = config
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        g = graph if graph is not None else load_temporal_dataset(config.dataset, config.data_dir)
        self.graph = g
        self.val_start, self.test_start = g.split_points(config.link.val, config.link.test)
        if self.val_start == 0 or self.test_start == self.val_start:
            raise ValueError(
                f"temporal graph {g.name!r}: the split --link-val {config.link.val} --link-test "
                f"{config.link.test} leaves an empty training or validation span "
                f"({self.val_start} / {self.test_start - self.val_start} events); give more "
                "events or other fractions"
            )
        dev = self.device
        self.src_E = torch.from_numpy(g.src).to(dev)
        self.dst_E = torch.from_numpy(g.dst).to(dev)
        self.t_E = torch.from_numpy(g.t).to(dev)
        feat = g.edge_feat if g.edge_feat is not None else np.zeros((g.num_events, 0), np.float32)
        self.event_feat_EF = torch.from_numpy(np.ascontiguousarray(feat)).to(dev)
        kind, temporal = config.model.model, config.temporal
        torch.manual_seed(config.seed)
        self.model = TemporalLinkModel(
            kind,
            g.num_nodes,
            self.event_feat_EF,
            memory_dim=temporal.memory_dim,
            time_dim=temporal.time_dim,
            embedding_dim=config.link.out_dim,
            heads=config.model.heads,
            dropout=config.model.dropout,
            layers=len(temporal.neighbors),
            time_scale=self._mean_gap(),
            node_rows=config.embedding.dim if config.embedding.enabled else 0,
        ).to(dev)
        # fused: one kernel over all ~20 small weights (the per-tensor loop was 10% of a step)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=config.optim.lr,
            weight_decay=config.optim.weight_decay,
            fused=True,
        )
        self.sampler = TemporalNeighborSampler(
            g, list(temporal.neighbors), config.temporal_sampling
        )
        self.batches = EventBatches(
            0, self.val_start, config.batch_size, temporal.chunks, seed=config.seed
        )
        self.timer = StageTimer()
        rng = np.random.default_rng(mix_seed(config.link.split_seed, EVAL_STREAM))
        self.eval_neg = rng.integers(0, g.num_nodes, g.num_events).astype(np.int64)
        self.eval_neg_hist = historical_negatives(g.src, g.dst, self.val_start, g.num_nodes, rng)
        seen = np.zeros(g.num_nodes, dtype=bool)
        seen[g.src[: self.val_start]] = True
        seen[g.dst[: self.val_start]] = True
        self.new_event = ~seen[g.src] | ~seen[g.dst]
        self.last_metrics: dict[str, dict[str, float]] = {}
        self.sampled_events = 0

    def _mean_gap(self) -> float:
        """JODIE's time scale: the mean time between a node's consecutive training events."""
        g = self.graph
        span = float(g.t[max(self.val_start - 1, 0)] - g.t[0])
        active = max(np.unique(np.r_[g.src[: self.val_start], g.dst[: self.val_start]]).size, 1)
        return max(span * active / max(2 * self.val_start, 1), 1e-9)

    # ------------------------------------------------------------------ one batch
    def _embed(
        self, lo: int, hi: int, others: list[np.ndarray], seed: int
    ) -> tuple[list[torch.Tensor], tuple | None]:
        """Embeddings of the batch's sources, destinations and every array of ``others``
        (destinations scored against the sources), at the batch's time; and, for memory models,
        ``(nodes, memory, last update)`` read for the batch's own nodes (to store after a
        training step)."""
        g, model, dev = self.graph, self.model, self.device
        src, dst = g.src[lo:hi], g.dst[lo:hi]
        queried = [src, dst, *others]
        if model.kind == "tgat":
            nodes = np.concatenate(queried)
            times = np.tile(g.t[lo:hi], len(queried))
            with self.timer("sample"):
                hops = self.sampler.sample(nodes, times, seed=seed)
                self.sampled_events += sum(hop.num_events for hop in hops)
                hops = [HopTensors.of(hop, dev) for hop in hops]
            z = model.embed_hops(hops, torch.from_numpy(nodes).to(dev))
            return list(torch.split(z, hi - lo)), None
        seeds = np.unique(np.concatenate(queried))
        if model.kind == "tgn":
            with self.timer("sample"):
                n_id, edge_index, events = self.sampler.recent_subgraph(
                    seeds, np.full(seeds.size, g.t[lo])
                )
                self.sampled_events += int(events.size)
            n_id_B = torch.from_numpy(n_id).to(dev)
            memory_BM, last_B = model.memory.read(n_id_B)
            events_E = torch.from_numpy(events).to(dev)
            z_QD = model.embed_recent(
                memory_BM,
                last_B,
                torch.from_numpy(edge_index).to(dev),
                events_E,
                self.t_E[events_E],
                seeds.size,
            )
            rows = [torch.from_numpy(np.searchsorted(seeds, q)).to(dev) for q in queried]
            z = [z_QD.index_select(0, r) for r in rows]
        else:  # jodie
            n_id_B = torch.from_numpy(seeds).to(dev)
            memory_BM, last_B = model.memory.read(n_id_B)
            t_P = self.t_E[lo:hi]
            rows = [torch.from_numpy(np.searchsorted(seeds, q)).to(dev) for q in queried]
            z = [model.embed_projected(memory_BM.index_select(0, r), last_B[r], t_P) for r in rows]
        own = torch.from_numpy(np.unique(np.r_[src, dst])).to(dev)
        own_rows = torch.from_numpy(np.searchsorted(seeds, own.cpu().numpy())).to(dev)
        return z, (own, memory_BM[own_rows], last_B[own_rows])

    def _train_step(self, epoch: int, index: int, lo: int, hi: int) -> tuple[float, int, int, int]:
        g, model = self.graph, self.model
        before = self.sampled_events
        rng = np.random.default_rng(mix_seed(self.config.seed, epoch, index))
        neg = rng.integers(0, g.num_nodes, hi - lo).astype(np.int64)
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            (z_src, z_dst, z_neg), read = self._embed(
                lo, hi, [neg], mix_seed(self.config.seed, epoch, index)
            )
            pos, negs = model.score(z_src, [z_dst, z_neg])
            loss = link_loss(pos, negs[:, None], "bce", 1.0)
            loss.backward()
            self.optimizer.step()
        if model.memory is not None:
            with self.timer("memory"):
                model.memory.store(*read)  # the batch's nodes take their messages read above
                model.memory.observe(
                    self.src_E[lo:hi],
                    self.dst_E[lo:hi],
                    self.t_E[lo:hi],
                    _arange(lo, hi, self.device),
                )
        correct = int((pos > 0).sum()) + int((negs <= 0).sum())
        return loss.item(), correct, 2 * (hi - lo), self.sampled_events - before

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        self.model.train()
        if run.resumed is None and self.model.memory is not None:
            self.model.memory.reset()
        self.sampler.restart_stream()
        sums = batch_epoch(run, self.batches, lambda i, span: self._train_step(run.epoch, i, *span))
        if sums is None:
            return None
        return sums.loss_sum / max(sums.count, 1), sums.correct / max(sums.count, 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _stream(self, first: int, last: int, score: bool):
        """Score (when ``score``) and then apply the events ``[first, last)`` batch by batch;
        returns the positive, random-negative and historical-negative scores and per-batch APs."""
        pos, neg, hist, batch_ap = [], [], [], []
        batches = EventBatches(first, last, self.config.batch_size)
        memory = self.model.memory
        for index, (lo, hi) in batches:
            if score:
                z_src, z_dst, z_neg, z_hist = self._embed(
                    lo, hi, [self.eval_neg[lo:hi], self.eval_neg_hist[lo:hi]],
                    mix_seed(self.config.seed, EVAL_STREAM, first, index),
                )[0]  # fmt: skip
                p, n, h = self.model.score(z_src, [z_dst, z_neg, z_hist]).cpu().numpy()
                pos.append(p)
                neg.append(n)
                hist.append(h)
                batch_ap.append(average_precision(p, n))
            if memory is not None:
                nodes = memory.observe(
                    self.src_E[lo:hi],
                    self.dst_E[lo:hi],
                    self.t_E[lo:hi],
                    _arange(lo, hi, self.device),
                )
                memory.apply_pending(nodes)
        return pos, neg, hist, batch_ap

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """Continue the stream from the end of training over the validation events (and for
        ``test``, then the test events), from a copy of memory: the model's state is unchanged."""
        model = self.model
        model.eval()
        memory = model.memory
        snapshot = memory.snapshot() if memory is not None else None
        if memory is not None:
            memory.flush()
        self.sampler.restart_stream()
        try:
            if split == "test":
                self._stream(self.val_start, self.test_start, score=False)
                first, last = self.test_start, self.graph.num_events
            else:
                first, last = self.val_start, self.test_start
            pos, neg, hist, batch_ap = self._stream(first, last, score=True)
        finally:
            if memory is not None:
                memory.restore(snapshot)
        cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0)  # noqa: E731
        metrics = stream_metrics(
            cat(pos), cat(neg), cat(hist), self.new_event[first:last], batch_ap
        )
        self.last_metrics[split] = metrics
        return metrics["ap"]

    # ------------------------------------------------------------------ records
    def dataset_info(self) -> dict[str, Any]:
        g = self.graph
        return {
            "spec": self.spec,
            "name": g.name,
            "num_nodes": g.num_nodes,
            "num_events": g.num_events,
            "num_edges": g.num_events,  # an event is a (timestamped) edge
            "edge_features": int(self.event_feat_EF.shape[1]),
            "train": self.val_start,
            "val": self.test_start - self.val_start,
            "test": g.num_events - self.test_start,
            "events_sha256": events_sha256(g),
        }

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        g = self.graph
        return {
            "link": {
                "edges": f"{self.val_start} / {self.test_start - self.val_start} / "
                f"{g.num_events - self.test_start} events",
                "val": self.last_metrics.get("val", {}),
                "test": self.last_metrics.get("test", {}),
            },
            "sampled_edges_per_s": self.sampled_events / sample_time if sample_time > 0 else None,
        }


def _arange(lo: int, hi: int, device: torch.device) -> torch.Tensor:
    return torch.arange(lo, hi, device=device)
