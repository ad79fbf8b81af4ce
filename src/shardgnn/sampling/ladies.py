"""LADIES: layer-dependent importance sampling (Zou et al., NeurIPS 2019), as tensor code.

A node-wise sampler draws ``fanout`` neighbours per node, so a layer grows with the batch times
the fanout. LADIES draws one set of ``s`` nodes per layer for the whole batch, from the union of
the batch's neighbourhoods, each node ``j`` with probability

    p_j  proportional to  sum over frontier rows i of  P_ij ** 2

(the squared column norm of ``P = D^-1/2 A D^-1/2``, degrees plus one, restricted to the
frontier's rows: LADIES' variance-reducing choice for the layer's estimator), and
keeps the frontier's edges to the drawn nodes. A layer has at most ``D + s`` nodes, whatever the
degrees.

In matrix form (the CAGNET sampling paper's bulk formulation) the ``k`` batches of one pass stack
their frontiers as the rows of a selector ``Q``; ``Q A`` is one full-neighbourhood hop of the
stacked frontier, the column norms are summed per batch, and every batch draws its own ``s``
columns. :func:`ladies_draw` takes the stacked hop and each row's batch, so one batch and ``k``
batches are the same code, and ``k`` batches drawn together equal each drawn alone.

The ``s`` nodes are drawn without replacement, with probabilities ``p``, by exponential races
(Efraimidis and Spirakis: node ``j`` gets the key ``-log(u_j) / p_j``, the ``s`` smallest keys
win): the same distribution as drawing one node at a time with probability ``p`` among those
left (``numpy.random.choice(..., replace=False, p=p)``, LADIES' reference code). ``u_j`` is a
hash of ``(layer seed, j)``, so the draw is the same on any device, thread count or rank.

A kept edge ``i <- j`` carries the weight ``1 / pi_j``, normalised so a row's weights sum to the
edges it kept (LADIES' row normalisation), where ``pi_j`` is the probability that ``j`` is drawn
at all (rank conditioning, Cohen and Kaplan: ``1 - exp(-p_j tau)``, ``tau`` the batch's
``(s + 1)``-th smallest key, given which ``j``'s own draw is independent; 1 when the batch has at
most ``s`` candidates). LADIES' code weighs by ``1 / p_j``, which is not 1 when every candidate is
kept; with ``1 / pi_j`` a layer that keeps every candidate is the full-neighbourhood block, every
weight 1, as a node-wise block is weighted. :class:`~shardgnn.nn.message_graph.MessageGraph`
multiplies each aggregation's values by the weights.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from shardgnn.sampling.tensor_ops import _int64, _srl, entry_rows, splitmix64
from shardgnn.seeding import mix_seed

_LADIES_STREAM = 0x1AD1E5


def ladies_seed(batch_seed: int, layer: int) -> int:
    """The seed of a batch's LADIES draw at ``layer``: a stream of its own (not the node-wise
    draw's ``mix_seed(seed, layer)``), as an int64 with the same bits."""
    return _int64(mix_seed(batch_seed, layer, _LADIES_STREAM))


def node_uniform(seed_C: torch.Tensor, node_C: torch.Tensor) -> torch.Tensor:
    """float64 in ``(0, 1)`` per ``(seed, node)`` pair: a hash of both (53 bits), so any
    process draws the same number for the same pair."""
    bits = _srl(splitmix64(seed_C ^ splitmix64(node_C)), 11)
    return (bits.to(torch.float64) + 0.5) * (1.0 / (1 << 53))


class LayerDraw(NamedTuple):
    """LADIES' draw for one layer, per candidate ``(batch, node)`` pair (sorted by batch, then
    node) and per hop edge."""

    row_E: torch.Tensor
    """``[E]`` the frontier row of every hop edge"""
    cand_of_E: torch.Tensor
    """``[E]`` the candidate of every hop edge"""
    batch_C: torch.Tensor
    node_C: torch.Tensor
    p_C: torch.Tensor
    """float64 the probability LADIES gives the node (summing to 1 over a batch's candidates)"""
    drawn_C: torch.Tensor
    """bool: among the batch's ``s`` drawn nodes"""
    inclusion_C: torch.Tensor
    """float64 the probability of being drawn, given the batch's ``(s + 1)``-th key"""


