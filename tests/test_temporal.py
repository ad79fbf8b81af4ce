"""Temporal graphs (issue 17, first part): the T-CSR, event ingest with its errors, the synthetic
stream, and the temporal neighbour sampler (never the future; most-recent is exactly the latest
events; uniform draws depend only on the seed)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from shardgnn.errors import DatasetError
from shardgnn.graph.synthetic_temporal import TemporalStreamConfig, generate_temporal
from shardgnn.graph.temporal import TemporalGraph, load_temporal_events
from shardgnn.sampling.temporal import TemporalNeighborSampler, sample_temporal_neighbors

from conftest import SHARED_DATA, requires_shared_data


@pytest.fixture(scope="module")
def stream():
    return generate_temporal(TemporalStreamConfig(nodes=300, events=5000, seed=2))


def incident(graph, v):
    """Brute force: ``(time, event id, other endpoint)`` of every event in ``v``'s row."""
    out = [(graph.t[e], e, graph.src[e]) for e in np.flatnonzero(graph.dst == v)]
    if not graph.directed:
        out += [(graph.t[e], e, graph.dst[e]) for e in np.flatnonzero(graph.src == v)]
    return sorted(out)


@pytest.mark.parametrize("directed", [False, True])
def test_tcsr_rows_hold_every_incident_event_sorted_by_time(directed):
    g = generate_temporal(TemporalStreamConfig(nodes=50, events=400, seed=1))
    g = TemporalGraph.from_events(g.src, g.dst, g.t, num_nodes=50, directed=directed)
    g.validate()
    for v in range(50):
        row = slice(g.indptr[v], g.indptr[v + 1])
        got = list(zip(g.times[row], g.eids[row], g.indices[row]))
        assert got == incident(g, v)


def test_synthetic_stream_is_deterministic_and_pairs_recur():
    a = generate_temporal(TemporalStreamConfig(nodes=1000, events=20000, seed=4))
    b = generate_temporal(TemporalStreamConfig(nodes=1000, events=20000, seed=4))
    np.testing.assert_array_equal(a.src, b.src)
    np.testing.assert_array_equal(a.t, b.t)
    assert np.all(np.diff(a.t) > 0) and np.all(a.src != a.dst)
    pairs = np.unique(a.src * 1000 + a.dst).size
    fresh = generate_temporal(TemporalStreamConfig(nodes=1000, events=20000, recurrence=0.0))
    # recurring pairs: far fewer distinct pairs than a stream without partners
    assert pairs < 0.7 * np.unique(fresh.src * 1000 + fresh.dst).size


@pytest.mark.parametrize("mode", ["recent", "uniform"])
def test_sampler_never_returns_an_event_at_or_after_the_seed_time(stream, mode):
    rng = np.random.default_rng(0)
    nodes = rng.integers(0, stream.num_nodes, 400)
    times = rng.choice(stream.t, 400)  # seed times that are event times: ties must be excluded
    hops = TemporalNeighborSampler(stream, [5, 3], mode).sample_hops(nodes, times, seed=7)
    for hop in hops:
        seed_time = np.repeat(hop.dst_times, np.diff(hop.offsets))
        assert np.all(hop.nbr_times < seed_time)
        # every returned event is real, incident to its seed, at the time it says
        row_node = np.repeat(hop.dst_nodes, np.diff(hop.offsets))
        ends = np.stack([stream.src[hop.eids], stream.dst[hop.eids]])
        assert np.all((ends == row_node).any(axis=0))
        np.testing.assert_array_equal(stream.t[hop.eids], hop.nbr_times)
    assert hops[1].dst_nodes.size == hops[0].num_events  # hop 2 starts from hop 1's events


def test_most_recent_is_exactly_the_k_latest_events(stream):
    rng = np.random.default_rng(1)
    nodes = rng.integers(0, stream.num_nodes, 200)
    times = rng.uniform(stream.t[0], stream.t[-1], 200)
    hop = sample_temporal_neighbors(stream, nodes, times, 4, "recent")
    for i, (v, t) in enumerate(zip(nodes, times)):
        before = [e for e in incident(stream, v) if e[0] < t]
        expect = [e[1] for e in reversed(before[-4:])]  # latest first
        assert hop.eids[hop.offsets[i] : hop.offsets[i + 1]].tolist() == expect


