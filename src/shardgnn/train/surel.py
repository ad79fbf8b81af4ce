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

from typing import Any

import numpy as np
import torch

from shardgnn.graph.datasets import canonical_spec, load_dataset
from shardgnn.graph.linksplit import edge_arrays, in_sorted, pair_keys, split_edges
from shardgnn.nn.link import link_loss
from shardgnn.nn.surel import SURELModel
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
from shardgnn.train.settings import SUREL_WALK_LENGTH, SUREL_WALKS
from shardgnn.train.setup import adam, resolve_device

EVAL_QUERIES = 4096
"""queries scored at a time in evaluation (memory: their walks' positional encodings)"""


class SURELSteps(Steps):
    """Single-process SUREL link prediction (``graph``: given, else loaded from the spec)."""

    metric = "auc"

    def __init__(self, config: TrainConfig, graph=None):
        self.config = config
        link = config.link
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        self.full_graph = (
            graph if graph is not None else load_dataset(config.dataset, config.data_dir)
        )
        self.graph, self.split = split_edges(self.full_graph, split_spec(link))
        g = self.graph
        self.num_walks = link.walks or SUREL_WALKS
        self.walk_length = link.walk_length or SUREL_WALK_LENGTH
        src, dst = edge_arrays(g)
        self.edge_src, self.edge_dst = src, dst
        self.edge_keys = pair_keys(src, dst, g.num_nodes)
        torch.manual_seed(config.seed)
        model = config.model
        self.model = SURELModel(self.walk_length, model.hidden, model.dropout, g.num_nodes)
        self.model = self.model.to(self.device)
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.negatives = NegativeSampler(
            link.negative_sampler, g.num_nodes, link.negatives, np.diff(g.indptr)
        )
        self.timer = StageTimer()
        self.walks_drawn = 0
        self.last_metrics: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------ walks
    def _graph_without(self, pos_2P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The training graph's CSR without the edges ``pos_2P`` (and their reverses on a
        symmetric graph)."""
        n = self.graph.num_nodes
        held = pair_keys(pos_2P[0], pos_2P[1], n)
        if self.split.symmetric:
            held = np.concatenate([held, pair_keys(pos_2P[1], pos_2P[0], n)])
        keep = ~in_sorted(self.edge_keys, np.sort(held))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.edge_dst[keep], minlength=n), out=indptr[1:])
        return indptr, self.edge_src[keep]

    def _walks(self, csr, src_Q: np.ndarray, dst_Q: np.ndarray, seed: int) -> torch.Tensor:
        """``[Q, 2, M, L + 1]``: the walks of every query's two endpoints, each node's drawn
        once."""
        nodes, inverse = np.unique(np.concatenate([src_Q, dst_Q]), return_inverse=True)
        with self.timer("sample"):
            walks = node_walks(*csr, nodes, self.num_walks, self.walk_length, seed)
        self.walks_drawn += walks.shape[0] * walks.shape[1]
        q = len(src_Q)
        both = torch.from_numpy(walks[inverse.reshape(2, q)]).transpose(0, 1)
        return both.contiguous().to(self.device)

    def _score(self, csr, src_Q: np.ndarray, dst_Q: np.ndarray, seed: int) -> torch.Tensor:
        return self.model(self._walks(csr, src_Q, dst_Q, seed))

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float]:
        """Every training edge once, in an order drawn from ``mix_seed(seed, epoch)``."""
        config, link = self.config, self.config.link
        pos_2P = self.split.train_pos_2P
        order = np.random.default_rng(mix_seed(config.seed, run.epoch)).permutation(pos_2P.shape[1])
        batch = config.item_batch_size
        loss_sum, correct, pairs = 0.0, 0, 0
        self.model.train()
        for step, start in enumerate(range(0, len(order), batch)):
            pos = pos_2P[:, order[start : start + batch]]
            seed = mix_seed(config.seed, run.epoch, step)
            neg_PK = self.negatives.sample(pos[0], pos[1], seed)
            k = neg_PK.shape[1]
            src_Q = np.concatenate([pos[0], np.repeat(pos[0], k)])
            dst_Q = np.concatenate([pos[1], neg_PK.reshape(-1)])
            csr = self._graph_without(pos)
            with self.timer("compute"):
                self.optimizer.zero_grad(set_to_none=True)
                logits_Q = self._score(csr, src_Q, dst_Q, seed)
                pos_P, neg_PK_t = logits_Q[: pos.shape[1]], logits_Q[pos.shape[1] :].view(-1, k)
                loss = link_loss(pos_P, neg_PK_t, link.loss, link.margin)
                loss.backward()
                self.optimizer.step()
            loss_sum += loss.item() * pos.shape[1]
            correct += int((pos_P > 0).sum()) + int((neg_PK_t <= 0).sum())
            pairs += logits_Q.numel()
        return loss_sum / max(pos_2P.shape[1], 1), correct / max(pairs, 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        """AUC, AP, MRR and Hits@K of ``split``'s positives against their fixed negatives, each
        query read from walks on the training graph."""
        self.model.eval()
        pos_2P = getattr(self.split, f"{split}_pos_2P")
        neg_PK = getattr(self.split, f"{split}_neg_PK")
        k = neg_PK.shape[1]
        src_Q = np.concatenate([pos_2P[0], np.repeat(pos_2P[0], k)])
        dst_Q = np.concatenate([pos_2P[1], neg_PK.reshape(-1)])
        csr = (self.graph.indptr, self.graph.indices)
        seed = mix_seed(self.config.seed + 1, 0)
        scores = [
            self._score(csr, src_Q[a : a + EVAL_QUERIES], dst_Q[a : a + EVAL_QUERIES], seed)
            for a in range(0, len(src_Q), EVAL_QUERIES)
        ]
        scores_Q = torch.cat(scores).float().cpu().numpy()
        p = pos_2P.shape[1]
        metrics = link_metrics(scores_Q[:p], scores_Q[p:].reshape(p, k), self.config.link.hits_at)
        self.last_metrics[split] = metrics
        return metrics["auc"]

    # ------------------------------------------------------------------ results
    def dataset_info(self) -> dict[str, Any]:
        return link_dataset_record(self.full_graph, self.spec, self.split)

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
