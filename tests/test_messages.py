"""What a new user met (issue 34): messages that point at the real fix, flags that are never
guessed, and output paths checked before the first epoch."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from shardgnn.cli import main
from shardgnn.errors import DatasetError
from shardgnn.graph.io import save_graph
from shardgnn.graph.synthetic import SyntheticConfig, generate
from shardgnn.train.inference import read_pairs
from shardgnn.train.report import print_summary

from conftest import SHARED_DATA, requires_shared_data

SPEC = "synthetic:nodes=300,degree=6,classes=3,features=8"
QUICK = ["--epochs", "1", "--hidden", "8", "--fanouts", "3,3", "--quiet"]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    return err


def _usage_error(argv: list[str], capsys) -> str:
    """What argparse's refusal of ``argv`` prints (it exits with 2)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    return _error(capsys)


# ------------------------------------------------------------------------------------------ flags
def test_abbreviated_flags_are_refused_with_the_flag_meant(capsys):
    err = _usage_error(["train", SPEC, "--epoch", "1", "--hid", "8"], capsys)
    assert err.startswith("shardgnn train: error: unrecognized arguments: --epoch --hid")
    assert "did you mean --epochs for --epoch, --hidden for --hid?" in err
    assert "(`shardgnn train --help` lists the flags)" in err
    # a close flag of another command is not offered (--base is convert's)
    err = _usage_error(["train", SPEC, "--bases", "4"], capsys)
    assert "--base" not in err.replace("--bases", "")


@pytest.mark.parametrize(
    "argv, meant",
    [
        # names other systems and the papers use
        (["partition", SPEC, "--method", "kahypar", "--parts", "2"], "--method hypergraph"),
        (
            ["partition", SPEC, "--method", "streaming", "--parts", "2"],
            "--method ldg or --method fennel",
        ),
        (["train", SPEC, "--mode", "full-graph"], "--mode full"),
        (["train", SPEC, "--mode", "mini-batch"], "--mode minibatch"),
        # other capitals, and close spellings
        (["train", SPEC, "--spmm", "1.5D"], "--spmm 1.5d"),
        (["train", SPEC, "--backend", "NCCL"], "--backend nccl"),
        (["partition", SPEC, "--method", "metiss", "--parts", "2"], "--method metis"),
    ],
)
def test_a_value_outside_the_choices_is_told_the_choice_meant(argv, meant, capsys):
    """Before: argparse listed the choices alone (`--method kahypar`: KaHyPar is `hypergraph`)."""
    err = _usage_error(argv, capsys)
    assert "invalid choice" in err and err.splitlines()[0].endswith(f"(did you mean {meant}?)")


def test_a_value_close_to_no_choice_gets_no_guess(capsys):
    err = _usage_error(["train", SPEC, "--mode", "xyz"], capsys)
    assert "did you mean" not in err
    # a number is not a spelling: 3 bits is not "close to" 32
    err = _usage_error(["train", SPEC, "--workers", "2", "--fetch-bits", "3"], capsys)
    assert "invalid choice: 3" in err and "did you mean" not in err
    # a name meant for a choice this flag lacks: plan's --method partitions no hypergraph
    err = _usage_error(["plan", SPEC, "--method", "kahypar"], capsys)
    assert "invalid choice: 'kahypar'" in err and "did you mean" not in err


def test_settings_built_in_code_and_config_files_get_the_same_hint(tmp_path, capsys):
    from shardgnn.errors import ConfigError
    from shardgnn.train.config import TrainConfig

    with pytest.raises(
        ConfigError, match=r"--mode Full: choose one of .* \(did you mean --mode full\?\)$"
    ):
        TrainConfig(dataset=SPEC, mode="Full")
    config = tmp_path / "run.toml"
    config.write_text('mode = "fullgraph"\n')
    assert main(["train", SPEC, "--config", str(config)]) == 2
    err = _error(capsys)
    assert err.endswith(
        "mode = 'fullgraph': choose one of minibatch, full (did you mean mode = 'full'?)"
    )