def test_uniform_draws_are_distinct_and_depend_only_on_the_seed(stream):
    rng = np.random.default_rng(2)
    nodes = rng.integers(0, stream.num_nodes, 300)
    times = rng.uniform(stream.t[0], stream.t[-1], 300)
    hop = sample_temporal_neighbors(stream, nodes, times, 3, "uniform", seed=5)
    counts = np.diff(hop.offsets)
    for i in range(300):
        eids = hop.eids[hop.offsets[i] : hop.offsets[i + 1]]
        assert len(set(eids.tolist())) == len(eids)
        available = sum(1 for e in incident(stream, nodes[i]) if e[0] < times[i])
        assert counts[i] == min(3, available)
    # a seed's draw does not depend on the rest of the batch
    alone = sample_temporal_neighbors(stream, nodes[7:9], times[7:9], 3, "uniform", seed=5)
    np.testing.assert_array_equal(alone.eids, hop.eids[hop.offsets[7] : hop.offsets[9]])
    other = sample_temporal_neighbors(stream, nodes, times, 3, "uniform", seed=6)
    assert not np.array_equal(other.eids, hop.eids)


def write(tmp_path, text, name="events.txt"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_event_files_load_with_header_features_and_one_based_ids(tmp_path):
    path = write(tmp_path, "src,dst,time,f0,f1\n1,2,10,0.5,1\n2,3,11,1.5,2\n3,1,11,2.5,3\n")
    g = load_temporal_events(path)
    assert g.num_nodes == 3 and g.num_events == 3
    assert g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 0]
    np.testing.assert_array_equal(g.edge_feat, [[0.5, 1], [1.5, 2], [2.5, 3]])


def test_a_jodie_header_after_comment_lines_is_skipped(tmp_path):
    """JODIE's own header (``user_id,item_id,timestamp,state_label,features``) names the columns
    in the order they are read; comment lines may come before it."""
    header = "# wikipedia, JODIE format\nuser_id,item_id,timestamp,state_label,f0\n"
    g = load_temporal_events(write(tmp_path, header + "0,0,1,0,0.5\n1,0,2,1,1.5\n"), labels=True)
    assert g.num_events == 2 and g.t.tolist() == [1, 2]
    with pytest.raises(DatasetError, match="line 4: time -3.0"):
        load_temporal_events(write(tmp_path, header + "0,0,1,0,0.5\n1,0,-3,1,1.5\n"), labels=True)


def test_unsorted_events_are_sorted_with_a_warning(tmp_path):
    path = write(tmp_path, "0 1 5\n1 2 3\n2 0 4\n")
    with pytest.warns(UserWarning, match="3 of 3 events were not in time order; sorted"):
        g = load_temporal_events(path, base=0)
    assert g.t.tolist() == [3, 4, 5] and g.src.tolist() == [1, 2, 0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("0 1 5\n1 2 soon\n", "line 2: 'soon' is not a time: times are numbers"),
        # Reddit's hyperlink events name their nodes and date their events
        (
            "src,dst,t\nalice,bob,1\n",
            "line 2: 'alice' is not a node id: the events read here "
            "number their nodes\n  fix: number the nodes first",
        ),
        ("1,2,2014-01-01 02:51:13\n", "line 1: '2014-01-01' is not a time"),
        ("0 1 5 0.1\n1 2 6 x\n", "not a valid float64 number at line 2: b'x'"),
        ("0 1 5\n1 2 -3\n", "line 2: time -3.0 is not a finite non-negative number"),
        ("0 1 5 0.1\n1 2 6 0.1 0.2\n", "line 2"),
        ("0 1.5 5\n", "line 1: node ids [0.0, 1.5] are not non-negative integers"),
        ("0 1\n", "an event is SRC DST TIME"),
        ("item user time\n0 1 5\n", "names column 1 'item', a destination, but the columns"),
        ("# c\nsrc dst weight time\n0 1 5 1\n", "(line 2) names column 3 'weight', a weight"),
    ],
)
def test_bad_event_files_get_one_clear_error(tmp_path, text, message):
    with pytest.raises(DatasetError, match=re.escape(message)):
        load_temporal_events(write(tmp_path, text), base=0)


