"""Models of the user's own: ``--model package.module:Class`` or ``--model path/to/file.py:Class``
(the Python API: the same string in ``ModelConfig.model``).

The contract (README, "Your own model"): the class is built as ``Class(in_dim, out_dim,
config)``, ``config`` the run's :class:`~shardgnn.nn.config.ModelConfig` (``hidden``,
``num_layers``, ``dropout``... as given), and is a ``torch.nn.Module`` whose
``forward(graphs, x_SF)`` takes one graph per layer, input layer first, and the input rows of
``graphs[0]``'s source nodes, and returns ``[D, out_dim]`` for ``graphs[-1]``'s destination
nodes (node classification: the logits; link prediction: the node embeddings the predictor
scores). A graph is a sampled block or the whole graph: ``num_src``, ``num_dst`` (the first
``num_dst`` source rows are the destination nodes), ``edge_index()`` (``[2, E]`` local
``(src, dst)``, what PyG layers take with ``size=(num_src, num_dst)``),
:func:`shardgnn.nn.message_graph.spmm` for its normalised aggregations and, on a graph with edge
features (node classification on sampled blocks), ``edge_attr_ED`` (the rows of its edges, in
``edge_index()`` order; a class whose ``__init__`` takes an ``edge_dim`` keyword is built with
their width).

Workers import the class again, so a file path must be readable on every machine (the path is
made absolute when the config is built). Dropout inside the module draws from torch's generator
(seeded per run), not from the per-node keys of the built-in models.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from shardgnn.errors import ConfigError


def load_user_class(spec: str) -> type:
    """The class ``spec`` names (``package.module:Class`` or ``path/to/file.py:Class``).

    Raises:
        ConfigError: one line: the module or file cannot be imported, or it has no such class.
    """
    where, _, name = spec.rpartition(":")
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"--model {spec}: no such file {path}")
            module_name = "shardgnn_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
            module = sys.modules.get(module_name)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(module_name, path)
                assert loader_spec is not None and loader_spec.loader is not None
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[module_name] = module
                loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except Exception as exc:  # the user's code: any import error is theirs to fix
        raise ConfigError(
            f"--model {spec}: importing {where} failed ({type(exc).__name__}: {exc})"
        ) from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise ConfigError(f"--model {spec}: {where} has no torch.nn.Module subclass {name!r}")
    return cls


def output_problem(out: Any, rows: int, out_dim: int, training: bool) -> str | None:
    """What breaks the contract in ``out``, a user module's output for ``rows`` destination nodes
    (``None``: nothing): a training loss cannot use a non-tensor, an integer tensor or one that
    no parameter produced, and a wrong shape is a traceback deep in the loss, or, one column too
    many, silently a class too many."""
    if not isinstance(out, torch.Tensor):
        return f"a {type(out).__name__}, not a tensor"
    if not out.is_floating_point():
        return f"a {out.dtype} tensor"
    if tuple(out.shape) != (rows, out_dim):
        return f"a tensor of shape {list(out.shape)}"
    if training and torch.is_grad_enabled() and not out.requires_grad:
        return "a tensor no parameter produced (requires_grad is False: nothing to train)"
    return None


class UserModel(nn.Module):
    """A user's module behind what the trainers ask of a model: ``num_layers`` (one graph per
    layer), ``use_hashed_dropout`` (nothing: the module draws its own dropout) and
    ``forward(graphs, x, history=None)``, whose output is checked against the contract
    (:func:`output_problem`; not while being traced or exported, where shapes are symbolic)."""

    def __init__(self, module: nn.Module, num_layers: int, spec: str, out_dim: int):
        super().__init__()
        self.module, self._num_layers, self.spec = module, num_layers, spec
        self.out_dim = out_dim

    @property
    def num_layers(self) -> int:
        return self._num_layers

    def use_hashed_dropout(self, seed: int) -> None:
        """Nothing to do: the module's dropout, if any, is its own (torch's generator)."""

    def forward(
        self, graphs: Sequence[Any], x_SF: torch.Tensor, history: Any = None
    ) -> torch.Tensor:
        if history is not None:
            raise ConfigError(
                f"--model {self.spec}: historical embeddings replace a layer's inputs inside "
                "shardgnn's own models; drop --historical"
            )
        if len(graphs) != self._num_layers:
            raise ValueError(f"model has {self._num_layers} layers but got {len(graphs)} graphs")
        out = self.module(list(graphs), x_SF)
        if torch.jit.is_tracing() or torch.compiler.is_compiling():
            return out
        rows = int(graphs[-1].num_dst)
        problem = output_problem(out, rows, self.out_dim, self.training)
        if problem:
            raise ConfigError(
                f"--model {self.spec}: forward returned {problem}; the contract: a floating-point "
                f"[{rows}, {self.out_dim}] tensor (one row per destination node of graphs[-1], "
                f"out_dim = {self.out_dim} columns), computed from the module's parameters: "
                "README, Your own model"
            )
        return out


def build_user_model(
    spec: str, config: Any, in_dim: int, out_dim: int, edge_dim: int = 0
) -> UserModel:
    """``Class(in_dim, out_dim, config)`` for the class ``spec`` names, behind :class:`UserModel`;
    on a graph with edge features (``edge_dim`` > 0) a class whose ``__init__`` takes an
    ``edge_dim`` keyword gets their width (every graph it receives holds the rows of its edges,
    ``edge_attr_ED``).

    Raises:
        ConfigError: the class cannot be loaded or built.
    """
    cls = load_user_class(spec)
    extra = {}
    if edge_dim and "edge_dim" in inspect.signature(cls.__init__).parameters:
        extra["edge_dim"] = edge_dim
    try:
        module = cls(in_dim, out_dim, config, **extra)
    except Exception as exc:
        raise ConfigError(
            f"--model {spec}: {cls.__name__}(in_dim, out_dim, config) failed "
            f"({type(exc).__name__}: {exc}); the contract: README, Your own model"
        ) from None
    if not any(p.requires_grad for p in module.parameters()):  # torch's optimiser: a traceback
        raise ConfigError(
            f"--model {spec}: {cls.__name__}(in_dim, out_dim, config) has no parameters to train; "
            "the contract: README, Your own model"
        )
    return UserModel(module, int(config.num_layers), spec, out_dim)
