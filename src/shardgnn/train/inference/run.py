"""``shardgnn infer``: layer-wise distributed inference from a checkpoint, with embeddings and
predictions written in the graph's *original* node ids.

Outputs of a node-classification model (each written to a temporary name and renamed into
place)::

    OUT/embeddings.npy   float32 [N, H]  input of the last layer (after the activation)
    OUT/logits.npy       float32 [N, C]
    OUT/predictions.npy  int64   [N]     argmax class
    OUT/inference.json   accuracy per split, timing, bytes exchanged, the checkpoint used

A model of multi-label or regression labels (:mod:`shardgnn.nn.targets`) writes
``predictions.npy`` float32 ``[N, W]``: each label's probability, or each target's predicted
value (several tasks: laid out as their label columns, a class task's column its predicted
class); ``inference.json`` holds its metric per split (ROC-AUC, R², the tasks' weighted mean)
instead of accuracy.

Of a link-prediction model (``--task link``)::

    OUT/embeddings.npy   float32 [N, D]  the encoder's output, what its predictor scores
    OUT/scores.npy       float32 [P]     with --pairs: the predictor's raw score of each pair
                                         (a logit under --link-loss bce)
    OUT/inference.json   timing, bytes exchanged, the checkpoint used

Beside them, tables keyed by the user's own node ids (:mod:`shardgnn.train.tables`; CSV unless
``--table-format`` says ``parquet`` or ``none``)::

    OUT/predictions.csv  node_id, class, class_name   (node classification; multi-label:
                         node_id, probability_0, ...; regression: node_id, value_0, ...)
    OUT/embeddings.csv   node_id, emb_0, ..., emb_{H-1}

``node_id`` is the id the graph was built from (``shardgnn convert`` keeps a node table's ids and
a label column's class names; the partition directory carries them), else ``0..N-1``. A typed
graph's outputs are per node type, ``OUT/<type>/...``, ids of that type.

Messages pass over every edge of the partitioned graph: the held-out edges of training are
edges again, as they are for a model put to use.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.graph.identity import check_same_graph
from shardgnn.nn.config import (
    EDGE_FEATURE_MODELS,
    SNAPSHOT_MODELS,
    TYPED_MODELS,
    WALK_MODELS,
    is_user_model,
)
from shardgnn.nn.surel import SURELModel
from shardgnn.partition.format import PartitionSet, read_partitions
from shardgnn.train.checkpoint import Checkpointer, read_checkpoint_meta
from shardgnn.train.config import TrainConfig
from shardgnn.train.config_rules import LAYERWISE_MODELS
from shardgnn.train.kinds import infer_for
from shardgnn.train.settings import InferConfig


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder (``epoch-N`` with ``meta.json``), or the newest complete one inside a
    ``--checkpoint-dir``."""
    path = Path(path).expanduser()
    if (path / "meta.json").is_file():
        return path
    complete = Checkpointer(path).complete() if path.is_dir() else []
    if not complete:
        raise DatasetError(
            "holds no complete checkpoint (no epoch-*/meta.json)",
            path,
            "give --checkpoint the folder `shardgnn train --checkpoint-dir` wrote, or one "
            "epoch-N folder in it",
        )
    return complete[-1]


