"""Link prediction in one process: mini-batch (edge batches through the link pipeline) or
full-graph (GAE: one step per epoch over every training edge).

The dataset's edges are split once (:func:`~shardgnn.graph.linksplit.split_edges`, a pure
function of the graph and ``--link-split-seed``, so a resumed run splits identically); the model
trains on the remaining graph, and evaluation scores the held-out edges against their fixed
negatives with embeddings computed on that same training graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import canonical_spec, load_dataset
from shardgnn.graph.features import normalize_features
from shardgnn.graph.linksplit import LinkSplit, split_edges
from shardgnn.loader.link import IndexedPairs, LinkSample, LinkSamplingStage, edge_batcher
from shardgnn.loader.pipeline import FeatureFetcher, MiniBatch, MiniBatchLoader
from shardgnn.nn.link import LinkModel, build_predictor, link_loss
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import build_model
from shardgnn.precision import precision_context
from shardgnn.sampling.negative import NegativeSampler
from shardgnn.sampling.neighbor import NeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.embedding import EmbeddingTable, input_store
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.timing import StageTimer
from shardgnn.train.config import LinkConfig, TrainConfig, apply_process_settings
from shardgnn.train.epoch import EpochRun
from shardgnn.train.linkmetrics import (
    link_dataset_record,
    link_metrics,
    link_record,
    split_spec,
)
from shardgnn.train.loop import EpochRecord, Steps
from shardgnn.train.minibatch import Outcome, batch_graphs, train_epoch_batches
from shardgnn.train.setup import (
    adam,
    batch_features,
    eval_sampler_config,
    full_edge_rows,
    full_features,
    full_input,
    make_embedding_table,
    model_edge_dim,
    resolve_device,
    step_rows,
)


def check_link_trainable(graph: Graph, embedding: EmbeddingConfig) -> None:
    if graph.x is None and not embedding.enabled:
        raise ConfigError(
            f"dataset {graph.name!r} has no node features: give every node a learnable row "
            "with --embedding-dim (e.g. 64), or features with `shardgnn convert`"
        )


def split_for_partitioning(graph: Graph, link: LinkConfig) -> tuple[Graph, LinkSplit, dict]:
    """What a link-prediction partition directory is written from: the training graph (the
    held-out edges leave the graph *before* it is partitioned, so workers never see them), the
    split itself (stored with the partitions: every worker and every resumed run reads the same
    one), and the whole graph's fingerprint (the dataset checkpoints and inference name)."""
    from shardgnn.graph.identity import fingerprint

    train_graph, split = split_edges(graph, split_spec(link))
    return train_graph, split, fingerprint(graph)


def link_objective(config: LinkConfig):
    """The training objective of a :class:`LinkSample` batch (``minibatch_step``'s
    ``objective``): the link loss, and how many pairs lie on the right side of 0 (positives
    above, negatives below)."""

    def objective(module, graphs, batch: MiniBatch, device) -> Outcome:
        h_ND = module(graphs, batch.x_SF.to(device))
        sample = batch.sample
        assert isinstance(sample, LinkSample)
        model = getattr(module, "module", module)  # a DDP wrapper holds the LinkModel
        pos_P, neg_PK = model.score_batch(
            h_ND,
            sample.pos_src_P.to(device),
            sample.pos_dst_P.to(device),
            sample.neg_dst_PK.to(device),
        )
        loss = link_loss(pos_P, neg_PK, config.loss, config.margin)
        correct = int((pos_P > 0).sum()) + int((neg_PK <= 0).sum())
        return Outcome(loss, correct, pos_P.numel() + neg_PK.numel())

    return objective


def build_link_model(
    config: TrainConfig,
    num_features: int,
    embedding: EmbeddingTable | None = None,
    edge_dim: int = 0,
) -> LinkModel:
    """The encoder (input: the features, then ``--embedding-dim`` learnable columns; the edge
    rows of width ``edge_dim`` when it reads them, :func:`~shardgnn.train.setup.model_edge_dim`),
    the predictor, and the learnable rows when given."""
    in_dim = num_features + config.embedding.dim
    encoder = build_model(config.model, in_dim, config.link.out_dim, edge_dim)
    predictor = build_predictor(config.link.predictor, config.link.out_dim, config.model.hidden)
    return LinkModel(encoder, predictor, embedding)


