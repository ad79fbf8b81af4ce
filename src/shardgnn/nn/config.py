"""The model's settings (imports nothing heavy: the command line is built from it)."""

from __future__ import annotations

import dataclasses

from shardgnn.options import check_choices, invalid, option

MODELS = ("sage", "gcn", "gat", "rgcn", "hetero-sage", "tgn", "jodie", "tgat", "tgcn")
PREDICTORS = ("auto", "dot", "mlp", "distmult")
LINK_LOSSES = ("bce", "margin", "softmax")
RELATIONAL_MODELS = ("rgcn", "hetero-sage")
"""models that need typed edges (a relational dataset)"""
TEMPORAL_MODELS = ("tgn", "jodie", "tgat", "tgcn")
"""models of timestamped events (a temporal dataset, ``--task link``)"""
SNAPSHOT_MODELS = ("tgcn",)
"""temporal models that train on discrete snapshots (the others stream events)"""


@dataclasses.dataclass(kw_only=True)
class ModelConfig:
    """Model architecture."""

    model: str = option(
        "sage",
        choices=MODELS,
        help="layer type: sage (GraphSAGE-mean), gcn, gat; typed graphs: rgcn (one weight per "
        "relation and direction, Schlichtkrull et al.) or hetero-sage (a GraphSAGE aggregator "
        "per relation, summed per destination type); temporal graphs (--task link): tgn (node "
        "memory + attention over recent events), jodie (node memory projected in time), tgat "
        "(attention over sampled earlier events, no memory) or tgcn (a GCN per snapshot "
        "feeding a GRU per node: discrete-time snapshots)",
    )
    hidden: int = option(256, help="hidden width (for gat: per head)")
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
    heads: int = option(4, help="attention heads (gat)")
    num_bases: int = option(
        0,
        help="rgcn: basis matrices shared by all relations, each relation's weight a learnt mix "
        "of them (basis decomposition; 0: one full matrix per relation)",
    )

    def __post_init__(self) -> None:
        check_choices(self)
        for name in ("hidden", "heads"):
            if getattr(self, name) < 1:
                raise invalid(self, name, "must be >= 1")
        if self.num_bases < 0:
            raise invalid(self, "num_bases", "must be >= 0")
        if self.num_layers is not None and self.num_layers < 1:
            raise invalid(self, "num_layers", "must be >= 1")
        for name in ("dropout", "input_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise invalid(self, name, "a probability in [0, 1)")
