"""`shardgnn plan`'s mini-batch rows (:mod:`shardgnn.fullgraph.minibatch_plan`): the sampling and
fetch bytes of one epoch of P workers, counted from an epoch sampled in one process, with 8-bit
rows and a presample cache; predicted against the counters of measured runs at P = 2, 3, 4."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from shardgnn.errors import ConfigError
from shardgnn.fullgraph.minibatch_plan import (
    HistoryPlan,
    batch_activation_bytes,
    batch_shape,
    cache_misses,
    measured_batch_bytes,
    minibatch_costs,
    sample_epoch,
    sharing_hosts,
)
from shardgnn.fullgraph.rates import ComputeRates, MachineRates
from shardgnn.graph.datasets import load_dataset
from shardgnn.partition.methods import PartitionConfig, partition_graph

SPEC = "synthetic:nodes=3000,degree=8,classes=4,features=12"


@pytest.fixture(scope="module")
def graph():
    return load_dataset(SPEC)


def degree_bag_of_words(graph):
    """``graph`` with bag-of-words rows: 5 % of its features non-zero on average, a node's
    share in proportion to its degree (as on coauthor-cs, where a well-connected author's row
    holds more keywords), so the rows sampling reads are denser than the mean row."""
    rng = np.random.default_rng(0)
    degree = np.diff(graph.indptr)
    kept = np.minimum(1.0, 0.05 * degree / degree.mean())[:, None]
    x = (graph.x * (rng.random(graph.x.shape) < kept)).astype(np.float32)
    return dataclasses.replace(graph, x=x)


def _costs(graph, workers, **kw):
    owner = partition_graph(graph, PartitionConfig(num_parts=workers, method="metis")).assignment
    settings = dict(model="sage", hidden=16, fanouts=(5, 5), batch_size=128, cache_size="20%")
    return owner, minibatch_costs(graph, owner, workers, **{**settings, **kw})


def test_the_options_send_what_they_save(graph):
    """One sampled epoch serves every option: sampling bytes equal; 8-bit rows cut the fetch
    bytes by the codec's ratio (row payload 12 + 8 bytes of scale and offset against 48, plus the
    same int64 requests); the cache serves a share of the reads and fetches only the rest."""
    _, costs = _costs(graph, 2)
    exact, low, cache, both = costs
    assert len({c.sample_bytes for c in costs}) == 1 and exact.sample_bytes > 0
    assert low.fetch_rows == exact.fetch_rows and low.fetch_bytes < exact.fetch_bytes / 1.5
    assert 0 < cache.hit_rate < 1 and cache.hit_rate == both.hit_rate
    assert cache.fetch_rows == pytest.approx(exact.fetch_rows * (1 - cache.hit_rate), abs=1)
    assert both.fetch_bytes < min(low.fetch_bytes, cache.fetch_bytes)
    assert cache.held_mb > exact.held_mb  # the cache's rows
    assert cache.flags == ("--cache-policy", "presample", "--cache-size", "20%")
    assert exact.bytes_per_epoch == exact.sample_bytes + exact.fetch_bytes


def test_one_worker_sends_nothing_and_the_counts_follow_the_blocks(graph):
    """P = 1: no remote row, no byte. P = 2: the remote frontier rows and remote input rows are
    those of the blocks that the sampler draws for each worker's own seeds."""
    _, (one, *_) = _costs(graph, 1)
    assert one.bytes_per_epoch == 0 and one.fetch_rows == 0
    owner, (exact, *_) = _costs(graph, 2)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0)
    assert np.trace(epoch.frontier) == 0 and np.trace(epoch.edges) == 0
    assert exact.fetch_rows == sum(ids.size for ids in epoch.inputs)
    for w in range(2):
        assert (owner[epoch.inputs[w]] != w).all()
    assert epoch.batches == -(-max(np.bincount(owner[graph.train_idx])) // 64)


def test_sparse_replies_are_priced_at_the_fetched_rows_non_zeros():
    """Owners of mostly-zero rows reply with the fetched rows' own non-zeros (a 4-byte count a
    row, 8 bytes a non-zero): where well-connected nodes' rows hold more non-zeros, as on
    coauthor-cs, the rows sampling fetches are denser than the mean row, and the plan's exact
    fetch bytes are those rows' to the byte (int64 requests, the replies, each call's row
    counts and each reply's form word)."""
    wide = degree_bag_of_words(load_dataset("synthetic:nodes=3000,degree=8,classes=4,features=200"))
    nonzeros_N = np.count_nonzero(wide.x, axis=1)
    owner, (exact, *_) = _costs(wide, 2)
    epoch = sample_epoch(wide, owner, 2, (5, 5), 128, 0)
    fetched = np.concatenate(epoch.inputs)
    assert nonzeros_N[fetched].mean() > 1.3 * nonzeros_N.mean()
    calls = 2 * 8 * epoch.batches + 4 * epoch.batches  # per worker: two row counts, a form word
    replies = 8 * fetched.size + 4 * fetched.size + 8 * int(nonzeros_N[fetched].sum())
    assert exact.fetch_bytes == replies + 2 * calls
    misses = cache_misses(epoch, None, owner, 2, nonzeros_N)
    assert misses.nonzeros.sum() == nonzeros_N[fetched].sum() and misses.hit_rate == 0.0


@pytest.mark.parametrize(
    "model,layers,dropout,input_dropout",
    [("sage", 2, 0.5, 0.2), ("gcn", 2, 0.5, 0.0), ("gin", 3, 0.5, 0.1), ("appnp", 2, 0.0, 0.0)],
)
def test_activations_are_priced_batch_by_batch(graph, model, layers, dropout, input_dropout):
    """What a training forward keeps for backward (the batch's input rows and every layer's
    saved tensors; the weights not counted) is linear in a batch's sizes: the coefficients
    measured on random blocks price real sampled batches of every size exactly. The plan's
    activations are the busiest worker's largest batch."""
    import torch

    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.neighbor import NeighborSampler
    from shardgnn.sampling.types import SeedInput

    per_batch = batch_activation_bytes(model, 16, layers, dropout, input_dropout, 12, 4)
    settings = ModelConfig(
        model=model, hidden=16, num_layers=layers, dropout=dropout, input_dropout=input_dropout
    )
    net = build_model(settings, 12, 4).train()
    net.use_hashed_dropout(3)
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(5,) * layers))
    train = np.asarray(graph.train_idx)
    for seeds in (train[:1], train[100:140], train[-128:]):
        blocks = sampler.sample(SeedInput(seeds), 11).blocks
        x_SF = torch.from_numpy(np.asarray(graph.x)[blocks[0].src_nodes_S.numpy()])
        graphs = [MessageGraph.from_block(block) for block in blocks]
        measured = measured_batch_bytes(net, graphs, x_SF)
        assert measured == np.dot(batch_shape(blocks), per_batch[:-1]) + per_batch[-1] > 0
    if (model, layers) != ("sage", 2):
        return
    owner, costs = _costs(graph, 2, dropout=dropout, input_dropout=input_dropout)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0)
    assert np.array_equal(epoch.batch_sizes[..., 3:5].sum(-1), epoch.batch_edges)
    largest = (epoch.batch_sizes @ per_batch[:-1]).max() + per_batch[-1]
    assert {round(c.activation_mb * 1e6) for c in costs} == {largest}  # one sample, every option


