"""What every kind of training resolves the same way: the device, the evaluation sampler, the
dataset's record in results and checkpoints, the learnable rows and full-graph input."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import numpy as np
import torch

from shardgnn.distributed.context import choose_placement, local_cuda_devices
from shardgnn.errors import ConfigError
from shardgnn.graph.csr import Graph
from shardgnn.graph.features import stored_sparse
from shardgnn.graph.identity import fingerprint
from shardgnn.nn.config import EDGE_FEATURE_MODELS, SPARSE_INPUT_MODELS, is_user_model
from shardgnn.nn.functional import to_sparse_if_sparse
from shardgnn.nn.targets import NodeTarget
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.seeding import mix_seed
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.embedding import EmbeddingTable, check_table_fits
from shardgnn.store.feature import FeatureStore, LocalFeatureStore, csr_rows
from shardgnn.timing import StageTimer
from shardgnn.train.config import OptimConfig, TrainConfig


def node_prediction_refusal(dataset: str, problems: list[str], fix: str) -> ConfigError:
    """The one line refusing ``dataset`` (how messages name it) for node prediction: every
    problem found (``its test split is empty``...), then ``fix``; one process, typed graphs and
    workers' partitions say it alike."""
    return ConfigError(
        f"{dataset} cannot be used for node prediction: {'; '.join(problems)}. {fix}"
    )


def split_problems(graph, target) -> list[str]:
    """What keeps each split of ``graph`` (a ``Graph`` or ``TypedGraph``: ``train_idx``... and
    ``y``) from node prediction: empty, or (with ``target``, the labels' learning target) holding
    nodes whose labels it cannot learn from; for :func:`node_prediction_refusal`."""
    problems = []
    for key in ("train_idx", "val_idx", "test_idx"):
        idx = getattr(graph, key)
        if idx is None or len(idx) == 0:
            problems.append(f"its {key.replace('_idx', '')} split is empty")
        elif target is not None and (problem := target.check_labels(graph.y, idx)) is not None:
            problems.append(f"its {key.replace('_idx', '')} split {problem}")
    return problems


def model_edge_dim(config: TrainConfig, edge_dim: int, source: str) -> int:
    """The width of the edge rows ``config``'s model reads on a graph (``source``, in words)
    whose edges carry ``edge_dim`` features, 0 for none (then no edge row is fetched): a model
    that needs them (gine) reads them, and is refused without any; a model of the user's own
    reads them when there are any (each graph it receives holds them, ``edge_attr_ED``); the
    built-in others never."""
    model = config.model.model
    if model in EDGE_FEATURE_MODELS and not edge_dim:
        raise ConfigError(
            f"--model {model} reads edge features, and {source} has none; use a graph with edge "
            "features (synthetic:edge_features=16, a PyG graph with edge_attr) or another model"
        )
    return edge_dim if model in EDGE_FEATURE_MODELS or is_user_model(model) else 0


def resolve_device(name: str) -> torch.device:
    """The device of one-process training: the placement of a job's only rank
    (:func:`~shardgnn.distributed.context.choose_placement`): ``auto`` is the first GPU when
    there is one, else the CPU; ``cuda`` the first GPU; a GPU that is absent is refused."""
    device, _ = choose_placement(
        name, "gloo", local_rank=0, local_world_size=1, cuda_devices=local_cuda_devices()
    )
    return torch.device(device)


def adam(parameters: Iterable[torch.nn.Parameter], optim: OptimConfig) -> torch.optim.Adam:
    """The optimiser of every kind of training: Adam with ``optim``'s rate and weight decay,
    fused (one kernel, or one CPU loop, over all weights per step instead of several per weight:
    measured, the per-weight loop was 10 % of a temporal step on CPU and 0.7 ms of a 9 ms GPU
    batch, BENCHMARKS section 18)."""
    return torch.optim.Adam(parameters, lr=optim.lr, weight_decay=optim.weight_decay, fused=True)


def eval_sampler_config(config: TrainConfig) -> SamplerConfig:
    """The sampler settings of evaluation: the training sampler with ``--eval-fanouts``, node-wise
    (a LADIES run evaluates on full neighbourhoods unless told otherwise, as the paper does)."""
    return dataclasses.replace(
        config.sampler, fanouts=config.eval_fanouts or config.sampler.fanouts, ladies=None
    )


def dataset_record(graph: Graph, spec: str | None) -> dict[str, Any]:
    """What results and checkpoints record of a dataset: spec, name, fingerprint, split sizes."""

    def size(idx) -> int:
        return int(len(idx)) if idx is not None else 0

    return {
        "spec": spec,
        "name": graph.name,
        "fingerprint": fingerprint(graph),
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        **({"edge_features": graph.edge_dim} if graph.edge_dim else {}),
        "num_classes": graph.num_classes,
        **labels_record(graph.label_kind, None if graph.y is None else np.shape(graph.y)),
        "train": size(graph.train_idx),
        "val": size(graph.val_idx),
        "test": size(graph.test_idx),
    }


def labels_record(label_kind: str, y_shape: tuple[int, ...] | None) -> dict[str, Any]:
    """What results and checkpoints record of labels other than classes (kind and columns;
    nothing for classes, recorded as before)."""
    if label_kind == "class" or y_shape is None:
        return {}
    return {"label_kind": label_kind, "label_columns": int(y_shape[1])}


