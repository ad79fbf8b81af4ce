"""``shardgnn export``: a trained model as one file a serving stack loads, checked before it is
written.

The file holds :class:`~shardgnn.nn.serving.ServingModel`: inputs ``x`` (float32 ``[N, F]``,
the raw features: the ``--feature-norm row`` of training is inside) and ``edge_index`` (int64
``[2, E]``, row 0 the sources, row 1 the destinations), output float32 ``[N, C]``: what
``shardgnn infer`` computes for every node (a node model's logits, or its regression values; a
link model's encoder embeddings). ``N`` and ``E`` are free: one file serves graphs of any size.
A graph-level model (``--task graph``) takes a batch of graphs as their disjoint union plus
``graph_ptr`` (int64 ``[B + 1]``, each graph's first node and then ``N``: PyG's ``Batch.ptr``)
and returns ``[B, C]``; an edge-level one (``--task edge``) returns ``[E, C]`` in ``edge_index``
order. A model reading edge features takes ``edge_attr`` (float32 ``[E, D]``) last.
A typed node model (:class:`~shardgnn.nn.serving.TypedServingModel`) takes one feature table
per featured node type (``x_<type>``), ``edge_index`` in the type-by-type numbering and
``edge_type`` (``[E]``), and returns every node's ``[N, C]``; featureless types' learnt rows
are inside the file. A knowledge-graph model
(:class:`~shardgnn.nn.serving.KnowledgeGraphServingModel`) takes ``entity`` and ``relation``
(``[Q]``) and returns every entity's score ``[Q, N]``. A SUREL link predictor
(:class:`~shardgnn.nn.serving.WalkServingModel`) takes its queries' endpoints' walks (``walks``,
int64 ``[Q, 2, M, L + 1]``, drawn by :func:`~shardgnn.sampling.walks.node_walks` on the served
graph) and returns each query's logit ``[Q]``. TGAT (:class:`~shardgnn.nn.serving.\
TemporalServingModel`) takes its queries' times and, hop by hop, the earlier events sampled
around them on the served stream, and returns their embeddings (or class logits) ``[Q, D]``. TGN
and JODIE (:class:`~shardgnn.nn.serving.MemoryServingModel`) take the memory of the nodes they read,
which the serving stack keeps (:class:`~shardgnn.nn.serving.ServedMemory`), and return it updated
by the messages given, with the queries' embeddings.
Formats:

* ``.onnx``: ONNX through ``torch.onnx.export(dynamo=True)`` (needs ``onnx`` and ``onnxscript``;
  checked with ``onnxruntime`` when it is installed: ``pip install 'shardgnn[export]'``);
* ``.pt2``: ``torch.export`` (``torch.export.load(path).module()(x, edge_index)``);
* ``.pt`` / ``.ts``: TorchScript (``torch.jit.load(path)(x, edge_index)``; torch deprecates it in
  favour of ``.pt2``, serving stacks still load it).

The check: the written file is loaded back and run on a random graph (``--check-nodes`` nodes,
self-loops and isolated nodes included, a size other than the one traced), and its output
compared with the trained model's as training and ``shardgnn infer`` compute it (the numba CSR
kernels); a file that differs by more than 1e-4 (relative to the outputs' scale) is not written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.fx.experimental._config as fx_config

from shardgnn.atomic import atomic_path, save_json
from shardgnn.errors import ConfigError, ShardgnnError
from shardgnn.graph.csr import csr_from_edges, csr_with_order
from shardgnn.graph.features import normalize_features
from shardgnn.graph.temporal import TemporalGraph
from shardgnn.graph.typed import with_reverse_edges
from shardgnn.nn.config import (
    EDGE_FEATURE_MODELS,
    GRAPH_MODELS,
    TEMPORAL_MODELS,
    TYPED_MODELS,
    WALK_MODELS,
    is_user_model,
)
from shardgnn.nn.graphlevel import GraphGNN
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import build_model
from shardgnn.nn.serving import (
    EdgeServingModel,
    GraphServingModel,
    KnowledgeGraphServingModel,
    MemoryServingModel,
    ServedMemory,
    ServingModel,
    TemporalServingModel,
    TypedServingModel,
    WalkServingModel,
    temporal_inputs,
)
from shardgnn.nn.surel import query_walks, relative_positions
from shardgnn.nn.targets import target_of_labels
from shardgnn.nn.temporal import HopTensors, NodeMemory, TemporalLinkModel
from shardgnn.nn.typed import TypedInput, TypedMessageGraph, TypedNodeModel, typed_encoder
from shardgnn.sampling.temporal import TemporalNeighborSampler
from shardgnn.sampling.walks import node_walks
from shardgnn.train.checkpoint import read_checkpoint_meta
from shardgnn.train.config import TrainConfig
from shardgnn.train.config_rules import LAYERWISE_MODELS
from shardgnn.train.inference.run import (
    load_entity_rows,
    load_model_weights,
    load_surel_model,
    load_typed_rows,
    load_weights_into,
    resolve_checkpoint,
)
from shardgnn.train.linkmetrics import AnswerIndex
from shardgnn.train.settings import ExportConfig
from shardgnn.train.setup import model_edge_dim

SUFFIX_FORMATS = {".onnx": "onnx", ".pt2": "pt2", ".pt": "torchscript", ".ts": "torchscript"}
FORMAT_NAMES = {"onnx": "ONNX", "pt2": "torch.export", "torchscript": "TorchScript"}
FORMAT_SUFFIXES = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}
TOLERANCE = 1e-4
"""Largest difference allowed between the file's outputs and the trained model's, relative to
the largest output (at least 1): the kernels add in another order than ``index_add``."""


class ExportError(ShardgnnError):
    """The model cannot be written in the format asked for (its code does not trace)."""


class ExportCheckError(ShardgnnError):
    """The exported file does not compute what the trained model computes."""


@dataclasses.dataclass(frozen=True)
class Exported:
    """What ``shardgnn export`` wrote and how it was checked."""

    path: Path
    format: str
    model: str
    task: str  # what the model predicts, in words
    in_dim: int
    out_dim: int
    outputs: str  # what the output columns are
    bytes: int
    seconds: float
    check: str  # how the file was checked, or why it was not
    inputs: str = ""  # what goes in, in words (default: the features' count)
    signature: Path | None = None  # the file's inputs and output, as JSON

    def summary(self) -> str:
        """The one line the command prints."""
        return (
            f"exported {self.model} ({self.task}: "
            f"{self.inputs or f'{self.in_dim} feature' + 's' * (self.in_dim != 1)}"
            f" -> {self.outputs}) to "
            f"{self.path} ({FORMAT_NAMES[self.format]}, {self.bytes / 1e6:.1f} MB) in "
            f"{self.seconds:.1f} s; {self.check}"
            + (f"; inputs and output in {self.signature}" if self.signature else "")
        )


def export_format(config: ExportConfig) -> str:
    """The format ``--format`` names, or the one ``--out``'s suffix names."""
    suffix = Path(config.out).suffix.lower()
    if config.format == "auto":
        if suffix not in SUFFIX_FORMATS:
            raise ConfigError(
                f"--out {config.out}: no format for suffix {suffix or '(none)'!r}; name the file "
                "model.onnx (ONNX), model.pt2 (torch.export) or model.pt (TorchScript), or pass "
                "--format"
            )
        fmt = SUFFIX_FORMATS[suffix]
    else:
        fmt = config.format
        if SUFFIX_FORMATS.get(suffix, fmt) != fmt:
            raise ConfigError(
                f"--format {fmt}: --out {config.out} has the suffix of "
                f"{FORMAT_NAMES[SUFFIX_FORMATS[suffix]]} files; name it "
                f"model{FORMAT_SUFFIXES[fmt]}, or drop --format"
            )
    if config.opset != 18 and fmt != "onnx":
        raise ConfigError(f"--opset {config.opset}: applies to ONNX files, and --out is {fmt}")
    return fmt