@pytest.mark.parametrize("model,layers", [("sage", 2), ("gcn", 3)])
def test_activations_of_batches_historical_embeddings_served(graph, model, layers):
    """Where historical embeddings served some of a layer's input rows, the layer below
    computed only the others, and the served rows join them (an index over the layer's rows):
    the batch's sizes carry the computed rows, and the coefficients of the layers served price
    real pruned batches exactly, whichever layers were served (none included)."""
    import torch

    from shardgnn.fullgraph.minibatch_plan import batch_bytes, served_layers
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.neighbor import NeighborSampler
    from shardgnn.sampling.types import SeedInput

    settings = ModelConfig(model=model, hidden=16, num_layers=layers, dropout=0.5)
    coefficients = functools.partial(batch_activation_bytes, model, 16, layers, 0.5, 0.0, 12, 4)
    net = build_model(settings, 12, 4).train()
    net.use_hashed_dropout(3)
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(5,) * layers))
    train = np.asarray(graph.train_idx)
    seen = set()
    for served in [(), *((layer,) for layer in range(1, layers)), tuple(range(1, layers))]:

        def prune(layer, src_S, num_dst, served=served):  # every third non-seed row served
            if layer not in served:
                return None
            mask = np.arange(len(src_S)) % 3 == 0
            mask[:num_dst] = False
            return mask

        sampler.prune = prune
        blocks = sampler.sample(SeedInput(train[:96]), 5).blocks
        sizes = np.array(batch_shape(blocks))
        assert served_layers(sizes, layers) == served
        seen.add(served)
        history = {
            layer: (blocks[layer].history_S, torch.randn(int(blocks[layer].history_S.sum()), 16))
            for layer in served
        }
        x_SF = torch.from_numpy(np.asarray(graph.x)[blocks[0].src_nodes_S.numpy()])
        graphs = [MessageGraph.from_block(block) for block in blocks]
        measured = measured_batch_bytes(net, graphs, x_SF, history or None)
        assert measured == batch_bytes(sizes, layers, coefficients) > 0, served
    assert len(seen) == (2 if layers == 2 else 4)
    assert batch_bytes(np.zeros((2, 3 * layers), np.int64), layers, coefficients).sum() == 0


def _step_activations(ctx, config):
    """The most bytes one training forward of this worker's epoch kept for backward (its
    weights not counted)."""
    from shardgnn.fullgraph.plan import saved_bytes
    from shardgnn.train.dist_node import DistMiniBatchSteps
    from shardgnn.train.epoch import EpochRun

    steps = DistMiniBatchSteps(config, ctx)
    model = steps.model
    forward, saved = model.forward, []

    def measured(*args, **kwargs):
        out = []
        saved.append(saved_bytes(lambda: out.append(forward(*args, **kwargs)), model))
        return out[0]

    model.forward = measured  # what DDP calls
    for epoch in range(config.optim.epochs):  # the last epoch's steps (the tables filled)
        saved.clear()
        steps.train_epoch(EpochRun(epoch, show_progress=False))
    return max(saved)


def test_historical_rows_serve_what_owners_send(graph):
    """--historical L:AGE: after a first epoch fills the tables, a share of the remote nodes at
    layer L is served, so fewer rows are sampled and fetched; the pushes cost ids and hidden-wide
    float32 rows per layer-step (and the tables' memory). Scope all serves own nodes too. Age 0
    serves nothing, and every step each owner pushes every computed row another worker watches
    (re-sent every step). Pull mode moves only the rows asked for, at an id and a stamp per
    ask."""
    _, costs = _costs(graph, 2, historical="1:3")
    exact, remote, pull, every, every_pull = costs[0], *costs[4:]
    assert [c.option for c in costs[4:]] == [
        "historical 1:3", "historical 1:3 pull", "historical 1:3 all", "historical 1:3 all pull"
    ]  # fmt: skip
    assert remote.flags == ("--historical", "1:3")
    assert pull.flags == ("--historical", "1:3", "--historical-mode", "pull")
    assert every.flags == ("--historical", "1:3", "--historical-scope", "all")
    assert every_pull.flags == (*every.flags, "--historical-mode", "pull")
    for c in (remote, pull, every, every_pull):
        assert 0.2 < c.history_hit_rate < 1 and c.history_bytes > 0
        assert c.fetch_rows < exact.fetch_rows and c.sample_bytes < exact.sample_bytes
        assert c.held_mb > exact.held_mb
        assert c.bytes_per_epoch == c.sample_bytes + c.fetch_bytes + c.history_bytes
    assert every.held_mb > remote.held_mb  # the own rows' table
    assert exact.history_bytes == 0 and exact.history_hit_rate is None
    owner = _costs(graph, 2)[0]
    history = HistoryPlan.of("1:0", 2)
    assert (history.layers, history.max_age, history.push_every) == (range(1, 2), 0, 1)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0, history)
    assert epoch.history_hit_rate == 0.0 and epoch.pushed.trace() == 0
    # every computed own node the other worker watches, once per step: at most all of them
    halo = [
        np.unique(
            graph.indices[
                np.isin(
                    np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr)),
                    np.flatnonzero(owner == w),
                )
            ]
        )
        for w in range(2)
    ]
    halo = [h[owner[h] != w] for w, h in enumerate(halo)]  # fmt: skip
    assert np.array_equal(epoch.halo_rows, [h.shape[0] for h in halo])
    assert 0 < epoch.pushed[0, 1] <= halo[1].shape[0] * epoch.batches
    assert 0 < epoch.pushed[1, 0] <= halo[0].shape[0] * epoch.batches
    # pull: an owner answers only what was asked, and only with rows fresh enough to serve
    pulled = sample_epoch(graph, owner, 2, (5, 5), 128, 0, HistoryPlan.of("1:3", 2, mode="pull"))
    assert pulled.asked.trace() == 0 and pulled.pushed.trace() == 0
    assert (0 < pulled.pushed.T[~np.eye(2, dtype=bool)]).all()
    assert (pulled.pushed.T <= pulled.asked).all() and pulled.history_hit_rate > 0.2
    stale = sample_epoch(graph, owner, 2, (5, 5), 128, 0, HistoryPlan.of("1:0", 2, mode="pull"))
    assert stale.history_hit_rate == 0.0 and stale.pushed.sum() == 0 and stale.asked.sum() > 0
    boundary = [np.unique(np.concatenate(halo))]
    assert stale.boundary_rows.tolist() == np.bincount(owner[boundary[0]], minlength=2).tolist()


def _hand_step_rates() -> ComputeRates:
    """One thread's mini-batch rates, made by hand: 1 ms + 0.1 us per edge to sample a batch,
    2 ms + 0.2 us per input-layer edge + 0.3 us per upper-layer edge to step it, 2 and 1 ns per
    value to encode and decode 8-bit rows."""
    return ComputeRates(
        threads=1, spmm_s={}, spmm_t_s={}, linear_s={}, sparse_s={}, elementwise_s=0.0,
        adam_s=0.0,
        minibatch_s={"sample_batch": 1e-3, "sample_edge": 1e-7, "step_batch": 2e-3,
                     "step_input_edge": 2e-7, "step_edge": 3e-7, "encode8_value": 2e-9,
                     "decode8_value": 1e-9},
    )  # fmt: skip


def _hand_steps(epoch) -> np.ndarray:
    """Each worker's step seconds of ``epoch`` at :func:`_hand_step_rates`."""
    upper = epoch.block_edges.sum(1) - epoch.block_edges[:, 0]
    return epoch.batches * 2e-3 + epoch.block_edges[:, 0] * 2e-7 + upper * 3e-7


