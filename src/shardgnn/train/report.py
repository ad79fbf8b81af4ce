"""What a run prints: the line at the end of every epoch and the end-of-run summary table."""

from __future__ import annotations

from typing import Any

from shardgnn.graph.datasets import readable_spec
from shardgnn.timing import STAGE_ORDER
from shardgnn.train.progress import format_table


def print_summary(results: dict[str, Any], *, epochs: bool = False) -> None:
    """Print the headline numbers of a run (and, with ``epochs``, a table of every epoch: the
    training loop prints one line per epoch as it goes, so the CLI leaves it out)."""
    if epochs:
        print(epoch_table(results["epochs"]))
        print()
    ds = results["dataset"]
    edges_per_s = results.get("sampled_edges_per_s")
    print(
        format_table(
            ["metric", "value"],
            [
                (
                    "dataset",
                    f"{readable_spec(ds['spec']) if ds.get('spec') else ds['name']} ("
                    + (f"{ds['num_graphs']:,} graphs, " if "num_graphs" in ds else "")
                    + f"{ds['num_nodes']:,} nodes, {ds['num_edges']:,} edges)",
                ),
                ("epochs", f"{results['num_epochs_run']} (best: {results['best_epoch']})"),
                *_selection_rows(results),
                ("mean epoch time (s, epochs >= 2)", results["mean_epoch_time_s"]),
                *(
                    []
                    if results.get("mode") == "full"
                    else [
                        ("sampled edges / s", "-" if edges_per_s is None else f"{edges_per_s:,.0f}")
                    ]
                ),
                *_spmm_rows(results),
                *_cache_rows(results.get("cache")),
                *_locality_rows(results),
                *_memory_rows(results.get("peak_memory_mb")),
                ("total time (s)", results["total_time_s"]),
            ],
        )
    )
    comm = results.get("comm")
    if comm:
        print()
        print(
            f"communication over {results.get('workers', '?')} workers (summed over workers and "
            "epochs):"
        )
        print(
            format_table(
                [
                    "stage",
                    "MB sent",
                    "MB received",
                    "max MB sent (1 rank)",
                    "max MB recv (1 rank)",
                    "MB same-host",
                    "seconds",
                ],
                [
                    (
                        name,
                        st["bytes_sent"] / 1e6,
                        st["bytes_recv"] / 1e6,
                        st.get("max_rank_bytes_sent", 0) / 1e6,
                        st.get("max_rank_bytes_recv", 0) / 1e6,
                        st.get("host_bytes", 0) / 1e6,
                        st["time_s"],
                    )
                    for name, st in sorted(comm.items())
                ],
            )
        )


