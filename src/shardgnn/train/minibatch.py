"""The mini-batch step, shared by single-process and distributed training: what is done with a
stream of :class:`~shardgnn.loader.pipeline.MiniBatch` es. Where the batches come from (a local
pipeline or the all-to-all one) is the caller's business, and that is what parity tests compare.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import numpy as np
import torch

from shardgnn.heap import stock_heap
from shardgnn.loader.pipeline import MiniBatch
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.targets import Evaluation, NodeTarget
from shardgnn.precision import precision_context
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.embedding import EmbeddingTable
from shardgnn.store.historical import HistoricalEmbeddings
from shardgnn.timing import StageTimer
from shardgnn.train.captured import CapturedSteps
from shardgnn.train.epoch import EpochRun, EpochSums, StepResult, batch_epoch


class Outcome(NamedTuple):
    """What a training objective computes from a batch."""

    loss: torch.Tensor
    """the loss to minimise"""
    correct: float
    count: int
    """the batch's summed training score (right predictions, or a per-node score in [0, 1] for
    labels other than classes: :mod:`shardgnn.nn.targets`) and what it sums over (node
    prediction: its seeds; link prediction: its positive and negative pairs)"""
    computed: Mapping[int, torch.Tensor] | None = None
    """with historical embeddings: the embeddings the forward pass computed at each historical
    layer (``{layer: h_DF}``, detached: what owners push), else None"""


def batch_graphs(
    batch: MiniBatch, device: torch.device, orig_ids: np.ndarray | None = None
) -> list[MessageGraph]:
    """One :class:`MessageGraph` per block of ``batch``, with its edges' features when the batch
    carries them (``orig_ids``: as :meth:`MessageGraph.from_block`)."""
    blocks = batch.sample.blocks
    rows = batch.edge_attr or (None,) * len(blocks)
    return [MessageGraph.from_block(b, device, orig_ids, r) for b, r in zip(blocks, rows)]


class GraphsAhead:
    """Makes each batch's message graphs in the pipeline's thread (on its side stream), with the
    sparse matrices the training step asked of the last batch's graphs, so that the step finds
    them made: on a GPU their tensor ops cost the training thread 1.4 ms of host time a step
    (BENCHMARKS section 18e) and now run beside it. Until a step has run it makes nothing (the
    step then makes its graphs itself, as without it). Call it on a batch; the step calls
    :meth:`learn` with the graphs it ran on."""

    def __init__(self, device: torch.device, orig_ids: np.ndarray | None = None):
        self.device, self.orig_ids = device, orig_ids
        # per layer: the norms of the matrices and of the transposes the last step made; a new
        # tuple replaces the old one whole, so the pipeline's thread reads one or the other
        self.asked: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None
        self.made = 0
        """batches whose graphs were made here"""

    def learn(self, graphs: list[MessageGraph]) -> None:
        """What the step asked of ``graphs`` (their matrices, after its backward pass)."""
        self.asked = tuple(graph.matrices_made() for graph in graphs)

    def __call__(self, batch: MiniBatch) -> MiniBatch:
        asked = self.asked
        if asked is None or len(asked) != len(batch.sample.blocks):
            return batch
        graphs = batch_graphs(batch, self.device, self.orig_ids)
        for graph, (norms, transposed_norms) in zip(graphs, asked):
            graph.make_matrices(norms, transposed_norms)
        self.made += 1
        return dataclasses.replace(batch, graphs=tuple(graphs))


Objective = Callable[[torch.nn.Module, list[MessageGraph], MiniBatch, torch.device], Outcome]
"""What a training step computes from a batch: ``objective(module, graphs, batch, device)``."""


def node_objective(target: NodeTarget) -> Objective:
    """The objective of node labels of ``target``'s kind: the seeds' mean loss (in fp32, whatever
    the autocast) and their summed training score; a batch with historical embeddings passes them
    to the model, which returns what it computed at their layers."""

    def objective(
        module: torch.nn.Module, graphs: list[MessageGraph], batch: MiniBatch, device: torch.device
    ) -> Outcome:
        y = batch.y.to(device)
        x_SF = batch.x_SF.to(device)
        computed = None
        if batch.history:
            logits, computed = module(graphs, x_SF, history=batch.model_history(device))
        else:
            logits = module(graphs, x_SF)
        logits = logits.float()
        # The mean over this batch; an empty batch still runs backward (a DDP all-reduce is a
        # collective): a sum over no rows is a zero connected to the graph, its gradients zero.
        loss = target.loss_sum(logits, y) / max(y.shape[0], 1)
        return Outcome(loss, target.score_sum(logits, y), target.rows_scored(y), computed)

    return objective


def minibatch_step(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    device: torch.device,
    timer: StageTimer,
    orig_ids: np.ndarray | None = None,
    objective: Objective,
    embedding: EmbeddingTable | DistEmbeddingTable | None = None,
    history: HistoricalEmbeddings | None = None,
    precision: str = "fp32",
    ahead: GraphsAhead | None = None,
    captured: CapturedSteps | None = None,
) -> Callable[[MiniBatch], StepResult]:
    """The optimiser step over one :class:`MiniBatch` (the ``step`` of
    :func:`~shardgnn.train.epoch.batch_epoch`); ``module`` may be a DDP wrapper (its backward
    all-reduces).

    ``orig_ids`` maps global to original node ids for the dropout keys (None: global ids are
    original). ``embedding``: learnable rows that end each batch's input rows (``x_SF[:, -D:]``);
    after the optimiser step their gradient goes to the table's sparse optimiser (stage
    ``embed``; a sharded table's update is a collective, made by every rank once per batch).
    ``history``: historical embeddings; after every step the owners push what the objective's
    forward pass computed (a collective, once per batch on every rank). ``precision``: ``bf16``
    runs the objective (forward pass and loss) under bf16 autocast
    (:func:`shardgnn.precision.precision_context`); the backward pass and the optimiser step run
    outside it, on fp32 parameters. A batch's graphs made ahead (``batch.graphs``) are used as
    they are; ``ahead`` learns from every step what its graphs were asked for. ``captured``
    replays the step as a CUDA graph where it takes the batch (``--cuda-graphs``).
    """

    def step(batch: MiniBatch) -> StepResult:
        if captured is not None:
            with timer("compute"):
                replayed = captured.step(batch)
            if replayed is not None:
                return replayed
        with timer("compute"):
            made = batch.graphs
            graphs = batch_graphs(batch, device, orig_ids) if made is None else list(made)
            optimizer.zero_grad(set_to_none=True)
            if embedding is not None:
                batch.x_SF.requires_grad_(True)
            with precision_context(precision, device):
                outcome = objective(module, graphs, batch, device)
            outcome.loss.backward()
            optimizer.step()
            if ahead is not None:
                ahead.learn(graphs)
        if embedding is not None:
            with timer("embed"):
                grad_SD = batch.x_SF.grad[:, -embedding.dim :]
                embedding.apply_gradients(batch.sample.input_nodes, grad_SD)
        if history is not None:
            with timer("historical"):
                blocks = batch.sample.blocks
                history.after_step(
                    {
                        layer: (blocks[layer - 1].dst_nodes_D.numpy(), outcome.computed[layer])
                        for layer in history.layers
                    }
                )
        return StepResult(
            outcome.loss.detach(), outcome.correct, outcome.count, batch.sample.num_sampled_edges
        )

    return step


def train_epoch_batches(
    run: EpochRun,
    batcher: Any,
    stream: Iterable[MiniBatch],
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    timer: StageTimer,
    time_waits: bool = False,
    **kwargs: Any,
) -> tuple[EpochSums, int] | None:
    """Epoch ``run`` of :func:`minibatch_step` s over ``stream``, the pipeline fed by ``batcher``
    (:func:`~shardgnn.train.epoch.batch_epoch`; ``None`` when it stopped early). Returns this
    rank's sums and the edges sampled in this process. ``time_waits`` records the time spent
    waiting for each batch as stage ``wait`` (``kwargs``: the rest of :func:`minibatch_step`'s
    arguments)."""
    module.train()
    step = minibatch_step(module, optimizer, timer=timer, **kwargs)
    sums = batch_epoch(run, batcher, step, stream, wait_timer=timer if time_waits else None)
    if sums is None:
        return None
    return sums, sums.sampled_edges - (run.resumed.sampled_edges if run.resumed else 0)


@torch.no_grad()
def evaluate_batches(
    model: torch.nn.Module,
    batches: Iterable[MiniBatch],
    device: torch.device,
    target: NodeTarget,
    precision: str = "fp32",
) -> Evaluation:
    """``target``'s evaluation of ``model``'s outputs over ``batches``' seeds, this rank's share
    (``precision``: as in :func:`minibatch_step`); its ``result`` reduces over ranks."""
    model.eval()
    evaluation = target.evaluation()
    # An evaluation batch's input rows reach a GB: one batch's alive at a time (each dropped
    # before the next is fetched, see FeatureFetcher.__iter__), returned to the kernel when
    # freed (stock_heap), not kept by --heap reuse for training's small batches.
    with stock_heap():
        for batch in batches:
            graphs = batch_graphs(batch, device)
            with precision_context(precision, device):
                logits = model(graphs, batch.x_SF.to(device))
            evaluation.add(logits, batch.y)
            del batch, graphs, logits
    return evaluation
