"""Link-prediction metrics over scores: AUC, average precision, MRR and Hits@K.

Ties are shared the usual ways: AUC counts a tied (positive, negative) pair as half right; AP
takes one precision per distinct score threshold (as scikit-learn); a positive's rank among its
negatives is the mean of its optimistic and pessimistic rank (as OGB's evaluator).
"""

from __future__ import annotations

import numpy as np


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a random positive outscores a random
    negative (Mann-Whitney U with average ranks for ties)."""
    pos, neg = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    if not pos.size or not neg.size:
        return float("nan")
    scores = np.concatenate([pos, neg])
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # average rank (1-based) of each distinct value: its first rank plus half its run
    first = np.cumsum(counts) - counts + 1
    ranks = (first + (counts - 1) / 2.0)[inverse]
    u = ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def average_precision(pos: np.ndarray, neg: np.ndarray) -> float:
    """Average precision: ``sum_t (R_t - R_{t-1}) P_t`` over distinct score thresholds, highest
    first."""
    pos, neg = np.asarray(pos, np.float64).ravel(), np.asarray(neg, np.float64).ravel()
    if not pos.size:
        return float("nan")
    scores = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    # the last index of every run of equal scores is a threshold
    last = np.flatnonzero(np.r_[scores[1:] != scores[:-1], True])
    tp = np.cumsum(labels)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / pos.size
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def ranks(pos_P: np.ndarray, neg_PK: np.ndarray) -> np.ndarray:
    """Rank of every positive among its own negatives (1 = best)."""
    pos_P = np.asarray(pos_P, np.float64)[:, None]
    neg_PK = np.asarray(neg_PK, np.float64)
    optimistic = (neg_PK > pos_P).sum(1)
    pessimistic = (neg_PK >= pos_P).sum(1)
    return 1.0 + 0.5 * (optimistic + pessimistic)


def link_metrics(pos_P: np.ndarray, neg_PK: np.ndarray, hits_at: tuple[int, ...]) -> dict:
    """Every metric of a scored evaluation split. AUC and AP pair every positive with its first
    negative (one negative per positive, GAE's protocol: AP depends on the class ratio); MRR and
    Hits@K rank every positive among all its ``K`` negatives (OGB's protocol)."""
    return {
        "auc": auc(pos_P, neg_PK[:, :1]),
        "ap": average_precision(pos_P, neg_PK[:, :1]),
        **rank_metrics(ranks(pos_P, neg_PK), hits_at),
    }


def filtered_ranks(scores_QN: np.ndarray, answer_Q: np.ndarray, known_QN: np.ndarray) -> np.ndarray:
    """Filtered rank of every query's answer among all candidates (Bordes et al. 2013): the
    other candidates known to be true (``known_QN``, e.g. in train, valid or test) are left out,
    so a model is not penalised for ranking another right answer first; ties count half, as
    :func:`ranks` (pykeen's "realistic" rank)."""
    scores_QN = np.asarray(scores_QN, np.float64)
    rows = np.arange(len(answer_Q))
    true_Q = scores_QN[rows, answer_Q]
    others = np.asarray(known_QN, bool).copy()
    others[rows, answer_Q] = True  # the answer is not its own competitor either
    optimistic = ((scores_QN > true_Q[:, None]) & ~others).sum(1)
    pessimistic = ((scores_QN >= true_Q[:, None]) & ~others).sum(1)
    return 1.0 + 0.5 * (optimistic + pessimistic)


def rank_metrics(ranks_Q: np.ndarray, hits_at: tuple[int, ...]) -> dict[str, float]:
    """MRR and Hits@K of a set of ranks."""
    r = np.asarray(ranks_Q, np.float64)
    out = {"mrr": float(np.mean(1.0 / r)) if r.size else float("nan")}
    for k in hits_at:
        out[f"hits@{k}"] = float(np.mean(r <= k)) if r.size else float("nan")
    return out
