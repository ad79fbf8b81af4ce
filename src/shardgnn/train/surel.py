"""SUREL link prediction in one process (``--task link --model surel``, :mod:`shardgnn.nn.surel`).

The edge split is the other link recipes' (:func:`~shardgnn.graph.linksplit.split_edges`), so
SUREL and GAE or GraphSAGE score the same held-out edges against the same fixed negatives.
Training takes batches of ``--batch-size`` training edges with ``--negatives`` negatives each
(``--negative-sampler``); every query ``(u, v)`` is read from the walks of ``u`` and ``v``.

A training edge is never in the graph its own walks run on: each batch's walks run on the
training graph without the batch's positive edges (both directions on a symmetric graph), so a
positive looks as a held-out edge does at evaluation (evaluation's walks run on the training
graph, which holds no held-out edge). Walks are drawn per node once per batch, shared by every
query of the batch that names the node (SUREL's reuse), from ``mix_seed(seed, epoch, batch)``;
evaluation draws from a fixed seed, so the same weights always give the same metrics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from shardgnn.graph.datasets import canonical_spec, load_dataset
from shardgnn.graph.linksplit import edge_arrays, in_sorted, pair_keys, split_edges
from shardgnn.nn.link import link_loss
from shardgnn.nn.surel import SURELModel, evaluation_walk_seed, query_walks
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.sampling.walks import node_walks
from shardgnn.seeding import mix_seed
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun
from shardgnn.train.linkmetrics import (
    link_dataset_record,
    link_metrics,
    link_record,
    split_spec,
)
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.setup import adam, resolve_device

EVAL_QUERIES = 4096
"""queries scored at a time in evaluation (memory: their walks' positional encodings)"""


class WalkLinkSteps(Steps):
    """What SUREL training does in one process and on workers: the epoch over the training edges
    and the evaluation, over the walks :meth:`draw_walks` returns. Subclasses set ``config``,
    ``device``, ``split`` (pairs in the ids walks start from), ``model``, ``optimizer``,
    ``negatives``, ``timer``, ``num_walks``, ``walk_length``; on workers they also define
    :meth:`share`, :meth:`backward_and_step` and :meth:`metrics`."""

    metric = "auc"

    def _setup_walks(self) -> None:
        self.num_walks, self.walk_length = self.config.link.walk_shape()
        self.walks_drawn = 0
        self.last_metrics: dict[str, dict[str, float]] = {}

    def draw_walks(self, nodes: np.ndarray, seed: int, without: np.ndarray | None) -> np.ndarray:
        """``[len(nodes), M, L + 1]``: the walks of ``nodes`` on the training graph without the
        edges ``without`` (``[2, P]``, and their reverses on a symmetric graph; None: none)."""
        raise NotImplementedError

    def share(self, count: int) -> np.ndarray:
        """The positions this process scores of ``count`` pairs every process steps through."""
        return np.arange(count)

    def backward_and_step(self, loss_share: torch.Tensor) -> None:
        loss_share.backward()
        self.optimizer.step()

    def metrics(self, pos_P: np.ndarray, neg_PK: np.ndarray) -> dict[str, float]:
        """The link metrics of this process's scored share of a split."""
        return link_metrics(pos_P, neg_PK, self.config.link.reported_hits_at())

    def _score(
        self, pos_2P, neg_PK, seed: int, without, positions=None, batch: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of the positives ``pos_2P`` and of their negatives ``(src, neg_PK)``; in
        training, ``positions`` are the positives' places in a batch of ``batch``, which key the
        dropout masks of every query (positive ``i``: ``i``; its ``k``-th negative:
        ``batch + i * K + k``)."""
        p, k = pos_2P.shape[1], neg_PK.shape[1]
        src_Q = np.concatenate([pos_2P[0], np.repeat(pos_2P[0], k)])
        dst_Q = np.concatenate([pos_2P[1], neg_PK.reshape(-1)])

        def draw(nodes: np.ndarray) -> np.ndarray:
            with self.timer("sample"):
                walks = self.draw_walks(nodes, seed, without)
            self.walks_drawn += walks.shape[0] * walks.shape[1]
            return walks

        both = query_walks(src_Q, dst_Q, draw)
        keys_Q = None
        if positions is not None:
            negatives = batch + positions[:, None] * k + np.arange(k)
            keys_Q = torch.from_numpy(np.concatenate([positions, negatives.reshape(-1)]))
        logits_Q = self.model(both.to(self.device), keys_Q, seed)
        return logits_Q[:p], logits_Q[p:].view(p, k)

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        """Every training edge once, in an order drawn from ``mix_seed(seed, epoch)``; each
        process scores its share of a batch and divides its loss by the batch's counts, so the
        shares add up to the batch's loss."""
        config, link = self.config, self.config.link
        pos_2P = self.split.train_pos_2P
        order = np.random.default_rng(mix_seed(config.seed, run.epoch)).permutation(pos_2P.shape[1])
        batch = config.item_batch_size
        loss_sum, correct, pairs = 0.0, 0, 0
        self.model.train()
        for step, start in enumerate(range(0, len(order), batch)):
            batch_2P = pos_2P[:, order[start : start + batch]]
            seed = mix_seed(config.seed, run.epoch, step)
            batch_neg_PK = self.negatives.sample(batch_2P[0], batch_2P[1], seed)
            mine = self.share(batch_2P.shape[1])
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                pos_P, neg_PK = self._score(
                    batch_2P[:, mine], batch_neg_PK[mine], seed, batch_2P, mine, batch_2P.shape[1]
                )
                loss = link_loss(
                    pos_P, neg_PK, link.loss, link.margin, batch_2P.shape[1], batch_neg_PK.size
                )
                self.backward_and_step(loss)
            loss_sum += loss.item() * batch_2P.shape[1]
            correct += int((pos_P > 0).sum()) + int((neg_PK <= 0).sum())
            pairs += pos_P.numel() + neg_PK.numel()
        loss_sum, correct, pairs = self.sum([loss_sum, float(correct), float(pairs)])
        return loss_sum / max(pos_2P.shape[1], 1), correct / max(pairs, 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """AUC, AP, MRR and Hits@K of ``split``'s positives against their fixed negatives, each
        query read from walks on the training graph (drawn from a fixed seed)."""
        self.model.eval()
        mine = self.share(getattr(self.split, f"{split}_pos_2P").shape[1])
        pos_2P = getattr(self.split, f"{split}_pos_2P")[:, mine]
        neg_PK = getattr(self.split, f"{split}_neg_PK")[mine]
        chunk = max(1, EVAL_QUERIES // (1 + neg_PK.shape[1]))
        seed = evaluation_walk_seed(self.config.seed)
        # every process draws walks as many times (a collective on workers): as the largest
        # share needs, the others' last chunks empty
        total = getattr(self.split, f"{split}_pos_2P").shape[1]
        largest = math.ceil(total / self.world_size)
        chunks = math.ceil(largest / chunk)
        scored = [
            self._score(pos_2P[:, a : a + chunk], neg_PK[a : a + chunk], seed, None)
            for a in range(0, chunks * chunk, chunk)
        ]
        pos_P = torch.cat([p for p, _ in scored]).float().cpu().numpy() if scored else np.zeros(0)
        neg = [n for _, n in scored]
        neg_PK_s = torch.cat(neg).float().cpu().numpy() if neg else np.zeros((0, neg_PK.shape[1]))
        metrics = self.metrics(pos_P, neg_PK_s)
        self.last_metrics[split] = metrics
        return metrics["auc"]

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        return {
            "link": link_record(self.split, self.last_metrics),
            "walks": {
                "per_node": self.num_walks,
                "length": self.walk_length,
                "drawn_per_s": self.walks_drawn / sample_time if sample_time > 0 else None,
            },
        }


class SURELSteps(WalkLinkSteps):
    """Single-process SUREL link prediction (``graph``: given, else loaded from the spec)."""

    def __init__(self, config: TrainConfig, graph=None):
        self.config = config
        link = config.link
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        if graph is None:
            graph = load_dataset(config.dataset, config.data_dir)
        self.full_graph = graph
        self.graph, self.split = split_edges(self.full_graph, split_spec(link))
        g = self.graph
        self._setup_walks()
        self.edge_keys = pair_keys(*edge_arrays(g), g.num_nodes)
        torch.manual_seed(config.seed)
        model = config.model
        self.model = SURELModel(self.walk_length, model.hidden, model.dropout, g.num_nodes)
        self.model = self.model.to(self.device)
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.negatives = NegativeSampler(
            link.negative_sampler, g.num_nodes, link.negatives, np.diff(g.indptr)
        )
        self.timer = StageTimer()

    def draw_walks(self, nodes: np.ndarray, seed: int, without: np.ndarray | None) -> np.ndarray:
        g = self.graph
        csr = (g.indptr, g.indices)
        if without is not None:
            csr = csr_without(*csr, self.edge_keys, without, g.num_nodes, self.split.symmetric)
        return node_walks(*csr, nodes, self.num_walks, self.walk_length, seed)

    def dataset_info(self) -> dict[str, Any]:
        return link_dataset_record(self.full_graph, self.spec, self.split)


def csr_without(
    indptr: np.ndarray,
    indices: np.ndarray,
    edge_keys: np.ndarray,
    pos_2P: np.ndarray,
    num_nodes: int,
    symmetric: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """A CSR (the training graph's, or a part's rows of it; ``edge_keys``: ``dst * N + src`` of
    each of its edges, global ids) without the edges ``pos_2P`` (and, on a symmetric graph,
    their reverses): the graph a batch's walks run on."""
    held = pair_keys(pos_2P[0], pos_2P[1], num_nodes)
    if symmetric:
        held = np.concatenate([held, pair_keys(pos_2P[1], pos_2P[0], num_nodes)])
    keep = ~in_sorted(edge_keys, np.sort(held))
    kept = np.concatenate([[0], np.cumsum(keep)])
    return kept[np.asarray(indptr)], np.asarray(indices)[keep]
