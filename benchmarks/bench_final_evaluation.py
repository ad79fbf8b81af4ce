"""The run's end: scoring val and test split by split (two passes over the whole graph, as before)
against both from one pass (``Steps.evaluate_splits``), in the same process on the same weights.

For each dataset and kind, one process: a 2-layer GraphSAGE (hidden 256) trained one epoch, then
``--repeats`` rounds alternating the two ways (median seconds); the metrics must be identical.

* ``full``: full-graph training (``--mode full``): its evaluation is one forward over every node;
* ``layerwise``: mini-batch training evaluated with full neighbourhoods (``--eval-fanouts -1,-1``),
  layer-wise over every node; mostly-zero rows (held as CSR) from their sparse matrix;
* ``layerwise-dense``: the same, from the dense rows (as before: the first layer's product over
  every entry).

    python benchmarks/bench_final_evaluation.py --datasets coauthor-physics coauthor-cs \
        --out benchmarks/out/final_evaluation.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from shardgnn.atomic import save_json
from shardgnn.nn.functional import is_sparse
from shardgnn.nn.models import ModelConfig
from shardgnn.sampling.neighbor import SamplerConfig
from shardgnn.train.config import OptimConfig, TrainConfig
from shardgnn.train.epoch import EpochRun
from shardgnn.train.progress import format_table
from shardgnn.train.single import LocalSteps

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

SPLITS = ("val", "test")


def measure(dataset: str, data_dir: str | None, kind: str, repeats: int) -> dict:
    config = TrainConfig(
        dataset=dataset,
        data_dir=data_dir,
        mode="full" if kind == "full" else "minibatch",
        model=ModelConfig(model="sage", hidden=256, num_layers=2),
        sampler=SamplerConfig(fanouts=(10, 10)),
        eval_fanouts=(-1, -1) if kind.startswith("layerwise") else None,
        optim=OptimConfig(epochs=1),
        progress=False,
    )
    steps = LocalSteps(config)
    steps.train_epoch(EpochRun(0, show_progress=False))
    if kind == "full":  # mostly-zero features: the whole graph's as a sparse matrix
        sparse_rows = is_sparse(steps.features_full)
    else:
        sparse_rows = kind == "layerwise" and steps.csr_rows is not None
    if kind == "layerwise-dense":
        steps.csr_rows = None  # the layer-wise pass reads the shard's dense rows
    ways = {
        "split by split": lambda: {split: steps.evaluate(split) for split in SPLITS},
        "one pass": lambda: steps.evaluate_splits(SPLITS),
    }
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    metrics = {}
    for _ in range(repeats):
        for way, evaluate in ways.items():
            start = time.perf_counter()
            metrics[way] = evaluate()
            seconds[way].append(time.perf_counter() - start)
    assert metrics["one pass"] == metrics["split by split"], metrics
    median = {way: statistics.median(s) for way, s in seconds.items()}
    return {
        "dataset": dataset,
        "kind": kind,
        "nodes": steps.graph.num_nodes,
        "sparse_rows": sparse_rows,
        "split_by_split_s": median["split by split"],
        "one_pass_s": median["one pass"],
        "ratio": median["one pass"] / median["split by split"],
        "metrics": metrics["one pass"],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["coauthor-physics"])
    parser.add_argument("--kinds", nargs="+", default=["full", "layerwise", "layerwise-dense"])
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = [
        measure(dataset, args.data_dir, kind, args.repeats)
        for dataset in args.datasets
        for kind in args.kinds
    ]
    print(
        format_table(
            ["dataset", "kind", "nodes", "rows", "split by split s", "one pass s", "ratio", "val",
             "test"],
            [
                [
                    r["dataset"], r["kind"], f"{r['nodes']:,}",
                    "sparse" if r["sparse_rows"] else "dense", f"{r['split_by_split_s']:.3f}",
                    f"{r['one_pass_s']:.3f}", f"{r['ratio']:.2f}x", f"{r['metrics']['val']:.4f}",
                    f"{r['metrics']['test']:.4f}",
                ]
                for r in rows
            ],
        )
    )  # fmt: skip
    if args.out:
        save_json(args.out, {"machine": machine_info(), "rows": rows})
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
