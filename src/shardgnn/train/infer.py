"""``shardgnn infer``: layer-wise distributed inference from a checkpoint, with embeddings and
predictions written in the graph's *original* node ids.

Outputs of a node-classification model (each written to a temporary name and renamed into
place)::

    OUT/embeddings.npy   float32 [N, H]  input of the last layer (after the activation)
    OUT/logits.npy       float32 [N, C]
    OUT/predictions.npy  int64   [N]     argmax class
    OUT/inference.json   accuracy per split, timing, bytes exchanged, the checkpoint used

Of a link-prediction model (``--task link``)::

    OUT/embeddings.npy   float32 [N, D]  the encoder's output, what its predictor scores
    OUT/scores.npy       float32 [P]     with --pairs: the predictor's raw score of each pair
                                         (a logit under --link-loss bce)
    OUT/inference.json   timing, bytes exchanged, the checkpoint used

Beside them, tables keyed by the user's own node ids (:mod:`shardgnn.train.tables`; CSV unless
``--table-format`` says ``parquet`` or ``none``)::

    OUT/predictions.csv  node_id, class, class_name   (node classification)
    OUT/embeddings.csv   node_id, emb_0, ..., emb_{H-1}

``node_id`` is the id the graph was built from (``shardgnn convert`` keeps a node table's ids and
a label column's class names; the partition directory carries them), else ``0..N-1``. A typed
graph's outputs are per node type, ``OUT/<type>/...``, ids of that type.

Messages pass over every edge of the partitioned graph: the held-out edges of training are
edges again, as they are for a model put to use.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.atomic import save_json
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError, DatasetError
from shardgnn.fullgraph.inference import LayerwiseInference
from shardgnn.fullgraph.shard import Grid, load_shard
from shardgnn.graph.features import normalize_features
from shardgnn.graph.identity import check_same_graph
from shardgnn.nn.models import build_model
from shardgnn.partition.format import PartitionSet, read_partitions
from shardgnn.train.checkpoint import Checkpointer, read_checkpoint_meta
from shardgnn.train.config import RELATIONAL_MODELS, InferConfig, TrainConfig
from shardgnn.train.tables import write_output_tables


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
            "pass a --checkpoint-dir written by `shardgnn train --checkpoint-dir` or one epoch-N "
            "folder",
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
    relational = config.model.model in RELATIONAL_MODELS
    if relational != bool(pset.meta.get("hetero")):
        raise ConfigError(
            f"{checkpoint} holds a {config.model.model} model and {pset.path} "
            f"{'an untyped' if relational else 'a typed'} graph; infer on the partition it was "
            "trained on"
        )
    if config.model.model not in ("sage", "gcn", *RELATIONAL_MODELS):
        raise ConfigError(
            f"layer-wise inference runs sage, gcn, rgcn and hetero-sage models; {checkpoint} holds "
            f"{config.model.model}"
        )
    if config.feature_norm == "standard":
        raise ConfigError(
            f"{checkpoint} was trained with --feature-norm standard, which distributed inference "
            "cannot reproduce; retrain with --feature-norm row or none"
        )
    return config


def _read_rank_state(checkpoint: Path, rank: int) -> dict[str, torch.Tensor]:
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
    weights = _read_rank_state(checkpoint, 0)
    if "embedding.weight" not in weights:
        return weights
    world_size = int(read_checkpoint_meta(checkpoint).get("world_size", 1))
    shards = [weights] + [_read_rank_state(checkpoint, r) for r in range(1, world_size)]
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


def _split_rows(weights) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """The model's weights without its learnable rows, and the rows (None without any)."""
    rows = weights.get("embedding.weight")
    return {k: v for k, v in weights.items() if not k.startswith("embedding.")}, rows


