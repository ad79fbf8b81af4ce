"""``shardgnn infer`` over a partition of each graph kind: the function that runs one rank
over a homogeneous partition (:func:`infer_homogeneous`) and over a typed one
(:func:`infer_typed`), which the registry names (:data:`shardgnn.train.kinds.KINDS`), and the
models they rebuild. The command's flow, and what every kind shares, is
:mod:`shardgnn.train.inference.run`."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.errors import ConfigError
from shardgnn.fullgraph.inference import LayerwiseInference
from shardgnn.fullgraph.shard import Grid, input_rows, load_shard
from shardgnn.graph.features import normalize_features
from shardgnn.nn.config import EDGE_FEATURE_MODELS, WALK_MODELS, is_user_model
from shardgnn.nn.functional import is_sparse
from shardgnn.nn.models import build_model
from shardgnn.nn.targets import CommReducer, NodeTarget, target_of_labels
from shardgnn.train.config import TrainConfig
from shardgnn.train.inference.run import (
    InferRun,
    load_model_weights,
    load_surel_model,
    load_typed_rows,
    load_weights_into,
    measured,
    read_pairs,
    sum_over_ranks,
    tables_summary,
    write_by_original_id,
)
from shardgnn.train.setup import model_edge_dim, sparse_batches_apply
from shardgnn.train.tables import write_output_tables


def _split_rows(weights) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """The model's weights without its learnable rows, and the rows (None without any)."""
    rows = weights.get("embedding.weight")
    return {k: v for k, v in weights.items() if not k.startswith("embedding.")}, rows