def test_more_parts_than_nodes_names_the_graph_as_given_and_the_fix(capsys):
    """Before: the generator's every option (`... of synthetic:nodes=300,degree=6.0,classes=3,
    features=8,homophily=0.7,exponent=2.5,...; some parts would be empty`) and no fix."""
    assert main(["partition", SPEC, "--parts", "301", "--out", "never", "--quiet"]) == 2
    err = _error(capsys).splitlines()[-1]
    assert err == (
        "shardgnn partition: error: --parts 301 exceeds the 300 nodes of synthetic:nodes=300,"
        "degree=6.0,classes=3,features=8: some parts would be empty; use --parts 300 or fewer "
        "(or --allow-empty-parts)"
    ), err
    assert not Path("never").exists()


def test_an_unknown_flag_is_named_before_a_missing_required_one(capsys):
    """DGL's spelling ``--num-parts`` was met with "--parts is required" and no word on it."""
    err = _usage_error(["partition", SPEC, "--num-parts", "2", "--out", "x"], capsys)
    assert err.startswith("shardgnn partition: error: unrecognized arguments: --num-parts")
    assert "did you mean --parts for --num-parts?" in err and "required" not in err


@pytest.mark.parametrize("command", ["train", "partition", "plan"])
def test_a_flag_spelling_of_the_dataset_says_it_has_none(command, capsys):
    """``--dataset cora`` (DGL's and GraphStorm's scripts) got "did you mean --test?"."""
    err = _usage_error([command, "--dataset", SPEC], capsys)
    assert f"--dataset (the dataset is given without a flag: `shardgnn {command} DATASET" in err
    assert "did you mean" not in err


def test_a_dataset_flag_of_infer_says_where_its_graph_comes_from(capsys):
    err = _usage_error(["infer", "--dataset", SPEC, "--checkpoint", "x", "--out", "y"], capsys)
    assert "--dataset (the graph is the checkpoint's dataset, or --partitions DIR)" in err
    assert "did you mean" not in err


@pytest.mark.parametrize("command", ["infer", "export"])
def test_train_s_checkpoint_flag_given_to_a_reader_of_checkpoints_names_its_own(command, capsys):
    """``shardgnn infer --checkpoint-dir ck`` was told only "--checkpoint is required"."""
    err = _usage_error([command, "--checkpoint-dir", "ck", "--out", "y"], capsys)
    assert err.startswith(f"shardgnn {command}: error: unrecognized arguments: --checkpoint-dir (")
    assert (
        f"({command} reads --checkpoint DIR: the folder `shardgnn train --checkpoint-dir` " in err
    )
    assert "required" not in err and "did you mean" not in err


def test_another_command_s_flag_is_named_before_a_missing_required_one(capsys):
    err = _usage_error(["partition", SPEC, "--epochs", "3"], capsys)
    assert err.startswith("shardgnn partition: error: unrecognized arguments: --epochs")
    assert "(--epochs is a flag of `shardgnn train`)" in err and "required" not in err


def test_a_misspelt_dataset_name_gets_the_close_one_first(capsys):
    assert main(["train", "cra", "--quiet"]) == 2
    err = _error(capsys)
    assert err.startswith("shardgnn train: error: unknown dataset 'cra' (did you mean cora?)")
    assert "fix: use one of the known datasets:" in err
    assert main(["train", "zzzzzz", "--quiet"]) == 2
    assert "did you mean" not in _error(capsys)


def test_a_setting_of_another_mode_names_the_mode(capsys):
    """With workers, a full-graph setting on a mini-batch run was told to add workers."""
    assert main(["train", SPEC, "--workers", "2", "--mode", "minibatch", "--spmm", "1d"]) == 2
    err = _error(capsys)
    assert "--spmm does not apply to node classification on sampled mini-batches" in err
    assert "it applies to full-graph node classification with workers (--mode full)" in err
    assert "--workers N" not in err


def test_negative_fanout_lists_are_values_not_flags():
    from shardgnn.cli import build_parser

    args = build_parser().parse_args(["train", SPEC, "--eval-fanouts", "-1,-1", "--fanouts", "-1"])
    assert args.eval_fanouts == (-1, -1) and getattr(args, "sampler.fanouts") == (-1,)


