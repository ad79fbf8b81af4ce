"""Remote dependencies of sparse 1D full-graph training: communicated, cached, or a hybrid of the
two chosen node by node (``--dependencies``; NeutronStar, Wang et al., SIGMOD 2022).

A layer of ``1d-sparse`` (:mod:`shardgnn.fullgraph.spmm`) sums, for every row a worker owns, its
in-neighbours' rows; the rows of nodes another worker owns come from their owners every step and
their gradients go back (*communicate*). The alternative is to *cache* a remote dependency: hold
what the node's row is computed from and compute it here too. A remote node ``u`` whose row of
layer ``i``'s input is needed here is then computed here by every layer below ``i``, which needs
its in-neighbours' rows at those layers (each again communicated or cached), down to its
features, fetched once at set-up; at layer 0, caching a neighbour is holding its feature row.

A worker's rows, in local order: its own, then the nodes recomputed for layer ``L - 1``, then
those for ``L - 2`` ... ``1``, then the cached feature rows of layer 0. Layer ``i`` computes the
rows of a prefix ``D_i`` (own rows and the nodes recomputed for the layers above) from a longer
prefix ``S_i`` (``D_i`` and the nodes recomputed for layer ``i``; at layer 0 the cached inputs)
and the rows communicated to it, ``M_i`` (sorted global ids, one :class:`RowPlan` exchange with
their owners per step): a sampled block's layout (its dst nodes the first of its src nodes), so
the model's layers run unchanged, dropout keyed by original node id drops a recomputed row as its
owner drops it, and every dst row sums all its in-edges with graph-wide degrees: the result is
one process's, to rounding.

* ``communicate`` (the default) is ``1d-sparse`` itself (none of this module runs);
* ``cache``: every remote dependency: each worker holds its rows' ``L``-hop in-neighbourhood and
  exchanges no rows per step (the gradient all-reduce remains);
* ``hybrid``: per remote node, the cost model (:class:`DependencyCosts`, priced from this
  machine's rates of ``shardgnn plan --calibrate`` by
  :func:`~shardgnn.fullgraph.plan.dependency_costs`) compares a step's seconds sending its
  row (and gradient) with those of computing it here: its rows at every layer below
  (aggregated entries, dense layers) and, for each of its in-neighbours nothing else here
  needs, getting that one too (its exchange at each layer below, or at layer 0 the cheaper of
  exchanging and caching it). Layers are decided from the top, a layer's nodes in order of how
  few new in-neighbours they bring (NeutronStar's greedy); each node accepted makes its
  in-neighbours free for the next. At layer 0 a feature row is cached when transforming it here
  costs less than its exchange: with sparse features, row by row from its own non-zeros, else
  one choice for all rows. ``shardgnn plan`` selects and prices the same rows
  (:func:`~shardgnn.fullgraph.plan.dependency_cost`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from shardgnn.distributed.comm import Communicator
from shardgnn.fullgraph.rows import owner_requests
from shardgnn.graph.csr import concat_ranges
from shardgnn.partition.book import PartitionBook

Nonzeros = Callable[[np.ndarray], np.ndarray]
"""``nonzeros(nodes)`` for sorted global ids: each node's feature non-zeros (collective)"""

Fetch = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
"""``fetch(nodes)`` for sorted global ids: ``(indptr, sources, degree, source_degree)``, their
in-edges as a CSR of global sources, each node's and each source's graph in-degree (collective)"""


