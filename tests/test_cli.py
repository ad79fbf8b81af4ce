"""The command line as a user meets it: settings defined once, flags derived from them, clear
errors (from this process or from a worker), progress a person can follow, identity checks,
files that honour the umask, and figures that read well."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardgnn
from shardgnn.cli import build_parser, main
from shardgnn.cli.flags import config_from_args
from shardgnn.errors import ConfigError
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.options import check_choices, component, option
from shardgnn.partition.format import write_partitions
from shardgnn.partition.methods import PartitionConfig, partition_graph
from shardgnn.sampling.config import SamplerConfig
from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig
from shardgnn.train.loop import TrainingLoop
from shardgnn.train.settings import InferConfig, LinkConfig
from shardgnn.train.single import LocalSteps

from conftest import setting_paths

SPEC = "synthetic:nodes=600,degree=6,classes=3,features=8"


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


# ----------------------------------------------------------------------------------------- settings
def test_defaults_are_valid_and_come_from_the_dataclasses_only():
    config = TrainConfig()  # valid as it stands: the synthetic dataset, 3 layers from 3 fanouts
    assert config.model.num_layers == len(config.sampler.fanouts) == 3
    args = build_parser().parse_args(["train"])
    # no flag given: every value from the dataclass
    assert config_from_args(TrainConfig, args) == config
    # what a worker receives
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.parametrize(
    "command, cls", [("train", TrainConfig), ("infer", InferConfig), ("partition", PartitionConfig)]
)
def test_every_setting_is_a_flag_and_help_shows_each_default_once(command, cls):
    parser = _subparser(command)
    dests = {a.dest for a in parser._actions}
    missing = [name for name in setting_paths(cls) if name not in dests]
    assert not missing, f"settings without a flag: {missing}"
    for action in parser._actions:
        assert action.default in (argparse.SUPPRESS, None, False) or action.dest in (
            "help",
            "dataset",
            "data_dir",
            "out",
        ), action.dest
        assert (action.help or "").count("default") <= 1, action.help
    text = parser.format_help()
    assert "(default: 256)" in text if command == "train" else True
    assert "MISSING" not in text  # a required setting has no default to show


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"shardgnn {shardgnn.__version__}"


@pytest.mark.parametrize(
    "fanouts, message",
    [
        ("10,,5", "'10,,5': entry 2 is empty"),
        (",", "',': entry 1 is empty"),
        ("10,x", "'x' is not an integer"),
    ],
)
def test_malformed_fanouts_are_refused_naming_only_the_fanouts(fanouts, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--fanouts", fanouts])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[0] == f"shardgnn train: error: argument --fanouts: {message}"
        or message in err
    )
    assert (
        "argument --fanouts" in err
        and message in err
        and "hidden" not in err
        and len(err.splitlines()) == 2
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": {"hidden": 0}}, "^--hidden 0: must be >= 1$"),
        ({"model": {"dropout": 1.5}}, r"^--dropout 1.5: a probability in \[0, 1\)$"),
        ({"sampler": {"fanouts": []}}, "^--fanouts '': name at least one layer"),
        ({"optim": {"lr": 0}}, "^--lr 0: must be > 0$"),
        ({"run": {"overlap": "maybe"}}, "^--overlap maybe: choose one of auto, on, off$"),
    ],
)
def test_error_messages_name_the_one_bad_value(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_dict(kwargs)


def test_a_flag_made_pointless_by_another_is_refused(capsys):
    argv = ["train", SPEC, "--mode", "full", "--epochs", "1", "--hidden", "8", "--quiet"]
    assert main([*argv, "--fanouts", "5,5"]) == 2
    assert (
        "shardgnn train: error: --fanouts does not apply to full-graph node classification"
        in capsys.readouterr().err
    )
    assert main(argv) == 0


@pytest.mark.parametrize(
    "flags, why",
    [
        (["--embedding-storage", "disk"], "no --embedding-dim is set"),
        (
            ["--embedding-dir", "rows"],
            "it holds the files of --embedding-dim D --embedding-storage",
        ),
        (["--embedding-dim", "4", "--embedding-dir", "rows"], "it holds the files of"),
    ],
)
def test_learnt_row_flags_without_learnt_rows_on_disk_are_refused(capsys, flags, why):
    """Both were ignored: rows in memory, no file written to the folder named."""
    assert main(["train", SPEC, "--epochs", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shardgnn train: error: {flags[-2]} does not apply: {why}")


@dataclasses.dataclass(kw_only=True)
class _Inner:
    colour: str = option("red", choices=("red", "blue"), help="a colour")

    def __post_init__(self):
        check_choices(self)


@dataclasses.dataclass(kw_only=True)
class _Outer:
    size: int = option(3, help="a size")
    inner: _Inner = component(_Inner, title="inner things")


@pytest.mark.parametrize(
    "config, name",
    [
        (lambda v: TrainConfig(dataset=SPEC, seed=v), "--seed"),
        (lambda v: PartitionConfig(num_parts=2, seed=v), "--seed"),
        (lambda v: LinkConfig(split_seed=v), "--link-split-seed"),
    ],
)
def test_every_seed_lies_in_what_every_generator_takes(config, name):
    """A negative seed failed inside numpy (--link-split-seed -1: a traceback) and one past 64
    bits inside torch (--seed 10**23); every seed setting refuses them in one line."""
    from shardgnn.options import MAX_SEED

    config(MAX_SEED)
    for value in (-1, MAX_SEED + 1, 10**23):
        with pytest.raises(ConfigError, match=rf"^{name} {value}: must lie in \[0, 2\*\*63 - 1\]$"):
            config(value)


def test_options_derive_flags_for_a_new_config():
    """A new component gets its flags, help and validation from its fields alone."""
    from shardgnn.cli.flags import add_flags

    parser = argparse.ArgumentParser()
    add_flags(parser, _Outer)
    assert config_from_args(_Outer, parser.parse_args(["--colour", "blue"])) == _Outer(
        inner=_Inner(colour="blue")
    )
    assert "a size (default: 3)" in parser.format_help() and "inner things" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--colour", "green"])


# ----------------------------------------------------------------------------- progress and results
def test_one_line_per_epoch_in_a_pipe_and_no_truncated_names(tmp_path, capsys):
    spec = "synthetic:nodes=700,degree=6,classes=3,features=8,homophily=0.8,snr=1.5,seed=11"
    results = tmp_path / "r.json"
    assert (
        main(
            [
                "train",
                spec,
                "--fanouts",
                "4,4",
                "--hidden",
                "8",
                "--epochs",
                "3",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all("loss" in line and "val" in line for line in lines)
    full_spec = json.loads(results.read_text())["dataset"]["spec"]
    assert "exponent=2.5" in full_spec  # the record spells every option, defaults too
    shown = "synthetic:nodes=700,degree=6.0,classes=3,features=8,homophily=0.8,snr=1.5,seed=11"
    assert f"| {shown} (700 nodes" in out  # the summary: every option given, none cut
    data = json.loads(results.read_text())
    assert data["status"] == "complete" and [e["epoch"] for e in data["epochs"]] == [1, 2, 3]


class _DiesInEpoch2(LocalSteps):
    def train_epoch(self, run):
        if run.epoch == 1:
            raise RuntimeError("the machine went away")
        return super().train_epoch(run)


def test_results_are_rewritten_after_every_epoch_so_a_killed_run_keeps_its_history(tmp_path):
    graph = generate(SyntheticConfig(nodes=500, degree=6, classes=3, features=8, seed=1))
    results = tmp_path / "r.json"
    config = TrainConfig(
        sampler=SamplerConfig(fanouts=(4, 4)),
        optim=OptimConfig(epochs=3),
        progress=False,
        results=str(results),
    )
    with pytest.raises(RuntimeError, match="went away"):
        TrainingLoop(config, _DiesInEpoch2(config, graph)).run()
    data = json.loads(results.read_text())
    assert data["status"] == "running" and [e["epoch"] for e in data["epochs"]] == [1]
    assert data["config"]["optim"]["epochs"] == 3 and data["dataset"]["num_nodes"] == 500


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    from shardgnn.atomic import save_json

    graph = generate(SyntheticConfig(nodes=300, degree=6, classes=3, features=4, seed=1))
    old = os.umask(umask)
    try:
        save_json(tmp_path / "r.json", {"a": 1})
        result = partition_graph(graph, PartitionConfig(num_parts=2, method="random"))
        write_partitions(graph, result.assignment, tmp_path / "parts", method="random")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "parts" / "part-0" / "x.npy").stat().st_mode) == mode
    # + the x bits
    assert stat.S_IMODE((tmp_path / "parts").stat().st_mode) == mode | ((mode & 0o444) >> 2)


def test_plots_have_integer_epoch_ticks():
    from shardgnn.cli.plot import training_figure

    epochs = [{"epoch": i, "loss": 1.0 / i, "train_acc": 0.5, "val_acc": 0.5} for i in (1, 2, 3)]
    fig = training_figure([(Path("run.json"), {"epochs": epochs})])
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in ticks)


def test_plot_draws_accuracy_against_remote_bytes_per_strategy(tmp_path):
    from shardgnn.cli.plot import remote_mb_per_epoch, strategy_label

    def run(name, acc, fetch_mb, config):
        epochs = [{"epoch": i, "loss": 1.0, "train_acc": 0.5, "val_acc": 0.5} for i in (1, 2)]
        comm = {"fetch": {"bytes_recv": 2e6 * fetch_mb}, "allreduce": {"bytes_recv": 5e9}}
        data = {"epochs": epochs, "test_acc": acc, "comm": comm, "config": config}
        (tmp_path / name).write_text(json.dumps(data))
        return data

    exact = run("exact.json", 0.86, 100.0, {"cache": {"policy": "none"}})
    hist = run("hist.json", 0.85, 20.0, {"historical": "1:4", "fetch_bits": 1})
    assert remote_mb_per_epoch(exact) == 100.0  # gradients are not traded: not counted
    assert strategy_label(exact) == "exact"
    assert strategy_label(hist) == "historical 1:4, 1-bit"
    every = {"historical": "1:16", "historical_mode": "pull", "historical_scope": "all"}
    assert strategy_label({"config": every}) == "historical pull 1:16 all"
    out = tmp_path / "plots"
    assert (
        main(["plot", str(tmp_path / "exact.json"), str(tmp_path / "hist.json"), "--out", str(out)])
        == 0
    )
    assert (out / "accuracy_vs_bytes.png").stat().st_size > 0


# ----------------------------------------------------------------------------------------- identity
@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A 2-part partition of SPEC, written as `shardgnn partition` writes it."""
    out = tmp_path_factory.mktemp("cli") / "parts"
    assert (
        main(
            ["partition", SPEC, "--parts", "2", "--method", "random", "--out", str(out), "--quiet"]
        )
        == 0
    )
    return out