def test_a_flag_of_another_command_names_that_command(capsys):
    err = _usage_error(["train", SPEC, "--out", "x"], capsys)
    assert "--out is a flag of `shardgnn infer`" in err
    assert "did you mean" not in err


def test_a_flag_with_nothing_close_gets_no_guess(capsys):
    assert "did you mean" not in _usage_error(["train", SPEC, "--zzzzzz"], capsys)


# ---------------------------------------------------------------------------------- data directory
def test_a_missing_dataset_without_data_dir_names_data_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SHARDGNN_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["train", "cora", *QUICK]) == 2
    err = _error(capsys)
    assert "no --data-dir was given" in err and "pass --data-dir DIR" in err
    assert str(tmp_path / ".cache" / "shardgnn") in err


def test_a_missing_dataset_in_a_given_data_dir_does_not_suggest_data_dir(tmp_path, capsys):
    assert main(["train", "cora", *QUICK, "--data-dir", str(tmp_path)]) == 2
    err = _error(capsys)
    assert "missing Planetoid file(s)" in err and "no --data-dir was given" not in err


@pytest.mark.parametrize(
    "spec", ["csl:pe=x", "tracks:labels=foo", "cora:nonfinite=bad", "cora:foo=1"]
)
def test_a_bad_option_or_a_generated_set_does_not_suggest_data_dir(monkeypatch, capsys, spec):
    """A malformed option fails before any file is looked up, and a generated set (csl, tracks)
    reads none: the data-directory hint would send the user the wrong way."""
    monkeypatch.delenv("SHARDGNN_DATA", raising=False)
    assert main(["info", spec]) == 2
    err = _error(capsys)
    assert "option" in err and "no --data-dir was given" not in err


def test_a_bad_synthetic_option_does_not_suggest_data_dir(monkeypatch, capsys):
    monkeypatch.delenv("SHARDGNN_DATA", raising=False)
    assert main(["train", "synthetic:nodes=0", *QUICK]) == 2
    assert "--data-dir" not in _error(capsys)


# ------------------------------------------------------------------------------ partitions/workers
@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("messages") / "my-graph"
    save_graph(generate(SyntheticConfig(nodes=6, degree=2, classes=2, features=4)), out)
    return out


def test_partitions_naming_a_graph_directory_says_how_to_train_it(graph_dir, capsys):
    assert main(["train", "--partitions", str(graph_dir), *QUICK]) == 2
    err = _error(capsys)
    assert "a graph directory" in err and f"graph:{graph_dir}" in err
    assert "--overwrite" not in err


def test_more_workers_than_nodes_speaks_of_workers(graph_dir, capsys):
    assert main(["train", f"graph:{graph_dir}", "--workers", "8", *QUICK]) == 2
    err = _error(capsys).splitlines()[-1]  # (after the warning of more workers than cores)
    assert "--workers 8 exceeds the 6 nodes" in err and "--workers 6 or fewer" in err
    assert "--parts" not in err


def test_more_workers_than_cores_is_said_before_anything_starts(graph_dir, capsys):
    cores = len(os.sched_getaffinity(0))
    if cores >= 6:
        pytest.skip("needs fewer cores than the 6-node graph's nodes")
    # one worker more than the cores, on a graph too small for them: warned, then refused
    assert main(["train", f"graph:{graph_dir}", "--workers", "7", *QUICK]) == 2
    err = _error(capsys)
    assert f"warning: --workers 7 on {cores} CPU core" in err


def test_more_threads_than_cores_is_said_and_the_run_goes_on(tmp_path, capsys):
    cores = len(os.sched_getaffinity(0))
    graph = tmp_path / "g"
    save_graph(generate(SyntheticConfig(nodes=200, degree=4, classes=2, features=4)), graph)
    for threads, warned in ((cores, False), (cores + 1, True)):
        assert main(["train", f"graph:{graph}", "--threads", str(threads), *QUICK]) == 0
        err = _error(capsys)
        said = f"warning: --threads {threads} ({threads} torch threads) on {cores}"
        assert (said in err) is warned
        if warned:
            assert f"than with --threads {cores}" in err and len(err.splitlines()) == 1, err


