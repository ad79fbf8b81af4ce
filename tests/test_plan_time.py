"""`shardgnn plan`'s epoch-time model: measured machine rates times the plan's per-worker counts
(:mod:`shardgnn.fullgraph.rates`, :func:`shardgnn.fullgraph.plan.step_seconds`). How close the
predictions come to measured runs is a benchmark (BENCHMARKS.md, ``bench_plan_time.py``)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from shardgnn.fullgraph.config import PlanConfig
from shardgnn.fullgraph.plan import costs_at, recommend, thread_counts, workload
from shardgnn.fullgraph.rates import ComputeRates, MachineRates, MiniBatchWork, calibrate
from shardgnn.graph.datasets import load_dataset
from shardgnn.nn.config import ModelConfig
from shardgnn.partition.methods import PartitionConfig, partition_graph

SPEC = "synthetic:nodes=800,degree=6,classes=3,features=10"


@pytest.fixture(scope="module")
def graph():
    return load_dataset(SPEC)


def _rates(cores: int = 2, link: float = 1e8) -> MachineRates:
    """Hand-made rates: every unit a different power of ten, so a wrong count shows."""
    compute = ComputeRates(
        threads=1,
        # every width up to 16 (3D's slices included): w x 1e-8 s, by the transpose 2e-8 more
        spmm_s={w: w * 1e-8 for w in range(1, 17)},
        spmm_t_s={w: w * 1e-8 + 2e-8 for w in range(1, 17)},
        linear_s={"10,16,0": 1e-6, "16,3,1": 5e-7, "16,16,1": 2e-6},
        sparse_s={},
        elementwise_s=1e-9,
        adam_s=1e-8,
    )
    # the same rates at 2 threads (a worker alone on a 2-core machine)
    two = dataclasses.replace(compute, threads=2)
    return MachineRates(
        cores=cores,
        compute={1: compute, 2: two},
        link_bytes_s=link,
        latency_s=1e-4,
        link_samples=[],
    )


def test_crowded_step_factor_pairs_each_lone_step_with_its_own_round():
    """The machine's speed drifting between rounds (both readings of a round scaled alike) and
    one lone step read 3x long (a neighbour's burst) leave the factor where it is: each round is
    priced against its own lone step and the median drops the outlier. Taking one lone reading
    for every round, as the probe did, gave anything from 1.0 (clamped) to 2.4."""
    from shardgnn.fullgraph.rates import crowded_step_factor

    per_host, cores, factor = 4, 2, 1.8
    speeds = [1.0, 1.6, 0.8, 1.3, 1.1]
    rounds = [(0.008 * s, 0.008 * s * factor * per_host / cores) for s in speeds]
    assert crowded_step_factor(rounds, per_host, cores) == pytest.approx(factor)
    rounds[2] = (3 * rounds[2][0], rounds[2][1])
    assert crowded_step_factor(rounds, per_host, cores) == pytest.approx(factor)
    # the all-reduce's latency and bytes taken off each crowded step; never below the share
    extra = 0.002
    shifted = [(alone, crowded + extra) for alone, crowded in rounds]
    assert crowded_step_factor(shifted, per_host, cores, extra) == pytest.approx(factor)
    assert crowded_step_factor([(0.01, 0.01)], per_host, cores) == 1.0
    # against the first round's lone step alone: the drift moves the factor
    first = rounds[0][0]
    assert crowded_step_factor([(first, c) for _, c in rounds], per_host, cores) != (
        pytest.approx(factor)
    )


def test_probe_rounds_pool_across_launches_and_fit_a_line_no_cost_below_zero():
    """The distributed-sampling probe's launches pool their rounds before the medians (one slow
    launch moves them less than a launch's own median would), and a line through two medians
    never prices a unit or a batch below zero (a faster larger batch is the machine's noise)."""
    from shardgnn.fullgraph.rates import _line, _pooled_medians

    fast = [[[(100, 0.010), (100, 0.011), (100, 0.012)], [(300, 0.020)] * 3]]
    slow = [[[(100, 0.030)] * 3, [(300, 0.040)] * 3]]
    pooled = _pooled_medians([fast, fast, slow])
    assert pooled == [[(100.0, 0.012), (300.0, 0.020)]]
    assert _pooled_medians([slow]) == [[(100.0, 0.030), (300.0, 0.040)]]
    fixed, per_unit = _line(pooled[0])
    assert per_unit == pytest.approx(0.008 / 200) and fixed == pytest.approx(0.008)
    assert _line([(100, 0.02), (300, 0.01)]) == (0.02, 0.0)  # slower small batch: no slope
    # growing faster than the units: nothing fixed, the rate nearest both readings relatively
    fixed, per_unit = _line([(100, 0.01), (300, 0.04)])
    assert fixed == 0.0 and 0.01 / 100 < per_unit < 0.04 / 300
    assert per_unit == pytest.approx((100 / 0.01 + 300 / 0.04) / (1e8 + (300 / 0.04) ** 2))


def test_the_link_probe_pools_its_launches_so_one_slow_moment_moves_no_latency():
    """The link probe's times pool over its launches, per size, the empty exchange's groups
    (one before every size) together: a launch whose empty exchanges all once read 2.8 ms
    (BENCHMARKS 32zb) leaves the latency at the others', and the rate follows the sizes."""
    from shardgnn.fullgraph.rates import fit_link, link_samples

    def launch(empty_s: list[float], per_byte: float) -> list[list[tuple[float, float]]]:
        sizes = (1 << 16, 1 << 20)
        rounds = [[(0.0, t) for t in empty_s]]
        return rounds + [[(float(n), 2e-4 + n * per_byte)] * 3 for n in sizes]

    calm = launch([2e-4] * 6, 1e-9)
    slow = launch([2.8e-3] * 6, 1e-9)
    samples = link_samples([calm, slow, calm])
    assert samples[0] == [0.0, 2e-4] and [s for s, _ in samples] == [0, 1 << 16, 1 << 20]
    rate, latency = fit_link(samples)
    assert latency == 2e-4 and rate == pytest.approx(1e9)
    assert fit_link(link_samples([slow]))[1] == 2.8e-3  # one launch alone: what it read
    # a slow moment inside one launch moves one of its groups of empty exchanges: outvoted
    episode = launch([2e-4, 2e-4, 2.8e-3, 2.8e-3, 2.8e-3, 2e-4], 1e-9)
    assert link_samples([calm, episode, calm])[0][1] == 2e-4


def test_epoch_time_is_the_rates_times_the_counts(graph):
    """1d-sparse on 2 workers of one host, GCN 10 -> 16 -> 3: compute = the busiest worker's
    adjacency entries (in-edges and self-loops) x the SpMMs' seconds per entry (10 and 3 wide
    forward, 3 wide by the transpose backward) + its rows x the linear layers' and element-wise
    seconds + Adam;
    communication = every byte sent (SpMM rows and the gradient ring) over the loopback (both
    directions of the link) + 7 latencies (3 SpMMs and 2 all-reduces, each of the one peer
    twice); one worker per host: its own bytes over one direction."""
    config = PlanConfig(
        model="gcn", workers=(2,), hidden=16, workers_per_host=2, rates="rates.json"
    )
    owner = partition_graph(graph, PartitionConfig(num_parts=2, method="metis")).assignment
    rates = _rates()
    cost = next(c for c in costs_at(graph, owner, 2, config, rates) if c.strategy == "1d-sparse")
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    sizes = np.bincount(owner, minlength=2)
    entries = np.bincount(owner[dst], minlength=2) + sizes
    params = 10 * 16 + 16 + 16 * 3 + 3
    compute = entries * (1e-7 + 3e-8 + 5e-8) + sizes * (1e-6 + 5e-7 + 19 * 1e-9) + params * 1e-8
    assert cost.compute_s == pytest.approx(compute.max(), rel=1e-12)
    ring = 2 * params * 4 // 2
    comm = (cost.bytes_per_epoch + 2 * ring) / (2 * 1e8) + 7 * 1e-4  # loopback: both ways
    assert cost.comm_s == pytest.approx(comm, rel=1e-12)
    assert cost.epoch_s == pytest.approx(cost.compute_s + cost.comm_s, rel=1e-12)
    # one worker per host: each host's link carries only its worker's bytes
    alone = dataclasses.replace(config, workers_per_host=1)
    spread = next(c for c in costs_at(graph, owner, 2, alone, rates) if c.strategy == "1d-sparse")
    # the busiest direction of the busiest host's link: its one worker's bytes out or in
    busiest = max(spread.max_worker_bytes, spread.max_worker_recv)
    ring_bytes = (busiest + ring) / 1e8
    assert spread.comm_s == pytest.approx(ring_bytes + 7 * 1e-4, rel=1e-12)
    assert spread.compute_s == cost.compute_s


def test_workers_sharing_cores_take_their_thread_seconds(graph):
    """Four single-thread workers on a 2-core host take at least half their summed compute; with
    a core each, only the slowest counts."""
    config = PlanConfig(
        model="gcn", workers=(4,), hidden=16, workers_per_host=4, rates="rates.json"
    )
    owner = partition_graph(graph, PartitionConfig(num_parts=4, method="metis")).assignment
    shared = costs_at(graph, owner, 4, config, _rates(cores=2))
    own = costs_at(graph, owner, 4, config, _rates(cores=4))
    for a, b in zip(shared, own):
        assert a.compute_s > b.compute_s
        assert a.compute_s <= 2 * b.compute_s * (1 + 1e-12)


def test_a_slow_link_picks_the_fewest_bytes_and_a_fast_one_the_least_compute(graph):
    """The pick is the shortest predicted epoch: over a very slow link the strategy sending the
    fewest bytes, over an infinitely fast one the least compute."""
    config = PlanConfig(
        model="gcn", workers=(4,), hidden=16, workers_per_host=4, rates="rates.json"
    )
    owner = partition_graph(graph, PartitionConfig(num_parts=4, method="random")).assignment
    slow = costs_at(graph, owner, 4, config, _rates(link=1e3))
    assert recommend(slow)[4].bytes_per_epoch == min(c.bytes_per_epoch for c in slow)
    fast = dataclasses.replace(_rates(link=math.inf), latency_s=0.0)
    costs = costs_at(graph, owner, 4, config, fast)
    assert recommend(costs)[4].compute_s == min(c.compute_s for c in costs)
    assert all(c.comm_s == 0 for c in costs)


def test_dependencies_are_planned_by_time(graph):
    """With rates, the sparse 1D plan is weighed with `--dependencies cache` and `hybrid` too
    (without, they are left out: by bytes alone caching would always win). Over an infinitely
    fast link the hybrid recomputes nothing and is predicted exactly as 1d-sparse (latency
    included); over a very slow one caching exchanges no row but computes more, and the pick
    recomputes; in between the hybrid receives some rows."""
    config = PlanConfig(
        model="gcn", workers=(4,), hidden=16, workers_per_host=4, rates="rates.json"
    )
    owner = partition_graph(graph, PartitionConfig(num_parts=4, method="metis")).assignment
    untimed = [c.label for c in costs_at(graph, owner, 4, config) if c.strategy == "1d-sparse"]
    assert untimed == ["1d-sparse"]

    def sparse_1d(rates):
        return {
            c.label: c
            for c in costs_at(graph, owner, 4, config, rates)
            if c.strategy == "1d-sparse"
        }

    by = sparse_1d(_rates(link=math.inf))
    sparse = by["1d-sparse"]
    hybrid = by["1d-sparse --dependencies hybrid"]
    cache = by["1d-sparse --dependencies cache"]
    assert hybrid.config.dependencies == "hybrid" and hybrid.layout == "hybrid"
    assert (hybrid.bytes_per_epoch, hybrid.max_worker_bytes, hybrid.max_worker_recv) == (
        sparse.bytes_per_epoch, sparse.max_worker_bytes, sparse.max_worker_recv
    )  # fmt: skip
    for key in ("compute_s", "comm_s", "epoch_s"):
        assert getattr(hybrid, key) == pytest.approx(getattr(sparse, key), rel=1e-12), key
    assert cache.bytes_per_epoch == 0 and cache.rows == 0
    assert cache.compute_s > sparse.compute_s and cache.held_mb > sparse.held_mb
    slow = costs_at(graph, owner, 4, config, _rates(link=1e3))
    assert recommend(slow)[4].config.dependencies != "communicate"
    middle = sparse_1d(_rates(link=1e7))
    mixed = middle["1d-sparse --dependencies hybrid"]
    assert 0 < mixed.bytes_per_epoch < middle["1d-sparse"].bytes_per_epoch
    assert mixed.epoch_s < middle["1d-sparse"].epoch_s


def test_rates_round_trip_and_refuse_what_they_did_not_measure(graph):
    rates = _rates()
    assert MachineRates.from_dict(json.loads(json.dumps(rates.to_dict()))) == rates
    config = PlanConfig(
        model="gcn", workers=(2,), hidden=32, workers_per_host=2, rates="rates.json"
    )
    owner = partition_graph(graph, PartitionConfig(num_parts=2, method="metis")).assignment
    from shardgnn.errors import ConfigError

    with pytest.raises(ConfigError, match="no measurement of a 10 -> 32 linear layer"):
        costs_at(graph, owner, 2, config, rates)
    with pytest.raises(ConfigError, match="at 3 threads per worker"):
        rates.at(3)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_calibration_measures_every_rate_the_plan_reads(graph):
    """A real calibration (this machine's kernels, two gloo workers for the link) holds every
    rate each strategy at P = 2 ... 8 reads, all positive and finite (3D's slice widths
    included)."""
    config = PlanConfig(workers=(2, 4, 8), hidden=16, model="sage", rates="rates.json")
    rates = calibrate(workload(graph, config), thread_counts(config, 2), 2)
    assert set(rates.compute) == {2}
    r = rates.compute[2]
    values = [*r.spmm_s.values(), *r.spmm_t_s.values(), *r.linear_s.values()]
    values += [r.elementwise_s, r.adam_s]
    values += [rates.link_bytes_s, rates.latency_s]
    assert all(0 < v < math.inf for v in values)
    assert [s for s, _ in rates.link_samples] == [0, 1 << 16, 1 << 20, 1 << 22, 1 << 24]
    for p in config.workers:
        owner = partition_graph(graph, PartitionConfig(num_parts=p, method="metis")).assignment
        for cost in costs_at(graph, owner, p, config, rates):
            assert 0 < cost.compute_s < math.inf and 0 < cost.comm_s < math.inf, cost


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cli_plan_calibrates_predicts_and_reuses_its_rates(tmp_path, capsys):
    """`--calibrate` adds compute, communication and epoch seconds and picks the fastest; the
    rates it wrote predict the same with `--rates`; `--link-gbit` replaces the measured link (a
    very slow one makes the pick the fewest bytes)."""
    from shardgnn.cli import main

    out = tmp_path / "plan.json"
    flags = ["--workers", "2,4", "--workers-per-host", "4", "--hidden", "16"]
    assert main(["plan", SPEC, *flags, "--calibrate", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # a pick per worker count among the full-graph strategies and among the mini-batch options
    assert printed.count("<- fastest") == 4 and "epoch s" in printed and "link" in printed
    first = json.loads(out.read_text())
    assert first["rates"]["cores"] >= 1
    # every worker on this machine (--workers-per-host 4) reads the others' rows (the plan's
    # default --host-sharing auto, as training's): no byte, and nothing to code or cache
    assert "(mini-batch: --host-sharing auto)" in printed
    batched = first["minibatch_costs"]
    assert [c["option"] for c in batched] == ["exact", "exact"]
    assert all(c["bytes_per_epoch"] == 0 for c in batched)
    # the distributed sampler timed on two workers (through the collectives, and reading each
    # other's parts), and the step: seconds per batch and per edge (the step's input layer's
    # and upper layers' apart). On this tiny graph the two timed batches barely differ, so a
    # fit may give all the time to one of the two terms (the sampler's batch term also less its
    # calls' latency, which the plan adds back), never less than 0 to either
    dist = first["rates"]["dist_sample_s"]
    assert set(dist) == {"batch", "edge", "shared_batch", "shared_edge"}
    assert min(dist.values()) >= 0
    # in the same launch, real historical tables pushed and pulled: their own work per layer
    # and step, and per row (the calls' latency and the rows' link time taken off)
    tables = first["rates"]["history_s"]
    assert set(tables) == {"row", "push_call", "pull_call"} and min(tables.values()) >= 0
    # and a real presample cache in front of the fetch: its own work per batch and per row read
    cache = first["rates"]["cache_s"]
    assert set(cache) == {"batch", "row"} and min(cache.values()) >= 0 and max(cache.values()) > 0
    steps = next(iter(first["rates"]["compute"].values()))["minibatch_s"]
    assert min(steps["step_input_edge"], steps["step_edge"]) >= 0
    assert steps["step_batch"] + steps["step_edge"] > 0
    # the workers a machine would run that fill its cores or more: the crowding probed there
    cores = first["rates"]["cores"]
    assert set(first["rates"]["crowd_s"]) == {str(w) for w in (2, 4) if w >= cores}
    # and the planned step run crowded: at least its fair share of the cores
    crowd_step = first["rates"]["crowd_step"]
    assert set(crowd_step) == set(first["rates"]["crowd_s"]) and min(crowd_step.values()) >= 1
    again = tmp_path / "again.json"
    assert main(["plan", SPEC, *flags, "--rates", str(out), "--out", str(again)]) == 0
    capsys.readouterr()
    second = json.loads(again.read_text())
    for kind in ("costs", "minibatch_costs"):
        assert [c["epoch_s"] for c in second[kind]] == [c["epoch_s"] for c in first[kind]]
    # each pick's flags train it: here on this machine (all four workers on it, as planned)
    for kind in ("full graph", "mini-batch"):
        pick = second["pick_flags"][kind]["2"]
        assert pick[:2] == ["--workers", "2"]
        assert main(["train", SPEC, *pick, "--epochs", "1", "--quiet"]) == 0, pick
    capsys.readouterr()
    fixed = tmp_path / "fixed.json"
    assert main(["plan", SPEC, *flags, "--rates", str(out), "--latency-us", "7",
                 "--out", str(fixed)]) == 0  # fmt: skip
    capsys.readouterr()
    assert json.loads(fixed.read_text())["rates"]["latency_s"] == pytest.approx(7e-6)
    slow = tmp_path / "slow.json"
    assert main(["plan", SPEC, *flags, "--rates", str(out), "--link-gbit", "0.00001",
                 "--out", str(slow)]) == 0  # fmt: skip
    capsys.readouterr()
    costs = json.loads(slow.read_text())["costs"]
    for p in (2, 4):
        mine = [c for c in costs if c["workers"] == p]
        pick = min(mine, key=lambda c: c["epoch_s"])
        assert pick["bytes_per_epoch"] == min(c["bytes_per_epoch"] for c in mine)


def test_cli_plan_refuses_time_flags_without_rates(tmp_path, capsys):
    """Epoch-time flags without rates, both sources at once, and a file that is not a plan's
    JSON: one line each."""
    from shardgnn.cli import main

    assert main(["plan", SPEC, "--workers", "2", "--workers-per-host", "2"]) == 2
    assert "--workers-per-host 2: applies to epoch times" in capsys.readouterr().err
    assert main(["plan", SPEC, "--workers", "2", "--link-gbit", "10"]) == 2
    assert "--link-gbit 10.0: applies to epoch times" in capsys.readouterr().err
    assert main(["plan", SPEC, "--workers", "2", "--latency-us", "20"]) == 2
    assert "--latency-us 20.0: applies to epoch times" in capsys.readouterr().err
    assert main(["plan", SPEC, "--calibrate", "--rates", "x.json"]) == 2
    assert "not both" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"costs": []}')
    assert main(["plan", SPEC, "--workers", "2", "--rates", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--rates {bad}: not the JSON of `shardgnn plan --calibrate" in err
    assert err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.multiprocess
def test_spmm_auto_with_plan_rates_trains_the_fastest_predicted(tmp_path, capsys):
    """`--spmm auto --plan-rates FILE` runs the strategy with the shortest predicted epoch for
    the partition (all workers on this machine), says so in one line, and records what ran;
    over a link this slow that is the strategy sending the fewest bytes in all (1d-sparse
    caching every remote dependency), over a faster one the hybrid, which keeps the rates file
    to price each remote node with."""
    from shardgnn.cli import main
    from shardgnn.fullgraph.config import FullGraphConfig
    from shardgnn.fullgraph.plan import auto_spmm
    from shardgnn.partition.format import read_partitions

    spec = "synthetic:nodes=1500,degree=12,classes=3,features=9,seed=2"
    parts = tmp_path / "parts"
    assert main(["partition", spec, "--parts", "4", "--method", "random", "--out", str(parts),
                 "--quiet"]) == 0  # fmt: skip
    rates = _rates(link=1e3)
    rates.compute[1].linear_s.update({"9,12,0": 1e-6, "12,3,1": 5e-7})
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({"rates": rates.to_dict()}))
    full = FullGraphConfig(spmm="auto")
    pset = read_partitions(parts, verify=False)
    model = ModelConfig(model="gcn", hidden=12, num_layers=2)
    chosen, pick, costs = auto_spmm(pset, model, full, 3, 4, plan_rates=str(path))
    assert pick.bytes_per_epoch == min(c.bytes_per_epoch for c in costs)
    assert chosen.spmm == pick.strategy == "1d-sparse"  # no row exchanged: cached
    assert chosen.dependencies == pick.config.dependencies == "cache"
    out = tmp_path / "auto.json"
    flags = ["--mode", "full", "--model", "gcn", "--hidden", "12", "--layers", "2",
             "--epochs", "1", "--spmm", "auto", "--plan-rates", str(path), "--quiet",
             "--results", str(out)]  # fmt: skip
    assert main(["train", "--partitions", str(parts), *flags]) == 0
    name = pick.label
    assert f"--spmm auto: {name}: the shortest predicted epoch" in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["spmm"] == pick.strategy
    assert results["dependencies"]["mode"] == "cache"
    # over a faster link the hybrid: it prices each remote node with the same rates
    rates.link_bytes_s = 1e8
    path.write_text(json.dumps({"rates": rates.to_dict()}))
    chosen, pick, _ = auto_spmm(pset, model, full, 3, 4, plan_rates=str(path))
    assert chosen.dependencies == "hybrid"
    assert main(["train", "--partitions", str(parts), *flags]) == 0
    said = "--spmm auto: 1d-sparse --dependencies hybrid: the shortest predicted epoch"
    assert said in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["dependencies"]["mode"] == "hybrid"
    assert results["config"]["plan_rates"] == str(path)  # what hybrid priced with
    # a flag that does not apply is refused
    assert main(["train", "--partitions", str(parts), *flags, "--spmm", "1d"]) == 2
    assert "needs --spmm auto or --dependencies hybrid (got --spmm 1d)" in capsys.readouterr().err


def test_link_probe_refuses_to_run_outside_a_two_worker_job(tmp_path, monkeypatch, capsys):
    """`python -m shardgnn.fullgraph.rates` measures the link between two machines' workers: run
    any other way it says how in one line; a file that is not its output is refused by
    `plan --calibrate --link` in one line."""
    from shardgnn.cli import main
    from shardgnn.fullgraph.rates import main as probe_main

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="run it under torchrun with 2 workers in all"):
        probe_main(["--out", str(tmp_path / "link.json")])
    assert main(["plan", SPEC, "--workers", "2", "--link", "x.json"]) == 2
    assert "--link x.json: applies to a calibration: add --calibrate" in capsys.readouterr().err
    bad = tmp_path / "link.json"
    bad.write_text('{"link_samples": [[0, 0.001]]}')
    assert main(["plan", SPEC, "--workers", "2", "--calibrate", "--link", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--link {bad}: not the JSON of `python -m shardgnn.fullgraph.rates" in err


def test_plan_refuses_bad_flags_before_partitioning(capsys):
    """`shardgnn plan` refuses a flag it cannot use before it loads, partitions or calibrates
    anything: a bad --cache-size was refused only after the first partition (and calibration),
    and a worker count named twice was planned twice."""
    from shardgnn.cli import main

    for flags, said in [
        (["--cache-size", "-1"], "--cache-size '-1' is not understood"),
        (["--cache-size", "150%"], "must lie in (0, 100%]"),
        (["--workers", "2,4,2"], "--workers 2,4,2: names a worker count twice"),
    ]:
        # a dataset that cannot load: the refusal must come first
        assert main(["plan", "nothere:", *flags, "--calibrate"]) == 2, flags
        err = capsys.readouterr().err
        assert said in err and "unknown dataset" not in err and "Traceback" not in err, err


def test_plot_draws_a_plans_bytes_and_times_per_strategy(tmp_path, capsys):
    """`shardgnn plot PLAN.json` draws plan_PLAN.png (bytes from the busiest worker and, for a
    plan with times, predicted epoch seconds against the worker count) and never replaces it
    without --overwrite."""
    from shardgnn.cli import main

    rates = tmp_path / "rates.json"
    hand = _rates()
    hand.compute[1].linear_s.update({"10,16,0": 1e-6, "16,3,1": 5e-7})
    steps = {"sample_batch": 1e-3, "sample_edge": 1e-7, "step_batch": 2e-3, "step_edge": 3e-7}
    steps.update({"encode8_value": 2e-9, "decode8_value": 1e-9})
    hand.compute[1].minibatch_s.update(steps)
    # 4 and 8 workers on the 2 cores: each collective call waits for descheduled peers
    hand.crowd_s.update({4: {1e-3: 1e-3}, 8: {1e-3: 3e-3}})
    rates.write_text(json.dumps({"rates": hand.to_dict()}))
    timed, untimed = tmp_path / "timed.json", tmp_path / "untimed.json"
    flags = ["--workers", "2,4,8", "--hidden", "16", "--method", "random"]
    assert main(["plan", SPEC, *flags, "--rates", str(rates), "--workers-per-host", "8",
                 "--out", str(timed)]) == 0  # fmt: skip
    assert main(["plan", SPEC, *flags, "--out", str(untimed)]) == 0
    out = tmp_path / "plots"
    assert main(["plot", str(timed), str(untimed), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("plan_timed.png", "plan_untimed.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and name in printed
    assert not (out / "training_curves.png").exists()  # plans are not results
    assert main(["plot", str(timed), "--out", str(out)]) == 2
    assert "plan_timed.png" in capsys.readouterr().err


def test_a_step_growing_faster_than_its_edges_is_fitted_nearest_its_readings():
    """The step probe's three readings (two batches, the larger with its upper layers served)
    give three costs, exactly where none comes out below nought; a step whose time grows faster
    than its edges (measured: 4.7x the time for 3.1x the input edges) has no such exact fit, and
    the nearest fit in relative terms with no cost below nought is within 12 % of every reading,
    where holding the exact solve's negative fixed cost at nought priced them up to 33 % over."""
    from shardgnn.fullgraph.rates import _fit_nonnegative, _fit_step, probe_sizes

    units = np.array([[1.0, 2.0, 3.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]])
    assert _fit_nonnegative(units, units @ np.array([0.5, 0.2, 0.1])) == pytest.approx(
        [0.5, 0.2, 0.1]
    )
    edges, seconds = [(20394, 2272), (63185, 9286), (9286, 9286)], [6.83e-3, 32.21e-3, 24.95e-3]
    fitted = _fit_step(edges, seconds)
    assert min(fitted.values()) >= 0 and fitted["step_input_edge"] > 0
    predicted = [
        fitted["step_batch"] + i * fitted["step_input_edge"] + u * fitted["step_edge"]
        for i, u in edges
    ]
    assert max(abs(p / t - 1) for p, t in zip(predicted, seconds)) < 0.12
    # exact where the readings allow it
    exact = _fit_step(edges, [1e-3 + i * 1e-7 + u * 1e-6 for i, u in edges])
    assert exact == pytest.approx({"step_batch": 1e-3, "step_input_edge": 1e-7, "step_edge": 1e-6})
    # the probes time the planned batch and a quarter of it, never a larger one
    step = MiniBatchWork(
        fanouts=(5,),
        model="sage",
        hidden=8,
        out_dim=2,
        train_idx=np.arange(1000),
        batch_sizes=(256,),
    )
    assert probe_sizes(step) == [64, 256]
    assert probe_sizes(dataclasses.replace(step, batch_sizes=(256, 32, 4096))) == [32, 1000]
    assert probe_sizes(dataclasses.replace(step, batch_sizes=(1,))) == [1, 1]


def test_probe_lines_need_units_far_enough_apart_to_tell_a_slope():
    """Two probe readings make a line (fixed seconds, seconds per unit), whatever their order;
    where their units are within 10 % of each other (a small graph's larger probe batch found no
    more edges to sample) the time is proportional to the units, so the readings are priced at
    what they measured: the slope of their noise priced an edge at 0.55 ms."""
    from shardgnn.fullgraph.rates import _line

    assert _line([(100, 1.0), (400, 2.5)]) == pytest.approx((0.5, 0.005))
    assert _line([(400, 2.5), (100, 1.0)]) == pytest.approx((0.5, 0.005))
    assert _line([(100, 1.0), (400, 0.5)]) == pytest.approx((1.0, 0.0))  # noise: no slope
    close = [(10165.0, 0.00728), (10055.0, 0.00648)]
    fixed, per_edge = _line(close)
    assert fixed == 0.0 and per_edge < 1e-6
    assert fixed + per_edge * 10110.0 == pytest.approx(0.00688)
    assert _line([(0.0, 0.002), (0.0, 0.004)]) == pytest.approx((0.003, 0.0))