@dataclasses.dataclass(frozen=True)
class DependencyCosts:
    """Seconds of one training step, per row, by layer (index ``i``: layer ``i``).

    Attributes:
        communicate_s: a row of layer ``i``'s input sent to a worker that needs it, and its
            gradient back where that input has one.
        entry_s: one aggregated entry of layer ``i`` (the forward product and, where the input
            has a gradient, the backward's transposed one).
        row_s: one more destination row of layer ``i``: its dense layers, forward and backward.
        input_s: one more cached feature row at layer 0: its transform before the aggregation
            where the first layer projects first, 0 where it aggregates the features themselves
            (sparse features: the row of their mean non-zeros).
        input_nonzero_s: sparse features projected first: ``input_s`` per non-zero of the row,
            which prices each cached row by its own (``None``: dense features, or none
            transformed).
    """

    communicate_s: tuple[float, ...]
    entry_s: tuple[float, ...]
    row_s: tuple[float, ...]
    input_s: float
    input_nonzero_s: float | None = None

    def recompute_s(self, layer: int, in_edges: int, new: int) -> float:
        """Computing here a remote node's row of layer ``layer``'s input (``layer >= 1``): its
        rows at every layer below (``in_edges`` entries and its own each) and, at each of those
        layers, each of its ``new`` in-neighbours that nothing else here needs."""
        own = sum((in_edges + 1) * self.entry_s[j] + self.row_s[j] for j in range(layer))
        # a neighbour's features are priced at the mean row's (its own non-zeros are not
        # fetched until layer 0 is decided)
        neighbour = min(self.communicate_s[0], self.input_s) + sum(self.communicate_s[1:layer])
        return own + new * neighbour