def test_workers_refuse_an_empty_split_as_one_process_does(tmp_path, capsys):
    import dataclasses

    graph = generate(SyntheticConfig(nodes=300, degree=5, classes=3, features=4, seed=2))
    save_graph(dataclasses.replace(graph, test_idx=np.zeros(0, np.int64)), tmp_path / "g")
    parts = tmp_path / "p"
    assert main(["partition", f"graph:{tmp_path / 'g'}", "--parts", "2", "--out", str(parts)]) == 0
    capsys.readouterr()
    for argv in (["train", f"graph:{tmp_path / 'g'}"], ["train", "--partitions", str(parts)]):
        assert main([*argv, *QUICK]) == 2
        err = _error(capsys)
        assert "cannot be used for node prediction: its test split is empty" in err, err
        assert len(err.splitlines()) == 1


def test_a_node_table_naming_a_node_twice_says_which_as_written(tmp_path, capsys):
    (tmp_path / "papers.csv").write_text("id,name\n1,a\n1,b\n")
    (tmp_path / "cites.csv").write_text("src,dst\n1,1\n")
    argv = ["convert", "--node-tables", f"paper={tmp_path / 'papers.csv'}", "--edge-tables"]
    argv += [f"paper/cites/paper={tmp_path / 'cites.csv'}", "--out", str(tmp_path / "h")]
    assert main(argv) == 2
    assert "node id 1 appears twice in column 'id'" in _error(capsys)


def test_a_warning_is_one_line_naming_the_command(tmp_path, capsys):
    rows = [(i % 7, (i + 1) % 7, float((i * 37) % 50)) for i in range(50)]  # out of time order
    (tmp_path / "ev.csv").write_text("".join(f"{s},{d},{t}\n" for s, d, t in rows))
    main(["train", f"temporal:{tmp_path / 'ev.csv'}", "--epochs", "1", "--quiet"])
    lines = capsys.readouterr().err.splitlines()
    warned = [line for line in lines if "not in time order" in line]
    assert len(warned) == 1 and warned[0].startswith("shardgnn train: warning: "), lines
    assert not any("load_temporal_events(" in line for line in lines)  # no source line


@pytest.fixture(scope="module")
def shardgnn_folders(tmp_path_factory):
    """One folder of each kind shardgnn writes: a graph directory ``g``, a partition directory
    ``p``, a folder of checkpoints ``ck`` (a one-process run's), and a file ``f``."""
    root = tmp_path_factory.mktemp("kinds")
    graph = generate(SyntheticConfig(nodes=200, degree=4, classes=3, features=4, seed=1))
    save_graph(graph, root / "g")
    argv = ["partition", f"graph:{root / 'g'}", "--parts", "2", "--out", str(root / "p")]
    assert main(argv) == 0
    assert main(["train", f"graph:{root / 'g'}", *QUICK, "--checkpoint-dir", str(root / "ck")]) == 0
    (root / "f").write_text("0 1\n")
    return root


def test_a_folder_named_as_a_dataset_is_told_how_to_name_it(shardgnn_folders, capsys):
    root = shardgnn_folders
    capsys.readouterr()
    for name, expected in (
        ("g", f"is a graph directory; train it as the dataset graph:{root / 'g'}"),
        ("p", f"is a partition directory; train it with --partitions {root / 'p'}"),
        ("ck", f"holds checkpoints; resume their run with --checkpoint-dir {root / 'ck'} --resume"),
    ):
        assert main(["train", str(root / name), *QUICK]) == 2
        err = _error(capsys)
        assert f"unknown dataset '{root / name}': " in err and expected in err, err
        assert len(err.splitlines()) == 1  # not the list of every dataset


