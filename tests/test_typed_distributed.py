"""Typed graphs across parts: partitioning with per-type balance, the typed partition book, the
partition round trip, and distributed typed sampling equal to single-process sampling."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import torch

from shardgnn.errors import ConfigError
from shardgnn.graph.synthetic_hetero import AcademicConfig, generate_academic
from shardgnn.partition.config import PartitionConfig
from shardgnn.partition.format import reassemble
from shardgnn.partition.typed import (
    partition_typed_graph,
    reassemble_typed,
    typed_book,
    write_typed_partitions,
)
from shardgnn.sampling.typed import TypedNeighborSampler, relation_fanouts

from distributed_helpers import run_workers

FANOUT_LAYERS = [{"writes": 2, "cites": 3, "rev_writes": 2}, 2, [1, -1, 1, 0, 1, 1, 0, 1]]


@pytest.fixture(scope="module")
def academic():
    config = AcademicConfig(papers=1200, authors=900, institutions=30, fields=24, features=4)
    return generate_academic(config).with_reverse_relations()


def write(graph, path, parts, method="metis"):
    result = partition_typed_graph(graph, PartitionConfig(num_parts=parts, method=method, seed=0))
    write_typed_partitions(
        graph, result.assignment, path, method=result.method, settings=result.settings
    )
    return str(path), result


def edge_list(graph):
    src, dst, etype = graph.edge_arrays()
    return np.stack([dst, etype, src])  # CSR order: rows, relations, then their order


@pytest.mark.parametrize(
    "parts, method", [(2, "metis"), (3, "metis"), (3, "random"), (3, "ldg"), (2, "fennel")]
)
def test_typed_partitions_round_trip_and_balance_every_type(tmp_path, academic, parts, method):
    path, result = write(academic, tmp_path / "p", parts, method)
    back = reassemble_typed(path)
    assert back.relations == academic.relations and back.node_types == academic.node_types
    np.testing.assert_array_equal(back.type_offsets, academic.type_offsets)
    np.testing.assert_array_equal(edge_list(back), edge_list(academic))
    # features per type, the target type's labels and splits travel with the parts
    assert back.x.keys() == academic.x.keys() == {"paper"}
    np.testing.assert_array_equal(back.x["paper"], academic.x["paper"])
    assert back.target_type == "paper" and back.num_classes == academic.num_classes
    np.testing.assert_array_equal(back.y, academic.y)
    for key in ("train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(back, key), getattr(academic, key))
    # the book: type of every new id, and (type, typed id) -> new id, in P x (T + 1) numbers
    book = typed_book(path)
    assert book.type_bounds.shape == (parts, len(academic.node_types) + 1)
    from shardgnn.partition.format import read_partitions

    orig = np.asarray(read_partitions(path, verify=False).orig_ids)
    new_ids = np.arange(academic.num_nodes)
    np.testing.assert_array_equal(book.type_of(new_ids), academic.node_type_of(orig))
    for t, name in enumerate(academic.node_types):
        of_type = new_ids[book.type_of(new_ids) == t]
        np.testing.assert_array_equal(book.new_id(name, np.arange(of_type.size)), of_type)
    if method != "random":
        assert result.settings.get("balance_node_types")
        per_part = np.stack(
            [np.bincount(academic.node_type_of(np.flatnonzero(result.assignment == p)), minlength=4)
             for p in range(parts)]
        )  # fmt: skip
        # every node type is spread evenly (METIS's per-constraint tolerance, small types looser)
        for t in range(4):
            share = per_part[:, t] / per_part[:, t].sum()
            assert share.max() <= 1 / parts + 0.1, (academic.node_types[t], per_part[:, t])


def _typed_sample(ctx, path, fanouts_LR, seed_lists, sample_seed):
    from shardgnn.distributed.comm import Communicator
    from shardgnn.sampling.dist_neighbor import DistTypedNeighborSampler
    from shardgnn.sampling.dist_walks import dist_metapath_walks
    from shardgnn.store.dist_graph import DistGraphStore

    comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
    store = DistGraphStore.open(path, ctx.rank, ctx.world_size, comm)
    out = []
    for replace in (False, True):
        sampler = DistTypedNeighborSampler(store, fanouts_LR, comm, replace=replace)
        sample = sampler.sample(torch.tensor(seed_lists[ctx.rank], dtype=torch.int64), sample_seed)
        out.append(
            [{f.name: getattr(b, f.name) for f in dataclasses.fields(b)} for b in sample.blocks]
        )
    book = typed_book(path)
    authors = np.flatnonzero(book.type_of(np.arange(store.num_nodes)) == 1)[ctx.rank :: 7]
    walks = dist_metapath_walks(
        store, book, comm, ["writes", "rev_writes"], authors, 6, sample_seed,
        walk_offset=1000 * ctx.rank,
    )  # fmt: skip
    return out, authors, walks


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 3])
def test_distributed_typed_sampling_equals_single_process(tmp_path, academic, world):
    path, _ = write(academic, tmp_path / "p", world)
    fanouts = relation_fanouts(academic.relations, FANOUT_LAYERS)
    full = reassemble(path)  # new ids: what the workers see
    etype = np.concatenate([np.asarray(typed_part.etype) for typed_part in _parts(path, world)])
    new_graph = types.SimpleNamespace(
        indptr=full.indptr, indices=full.indices, etype=etype, num_nodes=full.num_nodes,
        num_edges=full.num_edges, num_relations=academic.num_relations,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    seed_lists = [rng.choice(full.num_nodes, 50, replace=False).tolist() for _ in range(world)]
    seed_lists[-1] = []  # a rank with no seeds still serves the others
    results = run_workers(_typed_sample, world, path, fanouts, seed_lists, 91)
    # meta-path walks drawn step by step by the current node's owner are one process's walks
    from shardgnn.sampling.walks import metapath_walks

    book = typed_book(path)
    walk_graph = types.SimpleNamespace(
        indptr=full.indptr, indices=full.indices, etype=etype, relations=book.relations,
        node_types=book.node_types, node_type_of=book.type_of,
    )  # fmt: skip
    for rank, (_, authors, walks) in enumerate(results):
        expect = metapath_walks(walk_graph, ["writes", "rev_writes"], authors, 6, 91, 1000 * rank)
        np.testing.assert_array_equal(walks, expect)
        assert (walks[:, 1] >= 0).any() and authors.size
    results = [runs for runs, _, _ in results]
    for rank, runs in enumerate(results):
        for replace, blocks in zip((False, True), runs):
            ref = TypedNeighborSampler(new_graph, fanouts, replace=replace)
            expect = ref.sample(np.asarray(seed_lists[rank], dtype=np.int64), seed=91)
            assert len(blocks) == len(expect.blocks) == 3
            for got, want in zip(blocks, expect.blocks):
                for name, value in got.items():
                    want_value = getattr(want, name)
                    same = (
                        value == want_value
                        if value is None or isinstance(value, int)
                        else torch.equal(value, want_value)
                    )
                    assert same, (rank, replace, name)
            # relations respected: layer l's edges only from relations with a fanout there
            for layer, block in enumerate(reversed(blocks)):
                rel = etype[block["edge_ids_E"].numpy()]
                assert np.all(fanouts[layer][rel] != 0)
                # the relations the owners sent with the edges are the edges' relations
                np.testing.assert_array_equal(block["edge_type_E"].numpy(), rel)


def _parts(path, world):
    from shardgnn.partition.format import read_partitions

    pset = read_partitions(path, verify=False)
    return [pset.load_part(p) for p in range(world)]


def _train(ctx, config):
    from shardgnn.train.worker import train_with_context

    return train_with_context(config, ctx)


def _rgcn_config(path, workers, **changes):
    from shardgnn.nn.config import ModelConfig
    from shardgnn.sampling.config import SamplerConfig
    from shardgnn.train.config import OptimConfig, RunConfig, TrainConfig

    settings = dict(
        dataset="synthetic-hetero",
        model=ModelConfig(model="rgcn", hidden=16, num_bases=4, dropout=0.0),
        sampler=SamplerConfig(fanouts=(4, 4)),
        optim=OptimConfig(epochs=5, lr=0.02),
        batch_size=128,
        run=RunConfig(partitions=str(path), workers=workers),
        seed=3,
        progress=False,
        threads=1,
    )
    settings.update(changes)
    return TrainConfig(**settings)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A learnable academic graph partitioned into 1 and 2 parts (with reverse relations)."""
    config = AcademicConfig(
        papers=2000,
        authors=1500,
        institutions=30,
        fields=20,
        features=8,
        snr=2.0,
        train=0.3,
        seed=1,
    )
    graph = generate_academic(config).with_reverse_relations()
    root = tmp_path_factory.mktemp("typed")
    return {p: write(graph, root / f"p{p}", p)[0] for p in (1, 2)}