def label_results(target: NodeTarget, details: dict[str, dict]) -> dict[str, Any]:
    """What results add for labels other than classes: each split's details at the final
    evaluation (per-label ROC-AUC; per-target R² and the RMSE)."""
    if target.label_kind == "class" and target.metric == "acc":
        return {}
    return {
        "label_kind": target.label_kind,
        "metric_details": {split: details.get(split) for split in ("val", "test")},
    }


# The random stream of the learnable rows' initial values: mix_seed(seed, EMBEDDING_STREAM).
EMBEDDING_STREAM = 0x454D4244
# The fixed evaluation negatives of temporal link prediction: mix_seed(split_seed, EVAL_STREAM).
EVAL_STREAM = 0x45564E47


def typed_rows_config(config: TrainConfig, num_rows: int) -> EmbeddingConfig:
    """The learnt input rows of a featureless node type (``num_rows`` of them held here):
    ``--hidden`` wide, stepped by sparse Adam at ``--lr``; refused when they and their optimiser
    state would not fit in memory. Their initial values come from
    ``mix_seed(seed, EMBEDDING_STREAM, t)`` keyed by typed id (type index ``t``): one process and
    every worker count start from the same rows."""
    rows_config = dataclasses.replace(
        config.embedding, dim=config.model.hidden, optimizer="adam", lr=config.optim.lr
    )
    check_table_fits(num_rows, rows_config)
    return rows_config


def make_embedding_table(config: TrainConfig, num_nodes: int) -> EmbeddingTable | None:
    """The learnable rows of ``--embedding-dim`` (None without it), refused when they and their
    optimiser state would not fit in memory."""
    if not config.embedding.enabled:
        return None
    check_table_fits(num_nodes, config.embedding)
    return EmbeddingTable(num_nodes, config.embedding, seed=mix_seed(config.seed, EMBEDDING_STREAM))


def sparse_batches_apply(config: TrainConfig, device: torch.device) -> bool:
    """Whether mini-batches of mostly-zero features (node classification's and link
    prediction's) are gathered as sparse tensors (one process: :func:`batch_features`; workers:
    their stores), which the first layer multiplies by their non-zeros alone: a model of
    :data:`~shardgnn.nn.config.SPARSE_INPUT_MODELS` without learnable rows beside the features,
    on a CPU (a GPU's batches are gathered dense, as before). A feature cache serves its rows into
    the sparse batch (a static one holds them as CSR)."""
    return (
        device.type == "cpu"
        and config.model.model in SPARSE_INPUT_MODELS
        and not config.embedding.enabled
    )


def batch_features(
    x: np.ndarray | None, config: TrainConfig, device: torch.device
) -> FeatureStore | None:
    """Mini-batch mode's feature rows in one process (None without features): rows at most
    :data:`~shardgnn.graph.features.SPARSE_MAX_DENSITY` non-zero (bag-of-words; the bound
    full-graph mode stores sparse by) held as CSR and each batch's gathered as a sparse tensor
    where :func:`sparse_batches_apply`, else the dense rows. ``x``: the normalised features."""
    if x is None:
        return None
    if (
        sparse_batches_apply(config, device)
        and x.ndim == 2
        and stored_sparse(int(np.count_nonzero(x)), x.size)
    ):
        return csr_rows(x, "none", sparse_batches=True)
    return LocalFeatureStore(x)


def full_features(x: np.ndarray | None, device: torch.device) -> torch.Tensor | None:
    """Full-graph mode's feature matrix on ``device`` (a private, writable copy; None without
    features). Bag-of-words features are often <1% dense: they stay sparse (same maths, far
    cheaper)."""
    if x is None:
        return None
    return to_sparse_if_sparse(torch.from_numpy(np.array(x, dtype=np.float32))).to(device)


def full_edge_rows(graph: Graph, device: torch.device) -> torch.Tensor:
    """Full-graph mode's edge rows ``[E, D]`` on ``device``: ``graph``'s edge features in its
    CSR order (what :class:`~shardgnn.nn.message_graph.MessageGraph.from_csr` numbers), fp32."""
    rows = np.ascontiguousarray(graph.edge_attr, dtype=np.float32)
    return torch.from_numpy(rows).to(device)


def full_input(
    features_NF: torch.Tensor | None, table: EmbeddingTable | None, requires_grad: bool = False
) -> torch.Tensor:
    """Every node's input row in full-graph mode: the features, the learnable rows, or both (rows
    last); with ``requires_grad`` and rows, a leaf whose gradient :func:`step_rows` hands on."""
    if table is None:
        assert features_NF is not None
        return features_NF
    rows = table.weight.detach().clone()
    if features_NF is not None:
        rows = torch.cat([features_NF.to_dense(), rows], dim=1)
    return rows.requires_grad_(requires_grad)


def step_rows(table: EmbeddingTable | None, x_NF: torch.Tensor, timer: StageTimer) -> None:
    """Full-graph mode: the rows' sparse step after backward (every row took part)."""
    if table is None:
        return
    with timer("embed"):
        table.apply_gradients(torch.arange(x_NF.shape[0]), x_NF.grad[:, -table.config.dim :])