Served = (
    ServingModel
    | GraphServingModel
    | EdgeServingModel
    | TypedServingModel
    | KnowledgeGraphServingModel
    | WalkServingModel
    | TemporalServingModel
    | MemoryServingModel
)


def serving_model(
    checkpoint: Path, top_k: int | None = None, filter_known: bool = False
) -> tuple[Served, TrainConfig, int, int, str]:
    """The checkpoint's model (best-validation weights when recorded) as a serving module
    (:class:`ServingModel`; a graph set's :class:`GraphServingModel` or
    :class:`EdgeServingModel`), its training config, input and output widths, and what the
    outputs are. ``top_k``: a knowledge-graph model's file returns each query's best entities;
    ``filter_known``: never the graph's known ones.

    Raises:
        ConfigError: a model or task the serving model does not run, in one line.
    """
    meta = read_checkpoint_meta(checkpoint)
    config = TrainConfig.from_dict(meta["config"], where=f"{checkpoint}/meta.json config")
    name = config.model.model
    if config.task in ("graph", "edge") and name in GRAPH_MODELS:
        return _graph_set_serving(checkpoint, config, meta.get("dataset") or {})
    if config.task == "link" and name in TYPED_MODELS:
        return _knowledge_graph_serving(checkpoint, config, meta, top_k, filter_known)
    if config.task == "link" and name in WALK_MODELS and top_k is None and not filter_known:
        return _walk_serving(checkpoint, config, meta.get("dataset") or {})
    for flag, given in ((f"--top-k {top_k}", top_k is not None), ("--filter-known", filter_known)):
        if given:
            raise ConfigError(
                f"{flag}: applies to knowledge-graph models, and {checkpoint} holds a "
                f"{name} model of --task {config.task}"
            )
    if "typed" in (meta.get("dataset") or {}) and config.task == "node":
        return _typed_serving(checkpoint, config, meta["dataset"]["typed"])
    if name == "tgat":
        return _temporal_serving(checkpoint, config)
    if name in TEMPORAL_MODELS:
        return _memory_serving(checkpoint, config)
    if config.task not in ("node", "link"):
        raise ConfigError(
            f"{checkpoint} holds a {name} model of --task {config.task}; export writes node, "
            "link, graph and edge models of graphs and event-stream models"
        )
    if name not in (*LAYERWISE_MODELS, *EDGE_FEATURE_MODELS) and not is_user_model(name):
        raise ConfigError(
            f"{checkpoint} holds a {name} model; export writes "
            f"{', '.join(dict.fromkeys((*LAYERWISE_MODELS, *GRAPH_MODELS)))}, typed node and "
            "knowledge-graph, SUREL and user models"
        )
    if config.embedding.enabled:
        raise ConfigError(
            f"{checkpoint} was trained with --embedding-dim {config.embedding.dim}: its learnt "
            "rows belong to the training graph's nodes, which a served graph does not have; "
            "use `shardgnn infer` for that graph, or train on features alone to export"
        )
    if config.feature_norm == "standard":
        raise ConfigError(
            f"{checkpoint} was trained with --feature-norm standard, whose column statistics "
            "belong to the training graph; retrain with --feature-norm row or none to export"
        )
    dataset = meta.get("dataset") or {}
    in_dim = int(dataset.get("num_features") or 0)
    if in_dim < 1:
        raise ConfigError(f"{checkpoint}: the model was trained without node features to serve")
    # the edge features the model read (gine; a model of the user's on a graph with them)
    recorded = int(dataset.get("edge_features") or 0)
    edge_dim = model_edge_dim(config, recorded, f"the dataset {checkpoint} records")
    if config.task == "link":
        from shardgnn.train.link import build_link_model

        link = build_link_model(config, in_dim, edge_dim=edge_dim)
        load_weights_into(link, load_model_weights(checkpoint), checkpoint, f"{in_dim} features")
        model, out_dim = link.encoder, config.link.out_dim
        outputs = f"{out_dim}-wide embeddings (the link predictor scores pairs of them)"
    else:
        kind = dataset.get("label_kind", "class")
        width = np.empty((0, int(dataset.get("label_columns") or 0)))
        target = target_of_labels(kind, width, int(dataset.get("num_classes") or 0))
        out_dim = target.out_dim
        model = build_model(config.model, in_dim, out_dim, edge_dim)
        load_weights_into(model, load_model_weights(checkpoint), checkpoint, f"{in_dim} features")
        outputs = (
            f"{out_dim} class logits"
            if kind == "class"
            else f"{out_dim} {kind} output{'s' * (out_dim != 1)}"
        )
    model.eval()
    # a user model need not say how many graphs it takes: its config does
    layers = getattr(model, "num_layers", None) or config.model.num_layers
    serving = ServingModel(model, layers, config.feature_norm, edge_dim).eval()
    return serving, config, in_dim, out_dim, outputs


def _graph_set_serving(
    checkpoint: Path, config: TrainConfig, dataset: dict
) -> tuple[Served, TrainConfig, int, int, str]:
    """A graph- or edge-level model (GIN, GINE) as a serving module. Its widths come from its
    weights: the input projection's (features), the head's (outputs), GINE's edge projection or
    the edge head's remainder (edge features), so nothing about the set is needed but its label
    kind."""
    weights = load_model_weights(checkpoint)
    hidden, level = config.model.hidden, config.task
    try:
        in_dim = int(weights["input.weight"].shape[1])
        out_dim = int(weights["head.2.weight"].shape[0])
        if config.model.model == "gine":
            edge_dim = int(weights["convs.0.lin_edge.weight"].shape[1])
        else:
            edge_dim = int(weights["head.0.weight"].shape[1]) - 2 * hidden if level == "edge" else 0
    except (KeyError, IndexError):
        raise ConfigError(
            f"{checkpoint}: its weights are not those of a {config.model.model} {level}-level "
            "model (the checkpoint is damaged or from another version); retrain it"
        ) from None
    model = GraphGNN(
        config.model.model, in_dim, hidden, out_dim, config.model.num_layers,
        readout=config.model.readout, edge_dim=edge_dim, level=level,
    )  # fmt: skip
    load_weights_into(model, weights, checkpoint, f"{in_dim} features and {out_dim} outputs")
    model.eval()
    if level == "edge":
        outputs = f"{out_dim} outputs per edge"
        return EdgeServingModel(model, edge_dim).eval(), config, in_dim, out_dim, outputs
    kind = str(dataset.get("label_kind", "class"))
    outputs = f"{out_dim} class logits" if kind == "class" else f"{out_dim} {kind} output"
    outputs += f"{'s' * (kind != 'class' and out_dim != 1)} per graph"
    return GraphServingModel(model, edge_dim).eval(), config, in_dim, out_dim, outputs


