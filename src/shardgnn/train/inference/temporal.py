"""``shardgnn infer`` of a temporal model (TGN, JODIE, TGAT) over a temporal partition.

The trained model replays the whole event stream from empty memory, as training and evaluation
stream it: batch by batch (``--batch-size`` of training), each batch scored before its events
reach memory, each rank scoring its share of every batch, memory and neighbourhoods by owner.
The outputs are per event, in event order (event id = position in the stream), and per node::

    OUT/embeddings.npy   float32 [N, D]  every node's embedding at the last event's time (after
                                         the whole stream; original node ids), or with ``--at
                                         TIME`` at TIME after the events up to it: what a link
                                         model's predictor scores pairs of, what a node model's
                                         classifier reads

    OUT/logits.npy       float32 [E, C]  a node model's class logits of each event's source
    OUT/predictions.npy  int64   [E]     their argmax
    OUT/scores.npy       float32 [E]     a link model's score of each event (source, destination)
                                         at its time, before it happened
    OUT/predictions.csv  event_id, src, dst, time, then class (node) or score (link); src and
                         dst in the graph's original node ids
    OUT/inference.json   a node model's label metrics per split (the training split's
                         chronological cuts), timing, bytes exchanged, the checkpoint used

With ``--at TIME`` the replay stops after the last event at or before TIME; the per-event
outputs cover the events replayed (the first ``num_events`` of the stream).

Memory restarts from zero: a checkpoint's memory is its training stream's state, tied to its
worker count; the replay rebuilds it on any worker count.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from shardgnn.atomic import save_npy
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.seeding import mix_seed
from shardgnn.train.inference.run import (
    InferRun,
    measured,
    read_rank_state,
    sum_over_ranks,
    tables_summary,
    write_by_original_id,
)
from shardgnn.train.setup import EVAL_STREAM
from shardgnn.train.tables import write_table
from shardgnn.train.temporal_eval import label_metrics

MEMORY_STATE = "memory.held."
"""the prefix of a memory model's node memory rows in its state (rebuilt by the replay; the
memory's GRU and time encoder are weights like the others)"""