def _input_rows(
    config: TrainConfig, shard, rows: torch.Tensor | None, comm: Communicator
) -> torch.Tensor:
    """The held nodes' input: the features, then their learnable rows (kept in original id order
    by the checkpoint). Features left in the part files (:func:`infer_homogeneous` reads them
    sparse) are read by :func:`~shardgnn.fullgraph.shard.input_rows`: sparse where the graph's
    rows are mostly zero (a collective)."""
    if shard.x is None and shard.x_parts:
        return input_rows(shard.x_parts, config.feature_norm, comm)
    parts = []
    if shard.x is not None:
        x = normalize_features(shard.x, config.feature_norm)
        with warnings.catch_warnings():  # a read-only memory map: the layers only read it
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            parts.append(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
    if config.embedding.enabled:
        assert rows is not None, "a model trained with --embedding-dim checkpoints its rows"
        parts.append(rows[torch.from_numpy(np.array(shard.orig_ids, dtype=np.int64))])
    # features alone stay the memory-mapped file (unnormalised): no copy of the part's rows
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _node_model(
    config: TrainConfig, shard, weights, checkpoint: Path, comm: Communicator, edge_dim: int = 0
):
    """The node classifier and its input rows (``edge_dim``: the edge features' width)."""
    weights, rows = _split_rows(weights)
    num_features = shard.num_features
    target = target_of_labels(shard.label_kind, shard.y, shard.num_classes)
    in_dim = num_features + config.embedding.dim
    model = build_model(config.model, in_dim, target.out_dim, edge_dim)
    outputs = (
        f"{shard.num_classes} classes"
        if target.label_kind == "class"
        else f"{target.out_dim} {target.label_kind} outputs"
    )
    load_weights_into(model, weights, checkpoint, f"{num_features} features and {outputs}")
    return model, _input_rows(config, shard, rows, comm)


def _link_model(
    config: TrainConfig, shard, weights, checkpoint: Path, comm: Communicator, edge_dim: int = 0
):
    """The link model (its encoder and predictor) and its input rows (``edge_dim``: the edge
    features' width)."""
    from shardgnn.train.link import build_link_model

    weights, rows = _split_rows(weights)
    num_features = shard.num_features
    model = build_link_model(config, num_features, edge_dim=edge_dim)
    load_weights_into(model, weights, checkpoint, f"{num_features} features")
    return model, _input_rows(config, shard, rows, comm)


@torch.no_grad()
def score_pairs_file(model, embeddings_ND: np.ndarray, pairs_P2: np.ndarray, chunk: int = 1 << 16):
    """The predictor's score of every pair (rows of ``embeddings_ND`` by original id)."""
    scores = np.empty(pairs_P2.shape[0], dtype=np.float32)
    device = next(model.parameters(), torch.empty(0)).device
    for start in range(0, pairs_P2.shape[0], chunk):
        block = pairs_P2[start : start + chunk]
        h_u = torch.from_numpy(np.asarray(embeddings_ND[block[:, 0]], dtype=np.float32))
        h_v = torch.from_numpy(np.asarray(embeddings_ND[block[:, 1]], dtype=np.float32))
        score = model.score(h_u.to(device), h_v.to(device))
        scores[start : start + block.shape[0]] = score.cpu().numpy()
    return scores


USER_MODEL_BATCH = 1024
"""Nodes per batch of a user model's inference (each with its full L-hop neighbourhood)"""


def _blockwise(ctx: DistContext, run: InferRun, comm: Communicator, x: torch.Tensor, batch: int):
    """How a user model (``--model module:Class``, a forward over one graph per layer) or one
    that reads edge features (their rows fetched with the blocks) infers:
    ``run_model(module) -> [own rows, out]``, this rank's nodes in batches, each on its
    full-neighbourhood blocks (the owners serve every neighbour) with their input rows fetched
    from their owners (``x``: this rank's rows): what training evaluates such a model on with
    full fanouts, so the outputs are those of the whole graph. Collective: every rank runs the
    same number of batches."""
    from shardgnn.loader.pipeline import edge_ids
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.dist_neighbor import DistNeighborSampler
    from shardgnn.store.dist_feature import DistFeatureStore
    from shardgnn.store.dist_graph import DistGraphStore
    from shardgnn.store.feature import LocalFeatureStore

    config = run.config
    graph = DistGraphStore.open(run.partitions, ctx.rank, ctx.world_size, comm, verify=False)
    sampler = DistNeighborSampler(
        graph, SamplerConfig(fanouts=(-1,) * config.model.num_layers), comm, "sample"
    )
    rows = DistFeatureStore(x, graph.book, ctx.rank, comm, "fetch")
    edges = None
    if model_edge_dim(config, graph.part.edge_dim, str(run.partitions)):
        # the blocks' edge rows, from their owners (a collective)
        local = LocalFeatureStore(graph.part.edge_attr)
        edges = DistFeatureStore(local, graph.edge_book, ctx.rank, comm, "fetch")
    start, end = graph.book.part_range(ctx.rank)
    sizes = [int(np.diff(graph.book.part_range(p))[0]) for p in range(ctx.world_size)]
    count = max(-(-n // batch) for n in sizes)  # known to every rank: no collective

    @torch.no_grad()
    def run_model(module: torch.nn.Module) -> torch.Tensor:
        module.eval()
        outs = []
        for i in range(count):
            seeds = torch.arange(start + i * batch, min(end, start + (i + 1) * batch))
            sample = sampler.sample(seeds, 0)  # full neighbourhoods: the seed draws nothing
            x_SF = rows.gather(sample.input_nodes).to(ctx.device)
            edge_rows = [None] * len(sample.blocks)
            if edges is not None:
                sizes = [block.num_edges for block in sample.blocks]
                edge_rows = torch.split(edges.gather(edge_ids(sample)), sizes)
            graphs = [
                MessageGraph.from_block(b, ctx.device, None, r)
                for b, r in zip(sample.blocks, edge_rows)
            ]
            if seeds.numel():
                outs.append(module(graphs, x_SF).float())
        return torch.cat(outs) if outs else torch.zeros(0, 0)

    return run_model


def infer_homogeneous(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """Layer-wise inference of a node classifier (logits, predictions, accuracy per split) or a
    link model (its encoder's embeddings, and with ``run.pairs`` their scores) over a
    homogeneous partition; rank 0 writes the outputs and returns the summary."""
    if run.config.model.model in WALK_MODELS:
        return infer_walk_pairs(ctx, run)
    checkpoint, pset, config, out = run.checkpoint, run.pset, run.config, run.out
    partitions, chunk_rows, pairs, table_format = (
        run.partitions, run.chunk_rows, run.pairs, run.table_format
    )  # fmt: skip
    link = config.task == "link"
    weights = load_model_weights(checkpoint)
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    blockwise = is_user_model(config.model.model) or config.model.model in EDGE_FEATURE_MODELS
    # mostly-zero rows (bag-of-words): the first layer multiplies their non-zeros, as training's
    # sparse batches do (coauthor-physics: 8x faster than the dense product); the graph's density
    # decides for every rank alike, and the rows are read from the part files as non-zeros
    reads_sparse = (
        not blockwise and run.feature_storage != "disk" and sparse_batches_apply(config, ctx.device)
    )
    shard = load_shard(
        partitions,
        Grid(ctx.world_size, 1),
        ctx.rank,
        comm,
        need_features=not config.embedding.enabled,
        need_labels=not link,
        mapped_features=run.feature_storage == "disk",
        read_features=not reads_sparse,
    )
    target = None if link else target_of_labels(shard.label_kind, shard.y, shard.num_classes)
    width = pset.load_part(ctx.rank, verify=False).edge_dim
    edge_dim = model_edge_dim(config, width, str(partitions))
    if link:
        model, x = _link_model(config, shard, weights, checkpoint, comm, edge_dim)
    else:
        model, x = _node_model(config, shard, weights, checkpoint, comm, edge_dim)
    model.to(ctx.device)  # the layers run there; their inputs and halo rows move to it
    start = time.perf_counter()
    if blockwise:
        # a model of the user's own is a whole forward, not layers: full-neighbourhood blocks
        run_model = _blockwise(ctx, run, comm, x, min(chunk_rows, USER_MODEL_BATCH))
        if link:
            embeddings = run_model(model.encoder)
            outputs = {"embeddings": embeddings}
        else:
            # its output is all it exposes: the embeddings table holds it too
            embeddings = logits = run_model(model)
            outputs = {
                "embeddings": embeddings,
                "logits": logits,
                "predictions": target.predict(logits).cpu(),
            }
    else:
        engine = LayerwiseInference(
            shard, ctx.rank, comm, chunk_rows=chunk_rows, device=ctx.device,
            halo_per_chunk=run.feature_storage == "disk",
        )  # fmt: skip
        if link:
            _, embeddings = engine.run(model.encoder, x)  # what the predictor scores
            outputs = {"embeddings": embeddings}
        else:
            embeddings, logits = engine.run(model, x)
            outputs = {
                "embeddings": embeddings,
                "logits": logits,
                "predictions": target.predict(logits).cpu(),
            }
    seconds = time.perf_counter() - start
    sparse_input = is_sparse(x)
    by_class = target is not None and target.label_kind == "class"
    labelled = (outputs["predictions"], shard.y, shard.splits) if by_class else None
    totals, comm_summed = sum_over_ranks(comm, seconds, labelled)
    split_metric = None
    if target is not None and not by_class:
        split_metric = split_metrics(target, logits, shard.y, shard.splits, comm)
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
        write_output_tables(
            out,
            table_format,
            ids,
            pset.class_names,
            predictions=not link,
            label_kind=shard.label_kind if not link else "class",
        )
    )
    summary = {
        "task": config.task,
        "checkpoint": str(checkpoint),
        "partitions": str(partitions),
        "workers": ctx.world_size,
        "num_nodes": int(len(orig_ids)),
        "embedding_width": int(embeddings.shape[1]),
        # the input rows as one sparse matrix (the graph's mostly zero): the first layer read
        # their non-zeros (every rank alike)
        "sparse_input": sparse_input,
        **measured(totals, comm_summed, ctx.world_size, accuracy=by_class),
        **(
            {}
            if split_metric is None
            else {"label_kind": target.label_kind, "metric": split_metric}
        ),
        "pairs_scored": scored,
        "outputs": written,
        "tables": tables_summary(table_format, ids is not None, pset.class_names),
    }
    save_json(out / "inference.json", summary)
    return summary


def split_metrics(
    target: NodeTarget, logits: torch.Tensor, y: Any, splits: dict[str, Any], comm: Communicator
) -> dict[str, Any]:
    """``target``'s metric of every split over every rank's rows (``logits``, labels ``y`` and
    ``splits`` by this rank's local row): collectives, every rank calls it in the same order."""
    metrics: dict[str, Any] = {"name": target.metric}
    y = torch.from_numpy(np.array(y))  # a copy: parts are read-only maps
    for split in ("train", "val", "test"):
        rows = splits[split]
        idx = torch.from_numpy(np.array([] if rows is None else rows, dtype=np.int64))
        evaluation = target.evaluation()
        evaluation.add(logits[idx.to(logits.device)].cpu(), y[idx])
        metrics[split] = evaluation.result(CommReducer(comm))[0]
    return metrics


def infer_typed(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """Layer-wise inference of a typed node classifier (``rgcn``/``hetero-sage``) over a typed
    partition: every rank computes its own nodes, layer by layer in chunks of destinations,
    fetching the previous layer's rows of its chunk's sources from their owners. Writes, per node
    type in original (typed) ids, ``OUT/<type>/embeddings.npy`` (the last layer's input) and, for
    the labelled type, ``logits.npy`` and ``predictions.npy`` (classes, label probabilities or
    values: :meth:`NodeTarget.predict`); and their tables keyed by the type's own ids
    (``OUT/<type>/embeddings.csv``, ``predictions.csv``)."""
    from shardgnn.nn.typed import layerwise_forward, partitioned_node_model
    from shardgnn.store.dist_feature import DistFeatureStore

    if run.config.task == "link":
        return infer_relational(ctx, run)
    checkpoint, pset, config, out = run.checkpoint, run.pset, run.config, run.out
    chunk_rows, table_format = run.chunk_rows, run.table_format

    typed = pset.typed_book
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    part = pset.load_part(ctx.rank)
    weights, tables = load_typed_rows(checkpoint)
    target = target_of_labels(part.label_kind, part.y, part.num_classes)
    model = partitioned_node_model(config.model, typed, target.out_dim)
    load_weights_into(model, weights, checkpoint, f"{len(typed.node_types)} node types")
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
    predictions = target.predict(logits)
    splits = {split: getattr(part, f"{split}_idx") for split in ("train", "val", "test")}
    by_class = target.label_kind == "class"
    labelled = (predictions, part.y, splits) if by_class else None
    totals, comm_summed = sum_over_ranks(comm, seconds, labelled)
    split_metric = None if by_class else split_metrics(target, logits, part.y, splits, comm)
    # per node type, its rows of every rank in original typed ids
    target_type = typed.target_type
    rows, placement = {}, {}
    for t, name in enumerate(typed.node_types):
        lo, hi = int(bounds[t]) - start, int(bounds[t + 1]) - start
        kinds = {"embeddings": embeddings}
        if name == target_type:
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
                out / name,
                table_format,
                ids,
                pset.class_names,
                f"{name}/",
                name == target_type,
                label_kind=target.label_kind,
            )  # fmt: skip
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
        "target_type": target_type,
        "embedding_width": int(embeddings.shape[1]),
        **measured(totals, comm_summed, ctx.world_size, accuracy=by_class),
        **({} if by_class else {"label_kind": target.label_kind, "metric": split_metric}),
        "pairs_scored": None,
        "outputs": written,
        "tables": tables_summary(table_format, named, pset.class_names),
    }
    save_json(out / "inference.json", summary)
    return summary


WALK_PAIRS_AT_ONCE = 4096
"""pairs one rank scores at a time (memory: their walks' positional encodings)"""


def infer_walk_pairs(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """A SUREL model (:mod:`shardgnn.nn.surel`) scores the pairs of ``--pairs FILE``: it holds
    no embedding of a node to write. Every rank scores an even share of the pairs from walks on
    the partition (each step drawn by the owner of the walk's current node, from the seed
    evaluation draws with: the scores are those training's evaluation computes for the same
    pairs); rank 0 writes ``OUT/scores.npy`` (logits, pair order) and ``inference.json``."""
    from shardgnn.nn.surel import evaluation_walk_seed, query_walks
    from shardgnn.sampling.dist_walks import dist_node_walks

    checkpoint, pset, config, out = run.checkpoint, run.pset, run.config, run.out
    if run.pairs is None:
        raise ConfigError(
            f"{checkpoint} holds a {config.model.model} model, which scores pairs from random "
            "walks and has no node embeddings: give --pairs FILE"
        )
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    n = pset.num_nodes
    walks, length = config.link.walk_shape()
    model = load_surel_model(checkpoint, config, n).to(ctx.device)
    pairs_P2 = read_pairs(run.pairs, n)
    new, orig = pset.new_id_of_orig(), np.asarray(pset.orig_ids)
    mine = pairs_P2[np.array_split(np.arange(len(pairs_P2)), ctx.world_size)[ctx.rank]]
    part = pset.load_part(ctx.rank)
    seed = evaluation_walk_seed(config.seed)

    def draw(nodes: np.ndarray) -> np.ndarray:
        return dist_node_walks(
            pset.book.owner, part.indptr, part.indices, part.start, comm, nodes, orig[nodes],
            walks, length, seed, "walk",
        )  # fmt: skip

    # every rank draws as many times as the largest share needs (the walks are a collective)
    chunks = math.ceil(math.ceil(len(pairs_P2) / ctx.world_size) / WALK_PAIRS_AT_ONCE)
    scores = [np.zeros(0, dtype=np.float32)]
    begin = time.perf_counter()
    with torch.no_grad():
        for c in range(chunks):
            block = mine[c * WALK_PAIRS_AT_ONCE : (c + 1) * WALK_PAIRS_AT_ONCE]
            both = query_walks(new[block[:, 0]], new[block[:, 1]], draw)
            scores.append(model(both.to(ctx.device)).float().cpu().numpy())
    seconds = time.perf_counter() - begin
    totals, comm_summed = sum_over_ranks(comm, seconds)
    every = comm.all_to_all([torch.from_numpy(np.concatenate(scores))] * ctx.world_size, "eval")
    if not ctx.is_main:
        return None
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(out / "scores.npy", "wb") as fh:
        np.save(fh, torch.cat(every).numpy(), allow_pickle=False)
    summary = {
        "task": config.task,
        "model": config.model.model,
        "checkpoint": str(checkpoint),
        "partitions": str(run.partitions),
        "workers": ctx.world_size,
        "num_nodes": n,
        "walks": {"per_node": walks, "length": length},
        **measured(totals, comm_summed, ctx.world_size, accuracy=False),
        "pairs_scored": int(len(pairs_P2)),
        "outputs": {"scores": str(out / "scores.npy")},
    }
    save_json(out / "inference.json", summary)
    return summary


def infer_relational(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """A knowledge-graph model (R-GCN + decoder) over a partition of its graph: every rank
    encodes its own entities as training does (its entities' in-neighbours' rows fetched per
    layer, :class:`~shardgnn.fullgraph.relational.EntityShard`), from the checkpoint's entity
    rows (its own entities' alone, picked by entity id from every worker's). Writes, by entity
    id, ``OUT/entity/embeddings.npy`` (the encoder's output: what the decoder scores) with its
    table keyed by the entities' names, and ``OUT/relations.npy``, the decoder's row of every
    relation (``r``) and of its reciprocal (``r + R``, which scores head queries)."""
    from shardgnn.fullgraph.relational import EntityShard, hold_entity_rows
    from shardgnn.train.inference.run import load_entity_rows
    from shardgnn.train.typed import relational_model

    checkpoint, pset, config, out = run.checkpoint, run.pset, run.config, run.out
    typed = pset.typed_book
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    shard = EntityShard(pset, ctx.rank, comm, torch.device("cpu"), gathers_every_entity=False)
    weights, own_rows = load_entity_rows(checkpoint, pset.num_nodes, keep=shard.own_orig)
    model = relational_model(  # its rows come from the checkpoint: none drawn
        config, typed.relations, typed.node_types, pset.num_nodes, draw_rows=False
    )
    load_weights_into(model, weights, checkpoint, "knowledge-graph model")
    model = hold_entity_rows(model, own_rows, shard.own_orig)
    model.eval()
    begin = time.perf_counter()
    with torch.no_grad():
        h_own = shard.encode_own(model.encoder)  # its own entities' rows, no gather
    seconds = time.perf_counter() - begin
    totals, comm_summed = sum_over_ranks(comm, seconds)
    orig = np.asarray(pset.orig_ids)
    entity = typed.node_types[0]
    name = f"{entity}/embeddings"
    placement = {name: (pset.num_nodes, lambda p: orig[slice(*pset.book.part_range(p))])}
    written = write_by_original_id(ctx, out, {name: h_own.numpy()}, placement)
    if written is None:
        return None
    with atomic_open(out / "relations.npy", "wb") as fh:
        np.save(fh, next(iter(model.decoder.parameters())).detach().numpy(), allow_pickle=False)
    written["relations"] = str(out / "relations.npy")
    ids = pset.node_ids(entity)
    tables = write_output_tables(out / entity, run.table_format, ids, None, f"{entity}/", False)
    written.update(tables)
    summary = {
        "task": config.task,
        "model": config.model.model,
        "predictor": config.link.predictor,
        "checkpoint": str(checkpoint),
        "partitions": str(pset.path),
        "workers": ctx.world_size,
        "num_nodes": pset.num_nodes,
        "relations": ["/".join(r) for r in typed.relations],
        "embedding_width": int(h_own.shape[1]),
        **measured(totals, comm_summed, ctx.world_size, accuracy=False),
        "pairs_scored": None,
        "outputs": written,
        "tables": tables_summary(run.table_format, ids is not None, None),
    }
    save_json(out / "inference.json", summary)
    return summary


def infer_graphset(ctx: DistContext, run: InferRun) -> dict[str, Any] | None:
    """A graph- or edge-level model over a graph-set partition: every rank runs its own whole
    graphs. A graph-level model writes, by original graph id, ``embeddings.npy`` (each graph's
    readout, what the head reads), ``logits.npy``, ``predictions.npy`` (the class, or the
    predicted values) and tables keyed by ``graph_id``; an edge-level one ``embeddings.npy``
    (every node's last-layer row, by original node id) and, by the edge's position in the set's
    CSR, ``logits.npy``, ``predictions.npy`` and ``predictions.csv`` (``edge_id, src, dst,
    class``, or ``value_0..`` for real targets). The metric per split goes to
    ``inference.json``."""
    from shardgnn.partition.graphset import graph_part_ids, load_graph_part
    from shardgnn.train.graphlevel import batch_tensors, graph_model, graph_set_target

    checkpoint, pset, config, out = run.checkpoint, run.pset, run.config, run.out
    level = config.task
    comm = Communicator(ctx.rank, ctx.world_size, ctx.group)
    graphs = load_graph_part(pset, ctx.rank)
    target = graph_set_target(config, graphs)
    model = graph_model(config, graphs, target.out_dim)
    described = f"{graphs.num_features} features and {target.out_dim} outputs"
    load_weights_into(model, load_model_weights(checkpoint), checkpoint, described)
    model.to(ctx.device).eval()
    start = time.perf_counter()
    rows: dict[str, list[torch.Tensor]] = {"embeddings": [], "logits": [], "y": []}
    ptr, first = np.asarray(graphs.graph_ptr), 0
    with torch.no_grad():
        while first < graphs.num_graphs:  # whole graphs, up to chunk_rows nodes at a time
            end = int(np.searchsorted(ptr, ptr[first] + run.chunk_rows, side="right")) - 1
            end = min(max(end, first + 1), graphs.num_graphs)
            *inputs, y = batch_tensors(graphs, np.arange(first, end), ctx.device, level)
            first = end
            embedded, out_BC = model.encode(*inputs)
            for name, value in (("embeddings", embedded), ("logits", out_BC.float()), ("y", y)):
                rows[name].append(value.cpu())
    emb, logit, y = (torch.cat(rows[k]) for k in ("embeddings", "logits", "y"))
    seconds = time.perf_counter() - start
    split_metric: dict[str, Any] = {"name": target.metric}
    for split in ("train", "val", "test"):  # collectives: every rank, the same order
        ids = np.asarray(getattr(graphs, f"{split}_idx"), dtype=np.int64)
        if level == "edge":  # the edges of the split's graphs
            ids = graphs.edges_of(ids)
        idx = torch.from_numpy(ids)
        evaluation = target.evaluation()
        evaluation.add(logit[idx], y[idx])
        split_metric[split] = evaluation.result(CommReducer(comm))[0]
    totals, comm_summed = sum_over_ranks(comm, seconds)
    info = pset.meta["graphset"]
    orig_ids = np.asarray(pset.orig_ids)
    ranges = [tuple(int(v) for v in pset.book.part_range(p)) for p in range(ctx.world_size)]
    rows = int(info["num_graphs"]) if level == "graph" else int(pset.num_edges)
    # rank 0 places every part's rows: it reads their ids alone, once
    ids = [graph_part_ids(pset, p, level) for p in range(ctx.world_size)] if ctx.is_main else []
    by_row = (rows, lambda p: np.asarray(ids[p]))
    if level == "graph":
        by_embedding = by_row
    else:
        by_embedding = (len(orig_ids), lambda p: orig_ids[slice(*ranges[p])])
    outputs = {"embeddings": emb, "logits": logit, "predictions": target.predict(logit)}
    written = write_by_original_id(
        ctx,
        out,
        {name: tensor.detach().numpy() for name, tensor in outputs.items()},
        {"embeddings": by_embedding, "logits": by_row, "predictions": by_row},
    )
    if written is None:
        return None
    if level == "graph":
        written.update(
            write_output_tables(
                out, run.table_format, None, None, label_kind=target.label_kind,
                id_column="graph_id",
            )
        )  # fmt: skip
    elif run.table_format != "none":
        written.update(_edge_tables(out, run.table_format, pset))
    summary = {
        "task": config.task,
        "checkpoint": str(checkpoint),
        "partitions": str(run.partitions),
        "workers": ctx.world_size,
        "num_graphs": int(info["num_graphs"]),
        "num_nodes": int(pset.num_nodes),
        "embedding_width": int(emb.shape[1]),
        **measured(totals, comm_summed, ctx.world_size, accuracy=False),
        "label_kind": target.label_kind,
        "metric": split_metric,
        "pairs_scored": None,
        "outputs": written,
        "tables": tables_summary(run.table_format, False, None),
    }
    save_json(out / "inference.json", summary)
    return summary


def _edge_tables(out: Path, table_format: str, pset) -> dict[str, str]:
    """``predictions.<ext>`` (``edge_id, src, dst, class`` or ``value_0..``: the edge's position
    in the set's CSR, its end nodes' original ids, the predicted class or values) and
    ``embeddings.<ext>`` (``node_id, emb_...``)."""
    from shardgnn.train.tables import write_table

    graph = pset.reassemble()
    orig = np.asarray(pset.orig_ids)
    dst_new = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    src, dst = orig[np.asarray(graph.indices, dtype=np.int64)], orig[dst_new]
    parts = [np.asarray(pset.load_part(p).edge_arrays["ids"]) for p in range(pset.num_parts)]
    edge_id = np.concatenate(parts)  # the reassembled CSR runs part by part, in part order
    src_by_id, dst_by_id = np.empty_like(src), np.empty_like(dst)
    src_by_id[edge_id], dst_by_id[edge_id] = src, dst
    predictions = np.load(out / "predictions.npy")
    ids = np.arange(len(predictions), dtype=np.int64)
    predicted = "class" if predictions.ndim == 1 else "value"
    columns = {"edge_id": ids, "src": src_by_id, "dst": dst_by_id, predicted: predictions}
    embeddings = np.load(out / "embeddings.npy", mmap_mode="r")
    node_ids = np.arange(embeddings.shape[0], dtype=np.int64)
    return {
        "predictions_table": str(write_table(out / f"predictions.{table_format}", columns,
                                             table_format)),
        "embeddings_table": str(write_table(out / f"embeddings.{table_format}",
                                            {"node_id": node_ids, "emb": embeddings},
                                            table_format)),
    }  # fmt: skip
