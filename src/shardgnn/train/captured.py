"""The mini-batch training step as CUDA graphs (``--cuda-graphs``).

On a GPU the eager step is launch-bound: BENCHMARKS section 18e measured 1.33 ms of device work
in a step whose host work (Python, dispatch, launches) took 4-5.5 ms. A CUDA graph replays a
captured step's kernels with one launch. A captured graph has fixed shapes, and every sampled
batch has its own, so each batch is padded to a *bucket*: every size rounded up to ``m * 2**k``
with ``8 <= m < 16`` (at most 1/8 more), and one graph is captured per bucket (a few per run).

Padding leaves the real rows' results alone. Block ``l`` (input side first) gets ``P_l`` src rows
(``P_l > S_l``) and ``P_{l+1}`` dst rows (``P_{l+1} > D_l``, and ``P_{l+1} <= P_l`` since
``D_l <= S_l``); the padded edges go from padded src rows to padded dst rows only, spread
evenly over both (edge ``j`` of ``Q`` padded ones into padded dst row ``floor(j * R / Q)`` of
``R``, from padded src row ``j mod R'`` of ``R'``: one row holding them all made the sparse
products' row-parallel kernels wait on that row, 3.3x the eager step's SpMM time, BENCHMARKS
18f). No real dst row has a padded edge, so real rows read real rows only, layer after layer;
padded seeds get label ``-100``, which the loss and the score skip, and the loss is
divided by the real seed count, a device scalar filled per batch.

Dropout draws its masks from ``(seed, step, layer, node id, column)`` (:mod:`shardgnn.nn.dropout`);
a replay runs no Python, so the step's seeds go into a device tensor before each replay and the
captured forward pass reads them there (``GNN.dropout_seeds``), with the src nodes' ids in static
buffers too: a replayed step drops what the eager step would.

Capturing runs the step twice first (on a side stream, as torch asks), which changes the weights
and Adam's state: both are put back as they were before the graph is replayed for the batch, so a
captured step trains as the eager one does (the same loss up to the GEMMs' order of additions at
other shapes; tested against the eager step on the GPU). A batch the step does not pad (rows on
the host, historical or edge rows) or whose bucket would exceed :data:`MAX_GRAPHS` runs eagerly.
"""

from __future__ import annotations

import dataclasses

import torch

from shardgnn.loader.pipeline import MiniBatch
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import GNN
from shardgnn.nn.targets import ClassTarget
from shardgnn.train.epoch import StepResult

MAX_GRAPHS = 16
"""captured graphs a run keeps at most (each holds its own activations' memory)"""
IGNORED = -100
"""the label of a padded seed (``cross_entropy``'s ``ignore_index``; no class equals it)"""


def bucket(n: int) -> int:
    """The least ``m * 2**k >= n`` with ``8 <= m < 16`` (``n`` itself below 16)."""
    shift = max(n.bit_length() - 4, 0)
    return -(-n >> shift) << shift


def padded_shape(batch: MiniBatch) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(rows, edges)``: ``rows[l]`` the padded src rows of block ``l`` (``rows[-1]``: the
    padded seeds), ``edges[l]`` its padded edge count."""
    blocks = batch.sample.blocks
    rows = tuple(bucket(b.num_src + 1) for b in blocks) + (bucket(blocks[-1].num_dst + 1),)
    return rows, tuple(bucket(b.num_edges) for b in blocks)


@dataclasses.dataclass
class _Captured:
    """One bucket's graph and its static inputs and outputs."""

    rows: tuple[int, ...]
    indptr: list[torch.Tensor]
    indices: list[torch.Tensor]
    keys: list[torch.Tensor]
    x_SF: torch.Tensor
    y_B: torch.Tensor
    count: torch.Tensor
    seeds: torch.Tensor
    arange: torch.Tensor
    graph: torch.cuda.CUDAGraph | None = None
    loss: torch.Tensor | None = None
    correct: torch.Tensor | None = None

    @classmethod
    def allocate(cls, key: tuple, batch: MiniBatch) -> "_Captured":
        """Static inputs of the bucket ``key`` (:func:`padded_shape`), on ``batch``'s device."""
        rows, edges = key
        device = batch.x_SF.device
        long = dict(dtype=torch.int64, device=device)
        return cls(
            rows=rows,
            indptr=[torch.full((r + 1,), e, **long) for r, e in zip(rows[1:], edges)],
            indices=[torch.zeros(e, **long) for e in edges],
            keys=[torch.zeros(r, **long) for r in rows[:-1]],
            x_SF=torch.zeros((rows[0], batch.x_SF.shape[1]), dtype=batch.x_SF.dtype, device=device),
            y_B=torch.full((rows[-1],), IGNORED, dtype=batch.y.dtype, device=device),
            count=torch.zeros((), dtype=torch.float32, device=device),
            seeds=torch.zeros(len(edges), **long),
            arange=torch.arange(max(*edges, *rows) + 1, **long),
        )

    def fill(self, batch: MiniBatch, seeds: list[int]) -> None:
        """Copy ``batch`` into the static inputs, padded (see the module's docstring), with the
        step's dropout ``seeds`` (one per layer)."""
        for layer, seed in enumerate(seeds):
            self.seeds[layer].fill_(seed)  # a launch with the number in it: no host wait
        for layer, block in enumerate(batch.sample.blocks):
            self.keys[layer][: block.num_src].copy_(block.src_nodes_S)
            indptr, indices = self.indptr[layer], self.indices[layer]
            dst, edges = block.num_dst, block.num_edges
            padded_dst = self.rows[layer + 1] - dst  # >= 1, as padded_src and its edges below
            padded_src = self.rows[layer] - block.num_src
            padded_edges = indices.shape[0] - edges
            indptr[:dst].copy_(block.indptr_D1[:-1])
            # (the sizes are host ints: no host wait; see the module's docstring for the spread)
            torch.add(self.arange[: padded_dst + 1] * padded_edges // padded_dst, edges,
                      out=indptr[dst:])  # fmt: skip
            indices[:edges].copy_(block.indices_E)
            torch.add(self.arange[:padded_edges] % padded_src, block.num_src, out=indices[edges:])
        self.x_SF[: batch.x_SF.shape[0]].copy_(batch.x_SF)
        self.y_B.fill_(IGNORED)
        self.y_B[: batch.y.shape[0]].copy_(batch.y)
        self.count.fill_(batch.y.shape[0])

    def graphs(self) -> list[MessageGraph]:
        return [
            MessageGraph(indptr, indices, rows, node_keys_S=keys)
            for indptr, indices, rows, keys in zip(self.indptr, self.indices, self.rows, self.keys)
        ]


