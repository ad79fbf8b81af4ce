"""The built-in synthetic dataset: a degree-corrected stochastic block model with power-law
degrees, classes of tunable homophily, and features = class signal + noise.

The features alone are a weak signal (an MLP does poorly), but neighbours of a node mostly share
its class, so averaging over neighbourhoods (what a GNN does) recovers the label: a 2-layer GNN
beats an MLP by a clear margin. Every array is drawn from one seeded ``numpy`` generator in a
fixed order, so the same config gives the same graph on every machine and thread count.

Edge generation (``m = nodes * degree / 2`` undirected pairs, vectorised):
  1. node weights ``theta ~ Pareto(exponent)`` (power-law expected degrees), capped;
  2. one endpoint ``u`` drawn with probability proportional to ``theta``;
  3. with probability ``homophily`` the other endpoint is drawn proportional to ``theta`` among
     nodes of ``u``'s class, otherwise among all nodes;
  4. self-loops dropped, duplicates merged, the result symmetrised. A second round tops up the
     pairs lost to duplicates so the edge count lands within a few percent of the target.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.csr import LABEL_KINDS, Graph, index_dtype
from shardgnn.graph.split import fraction_split


@dataclasses.dataclass(kw_only=True)
class SyntheticConfig:
    """Parameters of the synthetic graph (each is a ``synthetic:key=value`` spec option)."""

    nodes: int = 100_000
    """number of nodes"""
    degree: float = 20.0
    """target average in-degree of the final (symmetric) graph: edges ~= nodes * degree"""
    classes: int = 8
    """number of label classes"""
    features: int = 64
    """feature dimension"""
    homophily: float = 0.7
    """probability that an edge is drawn inside its first endpoint's class"""
    exponent: float = 2.5
    """power-law exponent of the expected-degree distribution (> 2)"""
    snr: float = 1.0
    """class-signal to noise ratio of the features (an MLP's accuracy grows with it)"""
    train: float = 0.1
    """fraction of nodes in the training split"""
    val: float = 0.1
    """fraction of nodes in the validation split (the rest is test)"""
    seed: int = 0
    """random seed: same seed, same graph"""
    labels: str = "class"
    """what a node's label is: ``class`` (its community), ``multilabel`` (0/1 labels drawn with
    per-community probabilities), ``regression`` (real targets: a per-community mean plus
    noise of standard deviation 0.5, so R² can reach 0.8) or ``multitask`` (three tasks:
    ``community`` (its class), ``tags`` (multi-label) and ``score`` (one regression target))"""
    label_columns: int = 0
    """labels (``multilabel``, and ``multitask``'s tags) or targets (``regression``) per node;
    0: 128 labels (16 tags), 1 target"""
    edge_features: int = 0
    """edge feature dimension (0: none). With edge features the class signal moves from the
    nodes to the edges, a task with a known answer: every edge's features are its destination's
    class mean (at ``snr``) plus unit noise, node features are noise only, so a model that reads
    edge features (``--model gine``) learns the classes and one that does not stays at chance"""

    def __post_init__(self) -> None:
        checks = [
            (self.nodes >= 2, f"nodes={self.nodes} must be >= 2"),
            (
                0 < self.degree < self.nodes,
                f"degree={self.degree} must lie in (0, nodes={self.nodes})",
            ),
            (
                1 <= self.classes <= self.nodes,
                f"classes={self.classes} must lie in [1, nodes={self.nodes}]",
            ),
            (self.features >= 1, f"features={self.features} must be >= 1"),
            (0.0 <= self.homophily <= 1.0, f"homophily={self.homophily} must lie in [0, 1]"),
            (self.exponent > 2.0, f"exponent={self.exponent} must be > 2 (finite mean degree)"),
            (self.snr >= 0.0, f"snr={self.snr} must be >= 0"),
            (
                0 < self.train and 0 <= self.val and self.train + self.val < 1,
                f"train={self.train}, val={self.val} must be positive with train + val < 1",
            ),
            (self.seed >= 0, f"seed={self.seed} must be >= 0"),
            *label_option_checks(self.labels, self.label_columns),
            (self.edge_features >= 0, f"edge_features={self.edge_features} must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise DatasetError(f"synthetic dataset: {message}")

    @classmethod
    def from_spec(cls, spec) -> "SyntheticConfig":
        """Read options from a parsed :class:`~shardgnn.graph.datasets.DatasetSpec`."""
        d = cls.__dataclass_fields__
        cfg = cls(
            nodes=spec.take_int("nodes", d["nodes"].default, minimum=2),
            degree=spec.take_float("degree", d["degree"].default, lo=0),
            classes=spec.take_int("classes", d["classes"].default, minimum=1),
            features=spec.take_int("features", d["features"].default, minimum=1),
            homophily=spec.take_float("homophily", d["homophily"].default, lo=0, hi=1),
            exponent=spec.take_float("exponent", d["exponent"].default, lo=2),
            snr=spec.take_float("snr", d["snr"].default, lo=0),
            train=spec.take_float("train", d["train"].default, lo=0, hi=1),
            val=spec.take_float("val", d["val"].default, lo=0, hi=1),
            seed=spec.take_int("seed", d["seed"].default, minimum=0),
            labels=spec.take_str("labels", d["labels"].default),
            label_columns=spec.take_int("label_columns", d["label_columns"].default, minimum=0),
            edge_features=spec.take_int("edge_features", d["edge_features"].default, minimum=0),
        )
        spec.finish()
        return cfg

    def spec(self, *, short: bool = False) -> str:
        """The spec string that reproduces this config; ``short``: only the options that differ
        from their defaults, what a summary table or a figure's title shows (records keep the
        long form)."""
        default = type(self)()

        def spelled(name: str) -> bool:
            if short:
                return getattr(self, name) != getattr(default, name)
            # class labels and no edge features (the defaults) are not spelled: specs of such
            # graphs are as before
            return (self.labels != "class" or name not in ("labels", "label_columns")) and bool(
                self.edge_features or name != "edge_features"
            )

        fields = dataclasses.fields(self)
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields if spelled(f.name)]
        return "synthetic" + (":" + ",".join(parts) if parts else "")


def _draw_pairs(
    rng: np.random.Generator,
    m: int,
    y: np.ndarray,
    cum_all: np.ndarray,
    order: np.ndarray,
    cum_sorted: np.ndarray,
    class_lo: np.ndarray,
    class_mass: np.ndarray,
    homophily: float,
) -> tuple[np.ndarray, np.ndarray]:
    total = cum_all[-1]
    u = np.searchsorted(cum_all, rng.random(m) * total, side="right")
    same = rng.random(m) < homophily
    r = rng.random(m)
    # Inside-class draw: a point in the class's slice of the class-sorted cumulative weights.
    cls = y[u]
    inside = order[
        np.minimum(
            np.searchsorted(cum_sorted, class_lo[cls] + r * class_mass[cls], side="right"),
            order.size - 1,
        )
    ]
    anywhere = np.searchsorted(cum_all, r * total, side="right")
    v = np.where(same, inside, anywhere)
    np.minimum(u, cum_all.size - 1, out=u)
    np.minimum(v, cum_all.size - 1, out=v)
    return u, v


def generate(config: SyntheticConfig | None = None) -> Graph:
    """Generate the synthetic graph described by ``config`` (defaults: 100k nodes, degree 20)."""
    cfg = config or SyntheticConfig()
    n, rng = cfg.nodes, np.random.default_rng(cfg.seed)

    y = rng.integers(0, cfg.classes, n).astype(np.int64)
    # Power-law weights by inverse-transform sampling of a Pareto(exponent - 1) tail; capping at
    # sqrt(n * degree) keeps the expected degree of hubs below the node count.
    theta = (1.0 - rng.random(n)) ** (-1.0 / (cfg.exponent - 1.0))
    np.minimum(theta, np.sqrt(n * cfg.degree), out=theta)
    cum_all = np.cumsum(theta)
    order = np.argsort(y, kind="stable")
    cum_sorted = np.cumsum(theta[order])
    counts = np.bincount(y, minlength=cfg.classes)
    ends = np.cumsum(counts)
    class_hi = np.where(ends > 0, cum_sorted[np.maximum(ends - 1, 0)], 0.0)
    class_mass = np.where(counts > 0, class_hi - np.concatenate([[0.0], class_hi[:-1]]), 0.0)
    class_lo = class_hi - class_mass

    target_pairs = int(round(n * cfg.degree / 2))
    keys = np.empty(0, dtype=np.int64)
    for _ in range(3):  # first draw, then top up what self-loops and duplicates removed
        missing = target_pairs - keys.size
        if missing <= target_pairs * 0.005:
            break
        u, v = _draw_pairs(
            rng,
            int(missing * 1.05) + 16,
            y,
            cum_all,
            order,
            cum_sorted,
            class_lo,
            class_mass,
            cfg.homophily,
        )
        keep = u != v
        lo, hi = np.minimum(u[keep], v[keep]), np.maximum(u[keep], v[keep])
        keys = np.unique(np.concatenate([keys, lo.astype(np.int64) * n + hi]))
    if keys.size > target_pairs:  # drop a random surplus so the count is exactly the target
        keys = np.sort(rng.choice(keys, target_pairs, replace=False))
    lo, hi = keys // n, keys % n
    del keys

    # Symmetric in-edge CSR: sort both directions by (dst, src) through one int64 key.
    both = np.concatenate([hi * n + lo, lo * n + hi])
    del lo, hi
    both.sort()
    dst, src = np.divmod(both, n)
    del both
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    indices = src.astype(index_dtype(n))
    del src, dst

    # Features: a per-class mean direction scaled to the requested SNR, plus unit Gaussian noise.
    means = rng.standard_normal((cfg.classes, cfg.features), dtype=np.float32)
    means *= np.float32(cfg.snr / np.sqrt(cfg.features))
    x = rng.standard_normal((n, cfg.features), dtype=np.float32)
    edge_attr = None
    if cfg.edge_features:
        # the signal rides on the edges instead: each in-edge of v carries v's class mean
        edge_means = rng.standard_normal((cfg.classes, cfg.edge_features), dtype=np.float32)
        edge_means *= np.float32(cfg.snr / np.sqrt(cfg.edge_features))
        edge_attr = rng.standard_normal((indices.shape[0], cfg.edge_features), dtype=np.float32)
        edge_attr += edge_means[np.repeat(y, np.diff(indptr))]
    else:
        x += means[y]

    train_idx, val_idx, test_idx = fraction_split(n, cfg.train, cfg.val, seed=cfg.seed + 1)
    labels = community_labels(y, cfg.classes, cfg.labels, cfg.label_columns, cfg.seed)
    return Graph(
        indptr=indptr,
        indices=indices,
        x=x,
        train_idx=train_idx,
        val_idx=val_idx,
        test_idx=test_idx,
        name=cfg.spec(),
        edge_attr=edge_attr,
        **labels,
    )


def label_option_checks(labels: str, label_columns: int) -> list[tuple[bool, str]]:
    """``(holds, rule)`` of a generator's ``labels`` and ``label_columns`` options."""
    return [
        (
            labels in (*LABEL_KINDS, "multitask"),
            f"labels={labels} must be one of {', '.join(LABEL_KINDS)}, multitask",
        ),
        (
            label_columns >= 0 and (labels != "class" or not label_columns),
            f"label_columns={label_columns} must be >= 0 and given with labels="
            "multilabel, regression or multitask only",
        ),
    ]


def community_labels(
    community: np.ndarray, classes: int, labels: str, label_columns: int, seed: int
) -> dict:
    """``y``, ``num_classes`` and ``label_kind`` of a generated graph whose nodes belong to
    ``community`` (int64, ``classes`` of them), as option ``labels`` asks: the community itself
    (``class``), or a table derived from it (:func:`_label_table`; ``multitask``: the community,
    ``label_columns`` or 16 tags, and one score side by side)."""
    if labels == "class":
        return {"y": community, "num_classes": classes, "label_kind": "class"}
    if labels == "multitask":
        tags = label_columns or 16
        kind = f"multitask:community=class/{classes},tags=multilabel/{tags},score=regression"
        table = _label_table("multilabel", tags, classes, seed, community)
        score = _label_table("regression", 1, classes, seed, community)
        columns = [community[:, None].astype(np.float32), table, score]
        return {"y": np.hstack(columns), "num_classes": 0, "label_kind": kind}
    table = _label_table(labels, label_columns, classes, seed, community)
    return {"y": table, "num_classes": 0, "label_kind": labels}


def _label_table(
    labels: str, label_columns: int, classes: int, seed: int, community: np.ndarray
) -> np.ndarray:
    """The float32 ``[N, W]`` labels of kind ``labels`` derived from each node's community (a
    stream of its own: the graph and features are those of class labels with the same seed).
    Multi-label: label ``j`` is 1 with probability ``p[c, j]``, ``p = U(0, 1)^3`` per community
    (most labels rare, each community with a profile of its own). Regression: target ``t`` is
    ``mu[c, t] + 0.5 * noise`` with ``mu ~ N(0, 1)``."""
    rng = np.random.default_rng([seed, 1])
    n = community.shape[0]
    if labels == "multilabel":
        width = label_columns or 128
        profile = rng.random((classes, width)) ** 3
        return (rng.random((n, width)) < profile[community]).astype(np.float32)
    width = label_columns or 1
    means = rng.standard_normal((classes, width))
    return (means[community] + 0.5 * rng.standard_normal((n, width))).astype(np.float32)
