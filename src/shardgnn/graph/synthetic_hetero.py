"""The built-in heterogeneous dataset: an academic graph of papers, authors, institutions and
fields, with typed power-law edges and paper topics to learn.

Node types and relations::

    author  -writes->          paper        (about `authors_per_paper` per paper)
    paper   -cites->           paper        (about `citations` per paper)
    paper   -has_topic->       field        (1 to 3 per paper)
    author  -affiliated_with-> institution  (one per author)

Only papers have features (class signal + noise at `snr`, as the homogeneous generator); the
other types are featureless (models give them learnt rows). Every paper has a topic (its label;
``labels=multilabel``, ``regression`` or ``multitask`` derive a table of labels from it as the
homogeneous generator does, :func:`~shardgnn.graph.synthetic.community_labels`).
Authors and fields have a topic too, hidden: with probability `homophily` a paper cites a paper,
is written by authors and sits in fields of its own topic, otherwise anything. So a paper's
topic is readable from its features weakly and from its typed neighbourhood (its authors' other
papers, its fields) strongly: a relational model beats a feature-only one by a clear margin.

Popularity is power-law (Pareto weights with `exponent`) for cited papers, authors,
institutions and fields, so degrees are skewed per relation as in real bibliographic graphs.
Every array comes from one seeded generator in a fixed order: the same spec gives the same graph.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardgnn.graph.spec_options import SpecOptions
from shardgnn.graph.split import fraction_split
from shardgnn.graph.synthetic import community_labels, label_option_checks
from shardgnn.graph.typed import TypedGraph

PAPER, AUTHOR, INSTITUTION, FIELD = "paper", "author", "institution", "field"
RELATIONS = (
    (AUTHOR, "writes", PAPER),
    (PAPER, "cites", PAPER),
    (PAPER, "has_topic", FIELD),
    (AUTHOR, "affiliated_with", INSTITUTION),
)


@dataclasses.dataclass(kw_only=True)
class AcademicConfig(SpecOptions):
    """Parameters of the academic graph (each is a ``synthetic-hetero:key=value`` option)."""

    papers: int = 50_000
    authors: int = 40_000
    institutions: int = 500
    fields: int = 200
    classes: int = 8
    features: int = 64
    citations: float = 8.0
    authors_per_paper: float = 3.0
    homophily: float = 0.5
    exponent: float = 2.5
    snr: float = 0.5
    train: float = 0.1
    val: float = 0.1
    seed: int = 0
    labels: str = "class"
    """what a paper's label is: its topic (``class``), or a table derived from the topic
    (``multilabel``, ``regression``, ``multitask``; as ``synthetic:labels=...``)"""
    label_columns: int = 0
    """labels or targets per paper (0: 128 labels, 1 target; multitask: 16 tags)"""

    def __post_init__(self) -> None:
        checks = [
            (self.papers >= 2 and self.authors >= 1, "papers >= 2 and authors >= 1"),
            (self.institutions >= 1, "institutions >= 1"),
            (self.fields >= self.classes >= 1, "fields >= classes >= 1"),
            (self.features >= 1, "features >= 1"),
            (
                self.citations >= 0 and self.authors_per_paper >= 1,
                "citations >= 0 and authors_per_paper >= 1",
            ),
            (0.0 <= self.homophily <= 1.0, "homophily in [0, 1]"),
            (self.exponent > 2.0, "exponent > 2"),
            (self.snr >= 0.0, "snr >= 0"),
            (
                0 < self.train and 0 <= self.val and self.train + self.val < 1,
                "train > 0, val >= 0, train + val < 1",
            ),
            (self.seed >= 0, "seed >= 0"),
            *label_option_checks(self.labels, self.label_columns),
        ]
        self.refuse_broken("synthetic-hetero", checks)


def _pareto_weights(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    theta = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))
    return np.minimum(theta, np.sqrt(n) * 10)


class _TopicSampler:
    """Draw nodes proportional to their weights, either among one topic's nodes or among all."""

    def __init__(self, weights: np.ndarray, topic: np.ndarray, classes: int):
        self.order = np.argsort(topic, kind="stable")
        self.cum_sorted = np.cumsum(weights[self.order])
        self.cum_all = np.cumsum(weights)
        counts = np.bincount(topic, minlength=classes)
        ends = np.cumsum(counts)
        hi = np.where(ends > 0, self.cum_sorted[np.maximum(ends - 1, 0)], 0.0)
        self.mass = np.where(counts > 0, hi - np.concatenate([[0.0], hi[:-1]]), 0.0)
        self.lo = hi - self.mass

    def draw(self, rng: np.random.Generator, topics: np.ndarray, homophily: float) -> np.ndarray:
        r = rng.random(topics.size)
        same = (rng.random(topics.size) < homophily) & (self.mass[topics] > 0)
        last = self.order.size - 1
        inside = self.order[
            np.minimum(
                np.searchsorted(self.cum_sorted, self.lo[topics] + r * self.mass[topics], "right"),
                last,
            )
        ]
        anywhere = np.minimum(np.searchsorted(self.cum_all, r * self.cum_all[-1], "right"), last)
        return np.where(same, inside, anywhere)