def check_inference_pair(checkpoint: Path, pset: PartitionSet) -> TrainConfig:
    """The training config of ``checkpoint``, after checking that it fits the partitioned graph
    (same graph, a model layer-wise inference runs, reproducible feature preprocessing).

    Raises:
        ConfigError: the checkpoint was trained on another graph, or cannot be run layer-wise.
    """
    meta = read_checkpoint_meta(checkpoint)
    check_same_graph(
        meta.get("dataset"),
        pset.dataset,
        expected_from=f"checkpoint {checkpoint}",
        actual_from=f"partition {pset.path}",
        fix="infer on a partition of the graph the model was trained on",
    )
    config = TrainConfig.from_dict(meta["config"], where=f"{checkpoint}/meta.json config")
    kind = pset.kind
    if (config.task in ("graph", "edge")) != (kind == "graphset"):
        raise ConfigError(
            f"{checkpoint} holds a model of --task {config.task} and {pset.path} "
            f"{'one graph' if kind != 'graphset' else 'a graph set'}; infer on the partition it "
            "was trained on"
        )
    if kind == "graphset":
        return config  # a graph-level model runs whole graphs: no layer-wise constraints
    if kind == "temporal":  # the event stream replayed: no layer-wise constraints either
        check_temporal_checkpoint(config, checkpoint, pset.path)
        return config
    relational = config.model.model in TYPED_MODELS
    if relational != (kind == "typed"):
        raise ConfigError(
            f"{checkpoint} holds a {config.model.model} model and {pset.path} "
            f"{'an untyped' if relational else 'a typed'} graph; infer on the partition it was "
            "trained on"
        )
    # edge-feature models infer block-wise, their blocks' edge rows fetched with them
    runs = (*LAYERWISE_MODELS, *TYPED_MODELS, *WALK_MODELS, *EDGE_FEATURE_MODELS)
    if config.model.model not in runs and not is_user_model(config.model.model):
        raise ConfigError(
            f"inference runs {', '.join(runs)} models and models of your own; "
            f"{checkpoint} holds {config.model.model}"
        )
    if config.feature_norm == "standard":
        raise ConfigError(
            f"{checkpoint} was trained with --feature-norm standard, which distributed inference "
            "cannot reproduce; retrain with --feature-norm row or none"
        )
    if infer_for(kind) is None:
        raise ConfigError(f"{pset.path} holds a {kind} graph, which `shardgnn infer` does not run")
    return config


def check_temporal_checkpoint(config, checkpoint, partitions) -> None:
    """Refuse a temporal checkpoint ``shardgnn infer`` cannot replay: a snapshot model (trained in
    one process on snapshots), or TGAT with learnt rows (one process only)."""
    if config.model.model in SNAPSHOT_MODELS:
        raise ConfigError(
            f"{checkpoint} holds a {config.model.model} model, which trains on snapshots in one "
            "process; `shardgnn infer` replays event-stream models (tgn, jodie, tgat)"
        )
    if config.embedding.enabled:
        raise ConfigError(
            f"{checkpoint} holds tgat with learnt input rows, which train in one process only; "
            f"`shardgnn infer` runs over {partitions} on workers: retrain without --embedding-dim"
        )


