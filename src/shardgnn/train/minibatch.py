"""The mini-batch step, shared by single-process and distributed training: what is done with a
stream of :class:`~shardgnn.loader.pipeline.MiniBatch` es. Where the batches come from (a local
pipeline or the all-to-all one) is the caller's business, and that is what parity tests compare.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch.nn import functional as F

from shardgnn.loader.pipeline import MiniBatch
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.embedding import EmbeddingTable
from shardgnn.store.historical import HistoricalEmbeddings
from shardgnn.timing import StageTimer
from shardgnn.train.epoch import EpochRun, EpochSums
from shardgnn.train.progress import progress

# What a training step computes from a batch: the loss to minimise, and how many of the batch's
# predictions were right out of how many (node classification: its seeds; link prediction: its
# positive and negative pairs).
Objective = Callable[
    [torch.nn.Module, list[MessageGraph], MiniBatch, torch.device], tuple[torch.Tensor, int, int]
]


def node_classification(
    module: torch.nn.Module, graphs: list[MessageGraph], batch: MiniBatch, device: torch.device
) -> tuple[torch.Tensor, int, int]:
    """Cross-entropy of the seeds' logits against their labels."""
    y = batch.y.to(device)
    logits = module(graphs, batch.x_SF.to(device), **model_extras(batch, device))
    # The mean over this batch; an empty batch still runs backward (a DDP all-reduce is a
    # collective): a sum over no rows is a zero connected to the graph, its gradients zero.
    loss = F.cross_entropy(logits, y, reduction="sum") / max(y.numel(), 1)
    return loss, int((logits.argmax(-1) == y).sum()), y.numel()


def model_extras(batch: MiniBatch, device: torch.device) -> dict[str, Any]:
    """The model's keyword arguments beyond graphs and features: a batch with historical
    embeddings passes them, and collects what the forward pass computed at their layers."""
    if not batch.history:
        return {}
    return {"history": batch.model_history(device), "computed": batch.computed}


def train_batches(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[MiniBatch],
    *,
    device: torch.device,
    timer: StageTimer,
    desc: str,
    show_progress: bool,
    orig_ids: np.ndarray | None = None,
    time_waits: bool = False,
    sums: EpochSums | None = None,
    stop_requested: Callable[[], bool] | None = None,
    objective: Objective = node_classification,
    embedding: EmbeddingTable | DistEmbeddingTable | None = None,
    history: HistoricalEmbeddings | None = None,
) -> tuple[EpochSums, bool]:
    """One optimiser step per batch; ``module`` may be a DDP wrapper (its backward all-reduces).
    Returns the epoch's sums and whether it stopped early.

    ``orig_ids`` maps global to original node ids for the dropout keys (None: global ids are
    original). ``time_waits`` records the time spent waiting for each batch as stage ``wait``
    (with a prefetch thread, what the pipeline failed to hide). ``sums`` continues an epoch
    resumed part-way (``batches`` must then start after its ``sums.batches`` batches).
    ``stop_requested`` is asked after every batch but the last (a collective in distributed runs:
    every rank asks at the same batch); when it says yes the epoch ends there and the iterator of
    ``batches`` is closed, which a :class:`~shardgnn.loader.prefetch.PrefetchIterator` does alike on
    every rank. ``embedding``: learnable rows that end each batch's input rows (``x_SF[:, -D:]``);
    after the optimiser step their gradient goes to the table's sparse optimiser (stage
    ``embed``; a sharded table's update is a collective, made by every rank once per batch).
    ``history``: historical embeddings; after every step the owners push what it computed
    (a collective, once per batch on every rank).
    """
    module.train()
    sums = dataclasses.replace(sums) if sums is not None else EpochSums()
    total = len(batches)  # type: ignore[arg-type]
    iterator = iter(batches)
    bar = progress(iterator, desc, show_progress, total=total)
    stopped = False
    waited = time.perf_counter()
    try:
        for i, batch in enumerate(bar):
            if time_waits:
                timer.add("wait", time.perf_counter() - waited)
            with timer("compute"):
                graphs = [MessageGraph.from_block(b, device, orig_ids) for b in batch.sample.blocks]
                optimizer.zero_grad(set_to_none=True)
                if embedding is not None:
                    batch.x_SF.requires_grad_(True)
                loss, correct, count = objective(module, graphs, batch, device)
                loss.backward()
                optimizer.step()
            if embedding is not None:
                with timer("embed"):
                    grad_SD = batch.x_SF.grad[:, -embedding.dim :]
                    embedding.apply_gradients(batch.sample.input_nodes, grad_SD)
            if history is not None:
                with timer("historical"):
                    blocks = batch.sample.blocks
                    history.after_step(
                        {
                            layer: (blocks[layer - 1].dst_nodes_D.numpy(), batch.computed[layer])
                            for layer in history.layers
                        }
                    )
            sums.sampled_edges += batch.sample.num_sampled_edges
            sums.loss_sum += loss.item() * count
            sums.correct += correct
            sums.count += count
            sums.batches += 1
            bar.set_postfix(loss=f"{loss.item():.4f}")
            if stop_requested is not None and i + 1 < total and stop_requested():
                stopped = True
                break
            waited = time.perf_counter()
    except BaseException:
        getattr(iterator, "abort", getattr(iterator, "close", lambda: None))()
        raise
    if stopped:
        getattr(iterator, "close", lambda: None)()
    return sums, stopped


def train_epoch_batches(
    run: EpochRun,
    batcher: Any,
    stream: Iterable[MiniBatch],
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    **kwargs: Any,
) -> tuple[EpochSums, int] | None:
    """Epoch ``run`` over ``stream``, the pipeline fed by ``batcher`` (a seed batcher with
    ``set_epoch(epoch, start)``): from the batch a mid-epoch checkpoint reached, stopping early
    when ``run.stop_requested`` says so (then ``None``, with this rank's sums in ``run.stopped``).
    Returns this rank's sums and the edges sampled in this process (``kwargs``: the rest of
    :func:`train_batches`' arguments)."""
    done = run.resumed.batches if run.resumed is not None else 0
    batcher.set_epoch(run.epoch, start=done)
    run.total_batches = done + len(batcher)
    sums, stopped = train_batches(
        module,
        optimizer,
        stream,
        desc=f"epoch {run.epoch + 1}",
        show_progress=run.show_progress,
        sums=run.resumed,
        stop_requested=run.stop_requested,
        **kwargs,
    )
    if stopped:
        run.stopped = sums
        return None
    return sums, sums.sampled_edges - (run.resumed.sampled_edges if done else 0)


@torch.no_grad()
def count_correct(
    model: torch.nn.Module, batches: Iterable[MiniBatch], device: torch.device
) -> tuple[int, int]:
    """``(correct, count)`` of ``model``'s predictions over ``batches``' seeds."""
    model.eval()
    correct = count = 0
    for batch in batches:
        graphs = [MessageGraph.from_block(b, device) for b in batch.sample.blocks]
        logits = model(graphs, batch.x_SF.to(device))
        correct += int((logits.argmax(-1).cpu() == batch.y).sum())
        count += batch.y.numel()
    return correct, count