@pytest.mark.slow
@pytest.mark.multiprocess
def test_distributed_rgcn_two_workers_match_one_and_infer_layer_wise(labelled, tmp_path):
    """R-GCN with typed feature fetch, sharded learnt rows for featureless types and DDP: two
    workers reach one worker's accuracy (the same global batch and steps; only the seeds'
    split over ranks and their sampling streams differ). Layer-wise inference from the two
    workers' checkpoint equals one process's full-graph forward pass with the same weights."""
    from shardgnn.train.config import CheckpointConfig

    one = run_workers(_train, 1, _rgcn_config(labelled[1], 1))[0]
    ckpt = CheckpointConfig(dir=str(tmp_path / "ckpt"))
    two = run_workers(_train, 2, _rgcn_config(labelled[2], 2, checkpoint=ckpt))[0]
    assert one["test_acc"] > 0.5 and two["test_acc"] > 0.5  # 8 classes: chance is 0.125
    assert abs(one["test_acc"] - two["test_acc"]) < 0.06, (one["test_acc"], two["test_acc"])
    per_relation = two["relational"]["relations"]
    assert set(per_relation) == {"/".join(r) for r in typed_book(labelled[2]).relations}
    # two hops from papers reach papers, authors and fields through these relations (never
    # an institution: affiliated_with is not sampled); cut edges cross ranks
    sampled = {k for k, r in per_relation.items() if r["sampled_edges_per_epoch"] > 0}
    assert sampled == {
        "author/writes/paper", "paper/cites/paper", "paper/has_topic/field",
        "paper/rev_writes/author", "paper/rev_cites/paper", "field/rev_has_topic/paper",
        "institution/rev_affiliated_with/author",
    }  # fmt: skip
    assert sum(r["remote_mb_per_epoch"] for r in per_relation.values()) > 0
    types = two["relational"]["node_types"]
    assert types["paper"]["learnt_rows"] is False and types["author"]["learnt_rows"] is True
    _check_inference(labelled[2], tmp_path / "ckpt", tmp_path / "inferred")
    _check_resume_on_one_worker(labelled[1], tmp_path / "ckpt", two)