def read_rank_state(checkpoint: Path, rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s best-validation weights when recorded (the model whose test accuracy
    training reported), else its last ones."""
    file = checkpoint / f"rank-{rank}.pt"
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError) as exc:
        raise DatasetError(
            f"cannot read checkpoint ({type(exc).__name__}: {exc})", file, "use another checkpoint"
        ) from None
    return state.get("best_state") or state["model"]


def load_model_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model's weights (rank 0's: DDP keeps them equal on every rank). Learnable rows, which
    each rank holds only for its own part, are put back together from every rank's file as one
    ``embedding.weight`` in original node id order."""
    weights = read_rank_state(checkpoint, 0)
    if "embedding.weight" not in weights:
        return weights
    world_size = int(read_checkpoint_meta(checkpoint).get("world_size", 1))
    shards = [weights] + [read_rank_state(checkpoint, r) for r in range(1, world_size)]
    ids = torch.cat([s["embedding.node_ids"] for s in shards])
    rows = torch.cat([s["embedding.weight"] for s in shards])
    table = torch.empty_like(rows)
    table[ids] = rows
    return {**weights, "embedding.weight": table}


def read_pairs(path: str | Path, num_nodes: int) -> np.ndarray:
    """int64 ``[P, 2]`` node pairs (original ids) from ``.npy`` (``[P, 2]`` integers) or text (two
    integers per line, whitespace or comma separated, ``#`` comments).

    Raises:
        DatasetError: the file is unreadable, not two integer columns, or names a node outside
            ``[0, num_nodes)``.
    """
    path = Path(path).expanduser()
    fix = "give one pair per row: two node ids of the graph (a .npy of shape [P, 2], or text)"
    try:
        if path.suffix == ".npy":
            pairs = np.load(path, allow_pickle=False)
        else:
            text = path.read_text().replace(",", " ")
            rows = [line.split("#")[0].split() for line in text.splitlines()]
            rows = [row for row in rows if row]
            if any(len(row) != 2 for row in rows):
                bad = next(i for i, row in enumerate(rows) if len(row) != 2)
                raise DatasetError(f"pair {bad + 1} has {len(rows[bad])} values", path, fix)
            pairs = np.array(rows, dtype=np.int64).reshape(-1, 2)
    except DatasetError:
        raise  # already one line with its fix (a DatasetError is a ValueError too)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot read pairs ({type(exc).__name__}: {exc})", path, fix) from None
    if pairs.ndim != 2 or pairs.shape[1] != 2 or not np.issubdtype(pairs.dtype, np.integer):
        raise DatasetError(f"holds {pairs.dtype} of shape {pairs.shape}, not [P, 2]", path, fix)
    pairs = pairs.astype(np.int64)
    outside = (pairs < 0) | (pairs >= num_nodes)
    if outside.any():
        row = int(np.argwhere(outside)[0][0])
        raise DatasetError(
            f"pair {row + 1} ({pairs[row, 0]}, {pairs[row, 1]}) names a node outside "
            f"[0, {num_nodes})",
            path,
            fix,
        )
    return pairs


def load_weights_into(model: torch.nn.Module, weights, checkpoint: Path, what: str) -> None:
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise ConfigError(
            f"{checkpoint} does not fit this graph's {what} ({str(exc).splitlines()[0]})"
        ) from None


def load_surel_model(checkpoint: Path, config: TrainConfig, num_nodes: int) -> SURELModel:
    """The checkpoint's SUREL scorer (eval mode) over walks of as many steps as training drew
    (``config.link.walk_shape()``), for a graph whose node ids are below ``num_nodes``."""
    _, length = config.link.walk_shape()
    model = SURELModel(length, config.model.hidden, config.model.dropout, num_nodes)
    load_weights_into(model, load_model_weights(checkpoint), checkpoint, "SUREL model")
    return model.eval()


@dataclasses.dataclass(frozen=True)
class InferRun:
    """What one rank of ``shardgnn infer`` runs: the checkpoint, the partition directory (as
    given, and opened), the model's training config, the output folder, the destination rows
    per chunk, the pairs to score (a link model's), the tables' format and where the input
    features are read from (``memory`` or ``disk``: memory-mapped, halo rows per chunk)."""

    checkpoint: Path
    partitions: str | Path
    pset: PartitionSet
    config: TrainConfig
    out: Path
    chunk_rows: int
    pairs: str | Path | None
    table_format: str
    feature_storage: str = "memory"
    at: float | None = None


def run_inference(
    ctx: DistContext,
    checkpoint: str | Path,
    partitions: str | Path,
    out: str | Path,
    *,
    chunk_rows: int = 65536,
    pairs: str | Path | None = None,
    table_format: str = "csv",
    feature_storage: str = "memory",
    at: float | None = None,
) -> dict[str, Any] | None:
    """One rank of ``shardgnn infer``, by the function the registry names for the partition's
    graph kind (:func:`~shardgnn.train.kinds.infer_for`); rank 0 writes the outputs and
    returns the summary. ``pairs``: a file of node pairs for a link-prediction model to score
    (:func:`read_pairs`). ``table_format``: the tables keyed by the user's ids
    (:mod:`shardgnn.train.tables`). ``feature_storage``: ``disk`` reads a homogeneous part's
    features from its memory-mapped file, fetching each chunk's halo rows on their own.
    ``at``: a temporal model's replay stops after the events up to this time, and its node
    embeddings are taken at it."""
    checkpoint = resolve_checkpoint(checkpoint)
    pset = read_partitions(partitions, verify=False)
    check_feature_storage(feature_storage, pset.kind, partitions)
    check_time(at, pset.kind, partitions)
    config = check_inference_pair(checkpoint, pset)
    run = InferRun(
        checkpoint, partitions, pset, config, Path(out).expanduser(), chunk_rows, pairs,
        table_format, feature_storage, at,
    )  # fmt: skip
    return infer_for(pset.kind)(ctx, run)


def check_feature_storage(feature_storage: str, kind: str, partitions) -> None:
    """Refuse ``--feature-storage disk`` for a graph of a ``kind`` it does not apply to (typed
    graphs and graph sets read their rows in memory); ``partitions`` names the graph."""
    if feature_storage != "memory" and kind != "homogeneous":
        raise ConfigError(
            f"--feature-storage {feature_storage}: {partitions} holds a {kind} graph; "
            "disk-backed inference reads homogeneous graphs only (leave --feature-storage unset)"
        )


def check_time(at: float | None, kind: str, partitions) -> None:
    """Refuse ``--at`` for a graph of a ``kind`` without time (it picks a point of an event
    stream); ``partitions`` names the graph."""
    if at is not None and kind != "temporal":
        raise ConfigError(
            f"--at {at:g}: {partitions} holds a {kind} graph; --at picks a time of a "
            "temporal graph's event stream (leave it unset)"
        )


def tables_summary(table_format: str, named: bool, class_names) -> dict[str, Any]:
    """``inference.json["tables"]``: the tables' format and what keys them."""
    return {
        "format": table_format,
        "node_id": "the graph's own ids" if named else "row numbers 0..N-1",
        "class_names": None if class_names is None else list(class_names),
    }


def sum_over_ranks(comm: Communicator, seconds: float, labelled=None) -> tuple[torch.Tensor, dict]:
    """Correct predictions and nodes per split (``labelled``: this rank's predictions, labels
    and ``{split: rows}``; none for link models) and the seconds, summed over ranks; and the
    bytes every worker exchanged (collectives: every rank, before rank 0 goes on)."""
    counts = []
    if labelled is not None:
        predictions, y, splits = labelled
        y = torch.from_numpy(np.array(y, dtype=np.int64))  # a copy: parts are read-only maps
        for split in ("train", "val", "test"):
            idx = torch.from_numpy(np.array(splits[split], dtype=np.int64))
            counts += [float((predictions[idx] == y[idx]).sum()), float(len(idx))]
    totals = torch.tensor(counts + [seconds], dtype=torch.float64)
    comm.all_reduce(totals, "metrics")
    return totals, comm.reduce_stats()


def write_by_original_id(ctx: DistContext, out: Path, rows: dict, placement: dict) -> dict | None:
    """Every rank's rows of each output, written by rank 0 as ``OUT/<name>.npy`` in original id
    order (a collective: barriers): ``rows[name]`` this rank's rows, ``placement[name] =
    (total rows, part -> original ids of that part's rows)``; names may hold a folder
    (``paper/embeddings``). Each file appears whole (temporary name, then rename). Returns the
    written paths on rank 0, ``None`` on the others."""
    scratch = out / f".infer-ranks-{ctx.world_size}"
    if ctx.is_main:
        scratch.mkdir(parents=True, exist_ok=True)
    ctx.barrier()
    piece = lambda name, p: scratch / f"{name.replace('/', '--')}-{p}.npy"  # noqa: E731
    for name, values in rows.items():
        np.save(piece(name, ctx.rank), values, allow_pickle=False)
    ctx.barrier()
    if not ctx.is_main:
        return None
    written = {}
    for name, (total, ids_of) in placement.items():
        pieces = [np.load(piece(name, p), mmap_mode="r") for p in range(ctx.world_size)]
        target = out / f"{name}.npy"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp"
        array = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=pieces[0].dtype, shape=(total, *pieces[0].shape[1:])
        )
        for p, values in enumerate(pieces):
            array[ids_of(p)] = values
        array.flush()
        del array
        tmp.replace(target)
        written[name] = str(target)
    shutil.rmtree(scratch, ignore_errors=True)
    return written


