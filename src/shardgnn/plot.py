"""``shardgnn plot``: turn results JSON files into PNG figures (matplotlib, no display needed)."""

from __future__ import annotations

import json
from pathlib import Path

from shardgnn.atomic import atomic_open
from shardgnn.errors import ShardgnnError


def _load_results(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShardgnnError(f"{path}: no such results file") from None
    except json.JSONDecodeError as exc:
        raise ShardgnnError(f"{path}: not valid JSON ({exc}); was the run interrupted?") from None
    if not isinstance(data, dict) or not isinstance(data.get("epochs"), list) or not data["epochs"]:
        raise ShardgnnError(f"{path}: not a shardgnn results file (no 'epochs' list)")
    return data


def plot_training_curves(results: list[Path], out_dir: Path) -> list[Path]:
    """Draw loss and accuracy per epoch for each results file; one curve per file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(path, _load_results(path)) for path in results]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    panels = [("loss", "training loss"), ("train_acc", "training accuracy"), ("val_acc", "validation accuracy")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for path, data in runs:
        epochs = [e["epoch"] for e in data["epochs"]]
        label = path.stem
        for ax, (key, _) in zip(axes, panels):
            ax.plot(epochs, [e.get(key) for e in data["epochs"]], marker="o", markersize=3, label=label)
    for ax, (_, title) in zip(axes, panels):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8)
    fig.tight_layout()
    target = out_dir / "training_curves.png"
    with atomic_open(target, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    plt.close(fig)
    written.append(target)
    cached = [(path, data) for path, data in runs if any(e.get("cache") for e in data["epochs"])]
    if cached:
        written.append(_plot_cache(cached, out_dir, plt))
    return written


def _plot_cache(runs: list[tuple[Path, dict]], out_dir: Path, plt) -> Path:
    """Hit rate per epoch and remote feature MB per epoch, one line per run labelled by policy."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for path, data in runs:
        cache = data.get("cache") or {}
        label = f"{cache.get('policy', '?')}" + (f" {cache['size']}" if cache.get("size") else "") + f" ({path.stem})"
        epochs = [e for e in data["epochs"] if e.get("cache")]
        x = [e["epoch"] for e in epochs]
        axes[0].plot(x, [100 * (e["cache"]["hit_rate"] or 0.0) for e in epochs], marker="o", markersize=3, label=label)
        axes[1].plot(x, [e["cache"]["remote_feature_mb"] for e in epochs], marker="o", markersize=3, label=label)
    for ax, title in zip(axes, ("feature cache hit rate (%)", "remote feature MB per epoch")):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    target = out_dir / "cache_hit_rate.png"
    with atomic_open(target, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120)
    plt.close(fig)
    return target