@pytest.mark.parametrize("labels", [False, True])
def test_non_finite_event_features_are_refused_by_line_or_zeroed(tmp_path, labels, capsys):
    """The line named is the file's even when the rows are sorted afterwards; the label column
    is not a feature; ``nonfinite=zero`` is the dataset option, as for node features."""
    from shardgnn.cli import main
    from shardgnn.graph.datasets import load_temporal_dataset

    label = "0 " if labels else ""
    rows = [
        f"0 1 9 {label}0.5 1",
        f"1 2 3 {label}0.5 2",
        f"2 0 4 {label}nan inf",
        f"1 0 5 {label}1 2",
    ]
    path = write(tmp_path, "\n".join(rows) + "\n")
    spec = f"temporal:{path}" + (",labels=1" if labels else "")
    with pytest.warns(UserWarning, match="not in time order"):
        with pytest.raises(DatasetError, match=r"2 non-finite event feature values in 1 row "
                           r"\(the first: line 3\)"):  # fmt: skip
            load_temporal_dataset(spec, tmp_path)
        with pytest.warns(
            UserWarning, match="replaced 2 non-finite event feature values in 1 row by 0"
        ):
            g = load_temporal_dataset(spec + ",nonfinite=zero", tmp_path)
    assert g.t.tolist() == [3, 4, 5, 9]
    np.testing.assert_array_equal(g.edge_feat, [[0.5, 2], [0, 0], [1, 2], [0.5, 1]])
    assert main(["info", spec]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error" in line]
    assert "events.txt: 2 non-finite event feature values in 1 row (the first: line 3)" in line
    assert "temporal:FILE,nonfinite=zero" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "t, feat, message",
    [
        ([0.0, np.nan, 2.0], None, "event 1's time nan is not a finite non-negative number"),
        ([0.0, 1.0, np.inf], None, "event 2's time inf is not a finite non-negative number"),
        ([-1.0, 1.0, 2.0], None, "event 0's time -1.0 is not a finite non-negative number"),
        (["0", "1", "noon"], None, r"event times must be numbers \(could not convert string "
         r"to float: 'noon'\)"),
        ([0.0, 1.0, 2.0], [[1.0], [1.0], [np.nan]], r"1 non-finite event feature value in 1 row "
         r"\(the first: row 2, counted from 0\)"),
    ],
)  # fmt: skip
def test_events_built_in_python_refuse_what_a_file_would_be_refused(t, feat, message):
    """NaN times pass the time-order check (every comparison with NaN is false) and NaN
    features would train to a NaN loss: ``from_events`` refuses both, as the file reader does."""
    feat = None if feat is None else np.asarray(feat, dtype=np.float32)
    with pytest.raises(DatasetError, match=message) as caught:
        TemporalGraph.from_events([0, 1, 2], [1, 2, 0], t, feat, name="served")
    assert str(caught.value).startswith("served: ")


def test_serving_inputs_outside_the_graph_are_refused():
    """What a serving stack feeds the samplers (README, Serving): a node past the end was
    sampled from another row's memory, a NaN time or a node -1 gave an empty hop, and a walk
    from a node past the end crashed the process; each is one line now."""
    from shardgnn.errors import ConfigError
    from shardgnn.graph.csr import csr_from_edges
    from shardgnn.sampling.walks import node_walks

    stream = TemporalGraph.from_events([0, 1, 2], [1, 2, 0], [1.0, 2.0, 3.0])
    sampler = TemporalNeighborSampler(stream, [2], "uniform")
    assert sampler.sample_hops(np.array([0]), np.array([5.0]))[0].nbr.size == 2
    for nodes, times, message in (
        ([7], [5.0], r"seed node 7 is no node here \(3 rows from 0\)"),
        ([-1], [5.0], "seed node -1 is no node here"),
        ([0], [np.nan], "a seed time is NaN"),
    ):
        with pytest.raises(ConfigError, match=message):
            sampler.sample_hops(np.array(nodes), np.array(times))
    indptr, indices, _ = csr_from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), 3)
    assert node_walks(indptr, indices, np.array([0]), 2, 3, seed=0).shape == (1, 2, 4)
    for start in (3, -1):
        with pytest.raises(ConfigError, match=f"walk start {start} is no node of a graph of 3"):
            node_walks(indptr, indices, np.array([start]), 2, 3, seed=0)
    with pytest.raises(DatasetError, match=r"edge ids must lie in \[0, 3\), found range \[-1, 5\]"):
        csr_from_edges(np.array([-1, 0]), np.array([0, 5]), 3)


