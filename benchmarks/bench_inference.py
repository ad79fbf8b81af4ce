"""Layer-wise versus node-wise full-neighbour inference, and checkpoint size and save/restore time.

For each dataset: a 3-layer GraphSAGE (hidden 256, seeded random weights: inference cost does not
depend on the weights), one process, ``--threads`` threads.

* **layer-wise** — :class:`shardgnn.fullgraph.inference.LayerwiseInference` over the whole graph
  (each layer computed once for every node, in chunks of ``--chunk-rows`` rows).
* **node-wise** — the standard way: batches of ``--batch-size`` output nodes, each with its full
  3-hop neighbourhood sampled as blocks (fanouts -1,-1,-1), features gathered, model run. When the
  graph has more batches than ``--node-wise-batches``, only that many (evenly spaced) are timed and
  the total is extrapolated (mean batch time x number of batches), which the table says.
* both outputs are compared on the timed nodes (max |difference|; they must agree within 1e-4).

Checkpoint: ``shardgnn.train.checkpoint.Checkpointer`` saving the model + Adam state + RNG state
(after one optimiser step, so Adam's moments exist), the file size, and the time to find, load
(``weights_only=True``) and restore it; the mean of ``--repeats``.

    python benchmarks/bench_inference.py \
        --datasets coauthor-physics synthetic:nodes=1000000,degree=20,features=100,classes=16
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.distributed.comm import Communicator
from shardgnn.fullgraph.inference import LayerwiseInference
from shardgnn.fullgraph.shard import shard_from_graph
from shardgnn.graph.datasets import load_dataset
from shardgnn.nn.message_graph import MessageGraph
from shardgnn.nn.models import ModelConfig, build_model
from shardgnn.sampling.neighbor import NeighborSampler, SamplerConfig
from shardgnn.train.checkpoint import Checkpointer
from shardgnn.train.loop import EpochRecord
from shardgnn.train.loop_state import LoopState, capture_state, restore_state
from shardgnn.train.progress import format_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def node_wise(graph, model, batch_size: int, max_batches: int):
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(-1, -1, -1)))
    x = torch.from_numpy(graph.x)
    batches = np.array_split(np.arange(graph.num_nodes), -(-graph.num_nodes // batch_size))
    chosen = np.unique(np.linspace(0, len(batches) - 1, min(max_batches, len(batches))).astype(int))
    outputs, times, input_nodes = {}, [], []
    with torch.no_grad():
        for i in chosen:
            start = time.perf_counter()
            sample = sampler.sample(torch.from_numpy(batches[i]), seed=0)
            graphs = [MessageGraph.from_block(b) for b in sample.blocks]
            outputs[i] = model(graphs, x[sample.blocks[0].src_nodes_S])
            times.append(time.perf_counter() - start)
            input_nodes.append(int(sample.blocks[0].num_src))
    return {
        "batches_total": len(batches),
        "batches_timed": len(chosen),
        "mean_batch_s": float(np.mean(times)),
        "total_s": float(np.mean(times)) * len(batches),
        "extrapolated": len(chosen) < len(batches),
        "mean_input_nodes": float(np.mean(input_nodes)),
    }, {int(i): (batches[i], outputs[i]) for i in chosen}


def checkpoint_cost(model, repeats: int) -> dict:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = sum(p.sum() for p in model.parameters())
    loss.backward()
    optimizer.step()
    loop = LoopState()
    loop.next_epoch = 1
    saves, loads, size = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Checkpointer(tmp, keep=1)
        for _ in range(repeats):
            start = time.perf_counter()
            path = ckpt.save(1, capture_state(loop, model, optimizer, []), {"bench": True})
            saves.append(time.perf_counter() - start)
            size = sum(f.stat().st_size for f in Path(path).iterdir())
            start = time.perf_counter()
            state = ckpt.load_latest({"bench": True})
            restore_state(state, model, optimizer, [], EpochRecord)
            loads.append(time.perf_counter() - start)
    params = sum(p.numel() for p in model.parameters())
    return {
        "parameters": params,
        "bytes": size,
        "save_s": float(np.mean(saves)),
        "restore_s": float(np.mean(loads)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--datasets",
        nargs="+",
        default=["coauthor-physics", "synthetic:nodes=1000000,degree=20,features=100,classes=16"],
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--node-wise-batches", type=int, default=6)
    p.add_argument("--chunk-rows", type=int, default=65536)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data"))
    p.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "inference.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    command = "python benchmarks/bench_inference.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    runs = []
    for spec in args.datasets:
        graph = load_dataset(spec, args.data_dir)
        torch.manual_seed(0)
        model = build_model(
            ModelConfig(model="sage", hidden=256, num_layers=3),
            graph.num_features,
            graph.num_classes,
        ).eval()
        shard = shard_from_graph(graph)
        start = time.perf_counter()
        engine = LayerwiseInference(shard, 0, Communicator(0, 1, None), chunk_rows=args.chunk_rows)
        _, logits = engine.run(model, torch.from_numpy(graph.x))
        layer_s = time.perf_counter() - start
        print(f"{spec}: layer-wise {layer_s:.1f} s", flush=True)
        node, outputs = node_wise(graph, model, args.batch_size, args.node_wise_batches)
        diff = max(
            float((out - logits[torch.from_numpy(ids)]).abs().max())
            for ids, out in outputs.values()
        )
        print(
            f"{spec}: node-wise {node['total_s']:.1f} s "
            f"({'extrapolated' if node['extrapolated'] else 'measured'}), max |diff| {diff:.2e}",
            flush=True,
        )
        runs.append(
            {
                "dataset": spec,
                "nodes": graph.num_nodes,
                "edges": graph.num_edges,
                "layer_wise_s": layer_s,
                "node_wise": node,
                "speedup": node["total_s"] / layer_s,
                "max_abs_diff": diff,
                "checkpoint": checkpoint_cost(model.train(), args.repeats),
            }
        )
        del graph, shard, engine
    rows = [
        (
            r["dataset"][:40],
            f"{r['nodes']:,}",
            f"{r['layer_wise_s']:.1f}",
            f"{r['node_wise']['total_s']:.1f}"
            + (
                " (extrapolated from %d of %d batches)"
                % (r["node_wise"]["batches_timed"], r["node_wise"]["batches_total"])
                if r["node_wise"]["extrapolated"]
                else ""
            ),
            f"{r['node_wise']['mean_input_nodes']:,.0f}",
            f"{r['speedup']:.1f}x",
            f"{r['max_abs_diff']:.1e}",
            f"{r['checkpoint']['bytes'] / 1e6:.2f}",
            f"{r['checkpoint']['save_s'] * 1e3:.1f}",
            f"{r['checkpoint']['restore_s'] * 1e3:.1f}",
        )
        for r in runs
    ]
    table = format_table(
        [
            "dataset",
            "nodes",
            "layer-wise s",
            "node-wise s",
            "input nodes / node-wise batch",
            "speed-up",
            "max |diff|",
            "checkpoint MB",
            "save ms",
            "restore ms",
        ],
        rows,
    )
    report = {"command": command, "machine": machine_info(), "args": vars(args), "runs": runs}
    save_json(args.out, report)
    with atomic_open(Path(args.out).with_suffix(".md"), "w") as fh:
        fh.write(f"<!-- written by: {command} -->\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
