"""Distributed full-graph training settings (imports nothing heavy: the command line is built from
them)."""

from __future__ import annotations

import dataclasses

from shardgnn.distributed.config import BITS, HOST_SHARING
from shardgnn.options import check_choices, check_types, invalid, option
from shardgnn.partition.config import METHODS_ELSEWHERE
from shardgnn.store.cache.config import parse_cache_size
from shardgnn.store.config import check_historical

SPMM_VARIANTS = ("1d", "1d-sparse", "vertex-cut", "1.5d", "2d", "3d")
DEPENDENCIES = ("communicate", "cache", "hybrid")
"""how ``1d-sparse`` gets the rows of remote neighbours (:mod:`shardgnn.fullgraph.dependencies`)"""
DEPENDENCY_MODELS = ("gcn", "sage", "gin")
"""the models ``--dependencies cache/hybrid`` runs: stacked layers whose rows depend on their
in-neighbours' rows of the layer below only (APPNP and SGC mix in the input rows at every step;
the halo-row models read edges over the exchanged rows themselves)"""
GRID_VARIANTS = ("2d", "3d")
"""the variants that multiply blocks of a process grid (``shardgnn.fullgraph.shard.BlockGrid``)"""


def strategy_label(spmm: str, layout: str, dependencies: str = "communicate") -> str:
    """How tables, plots and ``--spmm auto`` name a full-graph strategy: its ``--spmm``, then
    its replication or grid (``layout``), or how it gets remote dependencies."""
    if dependencies != "communicate":
        return f"{spmm} --dependencies {dependencies}"
    return spmm + (f" {layout}" if layout else "")


@dataclasses.dataclass(kw_only=True)
class FullGraphConfig:
    """Distributed full-graph training (``--mode full`` with several workers)."""

    spmm: str = option(
        "1d-sparse",
        choices=(*SPMM_VARIANTS, "auto"),
        also_called={"sparse": ("1d-sparse",), "vertexcut": ("vertex-cut",), "summa": ("2d",)},
        help=(
            "distributed SpMM: 1d broadcasts every block, 1d-sparse moves only the rows each "
            "worker needs, vertex-cut moves for each crossing edge its source row or its share "
            "of the destination's sum, whichever crosses fewer rows, 1.5d replicates row blocks "
            "--replication times (CAGNET), 2d splits the adjacency over a grid of workers (rows "
            "of the grid x columns), 3d adds layers that split the feature columns"
        ),
    )
    replication: int = option(1, help="1.5d replication factor (divides --workers)")
    grid_rows: int = option(0, help="2d, 3d: rows of the process grid (0: the most square grid)")
    grid_layers: int = option(
        0, help="3d: layers of the process grid, each multiplying 1/L of the feature columns "
        "(divides --workers; 0: chosen, 2 x 2 x 2 for 8)"
    )  # fmt: skip
    bits: int = option(
        32,
        choices=BITS,
        help="bits per value of exchanged features and feature gradients (32: exact)",
    )
    staleness: int = option(
        0, help="1d-sparse: epochs halo rows may lag, so exchanges overlap compute (0: synchronous)"
    )
    dependencies: str = option(
        "communicate",
        choices=DEPENDENCIES,
        help=(
            "1d-sparse: how a worker gets each layer's rows of remote neighbours (NeutronStar): "
            "communicate them every step; cache every remote node they depend on within the "
            "model's layers (features fetched once) and recompute their rows, no exchange per "
            "step; hybrid: per remote node, whichever the cost model predicts is cheaper, from "
            "the machine rates of --plan-rates"
        ),
    )

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.replication < 1:
            raise invalid(self, "replication", "must be >= 1")
        if self.replication > 1 and self.spmm != "1.5d":
            raise invalid(self, "replication", f"needs --spmm 1.5d (got --spmm {self.spmm})")
        if self.grid_rows < 0:
            raise invalid(self, "grid_rows", "must be >= 0")
        if self.grid_rows and self.spmm not in GRID_VARIANTS:
            raise invalid(self, "grid_rows", f"needs --spmm 2d or 3d (got --spmm {self.spmm})")
        if self.grid_layers < 0:
            raise invalid(self, "grid_layers", "must be >= 0")
        if self.grid_layers and self.spmm != "3d":
            raise invalid(self, "grid_layers", f"needs --spmm 3d (got --spmm {self.spmm})")
        if self.staleness < 0:
            raise invalid(self, "staleness", "must be >= 0")
        if self.dependencies != "communicate" and (self.spmm != "1d-sparse" or self.staleness):
            raise invalid(
                self,
                "dependencies",
                "needs --spmm 1d-sparse and --staleness 0: it decides, per remote neighbour, "
                f"between that exchange and recomputing (got --spmm {self.spmm}"
                + (f", --staleness {self.staleness})" if self.staleness else ")"),
            )
        if self.staleness > 0 and self.spmm != "1d-sparse":
            raise invalid(
                self,
                "staleness",
                "needs --spmm 1d-sparse: stale halo rows are the point-to-point rows of "
                "the sparsity-aware exchange",
            )


