"""Neighbour sampling settings (imports nothing heavy: the command line is built from them)."""

from __future__ import annotations

import dataclasses

from shardgnn.options import invalid, option

NEGATIVE_KINDS = ("uniform", "degree", "in-batch")


@dataclasses.dataclass(kw_only=True)
class SamplerConfig:
    """Neighbour sampling settings."""

    fanouts: tuple[int, ...] = option(
        (15, 10, 5),
        metavar="F,F,...",
        help="neighbours sampled per layer, output layer first; -1 = all",
    )
    replace: bool = option(False, help="sample neighbours with replacement")
    num_threads: int | None = option(
        None, flag="--sampler-threads", help="sampling threads (unset: numba's default, every core)"
    )

    def __post_init__(self) -> None:
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
