"""The recipe registry (issue 29): one place decides the kind of training; every flag is read
or refused by every recipe; every dataset trains with nothing but its name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import shardgnn
from shardgnn.cli import build_parser, main
from shardgnn.cli.train import train_config
from shardgnn.errors import ConfigError
from shardgnn.graph.datasets import dataset_traits, known_datasets
from shardgnn.nn.config import ModelConfig
from shardgnn.options import flag_for
from shardgnn.partition.format import partition_kind
from shardgnn.train.config import TrainConfig
from shardgnn.train.recipes import COMMON_SETTINGS, RECIPES, default_task, select

from conftest import SHARED_DATA, requires_shared_data, setting_paths

SETTINGS = [dest for dest in setting_paths(TrainConfig) if dest != "dataset"]

# A command line that selects each recipe (one process), on a small graph of its kind.
SMALL = {
    "homogeneous": "synthetic:nodes=300,degree=6,classes=3,features=8",
    "typed": "synthetic-hetero:papers=300,authors=200,institutions=10,fields=20",
    "temporal": "synthetic-temporal:nodes=60,events=600",
    "graphset": "csl:pe=4",
}
SELECTS = {
    "node": ["--fanouts", "3,3"],
    "node-full": ["--mode", "full"],
    "link": ["--task", "link", "--fanouts", "3,3"],
    "link-full": ["--task", "link", "--mode", "full"],
    "surel": ["--task", "link", "--model", "surel"],
    "typed-node": ["--model", "rgcn", "--fanouts", "3,3"],
    "kg-link": None,  # a knowledge graph (shared data), below
    "temporal-link": ["--task", "link", "--model", "tgn"],
    "temporal-node": ["--task", "node", "--model", "tgn"],
    "snapshot-link": ["--task", "link", "--model", "tgcn"],
    "graph": [],
    "edge": ["--task", "edge"],
}


def _args(argv):
    return build_parser().parse_args(argv)


def test_every_setting_is_read_by_some_recipe_and_the_sets_name_real_settings():
    known = set(SETTINGS)
    read_somewhere = set(COMMON_SETTINGS)
    for recipe in RECIPES:
        groups = [recipe.reads, recipe.worker_reads, *recipe.model_reads.values()]
        groups += [*(recipe.worker_model_reads or {}).values(), *recipe.mode_reads.values()]
        for group in groups:
            assert group <= known, (recipe.name, group - known)
            read_somewhere |= group
    assert read_somewhere == known, known - read_somewhere


def test_recipes_are_told_apart_by_graph_task_mode_and_model():
    """No two recipes train the same (graph kind, task, mode, model): select finds each."""
    for recipe in RECIPES:
        spec = "kg-nations" if recipe.name == "kg-link" else SMALL[recipe.graph]
        for model in recipe.models:
            for mode in recipe.modes:
                config = TrainConfig(
                    dataset=spec, task=recipe.task, mode=mode, model=ModelConfig(model=model)
                )
                assert select(config, recipe.graph).name == recipe.name, (model, mode)
    with pytest.raises(ConfigError, match="nothing trains"):
        select(TrainConfig(), "temporal")


@pytest.mark.parametrize("name", [r.name for r in RECIPES if SELECTS[r.name] is not None])
def test_every_flag_is_honoured_or_refused_by_every_recipe(name):
    """Each setting given on top of the recipe's command line: accepted exactly when the recipe
    reads it (or it only shapes another setting the recipe reads), else one line naming it."""
    recipe = next(r for r in RECIPES if r.name == name)
    base = ["train", SMALL[recipe.graph], *SELECTS[name]]
    config = train_config(_args(base))
    assert select(config, recipe.graph).name == name
    reads = recipe.settings_read(config)
    for dest in SETTINGS:
        flag = flag_for(TrainConfig, dest)
        value = _a_value(dest, config)
        if value is None:
            continue
        argv = [*base, *value]
        if dest in reads:
            try:
                train_config(_args(argv))
            except ConfigError as exc:  # read, but that value does not fit this run
                assert "does not apply to" not in str(exc), (flag, str(exc))
        else:
            with pytest.raises(ConfigError) as refused:
                train_config(_args(argv))
            message = str(refused.value)  # the recipe's line, or an earlier check's
            assert flag in message and "\n" not in message, (flag, message)


def _a_value(dest: str, config: TrainConfig) -> list[str] | None:
    """Command-line words that give ``dest`` a value (its current one, spelled as a flag)."""
    flag = flag_for(TrainConfig, dest)
    obj = config
    for part in dest.split("."):
        obj = getattr(obj, part)
    if dest == "progress":
        return ["--quiet"]
    if isinstance(obj, bool):
        return [flag] if not obj else None  # a store_true flag: giving it turns it on
    if dest in ("run.partitions", "run.workers", "checkpoint.dir", "results", "run.log_dir"):
        return None  # these start other machinery; tested elsewhere
    if obj is None:
        samples = {
            "batch_size": "64",
            "eval_fanouts": "3,3",
            "embedding.staleness": "1",
            "embedding.directory": "/tmp",
            "historical": "1:4",
            "threads": "1",
            "data_dir": "/tmp",
            "sampler.relation_fanouts": "3;3",
            "sampler.num_threads": "1",
            "link.margin": "0.5",
        }
        return [f"{flag}={samples[dest]}"] if dest in samples else None
    if isinstance(obj, tuple):
        return [f"{flag}={','.join(map(str, obj))}"]
    return [f"{flag}={obj}"]


@requires_shared_data
def test_a_knowledge_graph_selects_its_recipe_and_defaults(tmp_path):
    config = train_config(_args(["train", "kg-nations", "--data-dir", str(SHARED_DATA)]))
    assert select(config, "typed").name == "kg-link"
    assert (config.task, config.mode, config.model.model) == ("link", "full", "rgcn")
    assert (config.model.hidden, config.link.loss, config.batch_size) == (128, "softmax", 256)
    with pytest.raises(ConfigError, match="--negatives does not apply to knowledge-graph"):
        train_config(_args(["train", "kg-nations", "--negatives", "3"]))
    # what is given wins over the recipe's defaults
    given = train_config(_args(["train", "kg-nations", "--hidden", "16"]))
    assert given.model.hidden == 16 and given.link.out_dim == 128


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--model", "sage", "--attention-dropout", "0.6"],
            "--model sage: it applies to --model gat, gatv2",
        ),
        (["--model", "gcn", "--alpha", "0.2"], "--model gcn: it applies to --model appnp"),
        (["--model", "sage", "--heads", "2"], "--model sage: it applies to --model gat, gatv2"),
    ],
)
def test_a_setting_of_other_models_names_them(flags, message):
    """A setting only some models of the recipe read is refused naming those models."""
    with pytest.raises(ConfigError, match=f"does not apply to {message}; drop it"):
        train_config(_args(["train", "synthetic", *flags]))


def test_the_partition_kind_is_read_in_one_place():
    assert partition_kind({}) == "homogeneous"
    assert partition_kind({"typed": {"node_types": ["a"]}}) == "typed"
    assert partition_kind({"temporal": {"events": 3}}) == "temporal"
    assert partition_kind({"graphset": {"num_graphs": 3}}) == "graphset"


DATASETS = [
    name
    for name in known_datasets()
    if name not in ("file", "graph", "kg", "hetero", "temporal", "molecules", "graphset")
    and not name.startswith("ogbn")
]


@pytest.mark.slow
@pytest.mark.parametrize("name", DATASETS)
def test_every_listed_dataset_trains_with_nothing_but_its_name(name, tmp_path):
    """``shardgnn train NAME --epochs 1``: the recipe its data asks for, with its defaults. The
    built-in generators run at a small size (their options are the spec's, not training flags);
    the path datasets are covered by the tests of convert and of each graph kind."""
    spec = {
        "synthetic": SMALL["homogeneous"],
        "synthetic-hetero": SMALL["typed"],
        "synthetic-temporal": SMALL["temporal"],
    }.get(name, name)
    if spec == name and not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    if name == "pubmed":
        pytest.skip("the shared copy lacks ind.pubmed.allx (shared/data/README.md)")
    if name == "coauthor-physics":
        # 45 s of loading 34k x 8,415 features; coauthor-cs takes the same loader and recipe,
        # and the README test trains coauthor-physics itself
        pytest.skip("coauthor-cs covers its loader and recipe")
    if name == "freesolv":
        pytest.importorskip("rdkit")
    if name in ("soc-slashdot", "ego-twitter"):
        pytest.skip("one epoch of link prediction over ~1M edges: the README test runs it")
    out = tmp_path / "r.json"
    argv = ["train", spec, "--epochs", "1", "--quiet", "--results", str(out)]
    assert main([*argv, "--data-dir", str(SHARED_DATA)]) == 0
    results = json.loads(out.read_text())
    traits = dataset_traits(spec)
    recipe = next(r for r in RECIPES if r.name == results["recipe"])
    assert recipe.graph == traits.kind
    assert results["task"] == default_task(traits)


def test_link_prediction_over_learnt_rows_defaults_to_the_benchmarked_model():
    """soc-slashdot (no features, no labels): link prediction, learnt rows of 64, 2 layers of 64
    at fanouts 10,10 (BENCHMARKS section 15: ~30 s an epoch against ~300 s at the
    node-classification defaults); what is given wins."""
    from shardgnn.train.recipes import recipe_defaults

    traits = dataset_traits("soc-slashdot")
    assert recipe_defaults(traits, {}) == {
        "task": "link",
        "embedding.dim": 64,
        "sampler.fanouts": (10, 10),
        "model.hidden": 64,
    }
    assert recipe_defaults(traits, {"model.num_layers": 3, "model.hidden": 128}) == {
        "task": "link",
        "embedding.dim": 64,
    }
    assert recipe_defaults(dataset_traits("cora"), {}) == {}


# What tells the graph kinds apart: a partition's meta.json sections, the loaded graph classes.
_KIND_DISPATCH = re.compile(
    r"""meta(\.get\(|\[)["'](typed|hetero|temporal)["']"""
    r"|isinstance\([^)]*\b(TypedGraph|TemporalGraph)\b"
)
# The places that may tell them apart: the registry of graph kinds, the partition format (which
# reads its own meta.json, PartitionSet.kind), the graph classes' own modules.
_KIND_DECIDERS = {"train/kinds.py", "partition/format.py", "graph/typed.py", "graph/temporal.py"}


def test_no_kind_dispatch_outside_the_registry():
    """Every place that decides the kind of graph asks the registry (``train.kinds``,
    ``PartitionSet.kind``): no module of the commands or of training reads a partition's typed or
    temporal section, or tests a graph's class, to decide for itself."""
    root = Path(shardgnn.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in _KIND_DECIDERS or not rel.startswith(("train/", "cli/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _KIND_DISPATCH.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "kind decided outside the registry:\n" + "\n".join(found)