def _check_resume_on_one_worker(path, checkpoint, two):
    """Issue 33: the two workers' checkpoint resumes on one worker: each featureless type's
    learnt rows and their Adam state re-sharded by original typed id, bit for bit; the run goes
    on and keeps the two workers' accuracy."""
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.checkpoint import Checkpointer, reshard
    from shardgnn.train.config import CheckpointConfig, OptimConfig

    written = Checkpointer(checkpoint).complete()[-1]
    old = [torch.load(written / f"rank-{p}.pt", weights_only=True) for p in range(2)]
    prefixes = sorted(n[: -len("node_ids")] for n in old[0]["model"] if n.endswith("node_ids"))
    assert prefixes == ["learnt_rows.1.", "learnt_rows.2.", "learnt_rows.3."]
    pset, typed = read_partitions(path, verify=False), typed_book(path)
    rows = {}
    for prefix in prefixes:
        t = int(prefix.split(".")[1])
        lo, hi = (int(b) for b in typed.type_bounds[0, t : t + 2])
        rows[prefix] = np.asarray(pset.orig_ids[lo:hi]) - typed.type_offsets[t]
    state = reshard(old, 0, rows)
    for prefix, ids in rows.items():
        every = torch.cat([s["model"][prefix + "node_ids"] for s in old])
        for name, tensor in state["model"].items():
            if name.startswith(prefix) and name != prefix + "node_ids" and tensor.dim():
                table = torch.cat([s["model"][name] for s in old])
                by_id = torch.empty_like(table)
                by_id[every] = table
                assert torch.equal(tensor, by_id[torch.from_numpy(ids)]), name
    resumed = _rgcn_config(
        path, 1, optim=OptimConfig(epochs=7, lr=0.02),
        checkpoint=CheckpointConfig(dir=str(checkpoint), resume=True),
    )  # fmt: skip
    one = run_workers(_train, 1, resumed)[0]
    assert [e["epoch"] for e in one["epochs"]] == list(range(1, 8))
    assert one["epochs"][:5] == two["epochs"]
    assert one["test_acc"] > two["test_acc"] - 0.06, (one["test_acc"], two["test_acc"])