def test_epoch_time_is_the_rates_times_the_counts(graph):
    """Hand-made rates: each worker's sampling and steps are seconds per batch plus seconds per
    block edge (the input layer's and the upper layers' at their own rates), the busiest host's
    cores shared; the exchange its bytes (and the gradient ring)
    over the loopback, plus (3 per hop + 2 + 2 + 1 + 1) latencies per batch and peer."""
    compute = _hand_step_rates()
    rates = MachineRates(
        cores=2, compute={1: compute}, link_bytes_s=1e8, latency_s=1e-4, link_samples=[]
    )
    owner, costs = _costs(graph, 2, rates=rates, workers_per_host=2)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0)
    edges = epoch.block_edges.sum(1)
    sample = epoch.batches * 1e-3 + edges * 1e-7
    step = _hand_steps(epoch)
    exact = costs[0]
    assert exact.sample_s == pytest.approx(sample.max()) and exact.compute_s == pytest.approx(
        step.max()
    )
    params = 2 * (12 * 16 + 16) + 2 * (16 * 4 + 4)  # GraphSAGE: two linear maps per layer
    ring = 2 * params * 4 // 2 * epoch.batches
    # lockstep: each batch waits for its busiest worker (each with its own core here)
    upper = epoch.batch_edges - epoch.batch_input_edges
    work = (epoch.batch_edges > 0) * 3e-3 + epoch.batch_input_edges * 3e-7 + upper * 4e-7
    assert epoch.batch_edges.shape == (2, epoch.batches)
    assert np.array_equal(epoch.batch_edges.sum(1), edges)
    assert np.array_equal(epoch.batch_input_edges.sum(1), epoch.block_edges[:, 0])
    busy = work.max(0).sum()
    assert busy >= (sample + step).max() - 1e-12
    # every byte of the one host crosses its loopback, both directions of the link shared
    total = exact.bytes_per_epoch + 2 * ring
    # per batch: four calls a hop, the rows' four and the labels' three, all-reduce, stop
    comm = total / (2 * 1e8) + 1e-4 * epoch.batches * (4 * 2 + 4 + 3 + 1 + 1)
    assert exact.comm_s == pytest.approx(comm, rel=1e-9)
    assert exact.epoch_s == pytest.approx(busy + comm, rel=1e-9)
    # calibrated on two workers, the distributed sampler's rates replace the local sampler's
    timed = dataclasses.replace(rates, dist_sample_s={"batch": 5e-3, "edge": 2e-7})
    assert MachineRates.from_dict(json.loads(json.dumps(timed.to_dict()))) == timed
    _, distributed = _costs(graph, 2, rates=timed, workers_per_host=2)
    assert distributed[0].sample_s == pytest.approx((epoch.batches * 5e-3 + edges * 2e-7).max())
    # 8-bit rows: each worker encodes the rows it sends and decodes those it receives
    fetched = cache_misses(epoch, None, owner, 2).rows
    coded = fetched.sum(0) * 12 * 2e-9 + fetched.sum(1) * 12 * 1e-9
    assert costs[1].option == "8-bit"
    assert costs[1].sample_s == pytest.approx((sample + coded).max(), rel=1e-9)
    # historical embeddings: their bytes, and two more all-to-alls per layer and step
    history = _costs(graph, 2, rates=rates, workers_per_host=2, historical="1:2")[1][4]
    total = history.bytes_per_epoch + 2 * ring
    calls = 4 * 2 + 4 + 3 + 1 + 1 + 3
    expected = total / (2 * 1e8) + 1e-4 * history.batches * calls
    assert history.comm_s == pytest.approx(expected, rel=1e-9)
    # pull mode: three all-to-alls per layer and batch, while sampling
    pull = _costs(graph, 2, rates=rates, workers_per_host=2, historical="1:2")[1][5]
    expected = (pull.bytes_per_epoch + 2 * ring) / (2 * 1e8) + 1e-4 * pull.batches * (calls + 1)
    assert pull.option == "historical 1:2 pull" and pull.comm_s == pytest.approx(expected)
    # the tables' own work (probed rates): per layer and step, and per row a worker sends or
    # receives; push after the step, pull in the sampling, on the workers' cores either way
    tables = dataclasses.replace(
        rates, history_s={"row": 1e-6, "push_call": 2e-3, "pull_call": 3e-3}
    )
    assert MachineRates.from_dict(json.loads(json.dumps(tables.to_dict()))) == tables
    owner, worked = _costs(graph, 2, rates=tables, workers_per_host=2, historical="1:2")
    for plain, priced, call in ((history, worked[4], 2e-3), (pull, worked[5], 3e-3)):
        assert priced.option == plain.option and priced.comm_s == pytest.approx(plain.comm_s)
        mode = "pull" if "pull" in plain.option else "push"
        epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0, HistoryPlan.of("1:2", 2, mode=mode))
        own_s = epoch.batches * call + (epoch.pushed.sum(0) + epoch.pushed.sum(1)) * 1e-6
        stage = "sample_s" if mode == "pull" else "compute_s"
        assert getattr(priced, stage) == pytest.approx(getattr(plain, stage) + own_s.max())
        assert priced.epoch_s > plain.epoch_s + own_s.min() - 1e-12
    # a presample cache's own work (probed rates): per batch and per remote row a worker's
    # batches read, in the sampling; the options without a cache unchanged
    cached = dataclasses.replace(rates, cache_s={"batch": 1e-3, "row": 1e-6})
    assert MachineRates.from_dict(json.loads(json.dumps(cached.to_dict()))) == cached
    _, looked_up = _costs(graph, 2, rates=cached, workers_per_host=2)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0)
    reads = np.array([ids.size for ids in epoch.inputs])
    own_s = epoch.batches * 1e-3 + reads * 1e-6
    assert [c.option for c in looked_up] == [c.option for c in costs]
    assert [c.hit_rate is not None for c in costs] == [False, False, True, True]
    for plain, priced in zip(costs, looked_up):
        assert priced.comm_s == pytest.approx(plain.comm_s, rel=1e-9)
        if plain.hit_rate is None:
            assert (priced.sample_s, priced.epoch_s) == (plain.sample_s, plain.epoch_s)
        else:
            assert priced.epoch_s >= plain.epoch_s + own_s.min() - 1e-12
    assert looked_up[2].sample_s == pytest.approx((sample + own_s).max(), rel=1e-9)
    assert looked_up[3].sample_s >= costs[3].sample_s + own_s.min() - 1e-12


def test_workers_reading_each_other_skip_the_exchanges_calls(graph):
    """Three workers of one machine reading each other's rows (--host-sharing auto): their
    batches sample at the one-process sampler's rates (the distributed sampler's are for
    requests to other machines), and of the calls each batch makes only the gradient
    all-reduce and the stop agreement remain, each paying the latency per peer and the
    crowding probe (the sampling, fetch and label calls, fifteen with sharing off, are gone)."""
    compute = _hand_step_rates()

    def rates(latency_s: float, crowd_s: float) -> MachineRates:
        return MachineRates(
            cores=2, compute={1: compute}, link_bytes_s=1e8, latency_s=latency_s,
            link_samples=[], crowd_s={3: {1e-4: crowd_s, 1e-2: crowd_s}},
            dist_sample_s={"batch": 5e-3, "edge": 0.0},
        )  # fmt: skip

    def comm_s(r: MachineRates, sharing: bool) -> float:
        return _costs(graph, 3, rates=r, workers_per_host=3, host_sharing=sharing)[1][0].comm_s

    owner, (shared, *_) = _costs(graph, 3, rates=rates(0, 0), workers_per_host=3, host_sharing=True)
    epoch = sample_epoch(graph, owner, 3, (5, 5), 128, 0)
    edges = epoch.block_edges.sum(1)
    assert shared.sample_s == pytest.approx((epoch.batches * 1e-3 + edges * 1e-7).max())
    _, (apart, *_) = _costs(graph, 3, rates=rates(0, 0), workers_per_host=3)
    assert apart.sample_s == pytest.approx(epoch.batches * 5e-3)  # the distributed sampler's
    base = {sharing: comm_s(rates(0, 0), sharing) for sharing in (True, False)}
    for sharing, calls in ((True, 2), (False, 17)):
        latency = comm_s(rates(1e-4, 0), sharing) - base[sharing]
        assert latency == pytest.approx(1e-4 * epoch.batches * calls * 2), sharing
        crowding = comm_s(rates(0, 1e-3), sharing) - base[sharing]
        assert crowding == pytest.approx(1e-3 * epoch.batches * calls), sharing