def _knowledge_graph_serving(
    checkpoint: Path,
    config: TrainConfig,
    meta: dict,
    top_k: int | None = None,
    filter_known: bool = False,
) -> tuple[Served, TrainConfig, int, int, str]:
    """A knowledge-graph model as the scores of queries: the entity rows of every rank's file
    put together by entity id, encoded over the training graph in one process as training
    encodes them (the graph is loaded from the checkpoint's dataset spec), and the decoder;
    ``filter_known``: with the graph's triples of every split, which it never answers with."""
    from shardgnn.train.typed import TypedLinkSteps

    one = dataclasses.replace(config, device="cpu")  # the one-process steps of the run
    try:
        steps = TypedLinkSteps(one)
    except ShardgnnError as exc:
        raise ConfigError(
            f"{checkpoint}: the knowledge graph it was trained on ({config.dataset}) is needed "
            f"to encode its entities and could not be loaded: {exc}"
        ) from None
    model, rows = steps.model, steps.model.encoder.input_NI
    weights, table = load_entity_rows(checkpoint, rows.shape[0])
    if table.shape != rows.shape:
        raise ConfigError(
            f"{checkpoint} holds entity rows of width {table.shape[1]}, not {rows.shape[1]}"
        )
    with torch.no_grad():
        rows.copy_(table)
    # the other weights, strictly; the held rows' ids and Adam state stay as the one-process
    # model made them
    held = {k: v for k, v in model.state_dict().items() if k not in weights}
    load_weights_into(model, {**weights, **held}, checkpoint, "knowledge-graph model")
    model.eval()
    with torch.no_grad():
        entities_ND = steps.encode()
    names = [name for _, name, _ in steps.graph.relations]
    n, r = entities_ND.shape[0], steps.num_relations
    if top_k is not None and top_k > n:
        raise ConfigError(f"--top-k {top_k}: {checkpoint}'s graph has {n:,} entities")
    # the filtered ranking's index of training: its keys are relation * N + entity, the
    # relation counted as the file's input counts it (r + R: a head query)
    known = (steps.known.keys, steps.known.answers) if filter_known else None
    serving = KnowledgeGraphServingModel(model.decoder, entities_ND, names, top_k, known).eval()
    outputs = f"scores of the {n:,} entities per query"
    if top_k is not None:
        outputs = f"the {top_k} best of the {n:,} entities per query and their scores"
    outputs += f" ({r} relations, {2 * r} with reciprocals)"
    if filter_known:
        outputs += f"; the {len(steps.known.keys):,} known answers score -inf"
    return serving, config, 0, top_k or n, outputs


def _walk_serving(
    checkpoint: Path, config: TrainConfig, dataset: dict
) -> tuple[Served, TrainConfig, int, int, str]:
    """A SUREL model as the scores of queries from their endpoints' walks, as many walks of
    as many steps as training drew."""
    model = load_surel_model(checkpoint, config, int(dataset.get("num_nodes") or 1))
    serving = WalkServingModel(model, *config.link.walk_shape()).eval()
    return serving, config, 0, 1, "a logit per query"


def _temporal_serving(
    checkpoint: Path, config: TrainConfig
) -> tuple[Served, TrainConfig, int, int, str]:
    """TGAT as the embeddings (or class logits) of queries at their times from the events
    sampled around them, as many hops of as many events as training sampled. Its widths come
    from its weights: the event features' (the first layer's edge projection), the classes'
    (the classifier's last layer)."""
    if config.embedding.enabled:
        raise ConfigError(
            f"{checkpoint} was trained with --embedding-dim {config.embedding.dim}: its learnt "
            "rows belong to the training stream's nodes, which a served stream does not have; "
            "use `shardgnn infer`, or train without them to export"
        )
    weights = load_model_weights(checkpoint)
    edge = weights.get("attention.0.lin_edge.weight")
    classifier = weights.get("classifier.3.weight")
    num_classes = 0 if classifier is None else int(classifier.shape[0])
    model = TemporalLinkModel(
        "tgat",
        1,
        torch.zeros((0, 0 if edge is None else int(edge.shape[1]))),
        time_dim=config.temporal.time_dim,
        embedding_dim=config.link.out_dim,
        heads=config.model.heads,
        dropout=config.model.dropout,
        layers=len(config.temporal.neighbors),
        num_classes=num_classes,
    )
    load_weights_into(model, weights, checkpoint, "tgat model")
    model.eval()
    classify = config.task == "node" and num_classes > 0
    fanouts = tuple(config.temporal.neighbors)
    serving = TemporalServingModel(model, fanouts, config.temporal_sampling, classify).eval()
    out_dim = num_classes if classify else config.link.out_dim
    outputs = (
        f"{out_dim} class logits per query"
        if classify
        else f"{out_dim}-wide embeddings per query (the link predictor scores pairs of them)"
    )
    return serving, config, serving.event_dim, out_dim, outputs


def _memory_serving(
    checkpoint: Path, config: TrainConfig
) -> tuple[Served, TrainConfig, int, int, str]:
    """TGN or JODIE as a function of the memory of the nodes it reads (the serving stack's, not
    the training stream's: the checkpoint's memory rows are left out). Widths come from the
    weights: the memory's and the event features' (the GRU's input), the classes'."""
    weights = {
        k: v for k, v in load_model_weights(checkpoint).items() if not k.startswith("memory.held.")
    }
    name = config.model.model
    if name == "jodie" and "time_scale" not in weights:
        raise ConfigError(
            f"{checkpoint}: a jodie checkpoint written before its time scale was recorded (its "
            "projection divides by the training stream's mean gap); retrain to export, or use "
            "`shardgnn infer`"
        )
    gru = weights.get("memory.gru.weight_hh")
    memory_dim = config.temporal.memory_dim if gru is None else int(gru.shape[1])
    time_dim = config.temporal.time_dim
    gru_in = weights.get("memory.gru.weight_ih")
    event_dim = 0 if gru_in is None else int(gru_in.shape[1]) - 2 * memory_dim - time_dim
    classifier = weights.get("classifier.3.weight")
    num_classes = 0 if classifier is None else int(classifier.shape[0])
    model = TemporalLinkModel(
        name,
        1,
        torch.zeros((0, max(event_dim, 0))),
        memory_dim=memory_dim,
        time_dim=time_dim,
        embedding_dim=config.link.out_dim,
        heads=config.model.heads,
        dropout=config.model.dropout,
        num_classes=num_classes,
    )
    expected = model.state_dict()
    weights.update({k: v for k, v in expected.items() if k.startswith("memory.held.")})
    load_weights_into(model, weights, checkpoint, f"{name} model")
    model.eval()
    classify = config.task == "node" and num_classes > 0
    serving = MemoryServingModel(model, classify, config.temporal.neighbors[0]).eval()
    out_dim = num_classes if classify else model.predictor.lin_src.in_features
    outputs = (
        f"{out_dim} class logits per query"
        if classify
        else f"{out_dim}-wide embeddings per query (the link predictor scores pairs of them)"
    )
    return serving, config, serving.event_dim, out_dim, outputs


