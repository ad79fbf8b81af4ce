"""``shardgnn plot``: turn results JSON files and partition directories into PNG figures
(matplotlib, no display needed)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from shardgnn.atomic import atomic_open, check_output_path
from shardgnn.cli.flags import nonempty_text
from shardgnn.errors import ConfigError, ShardgnnError
from shardgnn.train.report import NODE_SCORES, metric_name


def add_parsers(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser(
        "plot",
        help="draw PNG figures from results JSON files or partition directories",
        description="training_curves.png (loss and accuracies per epoch, one line per run), "
        "cache_hit_rate.png (runs with a feature cache), accuracy_vs_bytes.png (two or more "
        "distributed runs: test accuracy against remote bytes per epoch, one point per run "
        "labelled by its communication strategy), one figure per partition directory, and "
        "plan_NAME.png per `shardgnn plan --out NAME.json` (bytes from the busiest worker and, "
        "with --calibrate, predicted epoch seconds against the worker count, per strategy). "
        "Results of a run still going (status: running) plot too.",
    )
    plot.add_argument(
        "results",
        nargs="+",
        help="results JSON files (`shardgnn train --results`), plans (`shardgnn plan --out`) "
        "or partition directories",
    )
    plot.add_argument(
        "--out",
        type=nonempty_text,
        default="plots",
        help="output folder for the PNG files (default: plots)",
    )
    plot.add_argument(
        "--overwrite",
        action="store_true",
        help="replace figures already in --out (without it, existing figures are never replaced)",
    )
    plot.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``shardgnn plot``."""
    from shardgnn.cli.partition import partition_figure_name, plot_partition
    from shardgnn.partition.format import is_partition_dir

    out = Path(args.out)
    if out.suffix.lower() in IMAGE_SUFFIXES and not out.is_dir():
        raise ConfigError(
            f"--out {args.out}: names the folder the figures are written to (one PNG per "
            f"figure: {TRAINING_FIGURES[0]}, ...), not an image; pass a folder, e.g. "
            f"--out {out.with_suffix('')}"
        )
    check_output_path(out, "--out", folder=True)
    plans = [Path(p) for p in args.results if not is_partition_dir(p) and _is_plan(Path(p))]
    names = [*TRAINING_FIGURES, *(partition_figure_name(p) for p in args.results)]
    names += [plan_figure_name(p) for p in plans]
    present = [name for name in names if (out / name).exists()]
    if present and not args.overwrite:
        raise ConfigError(
            f"--out {args.out} already holds {', '.join(present)} (from an earlier plot); pass "
            "--overwrite to replace them, or choose another --out"
        )
    written: list[Path] = []
    for path in args.results:
        if is_partition_dir(path):
            written += plot_partition(path, Path(args.out))
    for path in plans:
        written.append(plot_plan(path, out))
    results = [Path(p) for p in args.results if not is_partition_dir(p) and Path(p) not in plans]
    if results:
        written += plot_training_curves(results, Path(args.out))
    for path in written:
        print(f"wrote {path}")
    return 0


