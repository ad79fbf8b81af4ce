"""The vertex-cut of an edge-cut partition (``shardgnn.partition.cover``): a minimum vertex cover
per pair of parts (checked against every subset on small graphs), the same whichever way the
pairs are grouped, and never more rows than pulling every source row."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardgnn.partition.cover import canonical_cover, cut_rows, pulled_crossing_edges


def _smallest_covers(left, right) -> tuple[int, int]:
    """The size of a minimum vertex cover and the most left vertices one holds, by trying every
    subset (small graphs only)."""
    vertices = [("l", v) for v in np.unique(left)] + [("r", v) for v in np.unique(right)]
    for size in range(len(vertices) + 1):
        lefts = [
            sum(side == "l" for side, _ in chosen)
            for chosen in map(set, itertools.combinations(vertices, size))
            if all(("l", a) in chosen or ("r", b) in chosen for a, b in zip(left, right))
        ]
        if lefts:
            return size, max(lefts)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("seed", range(40))
def test_the_cover_covers_every_edge_is_minimum_and_holds_the_most_left_vertices(seed):
    rng = np.random.default_rng(seed)
    edges = int(rng.integers(1, 14))
    left = rng.integers(0, rng.integers(1, 6), edges)
    right = rng.integers(0, rng.integers(1, 6), edges) + 100
    in_left, in_right = canonical_cover(left, right)
    assert np.all(in_left | in_right)
    # one answer per vertex: every edge of a vertex agrees
    for keys, flags in ((left, in_left), (right, in_right)):
        for key in np.unique(keys):
            assert len(set(flags[keys == key])) == 1
    lefts = len(np.unique(left[in_left]))
    assert (lefts + len(np.unique(right[in_right])), lefts) == _smallest_covers(left, right)


def test_the_cover_does_not_depend_on_grouping_or_order():
    """The cover of a disjoint union is the union of the parts' covers, in any edge order: the
    planner (every pair of parts at once) and each worker (its own pairs) agree."""
    rng = np.random.default_rng(0)
    pieces = []
    for g in range(30):
        e = int(rng.integers(1, 40))
        pieces.append((rng.integers(0, 8, e) + 1000 * g, rng.integers(0, 8, e) + 1000 * g))
    alone = [canonical_cover(a, b) for a, b in pieces]
    left = np.concatenate([a for a, _ in pieces])
    right = np.concatenate([b for _, b in pieces])
    order = rng.permutation(left.shape[0])
    in_left, in_right = canonical_cover(left[order], right[order])
    undo = np.argsort(order)
    assert np.array_equal(in_left[undo], np.concatenate([a for a, _ in alone]))
    assert np.array_equal(in_right[undo], np.concatenate([b for _, b in alone]))


def test_a_hub_is_pulled_once_and_a_sink_gets_one_partial_sum():
    """Part 0 holds nodes 0-9, part 1 nodes 10-19. Node 0 points at 10 nodes of part 1 (pull
    its row: 1 row, not 10 partial sums); nodes 1-9 all point at node 10 (push one partial sum
    of 9 edges, not 9 rows); 1 -> 11 alone (one row either way)."""
    owner = np.repeat([0, 1], 10)
    src = np.array([0] * 10 + list(range(1, 10)) + [1])
    dst = np.array(list(range(10, 20)) + [10] * 9 + [11])
    computed_by, pull_pairs, push_pairs = cut_rows(src, dst, owner, 2)
    assert len(pull_pairs) + len(push_pairs) == 3  # a minimum cover: node 0, node 10, and one more
    assert np.all(computed_by[:10] == 1)  # the hub's edges from its row, on their ends' part
    assert 10 * 2 + 0 in push_pairs  # node 10's partial sum from part 0
    # every source row pulled instead (the sparsity-aware 1D plan): 10 distinct rows
    assert len(np.unique(src * 2 + owner[dst])) == 10


def test_edges_inside_a_part_are_pulled_and_crossing_edges_only_are_decided():
    owner = np.array([0, 0, 1, 1])
    src, dst = np.array([0, 1, 2, 0]), np.array([1, 0, 3, 2])
    computed_by, pull_pairs, push_pairs = cut_rows(src, dst, owner, 2)
    assert computed_by[:3].tolist() == [0, 0, 1]  # inside a part: its own
    assert pull_pairs.tolist() == [0 * 2 + 1] and push_pairs.size == 0
    with pytest.raises(AssertionError, match="crossing edges only"):
        pulled_crossing_edges(np.array([0]), np.array([1]), np.array([0]), np.array([0]), 2)
    assert canonical_cover(np.zeros(0, np.int64), np.zeros(0, np.int64))[0].shape == (0,)


def test_never_more_rows_than_pulling_on_a_power_law_graph():
    from shardgnn.graph.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=3000, degree=10, seed=1))
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    src = np.asarray(g.indices, dtype=np.int64)
    owner = np.random.default_rng(0).integers(0, 4, g.num_nodes)
    _, pull_pairs, push_pairs = cut_rows(src, dst, owner, 4)
    crossing = owner[src] != owner[dst]
    sparse_1d = len(np.unique(src[crossing] * 4 + owner[dst][crossing]))
    assert len(pull_pairs) + len(push_pairs) < sparse_1d
