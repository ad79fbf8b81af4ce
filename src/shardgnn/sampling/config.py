"""Neighbour sampling settings (imports nothing heavy: the command line is built from them)."""

from __future__ import annotations

import dataclasses

from shardgnn.options import check_types, invalid, option

NEGATIVE_KINDS = ("uniform", "degree", "in-batch")

# The Triton hop kernel (shardgnn.sampling.fused) keeps a row's picks in a tile this wide; wider
# fanouts are drawn by tensor code.
FUSED_MAX_FANOUT = 256

# Mini-batches sampled per call when sampling on a GPU and --bulk-batches is unset: 8 took 17 % off
# an H100 epoch (a hop's launches and waits shared by 8 batches; BENCHMARKS section 18c).
GPU_BULK_BATCHES = 8


@dataclasses.dataclass(kw_only=True)
class SamplerConfig:
    """Neighbour sampling settings."""

    fanouts: tuple[int, ...] = option(
        (15, 10, 5),
        metavar="F,F,...",
        help="neighbours sampled per layer, output layer first; -1 = all",
    )
    relation_fanouts: str | None = option(
        None,
        metavar="REL=F,...;...",
        help="typed graphs: neighbours per relation and layer, output layer first, layers "
        "separated by ';'; a layer is one count for every relation, or relation=count pairs "
        "(relations not named are left out of that layer: a meta-path), e.g. "
        "'writes=5,cites=10;4'. Names are relation or src/relation/dst. Replaces --fanouts "
        "(which then holds each layer's largest count)",
    )
    replace: bool = option(False, help="sample neighbours with replacement")
    ladies: tuple[int, ...] | None = option(
        None,
        metavar="N,N,...",
        help="layer-wise importance sampling (LADIES): nodes drawn per layer for the whole "
        "batch, output layer first, from the union of the layer's neighbourhoods with "
        "probability ~ the squared column norm of the normalised adjacency; edges weighted by "
        "1/probability. A layer has at most its dst nodes plus N nodes, whatever the degrees. "
        "Replaces --fanouts (a LADIES layer reads every neighbour, then draws); evaluation "
        "uses --eval-fanouts (unset: full neighbourhoods). Models sage, gcn, gin",
    )
    bulk: int | None = option(
        None,
        flag="--bulk-batches",
        help="mini-batches sampled at once: each hop draws their stacked frontiers in one pass "
        "(matrix-based bulk sampling; the draws are those of one batch at a time). Meant for GPU "
        "sampling, whose cost is launches and waits per hop; on the CPU the numba kernels one "
        f"batch at a time are faster. 1: one at a time; unset: {GPU_BULK_BATCHES} when sampling "
        "on a GPU, else 1",
    )
    num_threads: int | None = option(
        None, flag="--sampler-threads", help="sampling threads (unset: numba's default, every core)"
    )

    def __post_init__(self) -> None:
        check_types(self)
        if self.relation_fanouts is not None:
            for entry in self.relation_layers():
                counts = [entry] if isinstance(entry, int) else list(entry.values())
                if any(c < -1 for c in counts) or not any(counts):
                    raise invalid(
                        self,
                        "relation_fanouts",
                        f"layer {entry} draws no neighbour or has a count below -1; counts are "
                        ">= 1, -1 (every neighbour) or 0 (relation left out), at least one not 0",
                    )
            self.fanouts = tuple(
                entry if isinstance(entry, int) else max(entry.values(), key=_as_count)
                for entry in self.relation_layers()
            )
        if self.bulk is not None and self.bulk < 1:
            raise invalid(self, "bulk", "must be >= 1 (1: one batch at a time)")
        if self.ladies is not None:
            self.ladies = tuple(int(n) for n in self.ladies)
            if not self.ladies or min(self.ladies) < 1:
                raise invalid(self, "ladies", "name one count >= 1 per layer, e.g. 512,512")
            if self.relation_fanouts is not None:
                raise invalid(self, "ladies", "draws homogeneous layers; drop --relation-fanouts")
            if self.replace:
                raise invalid(self, "ladies", "draws nodes without replacement; drop --replace")
            self.fanouts = (-1,) * len(self.ladies)
        self.fanouts = tuple(int(f) for f in self.fanouts)
        if not self.fanouts:
            raise invalid(self, "fanouts", "name at least one layer, e.g. 15,10,5", value="''")
        bad = [f for f in self.fanouts if f == 0 or f < -1]
        if bad:
            raise invalid(
                self,
                "fanouts",
                f"fanout {bad[0]} is neither a positive count nor -1 (all neighbours)",
            )
        if self.num_threads is not None:
            import numba  # only here: the config must stay cheap to import

            if not 1 <= self.num_threads <= numba.config.NUMBA_NUM_THREADS:
                raise invalid(
                    self, "num_threads", f"must lie in [1, {numba.config.NUMBA_NUM_THREADS}]"
                )

    @property
    def batches_per_call(self) -> int:
        """Mini-batches a sampler draws per call: ``--bulk-batches``, 1 where unset (the GPU
        pipeline sets it first: :func:`~shardgnn.loader.device.device_pipeline`)."""
        return self.bulk or 1

    def relation_layers(self) -> list[int | dict[str, int]]:
        """Per layer (output layer first), what typed sampling draws: one count for every
        relation, or counts by relation name (``--relation-fanouts``, else ``--fanouts``)."""
        if self.relation_fanouts is None:
            return list(self.fanouts)
        layers: list[int | dict[str, int]] = []
        for text in self.relation_fanouts.split(";"):
            text = text.strip()
            try:
                if "=" not in text:
                    layers.append(int(text))
                    continue
                pairs = [item.split("=") for item in text.split(",")]
                if any(len(pair) != 2 or not pair[0].strip() for pair in pairs):
                    raise ValueError(text)
                layers.append({name.strip(): int(count) for name, count in pairs})
            except ValueError:
                raise invalid(
                    self,
                    "relation_fanouts",
                    f"layer {text!r} is neither a count nor relation=count pairs; e.g. "
                    "'writes=5,cites=10;4'",
                ) from None
        return layers


def _as_count(fanout: int) -> float:
    """Order fanouts by how many neighbours they draw (-1, every neighbour, is the most)."""
    return float("inf") if fanout == -1 else fanout