def _input_rows(config: TrainConfig, shard, rows: torch.Tensor | None) -> torch.Tensor:
    """The held nodes' input: the features, then their learnable rows (kept in original id order
    by the checkpoint)."""
    parts = []
    if shard.x is not None:
        x = normalize_features(shard.x, config.feature_norm)
        parts.append(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    if config.embedding.enabled:
        assert rows is not None, "a model trained with --embedding-dim checkpoints its rows"
        parts.append(rows[torch.from_numpy(np.array(shard.orig_ids, dtype=np.int64))])
    return torch.cat(parts, dim=1)


def _node_model(config: TrainConfig, shard, weights, checkpoint: Path):
    """The node classifier and its input rows."""
    weights, rows = _split_rows(weights)
    num_features = 0 if shard.x is None else shard.x.shape[1]
    model = build_model(config.model, num_features + config.embedding.dim, shard.num_classes)
    _load(model, weights, checkpoint, f"{num_features} features and {shard.num_classes} classes")
    return model, _input_rows(config, shard, rows)


def _link_model(config: TrainConfig, shard, weights, checkpoint: Path):
    """The link model (its encoder and predictor) and its input rows."""
    from shardgnn.train.link import build_link_model

    weights, rows = _split_rows(weights)
    num_features = 0 if shard.x is None else shard.x.shape[1]
    model = build_link_model(config, num_features)
    _load(model, weights, checkpoint, f"{num_features} features")
    return model, _input_rows(config, shard, rows)


def _load(model: torch.nn.Module, weights, checkpoint: Path, what: str) -> None:
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise ConfigError(
            f"{checkpoint} does not fit this graph's {what} ({str(exc).splitlines()[0]})"
        ) from None


@torch.no_grad()
def score_pairs_file(model, embeddings_ND: np.ndarray, pairs_P2: np.ndarray, chunk: int = 1 << 16):
    """The predictor's score of every pair (rows of ``embeddings_ND`` by original id)."""
    scores = np.empty(pairs_P2.shape[0], dtype=np.float32)
    for start in range(0, pairs_P2.shape[0], chunk):
        block = pairs_P2[start : start + chunk]
        h_u = torch.from_numpy(np.asarray(embeddings_ND[block[:, 0]], dtype=np.float32))
        h_v = torch.from_numpy(np.asarray(embeddings_ND[block[:, 1]], dtype=np.float32))
        scores[start : start + block.shape[0]] = model.score(h_u, h_v).numpy()
    return scores


def run_inference(
    ctx: DistContext,
    checkpoint: str | Path,
    partitions: str | Path,
    out: str | Path,
    *,
    chunk_rows: int = 65536,
    pairs: str | Path | None = None,
    table_format: str = "csv",
) -> dict[str, Any] | None:
    """One rank of ``shardgnn infer``; rank 0 writes the outputs and returns the summary.
    ``pairs``: a file of node pairs for a link-prediction model to score (:func:`read_pairs`).
    ``table_format``: the tables keyed by the user's ids (:mod:`shardgnn.train.tables`)."""
    checkpoint = resolve_checkpoint(checkpoint)
    pset = read_partitions(partitions, verify=False)
    config = check_inference_pair(checkpoint, pset)
    if pset.meta.get("hetero"):
        return _run_typed_inference(
            ctx, checkpoint, pset, config, Path(out), chunk_rows, table_format
        )
    link = config.task == "link"
    weights = load_model_weights(checkpoint)
    out = Path(out).expanduser()
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    shard = load_shard(
        partitions,
        Grid(ctx.world_size, 1),
        ctx.rank,
        comm,
        need_features=not config.embedding.enabled,
        need_labels=not link,
    )
    model, x = (_link_model if link else _node_model)(config, shard, weights, checkpoint)
    start = time.perf_counter()
    engine = LayerwiseInference(shard, ctx.rank, comm, chunk_rows=chunk_rows, device=ctx.device)
    if link:
        _, embeddings = engine.run(model.encoder, x)  # what the predictor scores
        outputs = {"embeddings": embeddings}
    else:
        embeddings, logits = engine.run(model, x)
        outputs = {
            "embeddings": embeddings,
            "logits": logits,
            "predictions": logits.argmax(-1).cpu(),
        }
    seconds = time.perf_counter() - start
    labelled = None if link else (outputs["predictions"], shard.y, shard.splits)
    totals, comm_summed = _totals(comm, seconds, labelled)
    orig_ids = np.asarray(pset.orig_ids)
    ranges = [tuple(int(v) for v in pset.book.part_range(p)) for p in range(ctx.world_size)]
    written = write_by_original_id(
        ctx,
        out,
        {name: tensor.detach().cpu().numpy() for name, tensor in outputs.items()},
        {name: (len(orig_ids), lambda p: orig_ids[slice(*ranges[p])]) for name in outputs},
    )
    if written is None:
        return None
    scored = None
    if link and pairs is not None:
        pair_array = read_pairs(pairs, len(orig_ids))
        table = np.load(out / "embeddings.npy", mmap_mode="r")
        scores = score_pairs_file(model, table, pair_array)
        tmp = out / ".scores.npy.tmp"
        with open(tmp, "wb") as fh:
            np.save(fh, scores, allow_pickle=False)
        tmp.replace(out / "scores.npy")
        written["scores"], scored = str(out / "scores.npy"), int(scores.shape[0])
    ids = pset.node_ids()
    written.update(
        write_output_tables(out, table_format, ids, pset.class_names, predictions=not link)
    )
    summary = {
        "task": config.task,
        "checkpoint": str(checkpoint),
        "partitions": str(partitions),
        "workers": ctx.world_size,
        "num_nodes": int(len(orig_ids)),
        "embedding_width": int(embeddings.shape[1]),
        **_measured(totals, comm_summed, ctx.world_size, accuracy=not link),
        "pairs_scored": scored,
        "outputs": written,
        "tables": _tables_summary(table_format, ids is not None, pset.class_names),
    }
    save_json(out / "inference.json", summary)
    return summary


def _tables_summary(table_format: str, named: bool, class_names) -> dict[str, Any]:
    """``inference.json["tables"]``: the tables' format and what keys them."""
    return {
        "format": table_format,
        "node_id": "the graph's own ids" if named else "row numbers 0..N-1",
        "class_names": None if class_names is None else list(class_names),
    }


def _totals(comm: Communicator, seconds: float, labelled=None) -> tuple[torch.Tensor, dict]:
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


def _measured(totals: torch.Tensor, comm_summed, world_size: int, accuracy: bool) -> dict:
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
    weights = _read_rank_state(checkpoint, 0)
    world_size = int(read_checkpoint_meta(checkpoint).get("world_size", 1))
    shards = [weights] + [_read_rank_state(checkpoint, r) for r in range(1, world_size)]
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


def _run_typed_inference(
    ctx: DistContext,
    checkpoint: Path,
    pset: PartitionSet,
    config: TrainConfig,
    out: Path,
    chunk_rows: int,
    table_format: str = "csv",
) -> dict[str, Any] | None:
    """Layer-wise inference of a typed node classifier (``rgcn``/``hetero-sage``) over a typed
    partition: every rank computes its own nodes, layer by layer in chunks of destinations,
    fetching the previous layer's rows of its chunk's sources from their owners. Writes, per node
    type in original (typed) ids, ``OUT/<type>/embeddings.npy`` (the last layer's input) and, for
    the labelled type, ``logits.npy`` and ``predictions.npy``; and their tables keyed by the
    type's own ids (``OUT/<type>/embeddings.csv``, ``predictions.csv``)."""
    from shardgnn.nn.rgcn import layerwise_forward, partitioned_node_model
    from shardgnn.partition.hetero import TypedPartitionBook
    from shardgnn.store.dist_feature import DistFeatureStore

    hetero = pset.meta["hetero"]
    typed = TypedPartitionBook(hetero, pset.book.boundaries)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    part = pset.load_part(ctx.rank)
    weights, tables = load_typed_rows(checkpoint)
    model = partitioned_node_model(config.model, typed, part.num_classes)
    _load(model, weights, checkpoint, f"{len(typed.node_types)} node types")
    model.eval()
    offsets = typed.type_offsets
    orig = np.asarray(pset.orig_ids)
    start, end = part.start, part.end
    bounds = typed.type_bounds[ctx.rank]
    with torch.no_grad():
        pieces = []
        for t in range(len(typed.node_types)):
            lo, hi = int(bounds[t]), int(bounds[t + 1])
            if t in part.type_x:
                raw = torch.from_numpy(np.array(part.type_x[t], dtype=np.float32))
                pieces.append(model.typed_input.project[str(t)](raw))
            else:
                pieces.append(tables[t][torch.from_numpy(orig[lo:hi] - offsets[t])])
        x = torch.cat(pieces) if pieces else torch.zeros(0, config.model.hidden)
    assert x.shape[0] == end - start
    # every rank fetches in every chunk (a collective): as many chunks as the largest part needs
    chunks = torch.tensor([-(-(end - start) // chunk_rows)], dtype=torch.int64)
    comm.all_reduce(chunks, "control", op=torch.distributed.ReduceOp.MAX)
    stores: dict[int, DistFeatureStore] = {}

    def gather(h: torch.Tensor, ids: np.ndarray) -> torch.Tensor:
        if id(h) not in stores:  # one store per layer's rows
            stores.clear()
            stores[id(h)] = DistFeatureStore(h, pset.book, ctx.rank, comm, "infer")
        return stores[id(h)].gather(torch.from_numpy(ids))

    begin = time.perf_counter()
    embeddings, logits = layerwise_forward(
        model.encoder, x, np.asarray(part.indptr), np.asarray(part.indices),
        np.asarray(part.etype), start, gather, typed.type_of, chunk_rows, int(chunks),
    )  # fmt: skip
    seconds = time.perf_counter() - begin
    predictions = logits.argmax(-1)
    splits = {split: getattr(part, f"{split}_idx") for split in ("train", "val", "test")}
    totals, comm_summed = _totals(comm, seconds, (predictions, part.y, splits))
    # per node type, its rows of every rank in original typed ids
    target = hetero.get("target_type")
    rows, placement = {}, {}
    for t, name in enumerate(typed.node_types):
        lo, hi = int(bounds[t]) - start, int(bounds[t + 1]) - start
        kinds = {"embeddings": embeddings}
        if name == target:
            kinds.update(logits=logits, predictions=predictions)
        for kind, tensor in kinds.items():
            rows[f"{name}/{kind}"] = tensor[lo:hi].numpy()
            placement[f"{name}/{kind}"] = (
                int(offsets[t + 1] - offsets[t]),
                lambda p, t=t: orig[slice(*typed.type_bounds[p, t : t + 2])] - offsets[t],
            )
    written = write_by_original_id(ctx, out, rows, placement)
    if written is None:
        return None
    named = False
    for name in typed.node_types:
        ids = pset.node_ids(name)
        named = named or ids is not None
        written.update(
            write_output_tables(
                out / name, table_format, ids, pset.class_names, f"{name}/", name == target
            )
        )
    summary = {
        "task": config.task,
        "model": config.model.model,
        "checkpoint": str(checkpoint),
        "partitions": str(pset.path),
        "workers": ctx.world_size,
        "num_nodes": int(len(orig)),
        "nodes_per_type": {
            name: int(offsets[t + 1] - offsets[t]) for t, name in enumerate(typed.node_types)
        },
        "target_type": target,
        "embedding_width": int(embeddings.shape[1]),
        **_measured(totals, comm_summed, ctx.world_size, accuracy=True),
        "pairs_scored": None,
        "outputs": written,
        "tables": _tables_summary(table_format, named, pset.class_names),
    }
    save_json(out / "inference.json", summary)
    return summary


def infer_worker(config_json: str) -> None:
    """Body of one ``shardgnn infer`` worker process (the config arrives resolved, as JSON)."""
    from shardgnn.distributed.context import init_distributed, shutdown
    from shardgnn.options import from_dict
    from shardgnn.train.progress import format_table

    config = from_dict(InferConfig, json.loads(config_json))
    ctx = init_distributed(device="cpu", timeout_s=config.timeout)
    try:
        summary = run_inference(
            ctx,
            config.checkpoint,
            config.partitions,
            config.out,
            chunk_rows=config.chunk_rows,
            pairs=config.pairs,
            table_format=config.table_format,
        )
        if summary is not None:
            rows = [
                (f"{split} accuracy", "-" if acc is None else f"{acc:.4f}")
                for split, acc in (summary["accuracy"] or {}).items()
            ]
            if summary["pairs_scored"] is not None:
                rows.append(("pairs scored", f"{summary['pairs_scored']:,}"))
            rows += [
                ("embedding width", str(summary["embedding_width"])),
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