def epoch_table(epochs: list[dict[str, Any]]) -> str:
    """Every epoch of a results file as a table: loss, accuracies, seconds per stage, and the
    cache's hit rate and remote MB when a cache ran."""
    present = {name for e in epochs for name in e.get("stages", {})}
    # Mini-batch runs split an epoch into sample/fetch/compute; full-graph runs into comm/compute.
    stages = [name for name in STAGE_ORDER if name in present] or ["compute"]
    cached = any(e.get("cache") for e in epochs)
    rows = []
    for e in epochs:
        st = e.get("stages", {})
        traffic = e.get("cache") or {}
        rows.append(
            (
                e["epoch"],
                e["loss"],
                e["train_acc"],
                e["val_acc"],
                e["time_s"],
                *(st.get(name, 0.0) for name in stages),
                *(
                    (_rate(traffic.get("hit_rate")), traffic.get("remote_feature_mb", 0.0))
                    if cached
                    else ()
                ),
            )
        )
    return format_table(
        [
            "epoch",
            "loss",
            "train_acc",
            "val_acc",
            "time_s",
            *(f"{n}_s" for n in stages),
            *(("hit_rate", "remote_MB") if cached else ()),
        ],
        rows,
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _memory_rows(peak: dict[str, list[float]] | None) -> list[tuple[str, str]]:
    """The busiest worker's peak memory (resident set; on GPUs, torch's allocations)."""
    if not peak or not peak.get("rss"):
        return []
    rows = [("peak memory MB (busiest worker)", f"{max(peak['rss']):,.0f}")]
    if peak.get("gpu"):
        rows.append(("peak GPU memory MB (busiest worker)", f"{max(peak['gpu']):,.0f}"))
    return rows


def _spmm_rows(results: dict) -> list[tuple[str, str]]:
    """The distributed SpMM's row of the summary (distributed full-graph runs only)."""
    if "spmm" not in results:
        return []
    layout = (
        f"grid {results['grid']}"
        if results.get("grid")
        else f"replication {results['replication']}"
    )
    rows = [
        (
            "distributed SpMM",
            f"{results['spmm']} ({layout}, {results['bits']} bits, "
            f"staleness {results['staleness']})",
        )
    ]
    deps = results.get("dependencies") or {}
    if "recomputed_rows" in deps:  # --dependencies cache/hybrid, per layer, input layer first
        rows.append(
            (
                "remote rows per layer",
                f"{deps['mode']}: computed here {deps['recomputed_rows']} (layer 0: cached "
                f"features), received {deps['received_rows']} (summed over workers)",
            )
        )
    return rows


def _cache_rows(cache: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Summary rows of the feature cache (distributed mini-batch runs)."""
    if not cache:
        return []
    policy = cache["policy"]
    if policy != "none":
        held = {"csr": ", as CSR", "mixed": ", as CSR on some workers"}.get(
            cache.get("cache_layout"), ""
        )
        policy += (
            f" ({cache['capacity_rows']:,} rows = {cache['capacity_mb']:.1f} MB per worker{held}"
        )
        policy += f", look-ahead {cache['lookahead']} batches)" if cache.get("lookahead") else ")"
    storage = cache["feature_storage"]
    if cache.get("feature_layout") in ("dense", "csr"):  # results from before have no layout
        held = cache["feature_mb_per_worker"]
        sparse = cache.get("sparse_batch_workers")
        batches = f", {sparse} gathering batches sparse" if sparse else ""
        storage += f" ({cache['feature_layout']}, {held:.1f} MB per worker{batches})"
    rows = [("feature cache", policy), ("feature storage", storage)]
    if cache["policy"] != "none" or cache["feature_storage"] == "disk":
        rows.append(("cache hit rate (epochs >= 2)", _rate(cache["hit_rate"])))
    rows += [
        ("remote feature MB / epoch", cache["remote_feature_mb_per_epoch"]),
        ("fetch s / epoch", cache["fetch_s_per_epoch"]),
    ]
    if cache["policy"] != "none":
        rows.append(("cache set-up (s)", cache["setup_s"]))
    if cache.get("lookahead"):
        rows += [
            ("look-ahead s / epoch", cache["lookahead_s_per_epoch"]),
            ("look-ahead staging MB (max, all workers)", cache["max_staged_mb"]),
        ]
    edge_cache = cache.get("edges")
    if edge_cache:
        rows += [
            (
                "edge cache",
                f"{edge_cache['capacity_rows']:,} edge rows = {edge_cache['capacity_mb']:.1f} MB "
                "per worker",
            ),
            ("edge cache hit rate (epochs >= 2)", _rate(edge_cache["hit_rate"])),
            ("edge rows requested MB / epoch", edge_cache["requested_mb_per_epoch"]),
        ]
    row_cache = cache.get("rows")
    if row_cache:
        rows += [
            (
                "row cache",
                f"{row_cache['capacity_rows']:,} rows per worker, staleness "
                f"{row_cache['staleness']} steps",
            ),
            ("row cache hit rate (epochs >= 2)", _rate(row_cache["hit_rate"])),
            ("row age served (mean / max steps)", _ages(row_cache)),
            ("rows refreshed / epoch (too old)", row_cache["refreshed_per_epoch"]),
            ("row + gradient MB / epoch", row_cache["embed_mb_per_epoch"]),
        ]
    return rows


def _locality_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where distributed mini-batch neighbourhoods came from, and historical embeddings."""
    rows: list[tuple[str, Any]] = []
    if results.get("local_edge_share") is not None:
        rows.append(("sampled edges from own part", _rate(results["local_edge_share"])))
    if results.get("kept_edge_share") is not None:
        rows.append(("sampled edges kept in the halo", _rate(results["kept_edge_share"])))
    history = results.get("historical")
    if history:
        rows += [
            (
                "historical embeddings",
                f"layers {','.join(map(str, history['layers']))}, at most {history['max_age']} "
                f"steps old, {history['mode']}"
                + (f", re-sent every {history['push_every']}" if history["push_every"] else "")
                + (", own nodes too" if history.get("scope") == "all" else ""),
            ),
            (
                "historical hit rate ("
                + ("nodes" if history.get("scope") == "all" else "remote nodes")
                + " served)",
                _rate(history["hit_rate"]),
            ),
            ("historical age served (mean / max steps)", _ages(history)),
            (f"historical {history['mode']} MB / epoch", history["traffic_mb_per_epoch"]),
            ("historical tables MB (all workers)", history["memory_mb"]),
        ]
    return rows


def _ages(row_cache: dict[str, Any]) -> str:
    if row_cache["mean_served_age"] is None:
        return "-"
    return f"{row_cache['mean_served_age']:.2f} / {row_cache['max_served_age']}"


NODE_SCORES = {
    "acc": "training accuracy",
    "rocauc": "training labels right (at probability 0.5)",
    "r2": "training R²",
    "tasks": "training score (weighted mean over tasks)",
    "f1": "training accuracy",
}
"""what ``train_acc`` holds for each node-label metric (:mod:`shardgnn.nn.targets`)"""


def metric_name(metric: str) -> str:
    """How a selection metric is named to users: accuracy, ROC-AUC, R², MRR, AP..."""
    names = {"acc": "accuracy", "rocauc": "ROC-AUC", "r2": "R²", "tasks": "task metric", "f1": "F1"}
    return names.get(metric, metric.upper())


def _selection_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """The validation and test metric of the best epoch; link prediction adds every metric."""
    link = results.get("link")
    if not link:
        # the metric the run selects on: accuracy, or MRR (knowledge graphs), AP (temporal), ...
        name = metric_name(results.get("metric", "acc"))
        rows = [
            (f"val {name}", results["val_acc"]),
            (f"test {name} (at best val)", results["test_acc"]),
        ]
        tasks = ((results.get("metric_details") or {}).get("test") or {}).get("tasks") or {}
        for task, detail in tasks.items():  # several tasks: each one's own metric
            rows.append((f"test {task} {metric_name(detail['metric'])}", detail["value"]))
        test = (results.get("metric_details") or {}).get("test") or {}
        for name in ("precision", "recall"):  # F1's parts
            if name in test:
                rows.append((f"test {name}", test[name]))
        return rows
    rows: list[tuple[str, Any]] = [("edges (train / val / test)", link["edges"])]
    for split in ("val", "test"):
        for name, value in link[split].items():
            rows.append((f"{split} {name}" + (" (at best val)" if split == "test" else ""), value))
    return rows


def epoch_line(
    record: Any,
    epochs: int,
    best_val: float,
    best_epoch: int,
    cached: bool = False,
    metric: str = "acc",
) -> str:
    """The line printed when an epoch ends (rank 0, stdout, flushed: readable in a pipe or log)
    for ``record`` (a :class:`~shardgnn.train.loop.EpochRecord`, which this module cannot import:
    the loop imports it). ``metric``: what ``val_acc`` measures (named in the line unless it is
    accuracy). ``best_epoch`` 0: no epoch has been kept yet (the best is left out)."""
    width = len(str(epochs))
    order = {name: i for i, name in enumerate(STAGE_ORDER)}
    shown = sorted(
        (name for name in record.stages if name != "eval" and record.stages[name] >= 0.005),
        key=lambda name: (order.get(name, len(order)), name),
    )
    stages = ", ".join(f"{name} {record.stages[name]:.2f}" for name in shown)
    # node metrics by name (ROC-AUC, R²), link metrics as their keys (auc, mrr, ap)
    named = (
        "" if metric == "acc" else " " + (metric_name(metric) if metric in NODE_SCORES else metric)
    )
    text = (
        f"epoch {record.epoch:>{width}}/{epochs}  loss {record.loss:.4f}  train "
        f"{100 * record.train_acc:5.1f}%  val{named} "
        f"{100 * record.val_acc:5.1f}%"
        + (f" (best {100 * best_val:.1f}% @ {best_epoch})" if best_epoch else "")
        + f"  {record.time_s:.2f} s"
        + (f" ({stages})" if stages else "")
        + f" + eval {record.stages.get('eval', 0.0):.2f} s"
    )
    if cached and record.cache and record.cache.get("hit_rate") is not None:
        text += f"  cache hit {100 * record.cache['hit_rate']:.1f}%"
    if cached and record.cache and record.cache.get("edge_hit_rate") is not None:
        text += f"  edge cache hit {100 * record.cache['edge_hit_rate']:.1f}%"
    if cached and record.cache and record.cache.get("row_hit_rate") is not None:
        text += f"  row cache hit {100 * record.cache['row_hit_rate']:.1f}%"
    history = (record.cache or {}).get("historical")
    if history and history.get("hit_rate") is not None:
        text += f"  historical hit {100 * history['hit_rate']:.1f}%"
    return text
