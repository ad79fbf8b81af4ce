"""``--config FILE``: flags from a TOML, YAML or JSON file, the command line over them, every
mistake in the file refused in one line."""

from __future__ import annotations

import json

import pytest

from shardgnn.cli import main

SPEC = "synthetic:nodes=400,degree=5,classes=3,features=6"


def _config_of(results) -> dict:
    return json.loads(results.read_text())["config"]


@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_flags_and_tables_from_a_file(tmp_path, fmt):
    if fmt == "yaml":
        pytest.importorskip("yaml")
    text = {
        "toml": f'dataset = "{SPEC}"\nepochs = 2\nfanouts = [4, 4]\nquiet = true\n'
        "[model]\nhidden = 12\n",
        "yaml": f"dataset: '{SPEC}'\nepochs: 2\nfanouts: [4, 4]\nquiet: true\n"
        "model:\n  hidden: 12\n",
        "json": json.dumps(
            {"dataset": SPEC, "epochs": 2, "fanouts": [4, 4], "quiet": True,
             "model": {"hidden": 12}}
        ),
    }[fmt]  # fmt: skip
    path = tmp_path / f"run.{fmt}"
    path.write_text(text)
    results = tmp_path / "r.json"
    assert main(["train", "--config", str(path), "--results", str(results)]) == 0
    config = _config_of(results)
    assert config["dataset"] == SPEC and config["optim"]["epochs"] == 2
    assert config["sampler"]["fanouts"] == [4, 4] and config["model"]["hidden"] == 12
    assert config["progress"] is False


