"""What sampled (mini-batch) distributed training shares, node classification
(:mod:`shardgnn.train.dist_node`) or link prediction (:mod:`shardgnn.train.dist_link`):
the graph store and input rows of a rank (:class:`SampledInputs`), the epoch over its batches and
the DDP-wrapped model (:class:`DistSampledSteps`).

With ``overlap`` the sampling and feature fetch of batch i+1 run in a background thread (on the
context's ``data_group``) while the main thread trains on batch i (gradients on ``group``);
``auto`` turns it on when every worker has at least two cores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from shardgnn.distributed.codec import RowResiduals, make_codec, nothing_to_quantise
from shardgnn.distributed.comm import Communicator
from shardgnn.distributed.context import DistContext
from shardgnn.graph.features import row_sums
from shardgnn.loader.pipeline import FeatureFetcher, InputRows, LocalityCounter, count_accesses
from shardgnn.loader.prefetch import Prefetcher
from shardgnn.sampling.dist_neighbor import DistNeighborSampler
from shardgnn.seeding import mix_seed
from shardgnn.store.cache.build import build_cache, cacheable_rows
from shardgnn.store.cache.store import CachedFeatureStore
from shardgnn.store.dist_embedding import DistEmbeddingTable
from shardgnn.store.dist_feature import DistFeatureStore, residuals_for
from shardgnn.store.dist_graph import DistGraphStore
from shardgnn.store.embedding import check_table_fits, input_store
from shardgnn.store.feature import LocalFeatureStore, SparseRowStore, csr_rows, rows_in_memory
from shardgnn.store.historical import HistoricalEmbeddings
from shardgnn.train.config import TrainConfig
from shardgnn.train.dist_report import SampledReport
from shardgnn.train.dist_steps import DistSteps
from shardgnn.train.epoch import EpochRun
from shardgnn.train.minibatch import Objective, train_epoch_batches
from shardgnn.train.setup import (
    EMBEDDING_STREAM,
    adam,
    model_edge_dim,
    sparse_batches_apply,
)


def _mapped_rows(rows: np.ndarray, feature_norm: str) -> LocalFeatureStore:
    """A store over memory-mapped feature rows, normalised per gathered row (bit for bit what
    :func:`normalize_features` gives; ``standard`` is refused for distributed runs)."""
    return LocalFeatureStore(rows, row_divisor=row_sums(rows) if feature_norm == "row" else None)


RESIDUALS = "fetch_residuals."
"""the checkpoint's extra-state prefix of the ``--error-feedback`` residuals"""
EDGE_RESIDUALS = "edge_residuals."
"""the prefix of the ``--error-feedback`` residuals of this rank's edge feature rows"""
FETCH_ROUNDING = 0xFE7C
"""the random stream of ``--fetch-bits`` rounding: ``mix_seed(seed, rank, FETCH_ROUNDING, ...)``"""


