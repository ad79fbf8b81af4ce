"""The groups of settings the recipes read (:mod:`shardgnn.train.recipes`), and the defaults of
the knowledge-graph recipe: which flags a kind of training honours is data, kept here."""

from __future__ import annotations


def settings(*names: str) -> frozenset[str]:
    return frozenset(names)


COMMON_SETTINGS = settings(
    "data_dir", "task", "mode", "model.model", "optim.epochs", "optim.lr", "optim.weight_decay",
    "optim.patience", "seed", "device", "threads", "heap", "checkpoint.dir", "checkpoint.every",
    "checkpoint.keep", "checkpoint.resume", "results", "tensorboard", "progress", "run.workers",
    "run.partitions",
)  # fmt: skip
"""Settings every kind of training reads (the loop, checkpoints, the launcher's choice)."""
MODEL = settings("model.hidden", "model.num_layers", "model.dropout", "model.input_dropout")
SAMPLED = settings(
    "sampler.fanouts", "sampler.replace", "sampler.num_threads", "batch_size",
    "eval_batch_size", "eval_fanouts",
)  # fmt: skip
LINK = settings(
    "link.val", "link.test", "link.split_seed", "link.eval_negatives", "link.negative_sampler",
    "link.negatives", "link.predictor", "link.loss", "link.margin", "link.hits_at",
    "link.out_dim",
)  # fmt: skip
ROWS = settings(
    "embedding.dim", "embedding.optimizer", "embedding.lr", "embedding.storage",
    "embedding.directory",
)  # fmt: skip
WORKERS = settings("run.timeout", "run.log_dir", "run.stop_grace", "run.backend", "run.sum_order")
DIST_SAMPLED = WORKERS | settings(
    "embedding.staleness", "run.overlap", "run.host_sharing", "fetch_bits", "error_feedback",
    "cache.policy", "cache.size", "cache.lookahead", "feature_storage",
)  # fmt: skip
CLUSTER_HISTORICAL = settings(
    "batching", "clusters_per_batch", "cluster_halo", "historical", "historical_mode",
    "historical_scope", "historical_push_every",
)  # fmt: skip
DIST_FULL = WORKERS | settings(
    "full.spmm", "full.replication", "full.grid_rows", "full.grid_layers", "full.bits",
    "full.staleness", "full.dependencies", "plan_rates", "error_feedback",
)  # fmt: skip
PRECISION = settings("precision")
"""bf16 autocast (shardgnn.precision): the homogeneous recipes' steps and evaluations enter it"""
GPU = settings(
    "gpu.sampler_device", "gpu.feature_memory", "gpu.hot_policy", "gpu.overlap", "gpu.cuda_graphs"
)
"""the GPU pipeline of single-process node classification (shardgnn.loader.device)"""
LAYER_READS = {
    "gat": settings("model.heads", "model.attention_dropout"),
    "gatv2": settings("model.heads", "model.attention_dropout"),
    "appnp": settings("model.alpha"),
}
"""the settings only some of the homogeneous models read"""
LADIES_MODELS = ("sage", "gcn", "gin", "appnp", "sgc")
"""the models whose aggregation takes LADIES' edge weights (MessageGraph's norms; the attention
layers weigh edges themselves)"""
SAMPLED_LAYER_READS = {
    **{m: LAYER_READS.get(m, frozenset()) | {"sampler.ladies"} for m in LADIES_MODELS},
    **{m: read for m, read in LAYER_READS.items() if m not in LADIES_MODELS},
}
"""LAYER_READS of the sampled recipes: LADIES (--ladies) for the models that take its weights"""
TYPED_SAMPLED = settings(
    "sampler.fanouts", "sampler.relation_fanouts", "sampler.replace", "batch_size"
)
RGCN = {"rgcn": settings("model.num_bases"), "hgt": settings("model.heads")}
TEMPORAL = settings(
    "batch_size", "link.val", "link.test", "link.split_seed", "temporal.time_dim",
    "temporal.chunks",
)  # fmt: skip
TGN = settings(
    "model.dropout", "model.heads", "link.out_dim", "temporal.memory_dim", "temporal.neighbors"
)
TGAT = settings(
    "model.dropout", "model.heads", "link.out_dim", "temporal.neighbors", "temporal.sampling"
)
JODIE = settings("temporal.memory_dim")

GRAPH = MODEL - {"model.input_dropout"} | settings("model.readout", "batch_size", "eval_batch_size")
"""graph-level training (a graph set)"""
EDGE = GRAPH - {"model.readout"}
"""edge classification over a graph set (the edge head reads no readout)"""
EDGE_DEFAULTS = {
    # the track events are large graphs (1,600 hits, 5,000 candidate edges each): 4 events a
    # step and lr 0.003 reach F1 0.89 in 20 epochs where 32 and 0.001 reach 0.52 (3 steps an
    # epoch); at 60 epochs one seed's precision stopped at 0.884, at 100 every run is >= 0.9
    # (BENCHMARKS section 22)
    "model.hidden": 64,
    "model.dropout": 0.0,
    "optim.lr": 0.003,
    "optim.epochs": 100,
    "batch_size": 4,
}
GRAPH_DEFAULTS = {
    # GIN's graph-classification setting (Xu et al. 2019: hidden 64, batch 32, lr 0.01 in
    # their search) as "Benchmarking GNNs" runs it on CSL; BENCHMARKS section 22
    "model.hidden": 64,
    "model.dropout": 0.0,
    "optim.lr": 0.001,
    "optim.epochs": 100,
}

SUREL_DEFAULTS = {
    # BENCHMARKS section 12b: SUREL on Cora and CiteSeer beside GAE
    "model.hidden": 64,
    "model.dropout": 0.1,
    "optim.lr": 0.01,
    "batch_size": 128,
    "optim.epochs": 20,
}
KG_DEFAULTS = {
    "mode": "full",
    # the README's recipe (BENCHMARKS section 11): kinships filtered MRR 0.709 against 0.495 with
    # the node-classification defaults
    "model.num_layers": 2,
    "model.hidden": 128,
    "link.out_dim": 128,
    "optim.lr": 0.01,
    "batch_size": 256,
    "model.dropout": 0.2,
    "link.loss": "softmax",
}
