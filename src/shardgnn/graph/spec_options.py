"""Generator settings read from a dataset spec's options (``synthetic-hetero:papers=1000``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from shardgnn.errors import DatasetError


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

    def refuse_broken(self, dataset: str, checks: Iterable[tuple[bool, str]]) -> None:
        """Raise one line for the first ``(holds, rule)`` of ``checks`` that does not hold, naming
        the values of the options the rule names (outside its parentheses): ``synthetic-hetero:
        options fields=2, classes=8 break the rule fields >= classes >= 1``, fixed by changing
        them; a rule that spells its values out (``labels=x must be ...``) stands alone."""
        for holds, rule in checks:
            if holds:
                continue
            bare = re.sub(r"\([^)]*\)", "", rule)
            named = [f.name for f in dataclasses.fields(self) if re.search(rf"\b{f.name}\b", bare)]
            fix = "change the option in the spec"
            if named:
                fix = f"change {' or '.join(named)} in the spec: {dataset}:{named[0]}=VALUE"
            if re.search(r"[^<>]=", bare) or not named:
                raise DatasetError(f"{dataset}: {rule}", fix=fix)
            values = ", ".join(f"{name}={getattr(self, name)}" for name in named)
            these = f"options {values} break" if len(named) > 1 else f"option {values} breaks"
            raise DatasetError(f"{dataset}: {these} the rule {rule}", fix=fix)