def _random_events(
    rng: np.random.Generator, num_nodes: int, event_dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``src, dst, t, feat`` of a random stream of ``8 * num_nodes`` events among ``num_nodes``
    nodes (the last tenth without any), at increasing Unix-second times over 1e6 s (float64
    matters there), ``event_dim`` standard normal features each."""
    count = 8 * num_nodes
    with_events = max(2, num_nodes - num_nodes // 10)
    src, dst = rng.integers(0, with_events, size=(2, count))
    t = np.sort(rng.uniform(1.7e9, 1.7e9 + 1e6, size=count))
    feat = rng.standard_normal((count, event_dim)).astype(np.float32)
    return src, dst, t, feat


def random_stream(
    serving: TemporalServingModel, num_nodes: int, seed: int = 0
) -> tuple[tuple[torch.Tensor, ...], list, np.ndarray, np.ndarray]:
    """``serving``'s inputs for ``num_nodes`` queries (random nodes at random times) of a random
    stream of ``8 * num_nodes`` events among ``num_nodes`` nodes (the last tenth without any,
    so some queries meet no earlier event), sampled as training samples; and what they were
    drawn from: the hops, the queries' nodes and the event features (``[E, F]``)."""
    rng = np.random.default_rng(seed)
    src, dst, t, feat = _random_events(rng, num_nodes, serving.event_dim)
    graph = TemporalGraph.from_events(src, dst, t, feat, num_nodes=num_nodes)
    nodes = rng.integers(0, num_nodes, size=num_nodes)
    times = rng.uniform(t[0], t[-1] + 1.0, size=num_nodes)
    hops = TemporalNeighborSampler(graph, list(serving.fanouts), serving.mode).sample_hops(
        nodes, times, seed
    )
    inputs = temporal_inputs(hops, times, feat if serving.event_dim else None)
    return inputs, hops, nodes, feat


def _memory_example(serving: MemoryServingModel, num_nodes: int, seed: int) -> tuple:
    """One call of ``serving`` that both applies messages (to every other row) and embeds
    queries (the first half of the rows; TGN: over 3 events each), random memory and times."""
    gen = torch.Generator().manual_seed(seed)
    b, q = num_nodes, num_nodes // 2
    memory = ServedMemory(b, serving.memory_dim, serving.event_dim, serving.kind)
    memory.memory_NM = torch.randn(b, serving.memory_dim, generator=gen)
    memory.last_N = 1.7e9 + 1e3 * torch.rand(b, generator=gen, dtype=torch.float64)
    time = float(memory.last_N.max()) + 10.0
    recent = None
    if serving.kind == "tgn":
        seed_E = torch.arange(q).repeat_interleave(3)
        nbr_E = torch.randint(0, b, (seed_E.shape[0],), generator=gen)
        event_time_E = time - 1e3 * torch.rand(seed_E.shape[0], generator=gen, dtype=torch.float64)
        attr_EF = torch.randn(seed_E.shape[0], serving.event_dim, generator=gen)
        recent = (torch.stack([nbr_E, seed_E]), event_time_E, attr_EF)
    message = (
        torch.arange(b) % 2 == 1,
        torch.randn(b, serving.memory_dim, generator=gen),
        torch.full((b,), time - 5.0, dtype=torch.float64),
        torch.randn(b, serving.event_dim, generator=gen),
    )
    query_time = torch.full((q,), time, dtype=torch.float64)
    return memory.call_inputs(torch.arange(b), message, torch.arange(q), query_time, recent)


def check_memory_stream(
    run: Callable[..., Any], serving: MemoryServingModel, num_nodes: int, seed: int = 1
) -> tuple[float, float, str]:
    """Drive a file of ``serving`` and the trained model over a random stream of ``8 *
    num_nodes`` events in 12 batches (:func:`memory_stream_drift`): ``(largest difference of the
    queries' outputs and of the memory, largest output, what was run)``."""
    src, dst, t, feat = _random_events(np.random.default_rng(seed), num_nodes, serving.event_dim)
    count = src.size
    drift = memory_stream_drift(run, serving, num_nodes, src, dst, t, feat, max(1, count // 12))
    what = (
        f"a random stream of {count:,} events among {num_nodes:,} nodes, "
        f"{len(drift.output_diff)} batches embedded then applied"
    )
    return drift.largest, drift.scale, what


@dataclasses.dataclass(frozen=True)
class StreamDrift:
    """How far a memory model's file, driven as :class:`ServedMemory` does, strays from the trained
    model over a stream, batch by batch.

    Attributes:
        output_diff: per batch, the largest ``|difference|`` of its queries' outputs.
        memory_diff: per batch, the largest ``|difference|`` of the whole memory once it is applied.
        scale: the largest output (at least 1).
        times_equal: whether the file's last-update times equal the model's after every batch.
        served: the serving stack's state at the stream's end (what the file left).
    """

    output_diff: list[float]
    memory_diff: list[float]
    scale: float
    times_equal: bool
    served: ServedMemory

    @property
    def largest(self) -> float:
        """The largest difference of any batch's outputs or memory (inf if the times differ)."""
        if not self.times_equal:
            return float("inf")
        return max(self.output_diff + self.memory_diff, default=0.0)


@torch.no_grad()
def memory_stream_drift(
    run: Callable[..., Any],
    serving: MemoryServingModel,
    num_nodes: int,
    src: np.ndarray,
    dst: np.ndarray,
    t: np.ndarray,
    feat: np.ndarray,
    batch: int,
) -> StreamDrift:
    """Drive a file of ``serving`` (``run``) over the stream ``src, dst, t, feat`` (``[E, F]``) in
    batches of ``batch`` events as :class:`ServedMemory` does, and the trained model as evaluation
    does (its :class:`~shardgnn.nn.temporal.NodeMemory` from empty, each batch's nodes embedded
    from the memory before it, then the batch applied), comparing them after every batch."""
    graph = TemporalGraph.from_events(src, dst, t, feat, num_nodes=num_nodes)
    sampler = TemporalNeighborSampler(graph, [serving.recent])
    trained = serving.model
    feat_EF = torch.from_numpy(feat)
    reference = NodeMemory(num_nodes, serving.memory_dim, trained.time_encoder, feat_EF)
    reference.gru.load_state_dict(trained.memory.gru.state_dict())
    reference.eval()
    served = ServedMemory(num_nodes, serving.memory_dim, serving.event_dim, serving.kind)
    src_E, dst_E, t_E = (torch.from_numpy(a) for a in (src, dst, t))
    output_diff, memory_diff, scale, times_equal = [], [], 1.0, True
    for lo in range(0, src.size, batch):
        hi = min(src.size, lo + batch)
        seeds = np.unique(np.r_[src[lo:hi], dst[lo:hi]])
        time = float(t[lo])
        if serving.kind == "tgn":
            n_id, edge_index, events = sampler.recent_subgraph(seeds, np.full(seeds.size, time))
            n_id_B = torch.from_numpy(n_id)
            memory_BM, last_B = reference.read(n_id_B)
            events_E = torch.from_numpy(events)
            z = trained.attend_recent(
                memory_BM[: seeds.size],
                memory_BM,
                last_B,
                *torch.from_numpy(edge_index),
                t_E[events_E],
                feat_EF[events_E],
            )
            recent = (torch.from_numpy(edge_index), t_E[events_E], feat_EF[events_E])
            inputs = served.embed_inputs(n_id_B, seeds.size, recent=recent)
        else:
            n_id_B = torch.from_numpy(seeds)
            memory_BM, last_B = reference.read(n_id_B)
            query_time = torch.full((seeds.size,), time, dtype=torch.float64)
            z = trained.embed_projected(memory_BM, last_B, query_time)
            inputs = served.embed_inputs(n_id_B, seeds.size, query_time)
        want = trained.classify(z) if serving.classify else z
        got, memory_out, last_out = run(*inputs)
        output_diff.append(_difference(got, want))
        scale = max(scale, float(want.abs().max()) if want.numel() else 0.0)
        served.store(memory_out, last_out)
        nodes = reference.observe(
            src_E[lo:hi], dst_E[lo:hi], t_E[lo:hi], torch.arange(lo, hi, dtype=torch.int64)
        )
        reference.apply_pending(nodes)
        _, memory_out, last_out = run(
            *served.apply_inputs(src_E[lo:hi], dst_E[lo:hi], t_E[lo:hi], feat_EF[lo:hi])
        )
        served.store(memory_out, last_out)
        memory_diff.append(_difference(served.memory_NM, reference.memory))
        times_equal = times_equal and torch.equal(served.last_N, reference.last_update)
    return StreamDrift(output_diff, memory_diff, scale, times_equal, served)


WALK_CHECK_BYTES = 256 << 20
"""the most the check's comparisons of walk positions take: ``Q * (2 * M * (L + 1))^2`` floats"""


def random_walks(serving: WalkServingModel, num_nodes: int, seed: int = 0) -> torch.Tensor:
    """``serving``'s input for ``num_nodes // 2`` random queries of a random graph (fewer where
    their comparisons would pass :data:`WALK_CHECK_BYTES`; 2 at least), their walks drawn by the
    walk sampler as training draws them over :func:`random_graph`'s edges, none into every tenth
    node: a walk that reaches one ends there, ``-1`` after it."""
    src, dst = random_graph(num_nodes, 1, seed)[1].numpy()
    keep = dst % 10 != 0
    indptr, indices, _ = csr_from_edges(src[keep], dst[keep], num_nodes)
    positions = 2 * serving.num_walks * (serving.walk_length + 1)
    queries = max(2, min(num_nodes // 2, WALK_CHECK_BYTES // (4 * positions**2)))
    pairs = np.random.default_rng(seed).integers(0, num_nodes, size=(2, queries))

    def draw(nodes: np.ndarray) -> np.ndarray:
        return node_walks(indptr, indices, nodes, serving.num_walks, serving.walk_length, seed)

    return query_walks(pairs[0], pairs[1], draw)


TYPED_OUTPUT_WEIGHT = {
    "rgcn": ("bias_O", 0),
    "hetero-sage": ("bias_RO", 1),
    "hgt": ("out.0.bias", 0),
}
"""the last layer's weight that gives a typed model's output width, and its axis"""


def _typed_serving(
    checkpoint: Path, config: TrainConfig, schema: dict
) -> tuple[Served, TrainConfig, int, int, str]:
    """A typed node model (``rgcn``, ``hetero-sage``, ``hgt``) as a serving module: featured
    types' widths from their projections' weights, featureless types' learnt rows (every rank's,
    put together) into the file, the output width from the weights."""
    weights, learnt = load_typed_rows(checkpoint)
    names, relations = list(schema["node_types"]), [tuple(r) for r in schema["message_relations"]]
    widths = [
        int(weights[f"typed_input.project.{t}.weight"].shape[1])
        if f"typed_input.project.{t}.weight" in weights
        else 0
        for t in range(len(names))
    ]
    weight, axis = TYPED_OUTPUT_WEIGHT[config.model.model]
    out_dim = int(weights[f"encoder.convs.{config.model.num_layers - 1}.{weight}"].shape[axis])
    encoder = typed_encoder(config.model, relations, names, out_dim=out_dim)
    model = TypedNodeModel(
        TypedInput(schema["nodes_per_type"], widths, config.model.hidden), encoder
    )
    load_weights_into(model, weights, checkpoint, f"{len(names)} node types")
    model.eval()
    serving = TypedServingModel(model, names, learnt, relations[: len(relations) // 2]).eval()
    target = schema.get("target_type")
    outputs = f"{out_dim} outputs per node (the {target} nodes' are its predictions)"
    return serving, config, sum(widths), out_dim, outputs


def random_graph(num_nodes: int, in_dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x [N, F], edge_index [2, E])``: non-negative features (row normalisation divides by
    sums) with some all-zero rows, about 8 in-edges per node with a few self-loops and duplicate
    edges, and the last tenth of the nodes without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(num_nodes, in_dim, generator=gen)
    x[torch.rand(num_nodes, generator=gen) < 0.05] = 0
    with_edges = max(1, num_nodes - num_nodes // 10)
    num_edges = 8 * num_nodes
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, with_edges, (num_edges,), generator=gen)
    src[: num_edges // 50] = dst[: num_edges // 50]
    return x, torch.stack([src, dst])


def random_graph_set(
    num_nodes: int, in_dim: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x [N, F], edge_index [2, E], graph_ptr [B + 1])``: a batch of small graphs (1 to 16
    nodes, the first one a lone node without edges) as their disjoint union, about 3 in-edges per
    node drawn within each graph (self-loops and duplicates among them), and the graphs'
    offsets."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [1]
    while sum(sizes) < num_nodes:
        sizes.append(int(torch.randint(2, 17, (1,), generator=gen)))
    sizes[-1] -= sum(sizes) - num_nodes
    sizes = [s for s in sizes if s > 0]
    ptr = torch.tensor([0, *np.cumsum(sizes)], dtype=torch.int64)
    x = torch.rand(num_nodes, in_dim, generator=gen)
    edges = []
    for first, size in zip(ptr[1:-1].tolist(), sizes[1:]):
        count = 3 * size
        edges.append(torch.randint(0, size, (2, count), generator=gen) + first)
    return x, torch.cat(edges, dim=1), ptr


def random_typed_graph(serving: TypedServingModel, num_nodes: int, seed: int = 0) -> tuple:
    """``serving``'s inputs for a random typed graph: about ``num_nodes`` nodes shared among the
    featured types (non-negative rows), the featureless types' training nodes, and about 4 edges
    per node of each relation's destination type drawn between its two types (duplicates and,
    where the types agree, self-loops among them)."""
    gen = torch.Generator().manual_seed(seed)
    each = max(2, num_nodes // max(1, len(serving.featured)))
    sizes = serving.type_sizes(each)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    features = [torch.rand(sizes[t], serving.widths[t], generator=gen) for t in serving.featured]
    src, dst, rel = [], [], []
    for r, (s, d) in enumerate(serving.relation_types):
        count = 4 * sizes[d]
        src.append(torch.randint(0, sizes[s], (count,), generator=gen) + starts[s])
        dst.append(torch.randint(0, sizes[d], (count,), generator=gen) + starts[d])
        rel.append(torch.full((count,), r, dtype=torch.int64))
    return (*features, torch.stack([torch.cat(src), torch.cat(dst)]), torch.cat(rel))


def example_inputs(serving: Served, num_nodes: int, in_dim: int, seed: int = 0) -> tuple:
    """What ``serving`` takes for a random graph: ``(x, edge_index)`` of :func:`random_graph`,
    or of :func:`random_graph_set` for a graph set's model (graph-level: with ``graph_ptr``), and
    the edges' feature rows (normal draws) when it reads them."""
    if isinstance(serving, TypedServingModel):
        return random_typed_graph(serving, num_nodes, seed)
    if isinstance(serving, WalkServingModel):
        return (random_walks(serving, num_nodes, seed),)
    if isinstance(serving, TemporalServingModel):
        return random_stream(serving, num_nodes, seed)[0]
    if isinstance(serving, MemoryServingModel):
        return _memory_example(serving, num_nodes, seed)
    if isinstance(serving, KnowledgeGraphServingModel):  # num_nodes queries
        gen = torch.Generator().manual_seed(seed)
        entities, relations = serving.entities_ND.shape[0], serving.num_query_relations
        entity = torch.randint(0, entities, (num_nodes,), generator=gen)
        relation = torch.randint(0, relations, (num_nodes,), generator=gen)
        if serving.filters_known and len(serving.known_keys_K):  # half of them with known answers
            keys = serving.known_keys_K
            pick = keys[torch.randint(0, len(keys), (num_nodes // 2,), generator=gen)]
            entity[: len(pick)], relation[: len(pick)] = pick % entities, pick // entities
        return entity, relation
    if isinstance(serving, ServingModel):
        inputs: tuple = random_graph(num_nodes, in_dim, seed)
    else:
        x, edge_index, ptr = random_graph_set(num_nodes, in_dim, seed)
        inputs = (x, edge_index, ptr) if "graph_ptr" in serving.input_names else (x, edge_index)
    if not serving.edge_dim:
        return inputs
    gen = torch.Generator().manual_seed(seed + 1)
    num_edges = inputs[1].shape[1]
    return (*inputs, torch.randn(num_edges, serving.edge_dim, generator=gen))


@torch.no_grad()
def trained_outputs(serving: Served, *inputs: torch.Tensor) -> torch.Tensor:
    """The model's outputs for ``serving``'s inputs as training and ``shardgnn infer`` compute
    them: the features normalised in numpy, the layers on a CSR :class:`MessageGraph` (numba
    kernels on CPU), with the edges' feature rows in its CSR order."""
    if isinstance(serving, TypedServingModel):
        return _typed_outputs(serving, *inputs)
    if isinstance(serving, KnowledgeGraphServingModel):
        return _knowledge_graph_outputs(serving, *inputs)
    if isinstance(serving, WalkServingModel):  # the encodings as training computes them
        (walks_QSMW,) = inputs
        return serving.model.score(relative_positions(walks_QSMW, int(walks_QSMW.max()) + 1))
    if isinstance(serving, ServingModel):
        return _layerwise_outputs(serving, *inputs)
    if isinstance(serving, TemporalServingModel):
        raise TypeError("a temporal model's outputs come from its hops: temporal_outputs")
    return _graph_set_outputs(serving, *inputs)


@torch.no_grad()
def temporal_outputs(serving: TemporalServingModel, hops: list, nodes: np.ndarray, feat):
    """TGAT's outputs as training computes them: the sampler's hops as
    :class:`~shardgnn.nn.temporal.HopTensors`, the event features looked up by event id."""
    cpu = torch.device("cpu")
    z = serving.model.embed_hops(
        [HopTensors.of(hop, cpu) for hop in hops], torch.from_numpy(nodes), torch.from_numpy(feat)
    )
    return serving.model.classify(z) if serving.classify else z


def _knowledge_graph_outputs(serving: KnowledgeGraphServingModel, entity_Q, relation_Q):
    """The trained decoder's scores; known answers masked by training's filtered ranking's
    index (:class:`~shardgnn.train.linkmetrics.AnswerIndex`) over the file's known pairs, not
    by the file's lookup."""
    known_QN = None
    if serving.filters_known:
        n, r = serving.entities_ND.shape[0], serving.num_query_relations // 2
        index = AnswerIndex.of_sorted(
            serving.known_keys_K.numpy(), serving.known_answers_K.numpy(), n, r
        )
        relation = relation_Q.numpy()
        known_QN = torch.from_numpy(index.mask(entity_Q.numpy(), relation % r, relation // r))
    return serving.best(serving.scores(entity_Q, relation_Q, known_QN))


def _typed_outputs(serving: TypedServingModel, *inputs: torch.Tensor) -> torch.Tensor:
    """A typed model as training runs it over a whole graph: the message graph built in numpy
    (reverse edges added, edges grouped by relation), the input rows by type."""
    *features, edge_index, edge_type = inputs
    sizes = serving.type_sizes([x.shape[0] for x in features])
    node_type = np.repeat(np.arange(len(sizes)), sizes)
    r = len(serving.relation_types)
    src, dst, rel = with_reverse_edges(*edge_index.numpy(), edge_type.numpy(), r)
    graph = TypedMessageGraph.from_edges(src, dst, rel, len(node_type), 2 * r, node_type=node_type)
    return serving.model(graph, dict(zip(serving.featured, features)), serving.learnt())


def _graph_set_outputs(serving: GraphServingModel | EdgeServingModel, *inputs: torch.Tensor):
    """A graph set's model as :func:`~shardgnn.train.graphlevel.batch_tensors` feeds it: the
    union's CSR, each node's graph, the edge rows in CSR order; an edge-level model's rows are
    put back in ``edge_index`` order."""
    named = dict(zip(serving.input_names, inputs))
    x, (src, dst) = named["x"], named["edge_index"].numpy()
    indptr, indices, order = csr_with_order(src, dst, x.shape[0])
    graph = MessageGraph.from_csr(indptr, indices)
    attr = named.get("edge_attr")
    attr = None if attr is None else attr[torch.from_numpy(order)]
    if "graph_ptr" in named:
        ptr = named["graph_ptr"]
        graph_index = torch.repeat_interleave(torch.arange(len(ptr) - 1), torch.diff(ptr))
        return serving.model(graph, x, graph_index, len(ptr) - 1, attr)
    out_csr = serving.model(graph, x, torch.zeros(x.shape[0], dtype=torch.int64), 1, attr)
    out = torch.empty_like(out_csr)
    out[torch.from_numpy(order)] = out_csr
    return out


def _layerwise_outputs(
    serving: ServingModel,
    x: torch.Tensor,
    edge_index: torch.Tensor,
    edge_attr: torch.Tensor | None = None,
) -> torch.Tensor:
    src, dst = edge_index.numpy()
    rows = None if edge_attr is None else edge_attr.numpy()
    indptr, indices, rows = csr_from_edges(src, dst, x.shape[0], rows)
    graph = MessageGraph.from_csr(indptr, indices)
    graph.edge_attr_ED = None if rows is None else torch.from_numpy(rows)
    rows = torch.from_numpy(normalize_features(x.numpy(), serving.feature_norm))
    return serving.model([graph] * serving.num_layers, rows)


@contextlib.contextmanager
def _quiet() -> Any:
    """The exporters' progress prints, log lines and warnings (deprecations, tracer notes on
    the shape checks) stay off the console: the command prints its one line."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _index_add_by_scatter(self, dim, index, source, alpha=1):
    """``index_add`` as ``scatter_add`` with the index broadcast to the source's shape. ONNX
    Runtime (1.32, measured) runs ScatterND, what ``index_add`` becomes, on several threads with
    no care for repeated indices: rows with several in-edges lost additions at random (outputs
    off by ~0.02 from one run to the next); ScatterElements, what ``scatter_add`` becomes, adds
    them all."""
    shape = [1] * source.dim()
    shape[dim] = -1
    index = index.view(shape).expand_as(source)
    return self.scatter_add(dim, index, source if alpha == 1 else source * alpha)


def _write(fmt: str, serving: Served, example, path: Path, opset: int) -> None:
    # a batch of small graphs may be one graph of one node and no edge (a lone atom): sizes 0
    # and 1 must stay symbolic, which torch.export allows when it does not take them as special
    # (backed_size_oblivious), as it does for every size of a big graph's model
    small = not isinstance(serving, ServingModel)
    nodes = torch.export.Dim("nodes", min=1 if small else 2)
    edges = torch.export.Dim("edges", min=0 if small else 1)
    sizes = {
        "x": {0: nodes},
        "edge_index": {1: edges},
        "graph_ptr": {0: torch.export.Dim("graph_bounds", min=2)},
        "edge_attr": {0: edges},
    }
    names = list(serving.input_names)
    for name in names[: len(getattr(serving, "featured", ()))]:  # a typed model's feature tables
        sizes[name] = {0: torch.export.Dim(f"nodes_{name[2:]}", min=2)}
    sizes["edge_type"] = {0: edges}
    queries = torch.export.Dim("queries", min=2)
    sizes["entity"], sizes["relation"] = {0: queries}, {0: queries}
    sizes["walks"] = {0: queries}
    if isinstance(serving, TemporalServingModel):  # one query at a time too
        sizes["seed_time"] = {0: torch.export.Dim("queries", min=1)}
        for depth in range(serving.layers):
            events = torch.export.Dim(f"events_{depth}", min=0)
            for name in ("dst_index", "nbr_time", "event_attr"):
                sizes[f"{name}_{depth}"] = {0: events}
    if isinstance(serving, MemoryServingModel):  # an apply call has no query, no event
        rows = torch.export.Dim("rows", min=1)
        for name in ("memory", "last_update", "has_message", "message_memory", "message_time"):
            sizes[name] = {0: rows}
        sizes["message_attr"] = {0: rows}
        queries = torch.export.Dim("queries", min=0)
        sizes["query_index"] = sizes["query_time"] = {0: queries}
        events = torch.export.Dim("events", min=0)
        for name in ("nbr_index", "seed_index", "event_time", "event_attr"):
            sizes[name] = {0: events}
    dynamic = tuple(sizes[name] for name in names)
    if isinstance(serving, TypedServingModel):
        dynamic = (dynamic,)  # forward(*inputs): one spec per input, as one argument
    elif isinstance(serving, TemporalServingModel):  # forward(seed_time, *hops)
        dynamic = (dynamic[0], dynamic[1:])
    elif isinstance(serving, MemoryServingModel):  # five named inputs, then the rest
        dynamic = (*dynamic[:5], dynamic[5:])
    oblivious = fx_config.patch(backed_size_oblivious=small)
    with _quiet(), oblivious:
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(serving, example, check_trace=False), str(path))
            return
        program = torch.export.export(serving, example, dynamic_shapes=dynamic)
        if fmt == "pt2":
            with open(path, "wb") as file:  # as a file: torch names by suffix only .pt2 files
                torch.export.save(program, file)
            return
        table = torch.export.default_decompositions()
        table[torch.ops.aten.index_add.default] = _index_add_by_scatter
        onnx_program = torch.onnx.export(
            program.run_decompositions(table),
            example,
            dynamo=True,
            input_names=names,
            output_names=list(getattr(serving, "output_names", ("out",))),
            opset_version=opset,
            verbose=False,
        )
        assert onnx_program is not None
        onnx_program.save(str(path), external_data=False)


def _check_opset(path: Path, opset: int) -> None:
    """Refuse an ONNX file of another opset than ``--opset``: the exporter falls back to its own
    (18) when it cannot convert to the one asked for, and says so only in a log."""
    import onnx

    written = {entry.domain: entry.version for entry in onnx.load(str(path)).opset_import}
    if written.get("", opset) != opset:
        raise ConfigError(
            f"--opset {opset}: the ONNX exporter wrote opset {written['']} instead (the installed "
            f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}); give "
            "an opset from 18 to that"
        )


def load_exported(
    path: str | os.PathLike, names: tuple[str, ...], fmt: str | None = None
) -> tuple[Callable[..., Any], str]:
    """A function running an exported file on tensors (``names``: its inputs, in order; an ONNX
    file's are fed by name) and returning tensors, and what runs it (``"onnxruntime is not
    installed"`` and no function where it is not). ``fmt``: ``"onnx"``, ``"pt2"`` or
    ``"torchscript"``; by default the one ``path``'s suffix names."""
    fmt = fmt or SUFFIX_FORMATS[Path(path).suffix.lower()]
    if fmt == "torchscript":
        loaded = torch.jit.load(str(path))
        return loaded, "torch.jit.load"
    if fmt == "pt2":
        with open(path, "rb") as file:
            module = torch.export.load(file).module()
        return module, "torch.export.load"
    try:
        import onnxruntime
    except ImportError:
        return None, "onnxruntime is not installed"  # type: ignore[return-value]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(*inputs: torch.Tensor):
        feed = {name: t.numpy() for name, t in zip(names, inputs)}
        outs = [torch.from_numpy(out) for out in session.run(None, feed)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return run, "onnxruntime"


def _check(fmt: str, path: Path, serving: Served, in_dim: int, nodes: int) -> str:
    """Run the written file on a random graph and compare it with the trained model."""
    if nodes == 0:
        return "not checked (--check-nodes 0)"
    with _quiet():  # torch.jit.load's deprecation warning
        run, runner = load_exported(path, serving.input_names, fmt)
    if run is None:
        return f"not run: {runner} (pip install 'shardgnn[export]' to check the file)"
    if isinstance(serving, MemoryServingModel):
        diff, scale, stream = check_memory_stream(run, serving, nodes)
        if not diff <= TOLERANCE * scale:
            raise ExportCheckError(
                f"the {FORMAT_NAMES[fmt]} file, run by {runner} on {stream}, differs from the "
                f"trained model by {diff:.3g} (allowed {TOLERANCE * scale:.3g}); nothing was "
                "written"
            )
        return (
            f"checked with {runner} on {stream}: max |difference| {diff:.1e} from the trained "
            "model (outputs and memory)"
        )
    if isinstance(serving, TemporalServingModel):
        inputs, *drawn = random_stream(serving, nodes, seed=1)
        want = temporal_outputs(serving, *drawn)
    else:
        inputs = example_inputs(serving, nodes, in_dim, seed=1)
        want = trained_outputs(serving, *inputs)
    with torch.no_grad(), _quiet():
        got = run(*inputs)
    if isinstance(serving, KnowledgeGraphServingModel) and serving.top_k is not None:
        # the best scores, and the entities named have those scores (ties may name others)
        (where, got), want = got, want[1]
        with torch.no_grad():
            named = serving.scores(*inputs).gather(1, where)
        diff = _difference(named, got)
    else:
        diff = 0.0
    diff = max(diff, _difference(got, want))
    finite = want[torch.isfinite(want)]  # known answers' -inf do not scale the tolerance
    scale = max(1.0, float(finite.abs().max()) if finite.numel() else 0.0)
    graph = f"a random graph of {nodes:,} nodes"
    if isinstance(serving, TypedServingModel):
        graph = f"a random typed graph of {want.shape[0]:,} nodes"
    elif isinstance(serving, TemporalServingModel):
        graph = f"{nodes:,} queries of a random event stream"

    elif not isinstance(serving, (ServingModel, WalkServingModel)):  # a batch of small graphs
        graph = f"{nodes:,} nodes of random small graphs"
    if not diff <= TOLERANCE * scale:
        raise ExportCheckError(
            f"the {FORMAT_NAMES[fmt]} file, run by {runner} on {graph}, differs from the trained "
            f"model by {diff:.3g} (allowed {TOLERANCE * scale:.3g}); nothing was written"
        )
    if isinstance(serving, KnowledgeGraphServingModel):
        graph = f"{nodes:,} random queries"
    elif isinstance(serving, WalkServingModel):
        graph = f"the walks of {inputs[0].shape[0]:,} random queries on " + graph
    elif isinstance(serving, TemporalServingModel):
        events = sum(int(t.shape[0]) for t in inputs[1 :: len(inputs[1:]) // serving.layers])
        graph = (
            f"{nodes:,} random queries of a random stream of {8 * nodes:,} events "
            f"({events:,} sampled)"
        )
    else:
        graph += f" and {inputs[1].shape[1]:,} edges"
    return f"checked with {runner} on {graph}: max |difference| {diff:.1e} from the trained model"


def _difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest ``|a - b|``, equal entries (infinite scores of known answers too) 0."""
    return float(torch.where(a == b, 0.0, (a - b).abs()).max()) if a.numel() else 0.0


INDEX_INPUTS = ("edge_index", "graph_ptr", "edge_type", "entity", "relation", "walks")
MEMORY_INDEX_INPUTS = ("query_index", "nbr_index", "seed_index")
"""the inputs that are int64 (the others are float32, but a temporal model's times and indices)"""


def signature(serving: Served, in_dim: int, out_dim: int, outputs: str) -> dict[str, Any]:
    """What a serving stack needs to call the file: every input's name, dtype and shape (sizes
    named by letter are free), the output's, and what a typed or knowledge-graph model's
    indices mean (node types in numbering order, relations by index)."""
    shapes: dict[str, list] = {
        "x": ["N", in_dim],
        "edge_index": [2, "E"],
        "graph_ptr": ["B + 1"],
        "edge_attr": ["E", serving.edge_dim],
        "edge_type": ["E"],
        "entity": ["Q"],
        "relation": ["Q"],
        "walks": ["Q", 2, getattr(serving, "num_walks", 0), getattr(serving, "walk_length", 0) + 1],
    }
    record: dict[str, Any] = {}
    out_shape: list = ["N", out_dim]
    if isinstance(serving, TypedServingModel):
        sizes = serving.type_sizes(-1)
        record["node_types"] = [
            {
                "name": name,
                "features": serving.widths[t],
                "nodes": sizes[t] if sizes[t] >= 0 else "any",
            }
            for t, name in enumerate(serving.type_names)
        ]
        record["relations"] = [list(rel) for rel in serving.relations]
        for t, name in zip(serving.featured, serving.input_names):
            shapes[name] = [f"N_{serving.type_names[t]}", serving.widths[t]]
    elif isinstance(serving, KnowledgeGraphServingModel):
        out_shape = ["Q", out_dim]
        names = serving.relation_names
        record["relations"] = names + [f"{name} (reciprocal: asks for heads)" for name in names]
        record["known_answers"] = "score -inf" if serving.filters_known else "scored"
    elif isinstance(serving, WalkServingModel):
        out_shape = ["Q"]
        record["walks"] = {
            "per_endpoint": serving.num_walks,
            "steps": serving.walk_length,
            "layout": "walks[q, 0]: the query's first node's walks, walks[q, 1]: its second's; "
            "each starts at its endpoint; -1 past a node without neighbours",
            "drawn_by": "shardgnn.sampling.walks.node_walks (uniform in-neighbour steps)",
        }
    elif isinstance(serving, TemporalServingModel):
        out_shape = ["Q", out_dim]
        shapes["seed_time"] = ["Q"]
        for depth in range(serving.layers):
            shapes[f"dst_index_{depth}"] = shapes[f"nbr_time_{depth}"] = [f"E_{depth}"]
            shapes[f"event_attr_{depth}"] = [f"E_{depth}", serving.event_dim]
        record["hops"] = {
            "fanouts": list(serving.fanouts),
            "mode": serving.mode,
            "layout": "hop 0 samples up to fanouts[0] events before each query's time among its "
            "node's events; hop d + 1 up to fanouts[d + 1] before each event of hop d, among the "
            "events of its other endpoint; dst_index_d: the row of depth d (a query, or an event "
            "of hop d - 1) each event of hop d belongs to; nbr_time_d: its time",
            "drawn_by": "shardgnn.sampling.temporal.TemporalNeighborSampler.sample_hops, "
            "then shardgnn.nn.serving.temporal_inputs",
        }
    elif isinstance(serving, MemoryServingModel):
        out_shape = ["Q", out_dim]
        m, f = serving.memory_dim, serving.event_dim
        shapes.update(
            memory=["B", m],
            last_update=["B"],
            has_message=["B"],
            message_memory=["B", m],
            message_time=["B"],
            message_attr=["B", f],
            query_index=["Q"],
            query_time=["Q"],
            nbr_index=["E"],
            seed_index=["E"],
            event_time=["E"],
            event_attr=["E", f],
        )
        record["memory"] = {
            "width": m,
            "start": "zeros (memory and last_update) for every node of a new stream; to go "
            "on from events already seen (the training stream), apply them first, in batches "
            "as served (ServedMemory.replay)",
            "apply": "after each batch of events is scored: B = the batch's endpoints, each with "
            "its latest event of the batch as its message (message_memory: the other "
            "endpoint's stored memory), no query; store memory_out and last_update_out",
            "embed": "B = the queries first"
            + (
                f", then the other endpoints of their (up to {serving.recent}) latest events "
                "before the batch's time (nbr_index: their rows, seed_index: the query's)"
                if serving.kind == "tgn"
                else ""
            )
            + "; has_message false",
            "kept_by": "shardgnn.nn.serving.ServedMemory",
        }
    elif isinstance(serving, GraphServingModel):
        out_shape = ["B", out_dim]
    elif isinstance(serving, EdgeServingModel):
        out_shape = ["E", out_dim]

    def dtype(name: str) -> str:
        if name in INDEX_INPUTS or name.startswith("dst_index_") or name in MEMORY_INDEX_INPUTS:
            return "int64"
        if name == "has_message":
            return "bool"
        times = ("seed_time", "last_update", "message_time", "query_time", "event_time")
        return "float64" if name in times or name.startswith("nbr_time_") else "float32"

    inputs = [
        {"name": name, "dtype": dtype(name), "shape": shapes[name]} for name in serving.input_names
    ]
    produced = [{"name": "out", "dtype": "float32", "shape": out_shape, "meaning": outputs}]
    if isinstance(serving, MemoryServingModel):
        produced += [
            {
                "name": "memory_out",
                "dtype": "float32",
                "shape": ["B", serving.memory_dim],
                "meaning": "the rows' memory after their messages (unchanged without one)",
            },
            {
                "name": "last_update_out",
                "dtype": "float64",
                "shape": ["B"],
                "meaning": "the rows' last update after their messages",
            },
        ]
    if isinstance(serving, KnowledgeGraphServingModel) and serving.top_k is not None:
        produced = [
            {
                "name": "entities",
                "dtype": "int64",
                "shape": out_shape,
                "meaning": "entity ids, best first",
            },
            {
                "name": "scores",
                "dtype": "float32",
                "shape": out_shape,
                "meaning": "the entities' scores",
            },
        ]
    return {"inputs": inputs, "outputs": produced, **record}


def export_model(config: ExportConfig) -> Exported:
    """Write the checkpoint's model to ``config.out`` (atomically, after the check).

    Raises:
        ConfigError: a checkpoint, model or setting the export does not take (one line).
        ExportCheckError: the written file computes something else (it is removed).
    """
    start = time.perf_counter()
    fmt = export_format(config)
    checkpoint = resolve_checkpoint(config.checkpoint)
    serving, train, in_dim, out_dim, outputs = serving_model(
        checkpoint, config.top_k, config.filter_known
    )
    out = Path(config.out).expanduser()
    with atomic_path(out) as tmp:
        try:
            _write(fmt, serving, example_inputs(serving, 64, in_dim), tmp, config.opset)
        except ImportError as exc:
            raise ConfigError(
                f"--out {config.out}: {FORMAT_NAMES[fmt]} export needs {exc.name or exc}; "
                "pip install 'shardgnn[export]'"
            ) from None
        except Exception as exc:  # the model's own code (a user model) may not trace
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ExportError(
                f"--out {config.out}: {FORMAT_NAMES[fmt]} cannot capture the {train.model.model} "
                f"model ({type(exc).__name__}: {first}); try another format (.pt2, .pt, .onnx)"
            ) from None
        if fmt == "onnx":
            _check_opset(tmp, config.opset)
        check = _check(fmt, tmp, serving, in_dim, config.check_nodes)
        size = tmp.stat().st_size
    sidecar = out.with_name(out.name + ".json")
    save_json(sidecar, signature(serving, in_dim, out_dim, outputs))
    task, inputs = "link prediction", ""
    if isinstance(serving, KnowledgeGraphServingModel):
        task, inputs = "knowledge-graph completion", "(entity, relation) queries"
    elif isinstance(serving, WalkServingModel):
        inputs = f"{serving.num_walks} walks of {serving.walk_length} steps from each end of (u, v)"
    elif isinstance(serving, TemporalServingModel):
        fanouts = ", ".join(map(str, serving.fanouts))
        inputs = f"query times and {serving.layers} hop{'s' * (serving.layers != 1)} of "
        inputs += f"{fanouts} earlier events"
        inputs += f" with {serving.event_dim} features" if serving.event_dim else ""
    elif isinstance(serving, MemoryServingModel):
        inputs = f"the {serving.memory_dim}-wide memory of the nodes read, their messages and "
        inputs += "the queries"
        inputs += f" with their {serving.recent} latest events" if serving.kind == "tgn" else ""
    elif train.task != "link":
        task = f"{train.task} {'classification' if 'class logits' in outputs else 'prediction'}"
    return Exported(
        path=out,
        format=fmt,
        model=train.model.model,
        task=task,
        in_dim=in_dim,
        out_dim=out_dim,
        outputs=outputs,
        bytes=size,
        seconds=time.perf_counter() - start,
        check=check,
        inputs=inputs,
        signature=sidecar,
    )