def measured(totals: torch.Tensor, comm_summed, world_size: int, accuracy: bool) -> dict:
    """Accuracy per split (``totals``: correct and count per split, then seconds, summed over
    ranks), the mean inference time of a rank, and the bytes exchanged."""
    t = totals.tolist()
    return {
        "accuracy": {
            split: (t[2 * i] / t[2 * i + 1] if t[2 * i + 1] else None)
            for i, split in enumerate(("train", "val", "test"))
        }
        if accuracy
        else None,
        "inference_time_s": t[-1] / world_size,
        "comm": {
            name: {"bytes_sent": st.bytes_sent, "bytes_recv": st.bytes_recv, "time_s": st.time_s}
            for name, st in comm_summed.items()
        },
    }


def load_typed_rows(checkpoint: Path) -> tuple[dict[str, torch.Tensor], dict[int, torch.Tensor]]:
    """A typed model's weights (rank 0's) without its learnt rows, and the learnt rows of every
    featureless node type put back together from every rank's file, in original typed id
    order."""
    weights = read_rank_state(checkpoint, 0)
    world_size = int(read_checkpoint_meta(checkpoint).get("world_size", 1))
    shards = [weights] + [read_rank_state(checkpoint, r) for r in range(1, world_size)]
    prefix = "learnt_rows."
    types = sorted({int(k.split(".")[1]) for k in weights if k.startswith(prefix)})
    tables = {}
    for t in types:
        ids = torch.cat([s[f"{prefix}{t}.node_ids"] for s in shards])
        rows = torch.cat([s[f"{prefix}{t}.weight"] for s in shards])
        table = torch.empty_like(rows)
        table[ids] = rows
        tables[t] = table
    return {k: v for k, v in weights.items() if not k.startswith(prefix)}, tables