class CapturedSteps:
    """The training step of ``module`` and ``optimizer`` on each batch as a replayed CUDA graph,
    one per bucket of padded shapes, captured on a bucket's first batch; :meth:`step` returns
    None for a batch it leaves to the eager step."""

    def __init__(self, module: GNN, optimizer: torch.optim.Optimizer, target: ClassTarget):
        self.module, self.optimizer, self.target = module, optimizer, target
        self.captured: dict[tuple, _Captured] = {}
        self.replays = 0
        """batches trained by a replay"""
        self._state: dict | None = None
        """the optimiser's state dict the graphs were captured against"""

    def _state_tensors(self) -> dict[tuple, torch.Tensor]:
        """The weights and the optimiser's state, which a capture's runs change, by name."""
        named: dict[tuple, torch.Tensor] = {}
        for i, p in enumerate(self.module.parameters()):
            named[(i,)] = p
            for name, value in self.optimizer.state.get(p, {}).items():
                if torch.is_tensor(value):
                    named[(i, name)] = value
        return named

    def step(self, batch: MiniBatch) -> StepResult | None:
        x_SF, y = batch.x_SF, batch.y
        if (
            batch.history
            or batch.edge_attr is not None
            or y is None
            or not isinstance(x_SF, torch.Tensor)
            or not x_SF.is_cuda
            or x_SF.layout != torch.strided
            or any(b.edge_weight_E is not None for b in batch.sample.blocks)
        ):
            return None
        if self.captured and self.optimizer.state is not self._state:
            # the optimiser's state was replaced (a checkpoint loaded into it: load_state_dict
            # swaps the whole dict): the graphs would update the old tensors
            self.captured.clear()
        key = padded_shape(batch)
        entry = self.captured.get(key)
        seeds = self._dropout_seeds(len(batch.sample.blocks))
        if entry is None:
            if len(self.captured) >= MAX_GRAPHS:
                return None
            entry = self._capture(key, batch, seeds)
        else:
            entry.fill(batch, seeds)
        entry.graph.replay()
        self.replays += 1
        if self.module.dropout_seed is not None:
            self.module.dropout_step += 1  # as the eager forward pass counts its steps
        return StepResult(
            entry.loss.clone(), entry.correct.clone(), int(y.shape[0]),
            batch.sample.num_sampled_edges,
        )  # fmt: skip

    def _dropout_seeds(self, layers: int) -> list[int]:
        """The seeds the eager step's dropout would draw with (``GNN._drop``'s), per layer."""
        if self.module.dropout_seed is None:
            return [0] * layers
        return [self.module.layer_dropout_seed(layer) for layer in range(layers)]

    def _capture(self, key: tuple, batch: MiniBatch, seeds: list[int]) -> _Captured:
        entry = _Captured.allocate(key, batch)
        device = entry.x_SF.device
        entry.fill(batch, seeds)
        before = {name: t.detach().clone() for name, t in self._state_tensors().items()}
        graph = torch.cuda.CUDAGraph()
        groups = self.optimizer.param_groups
        capturable = [g.get("capturable", False) for g in groups]
        step = self.module.dropout_step
        self.module.dropout_seeds = entry.seeds  # the captured forward pass reads them there
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(2):  # torch's recipe: warm up on a side stream before capturing
                    self._run(entry)
            torch.cuda.current_stream(device).wait_stream(side)
            for g in groups:
                # the fused Adam's kernels are the same either way; torch only asks for the flag
                # while capturing (checkpoints keep the plain setting)
                g["capturable"] = True
            # thread_local: the pipeline's thread goes on sampling the next batch on its own
            # stream meanwhile, which a global capture would refuse
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                entry.loss, entry.correct = self._run(entry)
        finally:
            for g, c in zip(groups, capturable):
                g["capturable"] = c
            self.module.dropout_seeds = None
            self.module.dropout_step = step
        with torch.no_grad():
            for name, t in self._state_tensors().items():
                # the warm-up's changes undone; state it made (a first step's) starts at zero,
                # as Adam's does
                if name in before:
                    t.copy_(before[name])
                else:
                    t.zero_()
        self._state = self.optimizer.state
        entry.graph = graph
        self.captured[key] = entry
        return entry

    def _run(self, entry: _Captured) -> tuple[torch.Tensor, torch.Tensor]:
        """The step on ``entry``'s static inputs (what is captured)."""
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.module(entry.graphs(), entry.x_SF).float()
        loss = self.target.loss_sum(logits, entry.y_B) / entry.count
        loss.backward()
        self.optimizer.step()
        return loss.detach(), self.target.score_sum(logits.detach(), entry.y_B)