def test_the_codec_is_priced_at_the_rows_of_its_calls(graph):
    """A fetch encodes each peer's rows of a batch in one call and decodes them in one, and a
    value costs more in a call of more rows (they outgrow the caches): the 8-bit option charges
    each owner its encoding and each requester its decoding at the rate of those calls' rows
    (log-linear between the calibrated calls, held beyond them); the calibration times calls
    of each size."""
    from shardgnn.fullgraph.rates import _codec_seconds

    compute = _hand_step_rates()
    by_rows = {64: 1e-9, 512: 2e-9, 4096: 4e-9}
    for rows, value in by_rows.items():
        compute.minibatch_s[f"encode8_value_{rows}"] = 2 * value
        compute.minibatch_s[f"decode8_value_{rows}"] = value
    assert compute.codec("decode8", 64) == pytest.approx(1e-9)
    assert compute.codec("decode8", (64 * 512) ** 0.5) == pytest.approx(1.5e-9)  # log-linear
    assert compute.codec("encode8", np.array([1, 0, 1e6])) == pytest.approx([2e-9, 2e-9, 8e-9])
    rates = MachineRates(
        cores=2, compute={1: compute}, link_bytes_s=1e8, latency_s=1e-4, link_samples=[]
    )
    owner, costs = _costs(graph, 2, rates=rates, workers_per_host=2)
    epoch = sample_epoch(graph, owner, 2, (5, 5), 128, 0)
    fetched = cache_misses(epoch, None, owner, 2).rows
    call_rows = fetched / epoch.batches  # [requester, owner]
    assert 64 < call_rows[0, 1] < 4096 and 64 < call_rows[1, 0] < 4096
    per_value = np.interp(np.log(np.maximum(call_rows, 1)), np.log([64, 512, 4096]), [1, 2, 4])
    values = fetched * 12 * 1e-9 * per_value
    codec = 2 * values.sum(0) + values.sum(1)  # the owner encodes, the requester decodes
    sample = epoch.batches * 1e-3 + epoch.block_edges.sum(1) * 1e-7
    assert costs[1].sample_s == pytest.approx((sample + codec).max(), rel=1e-9)
    timed = _codec_seconds(12, 8, calls=(8, 64))
    assert set(timed) == {
        f"{kind}8_value_{rows}" for kind in ("encode", "decode") for rows in (8, 64)
    }
    assert min(timed.values()) > 0


def test_crowded_workers_pay_the_probed_cost_at_every_call(graph):
    """Three workers on two cores: each collective call costs the crowding probe's seconds at
    the work a worker does between calls (interpolated between the probed bursts); with a
    core to spare, nothing; rates without the probe at that count are refused in one line (at
    as many workers as cores, rates that predate that probe cost nothing there)."""
    compute = _hand_step_rates()
    crowd = {3: {1e-4: 1e-3, 1e-2: 3e-3}}
    rates = MachineRates(
        cores=2, compute={1: compute}, link_bytes_s=1e8, latency_s=1e-4, link_samples=[],
        crowd_s=crowd,
    )  # fmt: skip
    assert MachineRates.from_dict(json.loads(json.dumps(rates.to_dict()))) == rates
    assert rates.crowding(2, 1e-3) == 0.0  # as many workers as cores, rates without that probe
    filled = dataclasses.replace(rates, crowd_s={**crowd, 2: {1e-4: 5e-4, 1e-2: 5e-4}})
    assert filled.crowding(2, 1e-3) == pytest.approx(5e-4) and filled.crowding(1, 1e-3) == 0.0
    assert rates.crowding(3, 1e-3) == pytest.approx(2e-3)  # halfway on a log scale
    assert rates.crowding(3, 1.0) == pytest.approx(3e-3)  # held at the ends
    plain = dataclasses.replace(rates, crowd_s={})
    owner, crowded = _costs(graph, 3, rates=rates, workers_per_host=3)
    epoch = sample_epoch(graph, owner, 3, (5, 5), 128, 0)
    edges = epoch.block_edges.sum(1)
    sampling = (epoch.batches * 1e-3 + edges * 1e-7).max()
    step = _hand_steps(epoch).max()
    with pytest.raises(ConfigError, match="no crowding probe at 3 workers on its 2 cores"):
        _costs(graph, 3, rates=plain, workers_per_host=3)
    _, alone = _costs(graph, 3, rates=dataclasses.replace(rates, cores=4), workers_per_host=3)
    # 15 calls after a share of the sampling each (sampling, fetch, labels), the all-reduce
    # after the step, the stop agreement after nothing
    batches = epoch.batches
    expected = 15 * rates.crowding(3, sampling / (15 * batches)) + rates.crowding(3, step / batches)
    expected = (expected + rates.crowding(3, 0.0)) * batches
    assert crowded[0].comm_s == pytest.approx(alone[0].comm_s + expected, rel=1e-9)
    # the crowded-step probe: each step stretched by its factor in the lockstep, and the
    # all-reduce after it no longer charged by the call probe (the step's factor holds its wait)
    stretched = dataclasses.replace(rates, crowd_step={3: 2.5})
    assert MachineRates.from_dict(json.loads(json.dumps(stretched.to_dict()))) == stretched
    assert stretched.step_crowding(3) == 2.5 and rates.step_crowding(3) is None
    _, slow = _costs(graph, 3, rates=stretched, workers_per_host=3)
    per_call = rates.crowding(3, step / batches) * batches
    assert slow[0].comm_s == pytest.approx(crowded[0].comm_s - per_call, rel=1e-9)
    sample_PB = (epoch.batch_edges > 0) * 1e-3 + epoch.batch_edges * 1e-7
    upper_PB = epoch.batch_edges - epoch.batch_input_edges
    step_PB = (epoch.batch_edges > 0) * 2e-3 + epoch.batch_input_edges * 2e-7 + upper_PB * 3e-7
    busy = lambda f: np.maximum(  # noqa: E731 (the lockstep: each batch's busiest share)
        (sample_PB + f * step_PB).max(0), (sample_PB + f * step_PB).sum(0) / 2
    ).sum()
    assert crowded[0].epoch_s - crowded[0].comm_s == pytest.approx(busy(1.0), rel=1e-9)
    assert slow[0].epoch_s - slow[0].comm_s == pytest.approx(busy(2.5), rel=1e-9)
    # workers reading each other's parts: their sampling is work on the cores, no call to wait
    # at, and the factor (a batch sampled and stepped, crowded) stretches it too; through the
    # collectives its rate holds the calls' waits and only the step is stretched
    _, shared = _costs(graph, 3, rates=stretched, workers_per_host=3, host_sharing=True)
    both = lambda f: np.maximum(  # noqa: E731
        (f * (sample_PB + step_PB)).max(0), (f * (sample_PB + step_PB)).sum(0) / 2
    ).sum()
    assert shared[0].epoch_s - shared[0].comm_s == pytest.approx(both(2.5), rel=1e-9)