def test_training_another_dataset_than_the_partition_holds_is_refused(parts, capsys):
    capsys.readouterr()
    other = "synthetic:nodes=900,degree=6,classes=3,features=8"
    assert main(["train", other, "--partitions", str(parts), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "holds synthetic:nodes=600" in err
        and "not synthetic:nodes=900" in err
    )
    # The same dataset spelled another way (defaults written out) is the same dataset.
    from shardgnn.cli.train import preflight

    config = TrainConfig(
        dataset=SPEC + ",seed=0,homophily=0.7", run=RunConfig(partitions=str(parts))
    )
    resolved, workers = preflight(config, dataset_given=True)
    assert workers == 2 and resolved.dataset.startswith("synthetic:nodes=600,")


def test_partitions_name_the_worker_count(parts, monkeypatch, capsys):
    """`--partitions DIR-{parts}`: the count of --workers, or under torchrun the job's own (an
    elastic restart on fewer machines reads its own count's partition); neither: one line."""
    from shardgnn.cli.train import partitions_for

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert partitions_for("p/x-{parts}", 4) == "p/x-4"
    assert partitions_for("p/x", None) == "p/x"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert partitions_for("p/x-{parts}", None) == "p/x-3"
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    pattern = str(parts.parent / "parts-{parts}")
    capsys.readouterr()
    assert main(["train", "--partitions", pattern, "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "names the worker count ({parts})" in err, err


def test_resume_with_other_flags_is_refused_before_any_worker_starts(parts, tmp_path, capsys):
    from shardgnn.cli.train import preflight
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.checkpoint import Checkpointer

    ckpt = tmp_path / "ckpt"
    # A complete checkpoint as a 2-worker run with fanouts 5,5 leaves it.
    config = config_from_args(
        TrainConfig,
        build_parser().parse_args(
            ["train", "--partitions", str(parts), "--fanouts", "5,5", "--checkpoint-dir", str(ckpt)]
        ),
    )
    config, _ = preflight(config, dataset_given=False)
    for rank in (0, 1):
        Checkpointer(ckpt, rank=rank, world_size=2).save(
            1, {"epoch": 1}, config.to_dict(), read_partitions(parts).dataset
        )
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--partitions",
                str(parts),
                "--fanouts",
                "5,4",
                "--checkpoint-dir",
                str(ckpt),
                "--resume",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "sampler.fanouts: [5, 5] -> [5, 4]" in err
        and "Traceback" not in err
    )


def test_resume_on_a_partition_of_another_graph_is_refused(parts, tmp_path, capsys):
    from shardgnn.cli.train import preflight
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.checkpoint import Checkpointer

    ckpt = tmp_path / "ckpt"
    config, _ = preflight(TrainConfig(run=RunConfig(partitions=str(parts))), dataset_given=False)
    for rank in (0, 1):
        Checkpointer(ckpt, rank=rank, world_size=2).save(
            1, {"epoch": 1}, config.to_dict(), read_partitions(parts).dataset
        )
    other = tmp_path / "other"
    spec = "synthetic:nodes=600,degree=6,classes=3,features=8,seed=5"  # same size, other edges
    assert (
        main(
            [
                "partition",
                spec,
                "--parts",
                "2",
                "--method",
                "random",
                "--out",
                str(other),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(["train", "--partitions", str(other), "--checkpoint-dir", str(ckpt), "--resume"]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was made from synthetic:nodes=600" in err and "seed=5" in err


def test_the_test_data_folder_can_be_moved(monkeypatch, tmp_path):
    from conftest import shared_data_dir

    monkeypatch.setenv("SHARDGNN_TEST_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    monkeypatch.delenv("SHARDGNN_TEST_DATA")
    assert shared_data_dir().parts[-2:] == ("shared", "data")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_worker_error_is_one_line_with_its_rank_and_a_log_with_the_traceback(
    parts, tmp_path, capfd
):
    # capfd, not capsys: the workers write to the file descriptors they inherit
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(parts, damaged)
    x = np.load(damaged / "part-1" / "x.npy")
    # same size and shape, other content: found by the worker
    np.save(damaged / "part-1" / "x.npy", x + 1)
    capfd.readouterr()
    assert (
        main(
            [
                "train",
                "--partitions",
                str(damaged),
                "--fanouts",
                "4,4",
                "--epochs",
                "1",
                "--quiet",
                "--log-dir",
                str(tmp_path / "logs"),
            ]
        )
        == 2
    )
    captured = capfd.readouterr()
    lines = captured.err.splitlines()
    assert (
        lines[0].startswith("shardgnn train: error: ")
        and "part-1/x.npy" in lines[0]
        and "(rank 1)" in lines[0]
    )
    assert lines[-1] == f"  full traceback: {tmp_path / 'logs' / 'rank-1.log'}"
    assert len(lines) <= 3 and "Traceback" not in captured.err and "torch" not in captured.err
    assert "Traceback (most recent call last)" in (tmp_path / "logs" / "rank-1.log").read_text()


def test_a_grid_that_does_not_fit_the_workers_is_refused_before_partitioning(capsys):
    argv = ["train", "synthetic:nodes=2000", "--workers", "4", "--mode", "full", "--spmm", "2d"]
    assert main([*argv, "--grid-rows", "3", "--epochs", "1"]) == 2
    out, err = capsys.readouterr()
    assert "--grid-rows 3 must divide the number of workers (4)" in err
    assert "partitioned" not in out  # before any work


@pytest.mark.parametrize(
    "workers",
    [pytest.param((), id="one-process"), pytest.param(("--workers", "2"), marks=pytest.mark.slow)],
)
def test_a_loss_that_is_no_longer_a_number_stops_training_in_one_line(tmp_path, capfd, workers):
    """Features so large (finite: past the NaN/inf checks of every reader, of ``save_graph`` and
    of loading) that the first layer overflows make the first epoch's loss infinite: every worker
    stops after that epoch, with the epoch line, one error line and its fix, and results that say
    so; nothing is saved."""
    from shardgnn.graph.io import save_graph

    graph = generate(SyntheticConfig(nodes=300, degree=6, classes=3, features=8, seed=1))
    save_graph(graph, tmp_path / "g")
    x = np.load(tmp_path / "g" / "x.npy", mmap_mode="r+")  # same dtype and shape: still loads
    x[:, 2] = np.finfo(np.float32).max
    x.flush()
    del x
    results, checkpoints = tmp_path / "r.json", tmp_path / "ck"
    argv = [
        *("train", f"graph:{tmp_path / 'g'}", "--fanouts", "4,4", "--hidden", "8"),
        *("--epochs", "3", "--results", str(results), "--checkpoint-dir", str(checkpoints)),
    ]
    assert main([*argv, *workers]) == 2
    captured = capfd.readouterr()  # (the workers print to the process's stdout)
    epochs = [line for line in captured.out.splitlines() if line.startswith("epoch ")]
    assert (
        len(epochs) == 1 and epochs[0].startswith("epoch 1/3  loss inf") and "best" not in epochs[0]
    )
    errors = [line for line in captured.err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in captured.err, captured.err
    assert errors[0].startswith(
        "shardgnn train: error: epoch 1: the training loss is inf (the weights are no longer "
        "finite numbers): stopped, nothing of this epoch saved"
    )
    assert "  fix: lower --lr (now 0.003)" in captured.err
    data = json.loads(results.read_text())
    assert data["status"] == "diverged" and [e["epoch"] for e in data["epochs"]] == [1]
    assert not list(checkpoints.glob("epoch-*"))


def test_help_and_refused_flags_import_no_torch():
    """``shardgnn --help``, a command's help and a refused flag answer before torch is imported
    (a second or more of a user's wait, for no work), nor numba (the partitioners', ~0.5 s): the
    parser reads only config modules."""
    probe = (
        "import sys\n"
        "from shardgnn.cli import build_parser, main\n"
        "build_parser()\n"
        "for argv in (['train', '--no-such-flag'], ['partition', '--help'], ['--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(*(m in sys.modules for m in ('torch', 'shardgnn.train.loop', 'numba')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert "no-such-flag" in done.stderr
    assert done.stdout.splitlines()[-1] == "False False False", done.stdout[-400:]


_ENDING = """
import atexit, sys, threading, time
from pathlib import Path

folder = Path(sys.argv[1])


class TornDown:
    def __del__(self):
        (folder / "teardown").write_text("ran")


KEPT = TornDown()  # destroyed by the interpreter's teardown, if it comes to that
atexit.register((folder / "hook").write_text, "ran")
threading.Thread(target=lambda: (time.sleep(0.5), (folder / "thread").write_text("ran"))).start()
sys.argv = ["shardgnn", *sys.argv[2:]]
from shardgnn.cli import cli

cli()
"""


@pytest.mark.parametrize(
    "argv, status", [(["info", "synthetic:nodes=300"], 0), (["info", "no-such-graph"], 2)]
)
def test_the_command_ends_as_an_interpreter_ends_but_without_its_teardown(tmp_path, argv, status):
    """`shardgnn` ends with its status and its whole output, its ``atexit`` hooks run (a user's
    too) and its other threads waited for, as at an interpreter's exit, but without the
    interpreter's teardown (0.4-0.7 s after every command that had imported torch)."""
    done = subprocess.run(
        [sys.executable, "-c", _ENDING, str(tmp_path), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == status, done.stderr
    if status == 0:
        assert "| num_nodes" in done.stdout and done.stderr == ""
    else:
        assert done.stderr.startswith("shardgnn info: error: unknown dataset 'no-such-graph'")
    assert (tmp_path / "hook").read_text() == (tmp_path / "thread").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()


def test_output_cut_short_by_its_reader_ends_the_command_quietly():
    """`shardgnn info ... | head` where the reader has gone before the first line: status 141 (as
    a shell reports a process that SIGPIPE ended), no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardgnn", "info", "synthetic:nodes=300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the command writes
    err = proc.stderr.read()
    assert (proc.wait(timeout=120), err) == (141, b"")
