"""Negative sampling for link prediction: for every positive pair ``(u, v)``, ``k`` pairs
``(u, w)`` whose destination is drawn

* ``uniform``: uniformly over all nodes of the graph;
* ``degree``: proportionally to ``in-degree ** 0.75`` (word2vec's smoothed unigram, as in
  PinSage and DGL's ``GlobalUniform``/``PerSourceUniform`` alternatives);
* ``in-batch``: from the other positives' destinations in the same batch (no extra nodes to
  sample or fetch; ``k`` is capped at the batch size minus one).

Draws depend only on ``(seed, batch)``, never on which process makes them; in distributed
training every rank draws over the whole graph (the degrees are replicated), not only its part.
Training negatives are not checked against the graph (a uniform draw hits an edge with
probability ``degree / N``, negligible on sparse graphs; the fixed evaluation negatives of
:mod:`shardgnn.graph.linksplit` are checked).
"""

from __future__ import annotations

import numpy as np

from shardgnn.sampling.config import NEGATIVE_KINDS

DEGREE_POWER = 0.75


class NegativeSampler:
    """Draws ``k`` negatives per positive pair.

    Args:
        kind: one of :data:`NEGATIVE_KINDS`.
        num_nodes: nodes of the whole graph (global ids ``0..N-1``).
        k: negatives per positive.
        degree: in-degree of every node (needed by ``degree``).
    """

    def __init__(self, kind: str, num_nodes: int, k: int, degree: np.ndarray | None = None):
        assert kind in NEGATIVE_KINDS, kind
        assert k >= 1
        self.kind, self.num_nodes, self.k = kind, int(num_nodes), int(k)
        self._cdf = None
        if kind == "degree":
            assert degree is not None and degree.shape[0] == num_nodes
            weight = np.asarray(degree, dtype=np.float64) ** DEGREE_POWER
            total = weight.sum()
            if not total > 0:  # no edges at all: fall back to uniform weights
                weight, total = np.ones(num_nodes), float(num_nodes)
            self._cdf = np.cumsum(weight / total)
            self._cdf[-1] = 1.0  # rounding must not leave a gap at the top

    def per_positive(self, num_positives: int) -> int:
        """Negatives each positive gets in a batch of ``num_positives``."""
        if self.kind == "in-batch":
            return min(self.k, max(num_positives - 1, 0))
        return self.k

    def sample(self, src_P: np.ndarray, dst_P: np.ndarray, seed: int) -> np.ndarray:
        """``[P, k']`` negative destinations (the negatives of positive ``i`` are
        ``(src_P[i], neg[i, j])``; ``k' = per_positive(P)``)."""
        p = src_P.shape[0]
        k = self.per_positive(p)
        if self.kind == "in-batch":
            # the j-th negative of positive i is the destination of positive i + j (mod P)
            shift = (np.arange(p)[:, None] + np.arange(1, k + 1)[None, :]) % max(p, 1)
            return np.asarray(dst_P, dtype=np.int64)[shift]
        rng = np.random.default_rng(seed)
        if self.kind == "uniform":
            return rng.integers(0, self.num_nodes, size=(p, k), dtype=np.int64)
        draws = np.searchsorted(self._cdf, rng.random((p, k)), side="right")
        return np.minimum(draws, self.num_nodes - 1).astype(np.int64)
