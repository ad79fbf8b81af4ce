r"""``shardgnn plan``'s epoch-time predictions against measured training runs, over a link whose
bandwidth is a real variable.

For every dataset and link: ``shardgnn plan --calibrate`` measures the machine's rates (run
where the job runs), then every full-graph strategy the plan weighs at each ``--workers`` count
trains ``--epochs`` epochs (``shardgnn train --mode full --workers P``, GCN, 2 layers, hidden
256) on one METIS partition per P (written once into ``--work-dir``), and its steady epoch time
(the mean of epochs 2 onwards of the results' ``time_s``: one training step, the slowest rank's
pace) is set beside the time the plan predicts for that partition
(:func:`shardgnn.fullgraph.plan.partition_costs` with the calibrated rates, every worker on this
machine). Per (dataset, P, link) setting: the strategy the plan picks and the measured fastest.

Links (``--links``): ``host`` is this machine's loopback; a rate such as ``2gbit`` or
``500mbit`` runs calibration and training inside a fresh network namespace whose loopback
carries a token-bucket filter at that rate (``tc qdisc add dev lo root tbf``), so every byte the
workers exchange crosses a link of that bandwidth (needs root, ``ip`` and ``tc``; the namespace
is deleted in a ``finally`` block).

Two machines (``--two-host-links``, e.g. ``2gbit,500mbit``): two network namespaces joined by a
veth pair (``netns_hosts.NetnsHosts``: own hostnames, ``/etc/hosts``), each end's egress limited
to the rate by a token-bucket filter, each "machine" pinned to one core (``taskset -c i``), one
worker per machine under torchrun (c10d rendezvous on ``h0``). The link between them is measured
the way a user measures one between real machines (``torchrun --nnodes 2 --nproc-per-node 1 ...
-m shardgnn.fullgraph.rates --out FILE``), the compute rates by ``shardgnn plan --calibrate
--link FILE`` on one core, and the plan predicts for one worker per machine
(``--workers-per-host 1``); P = 2, every strategy.

    python benchmarks/bench_plan_time.py --out benchmarks/out/plan_time.json \
        --datasets coauthor-physics synthetic:nodes=50000,degree=20,features=128,classes=8 \
        --links host,2gbit,500mbit --two-host-links 2gbit,500mbit
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from shardgnn.atomic import atomic_open, save_json
from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import partition_costs, recommend
from shardgnn.partition.format import read_partitions

SHARDGNN = [sys.executable, "-m", "shardgnn"]


@contextlib.contextmanager
def link(rate: str, name: str):
    """The command prefix that runs inside a namespace whose loopback is limited to ``rate``
    (``host``: none, this machine's loopback)."""
    if rate == "host":
        yield []
        return
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        run_in = ["ip", "netns", "exec", name]
        subprocess.run(run_in + ["ip", "link", "set", "lo", "up"], check=True)
        # burst: a few loopback frames (64 KiB MTU); latency: how long a packet may queue
        subprocess.run(
            run_in
            + ["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate]
            + ["burst", "512kb", "latency", "200ms"],
            check=True,
        )
        yield run_in
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as fh:
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; log: {log}")


@contextlib.contextmanager
def two_hosts(rate: str):
    """Two namespaces joined by a veth pair, each end's egress limited to ``rate``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from netns_hosts import IFACE, NetnsHosts

    hosts = NetnsHosts(2, prefix="sgpt")
    try:
        hosts.setup()
        for ns in hosts.ns:
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", IFACE, "root", "tbf"]
                + ["rate", rate, "burst", "512kb", "latency", "200ms"],
                check=True,
            )
        yield hosts
    finally:
        hosts.teardown()


def on_both(hosts, argv: list[str], log: Path, rdzv_id: str) -> list[int]:
    """``argv`` (a module and its arguments) under ``python -m shardgnn.torchrun``, one worker on
    each host, host ``i`` pinned to core ``i``; the exit codes. When one host's command has
    failed, the other gets 30 s before it is killed (an agent whose peer failed after its own
    worker succeeded waits 300 s at torchrun's exit barrier)."""
    procs = []
    for i in range(2):
        command = hosts.wrap(
            i,
            ["taskset", "-c", str(i), sys.executable, "-m", "shardgnn.torchrun", "--nnodes", "2"]
            + ["--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29511"]
            + ["--rdzv-id", rdzv_id, *argv],
        )  # fmt: skip
        fh = open(log.with_suffix(f".h{i}.log"), "w")
        procs.append((subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT), fh))
    deadline, failed_at = time.monotonic() + 900, None
    while any(proc.poll() is None for proc, _ in procs):
        if failed_at is None and any(proc.poll() not in (None, 0) for proc, _ in procs):
            failed_at = time.monotonic()
        if time.monotonic() > deadline or (failed_at and time.monotonic() - failed_at > 30):
            for proc, _ in procs:
                if proc.poll() is None:
                    proc.kill()
        time.sleep(0.2)
    for _, fh in procs:
        fh.close()
    return [proc.wait() for proc, _ in procs]


def measure(
    report: dict[str, Any],
    out: Path,
    dataset: str,
    where: str,
    parts: Path,
    calibration: Path,
    p: int,
    train,
    workers_per_host: int | None = None,
    strategies: tuple[str, ...] = (),
) -> None:
    """Predict every strategy (or those named in ``strategies``) on the partition ``parts`` with
    the rates in ``calibration``, run each (``train(cost, results_path)``), and add the runs and
    the setting (pick and fastest among them) to ``report``."""
    from shardgnn.fullgraph.rates import read_rates

    rates = read_rates(str(calibration), "--rates")
    pset = read_partitions(parts, verify=False)
    num_classes = pset.load_part(0, mmap=True, verify=False).num_classes
    config = PlanConfig(
        dataset=dataset,
        model="gcn",  # what it trains
        workers=(p,),
        workers_per_host=workers_per_host or p,
        rates=str(calibration),
    )
    costs = partition_costs(pset, config, num_classes, rates)
    if strategies:
        costs = [c for c in costs if c.strategy in strategies]
    measured: dict[str, float] = {}
    tag = re.sub(r"[^A-Za-z0-9]+", "_", f"{dataset}-{where}-p{p}")
    for cost in costs:
        results = parts.parent / f"{tag}-{cost.label.replace(' ', '_')}.json"
        start = time.perf_counter()
        codes = train(cost, results)
        epochs = json.loads(results.read_text())["epochs"]
        steady = float(np.mean([e["time_s"] for e in epochs[1:]]))
        measured[cost.label] = steady
        report["runs"].append({
            "dataset": dataset, "link": where, "workers": p, "strategy": cost.label,
            "predicted_s": cost.epoch_s, "predicted_compute_s": cost.compute_s,
            "predicted_comm_s": cost.comm_s, "measured_s": steady,
            "ratio": cost.epoch_s / steady,
            "measured_comm_s": float(np.mean([e["stages"].get("comm", 0.0) for e in epochs[1:]])),
            "bytes_per_epoch": cost.bytes_per_epoch,
            "run_s": time.perf_counter() - start,
            **({"exit_codes": codes} if codes and any(codes) else {}),
        })  # fmt: skip
        print(
            f"{dataset} {where} P={p} {cost.label}: predicted {cost.epoch_s:.3f} s, measured "
            f"{steady:.3f} s ({cost.epoch_s / steady:.2f}x)",
            flush=True,
        )
        save_json(out, report)
    pick = recommend(costs)[p].label
    fastest = min(measured, key=measured.get)
    report["settings"].append({
        "dataset": dataset, "link": where, "workers": p, "pick": pick,
        "measured_fastest": fastest, "pick_over_fastest": measured[pick] / measured[fastest],
        # one machine: its loopback, both directions together; two: each direction
        "link_gbit_measured": rates.link_bytes_s * 8 / 1e9 * (1 if workers_per_host else 2),
    })  # fmt: skip
    save_json(out, report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["coauthor-physics"])
    parser.add_argument(
        "--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared/data")
    )
    parser.add_argument("--workers", default="2,3,4")
    parser.add_argument("--links", default="host,2gbit,500mbit")
    parser.add_argument("--two-host-links", default="")
    parser.add_argument("--append", action="store_true", help="add to --out's runs")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--work-dir", default="/tmp/bench_plan_time")
    parser.add_argument("--out", default="benchmarks/out/plan_time.json")
    parser.add_argument(
        "--strategies", default="", help="comma-separated --spmm names to run (default: all)"
    )
    args = parser.parse_args()
    only = tuple(name for name in args.strategies.split(",") if name)
    workers = [int(p) for p in args.workers.split(",")]
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    report: dict[str, Any] = {"runs": [], "settings": []}
    if args.append and out.exists():  # add to an earlier run's table (e.g. the two-host part)
        report = json.loads(out.read_text())
    if "command" in report:
        report["commands"] = [report.pop("command")]
    report.setdefault("commands", []).append(" ".join([sys.executable, *sys.argv]))
    for dataset in args.datasets:
        tag = re.sub(r"[^A-Za-z0-9]+", "_", dataset)
        data = ["--data-dir", args.data_dir]
        two = [r for r in args.two_host_links.split(",") if r]
        for p in sorted(set(workers) | ({2} if two else set())):
            parts = work / f"{tag}-p{p}"
            if not (parts / "meta.json").exists():
                run(
                    SHARDGNN + ["partition", dataset, *data, "--parts", str(p), "--method", "metis"]
                    + ["--out", str(parts), "--overwrite", "--quiet"],
                    work / f"{tag}-p{p}.log",
                )  # fmt: skip
        train = ["train", dataset, *data, "--mode", "full", "--model", "gcn", "--hidden", "256"]
        train += ["--layers", "2", "--epochs", str(args.epochs), "--quiet"]
        for rate in [r for r in args.links.split(",") if r]:
            with link(rate, f"sgplan{os.getpid()}") as prefix:
                calibration = work / f"{tag}-{rate}-rates.json"
                run(
                    prefix + SHARDGNN + ["plan", dataset, *data, "--model", "gcn", "--calibrate"]
                    + ["--workers", args.workers, "--workers-per-host", str(max(workers))]
                    + ["--out", str(calibration)],
                    work / f"{tag}-{rate}-calibrate.log",
                )  # fmt: skip
                for p in workers:
                    parts = work / f"{tag}-p{p}"

                    def one_host(
                        cost, results, p=p, parts=parts, prefix=prefix, train=train,
                        calibration=calibration,
                    ):  # fmt: skip
                        run(
                            prefix + SHARDGNN + train + ["--partitions", str(parts)]
                            + ["--workers", str(p), "--results", str(results)]
                            + cost.flags(str(calibration)),
                            results.with_suffix(".log"),
                        )  # fmt: skip

                    measure(
                        report, out, dataset, rate, parts, calibration, p, one_host,
                        strategies=only,
                    )  # fmt: skip
        for rate in two:
            with two_hosts(rate) as hosts:
                link_file = work / f"{tag}-2hosts-{rate}-link.json"
                codes = on_both(
                    hosts,
                    ["-m", "shardgnn.fullgraph.rates", "--out", str(link_file)],
                    work / f"{tag}-2hosts-{rate}-link",
                    f"probe{os.getpid()}",
                )
                if any(codes):
                    raise SystemExit(f"the link probe failed {codes}: {work}/{tag}-2hosts-*.log")
                calibration = work / f"{tag}-2hosts-{rate}-rates.json"
                run(
                    ["taskset", "-c", "0"] + SHARDGNN + ["plan", dataset, *data, "--model", "gcn"]
                    + ["--calibrate", "--workers", "2", "--link", str(link_file)]
                    + ["--out", str(calibration)],
                    work / f"{tag}-2hosts-{rate}-calibrate.log",
                )  # fmt: skip
                parts = work / f"{tag}-p2"

                def two_host(
                    cost, results, hosts=hosts, parts=parts, train=train, calibration=calibration
                ):
                    results.unlink(missing_ok=True)
                    codes = on_both(
                        hosts,
                        ["-m", "shardgnn.run", *train, "--partitions", str(parts)]
                        + ["--results", str(results), *cost.flags(str(calibration))],
                        results.with_suffix(""),
                        f"train{os.getpid()}{results.stem[-12:]}",
                    )
                    # a worker that crashed after the results were written: recorded, kept
                    if not results.exists() or json.loads(results.read_text())["status"] != (
                        "complete"
                    ):
                        raise SystemExit(f"failed {codes}: {results.with_suffix('')}.h*.log")
                    return codes

                measure(report, out, dataset, f"2 machines, {rate}", parts, calibration, 2,
                        two_host, workers_per_host=1, strategies=only)  # fmt: skip
    write_tables(out, report)
    return 0


def write_tables(out: Path, report: dict[str, Any]) -> None:
    lines = [
        "| dataset | link | P | strategy | predicted s | measured s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['dataset']} | {r['link']} | {r['workers']} | {r['strategy']} | "
            f"{r['predicted_s']:.3f} | {r['measured_s']:.3f} | {r['ratio']:.2f} |"
        )
    ratios = np.array([r["ratio"] for r in report["runs"]])
    within = int((np.abs(ratios - 1) <= 0.25).sum())
    lines += ["", f"within 25 %: {within} of {len(ratios)}; "
              f"ratio min {ratios.min():.2f}, max {ratios.max():.2f}", ""]  # fmt: skip
    lines += [
        "| dataset | link (measured Gbit/s: loopback both ways / machine each way) | P "
        "| plan's pick | measured fastest "
        "| pick / fastest |",
        "|---|---|---|---|---|---|",
    ]
    good = 0
    for s in report["settings"]:
        good += s["pick_over_fastest"] <= 1.10
        lines.append(
            f"| {s['dataset']} | {s['link']} ({s['link_gbit_measured']:.2f}) | {s['workers']} | "
            f"{s['pick']} | {s['measured_fastest']} | {s['pick_over_fastest']:.3f} |"
        )
    lines += ["", f"pick within 10 % of the fastest: {good} of {len(report['settings'])}"]
    with atomic_open(out.with_suffix(".md"), "w") as fh:
        written = "\n".join(f"<!-- written by: {c} -->" for c in report["commands"])
        fh.write(f"{written}\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