@pytest.mark.parametrize(
    "argv, given, error, fix",
    [
        # a folder of another kind than the one expected: named, with its own use
        (["info", "graph:{p}"], "p", "is a partition directory, not a graph directory",
         "train it with --partitions {p}; a graph directory is written by `shardgnn convert`"),
        (["info", "hetero:{g}"], "g", "is a graph directory, not a typed (heterogeneous) graph "
         "directory", "train it as the dataset graph:{g} (with --workers N"),
        (["info", "graphset:{g}"], "g", "is a graph directory, not a graph-set directory",
         "train it as the dataset graph:{g}"),
        (["train", "--partitions", "{g}", *QUICK], "g",
         "is a graph directory, not a partition directory",
         "or partition it: `shardgnn partition graph:{g} --parts N --out DIR`"),
        (["train", "--partitions", "{ck}/epoch-000001", *QUICK], "ck/epoch-000001",
         "is a checkpoint, not a partition directory",
         "infer or export from it with --checkpoint {ck}/epoch-000001"),
        # not the advice to delete it that a damaged checkpoint gets
        (["infer", "--checkpoint", "{p}", "--out", "{p}/../out"], "p",
         "is a partition directory, not a checkpoint", "train it with --partitions {p}"),
        # a folder of checkpoints, a file, nothing
        (["verify", "{ck}"], "ck", "holds checkpoints (epoch-N folders), not a partition "
         "directory", "resume the run that wrote them with --checkpoint-dir {ck} --resume"),
        (["info", "graph:{f}"], "f", "is a file, not a graph directory",
         "give a graph directory, written by `shardgnn convert`"),
        (["verify", "{f}"], "f", "is a file, not a partition directory",
         "give a partition directory, written by `shardgnn partition`"),
        (["info", "graph:{f}x"], "fx", "no such graph directory", "give a graph directory"),
    ],
)  # fmt: skip
def test_a_folder_of_the_wrong_kind_is_named_with_its_use(
    shardgnn_folders, capsys, argv, given, error, fix
):
    """A graph, partition or checkpoint folder (or a file) given where another kind is expected
    is refused in one line that says what it is and how it is used."""
    folders = {k: shardgnn_folders / k for k in ("g", "p", "ck", "f")}
    capsys.readouterr()
    assert main([a.format(**folders) for a in argv]) == 2
    lines = _error(capsys).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith(f"{shardgnn_folders / given}: {error}"), lines
    assert lines[1].startswith("  fix: ") and fix.format(**folders) in lines[1], lines


