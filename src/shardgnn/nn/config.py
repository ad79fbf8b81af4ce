"""The model's settings (imports nothing heavy: the command line is built from it)."""

from __future__ import annotations

import dataclasses
import os

from shardgnn.options import check_choices, check_types, invalid, option

MODELS = (
    "sage",
    "gcn",
    "gat",
    "gatv2",
    "gin",
    "gine",
    "appnp",
    "sgc",
    "rgcn",
    "hetero-sage",
    "hgt",
    "tgn",
    "jodie",
    "tgat",
    "tgcn",
    "surel",
)
WALK_MODELS = ("surel",)
"""link predictors that read random walks from the query's endpoints, not node rows"""
RELATIONAL_PREDICTORS = ("distmult", "transe", "rotate", "complex")
"""scorers of (head, relation, tail) triples (a relational dataset, ``--task link``)"""
PREDICTORS = ("auto", "dot", "mlp", *RELATIONAL_PREDICTORS)
LINK_LOSSES = ("bce", "margin", "softmax")
TYPED_MODELS = ("rgcn", "hetero-sage", "hgt")
"""models that need typed edges (a relational dataset)"""
TEMPORAL_MODELS = ("tgn", "jodie", "tgat", "tgcn")
"""models of timestamped events (a temporal dataset, ``--task link``)"""
SNAPSHOT_MODELS = ("tgcn",)
"""temporal models that train on discrete snapshots (the others stream events)"""
GRAPH_MODELS = ("gin", "gine")
"""models of graph-level training (a graph set, ``--task graph``); gine also reads edge features"""
EDGE_FEATURE_MODELS = ("gine",)
"""models that read edge features: on a graph set, each batch's edge rows; on one large graph
(node classification), every sampled block's or the whole graph's ``edge_attr_ED``"""
SPARSE_INPUT_MODELS = ("sage", "gcn", "gat", "gatv2", "gin", "appnp", "sgc")
"""models whose first layer multiplies a sparse COO input by its non-zeros
(:func:`shardgnn.nn.functional.linear`): mini-batches of mostly-zero features reach them sparse"""
READOUTS = ("sum", "mean", "max", "attention")
"""how a graph-level model turns a graph's node rows into one row (``--readout``)"""


def is_user_model(model: str) -> bool:
    """Whether ``--model`` names a model of the user's (``package.module:Class`` or
    ``path/to/file.py:Class``, :mod:`shardgnn.nn.user`) instead of a built-in one."""
    module, sep, name = model.rpartition(":")
    return bool(sep and module and name.isidentifier())


@dataclasses.dataclass(kw_only=True)
class ModelConfig:
    """Model architecture."""

    model: str = option(
        "sage",
        choices=MODELS,
        accepts=(is_user_model, "MODULE:CLASS"),
        help="layer type: sage (GraphSAGE-mean), gcn, gat, gatv2 (dynamic attention, Brody et "
        "al.), gin (graph isomorphism network: sum aggregation and a 2-layer MLP), gine (GIN "
        "with edge features: graph sets, and node classification on a graph with edge "
        "features), appnp (an MLP, then --layers steps of "
        "personalised-PageRank propagation), sgc (--layers GCN propagation steps, then one "
        "linear layer); typed "
        "graphs: rgcn (one weight per relation and direction, Schlichtkrull et al.), "
        "hetero-sage (a GraphSAGE aggregator per relation, summed per destination type) or "
        "hgt (heterogeneous graph transformer: per-type keys, queries and values, per-relation "
        "attention, --heads); "
        "temporal graphs (--task link): tgn (node memory + attention over recent events),"
        " jodie (node memory projected in time), tgat (attention over sampled earlier "
        "events, no memory) or tgcn (a GCN per snapshot feeding a GRU per node: discrete-"
        "time snapshots); link prediction on a plain graph: surel (random walks from both "
        "endpoints of a query, relative positional encoding, a set encoder; Yin et al. 2022); "
        "or a model of your own: package.module:Class or "
        "path/to/file.py:Class (its contract: README, Your own model)",
    )
    hidden: int = option(256, help="hidden width (gat, gatv2: per head)")
    num_layers: int | None = option(
        None,
        flag="--layers",
        help="message-passing layers (unset: one per fanout in mini-batch mode, 2 in "
        "full-graph mode)",
    )
    dropout: float = option(0.5, help="dropout on the hidden representations between layers")
    input_dropout: float = option(
        0.0, help="dropout on the input features (Kipf & Welling's GCN: 0.5)"
    )
    heads: int = option(4, help="attention heads (gat, gatv2, hgt)")
    attention_dropout: float = option(
        0.0,
        help="gat, gatv2: dropout on the normalised attention coefficients (the GAT paper's "
        "0.6; torch's generator, not keyed by node: one process or mini-batch workers)",
    )
    readout: str = option(
        "sum",
        choices=READOUTS,
        help="--task graph: how a graph's node rows become one row: sum, mean, max, or "
        "attention (softmax-weighted sum, the weights a learnt gate per node)",
    )
    alpha: float = option(0.1, help="appnp: the teleport probability of each propagation step")
    num_bases: int = option(
        0,
        help="rgcn: basis matrices shared by all relations, each relation's weight a learnt mix "
        "of them (basis decomposition; 0: one full matrix per relation)",
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        where, _, name = self.model.rpartition(":")
        if is_user_model(self.model) and where.endswith(".py"):
            # workers (and a resumed run) import the file again, from wherever they start
            self.model = f"{os.path.abspath(os.path.expanduser(where))}:{name}"
        for name in ("hidden", "heads"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.num_bases < 0:
            raise invalid(self, "num_bases", "must be >= 0")
        if self.num_layers is not None and self.num_layers < 1:
            raise invalid(self, "num_layers", "must be >= 1")
        if not 0.0 < self.alpha < 1.0:
            raise invalid(self, "alpha", "a probability in (0, 1)")
        for name in ("dropout", "input_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise invalid(self, name, "a probability in [0, 1)")