@dataclasses.dataclass
class DependencySets:
    """What one worker computes and receives, layer by layer (the module docstring's notation).

    Attributes:
        nodes: int64 global ids of the local rows, in local order (own rows first).
        dst_rows: per layer, ``|D_i|`` (a prefix of ``nodes``).
        src_rows: per layer, ``|S_i|`` (a longer prefix).
        received: per layer, ``M_i``: sorted global ids of the rows communicated to it.
        indptr, sources: the in-edges (global sources) of the first ``dst_rows[0]`` local rows,
            every row any layer computes, as a CSR.
        degree_ids, degrees: sorted global ids of every node met and their graph in-degrees.
    """

    nodes: np.ndarray
    dst_rows: list[int]
    src_rows: list[int]
    received: list[np.ndarray]
    indptr: np.ndarray
    sources: np.ndarray
    degree_ids: np.ndarray
    degrees: np.ndarray

    @property
    def num_layers(self) -> int:
        return len(self.dst_rows)

    def recomputed(self, layer: int) -> int:
        """Remote nodes whose rows of layer ``layer``'s input are computed here (layer 0: the
        cached feature rows)."""
        return self.src_rows[layer] - self.dst_rows[layer]

    def degree_of(self, ids: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.degree_ids, ids)
        assert np.array_equal(self.degree_ids[np.minimum(at, len(self.degree_ids) - 1)], ids)
        return self.degrees[at]

    def layer_csr(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Layer ``layer``'s block: ``(indptr, columns, column_ids)``, the in-edges of its
        ``dst_rows`` rows in columns ``[S_i rows (local order) | M_i rows]``, and each column's
        global id."""
        dst, src, received = self.dst_rows[layer], self.src_rows[layer], self.received[layer]
        indptr = self.indptr[: dst + 1]
        sources = self.sources[: indptr[-1]]
        order = np.argsort(self.nodes[:src], kind="stable")
        local_sorted = self.nodes[:src][order]
        at = np.minimum(np.searchsorted(local_sorted, sources), max(src - 1, 0))
        local = local_sorted[at] == sources if src else np.zeros(len(sources), dtype=bool)
        columns = np.empty(len(sources), dtype=np.int64)
        columns[local] = order[at[local]]
        remote = np.searchsorted(received, sources[~local])
        assert np.array_equal(received[remote], sources[~local]), "every in-neighbour is provided"
        columns[~local] = src + remote
        return indptr, columns, np.concatenate([self.nodes[:src], received])


def select_dependencies(
    own_indptr: np.ndarray,
    own_sources: np.ndarray,
    own_nodes: np.ndarray,
    degree_ids: np.ndarray,
    degrees: np.ndarray,
    num_layers: int,
    mode: str,
    fetch: Fetch,
    costs: DependencyCosts | None = None,
    nonzeros: Nonzeros | None = None,
) -> DependencySets:
    """Decide, layer by layer from the top, which remote rows this worker computes and which it
    receives (see the module docstring).

    Collective through ``fetch``: called once for each layer above the first, by every worker,
    with the remote nodes whose rows that layer needs (the in-edges of each such node are needed
    to price it and, when it is recomputed, to compute it).

    Args:
        own_indptr, own_sources: the in-edges of this worker's own rows (global sources).
        own_nodes: their global ids, in local order.
        degree_ids, degrees: graph in-degrees of the own rows and their sources (any order).
        num_layers: the model's message-passing layers.
        mode: ``cache`` (every remote dependency) or ``hybrid`` (the cheaper, by ``costs``).
        nonzeros: the hybrid's feature non-zeros of layer 0's candidate rows where ``costs``
            prices them per non-zero (collective: called once, by every worker).
    """
    assert mode in ("cache", "hybrid") and (mode == "cache" or costs is not None)
    nodes = [np.asarray(own_nodes, dtype=np.int64)]
    indptrs, sources = [np.asarray(own_indptr, dtype=np.int64)], [own_sources.astype(np.int64)]
    edges = int(indptrs[0][-1])
    met_ids, met_degrees = [degree_ids], [degrees]
    dst_rows, src_rows = [0] * num_layers, [0] * num_layers
    received: list[np.ndarray] = [np.zeros(0, np.int64)] * num_layers
    for layer in reversed(range(num_layers)):
        local = np.concatenate(nodes)  # D_layer: every row with in-edges so far
        needed = np.unique(np.concatenate(sources))
        candidates = np.setdiff1d(needed, local, assume_unique=True)
        dst_rows[layer] = len(local)
        if layer == 0:
            if mode == "cache":
                kept = candidates
            elif costs.input_nonzero_s is not None:
                assert nonzeros is not None, "sparse features are priced row by row"
                row_s = nonzeros(candidates) * costs.input_nonzero_s
                kept = candidates[row_s < costs.communicate_s[0]]
            else:
                kept = candidates if costs.input_s < costs.communicate_s[0] else candidates[:0]
        else:
            c_indptr, c_sources, c_degree, c_source_degree = fetch(candidates)
            met_ids += [candidates, c_sources]
            met_degrees += [c_degree, c_source_degree]
            if mode == "cache":
                keep = np.ones(len(candidates), dtype=bool)
            else:
                known = np.union1d(local, needed)
                keep = _greedy(layer, c_indptr, c_sources, known, costs)
            kept = candidates[keep]
            rows = np.flatnonzero(keep)
            counts = np.diff(c_indptr)[rows]
            indptrs.append(np.cumsum(counts) + edges)
            edges += int(counts.sum())
            sources.append(c_sources[concat_ranges(c_indptr[rows], counts)])
        nodes.append(kept)
        src_rows[layer] = len(local) + len(kept)
        received[layer] = np.setdiff1d(candidates, kept, assume_unique=True)
    ids = np.concatenate(met_ids).astype(np.int64)
    ids, first = np.unique(ids, return_index=True)
    return DependencySets(
        nodes=np.concatenate(nodes),
        dst_rows=dst_rows,
        src_rows=src_rows,
        received=received,
        indptr=np.concatenate(indptrs),
        sources=np.concatenate(sources),
        degree_ids=ids,
        degrees=np.concatenate(met_degrees).astype(np.int64)[first],
    )


def _greedy(
    layer: int,
    indptr: np.ndarray,
    sources: np.ndarray,
    known: np.ndarray,
    costs: DependencyCosts,
) -> np.ndarray:
    """Which candidate rows (their in-edges ``indptr``/``sources``) layer ``layer`` recomputes:
    in order of fewest new in-neighbours (not in ``known``; then fewest in-edges, then id
    order), each whose recomputation costs less than communicating it, counting as new only
    the in-neighbours no node accepted before it brought."""
    counts = np.diff(indptr)
    fresh = ~np.isin(sources, known)
    rows_E = np.repeat(np.arange(len(counts)), counts)
    new = np.bincount(rows_E[fresh], minlength=len(counts))
    keep = np.zeros(len(counts), dtype=bool)
    brought: set[int] = set()
    limit = costs.communicate_s[layer]
    for k in np.lexsort((np.arange(len(counts)), counts, new)):
        mine = sources[indptr[k] : indptr[k + 1]][fresh[indptr[k] : indptr[k + 1]]]
        extra = {int(v) for v in mine} - brought
        if costs.recompute_s(layer, int(counts[k]), len(extra)) < limit:
            keep[k] = True
            brought |= extra
    return keep


def fetch_in_edges(
    comm: Communicator,
    book: PartitionBook,
    own_indptr: np.ndarray,
    own_sources: np.ndarray,
    source_degree: np.ndarray,
    own_degree: np.ndarray,
    nodes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The in-edges of ``nodes`` (sorted global ids of other workers' rows) from their owners:
    ``(indptr, sources, degree, source_degree)`` (the owners' CSR order; see :data:`Fetch`).
    Collective over ``comm`` (three all-to-alls, counted under ``setup``); ``own_*`` are this
    worker's rows' CSR, its sources' and its rows' graph in-degrees, which it serves."""
    _, requests = owner_requests(book, nodes, comm.world_size)
    heads, edges = [], []
    for asked in comm.all_to_all(requests, "setup"):
        rows = asked.numpy()
        counts = own_indptr[rows + 1] - own_indptr[rows]
        at = concat_ranges(own_indptr[rows], counts)
        heads.append(torch.from_numpy(np.stack([counts, own_degree[rows]], axis=1)))
        edges.append(torch.from_numpy(np.stack([own_sources[at], source_degree[at]], axis=1)))
    head = torch.cat(comm.all_to_all(heads, "setup")).numpy().reshape(-1, 2)
    edge = torch.cat(comm.all_to_all(edges, "setup")).numpy().reshape(-1, 2)
    indptr = np.concatenate([[0], np.cumsum(head[:, 0])]).astype(np.int64)
    return indptr, edge[:, 0].copy(), head[:, 1].copy(), edge[:, 1].copy()


def fetch_nonzeros(
    comm: Communicator, book: PartitionBook, own_nonzeros: np.ndarray, nodes: np.ndarray
) -> np.ndarray:
    """Each of ``nodes``' (sorted global ids of other workers' rows) feature non-zeros, from
    their owners' ``own_nonzeros`` (one per own row). Collective over ``comm`` (two
    all-to-alls, counted under ``setup``)."""
    _, requests = owner_requests(book, nodes, comm.world_size)
    answers = [
        torch.from_numpy(own_nonzeros[asked.numpy()])
        for asked in comm.all_to_all(requests, "setup")
    ]
    # sorted ids come owner by owner, each owner's in the order asked
    return torch.cat(comm.all_to_all(answers, "setup")).numpy().astype(np.int64)


def gather_sparse_rows(
    comm: Communicator, book: PartitionBook, own_NF: torch.Tensor, remote: np.ndarray
) -> torch.Tensor:
    """``[N + R, F]`` sparse COO: this worker's rows ``own_NF`` (sparse COO, its own nodes in
    order), then the rows of ``remote`` (global ids of other workers' nodes, any order) from
    their owners' ``own_NF``: each row's non-zeros cross (column and value), never its zeros.
    Collective over ``comm`` (three all-to-alls, counted under ``setup``)."""
    n, width = own_NF.shape
    owners, requests = owner_requests(book, remote, comm.world_size)
    own = own_NF.coalesce().cpu()
    csr = own.to_sparse_csr()
    crow, col, val = (t.numpy() for t in (csr.crow_indices(), csr.col_indices(), csr.values()))
    counts, columns, values = [], [], []
    for asked in comm.all_to_all(requests, "setup"):
        rows = asked.numpy()
        count = crow[rows + 1] - crow[rows]
        at = concat_ranges(crow[rows], count)
        counts.append(torch.from_numpy(count))
        columns.append(torch.from_numpy(col[at]))
        values.append(torch.from_numpy(val[at]))
    count = torch.cat(comm.all_to_all(counts, "setup")).numpy()
    column = torch.cat(comm.all_to_all(columns, "setup"))
    value = torch.cat(comm.all_to_all(values, "setup"))
    # the replies come owner by owner, each in its requests' order
    position = n + np.concatenate([np.flatnonzero(owners == p) for p in range(comm.world_size)])
    row = torch.from_numpy(np.repeat(position, count))
    indices = torch.cat([own.indices(), torch.stack([row, column])], dim=1)
    rows = torch.sparse_coo_tensor(
        indices, torch.cat([own.values(), value.to(own.values().dtype)]), (n + len(remote), width)
    )
    return rows.coalesce().to(own_NF.device)