class SampledInputs(DistSteps):
    """One rank's graph store and input rows for sampled training: its part's features (in memory
    or mapped), same-host peers' rows, learnable rows, the low-bit codec and the caches of
    ``--cache-policy``."""

    edge_store: DistFeatureStore | None = None
    """the edge rows a model reads (:meth:`_open_edge_rows`), else None"""
    edge_cache: CachedFeatureStore | None = None
    """the cache in front of ``edge_store`` (``--cache-policy``), else None"""
    sparse_batches: bool = False
    """whether this rank gathers its batches' input rows as sparse tensors (set by
    :meth:`_open_inputs`)"""

    def _open_inputs(self, config: TrainConfig, ctx: DistContext, *, need_labels: bool) -> None:
        """Open this rank's part and its input stores: ``fetch_store`` (training features, None
        without features), ``eval_features``, ``embedding`` and ``eval_rows`` (learnable rows)."""
        overlap = config.run.overlap
        # The prefetch thread needs a core of its own: with fewer than 2 cores per worker it only
        # steals cycles from compute (measured on 2 cores, 2 workers: 148 s vs 77 s/epoch).
        self.overlap = (
            (os.cpu_count() or 1) // ctx.local_world_size >= 2
            if overlap == "auto"
            else overlap == "on"
        )
        self.data_comm = Communicator(ctx.rank, ctx.world_size, ctx.data_group)
        self.comms = (self.data_comm, self.main_comm)
        # Ranks on this host map each other's part files (--host-sharing auto): sampling and
        # feature reads of their nodes need no collective.
        host_ranks = ctx.host_ranks if config.run.host_sharing == "auto" else ()
        self.graph = DistGraphStore.open(
            self.pset.path, ctx.rank, ctx.world_size, self.data_comm, host_ranks=host_ranks
        )
        part = self.graph.part
        has_x = part.x is not None
        self._check_labelled(
            has_x or config.embedding.enabled, part.y is not None or not need_labels
        )
        x_local, x_store, peer_x = None, None, {}
        if has_x and config.feature_storage == "disk":
            # Rows stay in the memory-mapped part file and are read on demand; row normalisation is
            # applied per gathered row (its scales computed in one chunked pass).
            x_local = part.x
            x_store = _mapped_rows(part.x, config.feature_norm)
        elif has_x:
            # Mostly-zero features (bag-of-words) are held as CSR: 1/120 of the dense bytes on
            # coauthor-physics. Layer-wise evaluation reads the matrix whole: dense rows, unless
            # batches are gathered sparse (their steps' input layer 5-10x cheaper), when
            # evaluation's first layer multiplies the CSR rows' non-zeros too.
            sparse_ok = not config.layerwise_eval or sparse_batches_apply(config, ctx.device)
            x_store = rows_in_memory(part.x, config.feature_norm, sparse_ok)
            x_local = x_store.rows if isinstance(x_store, LocalFeatureStore) else None
        # Batches of CSR rows are gathered sparse (their first layer multiplies the non-zeros
        # alone); same-host peers' rows are then held here as CSR too (their non-zeros: 5 MB a
        # peer on coauthor-physics), and only rows from off this host arrive dense.
        self.sparse_batches = isinstance(x_store, SparseRowStore) and sparse_batches_apply(
            config, ctx.device
        )
        if self.sparse_batches:
            peers = self.graph.peers.items()
            peer_x = {p: csr_rows(peer.part.x, config.feature_norm) for p, peer in peers}
        elif has_x:
            # Same-host peers' rows stay in their mapped files (one copy in the page cache for the
            # host), normalised per gathered row exactly as their owner normalises them.
            peer_x = {
                p: _mapped_rows(peer.part.x, config.feature_norm)
                for p, peer in self.graph.peers.items()
            }
        self.has_x, self.x_local, self.x_store, self.peer_x = has_x, x_local, x_store, peer_x
        book = self.graph.book
        self.codec = make_codec(config.fetch_bits, mix_seed(config.seed, ctx.rank, FETCH_ROUNDING))
        # Stages: "fetch" is training's feature traffic only (what a cache saves); labels,
        # evaluation and cache set-up are counted apart.
        # Rows held as CSR cross the collective as their non-zeros (with --fetch-bits, their
        # values quantised; each owner replies as it holds its rows, so every rank agrees on
        # the messages' form whatever density its own part has).
        self.sparse_replies = has_x and config.feature_storage != "disk" and part.x.ndim == 2
        self.feedback = None
        if has_x and self.codec is not None and config.error_feedback:
            # What each local row's previous send to any peer lost: one residual per entry
            # sent (a CSR row's non-zeros; its zeros arrive exact).
            self.feedback = residuals_for(x_store, self.sparse_replies)
        sparse, replies = self.sparse_batches, self.sparse_replies
        self.fetch_store = (
            self.dist_rows(x_store, peer_x, "fetch", self.codec, self.feedback, sparse, replies)
            if has_x
            else None
        )
        self.eval_features = (
            self.dist_rows(x_store, peer_x, "eval", self.codec, None, sparse, replies)
            if has_x
            else None
        )
        self._open_edge_rows(config)
        coded = [store for store in (self.fetch_store, self.edge_store) if store is not None]
        if self.codec is not None and not any(store.collective for store in coded):
            # Learnable rows travel exact: without feature or edge rows from another host the
            # codec has nothing to round (every rank finds the same: if one rank's owners are
            # all on its host, every rank is on that host).
            raise nothing_to_quantise(config.fetch_bits, "this worker reads", has_rows=bool(coded))
        # Learnable rows (--embedding-dim): this rank holds and steps its own part's rows only;
        # batches read them after their features (both gathers are collectives, same order on
        # every rank) and evaluation reads them under its own stage.
        self.embedding: DistEmbeddingTable | None = None
        self.eval_rows = None
        if config.embedding.enabled:
            start, end = book.part_range(ctx.rank)
            check_table_fits(end - start, config.embedding)
            self.embedding = DistEmbeddingTable(
                book,
                ctx.rank,
                self.data_comm,
                config.embedding,
                mix_seed(config.seed, EMBEDDING_STREAM),
                np.asarray(self.pset.orig_ids[start:end], dtype=np.int64),
            )
            self.eval_rows = self.dist_rows(self.embedding.local, None, "eval")
            # The next batch's rows must be read after this step's update, on this thread: no
            # prefetch thread (it would read them a step early, and share the communicator).
            self.overlap = False

    def _open_edge_rows(self, config: TrainConfig) -> None:
        """With a model that reads edge features: ``edge_store``, the training batches' edge
        rows by global edge id, held by the owners of the edges' destinations (the rows of a
        part's in-edges are in its part file), fetched like node rows: the same low-bit codec
        (and with ``--error-feedback`` residuals of their own), same-host peers read directly;
        ``eval_edges`` for evaluation. Both None otherwise."""
        self.edge_store = self.eval_edges = None
        part = self.graph.part
        if not model_edge_dim(config, part.edge_dim, str(self.pset.path)):
            return
        if config.feature_storage == "disk":
            local = LocalFeatureStore(part.edge_attr)  # a memory map, read on demand
        else:
            local = LocalFeatureStore(np.array(part.edge_attr, dtype=np.float32))
        self.edge_peers = {p: peer.part.edge_attr for p, peer in self.graph.peers.items()}
        feedback = None
        if self.codec is not None and config.error_feedback:
            feedback = residuals_for(local, sparse_replies=False)
        self.edge_local = local
        self.edge_store = self.dist_edge_rows("fetch", self.codec, feedback)
        self.eval_edges = self.dist_edge_rows("eval", self.codec)

    def eval_input_rows(self) -> tuple[Any, DistFeatureStore | CachedFeatureStore | None]:
        """Evaluation's input rows (features, then learnable rows) and edge rows: through the
        training caches where there are any, read-only (evaluation reads the cached rows but
        never changes them: training's hits, rounding and policy state stay its own)."""
        features = self.eval_features
        if self.cache is not None:
            features = self.cache.read_only_view(features)
        edges = self.eval_edges
        if self.edge_cache is not None:
            edges = self.edge_cache.read_only_view(edges)
        return input_store(features, self.eval_rows), edges

    def dist_edge_rows(self, stage: str, codec=None, feedback=None) -> DistFeatureStore:
        """Edge rows held by their owners (:meth:`_open_edge_rows`), one stage."""
        return DistFeatureStore(
            self.edge_local, self.graph.edge_book, self.ctx.rank, self.data_comm, stage,
            codec=codec, peers=self.edge_peers, feedback=feedback,
        )  # fmt: skip

    def _build_caches(self, presample_stage: Callable[[DistNeighborSampler, int], Any]) -> None:
        """The caches of ``--cache-policy`` (collective): ``self.cache`` in front of the training
        features, and with ``--embedding-staleness`` one in front of peers' learnable rows.

        ``presample_stage(sampler, seed)``: this rank's training batches sampled by ``sampler``
        (GNNLab's pre-sampling epoch of ``presample``: the real sampler over this rank's training
        seeds, on its own random stream so epoch 0 is not replayed, and its own stage)."""
        config, book = self.config, self.graph.book
        self.cache: CachedFeatureStore | None = None
        self.edge_cache = None
        self.cache_setup_s = 0.0
        if not config.cache.enabled:
            return
        start = time.perf_counter()
        counts: list[np.ndarray] = []
        edge_counts = None
        if self.edge_store is not None:
            edge_counts = np.zeros(self.graph.edge_book.num_nodes, dtype=np.int64)

        def presample_counts() -> np.ndarray:
            if not counts:  # one pre-sampling epoch serves every cache
                presampler = DistNeighborSampler(
                    self.graph, config.sampler, self.data_comm, "cache_setup"
                )
                seed = mix_seed(mix_seed(config.seed, self.ctx.rank), 0x9E5A)
                samples = presample_stage(presampler, seed)
                counts.append(count_accesses(samples, book.num_nodes, edge_counts))
            return counts[0]

        rows_cached = self.embedding is not None and config.embedding.staleness is not None
        # With cached learnable rows, features that need no cache (all on this host) go without.
        if self.fetch_store is not None and (
            not rows_cached or cacheable_rows(self.fetch_store).any()
        ):
            self.cache = build_cache(
                config.cache,
                self.fetch_store,
                fill_from=self.dist_rows(
                    self.x_store,
                    self.peer_x,
                    "cache_setup",
                    self.codec,
                    sparse_batches=self.sparse_batches,  # a static cache then holds CSR rows
                    sparse_replies=self.sparse_replies,
                ),
                degree=self.graph.degree,
                presample_counts=presample_counts,
            )
        if rows_cached:
            self.embedding.cache_rows(
                build_cache(
                    config.cache,
                    self.embedding.owners,
                    fill_from=self.dist_rows(self.embedding.local, None, "cache_setup"),
                    degree=self.graph.degree,
                    presample_counts=presample_counts,
                    max_age=config.embedding.staleness,
                )
            )
        if self.edge_store is not None and cacheable_rows(self.edge_store).any():

            def edge_presample_counts() -> np.ndarray:
                presample_counts()  # the same pre-sampling epoch counts the edges
                return edge_counts

            self.edge_cache = build_cache(
                config.cache,
                self.edge_store,
                fill_from=self.dist_edge_rows("cache_setup", self.codec),
                degree=self._edge_draw_scores(),
                presample_counts=edge_presample_counts,
            )
        self.cache_setup_s = time.perf_counter() - start

    def _edge_draw_scores(self) -> np.ndarray:
        """``--cache-policy degree`` for edge rows: an in-edge of ``v`` is drawn when ``v`` is in
        a frontier (as often as ``v`` is a neighbour: its degree, the node cache's own score) and
        then with probability ``min(1, fanout / degree(v))``, so its expected draws go as
        ``min(degree(v), fanout)`` (the largest fan-out; all-neighbour hops: the degree)."""
        fanout = max(self.config.sampler.fanouts)
        degree_E = np.repeat(self.graph.degree.astype(np.int64), self.graph.degree)
        return degree_E if fanout < 0 else np.minimum(degree_E, fanout)

    def dist_rows(
        self,
        local,
        peers,
        stage: str,
        codec=None,
        feedback=None,
        sparse_batches: bool = False,
        sparse_replies: bool = False,
    ) -> DistFeatureStore:
        """Rows held by their owners (this rank: ``local``; same-host ``peers``), one stage."""
        return DistFeatureStore(
            local,
            self.graph.book,
            self.ctx.rank,
            self.data_comm,
            stage,
            codec=codec,
            peers=peers,
            feedback=feedback,
            sparse_batches=sparse_batches,
            sparse_replies=sparse_replies,
        )

    @property
    def edge_dim(self) -> int:
        """Width of the edge rows the model reads (0: none)."""
        return 0 if self.edge_store is None else int(self.edge_store.shape[1])

    @property
    def feature_width(self) -> int:
        return 0 if self.x_store is None else int(self.x_store.shape[1])

    @property
    def input_width(self) -> int:
        """Width of a node's input row: its features, then its learnable row."""
        return self.feature_width + self.config.embedding.dim