PLANNED_MODELS = ("gcn", "sage", "gin", "appnp", "sgc")
"""the models whose layers `shardgnn plan` prices (and ``--cache-policy auto`` picks for)"""


@dataclasses.dataclass(kw_only=True)
class PlanConfig:
    """``shardgnn plan``: the bytes and memory of every full-graph strategy at many worker counts
    (:mod:`shardgnn.fullgraph.plan`)."""

    dataset: str = option("synthetic", cli=False, help="dataset spec")
    data_dir: str | None = option(None, help="dataset folder")
    workers: tuple[int, ...] = option(
        (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
        metavar="P,P,...",
        help="worker counts to plan for",
    )
    method: str = option(
        "metis",
        choices=("metis", "random", "hdrf", "2d-hash"),
        also_called=METHODS_ELSEWHERE,
        help="partitioner of every worker count (metis balancing node counts; hdrf and 2d-hash "
        "place the edges too, which --spmm vertex-cut follows)",
    )
    model: str = option(
        "sage",  # `shardgnn train`'s default model: plan what train runs unless told otherwise
        choices=PLANNED_MODELS,
        help="the model whose layers are planned",
    )
    hidden: int = option(256, help="hidden width")
    layers: int = option(2, help="message-passing layers")
    dropout: float = option(
        0.5, help="the model's dropout between layers (its masks are kept for backward)"
    )
    input_dropout: float = option(0.0, help="the model's dropout on the input features")
    bits: int = option(32, choices=BITS, help="bits per exchanged value (32: exact)")
    seed: int = option(0, help="partitioner seed")
    calibrate: bool = option(
        False,
        help="measure this machine's rates first (SpMM, linear layers, element-wise work, Adam, "
        "and the link between two workers; about 20 s, 40 s with mini-batch training) and predict "
        "every strategy's epoch time; the pick becomes the fastest predicted strategy",
    )
    rates: str | None = option(
        None,
        metavar="FILE",
        help="predict epoch times with the rates an earlier `shardgnn plan --calibrate --out "
        "FILE` measured (the same model's layers and worker counts)",
    )
    workers_per_host: int = option(
        1,
        help="with --calibrate/--rates: workers sharing one machine's cores and link (1: a "
        "machine per worker; --workers-per-host P: every worker on this machine)",
    )
    link: str | None = option(
        None,
        metavar="FILE",
        help="with --calibrate: the link measured between two machines (`torchrun --nnodes 2 "
        "--nproc-per-node 1 ... -m shardgnn.fullgraph.rates --out FILE`) instead of two "
        "workers on this one",
    )
    link_gbit: float = option(
        0.0,
        help="with --calibrate/--rates: plan for a link of this many Gbit/s each way instead of "
        "the measured one (0: measured)",
    )
    latency_us: float = option(
        0.0,
        help="with --calibrate/--rates: plan for this many microseconds per peer of every "
        "collective call instead of the measured latency (0: measured)",
    )
    strategies: str = option(
        "all",
        choices=("all", "full", "minibatch"),
        help="what to plan: full-graph strategies (every --spmm), mini-batch training (exact, "
        "8-bit and cached rows, sampled here as the workers would), or both",
    )
    fanouts: tuple[int, ...] | None = option(
        None,
        metavar="K,K,...",
        help="mini-batch: neighbours sampled per layer, the seeds' hop first, as `shardgnn train "
        "--fanouts` (unset: 10 per --layers)",
    )
    batch_size: int | None = option(
        None,
        help="mini-batch: seed nodes per step over all workers (unset: as `shardgnn train` "
        "chooses for the dataset's training nodes)",
    )
    cache_size: str | None = option(
        None,
        help="mini-batch: the presample cache planned beside exact rows (a percentage of the "
        "nodes, rows or bytes, as `shardgnn train --cache-size`; unset: its default)",
    )
    historical: str | None = option(
        None,
        metavar="L:AGE",
        help="mini-batch: also plan historical embeddings, as `shardgnn train --historical L:AGE` "
        "(the default --historical-push-every AGE): rows serving remote nodes (DistGNN-MB) and "
        "rows serving every node outside a batch's layer (--historical-scope all), each with "
        "owners pushing what they computed and with workers pulling what they read "
        "(--historical-mode push and pull)",
    )
    host_sharing: str | None = option(
        None,
        choices=HOST_SHARING,
        help="mini-batch, with --workers-per-host above 1: as `shardgnn train --host-sharing` "
        "(unset: auto, its default): auto plans the reads of rows owned on the same machine "
        "from the mapped partition files (no bytes, no collective where every owner is on it; "
        "no cache: nothing would be fetched), off plans every remote row through the "
        "collectives",
    )
    memory_mb: float | None = option(
        None,
        metavar="MB",
        help="each worker's memory: a strategy or option whose busiest worker would keep more "
        "(held MB + activations MB) is never the pick (marked 'over memory')",
    )
    out: str | None = option(None, help="also write every cost as JSON here")

    def __post_init__(self) -> None:
        check_types(self)
        check_choices(self)
        if self.memory_mb is not None and not self.memory_mb > 0:
            raise invalid(self, "memory_mb", "must be > 0 (MB per worker)")
        if self.latency_us < 0:
            raise invalid(self, "latency_us", "must be >= 0 (0: the measured latency)")
        if self.latency_us and not (self.calibrate or self.rates):
            raise invalid(
                self, "latency_us", "applies to epoch times: add --calibrate or --rates FILE"
            )
        if self.calibrate and self.rates:
            raise invalid(self, "rates", "measured rates or --calibrate, not both")
        timed = self.calibrate or self.rates
        if self.workers_per_host < 1:
            raise invalid(self, "workers_per_host", "must be >= 1")
        if self.workers_per_host != 1 and not timed:
            raise invalid(
                self, "workers_per_host", "applies to epoch times: add --calibrate or --rates FILE"
            )
        if self.link and not self.calibrate:
            raise invalid(self, "link", "applies to a calibration: add --calibrate")
        if self.link and self.link_gbit:
            raise invalid(self, "link_gbit", "a measured link (--link) or a given one, not both")
        if self.link_gbit < 0:
            raise invalid(self, "link_gbit", "must be >= 0 (0: the measured link)")
        if self.link_gbit and not timed:
            raise invalid(
                self, "link_gbit", "applies to epoch times: add --calibrate or --rates FILE"
            )
        if not self.workers or min(self.workers) < 1:
            raise invalid(self, "workers", "must be worker counts >= 1, e.g. 2,4,8")
        if len(set(self.workers)) != len(self.workers):
            raise invalid(self, "workers", "names a worker count twice; give each once")
        if self.hidden < 1:
            raise invalid(self, "hidden", "must be >= 1")
        if self.layers < 1:
            raise invalid(self, "layers", "must be >= 1")
        minibatch = ("fanouts", "batch_size", "cache_size", "historical", "host_sharing")
        for name in minibatch:
            if getattr(self, name) is not None and self.strategies == "full":
                raise invalid(self, name, "plans mini-batch training: drop --strategies full")
        if self.host_sharing is not None and self.workers_per_host == 1:
            raise invalid(
                self,
                "host_sharing",
                "applies where workers share a machine: add --workers-per-host N (N > 1)",
            )
        if self.fanouts is not None and (len(self.fanouts) != self.layers or min(self.fanouts) < 1):
            raise invalid(
                self, "fanouts", f"must be {self.layers} positive counts, one per --layers"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise invalid(self, "batch_size", "must be >= 1")
        if self.cache_size is not None:  # refused here, not after partitioning and calibrating
            parse_cache_size(self.cache_size)
        if self.historical is not None:
            check_historical(self.historical, self.model, self.layers)

    @property
    def minibatch_fanouts(self) -> tuple[int, ...]:
        """The mini-batch plan's fanouts (10 per layer unless given)."""
        return self.fanouts if self.fanouts is not None else (10,) * self.layers
