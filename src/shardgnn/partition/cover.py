"""Vertex-cut of an edge-cut partition: which end's part computes each crossing edge.

A node partition (METIS, streaming, hypergraph) gives every node an owner, which holds its
features, labels and in-edges. Full-graph training then moves, for every edge ``u -> v`` whose
ends have different owners ``q`` and ``p``, either ``u``'s row to ``p`` (``p`` computes the
edge: *pull*, what the sparsity-aware 1D SpMM does for every such edge) or the partial sum of
``v``'s in-edges from ``q``'s nodes to ``p`` (``q`` computes the edge: *push*). Either way one
row per replica crosses, and the edge is *cut at a vertex*: ``u`` gets a mirror on ``p``, or
``v`` one on ``q``. For each ordered pair of parts the fewest rows that serve every crossing
edge are a minimum vertex cover of the bipartite graph of those edges (König: its size is the
maximum matching's), so a hub with many edges into a part travels once and a node with many
in-edges from one part receives one partial sum: never more rows than pulling them all.

:func:`pulled_crossing_edges` takes the *canonical* minimum cover (built from the nodes that
some maximum matching leaves unmatched, which does not depend on the matching found): each
rank deciding its own pairs and the planner deciding all pairs at once agree edge for edge.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching


def _neighbours(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The column ids of every entry of ``rows`` of a CSR matrix, concatenated."""
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=indices.dtype)
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return indices[first + np.arange(total)]


def canonical_cover(left_E: np.ndarray, right_E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A minimum vertex cover of the bipartite graph whose edges join ``left_E[i]`` and
    ``right_E[i]`` (int64 keys: equal keys are one vertex; repeated edges allowed), as
    ``(left_in_cover_E, right_in_cover_E)``: per edge, whether each end is in the cover.

    The cover is König's from a maximum matching: the right vertices reachable from the
    unmatched left ones by alternating paths, and the left vertices not reachable. Those
    reachable left vertices are the ones some maximum matching leaves unmatched, so the cover is
    the same whichever maximum matching is found, and that of a disjoint union of graphs is the
    union of theirs. It holds as many left vertices as a minimum cover can (the fewest right
    ones).
    """
    left_E = np.asarray(left_E, dtype=np.int64)
    right_E = np.asarray(right_E, dtype=np.int64)
    if left_E.shape[0] == 0:
        empty = np.zeros(0, dtype=bool)
        return empty, empty.copy()
    left_keys, left_of = np.unique(left_E, return_inverse=True)
    right_keys, right_of = np.unique(right_E, return_inverse=True)
    n_left, n_right = left_keys.shape[0], right_keys.shape[0]
    biadjacency = csr_matrix(
        (np.ones(left_of.shape[0], dtype=np.int8), (left_of, right_of)), shape=(n_left, n_right)
    )
    biadjacency.sum_duplicates()
    match_of_left = maximum_bipartite_matching(biadjacency, perm_type="column")
    match_of_right = np.full(n_right, -1, dtype=np.int64)
    matched = np.flatnonzero(match_of_left >= 0)
    match_of_right[match_of_left[matched]] = matched
    reached_left = match_of_left < 0
    reached_right = np.zeros(n_right, dtype=bool)
    frontier = np.flatnonzero(reached_left)
    indptr, indices = biadjacency.indptr.astype(np.int64), biadjacency.indices.astype(np.int64)
    while frontier.shape[0]:
        right = np.unique(_neighbours(indptr, indices, frontier))
        right = right[~reached_right[right]]
        reached_right[right] = True
        # every right vertex reached is matched (else the matching had an augmenting path)
        left = match_of_right[right]
        left = left[~reached_left[left]]
        reached_left[left] = True
        frontier = left
    return ~reached_left[left_of], reached_right[right_of]


def pulled_crossing_edges(
    src_E: np.ndarray,
    dst_E: np.ndarray,
    src_part_E: np.ndarray,
    dst_part_E: np.ndarray,
    num_parts: int,
) -> np.ndarray:
    """Per crossing edge ``src_E[i] -> dst_E[i]`` (global node ids; its ends' parts differ):
    True when ``dst``'s part computes it from ``src``'s row sent there (pull), False when
    ``src``'s part computes it and sends its share of ``dst``'s sum (push).

    The rows that cross are a minimum cover of each ordered pair of parts' crossing edges,
    pushes as few as such a cover allows (:func:`canonical_cover`); every edge whose source row
    crosses is pulled, the others pushed. ``src``'s row then goes to ``dst``'s part for all of
    that pair's edges from ``src`` or for none: pulled edges, pulled rows and pushed partial sums
    are all functions of the pair's edges alone.
    """
    src_E, dst_E = np.asarray(src_E, np.int64), np.asarray(dst_E, np.int64)
    src_part_E, dst_part_E = np.asarray(src_part_E, np.int64), np.asarray(dst_part_E, np.int64)
    assert not np.any(src_part_E == dst_part_E), "crossing edges only"
    # left: (src, dst's part), a row sent to dst's owner; right: (dst, src's part), a partial sum
    pulled, _ = canonical_cover(src_E * num_parts + dst_part_E, dst_E * num_parts + src_part_E)
    return pulled


def cut_rows(
    src_E: np.ndarray,
    dst_E: np.ndarray,
    owner: np.ndarray,
    num_parts: int,
    edge_part: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows a vertex-cut SpMM moves, from a graph's edges (global ids) and its nodes'
    owners: ``(computed_by_E, pull_pairs, push_pairs)``, the part computing every edge (a
    vertex-cut partition's ``edge_part`` where given, self-loops on their owners; else the
    cover of the node partition: each crossing edge on one end's part, the others on their
    owner's) and the ``node * num_parts + part`` keys of every row pulled (``src``'s, to the
    part computing an edge from it that does not own it) and every partial sum pushed
    (``dst``'s, from such a part), each once. The sender of a pulled row is ``owner[key //
    num_parts]``, of a pushed sum ``key % num_parts``; their gradients go the other way."""
    src_E, dst_E = np.asarray(src_E, np.int64), np.asarray(dst_E, np.int64)
    src_part, dst_part = owner[src_E], owner[dst_E]
    if edge_part is not None:
        computed_by = np.asarray(edge_part, dtype=np.int64).copy()
        computed_by[src_E == dst_E] = dst_part[src_E == dst_E]
    else:
        computed_by = dst_part.copy()
        crossing = np.flatnonzero(src_part != dst_part)
        pulled = pulled_crossing_edges(
            src_E[crossing], dst_E[crossing], src_part[crossing], dst_part[crossing], num_parts
        )
        computed_by[crossing[~pulled]] = src_part[crossing[~pulled]]
    pulls = src_part != computed_by
    pushes = dst_part != computed_by
    pull_pairs = np.unique(src_E[pulls] * num_parts + computed_by[pulls])
    push_pairs = np.unique(dst_E[pushes] * num_parts + computed_by[pushes])
    return computed_by, pull_pairs, push_pairs