class DistSampledSteps(SampledReport, SampledInputs):
    """What sampled (mini-batch) distributed training shares, node classification or link
    prediction: the graph store, the input rows (features, learnable rows, or both), the
    DDP-wrapped model and the epoch. Subclasses set ``train_batches`` (the batcher),
    ``train_stages`` (the pipeline it feeds) and ``objective``."""

    objective: Objective
    sampled_edges = 0
    sampled_epochs = 0
    history: HistoricalEmbeddings | None = None
    locality: LocalityCounter | None = None

    fetch_epoch = 0
    """the epoch whose batches the training pipeline fetches (:meth:`key_rounding`)"""

    def key_rounding(self, index: int) -> None:
        """Before training batch ``index``'s rows are fetched (on the fetching thread): with a
        low-bit ``--fetch-bits`` codec, its rounding stream keyed by this rank, the epoch and the
        batch, so the batch rounds alike in an uninterrupted run, one resumed mid-epoch and one
        whose fetches ran ahead on the prefetch thread (a generator carried across batches
        would have been advanced by the batches fetched ahead of a checkpoint).

        The error-feedback residuals and the caches a checkpoint carries open a journal entry
        here: a stop takes back what was fetched from the checkpoint's next window on (batches
        the prefetch thread fetched ahead, a window whose head was trained)."""
        if self.codec is not None:
            self.codec.reseed(
                mix_seed(self.config.seed, self.ctx.rank, FETCH_ROUNDING, self.fetch_epoch, index)
            )
        for journalled in self._journalled():
            journalled.journal((self.fetch_epoch, index))

    def _journalled(self) -> list[RowResiduals | CachedFeatureStore]:
        """What keeps a journal of its fetches' changes: the residuals and the caches a
        checkpoint carries, when fetches can run past a stop (a prefetch thread, windows)."""
        if not self.overlap and self.train_batches.window == 1:
            return []  # a stop comes after the last fetched batch: nothing to take back
        return [*self._residuals().values(), *self._caches().values()]

    def _train_fetcher(
        self, samples: Any, features: InputRows, labels: Any, edge_rows: Any
    ) -> FeatureFetcher:
        """The training pipeline's fetch stage of ``samples`` (``(index, batch)``s of
        ``train_batches``), rounding keyed by :meth:`key_rounding`; a look-ahead store's windows
        become the batcher's, so that an epoch resumed inside one fetches it again whole."""
        self.train_batches.window = max(1, features.lookahead)
        return FeatureFetcher(
            samples, features, labels, self.timer, self.key_rounding, edge_rows=edge_rows,
            trains_from=lambda: self.train_batches.start,
        )  # fmt: skip

    def _residuals(self) -> dict[str, RowResiduals]:
        """The ``--error-feedback`` residual tables of the training fetches, by checkpoint
        prefix: the feature rows' and the edge feature rows'."""
        stores = {RESIDUALS: self.feedback}
        if self.edge_store is not None:
            stores[EDGE_RESIDUALS] = self.edge_store.feedback
        return {prefix: table for prefix, table in stores.items() if table is not None}

    def train_epoch(self, run: EpochRun) -> tuple[float, float] | None:
        self.fetch_epoch = run.epoch
        trained = train_epoch_batches(
            run,
            self.train_batches,
            Prefetcher(self.train_stages) if self.overlap else self.train_stages,
            self.ddp,
            self.optimizer,
            device=self.ctx.device,
            timer=self.timer,
            orig_ids=self.pset.orig_ids,
            time_waits=self.overlap,
            objective=self.objective,
            embedding=self.embedding,
            history=self.history,
            precision=self.config.precision,
        )
        if trained is None:
            # Stopped mid-epoch: the resumed run fetches again from the start of the window of
            # the next batch (the batch itself without windows), and the prefetch thread may have
            # fetched past it; what those fetches changed is undone, so the checkpoint holds the
            # residuals and caches as they stood before that window was fetched.
            assert run.stopped is not None
            done, window = run.stopped.batches, self.train_batches.window
            for journalled in self._journalled():
                journalled.rewind((run.epoch, done - done % window))
            return None
        sums, new_edges = trained
        self.sampled_edges += new_edges
        self.sampled_epochs += 1
        loss_sum, correct, count = self.sum([sums.loss_sum, sums.correct, sums.count])
        return loss_sum / max(count, 1), correct / max(count, 1)

    @property
    def _row_cache(self) -> CachedFeatureStore | None:
        """The cache of peers' learnable rows (``--embedding-staleness``): it serves rows up to
        the bound old, so what it holds shapes the run and a checkpoint carries it."""
        return None if self.embedding is None else self.embedding.cache

    def _rounded(self, cache: CachedFeatureStore | None) -> CachedFeatureStore | None:
        """``cache`` (of feature or edge rows) when it holds low-bit rounded rows
        (``--fetch-bits`` < 32): a hit serves the rounding of the fetch that admitted the row,
        so what it holds shapes the run (a look-ahead cache's as it stood when the window of the
        checkpoint's next batch was planned: the resumed run plans it again)."""
        if cache is None or self.config.fetch_bits == 32:
            return None
        return cache

    def _caches(self) -> dict[str, CachedFeatureStore]:
        """The caches a checkpoint carries, by state prefix (the others only save fetches)."""
        named = {
            "row_cache.": self._row_cache,
            "feature_cache.": self._rounded(self.cache),
            "edge_cache.": self._rounded(self.edge_cache),
        }
        return {prefix: cache for prefix, cache in named.items() if cache is not None}

    def _own_orig_ids(self) -> torch.Tensor:
        """The original node ids of this rank's own rows, in local row order."""
        start, end = self.graph.book.part_range(self.ctx.rank)
        return torch.from_numpy(np.asarray(self.pset.orig_ids[start:end], dtype=np.int64))

    def extra_state(self) -> dict[str, torch.Tensor]:
        state = {}
        if self.feedback is not None:
            # what each own row's last low-bit send lost (--error-feedback): the next send of the
            # row adds it back, so an exact resume needs it; by original id, to re-shard
            state[RESIDUALS + "rows"] = self.feedback.table.clone()
            state[RESIDUALS + "node_ids"] = self._own_orig_ids()
            if self.feedback.table.dim() == 1:  # one per non-zero: which they are
                state.update(_nonzero_layout(self.x_store))
        edge_residuals = self._residuals().get(EDGE_RESIDUALS)
        if edge_residuals is not None:  # by this part's edge positions (same worker count)
            state[EDGE_RESIDUALS + "rows"] = edge_residuals.table.clone()
        if self.history is not None:
            state.update({f"historical.{k}": v for k, v in self.history.state_dict().items()})
        for prefix, cache in self._caches().items():
            state.update({prefix + k: v for k, v in cache.state_dict().items()})
        return state

    def load_extra_state(self, state: dict[str, torch.Tensor]) -> None:
        for prefix, residuals in self._residuals().items():
            saved = state.get(prefix + "rows")
            if saved is not None and saved.shape != residuals.table.shape and prefix == RESIDUALS:
                # dense rows saved, one per non-zero kept now (a checkpoint of before replies
                # of non-zeros carried residuals): the entries both keep
                residuals.table.copy_(self._own_residuals([state]))
            elif saved is not None:  # older checkpoints: they start at zero
                residuals.table.copy_(saved)
        if self.history is not None:
            self.history.load_state_dict(_section(state, "historical."))
        for prefix, cache in self._caches().items():
            saved = _section(state, prefix)
            if saved:  # older checkpoints: the cache starts cold
                cache.load_state_dict(saved)

    def load_resharded_extra_state(self, states: list[dict[str, torch.Tensor]]) -> None:
        """Error-feedback residuals and historical tables by original id; the caches start cold
        (their slots held the old partition's peers' rows by new id; reads fetch from the owners
        until they fill), and so do the edge feature rows' residuals (edges carry no original
        id to re-shard them by)."""
        if self.feedback is not None:
            residuals = self._own_residuals(states)
            if residuals is not None:  # older checkpoints: they start at zero
                self.feedback.table.copy_(residuals)
        if self.history is not None:
            self.history.load_resharded([_section(state, "historical.") for state in states])

    def _own_residuals(self, states: list[dict[str, torch.Tensor]]) -> torch.Tensor | None:
        """The feature rows' residuals for this rank's rows, as it keeps them, from the old
        ranks' ``states`` (:func:`resharded_residuals`)."""
        assert self.feedback is not None
        table = self.feedback.table
        layout = self.x_store if table.dim() == 1 else table.shape[1]
        return resharded_residuals(states, self._own_orig_ids(), layout)

    def generators(self) -> list[torch.Generator]:
        codec = None if self.fetch_store is None else self.fetch_store.codec
        return [] if codec is None or codec.generator is None else [codec.generator]

    def _wrap_model(self, model: torch.nn.Module) -> None:
        """Make ``model`` this rank's (identical weights everywhere, its own rows attached), wrap
        it in DDP and create the optimiser."""
        config, ctx = self.config, self.ctx
        self.broadcast_weights(model)
        if self.embedding is not None:
            # This rank's rows join the model's state after the broadcast above (they differ per
            # rank): each rank's checkpoint and best weights carry its own rows. DDP must not
            # broadcast them (broadcast_buffers=False in data_parallel); the model has no other
            # buffers.
            model.embedding = self.embedding.local
        # Parallel counter-based dropout masks keyed by original node ids; the rank in the seed
        # keeps ranks' masks independent (their batches differ anyway).
        model.use_hashed_dropout(mix_seed(config.seed, ctx.rank))
        self.ddp = self.data_parallel(model)
        self.model = model
        self.optimizer = adam(self.ddp.parameters(), config.optim)