# ------------------------------------------------------------------------------------ output paths
def test_results_naming_a_folder_is_refused_before_training(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    for given in (f"{tmp_path / 'out'}/", str(tmp_path / "out")):
        assert main(["train", SPEC, *QUICK, "--results", given]) == 2
        captured = capsys.readouterr()
        assert "--results" in captured.err and "names a folder" in captured.err
        assert "epoch 1" not in captured.out  # refused before the first epoch
        assert len(captured.err.strip().splitlines()) == 1


def test_output_folders_under_a_file_are_refused(tmp_path, capsys):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    assert main(["train", SPEC, *QUICK, "--checkpoint-dir", str(afile)]) == 2
    assert "--checkpoint-dir" in _error(capsys)
    assert main(["train", SPEC, *QUICK, "--results", str(afile / "r.json")]) == 2
    assert "is a file" in _error(capsys)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_where_nothing_can_be_created_is_refused_before_training(capsys):
    # /proc passes the permission bits (root) and refuses every new folder: only trying tells
    for flag, path in (("--checkpoint-dir", "/proc/shardgnn-ck"), ("--results", "/proc/r.json")):
        assert main(["train", SPEC, *QUICK, flag, path]) == 2
        err = _error(capsys)
        assert err.startswith(f"shardgnn train: error: {flag} {path}: ")
        # (another user than root is stopped by the permission bits already)
        assert "nothing can be created in /proc" in err or "not writable by this user" in err
        assert len(err.splitlines()) == 1


def test_infer_checks_its_output_folder_before_any_work(tmp_path, capsys):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    argv = ["infer", "--checkpoint", str(tmp_path / "none"), "--partitions", str(tmp_path)]
    assert main([*argv, "--out", str(afile)]) == 2
    assert "--out" in _error(capsys)


def test_plot_refuses_what_is_not_a_results_file_in_one_line(tmp_path, capsys):
    (tmp_path / "binary.json").write_bytes(b'{"epochs": "\xd0\x00"}')
    (tmp_path / "other.json").write_text('{"a": 1}')
    # epochs without their number (a KeyError traceback), and a value not a number (drawn)
    (tmp_path / "nameless.json").write_text('{"epochs": [{"loss": 1.0}]}')
    (tmp_path / "word.json").write_text('{"epochs": [{"epoch": 1, "loss": "x"}]}')
    for name, expected in (
        ("absent.json", "no such results file"),
        (".", "is a folder; give the JSON file of `shardgnn train --results FILE`"),
        ("binary.json", "cannot be read as a results file"),
        ("other.json", "not a shardgnn results file"),
        ("nameless.json", "entry 1 of 'epochs' has no integer 'epoch' (it has None)"),
        ("word.json", "entry 1 of 'epochs' (epoch 1) has loss 'x', not a number"),
    ):
        assert main(["plot", str(tmp_path / name), "--out", str(tmp_path / "plots")]) == 2
        err = _error(capsys)
        assert err.startswith("shardgnn plot: error: ") and expected in err, err
        assert len(err.splitlines()) == 1


def test_plot_refuses_an_image_name_for_its_folder_of_figures(tmp_path, capsys):
    """``--out curves.png`` made a folder named curves.png holding training_curves.png."""
    (tmp_path / "r.json").write_text("{}")
    assert main(["plot", str(tmp_path / "r.json"), "--out", str(tmp_path / "curves.png")]) == 2
    err = _error(capsys)
    assert "curves.png: names the folder the figures are written to" in err, err
    assert f"--out {tmp_path / 'curves'}" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "curves.png").exists()
    # a file named as --out (the results file itself): refused, not FileExistsError's traceback
    assert main(["plot", str(tmp_path / "r.json"), "--out", str(tmp_path / "r.json")]) == 2
    err = _error(capsys)
    assert "r.json: is a file, and it takes a folder; give a folder" in err, err
    assert (tmp_path / "r.json").read_text() == "{}"


def test_plot_never_replaces_earlier_figures_unless_asked(tmp_path, capsys):
    results = tmp_path / "r.json"
    assert main(["train", SPEC, *QUICK, "--results", str(results)]) == 0
    out = tmp_path / "plots"
    assert main(["plot", str(results), "--out", str(out)]) == 0
    before = (out / "training_curves.png").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["plot", str(results), "--out", str(out)]) == 2
    assert "already holds training_curves.png" in _error(capsys)
    assert (out / "training_curves.png").stat().st_mtime_ns == before
    assert main(["plot", str(results), "--out", str(out), "--overwrite"]) == 0


# -------------------------------------------------------------------------------- what is reported
def test_a_malformed_pairs_file_prints_its_fix_once(tmp_path):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("0 1\n2 3 4\n")
    with pytest.raises(DatasetError) as failure:
        read_pairs(pairs, 10)
    assert "pair 2 has 3 values" in str(failure.value)
    assert str(failure.value).count("fix:") == 1


def test_the_summary_names_the_metric_selected_on(capsys):
    results = {
        "dataset": {"name": "kg-umls", "num_nodes": 135, "num_edges": 5216},
        "num_epochs_run": 1,
        "best_epoch": 1,
        "metric": "mrr",
        "val_acc": 0.78,
        "test_acc": 0.77,
        "mean_epoch_time_s": 1.0,
        "mode": "full",
        "total_time_s": 2.0,
    }
    print_summary(results)
    out = capsys.readouterr().out
    assert "val MRR" in out and "test MRR (at best val)" in out and "accuracy" not in out
    print_summary({**results, "metric": "acc"})
    assert "val accuracy" in capsys.readouterr().out