def ladies_draw(
    offsets_R1: torch.Tensor,
    nbr_E: torch.Tensor,
    degree_R: torch.Tensor,
    degree_E: torch.Tensor,
    layer_nodes: int,
    seed_B: torch.Tensor,
    batch_R: torch.Tensor | None = None,
) -> LayerDraw:
    """LADIES' draw over one full-neighbourhood hop (every frontier row's neighbours).

    Args:
        offsets_R1: ``[R + 1]`` the hop's row pointers (row ``i``'s neighbours are
            ``nbr_E[offsets_R1[i]:offsets_R1[i + 1]]``).
        nbr_E: ``[E]`` global ids of the neighbours.
        degree_R, degree_E: graph in-degrees of the frontier rows and of the neighbours.
        layer_nodes: ``s``, nodes drawn per batch (a batch with fewer candidates keeps all).
        seed_B: int64 ``[B]`` the layer seed of every batch.
        batch_R: ``[R]`` the batch of every row (sorted; ``None``: one batch).
    """
    device = nbr_E.device
    row_E = entry_rows(offsets_R1, nbr_E.shape[0])
    batch_E = torch.zeros_like(nbr_E) if batch_R is None else batch_R[row_E]
    # P_ij = 1 / sqrt((d_i + 1)(d_j + 1)); p_j ~ the sum of P_ij ** 2 over the batch's rows
    p2_E = 1.0 / ((degree_R[row_E] + 1).to(torch.float64) * (degree_E + 1).to(torch.float64))
    span = int(nbr_E.max()) + 1 if nbr_E.numel() else 1
    # candidates: distinct (batch, node) pairs, sorted by batch then node
    cand_C, cand_of_E = torch.unique(batch_E * span + nbr_E, return_inverse=True)
    batch_C, node_C = cand_C // span, cand_C % span
    mass_C = torch.zeros(cand_C.shape[0], dtype=torch.float64, device=device)
    mass_C.index_add_(0, cand_of_E, p2_E)
    num_batches = seed_B.shape[0]
    total_B = torch.zeros(num_batches, dtype=torch.float64, device=device)
    total_B.index_add_(0, batch_C, mass_C)
    p_C = mass_C / total_B[batch_C]
    # exponential races: the layer_nodes smallest keys of each batch win
    key_C = -torch.log(node_uniform(seed_B.to(device)[batch_C], node_C)) / p_C
    # inclusion probabilities (rank conditioning): given the batch's (s+1)-th smallest key tau,
    # node j is drawn when its key falls below tau, with probability 1 - exp(-p_j tau)
    if num_batches == 1:  # one batch: its layer_nodes + 1 smallest keys, a partial sort
        smallest, at = torch.topk(key_C, min(layer_nodes + 1, key_C.shape[0]), largest=False)
        drawn_C = torch.zeros(key_C.shape[0], dtype=torch.bool, device=device)
        drawn_C[at[:layer_nodes]] = True
        tau = smallest[layer_nodes] if key_C.shape[0] > layer_nodes else torch.inf
        inclusion_C = -torch.expm1(-p_C * tau)
        return LayerDraw(row_E, cand_of_E, batch_C, node_C, p_C, drawn_C, inclusion_C)
    order = torch.argsort(key_C, stable=True)
    order = order[torch.argsort(batch_C[order], stable=True)]  # by batch, then key
    per_batch_B = torch.bincount(batch_C, minlength=num_batches)
    first_B = torch.cumsum(per_batch_B, 0) - per_batch_B
    rank_C = torch.empty_like(order)
    rank_C[order] = torch.arange(order.shape[0], device=device) - first_B[batch_C[order]]
    tau_B = torch.full((num_batches,), torch.inf, dtype=torch.float64, device=device)
    over = torch.nonzero(per_batch_B > layer_nodes).squeeze(1)
    tau_B[over] = key_C[order[first_B[over] + layer_nodes]]
    inclusion_C = -torch.expm1(-p_C * tau_B[batch_C])
    return LayerDraw(row_E, cand_of_E, batch_C, node_C, p_C, rank_C < layer_nodes, inclusion_C)


def kept_edges(draw: LayerDraw, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The edges a block keeps of ``draw``'s hop (``num_rows`` frontier rows): ``(keep_E,
    weight_K)``, which hop edges join the frontier to a drawn node, and the weight of each kept
    edge (float32, in edge order): ``1 / inclusion``, normalised so a row's weights sum to its
    kept edges."""
    keep_E = draw.drawn_C[draw.cand_of_E]
    inv_pi_K = (1.0 / draw.inclusion_C)[draw.cand_of_E[keep_E]]
    row_K = draw.row_E[keep_E]
    sum_R = torch.zeros(num_rows, dtype=torch.float64, device=keep_E.device)
    sum_R.index_add_(0, row_K, inv_pi_K)
    kept_R = torch.bincount(row_K, minlength=num_rows).to(torch.float64)
    return keep_E, (inv_pi_K * kept_R[row_K] / sum_R[row_K]).to(torch.float32)


def ladies_numpy(
    frontier: np.ndarray,
    offsets: np.ndarray,
    nbr: np.ndarray,
    degree_of,
    layer_nodes: int,
    layer_seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ladies_draw` and :func:`kept_edges` for one batch's hop held in numpy arrays (the
    CPU samplers' layer loop, :func:`~shardgnn.sampling.neighbor.sample_blocks`);
    ``degree_of(global ids)`` gives graph in-degrees. Returns ``(keep, weight of the kept
    edges)`` as numpy arrays."""
    draw = ladies_draw(
        torch.from_numpy(np.ascontiguousarray(offsets, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(nbr, dtype=np.int64)),
        torch.from_numpy(np.asarray(degree_of(frontier), dtype=np.int64)),
        torch.from_numpy(np.asarray(degree_of(nbr), dtype=np.int64)),
        layer_nodes,
        torch.tensor([layer_seed], dtype=torch.int64),
    )
    keep, weight = kept_edges(draw, frontier.shape[0])
    return keep.numpy(), weight.numpy()