def generate_academic(config: AcademicConfig | None = None) -> TypedGraph:
    """Generate the academic graph ``config`` describes (defaults: 50k papers, 40k authors)."""
    cfg = config or AcademicConfig()
    rng = np.random.default_rng(cfg.seed)
    k = cfg.classes
    topic = {
        PAPER: rng.integers(0, k, cfg.papers),
        AUTHOR: rng.integers(0, k, cfg.authors),
        FIELD: np.arange(cfg.fields) % k,  # every topic has fields
    }
    weight = {t: _pareto_weights(rng, len(v), cfg.exponent) for t, v in topic.items()}
    sampler = {t: _TopicSampler(weight[t], topic[t], k) for t in topic}

    # author -writes-> paper: 1 + Poisson(authors_per_paper - 1) authors per paper
    per_paper = 1 + rng.poisson(cfg.authors_per_paper - 1, cfg.papers)
    written = np.repeat(np.arange(cfg.papers), per_paper)
    writers = sampler[AUTHOR].draw(rng, topic[PAPER][written], cfg.homophily)
    # paper -cites-> paper: Poisson(citations) per citing paper, cited by popularity and topic
    citing = np.repeat(np.arange(cfg.papers), rng.poisson(cfg.citations, cfg.papers))
    cited = sampler[PAPER].draw(rng, topic[PAPER][citing], cfg.homophily)
    # paper -has_topic-> field: 1 to 3 per paper
    tagged = np.repeat(np.arange(cfg.papers), rng.integers(1, 4, cfg.papers))
    fields = sampler[FIELD].draw(rng, topic[PAPER][tagged], cfg.homophily)
    # author -affiliated_with-> institution: one each, by popularity
    inst_cum = np.cumsum(_pareto_weights(rng, cfg.institutions, cfg.exponent))
    institution = np.minimum(
        np.searchsorted(inst_cum, rng.random(cfg.authors) * inst_cum[-1], "right"),
        cfg.institutions - 1,
    )

    def unique_pairs(src: np.ndarray, dst: np.ndarray, n_dst: int, no_loops: bool = False):
        keep = src != dst if no_loops else np.ones(src.size, bool)
        keys = np.unique(src[keep].astype(np.int64) * n_dst + dst[keep])
        return keys // n_dst, keys % n_dst

    edges = {
        RELATIONS[0]: unique_pairs(writers, written, cfg.papers),
        RELATIONS[1]: unique_pairs(citing, cited, cfg.papers, no_loops=True),
        RELATIONS[2]: unique_pairs(tagged, fields, cfg.fields),
        RELATIONS[3]: (np.arange(cfg.authors), institution),
    }
    means = rng.standard_normal((k, cfg.features), dtype=np.float32)
    means *= np.float32(cfg.snr / np.sqrt(cfg.features))
    x = rng.standard_normal((cfg.papers, cfg.features), dtype=np.float32)
    x += means[topic[PAPER]]
    train_idx, val_idx, test_idx = fraction_split(cfg.papers, cfg.train, cfg.val, seed=cfg.seed + 1)
    # class labels (the default) are not spelled: specs of class-labelled graphs are as before
    spec = "synthetic-hetero:" + ",".join(
        f"{f.name}={getattr(cfg, f.name)}"
        for f in dataclasses.fields(cfg)
        if cfg.labels != "class" or f.name not in ("labels", "label_columns")
    )
    return TypedGraph.from_typed_edges(
        {PAPER: cfg.papers, AUTHOR: cfg.authors, INSTITUTION: cfg.institutions, FIELD: cfg.fields},
        edges,
        x={PAPER: x},
        target_type=PAPER,
        **community_labels(
            topic[PAPER].astype(np.int64), k, cfg.labels, cfg.label_columns, cfg.seed
        ),
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=test_idx,
        name=spec,
    )
