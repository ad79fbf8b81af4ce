"""The GPU pipeline against the CPU path and its floor, on one GPU machine, in one run.

Sections (each writes its numbers to ``--out`` as soon as it has them; a section that would run
past ``--deadline`` seconds is skipped and says so):

* ``ceilings`` — the device's measured copy bandwidth and fp32 GEMM rate (the floor's rates);
* ``epoch`` — GraphSAGE (3 layers, hidden 256, fanouts 15,10,5, batch 1024) on the peers graph
  (``benchmarks/peers/gen_graph.py``, 1M nodes / ~19M edges, 128 features): the GPU pipeline
  (GPU sampling, rows on the GPU, 8 batches sampled a call, the default; one batch a call; with
  and without the second stream), the staged CPU sampler,
  two-tier rows (``--gpu-feature-memory 20%``), bf16, and the CPU path on the machine's cores
  (over ``--cpu-batches`` batches, per batch, scaled to the epoch's batch count); epoch 2 of
  each; the epoch's floor (bytes moved over bandwidth, FLOPs over the GEMM rate, from the
  sampled blocks' sizes);
* ``step_anatomy`` — one sampled batch's training step held fixed: as the loop runs it, with its
  message graphs built once, those graphs' matrices alone, and the step captured as a CUDA graph
  and replayed (its device time; the replay's loss checked against the eager step's; again with
  TF32 GEMMs), and the step's kernels by device time;
* ``bulk_sweep`` — the epoch with 8, 16 and 32 batches sampled a call, interleaved, twice;
* ``captured_ab`` — the epoch with ``--cuda-graphs`` against the default, interleaved, and its
  busy share;
* ``captured_tf32`` — the ``--cuda-graphs`` epoch with TF32 GEMMs against fp32, interleaved;
* ``ahead_ab`` — the epoch and its busy share with the step's message graphs made ahead in the
  pipeline's thread (the default) and made in the step, interleaved;
* ``busy`` — share of one GPU training epoch's wall time with a kernel running (torch profiler,
  cut to epoch 2; and that kernel time over the same epoch unprofiled), with and without the
  second stream;
* ``sampler`` — sampled edges per second: the GPU sampler (Triton hop kernel, and its tensor code)
  against the numba kernels on every core;
* ``profile`` — a torch profile of 20 GPU batches (op tables in ``gpu_profile.txt`` beside
  ``--out``) and their host syncs counted by the line that asked for them;
* ``fullgraph`` — a full-graph GCN step (2 layers, hidden 256) against PyG's ``GCNConv``;
* ``accuracy`` — CPU and GPU, fp32 and bf16, 3 seeds, on a learnable synthetic graph;
* ``big`` — the GPU epoch on a 2.4M-node / 62M-edge synthetic graph (ogbn-products' size).

    python benchmarks/bench_gpu.py --out $OUT/gpu.json --md $OUT/gpu.md
    python benchmarks/bench_gpu.py --device cpu --nodes 20000 --edges 200000 --smoke  # no GPU
    python benchmarks/bench_gpu.py --only epoch_gpu,step_anatomy  # some sections only
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
from gen_graph import make_graph  # noqa: E402

from machine import machine_info  # noqa: E402
from shardgnn.atomic import atomic_open, save_json  # noqa: E402
from shardgnn.graph.csr import Graph, csr_from_edges  # noqa: E402
from shardgnn.graph.synthetic import SyntheticConfig, generate  # noqa: E402
from shardgnn.loader.config import DeviceConfig  # noqa: E402
from shardgnn.nn.config import ModelConfig  # noqa: E402
from shardgnn.nn.message_graph import MessageGraph  # noqa: E402
from shardgnn.nn.models import build_model  # noqa: E402
from shardgnn.sampling.config import GPU_BULK_BATCHES, SamplerConfig  # noqa: E402
from shardgnn.sampling.device import DeviceNeighborSampler  # noqa: E402
from shardgnn.sampling.neighbor import NeighborSampler  # noqa: E402
from shardgnn.seeding import mix_seed  # noqa: E402
from shardgnn.train.config import OptimConfig, TrainConfig  # noqa: E402
from shardgnn.train.progress import format_table  # noqa: E402
from shardgnn.train.single import run_training  # noqa: E402

FANOUTS = (15, 10, 5)
HIDDEN = 256
BATCH = 1024
START = time.perf_counter()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cuda")
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--edges", type=int, default=20_000_000)
    p.add_argument("--feat", type=int, default=128)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--big-nodes", type=int, default=2_400_000)
    p.add_argument("--big-edges", type=int, default=62_000_000)
    p.add_argument("--big-feat", type=int, default=100)
    p.add_argument("--cpu-batches", type=int, default=12)
    p.add_argument("--accuracy-nodes", type=int, default=100_000)
    p.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole run")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs")
    p.add_argument("--only", help="comma-separated sections to run, the others skipped")
    p.add_argument("--out", default="benchmarks/out/gpu.json")
    p.add_argument("--md", default="benchmarks/out/gpu.md")
    return p.parse_args(argv)


def elapsed() -> float:
    return time.perf_counter() - START


def peers_graph(nodes: int, edges: int, feat: int, classes: int, seed: int = 0) -> Graph:
    """The peers benchmark graph (gen_graph.py's arrays), as a shardgnn graph."""
    src, dst = make_graph(nodes, edges, "powerlaw", 0.8, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((nodes, feat), dtype=np.float32)
    y = rng.integers(0, classes, nodes, dtype=np.int64)
    perm = rng.permutation(nodes)
    train, val = np.sort(perm[: nodes // 10]), np.sort(perm[nodes // 10 : nodes // 10 + 4096])
    indptr, indices = csr_from_edges(src, dst, nodes)[:2]
    return Graph(
        indptr=indptr, indices=indices, x=x, y=y, train_idx=train, val_idx=val,
        test_idx=val, num_classes=classes, name=f"peers-{nodes}",
    )  # fmt: skip


def big_graph(args: argparse.Namespace) -> Graph:
    """The ogbn-products-sized graph from the built-in generator (gen_graph.py's numpy code took
    over 150 s for it on the H200 machine); 10% training nodes, validation cut to 4096."""
    graph = generate(
        SyntheticConfig(
            nodes=args.big_nodes,
            degree=args.big_edges / args.big_nodes,
            features=args.big_feat,
            classes=47,
        )
    )
    return dataclasses.replace(graph, val_idx=graph.val_idx[:4096], test_idx=graph.val_idx[:4096])


def big_run(args: argparse.Namespace, device: str) -> dict:
    """The GPU epoch on the ogbn-products-sized graph, with the graph's size and making time."""
    start = time.perf_counter()
    graph = big_graph(args)
    made = time.perf_counter() - start
    out = epoch_run(graph, device)
    out.update(nodes=graph.num_nodes, edges=graph.num_edges, generate_s=made)
    return out


def train_config(device: str, epochs: int = 2, bulk: int | None = None, **kwargs) -> TrainConfig:
    config = TrainConfig(
        dataset="synthetic", device=device, sampler=SamplerConfig(fanouts=FANOUTS, bulk=bulk),
        model=ModelConfig(model="sage", hidden=HIDDEN, dropout=0.0),
        optim=OptimConfig(epochs=epochs, lr=1e-3), batch_size=BATCH, eval_batch_size=4096,
        **kwargs,
    )  # fmt: skip
    config.progress = False
    return config


def epoch_run(graph: Graph, device: str, **kwargs) -> dict:
    """Two epochs; epoch 2's time and stages (epoch 1 holds compilation and first touches)."""
    result = run_training(train_config(device, **kwargs), graph=graph)
    last = result["epochs"][-1]
    batches = -(-len(graph.train_idx) // BATCH)
    return {
        "epoch_s": last["time_s"],
        "per_batch_s": last["time_s"] / batches,
        "stages": last["stages"],
        "val_acc": last["val_acc"],
        "gpu_pipeline": result.get("gpu_pipeline"),
    }


def ceilings(device: torch.device) -> dict:
    """Measured device-to-device copy bandwidth (read + write) and fp32 GEMM rate."""
    if device.type != "cuda":
        return {}
    a = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    m = torch.randn(8192, 8192, device=device)
    out = {}
    for name, fn, work in (
        ("copy_GBps", lambda: b.copy_(a), 2 * a.numel() / 1e9),
        ("fp32_gemm_TFLOPs", lambda: m @ m, 2 * 8192**3 / 1e12),
    ):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        out[name] = work / statistics.median(times)
    return out


def floor_per_batch(graph: Graph, device: torch.device, rates: dict, batches: int = 5) -> dict:
    """The least time one batch could take: bytes it must move (input rows read, each layer's
    neighbour rows gathered and outputs written, forward and backward ~3x) over the copy
    bandwidth, against its GEMM FLOPs (two linear maps per SAGE layer, x3 for backward) over the
    GEMM rate; the larger is the floor."""
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=FANOUTS))
    dims = [graph.x.shape[1], HIDDEN, HIDDEN, graph.num_classes]
    flops = moved = 0.0
    seeds = np.random.default_rng(0).permutation(graph.train_idx)
    for i in range(batches):
        sample = sampler.sample(torch.from_numpy(seeds[i * BATCH : (i + 1) * BATCH]), i)
        moved += sample.input_nodes.shape[0] * dims[0] * 4
        for block, din, dout in zip(sample.blocks, dims[:-1], dims[1:]):
            flops += 3 * 2 * 2 * block.num_dst * din * dout
            moved += 3 * 4 * (block.num_edges * din + block.num_dst * (din + dout))
    flops, moved = flops / batches, moved / batches
    bw = rates.get("copy_GBps", 0) * 1e9
    rate = rates.get("fp32_gemm_TFLOPs", 0) * 1e12
    out = {"flops_per_batch": flops, "bytes_per_batch": moved}
    if bw and rate:
        out.update(
            memory_s=moved / bw, compute_s=flops / rate, floor_s=max(moved / bw, flops / rate)
        )
    return out


@contextlib.contextmanager
def marked_epochs(sync_sites: collections.Counter | None = None):
    """Training epochs marked for the profiler: each ``LocalSteps.train_epoch`` starts and ends
    with the device idle and runs inside a ``bench::train_epoch`` range, so a profile of a whole
    run (set-up copies, evaluation) can be cut to the epoch. ``sync_sites``: count every host
    sync inside the epoch by the Python line that asked for it (CUDA sync debug mode)."""
    from shardgnn.train.single import LocalSteps

    original = LocalSteps.train_epoch

    def train_epoch(self, run):
        torch.cuda.synchronize()
        with torch.profiler.record_function("bench::train_epoch"):
            if sync_sites is None:
                out = original(self, run)
            else:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    torch.cuda.set_sync_debug_mode("warn")
                    try:
                        out = original(self, run)
                    finally:
                        torch.cuda.set_sync_debug_mode("default")
                for w in caught:
                    if "synchroniz" in str(w.message):
                        sync_sites[f"{Path(w.filename).name}:{w.lineno}"] += 1
            torch.cuda.synchronize()
        return out

    LocalSteps.train_epoch = train_epoch
    try:
        yield
    finally:
        LocalSteps.train_epoch = original


def _epoch_spans(prof) -> tuple[float, list[tuple[float, float, str]]]:
    """The marked epoch's length (us) and the device kernels' spans inside it, with their names."""
    events = list(prof.events())
    marks = [e for e in events if e.name == "bench::train_epoch"]
    lo, hi = marks[-1].time_range.start, marks[-1].time_range.end
    spans = sorted(
        (max(e.time_range.start, lo), min(e.time_range.end, hi), e.name)
        for e in _device_work(events)
        if e.time_range.end > lo and e.time_range.start < hi
    )
    return hi - lo, [(a, b, n) for a, b, n in spans if b > a]


def _device_work(events) -> list:
    # device events that are work (kernels, copies); ranges such as a bench mark and
    # "Optimizer.step" appear on the device timeline too, as user annotations (a first run of the
    # busy share counted them and measured 1.0)
    return [
        e
        for e in events
        if e.device_type.name == "CUDA"
        and not getattr(e, "is_user_annotation", False)
        and not e.name.startswith(("bench::", "Optimizer."))
    ]


def _kernel_rows(spans: list[tuple[float, float, str]], per: int, top: int = 12) -> list[list]:
    """Device work by name and total time: [name, ms per ``per``, launches per ``per``], the
    ``top`` largest and then the rest summed."""
    kernels: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    for start, end, name in spans:
        k = kernels[name[:90]]
        k[0] += (end - start) / 1e3 / per
        k[1] += 1 / per
    rows = sorted(([n, round(ms, 4), round(c, 1)] for n, (ms, c) in kernels.items()),
                  key=lambda r: -r[1])  # fmt: skip
    rest = rows[top:]
    if rest:
        rows[top:] = [["(the rest)", round(sum(r[1] for r in rest), 4),
                       round(sum(r[2] for r in rest), 1)]]  # fmt: skip
    return rows


def _union(spans: list[tuple[float, float]]) -> float:
    busy, cur_start, cur_end = 0.0, None, None
    for s, e, *_ in spans:
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                busy += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    return busy + (cur_end - cur_start if cur_end is not None else 0.0)


def gpu_busy(graph: Graph, device: str, batches: int = 30, epochs: int = 2, **kwargs) -> dict:
    """Share of a GPU training epoch's wall time during which some kernel runs (union of kernel
    spans inside the last of ``epochs`` marked epochs: set-up copies, evaluation and epoch 1,
    which holds first touches and ``--cuda-graphs``' captures, left out).

    ``busy_share`` is measured under the profiler, whose recording of every host op slows the
    host threads the device waits on; ``busy_share_unprofiled`` divides the same kernel time by
    the same epoch's wall time in a run without the profiler (the kernels' device time does not
    depend on the host's pace; their overlap might, so it is an estimate, capped at 1)."""
    from torch.profiler import ProfilerActivity, profile

    small = dataclasses.replace(graph, train_idx=graph.train_idx[: batches * BATCH])
    # (also the warm-up run)
    plain = run_training(train_config(device, epochs=epochs, **kwargs), graph=small)
    with marked_epochs(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        run_training(train_config(device, epochs=epochs, **kwargs), graph=small)
    wall, spans = _epoch_spans(p)
    busy = _union(spans)
    plain_us = plain["epochs"][-1]["time_s"] * 1e6
    return {
        "batches": batches,
        "epoch": epochs,
        "epoch_us": wall,
        "busy_us": busy,
        "busy_share": busy / wall,
        "unprofiled_epoch_us": plain_us,
        "busy_share_unprofiled": min(1.0, busy / plain_us),
        "kernels_per_batch": len(spans) / batches,
        "epoch_kernels_ms_per_batch": _kernel_rows(spans, batches, top=16),
    }


def sampler_rates(
    graph: Graph, device: torch.device, batches: int = 32, ks: tuple[int, ...] = (8, 32)
) -> dict:
    """Sampled edges per second: the numba kernels on every core, the GPU sampler's Triton hop
    kernel (``gpu``) and its tensor code (``gpu_tensor``, the path before the kernel), one batch
    per call; then ``k`` batches per call (``gpu_bulk{k}``: the stacked frontiers drawn by the
    kernel with a seed per row and relabelled in one sort, the same blocks)."""
    config = SamplerConfig(fanouts=FANOUTS)
    seeds = np.random.default_rng(1).permutation(graph.num_nodes)
    chunks = [torch.from_numpy(seeds[i * BATCH : (i + 1) * BATCH]) for i in range(batches + 2)]
    gpu = DeviceNeighborSampler(graph.indptr, graph.indices, config, device)
    tensor = gpu.with_config(config)
    gpu.fused, tensor.fused = device.type == "cuda", False
    timed = list(range(2, batches + 2))  # batches 0 and 1 warm up (compilation, allocator)

    def rate(sample_many, k: int) -> float:
        """Sampled edges per second of ``sample_many(batches, seeds)`` called ``k`` at a time."""
        sample_many([chunks[0], chunks[1]], [0, 1])
        if device.type == "cuda":
            torch.cuda.synchronize()
        start, edges = time.perf_counter(), 0
        for at in range(0, len(timed), k):
            group = timed[at : at + k]
            got = sample_many([chunks[i] for i in group], [mix_seed(7, i) for i in group])
            edges += sum(s.num_sampled_edges for s in got)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return edges / (time.perf_counter() - start)

    out = {}
    for name, sampler in (
        ("cpu", NeighborSampler(graph.indptr, graph.indices, config)),
        ("gpu", gpu),
        ("gpu_tensor", tensor),
    ):
        one_at_a_time = lambda bs, ss, s=sampler: [s.sample(b, x) for b, x in zip(bs, ss)]  # noqa: E731
        out[f"{name}_edges_per_s"] = rate(one_at_a_time, 1)
    for k in ks:
        out[f"gpu_bulk{k}_edges_per_s"] = rate(gpu.sample_many, k)
    out["threads"] = int(os.cpu_count() or 1)
    return out


def profile_batches(graph: Graph, device: str, out_path: str, batches: int = 20) -> dict:
    """Where a GPU batch's time goes: a torch profile (CPU and CUDA) of one epoch of ``batches``
    batches, the op tables (by host time, by device time) written to ``out_path``; then the host
    syncs of another such epoch, counted by the line that asked for them."""
    from torch.profiler import ProfilerActivity, profile

    small = dataclasses.replace(graph, train_idx=graph.train_idx[: batches * BATCH])
    run_training(train_config(device, epochs=1), graph=small)  # warm
    with marked_epochs(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        run_training(train_config(device, epochs=1), graph=small)
    sites: collections.Counter = collections.Counter()
    with marked_epochs(sites):
        run_training(train_config(device, epochs=1), graph=small)
    averages = p.key_averages()
    tables = []
    for key in ("self_cpu_time_total", "self_device_time_total"):
        try:
            tables.append(f"== by {key}\n" + averages.table(sort_by=key, row_limit=40))
        except Exception as exc:  # noqa: BLE001 - the key's name differs across torch versions
            tables.append(f"== by {key}: {exc}")
    tables.append("== host syncs per epoch, by line\n" + "\n".join(
        f"{count:6d}  {site}" for site, count in sites.most_common(40)))  # fmt: skip
    with atomic_open(out_path, "w") as f:
        f.write("\n\n".join(tables) + "\n")
    return {
        "batches": batches,
        "syncs_per_batch": sum(sites.values()) / batches,
        "sync_sites": dict(sites.most_common(12)),
        "tables": out_path,
    }


def bulk_sweep(
    graph: Graph, device: str, ks: tuple[int, ...] = (8, 16, 32), rounds: int = 2
) -> dict:
    """The epoch with ``k`` batches sampled a call, for each ``k`` in turn, ``rounds`` times
    (interleaved, so that a drift of the machine shows as spread, not as a difference)."""
    out: dict = {f"bulk{k}_epoch_s": [] for k in ks}
    for _ in range(rounds):
        for k in ks:
            out[f"bulk{k}_epoch_s"].append(epoch_run(graph, device, bulk=k)["epoch_s"])
    return out


def _matrices(graphs: list[MessageGraph]) -> None:
    """What a SAGE step asks of its graphs: each one's mean matrix, and the transposes of all
    but the first (the input rows need no gradient)."""
    for i, graph in enumerate(graphs):
        graph.adjacency("mean")
        if i:
            graph.adjacency_t("mean")


@contextlib.contextmanager
def graphs_made_in_the_step():
    """Training as before GraphsAhead: the pipeline's thread hands each batch on without its
    graphs, so the step makes them (the control of ``ahead_ab``)."""
    from shardgnn.train.minibatch import GraphsAhead

    original = GraphsAhead.__call__
    GraphsAhead.__call__ = lambda self, batch: batch
    try:
        yield
    finally:
        GraphsAhead.__call__ = original


def ahead_ab(graph: Graph, device: str, rounds: int = 3) -> dict:
    """The default epoch with the step's graphs made ahead in the pipeline's thread, and made in
    the step, in turn, ``rounds`` times; then the busy share of each."""
    out: dict = {"ahead_epoch_s": [], "in_step_epoch_s": []}
    for _ in range(rounds):
        out["ahead_epoch_s"].append(epoch_run(graph, device)["epoch_s"])
        with graphs_made_in_the_step():
            out["in_step_epoch_s"].append(epoch_run(graph, device)["epoch_s"])
    if device.startswith("cuda"):
        out["ahead_busy_share"] = gpu_busy(graph, device)["busy_share"]
        with graphs_made_in_the_step():
            out["in_step_busy_share"] = gpu_busy(graph, device)["busy_share"]
    return out


def captured_ab(graph: Graph, device: str, rounds: int = 3) -> dict:
    """The default epoch and the epoch with ``--cuda-graphs`` in turn, ``rounds`` times (epoch 2
    of each run: epoch 1 holds the captures); then the busy share and the replay counts."""
    graphed = DeviceConfig(cuda_graphs=True)
    out: dict = {"eager_epoch_s": [], "graphed_epoch_s": []}
    for _ in range(rounds):
        out["eager_epoch_s"].append(epoch_run(graph, device)["epoch_s"])
        run = epoch_run(graph, device, gpu=graphed)
        out["graphed_epoch_s"].append(run["epoch_s"])
        out["graphed_pipeline"] = run["gpu_pipeline"]
    if device.startswith("cuda"):
        busy = gpu_busy(graph, device, gpu=graphed)
        out["graphed_busy_share"] = busy["busy_share"]
        out["graphed_busy_share_unprofiled"] = busy["busy_share_unprofiled"]
        out["graphed_busy"] = busy
    return out


def captured_tf32(graph: Graph, device: str, rounds: int = 2) -> dict:
    """The ``--cuda-graphs`` epoch with fp32 GEMMs on the tensor cores (TF32) and without, in
    turn: what a TF32 setting would be worth to the epoch (no setting has it yet)."""
    graphed = DeviceConfig(cuda_graphs=True)
    out: dict = {"fp32_epoch_s": [], "tf32_epoch_s": []}
    for _ in range(rounds):
        out["fp32_epoch_s"].append(epoch_run(graph, device, gpu=graphed)["epoch_s"])
        with _tf32():
            run = epoch_run(graph, device, gpu=graphed)
        out["tf32_epoch_s"].append(run["epoch_s"])
        out["tf32_val_acc"] = run["val_acc"]
    return out


def step_anatomy(graph: Graph, device: torch.device, repeats: int = 40) -> dict:
    """Where one training step's time goes, on one sampled batch held fixed (sampling and the row
    gather are the epoch's stages): ``loop_step_s``, the loop's step as training runs it (message
    graphs built from the blocks, forward, loss, backward, fused Adam); ``model_step_s``, the same
    with the graphs built once (their sparse matrices cached); ``graphed_step_s`` (CUDA only), that
    step captured in a CUDA graph and replayed: the host does one launch a step, so the time is
    the step's device time, what the step would cost if no launch or Python work stood between
    its kernels. Steps run back to back (the host may run ahead), timed over ``repeats``."""
    from shardgnn.loader.pipeline import MiniBatch
    from shardgnn.nn.targets import ClassTarget
    from shardgnn.timing import StageTimer
    from shardgnn.train.minibatch import batch_graphs, minibatch_step, node_objective

    cuda = device.type == "cuda"
    sampler = DeviceNeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=FANOUTS),
                                    device)  # fmt: skip
    seeds = torch.from_numpy(np.random.default_rng(2).permutation(graph.train_idx)[:BATCH])
    sample = sampler.sample(seeds, 0)
    x_SF = torch.from_numpy(graph.x)[sample.input_nodes.cpu()].to(device)
    y_B = torch.from_numpy(graph.y)[seeds].to(device)
    sage = ModelConfig(model="sage", hidden=HIDDEN, num_layers=len(FANOUTS), dropout=0.0)
    model = build_model(sage, x_SF.shape[1], graph.num_classes).to(device)
    # capturable: the step count and learning rate live on the device, so a replay updates them
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=cuda, capturable=cuda)
    target = ClassTarget(graph.num_classes)
    batch = MiniBatch(0, sample, x_SF, y_B)
    loop_step = minibatch_step(model, opt, device=device, timer=StageTimer(),
                               objective=node_objective(target))  # fmt: skip
    graphs = batch_graphs(batch, device)

    def model_step():
        opt.zero_grad(set_to_none=False)  # the gradients stay where a captured graph wrote them
        logits = model(graphs, x_SF).float()
        loss = target.loss_sum(logits, y_B) / y_B.shape[0]
        loss.backward()
        opt.step()
        return loss

    def per_step(fn) -> float:
        for _ in range(3):
            fn()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / repeats

    out = {
        "src_rows_per_layer": [b.num_src for b in sample.blocks],
        "edges_per_layer": [b.num_edges for b in sample.blocks],
        "loop_step_s": per_step(lambda: loop_step(batch)),
        "model_step_s": per_step(model_step),
        # the loop's own graph work, without the model: the message graphs alone, then with
        # the mean-normalised matrices SAGE multiplies by and the transposes its backward takes
        "graphs_s": per_step(lambda: batch_graphs(batch, device)),
        "graphs_and_matrices_s": per_step(lambda: _matrices(batch_graphs(batch, device))),
    }
    if not cuda:
        return out
    graph_, captured_loss = _captured(model_step)
    # the replay computes the eager step's loss from the same weights and optimiser state
    tensors = [t for p in model.parameters() for t in (p, *opt.state[p].values())]
    saved = [t.detach().clone() for t in tensors]
    eager_loss = float(model_step())
    with torch.no_grad():
        for t, v in zip(tensors, saved):
            t.copy_(v)
    graph_.replay()
    out["graphed_loss_rel_diff"] = abs(float(captured_loss) - eager_loss) / abs(eager_loss)
    out["graphed_step_s"] = per_step(graph_.replay)
    out["host_share_of_model_step"] = 1 - out["graphed_step_s"] / out["model_step_s"]
    out["step_kernels_ms"] = _kernel_table(model_step, steps=10)
    # the same step with fp32 GEMMs on the tensor cores (TF32): what the GEMMs' share is worth
    with _tf32():
        out["graphed_step_tf32_s"] = per_step(_captured(model_step)[0].replay)
    return out


def _captured(step) -> tuple[torch.cuda.CUDAGraph, object]:
    """``step`` captured in a CUDA graph (after torch's warm-up runs on a side stream), and what
    the captured call returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step()
    return graph, result


@contextlib.contextmanager
def _tf32():
    """fp32 GEMMs on the tensor cores (TF32) inside, as they were after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _kernel_table(step, steps: int) -> list[list]:
    """:func:`_kernel_rows` of ``steps`` runs of ``step`` (a step)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    spans = [(e.time_range.start, e.time_range.end, e.name) for e in _device_work(prof.events())]
    return _kernel_rows(spans, steps)


def fullgraph_step(graph: Graph, device: torch.device) -> dict:
    """One training step of a 2-layer GCN over the whole graph: ours against PyG's GCNConv."""
    x = torch.from_numpy(graph.x).to(device)
    y = torch.from_numpy(graph.y).to(device)
    ours = build_model(ModelConfig(model="gcn", hidden=HIDDEN, num_layers=2, dropout=0.0),
                       x.shape[1], graph.num_classes).to(device)  # fmt: skip
    mg = MessageGraph.from_csr(graph.indptr, graph.indices, device)
    out = {"ours_s": _step_time(lambda: ours([mg, mg], x), ours, y, device)}
    try:
        from torch_geometric.nn import GCNConv
    except ImportError as exc:
        out["pyg"] = f"not importable: {exc}"
        return out
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    edge_index = torch.from_numpy(np.stack([graph.indices.astype(np.int64), dst])).to(device)

    class PygGCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = GCNConv(x.shape[1], HIDDEN, cached=True)
            self.b = GCNConv(HIDDEN, graph.num_classes, cached=True)

        def forward(self):
            return self.b(torch.relu(self.a(x, edge_index)), edge_index)

    pyg = PygGCN().to(device)
    out["pyg_s"] = _step_time(pyg, pyg, y, device)
    out["ratio"] = out["ours_s"] / out["pyg_s"]
    return out


def spmm_check(device: torch.device) -> dict:
    """The SpMM on this device against the CPU kernels on one block (forward, mean), before any
    timing rests on it: its largest difference (a failure is recorded, the run goes on)."""
    from shardgnn.nn.message_graph import MessageGraph, spmm

    rng = np.random.default_rng(0)
    indptr = np.zeros(2001, dtype=np.int64)
    np.cumsum(rng.integers(0, 12, 2000), out=indptr[1:])
    indices = rng.integers(0, 5000, int(indptr[-1]))
    h = torch.randn(5000, 96)
    block = lambda dev: MessageGraph(  # noqa: E731
        torch.from_numpy(indptr).to(dev), torch.from_numpy(indices).to(dev), 5000
    )
    ours = spmm(block(device), h.to(device))
    diff = float((ours.cpu() - spmm(block("cpu"), h)).abs().max())
    if diff > 1e-4:
        raise AssertionError(f"the SpMM on {device} differs from the CPU kernels by {diff}")
    return {"max_abs_diff": diff}


def _step_time(forward, module, y, device, repeats: int = 5) -> float:
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    times = []
    for i in range(repeats + 2):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(forward(), y)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def accuracy_runs(nodes: int, device: str) -> dict:
    """Test accuracy at the best validation epoch, 3 seeds, CPU/GPU and fp32/bf16."""
    out = {}
    spec = f"synthetic:nodes={nodes}"
    for label, dev, precision in (
        ("cpu-fp32", "cpu", "fp32"),
        ("gpu-fp32", device, "fp32"),
        ("gpu-bf16", device, "bf16"),
    ):
        accs = []
        for seed in range(3):
            config = TrainConfig(dataset=spec, device=dev, precision=precision, seed=seed,
                                 optim=OptimConfig(epochs=3))  # fmt: skip
            config.progress = False
            accs.append(run_training(config)["test_acc"])
        out[label] = accs
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.smoke:
        args.nodes, args.edges, args.big_nodes, args.big_edges = 20000, 200000, 30000, 300000
        args.accuracy_nodes, args.cpu_batches = 5000, 2
    device = torch.device(args.device)
    results: dict = {"machine": machine_info(), "device": None, "args": vars(args)}
    if device.type == "cuda":
        results["device"] = torch.cuda.get_device_name(device)
    save = lambda: save_json(args.out, results)  # noqa: E731

    only = None if args.only is None else set(args.only.split(","))

    def section(name: str, budget: float, fn):
        if only is not None and name not in only:
            results[name] = "skipped: not in --only"
            return
        if elapsed() + budget > args.deadline:
            results[name] = f"skipped: {elapsed():.0f} s gone, needs ~{budget:.0f} s"
            print(f"[{elapsed():6.1f}s] {name}: skipped", flush=True)
            save()
            return
        start = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as exc:  # noqa: BLE001 - one failed section must not lose the others
            results[name] = f"failed: {type(exc).__name__}: {exc}"
        print(f"[{elapsed():6.1f}s] {name} ({time.perf_counter() - start:.1f} s): "
              f"{results[name]}", flush=True)  # fmt: skip
        save()

    section("ceilings", 10, lambda: ceilings(device))
    section("spmm_check", 10, lambda: spmm_check(device))
    graph = peers_graph(args.nodes, args.edges, args.feat, args.classes)
    results["graph"] = {"nodes": graph.num_nodes, "edges": graph.num_edges, "feat": args.feat}
    print(f"[{elapsed():6.1f}s] graph {graph.num_nodes} nodes {graph.num_edges} edges", flush=True)
    dev = args.device
    section("epoch_gpu", 40, lambda: epoch_run(graph, dev))
    section("step_anatomy", 20, lambda: step_anatomy(graph, device))
    section("bulk_sweep", 40, lambda: bulk_sweep(graph, dev))
    section("ahead_ab", 40, lambda: ahead_ab(graph, dev))
    section("captured_ab", 50, lambda: captured_ab(graph, dev) if device.type == "cuda" else None)
    section(
        "captured_tf32", 40, lambda: captured_tf32(graph, dev) if device.type == "cuda" else None
    )
    section("sampler", 30, lambda: sampler_rates(graph, device))
    section("epoch_gpu_one_batch", 30, lambda: epoch_run(graph, dev, bulk=1))
    section("floor", 15, lambda: floor_per_batch(graph, device, results.get("ceilings") or {}))
    cuda = device.type == "cuda"
    section("busy", 30, lambda: gpu_busy(graph, dev) if cuda else None)
    section("busy_one_batch", 30, lambda: gpu_busy(graph, dev, bulk=1) if cuda else None)
    profile_path = str(Path(args.out).with_name("gpu_profile.txt"))
    section("profile", 30, lambda: profile_batches(graph, dev, profile_path) if cuda else None)
    cpu_graph = dataclasses.replace(graph, train_idx=graph.train_idx[: args.cpu_batches * BATCH])
    section("epoch_cpu", 60, lambda: epoch_run(cpu_graph, "cpu"))
    section("fullgraph", 30, lambda: fullgraph_step(graph, device))
    serial = DeviceConfig(overlap=False)
    section("epoch_gpu_serial", 30, lambda: epoch_run(graph, dev, gpu=serial))
    section("epoch_gpu_bf16", 30, lambda: epoch_run(graph, dev, precision="bf16"))
    section(
        "epoch_gpu_tiered",
        30,
        lambda: epoch_run(graph, dev, gpu=DeviceConfig(feature_memory="20%")),
    )
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the earlier runs' blocks, before the big graph's
    section("big", 90, lambda: big_run(args, dev))  # 81 s on an H100 (75 s making the graph)
    staged = DeviceConfig(sampler_device="cpu")
    section("epoch_staged", 15, lambda: epoch_run(graph, dev, gpu=staged))
    section("accuracy", 60, lambda: accuracy_runs(args.accuracy_nodes, dev))
    results["total_s"] = elapsed()
    save()
    table = summary(results)
    with atomic_open(args.md, "w") as f:
        f.write(table + "\n")
    print(table)


def summary(r: dict) -> str:
    def get(name, key):
        v = r.get(name)
        return v.get(key) if isinstance(v, dict) else None

    def fmt(v, spec=".3f"):
        return "-" if v is None else format(v, spec)

    batches = -(-r["graph"]["nodes"] // 10 // BATCH)
    cpu_epoch = (get("epoch_cpu", "per_batch_s") or 0) * batches or None
    gpu_epoch = get("epoch_gpu", "epoch_s")
    floor = get("floor", "floor_s")
    rows = [
        [f"GPU epoch ({GPU_BULK_BATCHES} batches sampled a call, the default) (s)", fmt(gpu_epoch)],
        ["GPU epoch, batches made on the training stream (s)",
         fmt(get("epoch_gpu_serial", "epoch_s"))],
        ["CPU epoch, all cores (s, per batch x batches)", fmt(cpu_epoch)],
        ["CPU / GPU", fmt(cpu_epoch / gpu_epoch if cpu_epoch and gpu_epoch else None, ".1f")],
        ["epoch floor (s)", fmt(floor * batches if floor else None)],
        ["GPU epoch / floor",
         fmt(gpu_epoch / (floor * batches) if floor and gpu_epoch else None, ".1f")],
        ["GPU busy share (profiled; kernel time over the unprofiled epoch)", " / ".join(
            fmt(get("busy", k), ".2f") for k in ("busy_share", "busy_share_unprofiled"))],
        ["one batch held fixed: the loop's step (ms)",
         fmt((get("step_anatomy", "loop_step_s") or 0) * 1e3 or None, ".2f")],
        ["— graphs built once (ms)",
         fmt((get("step_anatomy", "model_step_s") or 0) * 1e3 or None, ".2f")],
        ["— its message graphs alone; with their matrices and transposes (ms)",
         "; ".join(fmt((get("step_anatomy", k) or 0) * 1e3 or None, ".2f")
                   for k in ("graphs_s", "graphs_and_matrices_s"))],
        ["— that step as a CUDA graph, replayed (ms); with TF32 GEMMs", "; ".join(
            fmt((get("step_anatomy", k) or 0) * 1e3 or None, ".2f")
            for k in ("graphed_step_s", "graphed_step_tf32_s"))],
        ["GPU epoch, eager / --cuda-graphs (s, each round)", " / ".join(
            ", ".join(f"{v:.3f}" for v in get("captured_ab", key) or [])
            for key in ("eager_epoch_s", "graphed_epoch_s"))],
        ["GPU busy share, --cuda-graphs (profiled; kernel time over the unprofiled epoch)",
         " / ".join(fmt(get("captured_ab", k), ".2f")
                    for k in ("graphed_busy_share", "graphed_busy_share_unprofiled"))],
        ["GPU epoch, --cuda-graphs, fp32 / TF32 GEMMs (s, each round)", " / ".join(
            ", ".join(f"{v:.3f}" for v in get("captured_tf32", key) or [])
            for key in ("fp32_epoch_s", "tf32_epoch_s"))],
        ["GPU epoch, --cuda-graphs / floor", fmt(
            statistics.median(get("captured_ab", "graphed_epoch_s")) / (floor * batches)
            if floor and get("captured_ab", "graphed_epoch_s") else None, ".1f")],
        ["GPU epoch, graphs made ahead / in the step (s, each round)", " / ".join(
            ", ".join(f"{v:.3f}" for v in get("ahead_ab", key) or [])
            for key in ("ahead_epoch_s", "in_step_epoch_s"))],
        ["GPU busy share, graphs made ahead / in the step", " / ".join(
            fmt(get("ahead_ab", key), ".2f")
            for key in ("ahead_busy_share", "in_step_busy_share"))],
        *[[f"GPU epoch, {k} batches sampled a call (s, each round)",
           ", ".join(f"{v:.3f}" for v in get("bulk_sweep", f"bulk{k}_epoch_s") or [])]
          for k in (8, 16, 32)],
        ["bf16 epoch / fp32 epoch", fmt(
            get("epoch_gpu_bf16", "epoch_s") / gpu_epoch
            if get("epoch_gpu_bf16", "epoch_s") and gpu_epoch else None, ".2f")],
        ["tiered (20% rows on GPU) epoch (s)", fmt(get("epoch_gpu_tiered", "epoch_s"))],
        ["staged CPU sampling epoch (s)", fmt(get("epoch_staged", "epoch_s"))],
        ["GPU (Triton kernel) / CPU sampler edges/s", fmt(
            get("sampler", "gpu_edges_per_s") / get("sampler", "cpu_edges_per_s")
            if get("sampler", "cpu_edges_per_s") else None, ".1f")],
        *[[f"GPU, {k} batches per call (Triton, one relabelling sort) / CPU sampler edges/s",
           fmt(get("sampler", f"gpu_bulk{k}_edges_per_s") / get("sampler", "cpu_edges_per_s")
               if get("sampler", "cpu_edges_per_s") else None, ".1f")] for k in (8, 32)],
        ["GPU epoch, one batch sampled a call (--bulk-batches 1) (s)",
         fmt(get("epoch_gpu_one_batch", "epoch_s"))],
        ["GPU busy share, --bulk-batches 1", fmt(get("busy_one_batch", "busy_share"), ".2f")],
        ["GPU (tensor code) / CPU sampler edges/s", fmt(
            get("sampler", "gpu_tensor_edges_per_s") / get("sampler", "cpu_edges_per_s")
            if get("sampler", "cpu_edges_per_s") else None, ".1f")],
        ["kernels per batch (training epoch)", fmt(get("busy", "kernels_per_batch"), ".0f")],
        ["host syncs per batch (training epoch)", fmt(get("profile", "syncs_per_batch"), ".1f")],
        ["full-graph GCN step ours / PyG", fmt(get("fullgraph", "ratio"), ".2f")],
        ["2.4M-node graph GPU epoch (s)", fmt(get("big", "epoch_s"))],
    ]  # fmt: skip
    spmm_line = f"SpMM: {r.get('spmm_check')}\n"
    text = f"device: {r.get('device')}\n{spmm_line}" + format_table(["measure", "value"], rows)
    kernels = get("step_anatomy", "step_kernels_ms")
    if kernels:
        text += "\n\none step's kernels (the batch held fixed, graphs built once):\n"
        text += format_table(["kernel", "ms a step", "launches a step"], kernels)
    for section, key, what in (
        ("busy", "epoch_kernels_ms_per_batch", "the default"),
        ("captured_ab", "graphed_busy", "--cuda-graphs"),
    ):
        kernels = get(section, key)
        if isinstance(kernels, dict):
            kernels = kernels.get("epoch_kernels_ms_per_batch")
        if kernels:
            text += f"\n\nthe epoch's device work, {what} (both streams, per batch):\n"
            text += format_table(["kernel", "ms a batch", "launches a batch"], kernels)
    return text


if __name__ == "__main__":
    main()