def _check_inference(path, checkpoint, out):
    from shardgnn.cli import main
    from shardgnn.partition.format import read_partitions
    from shardgnn.train.inference import check_feature_storage

    argv = ["infer", "--checkpoint", str(checkpoint), "--partitions", path, "--out", str(out)]
    assert main([*argv, "--feature-storage", "disk"]) == 2  # refused before any worker starts
    with pytest.raises(ConfigError, match="--feature-storage disk: .* holds a typed graph"):
        check_feature_storage("disk", read_partitions(path, verify=False).kind, path)
    assert main([*argv, "--chunk-rows", "300"]) == 0
    graph = reassemble_typed(path)  # original ids
    embeddings, logits = _one_process_forward(path, checkpoint, graph, graph.num_classes)
    for t, name in enumerate(graph.node_types):
        lo, hi = graph.type_offsets[t], graph.type_offsets[t + 1]
        got = np.load(out / name / "embeddings.npy")
        np.testing.assert_allclose(got, embeddings[lo:hi].numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(
        np.load(out / "paper" / "logits.npy"), logits[: graph.num_nodes_of("paper")].numpy(),
        atol=1e-5, rtol=1e-4,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["hetero-sage", "hgt"])
def test_distributed_hetero_sage_and_hgt_learn_on_two_workers(labelled, name):
    """Heterogeneous GraphSAGE (an aggregator per relation, summed per destination type) and
    HGT (per-type keys, queries, values) on the same distributed path: the nodes' types come
    from the typed book."""
    from shardgnn.nn.config import ModelConfig

    model = ModelConfig(model=name, hidden=16, dropout=0.0, heads=2)
    two = run_workers(_train, 2, _rgcn_config(labelled[2], 2, model=model))[0]
    assert two["config"]["model"]["model"] == name
    assert two["test_acc"] > 0.5, two["test_acc"]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_label_tables_of_a_typed_graph_train_on_workers_and_infer(tmp_path):
    """Issue 31: several tasks' labels (a class, 16 tags, a score) on a typed graph's papers,
    partitioned with their NaN-filled rows: two workers reach one worker's metric within noise,
    and ``shardgnn infer`` over the two workers' checkpoint writes what the target predicts
    (class id, tag probabilities, score) equal to a one-process forward pass of the same
    weights, and each split's metric."""
    import json

    from shardgnn.cli import main
    from shardgnn.train.config import CheckpointConfig
    from shardgnn.train.typed import typed_target

    config = AcademicConfig(
        papers=2000, authors=1500, institutions=30, fields=20, features=8, snr=2.0, train=0.3,
        seed=1, labels="multitask",
    )  # fmt: skip
    graph = generate_academic(config).with_reverse_relations()
    paths = {p: write(graph, tmp_path / f"p{p}", p)[0] for p in (1, 2)}
    one = run_workers(_train, 1, _rgcn_config(paths[1], 1))[0]
    ckpt = CheckpointConfig(dir=str(tmp_path / "ckpt"))
    two = run_workers(_train, 2, _rgcn_config(paths[2], 2, checkpoint=ckpt))[0]
    for run in (one, two):
        assert run["metric"] == "tasks" and run["label_kind"] == "multitask"
        tasks = run["metric_details"]["test"]["tasks"]
        assert tasks["community"]["value"] > 0.25, tasks  # 8 classes: chance is 0.125
        assert tasks["tags"]["value"] > 0.5 and len(tasks["tags"]["rocauc_per_label"]) == 16
    assert abs(one["test_acc"] - two["test_acc"]) < 0.08, (one["test_acc"], two["test_acc"])

    out = tmp_path / "inferred"
    argv = ["infer", "--checkpoint", str(tmp_path / "ckpt"), "--partitions", paths[2]]
    assert main([*argv, "--out", str(out)]) == 0
    summary = json.loads((out / "inference.json").read_text())
    assert summary["label_kind"].startswith("multitask") and summary["metric"]["name"] == "tasks"
    assert all(summary["metric"][s] > 0.1 for s in ("train", "val", "test")), summary["metric"]
    whole = reassemble_typed(paths[2])
    target = typed_target(whole)
    _, logits = _one_process_forward(paths[2], tmp_path / "ckpt", whole, target.out_dim)
    papers = whole.num_nodes_of("paper")
    expected = target.predict(logits[:papers]).numpy()
    predictions = np.load(out / "paper" / "predictions.npy")
    assert predictions.shape == (papers, 18)  # a class id, 16 tag probabilities, a score
    np.testing.assert_allclose(predictions, expected, atol=1e-5, rtol=1e-4)
    header = (out / "paper" / "predictions.csv").read_text().splitlines()[0]
    assert header.startswith("node_id,value_0,") and header.endswith("value_17")


def _one_process_forward(path, checkpoint, graph, out_dim):
    """``(embeddings, outputs)`` of every node of ``graph`` (the partition at ``path``
    reassembled, original ids) with the weights and learnt rows of ``checkpoint``: one process's
    full-graph forward pass, layer-wise."""
    from shardgnn.nn.typed import layerwise_forward, partitioned_node_model
    from shardgnn.train.checkpoint import read_checkpoint_meta
    from shardgnn.train.config import TrainConfig
    from shardgnn.train.inference import load_typed_rows, resolve_checkpoint

    resolved = resolve_checkpoint(checkpoint)
    config = TrainConfig.from_dict(read_checkpoint_meta(resolved)["config"])
    weights, tables = load_typed_rows(resolved)
    model = partitioned_node_model(config.model, typed_book(path), out_dim)
    model.load_state_dict(weights)
    model.eval()
    with torch.no_grad():
        x = torch.cat(
            [
                model.typed_input.project["0"](torch.from_numpy(graph.x["paper"]))
                if name == "paper"
                else tables[t]
                for t, name in enumerate(graph.node_types)
            ]
        )
        return layerwise_forward(
            model.encoder, x, graph.indptr, graph.indices, graph.etype, 0,
            lambda h, ids: h[torch.from_numpy(ids)], graph.node_type_of,
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.multiprocess
def test_typed_node_checkpoints_move_between_one_process_and_workers(tmp_path):
    """Issue 33: one process holds a featureless type's learnt rows as one worker holds its
    part's (rows, typed ids, sparse Adam state), so two workers' checkpoint resumes in one
    process (re-sharded by typed id, bit for bit) and one process's on two workers; each run
    goes on from the checkpoint's epochs and ends within noise of the other; one process's
    checkpoint infers over the partition (its rows by typed id)."""
    from shardgnn.cli import main
    from shardgnn.train.checkpoint import Checkpointer, reshard
    from shardgnn.train.config import CheckpointConfig, OptimConfig, RunConfig
    from shardgnn.train.single import run_training
    from shardgnn.train.typed import TypedNodeSteps

    spec = (
        "synthetic-hetero:papers=2000,authors=1500,institutions=30,fields=20,features=8,"
        "snr=2.0,train=0.3,seed=1"
    )
    parts = str(tmp_path / "parts")
    assert main(["partition", spec, "--parts", "2", "--out", parts]) == 0

    def config(workers, directory, epochs, resume=False):
        run = RunConfig(partitions=parts, workers=workers) if workers else RunConfig()
        return _rgcn_config(
            parts, 2, dataset=spec, run=run, optim=OptimConfig(epochs=epochs, lr=0.02),
            checkpoint=CheckpointConfig(dir=str(tmp_path / directory), resume=resume),
        )  # fmt: skip

    two = run_workers(_train, 2, config(2, "from-two", 3))[0]
    written = Checkpointer(tmp_path / "from-two").complete()[-1]
    old = [torch.load(written / f"rank-{p}.pt", weights_only=True) for p in range(2)]
    rows = TypedNodeSteps(config(0, "unused", 1)).sharded_rows()
    assert sorted(rows) == ["learnt_rows.1.", "learnt_rows.2.", "learnt_rows.3."]
    state = reshard(old, 0, rows)
    for prefix, ids in rows.items():
        np.testing.assert_array_equal(ids, np.arange(len(ids)))  # one process: every typed id
        every = torch.cat([s["model"][prefix + "node_ids"] for s in old])
        for name in ("weight", "exp_avg", "exp_avg_sq"):
            by_id = torch.empty_like(state["model"][prefix + name])
            by_id[every] = torch.cat([s["model"][prefix + name] for s in old])
            assert torch.equal(state["model"][prefix + name], by_id), prefix + name
    one = run_training(config(0, "from-two", 5, resume=True))
    assert [e["epoch"] for e in one["epochs"]] == [1, 2, 3, 4, 5]
    assert one["epochs"][:3] == two["epochs"]
    assert one["test_acc"] > two["test_acc"] + 0.05, (one["test_acc"], two["test_acc"])

    first = run_training(config(0, "from-one", 3))
    # one process's checkpoint infers over the partition as a workers' does
    out = tmp_path / "inferred"
    argv = ["infer", "--checkpoint", str(tmp_path / "from-one"), "--partitions", parts]
    assert main([*argv, "--out", str(out)]) == 0
    whole = reassemble_typed(parts)
    _, logits = _one_process_forward(parts, tmp_path / "from-one", whole, whole.num_classes)
    papers = whole.num_nodes_of("paper")
    np.testing.assert_allclose(
        np.load(out / "paper" / "logits.npy"), logits[:papers].numpy(), atol=1e-5, rtol=1e-4
    )
    resumed = run_workers(_train, 2, config(2, "from-one", 5, resume=True))[0]
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2, 3, 4, 5]
    assert resumed["epochs"][:3] == first["epochs"]
    assert abs(resumed["test_acc"] - one["test_acc"]) < 0.1, (resumed["test_acc"], one["test_acc"])
