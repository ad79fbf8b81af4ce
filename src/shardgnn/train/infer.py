"""``shardgnn infer``: layer-wise distributed inference from a checkpoint, with embeddings and
predictions written in the graph's *original* node ids.

Outputs (each written to a temporary name and renamed into place)::

    OUT/embeddings.npy   float32 [N, H]  input of the last layer (after the activation)
    OUT/logits.npy       float32 [N, C]
    OUT/predictions.npy  int64   [N]     argmax class
    OUT/inference.json   accuracy per split, timing, bytes exchanged, the checkpoint used
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
from shardgnn.train.config import InferConfig, TrainConfig


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
    if config.model.model not in ("sage", "gcn"):
        raise ConfigError(
            f"layer-wise inference runs sage and gcn models; {checkpoint} holds "
            f"{config.model.model}"
        )
    if config.feature_norm == "standard":
        raise ConfigError(
            f"{checkpoint} was trained with --feature-norm standard, which distributed inference "
            "cannot reproduce; retrain with --feature-norm row or none"
        )
    return config


def load_model_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The best-validation weights of a checkpoint when recorded (the model whose test accuracy
    training reported), else the last ones."""
    file = checkpoint / "rank-0.pt"
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError) as exc:
        raise DatasetError(
            f"cannot read checkpoint ({type(exc).__name__}: {exc})", file, "use another checkpoint"
        ) from None
    return state.get("best_state") or state["model"]


def run_inference(
    ctx: DistContext,
    checkpoint: str | Path,
    partitions: str | Path,
    out: str | Path,
    *,
    chunk_rows: int = 65536,
) -> dict[str, Any] | None:
    """One rank of ``shardgnn infer``; rank 0 writes the outputs and returns the summary."""
    checkpoint = resolve_checkpoint(checkpoint)
    pset = read_partitions(partitions, verify=False)
    config = check_inference_pair(checkpoint, pset)
    weights = load_model_weights(checkpoint)
    out = Path(out).expanduser()
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    shard = load_shard(partitions, Grid(ctx.world_size, 1), ctx.rank, comm)
    norm = config.feature_norm
    model = build_model(config.model, shard.x.shape[1], shard.num_classes)
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise ConfigError(
            f"{checkpoint} does not fit this graph's {shard.x.shape[1]} features and "
            f"{shard.num_classes} classes ({str(exc).splitlines()[0]})"
        ) from None
    x = torch.from_numpy(np.ascontiguousarray(normalize_features(shard.x, norm), dtype=np.float32))
    start = time.perf_counter()
    engine = LayerwiseInference(shard, ctx.rank, comm, chunk_rows=chunk_rows, device=ctx.device)
    embeddings, logits = engine.run(model, x)
    seconds = time.perf_counter() - start
    predictions = logits.argmax(-1).cpu()
    y = torch.from_numpy(shard.y)
    counts = []
    for split in ("train", "val", "test"):
        idx = torch.from_numpy(shard.splits[split])
        counts += [float((predictions[idx] == y[idx]).sum()), float(len(idx))]
    totals = torch.tensor(counts + [seconds], dtype=torch.float64)
    comm.all_reduce(totals, "metrics")
    comm_summed = comm.reduce_stats()  # bytes over all workers (collective: before rank 0 goes on)

    # Every rank writes its rows; rank 0 assembles them in original id order.
    scratch = out / f".infer-ranks-{ctx.world_size}"
    if ctx.is_main:
        scratch.mkdir(parents=True, exist_ok=True)
    ctx.barrier()
    for name, tensor in (
        ("embeddings", embeddings),
        ("logits", logits),
        ("predictions", predictions),
    ):
        np.save(
            scratch / f"{name}-{ctx.rank}.npy", tensor.detach().cpu().numpy(), allow_pickle=False
        )
    ctx.barrier()
    if not ctx.is_main:
        return None
    orig_ids = np.asarray(pset.orig_ids)
    for name in ("embeddings", "logits", "predictions"):
        pieces = [
            np.load(scratch / f"{name}-{p}.npy", mmap_mode="r") for p in range(ctx.world_size)
        ]
        rows = pieces[0].shape[1:]
        tmp = out / f".{name}.npy.tmp"
        array = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=pieces[0].dtype, shape=(len(orig_ids), *rows)
        )
        for p, piece in enumerate(pieces):
            start_p, end_p = (int(v) for v in pset.book.part_range(p))
            array[orig_ids[start_p:end_p]] = piece
        array.flush()
        del array
        tmp.replace(out / f"{name}.npy")
    shutil.rmtree(scratch, ignore_errors=True)
    t = totals.tolist()
    summary = {
        "checkpoint": str(checkpoint),
        "partitions": str(partitions),
        "workers": ctx.world_size,
        "num_nodes": int(len(orig_ids)),
        "embedding_width": int(embeddings.shape[1]),
        "accuracy": {
            split: (t[2 * i] / t[2 * i + 1] if t[2 * i + 1] else None)
            for i, split in enumerate(("train", "val", "test"))
        },
        "inference_time_s": t[-1] / ctx.world_size,
        "comm": {
            name: {"bytes_sent": st.bytes_sent, "bytes_recv": st.bytes_recv, "time_s": st.time_s}
            for name, st in comm_summed.items()
        },
        "outputs": {
            name: str(out / f"{name}.npy") for name in ("embeddings", "logits", "predictions")
        },
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
            ctx, config.checkpoint, config.partitions, config.out, chunk_rows=config.chunk_rows
        )
        if summary is not None:
            rows = [
                (f"{split} accuracy", "-" if acc is None else f"{acc:.4f}")
                for split, acc in summary["accuracy"].items()
            ]
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
