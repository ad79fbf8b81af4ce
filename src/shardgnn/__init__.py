"""shardgnn: graph neural network training on graphs that outgrow one process, GPU or machine.

Layers, one direction (a module imports only from its own layer or those below it; no import
cycles; ``tests/test_layers.py`` enforces both, imports inside functions included)::

    base (errors, atomic, timing, options, seeding, heap, devicemem, precision, journal)
      <- graph <- partition <- distributed <- store <- sampling <- loader <- nn <- fullgraph
      <- train <- cli (and run, the worker entry point under torchrun; torchrun, the agent)
"""

import importlib
from collections.abc import Callable
from typing import Any

__version__ = "0.2.0"


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) that imports each public name of ``where`` (name ->
    module) on first use, so that importing one module of the package (its config, say) does not
    import them all: ``shardgnn --help`` and a refused flag never import torch."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__
