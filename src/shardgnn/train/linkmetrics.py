"""Link-prediction metrics over scores: AUC, average precision, MRR and Hits@K; the same over
every rank's share of a split (:func:`metrics_of_shares`), a temporal stream's metrics
(:func:`stream_metrics`), and the known answers of knowledge-graph queries that filtered ranking
removes (:class:`AnswerIndex`).

Ties are shared the usual ways: AUC counts a tied (positive, negative) pair as half right; AP
takes one precision per distinct score threshold (as scikit-learn); a positive's rank among its
negatives is the mean of its optimistic and pessimistic rank (as OGB's evaluator).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.graph.linksplit import LinkSplit, LinkSplitSpec
from shardgnn.nn.targets import roc_auc as auc

if TYPE_CHECKING:
    from shardgnn.train.settings import LinkConfig


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
    return metrics_of_rank_sums(rank_sums(ranks_Q, hits_at), hits_at)


def rank_sums(ranks_Q: np.ndarray, hits_at: tuple[int, ...]) -> list[float]:
    """``[count, sum of 1 / rank, ranks <= K for each K]``: what shares of a set of ranks add up
    to (workers sum them, :func:`metrics_of_rank_sums` turns them into MRR and Hits@K)."""
    r = np.asarray(ranks_Q, np.float64)
    return [float(r.size), float(np.sum(1.0 / r)), *(float(np.sum(r <= k)) for k in hits_at)]


def metrics_of_rank_sums(sums: list[float], hits_at: tuple[int, ...]) -> dict[str, float]:
    """MRR and Hits@K from :func:`rank_sums` (NaN over no ranks)."""
    count, reciprocal, *hits = sums
    mean = (lambda total: total / count) if count else (lambda total: float("nan"))
    return {"mrr": mean(reciprocal), **{f"hits@{k}": mean(h) for k, h in zip(hits_at, hits)}}


def stream_metrics(pos, neg, neg_hist, new, batch_ap) -> dict[str, float | None]:
    """The evaluation metrics of one split of a temporal event stream (the negatives are
    described in :mod:`shardgnn.train.temporal`; the new-node metrics are ``None`` when no event
    of the split has a node unseen in training)."""
    metrics = {
        "ap": average_precision(pos, neg),
        "auc": auc(pos, neg),
        "ap_batch_mean": float(np.mean(batch_ap)) if batch_ap else float("nan"),
        "ap_historical": average_precision(pos, neg_hist),
        "auc_historical": auc(pos, neg_hist),
        "ap_new_nodes": average_precision(pos[new], neg[new]) if new.any() else None,
        "auc_new_nodes": auc(pos[new], neg[new]) if new.any() else None,
        "new_node_events": int(new.sum()),
    }
    return metrics


def metrics_of_shares(
    comm: Communicator, pos: np.ndarray, neg: np.ndarray, hits_at: tuple[int, ...]
) -> dict[str, float]:
    """The link metrics over the scores of every rank's share of a split's pairs (rank order is
    the split's pair order; collective: every rank gets the same metrics)."""
    world = comm.world_size
    pos_t = torch.from_numpy(np.ascontiguousarray(pos, dtype=np.float32))
    neg_t = torch.from_numpy(np.ascontiguousarray(neg, dtype=np.float32))
    all_pos = torch.cat(comm.all_to_all([pos_t] * world, "eval"))
    all_neg = torch.cat(comm.all_to_all([neg_t] * world, "eval"))
    return link_metrics(all_pos.numpy(), all_neg.numpy(), hits_at)


class AnswerIndex:
    """For every query ``(anchor, relation, direction)``, the set of entities known to answer it:
    a CSR over sorted query keys (``direction`` 0 asks for tails, 1 for heads)."""

    def __init__(self, triples_T3: np.ndarray, num_entities: int, num_relations: int):
        self.num_entities, self.num_relations = num_entities, num_relations
        keys, answers = self._queries(triples_T3)
        order = np.lexsort((answers, keys))
        self.keys, self.answers = keys[order], answers[order]

    @classmethod
    def of_sorted(
        cls, keys: np.ndarray, answers: np.ndarray, num_entities: int, num_relations: int
    ) -> "AnswerIndex":
        """The index of another's ``keys`` and ``answers`` (sorted by key, then answer)."""
        index = cls.__new__(cls)
        index.num_entities, index.num_relations = num_entities, num_relations
        index.keys, index.answers = keys, answers
        return index

    def _key(self, anchor: np.ndarray, relation: np.ndarray, direction: np.ndarray) -> np.ndarray:
        return (direction * self.num_relations + relation) * self.num_entities + anchor

    def _queries(self, triples_T3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        anchor, relation, answer, direction = both_directions(triples_T3)
        return self._key(anchor, relation, direction), answer

    def mask(self, anchor: np.ndarray, relation: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """``[Q, N]`` bool: True where the entity is a known answer of the query."""
        keys = self._key(anchor, relation, direction)
        lo = np.searchsorted(self.keys, keys, side="left")
        hi = np.searchsorted(self.keys, keys, side="right")
        out = np.zeros((len(keys), self.num_entities), dtype=bool)
        rows = np.repeat(np.arange(len(keys)), hi - lo)
        # positions lo..hi-1 of every row, flattened
        starts = np.repeat(lo - np.r_[0, np.cumsum(hi - lo)[:-1]], hi - lo)
        out[rows, self.answers[starts + np.arange(rows.size)]] = True
        return out


def both_directions(triples_T3: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(anchor, relation, answer, direction)`` of the ``2T`` queries of ``T`` triples: tail
    queries ``(h, r, ?)`` then head queries ``(?, r, t)``."""
    h, r, t = (triples_T3[:, i].astype(np.int64) for i in range(3))
    n = len(h)
    return (
        np.concatenate([h, t]),
        np.concatenate([r, r]),
        np.concatenate([t, h]),
        np.repeat(np.array([0, 1], dtype=np.int64), n),
    )


def split_spec(link: LinkConfig) -> LinkSplitSpec:
    """The edge split ``link`` (a :class:`~shardgnn.train.settings.LinkConfig`) asks for."""
    return LinkSplitSpec(
        val=link.val, test=link.test, eval_negatives=link.eval_negatives, seed=link.split_seed
    )


def link_record(split: LinkSplit, last_metrics: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The ``link`` entry of the results: the split's sizes and the last metrics of each split."""
    sizes = split.sizes()
    return {
        "edges": f"{sizes['train_edges']} / {sizes['val_edges']} / {sizes['test_edges']}",
        "symmetric": split.symmetric,
        "val": last_metrics.get("val", {}),
        "test": last_metrics.get("test", {}),
    }


def link_dataset_record(graph, spec: str | None, split: LinkSplit) -> dict[str, Any]:
    """What results and checkpoints record of a link-prediction dataset in one process: the
    whole graph's record (:func:`~shardgnn.train.setup.dataset_record`), the split's sizes and
    whether the graph is symmetric."""
    from shardgnn.train.setup import dataset_record

    record = dataset_record(graph, spec)
    record.update(split.sizes())
    record["symmetric"] = split.symmetric
    return record