def infer_temporal(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """One rank of ``shardgnn infer`` over a temporal partition (see the module docstring)."""
    from shardgnn.atomic import save_json
    from shardgnn.train.recipes import select

    config = dataclasses.replace(
        run.config, run=dataclasses.replace(run.config.run, partitions=str(run.partitions))
    )
    steps = select(config, "temporal").steps(config, ctx=ctx)
    model = steps.model
    state = read_rank_state(run.checkpoint, 0)
    weights = {k: v for k, v in state.items() if not k.startswith(MEMORY_STATE)}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.startswith(MEMORY_STATE)]
    if missing or unexpected:
        raise ConfigError(
            f"{run.checkpoint} does not fit this graph's {model.kind} model (missing "
            f"{missing[:3]}, unexpected {unexpected[:3]}): infer on the partition of the graph "
            "it was trained on"
        )
    model.eval()
    if model.memory is not None:
        model.memory.reset()
    steps._restart_stream()
    events = steps.events
    times = np.asarray(events.t)
    # the events replayed: all, or those at or before --at
    replayed = events.num_events if run.at is None else int(np.searchsorted(times, run.at, "right"))
    at = float(times[-1]) if run.at is None else float(run.at)
    node_task = config.task == "node"
    start = time.perf_counter()
    if node_task:
        index, scores = steps._stream(0, replayed, steps._label_scores, model.num_classes)
    else:
        index, scores = steps._stream(0, replayed, _pair_scores(steps), 1)
    embeddings_ND = _final_embeddings(steps, run, at)
    seconds = time.perf_counter() - start
    everything_KE = steps._all_scores(index, scores).astype(np.float32)
    splits = {
        "train": (0, min(steps.val_start, replayed)),
        "val": (min(steps.val_start, replayed), min(steps.test_start, replayed)),
        "test": (min(steps.test_start, replayed), replayed),
    }
    totals, comm_summed = sum_over_ranks(steps.data_comm, seconds)
    out = run.out
    orig = np.asarray(run.pset.orig_ids)
    book = run.pset.book
    written = write_by_original_id(
        ctx, out, {"embeddings": embeddings_ND},
        {"embeddings": (len(orig), lambda p: orig[slice(*book.part_range(p))])},
    )  # fmt: skip
    if written is None:
        return None
    columns: dict[str, np.ndarray] = {
        "event_id": np.arange(replayed, dtype=np.int64),
        "src": orig[np.asarray(events.src)[:replayed]],
        "dst": orig[np.asarray(events.dst)[:replayed]],
        "time": times[:replayed],
    }
    metric = None
    if node_task:
        logits_EC = np.ascontiguousarray(everything_KE.T)
        predictions = logits_EC.argmax(axis=1).astype(np.int64)
        written["logits"] = _saved(out, "logits", logits_EC)
        written["predictions"] = _saved(out, "predictions", predictions)
        columns["class"] = predictions
        labels = np.asarray(events.labels)
        metric = {"name": steps.metric}
        for split, (lo, hi) in splits.items():
            known = labels[lo:hi] >= 0
            metric[split] = (
                label_metrics(logits_EC[lo:hi][known], labels[lo:hi][known]).get(steps.metric)
                if known.any()
                else None  # --at before any of the split's labelled events
            )
    else:
        columns["score"] = everything_KE[0]
        written["scores"] = _saved(out, "scores", everything_KE[0])
    if run.table_format != "none":
        ext = "parquet" if run.table_format == "parquet" else "csv"
        written["predictions_table"] = str(
            write_table(out / f"predictions.{ext}", columns, run.table_format)
        )
    summary = {
        "task": config.task,
        "model": model.kind,
        "checkpoint": str(run.checkpoint),
        "partitions": str(run.partitions),
        "workers": ctx.world_size,
        "num_nodes": int(events.num_nodes),
        "num_events": replayed,
        "stream_events": int(events.num_events),
        "events": {split: hi - lo for split, (lo, hi) in splits.items()},
        "embedding_width": int(embeddings_ND.shape[1]),
        "embedded_at": at,
        **measured(totals, comm_summed, ctx.world_size, accuracy=False),
        "metric": metric,
        "pairs_scored": None,
        "outputs": written,
        "tables": tables_summary(run.table_format, False, None),
    }
    save_json(out / "inference.json", summary)
    return summary


def _final_embeddings(steps, run: InferRun, at: float) -> np.ndarray:
    """This rank's part's node embeddings ``[n, D]`` (in new id order) at time ``at``, after the
    replay: from the memory the replay left and, for TGN, every node's most recent events up to
    ``at`` (all ranks run the same number of collective chunks)."""
    book, rank = run.pset.book, steps.rank
    start, end = (int(v) for v in book.part_range(rank))
    largest = max(int(np.diff(book.part_range(p))[0]) for p in range(steps.world_size))
    chunk = max(run.chunk_rows, 1)
    after = float(np.nextafter(at, np.inf))  # TGN: every event before it counts
    # TGAT's draws depend on (node, time, seed) alone: one seed, whatever the chunks and ranks
    seed = mix_seed(run.config.seed, EVAL_STREAM, steps.events.num_events)
    rows = []
    with torch.no_grad():
        for first in range(0, max(largest, 1), chunk):
            nodes = np.arange(start + first, min(start + first + chunk, end), dtype=np.int64)
            z = steps._embed_nodes([nodes], after, np.full(nodes.size, at), seed)[0][0]
            rows.append(z.float().cpu().numpy())
    return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)


def _pair_scores(steps):
    """A link model's scorer: each event's own pair, scored at its batch's start ``[1, n]``."""

    def score(a: int, b: int, time_: float, seed: int) -> np.ndarray:
        z_src, z_dst = steps._embed(a, b, time_, [], seed)[0]
        return steps.model.score(z_src, [z_dst]).cpu().numpy()

    return score


def _saved(out, name: str, values: np.ndarray) -> str:
    """``OUT/<name>.npy``, written atomically; its path."""
    save_npy(out / f"{name}.npy", values)
    return str(out / f"{name}.npy")