def test_the_command_line_overrides_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('dataset = "synthetic:nodes=9999"\nepochs = 3\nhidden = 12\nquiet = true\n')
    results = tmp_path / "r.json"
    argv = ["train", SPEC, "--config", str(path), "--epochs", "1", "--hidden=8"]
    assert main([*argv, "--results", str(results)]) == 0
    config = _config_of(results)
    assert config["dataset"] == SPEC  # the positional typed wins over the file's
    assert (config["optim"]["epochs"], config["model"]["hidden"]) == (1, 8)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("hiden = 3\n", "'hiden' is not a flag of `shardgnn train` (did you mean hidden?)"),
        ("epochs = [\n", "does not parse"),
        ("quiet = 3\n", "quiet is an on/off flag: true or false"),
        ("heads = 2\n", "--heads does not apply"),  # given in a file: refused as if typed
        ("epochs = 0\n", "--epochs 0"),
        ("[nothing]\nhere = 1\n", "'nothing.here' is not a flag"),
        # a value the flag cannot parse: named with the file it came from
        ('hidden = "abc"\n', "run.toml: hidden = 'abc': not an integer"),
        ('[optim]\nlr = "fast"\n', "run.toml: optim.lr = 'fast': not a number"),
        ('mode = "nope"\n', "run.toml: mode = 'nope': choose one of minibatch, full"),
        ('fanouts = ["a", 3]\n', "run.toml: fanouts = 'a,3': "),
        # no setting means an infinite number (an infinite --timeout failed in every worker)
        ("timeout = inf\n", "run.toml: timeout = 'inf': 'inf' is not a finite number"),
        ("[optim]\nlr = nan\n", "run.toml: optim.lr = 'nan': 'nan' is not a finite number"),
    ],
)
def test_mistakes_in_the_file_are_refused_in_one_line(tmp_path, capsys, text, expected):
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert main(["train", SPEC, "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err, err


@pytest.mark.parametrize("flag", ["--timeout", "--lr", "--dropout"])
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999"])
def test_a_number_flag_refuses_infinity_and_nan(capsys, flag, value):
    """Typed, inf or nan reached the workers (an infinite --timeout failed there with a
    traceback in each); every number flag refuses them as it refuses words."""
    with pytest.raises(SystemExit) as exit_:
        main(["train", SPEC, "--workers", "2", f"{flag}={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"shardgnn train: error: argument {flag}: {value!r} is not a finite number"
    assert len(err) == 2 and "Traceback" not in err[1], err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", SPEC, "--results="],  # wrote no results, silently
        ["train", SPEC, "--checkpoint-dir= "],  # saved nothing, silently
        ["partition", SPEC, "--parts", "2", "--out="],  # named the working folder
        ["partition", SPEC, "--parts", "2", "--out", "p", "--save-assignment="],
        ["infer", "--checkpoint", "ck", "--out="],  # wrote its files into the working folder
        ["plot", "r.json", "--out="],
        ["info", SPEC, "--data-dir="],
    ],
)
def test_an_empty_text_flag_is_refused(capsys, tmp_path, argv):
    """An empty path was taken as none (nothing written) or as the working folder."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    flag = next(word for word in argv if word.endswith(("=", "= "))).split("=")[0]
    assert err[0] == f"shardgnn {argv[0]}: error: argument {flag}: is empty; give a value"
    assert len(err) == 2
    config = tmp_path / "run.toml"
    config.write_text('results = ""\n')
    assert main(["train", SPEC, "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith(
        f"shardgnn train: error: --config {config}: results = '': is empty; give a value"
    )


def test_an_empty_output_path_is_refused_by_the_python_api():
    from shardgnn.atomic import check_output_path
    from shardgnn.errors import ConfigError

    for folder in (True, False):
        with pytest.raises(ConfigError, match="^--out '': is empty; give a "):
            check_output_path("", "--out", folder=folder)


def _config_classes():
    """Every config class the commands build, with the arguments its required fields need: the
    roots and, below them, each nested config (a field declared with ``component``)."""
    import dataclasses

    from shardgnn.fullgraph.config import PlanConfig
    from shardgnn.graph.convert import ConvertConfig
    from shardgnn.partition.config import PartitionConfig
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.settings import ExportConfig, InferConfig

    roots = [
        (TrainConfig, {}), (PlanConfig, {}), (PartitionConfig, {"num_parts": 2}),
        (ConvertConfig, {"out": "g", "edges": "e.txt"}),
        (InferConfig, {"checkpoint": "ck", "out": "o"}),
        (ExportConfig, {"checkpoint": "ck", "out": "m.pt2"}),
    ]  # fmt: skip
    found, queue = {}, list(roots)
    while queue:
        cls, required = queue.pop()
        found.setdefault(cls, required)
        for field in dataclasses.fields(cls):
            if field.metadata.get("component"):
                queue.append((field.default_factory, {}))
    return found


_WRONG = {  # a value of another type for each kind of setting, and the constraint named
    "int": (1.5, "must be an integer"),
    "float": ("0.1", "must be a number"),
    "str": (5, "must be text"),
    "bool": ("yes", "must be true or false"),
    "tuple": (5, "must be a list of"),
}


def test_the_python_api_refuses_a_setting_of_another_type():
    """The command line parses every flag to its type; a config built in Python (or rebuilt
    from a file) is held to the same, every setting of every config: before, ``hidden=16.5`` or
    ``seed=1.5`` were kept, ``mode=None`` passed, and ``lr="x"`` was a TypeError traceback."""
    import dataclasses
    import typing

    from shardgnn.errors import ConfigError
    from shardgnn.options import flag_of, value_type

    checked = 0
    for cls, required in _config_classes().items():
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if field.metadata.get("component"):
                with pytest.raises(ConfigError, match=rf"{cls.__name__}\.{field.name}: must be a"):
                    cls(**{**required, field.name: {}})
                continue
            base, optional = value_type(hints[field.name])
            kind = "tuple" if typing.get_origin(base) is tuple else base.__name__
            value, constraint = _WRONG[kind]
            with pytest.raises(ConfigError) as caught:
                cls(**{**required, field.name: value})
            expected = f"{flag_of(cls, field.name)} {value!r}: {constraint}"
            message = str(caught.value)
            assert message == expected or (
                kind == "tuple" and message.startswith(expected + " ")
            ), (
                cls,
                field.name,
                message,
            )
            if not optional:
                with pytest.raises(ConfigError, match="must be given"):
                    cls(**{**required, field.name: None})
            checked += 1
    assert checked > 150  # every setting of every command


def test_the_python_api_takes_lists_numpy_numbers_and_paths_as_the_types_they_stand_for(tmp_path):
    import numpy as np

    from shardgnn.nn.config import ModelConfig
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.settings import CheckpointConfig, OptimConfig

    config = TrainConfig(
        sampler=SamplerConfig(fanouts=[np.int64(5), 5]),
        model=ModelConfig(hidden=np.int32(16), dropout=np.float32(0.25)),
        optim=OptimConfig(lr=1, epochs=np.uint8(2)),
        checkpoint=CheckpointConfig(dir=tmp_path / "ck"),
        seed=np.int64(3),
    )
    assert config.sampler.fanouts == (5, 5) and config.model.hidden == 16
    assert config.optim.lr == 1 and config.checkpoint.dir == str(tmp_path / "ck")
    assert config.seed == 3 and type(config.seed) is int and type(config.model.dropout) is float
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.parametrize("name", ["timeout", "stop_grace"])
def test_the_python_api_refuses_an_unbounded_deadline(name):
    from shardgnn.errors import ConfigError
    from shardgnn.train.settings import LaunchConfig

    for value in (float("inf"), float("nan"), 0.0, 1e300):
        with pytest.raises(ConfigError, match=r"must be > 0 and at most 1e\+07 seconds"):
            LaunchConfig(**{name: value})
    assert LaunchConfig(**{name: 1e7})  # 116 days: as long as c10d counts


def test_a_missing_or_unknown_file_is_refused(tmp_path, capsys):
    assert main(["train", SPEC, "--config", str(tmp_path / "absent.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "run.ini").write_text("x")
    assert main(["train", SPEC, "--config", str(tmp_path / "run.ini")]) == 2
    assert "give a .toml, .yaml/.yml or .json file" in capsys.readouterr().err


def test_other_commands_read_their_own_flags(tmp_path, capsys):
    path = tmp_path / "parts.toml"
    path.write_text(f'dataset = "{SPEC}"\nparts = 2\nout = "{tmp_path / "parts"}"\n')
    assert main(["partition", "--config", str(path)]) == 0
    assert (tmp_path / "parts" / "meta.json").is_file()
    path.write_text("epochs = 2\n")
    assert main(["partition", SPEC, "--config", str(path)]) == 2
    assert "'epochs' is not a flag of `shardgnn partition`" in capsys.readouterr().err