def test_cli_plans_both_kinds_and_refuses_what_does_not_apply(tmp_path, capsys, monkeypatch):
    import shlex

    from shardgnn.cli import build_parser, main
    from shardgnn.cli.train import train_config

    out = tmp_path / "plan.json"
    assert main(["plan", SPEC, "--workers", "2,4", "--hidden", "16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mini-batch training (fanouts 10,10" in printed and "8-bit + cache 10%" in printed
    assert printed.count("<- fewest") == 4
    data = json.loads(out.read_text())
    assert len(data["minibatch_costs"]) == 8 and set(data["minibatch_picks"]) == {"2", "4"}
    # how to train each pick: the flags that set what the plan priced, its workers one a
    # machine (the plan's layout without rates) on a partition made before, under torchrun
    assert "to train a pick: `shardgnn train" in printed and "--nproc-per-node 1" in printed
    assert "parts-P: `shardgnn partition" in printed
    flags = data["pick_flags"]
    assert {kind: set(by) for kind, by in flags.items()} == {
        "full graph": {"2", "4"}, "mini-batch": {"2", "4"}
    }  # fmt: skip
    monkeypatch.chdir(tmp_path)
    for p in (2, 4):
        # the partition as the plan says to make it
        assert main(["partition", SPEC, "--parts", str(p), "--method", "metis", "--out",
                     f"parts-{p}", "--quiet"]) == 0  # fmt: skip
        option = data["minibatch_picks"][str(p)]
        line = shlex.join(flags["mini-batch"][str(p)])
        assert f"  P={p} mini-batch: {line}" in printed
        config = train_config(build_parser().parse_args(["train", *flags["full graph"][str(p)]]))
        assert (config.run.partitions, config.mode) == (f"parts-{p}", "full")
        assert (config.model.hidden, config.model.num_layers) == (16, 2)
        assert config.full.spmm == data["picks"][str(p)].split()[0]  # the label: --spmm first
        config = train_config(build_parser().parse_args(["train", *flags["mini-batch"][str(p)]]))
        assert config.mode == "minibatch" and config.sampler.fanouts == (10, 10)
        assert config.batch_size == data["minibatch_costs"][0]["batch_size"]
        assert (config.fetch_bits == 8) == ("8-bit" in option)
        assert (config.cache.policy == "presample") == ("cache" in option)
    only = tmp_path / "only.json"
    argv = ["plan", SPEC, "--workers", "2", "--strategies", "minibatch", "--fanouts", "5,3"]
    assert main([*argv, "--batch-size", "64", "--cache-size", "500", "--out", str(only)]) == 0
    data = json.loads(only.read_text())
    capsys.readouterr()
    assert data["costs"] == [] and data["minibatch_costs"][2]["option"] == "cache 500"
    history = tmp_path / "history.json"
    argv = ["plan", SPEC, "--workers", "2", "--strategies", "minibatch", "--hidden", "16"]
    assert main([*argv, "--historical", "1:2", "--out", str(history)]) == 0
    printed = capsys.readouterr().out
    assert "history hit" in printed and "historical 1:2 all pull" in printed
    rows = json.loads(history.read_text())["minibatch_costs"]
    assert [r["option"] for r in rows[4:]] == [
        "historical 1:2", "historical 1:2 pull", "historical 1:2 all", "historical 1:2 all pull"
    ]  # fmt: skip
    assert rows[4]["history_bytes"] > 0 and rows[0]["history_bytes"] == 0
    for bad, message in (
        (["--strategies", "full", "--historical", "1:2"], "--historical 1:2: plans mini-batch"),
        (["--historical", "2:2"], "--historical 2:2: the layer must lie in [1, 1]"),
        (["--historical", "one"], "--historical one: give LAYER:AGE"),
        (["--model", "sgc", "--historical", "1:2"], "--model sgc has no stack of layers"),
        (["--strategies", "full", "--fanouts", "5,5"], "--fanouts 5,5: plans mini-batch"),
        (["--fanouts", "5"], "--fanouts 5: must be 2 positive counts"),
        (["--batch-size", "0"], "--batch-size 0: must be >= 1"),
    ):
        assert main(["plan", SPEC, "--workers", "2", *bad]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_memory_limit_picks_only_what_fits(tmp_path, capsys):
    """--memory-mb: a strategy or option whose busiest worker would keep more (held + activations)
    is never the pick and is marked; where nothing fits, one line says so and there is no pick.
    Here the mini-batch pick by bytes alone (a cache) does not fit a limit under it, and the
    full-graph pick fits the smallest strategy's memory."""
    from shardgnn.cli import main
    from shardgnn.fullgraph.plan import worker_memory_mb

    argv = ["plan", SPEC, "--workers", "4", "--hidden", "16"]
    free = tmp_path / "free.json"
    assert main([*argv, "--fanouts", "5,5", "--out", str(free)]) == 0
    data = json.loads(free.read_text())
    capsys.readouterr()

    def memory(row):
        return row["held_mb"] + row["activation_mb"]

    full = {r["strategy"] + (f" {r['layout']}" if r["layout"] else ""): r for r in data["costs"]}
    batched = {r["option"]: r for r in data["minibatch_costs"]}
    # under the free mini-batch pick's memory (its cache's rows), at the most the rest keep
    over = memory(batched[data["minibatch_picks"]["4"]])
    limits = {
        "minibatch": max(m for m in map(memory, batched.values()) if m < over),
        "full": min(map(memory, full.values())),
    }
    for kind, limit in limits.items():
        tight = tmp_path / f"{kind}.json"
        flags = ["--strategies", kind, "--memory-mb", repr(limit), "--out", str(tight)]
        flags += ["--fanouts", "5,5"] if kind == "minibatch" else []
        assert main([*argv, *flags]) == 0
        assert "over memory" in capsys.readouterr().out
        got = json.loads(tight.read_text())
        if kind == "full":
            assert memory(full[got["picks"]["4"]]) <= limit
        else:
            assert got["minibatch_picks"]["4"] != data["minibatch_picks"]["4"]
            assert memory(batched[got["minibatch_picks"]["4"]]) <= limit
    assert main([*argv, "--memory-mb", "0.001", "--out", str(tmp_path / "none.json")]) == 0
    printed = capsys.readouterr().out
    assert "P=4: no full-graph strategy fits in --memory-mb 0.001 per worker" in printed
    assert "P=4: no mini-batch option fits in --memory-mb 0.001 per worker" in printed
    none = json.loads((tmp_path / "none.json").read_text())
    assert none["picks"] == {} and none["minibatch_picks"] == {}
    assert main([*argv, "--memory-mb", "0"]) == 2
    assert "--memory-mb 0.0: must be > 0 (MB per worker)" in capsys.readouterr().err
    assert worker_memory_mb(type("C", (), {"held_mb": 2.0, "activation_mb": 0.5})) == 2.5


def test_host_sharing_drops_only_the_same_host_rows(graph):
    """--host-sharing auto, 4 workers on 2 machines of 2: the same draws as with sharing off,
    the rows owned on the reader's machine neither requested nor fetched, every other row as
    before (so the bytes fall by the same-host pairs' share); the cache holds only rows from
    the other machine. All 4 on one machine: no byte, and neither 8-bit rows nor a cache
    (nothing is fetched) among the options."""
    owner, off = _costs(graph, 4, workers_per_host=2)
    _, shared = _costs(graph, 4, workers_per_host=2, host_sharing=True)
    host_P = sharing_hosts(4, 2, True)
    assert host_P.tolist() == [0, 0, 1, 1] and sharing_hosts(4, 2, False).tolist() == [0, 1, 2, 3]
    apart = sample_epoch(graph, owner, 4, (5, 5), 128, 0)
    together = sample_epoch(graph, owner, 4, (5, 5), 128, 0, host_P=host_P)
    same = host_P[:, None] == host_P[None, :]
    for counts in ("frontier", "edges"):
        a, b = getattr(apart, counts), getattr(together, counts)
        assert (b[same] == 0).all() and (b[~same] == a[~same]).all() and a[same].sum() > 0
    np.testing.assert_array_equal(together.batch_edges, apart.batch_edges)  # the same draws
    for w in range(4):
        assert (host_P[owner[together.inputs[w]]] != host_P[w]).all()
        kept = np.isin(apart.inputs[w], together.inputs[w])
        assert (host_P[owner[apart.inputs[w][~kept]]] == host_P[w]).all()
    for a, b in zip(off, shared, strict=True):
        assert a.option == b.option
        assert 0 < b.sample_bytes < a.sample_bytes and 0 < b.fetch_bytes < a.fetch_bytes
    assert shared[2].hit_rate > 0  # the cache: rows of the other machine
    _, alone = _costs(graph, 4, workers_per_host=4, host_sharing=True, historical="1:2")
    assert [c.option for c in alone] == ["exact", *(c.option for c in alone[1:])]
    assert not any("cache" in c.option or c.option == "8-bit" for c in alone)
    assert all(c.sample_bytes == c.fetch_bytes == 0 for c in alone)
    assert all(c.history_bytes > 0 for c in alone[1:])  # the tables still exchange


def test_host_sharing_needs_workers_sharing_a_machine(capsys):
    """--host-sharing plans workers of one machine (mini-batch): refused without
    --workers-per-host above 1 or with --strategies full, and a typo named."""
    from shardgnn.cli import main

    argv = ["plan", SPEC, "--workers", "2", "--rates", "r.json"]
    assert main([*argv, "--host-sharing", "off"]) == 2
    assert "--workers-per-host N (N > 1)" in capsys.readouterr().err
    argv += ["--workers-per-host", "2"]
    assert main([*argv, "--host-sharing", "off", "--strategies", "full"]) == 2
    assert "drop --strategies full" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's own exit, its one line
        main([*argv, "--host-sharing", "of"])
    assert "did you mean --host-sharing off" in capsys.readouterr().err


CACHED = ["--cache-policy", "presample", "--cache-size", "20%"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "workers,flags",
    [
        (2, []),
        (3, ["--fetch-bits", "8"]),
        (4, CACHED),
        (2, ["--historical", "1:4"]),
        (3, ["--historical", "1:3", "--historical-scope", "all"]),
        (2, ["--historical", "1:4", "--historical-mode", "pull"]),
        (3, ["--historical", "1:3", "--historical-scope", "all", "--historical-mode", "pull"]),
        (3, ["bag-of-words"]),
        (2, ["bag-of-words", *CACHED]),
        (3, ["bag-of-words", "--fetch-bits", "8"]),
    ],
)
def test_predicted_bytes_are_the_measured_ones(tmp_path, workers, flags):
    """The plan's sampling and fetch bytes per epoch against a run's counters on the same
    partition (--host-sharing off: every remote row crosses the all-to-all), within 5 % (the
    plan samples other draws than the run); the cache's predicted hit rate within 0.03.
    Historical embeddings: the second epoch's sampling, fetch and push bytes (the tables filled
    by the first, as the plan fills them) and the tables' hit rate. Bag-of-words features (5 %
    non-zero on average, more in a well-connected node's row, as on coauthor-cs): owners reply
    with the fetched rows' own non-zeros (sampling reads well-connected nodes more often: priced
    at the part's mean row they came out 40 % short); at 8 bits, the non-zeros' values
    quantised, fewer bytes than the exact non-zeros."""
    from shardgnn.cli import main
    from shardgnn.graph.io import save_graph
    from shardgnn.partition.format import read_partitions

    spec = "synthetic:nodes=20000"
    if flags[:1] == ["bag-of-words"]:
        flags = flags[1:]
        graph = degree_bag_of_words(load_dataset(spec))
        save_graph(graph, tmp_path / "g")
        spec = f"graph:{tmp_path / 'g'}"
    parts = tmp_path / "p"
    assert main(["partition", spec, "--parts", str(workers), "--out", str(parts), "--quiet"]) == 0
    out = tmp_path / "r.json"
    argv = ["train", spec, "--workers", str(workers), "--partitions", str(parts), "--epochs", "2"]
    argv += ["--host-sharing", "off", "--fanouts", "10,10", "--batch-size", "512", "--quiet"]
    assert main([*argv, "--eval-fanouts", "-1,-1", "--results", str(out), *flags]) == 0
    measured = json.loads(out.read_text())
    pset = read_partitions(parts)
    owner = pset.book.owner(pset.new_id_of_orig())
    historical = flags[1] if flags[:1] == ["--historical"] else None
    costs = minibatch_costs(
        load_dataset(spec), owner, workers, model="sage", hidden=256, fanouts=(10, 10),
        batch_size=512, cache_size="20%", historical=historical,
    )  # fmt: skip
    cost = next(c for c in costs if c.flags == tuple(flags))
    if historical is not None:
        second = measured["epochs"][1]["cache"]
        for predicted, got in (
            (cost.sample_bytes, second["remote_sample_mb"] * 1e6),
            (cost.fetch_bytes, second["remote_feature_mb"] * 1e6),
            (cost.history_bytes, second["historical"]["traffic_mb"] * 1e6),
        ):
            assert predicted == pytest.approx(got, rel=0.05), (predicted, got)
        hit = second["historical"]["hit_rate"]
        assert cost.history_hit_rate == pytest.approx(hit, abs=0.03)
        return
    for stage, predicted in (("sample", cost.sample_bytes), ("fetch", cost.fetch_bytes)):
        got = measured["comm"][stage]["bytes_sent"] / 2
        assert predicted == pytest.approx(got, rel=0.05), (stage, predicted, got)
    if "--fetch-bits" in flags and spec.startswith("graph:"):
        assert cost.fetch_bytes < 0.8 * costs[0].fetch_bytes  # the exact non-zeros
    if cost.hit_rate is not None:
        hit = np.mean([e["cache"]["hit_rate"] for e in measured["epochs"]])
        assert cost.hit_rate == pytest.approx(hit, abs=0.03)
        # the cached rows' bytes: dense, or (bag-of-words, sparse batches) the non-zeros of the
        # presampled rows as CSR, a fraction of the dense bytes
        cache = measured["cache"]
        assert cache["cache_layout"] == ("csr" if cost.sparse_batches else "dense")
        assert cost.cache_mb == pytest.approx(cache["capacity_mb"], rel=0.05)
        if cost.sparse_batches:
            assert cost.cache_mb < 0.2 * cache["capacity_rows"] * 4 * graph.x.shape[1] / 1e6


@pytest.mark.slow
@pytest.mark.multiprocess
def test_shared_host_runs_send_what_the_plan_predicts(tmp_path):
    """Two workers on this machine with --host-sharing auto (training's default) and
    historical embeddings: the plan predicts no sampling and fetch bytes, and the run sends
    none (its counters: the peer's rows were read from its mapped files, host bytes); the
    tables' pushes still cross the collectives, predicted within 5 %."""
    from shardgnn.cli import main
    from shardgnn.partition.format import read_partitions

    spec, parts, out = "synthetic:nodes=20000", tmp_path / "p", tmp_path / "r.json"
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    argv = ["train", spec, "--workers", "2", "--partitions", str(parts), "--epochs", "2"]
    argv += ["--fanouts", "10,10", "--batch-size", "512", "--historical", "1:4", "--quiet"]
    assert main([*argv, "--eval-fanouts", "-1,-1", "--results", str(out)]) == 0
    second = json.loads(out.read_text())["epochs"][1]
    pset = read_partitions(parts)
    owner = pset.book.owner(pset.new_id_of_orig())
    costs = minibatch_costs(
        load_dataset(spec), owner, 2, model="sage", hidden=256, fanouts=(10, 10),
        batch_size=512, cache_size="20%", historical="1:4", workers_per_host=2,
        host_sharing=True,
    )  # fmt: skip
    cost = next(c for c in costs if c.flags == ("--historical", "1:4"))
    assert cost.sample_bytes == cost.fetch_bytes == 0
    assert second["cache"]["remote_sample_mb"] == second["cache"]["remote_feature_mb"] == 0
    got = second["cache"]["historical"]["traffic_mb"] * 1e6
    assert cost.history_bytes == pytest.approx(got, rel=0.05), (cost.history_bytes, got)
    comm = json.loads(out.read_text())["comm"]
    assert comm["sample"]["host_bytes"] > 0 and comm["fetch"]["host_bytes"] > 0


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "historical,bag", [(None, None), ("1:4", None), (None, "uniform"), (None, "degree")]
)
def test_predicted_activations_are_the_largest_steps(tmp_path, historical, bag, bag_of_words):
    """The plan's activations against what the busiest worker's training steps kept for
    backward (each forward measured; the largest): within 3 % (the plan samples other draws
    than the run), GraphSAGE with dropout on 2 workers; with historical embeddings, the second
    epoch's steps (the tables filled by the first, as the plan fills them); on bag-of-words
    features, batches gathered sparse (their non-zeros kept; where a well-connected node's row
    is denser, the batches read denser rows than the mean, and the plan prices theirs)."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.partition.format import read_partitions, write_partitions
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig

    from distributed_helpers import run_workers

    graph = {"uniform": bag_of_words, None: load_dataset(SPEC)}.get(bag)
    if bag == "degree":
        graph = degree_bag_of_words(load_dataset(SPEC.replace("features=12", "features=200")))
    result = partition_graph(graph, PartitionConfig(num_parts=2, method="metis"))
    write_partitions(
        graph, result.assignment, tmp_path / "p", method=result.method, settings=result.settings
    )
    pset = read_partitions(tmp_path / "p")
    config = TrainConfig(
        model=ModelConfig(model="sage", hidden=16, num_layers=2, dropout=0.5, input_dropout=0.2),
        optim=OptimConfig(epochs=1 if historical is None else 2),
        sampler=SamplerConfig(fanouts=(5, 5)),
        batch_size=128,
        historical=historical,
        progress=False,
        threads=1,
        run=RunConfig(partitions=tmp_path / "p"),
    )
    measured = max(run_workers(_step_activations, 2, config))
    owner = pset.book.owner(pset.new_id_of_orig())
    cost = minibatch_costs(
        graph, owner, 2, model="sage", hidden=16, fanouts=(5, 5), batch_size=128,
        cache_size="20%", dropout=0.5, input_dropout=0.2, historical=historical,
    )[0 if historical is None else 4]  # fmt: skip
    assert cost.flags == (() if historical is None else ("--historical", historical))
    assert cost.sparse_batches == (bag is not None)
    assert cost.activation_mb * 1e6 == pytest.approx(measured, rel=0.03), (cost, measured)


@pytest.fixture(scope="module")
def bag_of_words():
    """:data:`SPEC`'s graph with 200 features, 5 % of them non-zero (stored as CSR)."""
    graph = load_dataset("synthetic:nodes=3000,degree=8,classes=4,features=200")
    rng = np.random.default_rng(0)
    x = (graph.x * (rng.random(graph.x.shape) < 0.05)).astype(np.float32)
    return dataclasses.replace(graph, x=x)


def test_sparse_batches_activations_are_their_non_zeros(bag_of_words):
    """Batches gathered sparse keep their input rows' non-zeros for backward, not the dense
    rows: the coefficients measured at the features' density price real sparse batches (their
    rows gathered as workers gather them) within 2 % (a batch's non-zeros vary about the
    mean), and their input rows' bytes are a fraction of the dense ones."""
    from shardgnn.nn.config import ModelConfig
    from shardgnn.nn.message_graph import MessageGraph
    from shardgnn.nn.models import build_model
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.sampling.neighbor import NeighborSampler
    from shardgnn.sampling.types import SeedInput
    from shardgnn.store.feature import csr_rows

    graph = bag_of_words
    density = np.count_nonzero(graph.x) / graph.x.size
    dense = batch_activation_bytes("sage", 16, 2, 0.5, 0.2, 200, 4)
    sparse = batch_activation_bytes("sage", 16, 2, 0.5, 0.2, 200, 4, input_density=density)
    assert 0 < sparse[0] < dense[0] / 3  # an input row: its non-zeros against 200 floats
    net = build_model(
        ModelConfig(model="sage", hidden=16, num_layers=2, dropout=0.5, input_dropout=0.2), 200, 4
    ).train()
    net.use_hashed_dropout(3)
    rows = csr_rows(graph.x, "none", sparse_batches=True)
    sampler = NeighborSampler(graph.indptr, graph.indices, SamplerConfig(fanouts=(5, 5)))
    train = np.asarray(graph.train_idx)
    for seeds in (train[:64], train[-128:]):
        blocks = sampler.sample(SeedInput(seeds), 11).blocks
        x_SF = rows.gather(blocks[0].src_nodes_S)
        assert x_SF.is_sparse
        measured = measured_batch_bytes(net, [MessageGraph.from_block(b) for b in blocks], x_SF)
        predicted = np.dot(batch_shape(blocks), sparse[:-1]) + sparse[-1]
        assert predicted == pytest.approx(measured, rel=0.02)
        assert measured < np.dot(batch_shape(blocks), dense[:-1]) + dense[-1]


def test_every_option_steps_sparse_batches_on_features_stored_as_csr(bag_of_words):
    """On features stored as CSR workers gather every option's batches sparse (a cache serves
    its dense rows into them), priced at the sparse step's rates and activations, a cache's as
    the options without one; dense features price every option dense; rates
    without sparse step rates (dense features, or written before them) charge the dense ones."""
    compute = _hand_step_rates()
    sparse_steps = {"sparse_step_batch": 1e-3, "sparse_step_input_edge": 5e-8,
                    "sparse_step_edge": 3e-7}  # fmt: skip
    compute = dataclasses.replace(compute, minibatch_s={**compute.minibatch_s, **sparse_steps})
    assert compute.step("step_input_edge", True) == 5e-8
    assert compute.step("step_input_edge", False) == 2e-7
    assert _hand_step_rates().step("step_input_edge", True) == 2e-7  # none: the dense rate
    rates = MachineRates(
        cores=2, compute={1: compute}, link_bytes_s=1e8, latency_s=1e-4, link_samples=[]
    )
    owner, costs = _costs(bag_of_words, 2, rates=rates, workers_per_host=2)
    assert [c.sparse_batches for c in costs] == [True, True, True, True]
    epoch = sample_epoch(bag_of_words, owner, 2, (5, 5), 128, 0)
    upper = epoch.block_edges.sum(1) - epoch.block_edges[:, 0]
    step = epoch.batches * 1e-3 + epoch.block_edges[:, 0] * 5e-8 + upper * 3e-7
    assert costs[0].compute_s == pytest.approx(step.max())
    assert costs[2].compute_s == pytest.approx(costs[0].compute_s)  # the same batches
    assert step.max() < _hand_steps(epoch).max()  # cheaper than the dense step
    assert costs[2].activation_mb == costs[0].activation_mb
    _, dense = _costs(load_dataset(SPEC), 2)
    assert not any(c.sparse_batches for c in dense)


def test_calibration_times_sparse_steps_where_workers_take_them(bag_of_words):
    """The calibration times the planned step on the batches workers would gather: on features
    stored as CSR also with sparse input rows (``sparse_step_*``, fitted as the dense ones: never
    below 0), on dense features only dense."""
    from shardgnn.fullgraph.config import PlanConfig
    from shardgnn.fullgraph.plan import workload
    from shardgnn.fullgraph.rates import measure_minibatch

    config = PlanConfig(workers=(2,), model="sage", hidden=16, layers=2, fanouts=(5, 5))
    names = {"step_batch", "step_input_edge", "step_edge"}
    for graph, sparse in ((bag_of_words, True), (load_dataset(SPEC), False)):
        work = workload(graph, config, 256)
        steps = measure_minibatch(work, work.minibatch)
        assert names <= set(steps) and min(steps[n] for n in names) >= 0
        timed_sparse = {name for name in steps if name.startswith("sparse_")}
        assert timed_sparse == ({f"sparse_{n}" for n in names} if sparse else set())
        assert all(steps[name] >= 0 for name in timed_sparse)


def test_step_probe_fits_on_the_rounds_of_every_moment():
    """A calibration times the step probe's rounds at several moments (the machine's speed moves
    between them) and fits on the medians of all of them, a slow moment's rounds among them."""
    from shardgnn.fullgraph.config import PlanConfig
    from shardgnn.fullgraph.plan import workload
    from shardgnn.fullgraph.rates import StepProbe, _fit_step

    config = PlanConfig(workers=(2,), model="sage", hidden=16, layers=2, fanouts=(5, 5))
    work = workload(load_dataset(SPEC), config, 256)
    probe = StepProbe(work, work.minibatch, threads=1)
    probe.time_rounds(2)
    probe.time_rounds(3)
    assert len(probe.rounds) == 5 and all(len(r) == 3 for r in probe.rounds)
    # a third moment twice as slow: its rounds join the others' medians
    probe.rounds += [[2 * t for t in r] for r in probe.rounds[:2]]
    medians = [float(np.median(t)) for t in zip(*probe.rounds)]
    fitted = _fit_step([(i, u) for i, u, _ in probe.points], medians)
    rates = probe.rates()
    assert {name: rates[name] for name in fitted} == pytest.approx(fitted)
    assert rates["step_batch"] + rates["step_edge"] > 0


def test_cache_policy_auto_and_plan_rates_refuse_what_the_plan_does_not_model(capsys):
    """`--cache-policy auto` picks with the plan of node classification's batches: link
    prediction, --historical, an unplanned model or bit width are refused in one line, as is
    --plan-rates without a choice to price; a run recorded before --plan-rates left the
    full-graph settings still loads (its checkpoints and results)."""
    from shardgnn.cli import main
    from shardgnn.train.config import TrainConfig, moved_settings

    base = ["train", "--workers", "2", "--cache-policy", "auto", "--epochs", "1"]
    for extra, words in (
        (["--task", "link"], "not --task link"),
        (["--historical", "1:2"], "not --historical"),
        (["--model", "gat"], "not --model gat"),
        (["--fetch-bits", "4"], "not --fetch-bits 4"),
        (["--embedding-dim", "8"], "not learnable rows"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert "--cache-policy auto picks with the cost model of `shardgnn plan`" in err
        assert words in err and err.count("\n") == 1
    assert main(["train", "--workers", "2", "--plan-rates", "r.json", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "--plan-rates r.json: needs --cache-policy auto (got --cache-policy none)" in err
    assert main(["train", "--plan-rates", "r.json", "--epochs", "1"]) == 2
    assert "one process" in capsys.readouterr().err
    recorded = TrainConfig(mode="full", run=dataclasses.replace(TrainConfig().run, workers=2))
    recorded.full.spmm = "auto"
    old = recorded.to_dict()
    old["full"]["plan_rates"] = old.pop("plan_rates")
    assert TrainConfig.from_dict(old).to_dict() == recorded.to_dict()
    assert moved_settings(recorded.to_dict()) == recorded.to_dict()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_cache_policy_auto_trains_the_planned_pick(tmp_path, capsys):
    """`--cache-policy auto` trains with the plan's pick on the partition, says it in one line
    and records the policy that ran: over a slow link (with --plan-rates) and by bytes (without)
    the presample cache, its measured hit rate near the predicted one; where the cache's own
    work costs more than the rows it saves, no cache; with the workers of one machine reading
    each other's rows, no cache either (nothing is fetched)."""
    from shardgnn.cli import main
    from shardgnn.fullgraph.plan import recommend
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.config import TrainConfig

    spec = "synthetic:nodes=2000,degree=10,classes=3,features=16,seed=1"
    parts = tmp_path / "parts"
    assert main(["partition", spec, "--parts", "2", "--out", str(parts), "--quiet"]) == 0
    out = tmp_path / "run.json"
    flags = ["train", "--partitions", str(parts), "--cache-policy", "auto", "--epochs", "2",
             "--hidden", "16", "--quiet", "--results", str(out)]  # fmt: skip

    def run(*extra: str) -> tuple[str, dict]:
        assert main([*flags, *extra]) == 0
        said = [line for line in capsys.readouterr().out.splitlines() if "auto:" in line]
        assert len(said) == 1
        return said[0], json.loads(out.read_text())

    def rates_file(name: str, link_bytes_s: float, cache_s: dict) -> str:
        rates = MachineRates(
            cores=2, compute={1: _hand_step_rates()}, link_bytes_s=link_bytes_s,
            latency_s=1e-4, link_samples=[], cache_s=cache_s,
        )  # fmt: skip
        path = tmp_path / name
        path.write_text(json.dumps({"rates": rates.to_dict()}))
        return str(path)

    slow = rates_file("slow.json", 1e5, {"batch": 1e-4, "row": 1e-7})
    said, results = run("--host-sharing", "off", "--plan-rates", slow)
    assert said.startswith("--cache-policy auto: presample 10% (predicted hit rate ")
    assert "the shorter predicted epoch" in said
    # the printed seconds are the plan's, on the partition's own assignment
    pset = read_partitions(parts, verify=False)
    graph = pset.reassemble()
    defaults = TrainConfig()  # the run's fanouts and batch size
    costs = minibatch_costs(
        graph, pset.book.owner(np.arange(graph.num_nodes)), 2, model="sage", hidden=16,
        fanouts=defaults.sampler.fanouts, cache_size="10%",
        batch_size=defaults.node_batch_size(len(graph.train_idx)),
        rates=MachineRates.from_dict(json.loads((tmp_path / "slow.json").read_text())["rates"]),
        workers_per_host=2,
    )  # fmt: skip
    exact = [c for c in costs if "--fetch-bits" not in c.flags]
    pick = recommend(exact)[2]
    assert pick.option == "cache 10%" and f"{pick.epoch_s:.3f} s" in said
    assert results["config"]["cache"]["policy"] == "presample"
    assert results["config"]["plan_rates"] is None
    assert results["cache"]["hit_rate"] == pytest.approx(pick.hit_rate, abs=0.05)
    said, results = run("--host-sharing", "off")
    assert said.startswith("--cache-policy auto: presample 10%")
    assert "its busiest worker sends fewer bytes per epoch" in said
    costly = rates_file("costly.json", 1e12, {"batch": 1.0, "row": 1e-3})
    said, results = run("--host-sharing", "off", "--plan-rates", costly)
    assert said.startswith("--cache-policy auto: none: the shorter predicted epoch")
    assert results["config"]["cache"]["policy"] == "none"
    said, results = run()
    assert said.startswith("--cache-policy auto: none: every owner of a row is on this machine")
    assert results["config"]["cache"]["policy"] == "none"