@requires_shared_data
def test_collegemsg_loads_with_snap_counts():
    from shardgnn.graph.datasets import load_temporal_dataset

    g = load_temporal_dataset("collegemsg", SHARED_DATA)
    assert (g.num_nodes, g.num_events) == (1899, 59835)
    assert g.summary()["distinct_pairs"] == 20296  # SNAP's static edge count
    hop = sample_temporal_neighbors(g, g.src[-100:], g.t[-100:], 10)
    assert np.all(hop.nbr_times < np.repeat(g.t[-100:], np.diff(hop.offsets)))


@pytest.mark.parametrize(
    "spec, message, fix",
    [
        (
            "synthetic-temporal:nodes=5,partners=8",
            "options nodes=5, partners=8 break the rule 1 <= partners < nodes",
            "change nodes or partners in the spec: synthetic-temporal:nodes=VALUE",
        ),
        (  # the parenthesis' "events" is no option
            "synthetic-temporal:classes=4",
            "options features=0, classes=4 break the rule classes > 0 needs features >= 1 (the",
            "change features or classes in the spec",
        ),
        (
            "synthetic-temporal:drift=2",
            "option drift=2.0 breaks the rule drift in [0, 1]",
            "change drift in the spec",
        ),
        (
            "synthetic-hetero:fields=2",
            "options fields=2, classes=8 break the rule fields >= classes >= 1",
            "change fields or classes in the spec",
        ),
        (  # a rule that spells its value out
            "synthetic-hetero:labels=foo",
            "synthetic-hetero: labels=foo must be one of class",
            "change labels in the spec",
        ),
    ],
)
def test_a_generator_option_that_breaks_a_rule_names_its_value(capsys, spec, message, fix):
    from shardgnn.cli import main

    assert main(["info", spec]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and message in err[0] and err[1].startswith(f"  fix: {fix}"), err
    assert "Config(" not in err[0]  # not the whole settings object


def test_cli_shows_a_temporal_dataset_and_says_how_to_train_it(capsys):
    from shardgnn.cli import main

    assert main(["info", "synthetic-temporal:nodes=50,events=100", "--json"]) == 0
    assert '"num_events": 100' in capsys.readouterr().out
    # nothing given, its recipe trains it (temporal link prediction with TGN); what is given
    # explicitly and does not fit is refused
    assert main(["train", "synthetic-temporal:nodes=50,events=100", "--task", "graph"]) == 2
    assert "predicts future events (--task link)" in capsys.readouterr().err
    assert main(["train", "synthetic-temporal:nodes=50,events=100", "--task", "node"]) == 2
    assert "carries no event labels" in capsys.readouterr().err
    link_sage = ["--task", "link", "--model", "sage"]
    assert main(["train", "synthetic-temporal:nodes=50,events=100", *link_sage]) == 2
    assert "use --model tgn, jodie or tgat" in capsys.readouterr().err
    assert main(["train", "cora", "--task", "link", "--model", "tgn"]) == 2
    assert "has none; use a temporal dataset" in capsys.readouterr().err
    snapshots = ["--task", "link", "--model", "tgcn", "--workers", "2"]
    assert main(["train", "synthetic-temporal:nodes=50,events=100", *snapshots]) == 2
    assert "on snapshots in one process: drop --workers" in capsys.readouterr().err
    tgn = ["--task", "link", "--model", "tgn"]
    assert main(["train", "synthetic-temporal:nodes=50,events=100", *tgn, "--heads", "3"]) == 2
    assert "give a multiple of 3" in capsys.readouterr().err


def test_recent_subgraph_is_the_recent_hop_relabelled(stream):
    """TGN's batch neighbourhood in one pass: the same events as the recent hop, with local ids
    that point back at the right nodes (and the scratch map left clean for the next batch)."""
    sampler = TemporalNeighborSampler(stream, [6])
    rng = np.random.default_rng(3)
    # a chronological stream of batches (per-node cursors), then times going back (binary
    # search), then forward again
    batch_times = [*np.linspace(stream.t[100], stream.t[-1], 8), stream.t[50], stream.t[-1]]
    for when in batch_times:
        nodes = np.unique(rng.integers(0, stream.num_nodes, 120))
        times = np.full(nodes.size, when)
        n_id, edge_index, eids = sampler.recent_subgraph(nodes, times)
        hop = sample_temporal_neighbors(stream, nodes, times, 6, "recent")
        np.testing.assert_array_equal(eids, hop.eids)
        np.testing.assert_array_equal(n_id[edge_index[0]], hop.nbr)
        np.testing.assert_array_equal(n_id[edge_index[1]], np.repeat(nodes, np.diff(hop.offsets)))
        assert np.unique(n_id).size == n_id.size and n_id[: nodes.size].tolist() == nodes.tolist()
        assert np.all(sampler._node_map == -1)


# ------------------------------------------------------------------------------ distributed
def _dist_hops(ctx, path, seed_lists, time_lists, fanout):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.sampling.dist_temporal import dist_temporal_hop
    from shardgnn.store.dist_graph import DistGraphStore

    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    store = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm)
    out = []
    for mode in ("recent", "uniform"):
        hop = dist_temporal_hop(
            store, comm, np.asarray(seed_lists[ctx.rank]), np.asarray(time_lists[ctx.rank]),
            fanout, mode, seed=11,
        )  # fmt: skip
        out.append((hop.offsets, hop.nbr, hop.nbr_times, hop.eids))
    return out


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 3])
def test_distributed_temporal_sampling_equals_one_process(tmp_path, stream, world):
    """Each seed's events drawn by its node's owner (recent and uniform) are one process's
    draws on the reassembled T-CSR, whichever rank asks; a rank without seeds still serves."""
    import types

    from shardgnn.partition.format import read_partitions
    from shardgnn.partition.methods import random_partition
    from shardgnn.partition.temporal import write_temporal_partitions

    from distributed_helpers import run_workers

    path = tmp_path / "parts"
    assignment = random_partition(stream.num_nodes, world, seed=0)
    pset = write_temporal_partitions(stream, assignment, path, method="random")
    parts = [pset.load_part(p) for p in range(world)]
    ends = np.cumsum([0] + [p.num_edges for p in parts])
    new = types.SimpleNamespace(
        indptr=np.concatenate([[0]] + [np.asarray(p.indptr[1:]) + e for p, e in zip(parts, ends)]),
        indices=np.concatenate([np.asarray(p.indices) for p in parts]).astype(np.int64),
        times=np.concatenate([np.asarray(p.edge_arrays["times"]) for p in parts]),
        eids=np.concatenate([np.asarray(p.edge_arrays["eids"]) for p in parts]),
    )
    assert read_partitions(path).meta["temporal"]["num_events"] == stream.num_events
    rng = np.random.default_rng(5)
    seed_lists = [rng.integers(0, stream.num_nodes, 80).tolist() for _ in range(world)]
    time_lists = [rng.uniform(stream.t[0], stream.t[-1], 80).tolist() for _ in range(world)]
    seed_lists[-1], time_lists[-1] = [], []
    results = run_workers(_dist_hops, world, str(path), seed_lists, time_lists, 4)
    for rank, hops in enumerate(results):
        for mode, got in zip(("recent", "uniform"), hops):
            want = sample_temporal_neighbors(
                new, np.asarray(seed_lists[rank], np.int64), np.asarray(time_lists[rank]), 4,
                mode, seed=11,
            )  # fmt: skip
            for g, w in zip(got, (want.offsets, want.nbr, want.nbr_times, want.eids)):
                np.testing.assert_array_equal(g, w)