def _nonzero_layout(rows: SparseRowStore) -> dict[str, torch.Tensor]:
    """Which non-zeros a table of one residual per non-zero of ``rows`` keeps, in a checkpoint:
    each row's count and their columns (a run on another partition may hold other rows)."""
    return {
        RESIDUALS + "nonzeros": torch.from_numpy(np.diff(rows.indptr)),
        RESIDUALS + "columns": torch.from_numpy(rows.indices.copy()),
    }


def resharded_residuals(
    states: list[dict[str, torch.Tensor]], own_ids: torch.Tensor, layout: int | SparseRowStore
) -> torch.Tensor | None:
    """The ``--error-feedback`` residuals of the rows of original ids ``own_ids`` from every old
    rank's saved ones (``fetch_residuals.rows`` by ``fetch_residuals.node_ids``): dense rows of
    width ``layout``, or one per non-zero of the CSR rows ``layout`` (the own rows in order);
    each old rank's kept dense rows or one per non-zero (``fetch_residuals.nonzeros`` a row,
    at ``fetch_residuals.columns``). None when the checkpoint holds none. An entry no old rank
    kept starts at zero."""
    saved = [state for state in states if RESIDUALS + "rows" in state]
    if not saved:
        return None
    # each own row's (local) index by original id, in id order
    own_order = torch.argsort(own_ids)
    own_sorted = own_ids[own_order]
    sparse = isinstance(layout, SparseRowStore)
    if sparse:
        width = layout.width
        own_row_E = torch.repeat_interleave(
            torch.arange(own_ids.shape[0]), torch.from_numpy(np.diff(layout.indptr))
        )
        own_column_E = torch.from_numpy(layout.indices).long()
        # own (row, column) keys ascending: rows in order, each row's columns ascending
        own_keys_E = own_row_E * width + own_column_E
        out = torch.zeros(own_keys_E.shape[0])
    else:
        width = layout
        out = torch.zeros((own_ids.shape[0], width))
    if not own_ids.numel():
        return out
    for state in saved:
        table, ids = state[RESIDUALS + "rows"], state[RESIDUALS + "node_ids"]
        at = torch.searchsorted(own_sorted, ids).clamp(max=own_ids.shape[0] - 1)
        own = own_sorted[at] == ids
        local = own_order[at]  # the own row of each saved row (where ``own``)
        if table.dim() == 2 and not sparse:  # dense rows to dense rows
            out[local[own]] = table[own]
        elif table.dim() == 2:  # each own non-zero from its row's saved dense row
            saved_row = torch.full((own_ids.shape[0],), -1, dtype=torch.int64)
            saved_row[local[own]] = torch.nonzero(own)[:, 0]
            row_E = saved_row[own_row_E]
            has = row_E >= 0
            out[has] = table[row_E[has], own_column_E[has]]
        else:  # one per saved non-zero: each to the own entry at its row and column
            row_E = torch.repeat_interleave(
                torch.arange(ids.shape[0]), state[RESIDUALS + "nonzeros"]
            )
            kept = own[row_E]
            local_E = local[row_E[kept]]
            column_E = state[RESIDUALS + "columns"].long()[kept]
            values_E = table[kept]
            if not sparse:
                out[local_E, column_E] = values_E
                continue
            keys = local_E * width + column_E
            at = torch.searchsorted(own_keys_E, keys).clamp(max=max(own_keys_E.shape[0] - 1, 0))
            match = own_keys_E[at] == keys if own_keys_E.numel() else keys < 0
            out[at[match]] = values_E[match]
    return out


def _section(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries of ``state`` under ``prefix``, without it."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
