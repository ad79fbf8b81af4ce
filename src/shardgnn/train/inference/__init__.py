"""``shardgnn infer``: layer-wise distributed inference from a checkpoint.

:mod:`.run` holds the command's flow and what every graph kind shares (finding and checking the
checkpoint, reading pairs, writing outputs by original id, the worker process);
:mod:`.kinds` the function that runs one rank over a partition of each graph kind, which the
graph-kind registry names (:data:`shardgnn.train.kinds.KINDS`, its ``infer`` field)."""

from shardgnn.train.inference.kinds import infer_homogeneous, infer_typed, score_pairs_file
from shardgnn.train.inference.run import (
    InferRun,
    check_feature_storage,
    check_inference_pair,
    check_time,
    infer_worker,
    load_typed_rows,
    read_pairs,
    resolve_checkpoint,
    run_inference,
)

__all__ = [
    "InferRun",
    "check_feature_storage",
    "check_inference_pair",
    "check_time",
    "infer_homogeneous",
    "infer_typed",
    "infer_worker",
    "load_typed_rows",
    "read_pairs",
    "resolve_checkpoint",
    "run_inference",
    "score_pairs_file",
]