def _integer_epochs(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _load_results(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShardgnnError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise ShardgnnError(
            f"{path}: is a folder; give the JSON file of `shardgnn train --results FILE` (or of "
            "`shardgnn plan --out FILE`)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ShardgnnError(f"{path}: cannot be read as a results file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ShardgnnError(f"{path}: not valid JSON ({exc}); was the run interrupted?") from None
    if not isinstance(data, dict) or not isinstance(data.get("epochs"), list) or not data["epochs"]:
        raise ShardgnnError(f"{path}: not a shardgnn results file (no 'epochs' list)")
    for position, entry in enumerate(data["epochs"], 1):
        problem = _epoch_problem(entry)
        if problem:
            raise ShardgnnError(
                f"{path}: entry {position} of 'epochs' {problem}; not a shardgnn results file, or "
                "one edited by hand"
            )
    return data


PLOTTED_EPOCH_VALUES = ("loss", "train_acc", "val_acc")
"""The values of a results file's epoch entries that the training curves draw."""


def _epoch_problem(entry: object) -> str | None:
    """Why one entry of a results file's ``epochs`` cannot be drawn (None: it can): it needs an
    integer ``epoch`` and numbers (or null: not measured) for the values drawn."""
    if not isinstance(entry, dict):
        return "is not an object"
    epoch = entry.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return f"has no integer 'epoch' (it has {epoch!r})"
    for key in PLOTTED_EPOCH_VALUES:
        value = entry.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"(epoch {epoch}) has {key} {value!r}, not a number"
    return None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_figure(runs: list[tuple[Path, dict]]):
    """Loss and accuracies per epoch, one line per run (a matplotlib figure)."""
    plt = _pyplot()
    panels = [("loss", "training loss"), *_metric_panels({d.get("metric", "acc") for _, d in runs})]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for path, data in runs:
        epochs = [e["epoch"] for e in data["epochs"]]
        for ax, (key, _) in zip(axes, panels):
            ax.plot(
                epochs,
                [e.get(key) for e in data["epochs"]],
                marker="o",
                markersize=3,
                label=path.stem,
            )
    for ax, (_, title) in zip(axes, panels):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        _integer_epochs(ax)
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _metric_panels(metrics: set[str]) -> list[tuple[str, str]]:
    """Titles of the training and validation panels: what ``train_acc``/``val_acc`` hold (node
    classification: accuracy; link prediction: pairs on the right side of 0, and AUC, or AP for
    temporal link prediction)."""
    link = metrics - NODE_SCORES.keys()
    if not link and len(metrics) == 1:
        (metric,) = metrics
        return [
            ("train_acc", NODE_SCORES[metric]),
            ("val_acc", f"validation {metric_name(metric)}"),
        ]
    if not link:
        return [("train_acc", "training score"), ("val_acc", "validation metric")]
    names = "/".join(sorted(m.upper() for m in link))
    if "acc" not in metrics:
        return [
            ("train_acc", "training pairs scored on the right side"),
            ("val_acc", f"validation {names}"),
        ]
    return [
        ("train_acc", "training accuracy (link runs: pairs right)"),
        ("val_acc", f"validation accuracy (link runs: {names})"),
    ]


def _is_plan(path: Path) -> bool:
    """Whether ``path`` is the JSON of ``shardgnn plan --out`` (a list of costs, no epochs)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # reported by the results reader
    return isinstance(data, dict) and isinstance(data.get("costs"), list) and "epochs" not in data


def plan_figure_name(path: str | Path) -> str:
    return f"plan_{Path(path).stem}.png"


def plan_dependencies(cost: dict) -> str:
    """A plan JSON row's ``--dependencies`` (rows written before they were planned: the
    default)."""
    return (cost.get("config") or {}).get("dependencies", "communicate")


def plot_plan(path: Path, out_dir: Path) -> Path:
    """``plan_NAME.png``: per strategy (its best replication or grid at each worker count; the
    sparse 1D plan's ``--dependencies`` apart) and mini-batch option, the MB the busiest worker
    sends per epoch and, when the plan has times, the predicted epoch seconds, against the
    worker count (log scales)."""
    data = json.loads(path.read_text())
    # mini-batch options are lines of their own ("mini-batch 8-bit", ...)
    costs = data["costs"] + [
        {**c, "strategy": f"mini-batch {c['option']}"} for c in data.get("minibatch_costs", [])
    ]
    timed = all(c.get("epoch_s") is not None for c in costs)
    panels = [("max_worker_bytes", "MB the busiest worker sends per epoch", 1e-6)]
    if timed:
        panels.append(("epoch_s", "predicted epoch seconds", 1.0))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    # one line per --spmm (its best layout), and one per way of getting remote dependencies
    from shardgnn.fullgraph.config import strategy_label

    for c in costs:
        c["strategy"] = strategy_label(c["strategy"], "", plan_dependencies(c))
    strategies = list(dict.fromkeys(c["strategy"] for c in costs))
    for ax, (key, title, scale) in zip(axes[0], panels):
        for strategy in strategies:
            best: dict[int, float] = {}
            for c in costs:
                if c["strategy"] == strategy:
                    value = c[key] * scale
                    best[c["workers"]] = min(value, best.get(c["workers"], value))
            workers = sorted(best)
            ax.plot(workers, [best[p] for p in workers], marker="o", markersize=3, label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{data.get('dataset', path.stem)}: shardgnn plan", fontsize=10)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    return _save(fig, out_dir / plan_figure_name(path))


TRAINING_FIGURES = ("training_curves.png", "cache_hit_rate.png", "accuracy_vs_bytes.png")
"""What :func:`plot_training_curves` may write (the last two only for some runs)."""
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
"""An ``--out`` ending so names an image, where a folder of figures is meant."""


def _save(fig, target: Path) -> Path:
    with atomic_open(target, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    _pyplot().close(fig)
    return target


def plot_training_curves(results: list[Path], out_dir: Path) -> list[Path]:
    """``training_curves.png`` of every results file, and ``cache_hit_rate.png`` of those whose
    run had a feature cache; returns the files written."""
    runs = [(path, _load_results(path)) for path in results]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [_save(training_figure(runs), out_dir / "training_curves.png")]
    # Only runs that had a cache: a run without one still reports remote bytes, but no hit rate.
    cached = [(path, data) for path, data in runs if _cache_policy(data) != "none"]
    if cached:
        written.append(_save(_cache_figure(cached), out_dir / "cache_hit_rate.png"))
    traded = [(p, d) for p, d in runs if remote_mb_per_epoch(d) and d.get("test_acc") is not None]
    if len(traded) >= 2:
        written.append(_save(_strategies_figure(traded), out_dir / "accuracy_vs_bytes.png"))
    return written


TRADED_STAGES = ("fetch", "sample", "historical", "embed")
"""Stages whose traffic communication-avoiding strategies trade against each other: input rows,
sampling requests and replies, historical embeddings and learnable rows."""


def remote_mb_per_epoch(data: dict) -> float | None:
    """MB received over the network per epoch in ``TRADED_STAGES``, summed over workers (None: a
    run with no such traffic, e.g. one process)."""
    comm = data.get("comm") or {}
    total = sum(float((comm.get(s) or {}).get("bytes_recv", 0)) for s in TRADED_STAGES)
    return total / 1e6 / len(data["epochs"]) if total else None


def strategy_label(data: dict) -> str:
    """A run's communication strategy in a few words, from its config (``exact`` when none)."""
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    parts = []
    if config.get("batching", "random") != "random":
        parts.append(str(config["batching"]))
    if config.get("historical"):
        mode = "pull " if config.get("historical_mode") == "pull" else ""
        scope = " all" if config.get("historical_scope") == "all" else ""
        parts.append(f"historical {mode}{config['historical']}{scope}")
    cache = config.get("cache") or {}
    if cache.get("policy", "none") != "none":
        parts.append(f"cache {cache['policy']} {cache.get('size', '')}".strip())
    if config.get("fetch_bits", 32) != 32:
        ef = "+EF" if config.get("error_feedback") else ""
        parts.append(f"{config['fetch_bits']}-bit{ef}")
    return ", ".join(parts) or "exact"


def _strategies_figure(runs: list[tuple[Path, dict]]):
    """Test accuracy against remote MB per epoch, one labelled point per run."""
    fig, ax = _pyplot().subplots(figsize=(7, 5))
    for path, data in runs:
        x, y = remote_mb_per_epoch(data), 100 * float(data["test_acc"])
        ax.scatter([x], [y], s=25)
        ax.annotate(
            f"{strategy_label(data)} ({path.stem})",
            (x, y),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    ax.set_xlabel("remote MB per epoch (fetch, sampling, historical, learnable rows)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("accuracy against remote bytes")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def _cache_policy(data: dict) -> str:
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    return str((config.get("cache") or {}).get("policy", "none"))


def _cache_figure(runs: list[tuple[Path, dict]]):
    """Hit rate per epoch and remote feature MB per epoch, one line per run labelled by policy."""
    fig, axes = _pyplot().subplots(1, 2, figsize=(10, 4))
    for path, data in runs:
        cache = data["config"]["cache"]
        label = f"{cache['policy']} {cache.get('size', '')} ({path.stem})"
        epochs = [e for e in data["epochs"] if e.get("cache")]
        x = [e["epoch"] for e in epochs]
        axes[0].plot(
            x,
            [100 * (e["cache"]["hit_rate"] or 0.0) for e in epochs],
            marker="o",
            markersize=3,
            label=label,
        )
        axes[1].plot(
            x,
            [e["cache"]["remote_feature_mb"] for e in epochs],
            marker="o",
            markersize=3,
            label=label,
        )
    for ax, title in zip(axes, ("feature cache hit rate (%)", "remote feature MB per epoch")):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        _integer_epochs(ax)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