SCORE_CHUNK_VALUES = 1 << 22
"""Embedding values per operand of one :func:`score_pairs` chunk (16 MB of float32)."""


@torch.no_grad()
def score_pairs(
    model: LinkModel, h_ND: torch.Tensor, pairs: IndexedPairs, chunk_values: int | None = None
):
    """``(pos [P], neg [P, K])`` scores as numpy arrays, computed a chunk of positives at a time:
    a chunk gathers ``1 + K`` rows of width ``D`` per positive, so it takes as many positives as
    keep that within ``chunk_values`` (default :data:`SCORE_CHUNK_VALUES`). (A fixed 65,536
    positives with K = 100 and D = 64 made three 1.7 GB operands.) Each pair's score is computed
    on its own, so the chunking does not change it."""
    num, k = pairs.neg_PK.shape
    width = h_ND.shape[1] if h_ND.dim() > 1 else 1
    values = SCORE_CHUNK_VALUES if chunk_values is None else chunk_values
    chunk = max(1, values // ((1 + k) * max(width, 1)))
    pos, neg = None, None
    for start in range(0, num, chunk):
        sl = slice(start, start + chunk)
        p, n = model.score_batch(h_ND, pairs.src_P[sl], pairs.dst_P[sl], pairs.neg_PK[sl])
        p, n = p.cpu().numpy(), n.cpu().numpy()
        if pos is None:  # the predictor's dtype, as a concatenation of the chunks has
            pos, neg = np.empty(num, dtype=p.dtype), np.empty((num, k), dtype=n.dtype)
        pos[sl], neg[sl] = p, n
    if pos is None:
        return np.zeros(0), np.zeros((0, k))
    return pos, neg


class LinkLocalSteps(Steps):
    """Single-process link prediction (``graph``: given, else loaded from the spec)."""

    metric = "auc"

    def __init__(self, config: TrainConfig, graph: Graph | None = None):
        self.config = config
        link = config.link
        apply_process_settings(config)
        self.device = resolve_device(config.device)
        self.spec = canonical_spec(config.dataset) if graph is None else None
        full = graph if graph is not None else load_dataset(config.dataset, config.data_dir)
        check_link_trainable(full, config.embedding)
        self.full_graph = full
        self.graph, self.split = split_edges(full, split_spec(link))
        g = self.graph
        torch.manual_seed(config.seed)
        x = None if g.x is None else normalize_features(g.x, config.feature_norm)
        self.embedding = make_embedding_table(config, g.num_nodes)
        edge_dim = model_edge_dim(config, g.edge_dim, f"dataset {g.name!r}")
        self.model = build_link_model(config, g.num_features, self.embedding, edge_dim)
        self.model.to(self.device)
        self.optimizer = adam(self.model.parameters(), config.optim)
        self.model.use_hashed_dropout(config.seed)
        self.timer = StageTimer()
        self.sampled_edges = 0
        degree = np.diff(g.indptr)
        self.negatives = NegativeSampler(link.negative_sampler, g.num_nodes, link.negatives, degree)
        self.eval_pairs = {
            "val": IndexedPairs.of(self.split.val_pos_2P, self.split.val_neg_PK),
            "test": IndexedPairs.of(self.split.test_pos_2P, self.split.test_neg_PK),
        }
        self.last_metrics: dict[str, dict[str, float]] = {}
        if config.mode == "full":
            self.message_graph = MessageGraph.from_csr(g.indptr, g.indices, self.device)
            if edge_dim:  # the training graph's edge rows, in its CSR order
                self.message_graph.edge_attr_ED = full_edge_rows(g, self.device)
            self.features_full = full_features(x, self.device)
            return
        # mostly-zero features' batches gathered sparse, as node classification's are
        self.features = input_store(batch_features(x, config, self.device), self.embedding)
        # the training graph's edge features by edge id (what its blocks name), when read
        self.edge_rows = LocalFeatureStore(g.edge_attr) if edge_dim else None
        sampler = NeighborSampler(g.indptr, g.indices, config.sampler)
        self.batches = edge_batcher(
            self.split.train_pos_2P.shape[1], config.item_batch_size, shuffle=True, seed=config.seed
        )
        self.train_stages = FeatureFetcher(
            LinkSamplingStage(
                self.batches,
                self.split.train_pos_2P,
                sampler,
                self.negatives,
                num_nodes=g.num_nodes,
                symmetric=self.split.symmetric,
                seed=config.seed,
                timer=self.timer,
            ),
            self.features,
            None,
            self.timer,
            edge_rows=self.edge_rows,
        )
        self.eval_sampler = NeighborSampler(g.indptr, g.indices, eval_sampler_config(config))

    # ------------------------------------------------------------------ training
    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        if self.config.mode == "full":
            return self._train_epoch_full(run.epoch)
        trained = train_epoch_batches(
            run,
            self.batches,
            self.train_stages,
            self.model,
            self.optimizer,
            device=self.device,
            timer=self.timer,
            objective=link_objective(self.config.link),
            embedding=self.embedding,
            precision=self.config.precision,
        )
        if trained is None:
            return None
        sums, new_edges = trained
        self.sampled_edges += new_edges
        return sums.loss_sum / max(sums.count, 1), sums.correct / max(sums.count, 1)

    def _train_epoch_full(self, epoch: int) -> tuple[float, float]:
        """GAE: embeddings of the whole training graph, every training edge once, fresh
        negatives every epoch (``mix_seed(seed, epoch)``)."""
        self.model.train()
        link, pos_2P = self.config.link, self.split.train_pos_2P
        with self.timer("compute"):
            neg_PK = self.negatives.sample(pos_2P[0], pos_2P[1], mix_seed(self.config.seed, epoch))
            self.optimizer.zero_grad(set_to_none=True)
            x_NF = full_input(self.features_full, self.embedding, requires_grad=True)
            with precision_context(self.config.precision, self.device):
                h_ND = self.model([self.message_graph] * self.model.num_layers, x_NF)
                pos, neg = self.model.score_batch(
                    h_ND,
                    torch.from_numpy(pos_2P[0]).to(self.device),
                    torch.from_numpy(pos_2P[1]).to(self.device),
                    torch.from_numpy(neg_PK).to(self.device),
                )
                loss = link_loss(pos, neg, link.loss, link.margin)
            loss.backward()
            self.optimizer.step()
        step_rows(self.embedding, x_NF, self.timer)
        correct = int((pos > 0).sum()) + int((neg <= 0).sum())
        return loss.item(), correct / max(pos.numel() + neg.numel(), 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def embed(self, nodes: np.ndarray) -> torch.Tensor:
        """Embeddings ``[len(nodes), D]`` (fp32) of ``nodes`` (sorted global ids) in eval mode."""
        with precision_context(self.config.precision, self.device):
            return self._embed(nodes).float()

    def _embed(self, nodes: np.ndarray) -> torch.Tensor:
        self.model.eval()
        if self.config.mode == "full":
            x_NF = full_input(self.features_full, self.embedding)
            h_ND = self.model([self.message_graph] * self.model.num_layers, x_NF)
            return h_ND[torch.from_numpy(nodes).to(self.device)]
        loader = MiniBatchLoader(
            nodes,
            self.eval_sampler,
            self.features,
            None,
            batch_size=self.config.eval_batch_size,
            shuffle=False,
            seed=self.config.seed + 1,
            timer=StageTimer(),
            edge_rows=self.edge_rows,
        )
        loader.set_epoch(0)  # evaluation samples the same neighbourhoods every time
        parts = [
            self.model(batch_graphs(batch, self.device), batch.x_SF.to(self.device))
            for batch in loader
        ]
        return torch.cat(parts) if parts else torch.zeros(0, self.config.link.out_dim)

    @torch.no_grad()
    def evaluate(self, split: str) -> float:
        pairs = self.eval_pairs[split]
        pos, neg = score_pairs(self.model, self.embed(pairs.nodes), pairs)
        metrics = link_metrics(pos, neg, self.config.link.reported_hits_at())
        self.last_metrics[split] = metrics
        return metrics["auc"]

    def dataset_info(self) -> dict[str, Any]:
        return link_dataset_record(self.full_graph, self.spec, self.split)

    def results_extra(self, history: list[EpochRecord]) -> dict[str, Any]:
        extra: dict[str, Any] = {"link": link_record(self.split, self.last_metrics)}
        if self.config.mode == "minibatch":
            sample_time = sum(r.stages.get("sample", 0.0) for r in history)
            extra["sampled_edges_per_s"] = (
                self.sampled_edges / sample_time if sample_time > 0 else None
            )
        return extra