def load_entity_rows(
    checkpoint: Path, num_entities: int, keep: np.ndarray | None = None
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A knowledge-graph model's weights (rank 0's) without its entity rows and their Adam
    state, and the rows of the entities ``keep`` (entity ids; default every entity, so
    ``[num_entities, D]`` in entity id order) put back together from every rank's file, read
    one at a time; a checkpoint whose files do not hold every entity of the graph once is
    refused."""
    from shardgnn.fullgraph.relational import HELD_ROWS

    world_size = int(read_checkpoint_meta(checkpoint).get("world_size", 1))
    rows, ids = f"{HELD_ROWS}NI", f"{HELD_ROWS}node_ids"
    keep_K = torch.arange(num_entities) if keep is None else torch.as_tensor(keep)
    position = torch.full((num_entities,), -1, dtype=torch.int64)
    position[keep_K] = torch.arange(len(keep_K))
    held = torch.zeros(num_entities, dtype=torch.int64)
    weights: dict[str, torch.Tensor] = {}
    table = torch.empty(0)
    for rank in range(world_size):
        state = read_rank_state(checkpoint, rank)
        if rows not in state or ids not in state:
            raise ConfigError(f"{checkpoint} holds no entity rows ({rows}, {ids})")
        held_ND, held_ids = state.pop(rows), state.pop(ids)
        if rank == 0:
            weights = {k: v for k, v in state.items() if not k.startswith(HELD_ROWS)}
            table = torch.empty(len(keep_K), held_ND.shape[1])
        if held_ND.shape != (len(held_ids), table.shape[1]) or (
            len(held_ids) and not 0 <= int(held_ids.min()) <= int(held_ids.max()) < num_entities
        ):
            raise ConfigError(f"{checkpoint} does not fit the {num_entities:,} entities here")
        held[held_ids] += 1
        at = position[held_ids]
        kept = at >= 0
        table[at[kept]] = held_ND[kept]
        del state, held_ND  # one rank's file at a time
    if not bool((held == 1).all()):
        raise ConfigError(
            f"{checkpoint} holds {int((held > 0).sum()):,} of the {num_entities:,} entities here"
        )
    return weights, table


def infer_worker(config_json: str) -> None:
    """Body of one ``shardgnn infer`` worker process (the config arrives resolved, as JSON)."""
    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.options import from_dict
    from shardgnn.train.progress import format_table
    from shardgnn.train.report import metric_name

    config = from_dict(InferConfig, json.loads(config_json))
    # gloo: inference exchanges rows (the data path); gloo carries GPU tensors too
    ctx = init_distributed(device=config.device, backend="gloo", timeout_s=config.timeout)
    try:
        summary = run_inference(
            ctx,
            config.checkpoint,
            config.partitions,
            config.out,
            chunk_rows=config.chunk_rows,
            pairs=config.pairs,
            table_format=config.table_format,
            feature_storage=config.feature_storage,
            at=config.at,
        )
        if summary is not None:
            rows = [
                (f"{split} accuracy", "-" if acc is None else f"{acc:.4f}")
                for split, acc in (summary["accuracy"] or {}).items()
            ]
            metric = summary.get("metric")
            if metric is not None:
                name = metric_name(metric["name"])
                rows += [
                    (f"{split} {name}", "-" if metric[split] is None else f"{metric[split]:.4f}")
                    for split in ("train", "val", "test")
                ]
            if "num_events" in summary:  # a temporal model's outputs are per event
                rows.append(("events", f"{summary['num_events']:,}"))
            if summary["pairs_scored"] is not None:
                rows.append(("pairs scored", f"{summary['pairs_scored']:,}"))
            if "embedding_width" in summary:  # a walk model writes none
                rows.append(("embedding width", str(summary["embedding_width"])))
            rows += [
                ("nodes", f"{summary['num_nodes']:,}"),
                ("inference time (s)", f"{summary['inference_time_s']:.2f}"),
                ("checkpoint", summary["checkpoint"]),
            ]
            print(format_table(["metric", "value"], rows))
            print(
                f"wrote {', '.join(summary['outputs'].values())} and "
                f"{Path(config.out) / 'inference.json'}"
            )
    finally:
        shutdown()
