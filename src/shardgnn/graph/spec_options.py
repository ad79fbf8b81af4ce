"""Generator settings read from a dataset spec's options (``synthetic-hetero:papers=1000``)."""

from __future__ import annotations

import dataclasses


class SpecOptions:
    """A dataclass of int, float and str fields, each a ``NAME:key=value`` option of its dataset."""

    @classmethod
    def defaults(cls) -> dict[str, str]:
        """Every option's default as a spec would spell it."""
        return {f.name: str(f.default) for f in dataclasses.fields(cls)}

    @classmethod
    def from_spec(cls, spec):
        """Read options from a parsed :class:`~shardgnn.graph.datasets.DatasetSpec`."""
        values = {}
        for f in dataclasses.fields(cls):
            if f.type in ("int", int):
                values[f.name] = spec.take_int(f.name, f.default, minimum=0)
            elif f.type in ("str", str):
                values[f.name] = spec.take_str(f.name, f.default)
            else:
                values[f.name] = spec.take_float(f.name, f.default, lo=0)
        spec.finish()
        return cls(**values)
