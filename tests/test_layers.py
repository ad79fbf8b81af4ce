"""The layering of the package, enforced: imports point down (or sideways), never up, and no two
modules import each other, directly or around a loop.

Every ``import`` and ``from ... import`` in ``src/shardgnn`` counts, including those inside
functions (a lazy import is still a dependency). The layers, bottom first, are written in
``shardgnn/__init__.py`` and the README; this table is the one the test holds the code to.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom first. A module belongs to the layer of its longest listed prefix.
LAYERS: list[tuple[str, ...]] = [
    (
        "shardgnn",
        "shardgnn.errors",
        "shardgnn.atomic",
        "shardgnn.timing",
        "shardgnn.options",
        "shardgnn.seeding",
        "shardgnn.heap",
        "shardgnn.devicemem",
        "shardgnn.precision",
        "shardgnn.journal",
        "shardgnn.exiting",
    ),
    ("shardgnn.graph",),
    ("shardgnn.partition",),
    ("shardgnn.distributed",),
    ("shardgnn.store",),
    ("shardgnn.sampling",),
    ("shardgnn.loader",),
    ("shardgnn.nn",),
    ("shardgnn.fullgraph",),
    ("shardgnn.train",),
    ("shardgnn.cli", "shardgnn.run", "shardgnn.torchrun", "shardgnn.__main__"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / "shardgnn").rglob("*.py"))}


def _layer(module: str) -> int:
    best, best_len = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            exact_root = prefix == "shardgnn" and module == "shardgnn"
            if (
                exact_root
                or (prefix != "shardgnn" and (module == prefix or module.startswith(prefix + ".")))
            ) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best is None:
        raise AssertionError(f"module {module} is in no layer; add it to LAYERS in {__file__}")
    return best


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The shardgnn modules ``module`` imports (a ``from pkg import name`` counts as
    ``pkg.name`` when that is a module, else as ``pkg``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            # `import shardgnn.graph.csr as x` names a module directly
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("shardgnn") and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def test_every_module_has_a_layer():
    for module in _modules():
        _layer(module)


def test_no_import_points_up():
    upward = sorted(
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in _graph().items()
        for b in targets
        if _layer(b) > _layer(a)
    )
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_import_cycles():
    graph = _graph()
    # Tarjan's strongly connected components: a component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from shardgnn.train.progress import x", {"shardgnn.train.progress"}),
        ("def f():\n    import shardgnn.cli\n", {"shardgnn.cli"}),
        ("from shardgnn import errors", {"shardgnn.errors"}),
        ("from ..train import progress", {"shardgnn.train.progress"}),
    ],
)
def test_the_import_reader_sees_every_form(tmp_path, source, expected):
    path = tmp_path / "probe.py"
    path.write_text(source)
    known = set(_modules())
    assert _imports("shardgnn.partition.probe", path, known) == expected


# ---------------------------------------------------------------- the rooms inside train/
LOOP_MODULES = ("shardgnn.train.loop", "shardgnn.train.epoch")


def _recipe_rooms() -> tuple[set[str], dict[str, set[str]]]:
    """The recipe modules (the ``module`` parts of every recipe's ``local`` and ``distributed``
    steps in :data:`shardgnn.train.recipes.RECIPES`) and, for each, the other recipe modules it
    may import (see :func:`test_recipes_import_the_shared_core_not_each_other`)."""
    from shardgnn.train.kinds import load_target
    from shardgnn.train.recipes import RECIPES

    rooms: set[str] = set()
    allowed: dict[str, set[str]] = {}
    for recipe in RECIPES:
        targets = [t for t in (recipe.local, recipe.distributed) if t is not None]
        for target in targets:
            module = target.partition(":")[0]
            rooms.add(module)
            bases = {cls.__module__ for cls in load_target(target).__mro__}
            allowed.setdefault(module, set()).update(bases)
        if recipe.distributed is not None:
            local = recipe.local.partition(":")[0]
            allowed.setdefault(recipe.distributed.partition(":")[0], set()).add(local)
    return rooms, {m: (a & rooms) - {m} for m, a in allowed.items()}


def test_recipes_import_the_shared_core_not_each_other():
    """A recipe module imports the shared core of ``train/`` (loop, epoch, setup, metrics,
    config...) and the layers below, never another recipe module, with the two exceptions the
    code is built on:

    * a recipe's distributed steps import the module of its one-process steps (the same
      :class:`~shardgnn.train.recipes.Recipe` line): the model builders, pair scoring and result
      records the two share (``dist_link`` and ``link_fullgraph`` import ``link``,
      ``dist_temporal`` imports ``temporal``);
    * a module imports the module of a base class of the steps it registers (their MRO): the
      full-graph link steps extend the full-graph node steps' ``DistFullGraphSteps``
      (``train.fullgraph``), the temporal steps on workers the one-process
      ``TemporalLinkSteps``, and every distributed steps class ``DistSteps`` wherever it lives.

    Anything else two recipes share belongs to a shared module (``linkmetrics``, ``setup``) or a
    lower layer (``loader``, ``graph``), not to one of them.
    """
    rooms, allowed = _recipe_rooms()
    graph = _graph()
    crossing = sorted(
        f"{a} imports {b}"
        for a in rooms
        for b in graph[a] & rooms
        if b != a and b not in allowed.get(a, set())
    )
    assert not crossing, "recipe modules importing one another:\n" + "\n".join(crossing)


def test_the_loop_imports_no_recipe():
    """The loop and the batch-epoch helper import no recipe module, directly or through another
    module of the package: every recipe plugs into them, none is built into them."""
    rooms, _ = _recipe_rooms()
    graph = _graph()
    for start in LOOP_MODULES:
        seen, todo, via = {start}, [start], {start: start}
        while todo:
            module = todo.pop()
            for target in graph[module] - seen:
                seen.add(target)
                via[target] = module
                todo.append(target)
        reached = sorted(seen & rooms)
        chains = []
        for recipe in reached:
            chain = [recipe]
            while chain[-1] != start:
                chain.append(via[chain[-1]])
            chains.append(" <- ".join(chain))
        assert not reached, f"{start} reaches recipe modules:\n" + "\n".join(chains)


# ---------------------------------------------------------------- inference, a room of its own
INFERENCE = "shardgnn.train.inference"
# The recipe modules inference may import: the model builders of the recipes it rebuilds a
# checkpoint of (``train.link.build_link_model``, ``train.typed.relational_model``); nothing
# else of a recipe.
INFERENCE_MAY_IMPORT = {"shardgnn.train.link", "shardgnn.train.graphlevel", "shardgnn.train.typed"}


def _in_inference(module: str) -> bool:
    return module == INFERENCE or module.startswith(INFERENCE + ".")


def test_inference_is_its_own_room():
    """``shardgnn infer`` lives in its own package, ``train.inference``: the graph-kind registry
    names its per-kind functions by ``module:function`` (:data:`shardgnn.train.kinds.KINDS`), so
    no other module of ``train/`` imports it (the command line does); it imports the shared core
    of ``train/`` and the layers below, and of the recipes only their model builders."""
    from shardgnn.train.kinds import KINDS

    rooms, _ = _recipe_rooms()
    graph = _graph()
    inside = {m for m in graph if _in_inference(m)}
    assert inside, f"no {INFERENCE} package"
    into = sorted(
        f"{a} imports {b}"
        for a, targets in graph.items()
        if a.startswith("shardgnn.train") and not _in_inference(a)
        for b in targets
        if _in_inference(b)
    )
    assert not into, "train/ importing the inference room:\n" + "\n".join(into)
    out_of = sorted(
        f"{a} imports {b}"
        for a in inside
        for b in graph[a] & rooms
        if b not in INFERENCE_MAY_IMPORT
    )
    assert not out_of, "the inference room importing recipe modules:\n" + "\n".join(out_of)
    for kind in KINDS.values():
        if kind.infer is not None:
            assert _in_inference(kind.infer.partition(":")[0]), kind