def test_the_summary_shows_a_synthetic_spec_without_its_defaults(capsys):
    """Results keep the canonical spec (every synthetic option spelled); the table, read by a
    person, shows what differs from the defaults: the main job's row is no longer 190 wide."""
    from shardgnn.graph.datasets import canonical_spec, readable_spec

    recorded = canonical_spec("synthetic:nodes=3000,degree=20,labels=multilabel")
    assert "homophily=0.7" in recorded
    assert readable_spec(recorded) == "synthetic:nodes=3000,labels=multilabel"
    assert readable_spec(canonical_spec("synthetic")) == "synthetic"
    assert readable_spec("cora") == "cora" and readable_spec("synthetic:x=1") == "synthetic:x=1"
    results = {
        "dataset": {"spec": recorded, "name": "synthetic", "num_nodes": 3000, "num_edges": 60},
        "num_epochs_run": 1,
        "best_epoch": 1,
        "val_acc": 0.5,
        "test_acc": 0.5,
        "mean_epoch_time_s": 1.0,
        "mode": "full",
        "total_time_s": 2.0,
    }
    print_summary(results)
    out = capsys.readouterr().out
    assert "| synthetic:nodes=3000,labels=multilabel (3,000 nodes, 60 edges) |" in out
    assert "homophily" not in out


@requires_shared_data
def test_knowledge_graph_batch_size_is_read_not_called_ignored(tmp_path, capsys):
    cmd = ["train", "kg-nations", "--task", "link", "--model", "rgcn", "--layers", "1"]
    cmd += ["--hidden", "8", "--out-dim", "8", "--epochs", "1", "--link-loss", "softmax"]
    cmd += ["--data-dir", str(SHARED_DATA), "--quiet"]
    for batch in ("64", "4096"):
        assert (
            main([*cmd, "--batch-size", batch, "--results", str(tmp_path / f"{batch}.json")]) == 0
        )
        captured = capsys.readouterr()
        assert "--batch-size is ignored" not in captured.err
        assert "val MRR" in captured.out
    # the batch size changes the steps taken, so the result
    import json

    small, large = (json.loads((tmp_path / f"{b}.json").read_text()) for b in ("64", "4096"))
    assert small["epochs"][0]["loss"] != large["epochs"][0]["loss"]
    assert np.isfinite(small["epochs"][0]["loss"])


# -------------------------------------------------------------------------------------- defaults
def test_the_default_batch_gives_a_small_training_set_eight_steps():
    from shardgnn.train.config import TrainConfig

    config = TrainConfig()
    assert config.node_batch_size(200) == 32  # amazon-computers' 20 per class: 7 steps
    assert config.node_batch_size(1000) == 125  # 8 steps
    assert config.node_batch_size(10_000) == 1024  # the synthetic default: as before
    assert config.item_batch_size == 1024
    given = TrainConfig(batch_size=500)
    assert given.node_batch_size(200) == given.item_batch_size == 500


@pytest.mark.slow
@requires_shared_data
def test_default_settings_train_a_per_class_split(tmp_path):
    """amazon-computers' standard split (20 training nodes per class) with nothing but the dataset
    and 10 epochs: 0.24 test accuracy when the default batch took one step per epoch."""
    import json

    results = tmp_path / "r.json"
    cmd = ["train", "amazon-computers", "--epochs", "10", "--data-dir", str(SHARED_DATA)]
    assert main([*cmd, "--quiet", "--results", str(results)]) == 0
    assert json.loads(results.read_text())["test_acc"] > 0.6


@pytest.mark.parametrize(
    "argv",
    [
        ["partition", "synthetic:nodes=50", "--parts", "2", "--out"],
        ["convert", "--edges", "EDGES", "--out"],
        ["plot", "RESULTS", "--out"],
    ],
)
def test_an_output_folder_under_a_file_is_refused_before_any_work(tmp_path, capsys, argv):
    """partition and convert made their temporary folder beside --out and failed there with
    FileNotFoundError's or FileExistsError's traceback (after partitioning, for partition)."""
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n")
    (tmp_path / "r.json").write_text("{}")
    words = [{"EDGES": str(tmp_path / "edges.txt"), "RESULTS": str(tmp_path / "r.json")}.get(w, w)
             for w in argv]  # fmt: skip
    assert main([*words, str(a_file / "out")]) == 2
    err = _error(capsys)
    assert err.endswith(
        f"--out {a_file / 'out'}: {a_file} is a file, so nothing can be written under it"
    ), err
    assert "\n" not in err and a_file.read_text() == "kept"
