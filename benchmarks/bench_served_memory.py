"""How far an exported TGN or JODIE file's memory strays from the trained model's over a whole
real stream (issue 31's serving path): each model trained on CollegeMsg (the README's TGN
flags), exported to ONNX and torch.export, then the file driven as ``ServedMemory`` does and
the trained model as evaluation does, over all its events (or ``--dataset``'s) in batches of
``--batch``, both from empty memory (:func:`shardgnn.train.inference.export.memory_stream_drift`).
Reports, per model and format, the largest difference of the queries' outputs and of the memory
over the first tenth of the batches and over the whole stream (does it grow?), against the export
check's bound (1e-4 of the largest output). Then the same events replayed through the file
(``ServedMemory.replay``, how a server catches up with a stream already seen): its events per
second, and whether it leaves the memory serving the stream left.

    python benchmarks/bench_served_memory.py --data-dir ../shared/data

Writes ``benchmarks/out/served_memory.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from machine import publish  # noqa: E402
from shardgnn.cli import main as shardgnn
from shardgnn.graph.datasets import load_temporal_dataset
from shardgnn.nn.serving import ServedMemory
from shardgnn.train.inference.export import (
    TOLERANCE,
    load_exported,
    memory_stream_drift,
    serving_model,
)
from shardgnn.train.inference.run import resolve_checkpoint

REPO = Path(__file__).resolve().parents[1]
MODEL_FLAGS = {
    "tgn": ["--out-dim", "100", "--heads", "2", "--dropout", "0.1"],
    "jodie": [],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="collegemsg")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--models", default="tgn,jodie")
    parser.add_argument("--formats", default="onnx,pt2")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "served_memory.json"))
    args = parser.parse_args(argv)

    events = load_temporal_dataset(args.dataset, args.data_dir)
    feat = events.edge_feat
    if feat is None:
        feat = np.zeros((events.src.size, 0), np.float32)
    rows, runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            ck = Path(tmp) / model
            train = ["train", args.dataset, "--data-dir", args.data_dir, "--task", "link"]
            train += ["--model", model, "--link-val", "0.15", "--link-test", "0.15"]
            train += ["--batch-size", "200", "--lr", "0.0001", "--epochs", str(args.epochs)]
            train += [*MODEL_FLAGS[model], "--quiet", "--checkpoint-dir", str(ck)]
            if shardgnn(train) != 0:
                return 1
            serving = serving_model(resolve_checkpoint(ck))[0]
            for fmt in args.formats.split(","):
                out = Path(tmp) / f"{model}.{fmt}"
                if shardgnn(["export", "--checkpoint", str(ck), "--out", str(out)]) != 0:
                    return 1
                run, runner = load_exported(out, serving.input_names)
                start = time.perf_counter()
                drift = memory_stream_drift(
                    run, serving, events.num_nodes, events.src, events.dst, events.t, feat,
                    args.batch,
                )  # fmt: skip
                seconds = time.perf_counter() - start
                replayed = ServedMemory(
                    events.num_nodes, serving.memory_dim, serving.event_dim, serving.kind
                )
                start = time.perf_counter()
                replayed.replay(run, events.src, events.dst, events.t, feat, args.batch)
                replay_s = time.perf_counter() - start
                replay_equal = torch.equal(
                    replayed.memory_NM, drift.served.memory_NM
                ) and torch.equal(replayed.last_N, drift.served.last_N)
                batches = len(drift.output_diff)
                tenth = max(1, batches // 10)
                record = {
                    "model": model,
                    "format": fmt,
                    "runner": runner,
                    "events": int(events.src.size),
                    "batches": batches,
                    "scale": drift.scale,
                    "times_equal": drift.times_equal,
                    "output_diff": [float(f"{d:.3g}") for d in drift.output_diff],
                    "memory_diff": [float(f"{d:.3g}") for d in drift.memory_diff],
                    "seconds": seconds,
                    "replay_seconds": replay_s,
                    "replay_equal": replay_equal,
                }
                runs.append(record)
                bound = TOLERANCE * drift.scale
                rows.append(
                    [
                        model,
                        f".{fmt} ({runner})",
                        f"{batches:,}",
                        f"{max(drift.output_diff[:tenth]):.1e}",
                        f"{max(drift.output_diff):.1e}",
                        f"{max(drift.memory_diff[:tenth]):.1e}",
                        f"{max(drift.memory_diff):.1e}",
                        f"{drift.memory_diff[-1]:.1e}",
                        f"{drift.scale:,.1f}",
                        f"{bound:.1e}",
                        "yes" if drift.times_equal else "no",
                        f"{events.src.size / replay_s:,.0f}",
                        "yes" if replay_equal else "no",
                    ]
                )
    columns = [
        "model",
        "file",
        "batches",
        "output diff, first tenth",
        "output diff, all",
        "memory diff, first tenth",
        "memory diff, all",
        "memory diff, end",
        "largest output",
        "check bound",
        "times equal",
        "replay events/s",
        "replay = served",
    ]
    header = (
        f"Served memory over {args.dataset} ({runs[0]['events']:,} events, batches of "
        f"{args.batch}): file against the trained model, from empty memory"
    )
    json_path = Path(args.out)
    return publish(
        str(json_path), str(json_path.with_suffix(".md")), header, columns, rows, runs=runs
    )


if __name__ == "__main__":
    sys.exit(main())
