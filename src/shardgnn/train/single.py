"""Single-process training: the reference every distributed result is checked against.

``run_training(config)`` loads the dataset, trains in ``full`` or ``minibatch`` mode, selects the
epoch with the best validation accuracy and reports test accuracy at that epoch.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from shardgnn.distributed.comm import Communicator
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.inference import LayerwiseInference, layerwise_accuracies
from shardgnn.fullgraph.shard import shard_from_graph
from shardgnn.graph.csr import Graph
from shardgnn.graph.datasets import load_dataset
from shardgnn.loader.pipeline import MiniBatchLoader
from shardgnn.nn.functional import to_sparse_if_sparse
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import GNN, build_model
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig
from shardgnn.store.feature import LocalFeatureStore
from shardgnn.timing import StageTimer
from shardgnn.train.config import TrainConfig
from shardgnn.train.progress import progress


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available; use --device cpu")
    return device


def normalize_features(x: np.ndarray, how: str) -> np.ndarray:
    """``row``: rows sum to one (Planetoid practice); ``standard``: per-column z-score."""
    if how == "none":
        return x
    x = np.asarray(x, dtype=np.float32)
    if how == "row":
        sums = x.sum(axis=1, keepdims=True)
        return x / np.where(sums == 0, 1.0, sums).astype(np.float32)
    mean, std = x.mean(axis=0, keepdims=True), x.std(axis=0, keepdims=True)
    return (x - mean) / np.where(std == 0, 1.0, std).astype(np.float32)


def check_trainable(graph: Graph) -> None:
    """Refuse graphs that cannot be trained on, with the reason and the fix."""
    problems = []
    if graph.x is None:
        problems.append("it has no node features")
    if graph.y is None or graph.num_classes < 1:
        problems.append("it has no labels")
    for key in ("train_idx", "val_idx", "test_idx"):
        idx = getattr(graph, key)
        if idx is None or len(idx) == 0:
            problems.append(f"its {key.replace('_idx', '')} split is empty")
        elif graph.y is not None and np.any(graph.y[idx] < 0):
            problems.append(f"its {key.replace('_idx', '')} split holds unlabelled nodes")
    if problems:
        raise ConfigError(f"dataset {graph.name!r} cannot be used for node classification: "
                          + "; ".join(problems) + ". Use a labelled dataset such as cora or synthetic.")


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(-1) == y).float().mean()) if y.numel() else float("nan")


@dataclasses.dataclass
class EpochRecord:
    epoch: int
    loss: float
    train_acc: float
    val_acc: float
    time_s: float
    stages: dict[str, float]
    cache: dict[str, float | None] | None = None
    """distributed mini-batch: feature-fetch metrics of the epoch, summed over ranks (hit rate,
    requested / missed / remote MB)"""


class Trainer:
    """Holds the model, optimiser and data of one run; ``fit()`` trains and returns results."""

    def __init__(self, config: TrainConfig, graph: Graph | None = None):
        self.config = config
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.device = resolve_device(config.device)
        self.graph = graph if graph is not None else load_dataset(config.dataset, config.data_dir)
        check_trainable(self.graph)
        torch.manual_seed(config.seed)
        g = self.graph
        self.x = normalize_features(g.x, config.feature_norm)
        self.y = torch.from_numpy(np.asarray(g.y, dtype=np.int64))
        self.model: GNN = build_model(config.model, g.num_features, g.num_classes).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.optim.lr,
                                          weight_decay=config.optim.weight_decay)
        self.timer = StageTimer()
        self.sampled_edges = 0
        # Dropout keyed by (step, layer, node id, column): a parallel kernel, and a distributed
        # full-graph run with the same seed drops exactly the same entries (train/fullgraph.py).
        self.model.use_hashed_dropout(config.seed)
        if config.mode == "full":
            self.full_graph = MessageGraph.from_csr(g.indptr, g.indices, self.device)
            x_full = torch.from_numpy(np.ascontiguousarray(self.x, dtype=np.float32))
            # Bag-of-words features are often <1% dense: keep them sparse (same maths, far cheaper).
            self.x_full = to_sparse_if_sparse(x_full).to(self.device)
        else:
            features = LocalFeatureStore(self.x)
            labels = LocalFeatureStore(self.y)
            sampler = NeighborSampler(g.indptr, g.indices, config.sampler)
            self.train_loader = MiniBatchLoader(g.train_idx, sampler, features, labels, batch_size=config.batch_size,
                                                shuffle=True, seed=config.seed, timer=self.timer)
            eval_sampler = NeighborSampler(g.indptr, g.indices, SamplerConfig(
                fanouts=config.eval_fanouts or config.sampler.fanouts, replace=config.sampler.replace,
                num_threads=config.sampler.num_threads))
            # Full-neighbourhood evaluation runs layer-wise (every layer once per node).
            self.layerwise = None
            if config.layerwise_eval:
                shard = shard_from_graph(g)
                shard.x = self.x
                self.layerwise = LayerwiseInference(shard, 0, Communicator(0, 1, None), device=self.device)
            self.eval_loaders = {
                split: MiniBatchLoader(getattr(g, f"{split}_idx"), eval_sampler, features, labels,
                                       batch_size=config.eval_batch_size, shuffle=False,
                                       seed=config.seed + 1, timer=StageTimer())
                for split in ("val", "test")
            }

    # ------------------------------------------------------------------ one epoch
    def _train_epoch_full(self, epoch: int) -> tuple[float, float]:
        self.model.train()
        train_idx = torch.from_numpy(self.graph.train_idx).to(self.device)
        with self.timer("compute"):
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model([self.full_graph] * self.model.num_layers, self.x_full)
            loss = F.cross_entropy(logits[train_idx], self.y[train_idx].to(self.device))
            loss.backward()
            self.optimizer.step()
        return loss.item(), accuracy(logits[train_idx].detach(), self.y[train_idx].to(self.device))

    def _train_epoch_minibatch(self, epoch: int) -> tuple[float, float]:
        self.model.train()
        self.train_loader.set_epoch(epoch)
        total_loss, correct, count = 0.0, 0, 0
        bar = progress(self.train_loader, f"epoch {epoch}", self.config.progress)
        for batch in bar:
            with self.timer("compute"):
                graphs = [MessageGraph.from_block(b, self.device) for b in batch.sample.blocks]
                y = batch.y.to(self.device)
                self.optimizer.zero_grad(set_to_none=True)
                logits = self.model(graphs, batch.x_SF.to(self.device))
                loss = F.cross_entropy(logits, y)
                loss.backward()
                self.optimizer.step()
            self.sampled_edges += batch.sample.num_sampled_edges
            total_loss += loss.item() * y.numel()
            correct += int((logits.argmax(-1) == y).sum())
            count += y.numel()
            bar.set_postfix(loss=f"{loss.item():.4f}")
        return total_loss / max(count, 1), correct / max(count, 1)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, splits: tuple[str, ...] = ("val", "test")) -> dict[str, float]:
        """Accuracy on each split (full graph in full mode, sampled blocks in mini-batch mode)."""
        self.model.eval()
        if self.config.mode == "full":
            logits = self.model([self.full_graph] * self.model.num_layers, self.x_full)
            out = {}
            for split in splits:
                idx = torch.from_numpy(getattr(self.graph, f"{split}_idx")).to(self.device)
                out[split] = accuracy(logits[idx], self.y[idx].to(self.device))
            return out
        if self.layerwise is not None:
            return layerwise_accuracies(self.layerwise, self.model, splits, lambda values: values)
        out = {}
        for split in splits:
            loader = self.eval_loaders[split]
            loader.set_epoch(0)  # evaluation samples the same neighbourhoods every time
            correct = count = 0
            for batch in loader:
                graphs = [MessageGraph.from_block(b, self.device) for b in batch.sample.blocks]
                logits = self.model(graphs, batch.x_SF.to(self.device))
                correct += int((logits.argmax(-1).cpu() == batch.y).sum())
                count += batch.y.numel()
            out[split] = correct / max(count, 1)
        return out

    # ------------------------------------------------------------------ the run
    def fit(self) -> dict[str, Any]:
        from shardgnn.train.checkpoint import Checkpointer, LoopState, capture_state, restore_state

        cfg = self.config
        checkpointer = None if not cfg.checkpoint_dir else Checkpointer(
            cfg.checkpoint_dir, every=cfg.checkpoint_every, keep=cfg.keep_checkpoints)
        loop = LoopState()
        if checkpointer is not None and cfg.resume:
            state = checkpointer.load_latest(cfg.to_dict())
            if state is not None:
                loop = restore_state(state, self.model, self.optimizer, [], EpochRecord)
                print(f"resumed from {checkpointer.complete()[-1]} (epoch {loop.next_epoch})", flush=True)
        run_start = time.perf_counter()
        epochs = progress(range(loop.next_epoch, cfg.optim.epochs), "training", cfg.progress and cfg.mode == "full")
        for epoch in epochs:
            start = time.perf_counter()
            if cfg.mode == "full":
                loss, train_acc = self._train_epoch_full(epoch)
            else:
                loss, train_acc = self._train_epoch_minibatch(epoch)
            train_time = time.perf_counter() - start
            with self.timer("eval"):
                val_acc = self.evaluate(("val",))["val"]
            stages = self.timer.reset()
            loop.history.append(EpochRecord(epoch, loss, train_acc, val_acc, train_time, stages))
            if val_acc > loop.best_val:
                loop.best_val, loop.best_epoch = val_acc, epoch
                loop.best_state = copy.deepcopy(self.model.state_dict())
            loop.next_epoch = epoch + 1
            stop = bool(cfg.optim.patience and epoch - loop.best_epoch >= cfg.optim.patience)
            if checkpointer is not None and (stop or checkpointer.due(loop.next_epoch, cfg.optim.epochs)):
                checkpointer.save(loop.next_epoch, capture_state(loop, self.model, self.optimizer, []), cfg.to_dict())
            if stop:
                break
        history, best_epoch, best_state = loop.history, loop.best_epoch, loop.best_state
        assert best_state is not None
        self.model.load_state_dict(best_state)
        final = self.evaluate(("val", "test"))
        total_time = time.perf_counter() - run_start
        sample_time = sum(r.stages.get("sample", 0.0) for r in history)
        return {
            "config": cfg.to_dict(),
            "mode": cfg.mode,
            "dataset": dataset_summary(self.graph),
            "epochs": [dataclasses.asdict(r) for r in history],
            "best_epoch": best_epoch,
            "val_acc": final["val"],
            "test_acc": final["test"],
            "sampled_edges_per_s": (self.sampled_edges / sample_time) if sample_time > 0 else None,
            "mean_epoch_time_s": float(np.mean([r.time_s for r in history[1:]] or [history[0].time_s])),
            "total_time_s": total_time,
        }


def dataset_summary(graph: Graph) -> dict[str, Any]:
    return {
        "name": graph.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
        "num_features": graph.num_features, "num_classes": graph.num_classes,
        "train": int(len(graph.train_idx)) if graph.train_idx is not None else 0,
        "val": int(len(graph.val_idx)) if graph.val_idx is not None else 0,
        "test": int(len(graph.test_idx)) if graph.test_idx is not None else 0,
    }


def run_training(config: TrainConfig, graph: Graph | None = None) -> dict[str, Any]:
    """Train once with ``config`` and return the results dictionary."""
    return Trainer(config, graph).fit()
