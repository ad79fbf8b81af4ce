"""The distributed feature store: rows live with their owners; ``gather`` fetches remote rows with
two all-to-alls (ids out, rows back) and reads local rows directly. Rows of same-host peers (whose
part files this rank maps) are read directly too, and only rows owned off this host travel through
the collectives; an owner holding its rows as CSR may send their non-zeros alone. Bit-exact by
construction.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from shardgnn.distributed.codec import Feedback, RowCodec, RowResiduals, encode_with
from shardgnn.distributed.comm import Communicator
from shardgnn.partition.book import PartitionBook, bucket_by_owner
from shardgnn.store.feature import (
    CSR_ENTRY_BYTES,
    CsrPiece,
    FeatureStore,
    LocalFeatureStore,
    SparseRowStore,
    dense_rows_as_csr,
    sparse_batch,
)

PACKED_FETCH_CALLS, DENSE_FETCH_CALLS = 4, 3
"""collective calls a :class:`DistFeatureStore` gather makes when some owner is off the host:
the requests' sizes and the requests, then with ``sparse_replies`` the packed replies' sizes and
the replies, else the replies alone (as many rows as asked)"""


class DistFeatureStore(FeatureStore):
    """A ``[N, F]`` matrix split by owner range; a collective ``gather`` (every rank must call it,
    possibly with no ids).

    Args:
        local: this rank's rows ``[end - start, F]`` (an array, memory map or tensor).
        book: the partition book.
        rank: this rank (= the part it owns).
        comm: the communicator (all bytes are counted under ``stage``).
        stage: the communication stage name, e.g. ``fetch``.
        codec: remote rows travel quantised by this low-bit codec (``--fetch-bits``; None: exact).
            Rows read from same-host peers are never quantised: they cost no transfer.
        peers: the rows of same-host peers, by rank (each indexed by the peer's local row, e.g. a
            memory map of its part file); their rows are read here, counted as ``host_bytes``.
        feedback: with a codec, the residuals of the local rows as sent (error feedback,
            ``--error-feedback``; :func:`residuals_for`): each row sent to a peer carries the
            quantisation error of its previous send.
        sparse_batches: ``gather`` returns a coalesced sparse COO tensor (as
            :class:`~shardgnn.store.feature.SparseRowStore`'s): this rank's and same-host peers'
            rows from their CSR (``local`` and ``peers`` must be SparseRowStores), rows received
            from owners off this host by their non-zeros (as sent, with ``sparse_replies``, else
            made from the dense rows). ``gather_into`` stays dense.
        sparse_replies: owners holding their rows as CSR (a
            :class:`~shardgnn.store.feature.SparseRowStore`) send the requested rows' non-zeros
            rather than the dense rows (a coauthor-physics row: ~280 bytes instead of 33,660);
            each reply then travels as one int32 message naming its form (:func:`pack_reply`),
            so an owner of dense rows replies dense in the same exchange. With a ``codec`` the
            non-zeros' values travel quantised on their own row's range (the zeros are not
            sent), and with ``feedback`` each non-zero carries its own residual. Every rank
            must pass the same value; fp32 rows of one dimension.
    """

    def __init__(
        self,
        local,
        book: PartitionBook,
        rank: int,
        comm: Communicator,
        stage: str = "fetch",
        codec: RowCodec | None = None,
        peers: dict[int, FeatureStore | np.ndarray] | None = None,
        feedback: RowResiduals | None = None,
        sparse_batches: bool = False,
        sparse_replies: bool = False,
    ):
        assert feedback is None or codec is not None, "error feedback compensates a codec"
        self.sparse_replies = sparse_replies
        self.local = _as_store(local)
        self.sparse_batches = sparse_batches
        self.feedback = feedback
        self.book, self.rank, self.comm, self.stage, self.codec = book, rank, comm, stage, codec
        self.start, self.end = (int(v) for v in book.part_range(rank))
        # This rank's rows are a peer of its own, at its own range: one code path reads both.
        self._on_host = {rank: self.local} | {p: _as_store(a) for p, a in (peers or {}).items()}
        self._starts = {p: int(book.part_range(p)[0]) for p in self._on_host}
        # Whether any owner is off this host. Ranks of one host agree on who shares it, so either
        # every rank's gather is a collective or none is (all ranks on one host).
        self._any_off_host = len(self._on_host) < comm.world_size
        # whether each part's owner is on this host (read without a collective, itself
        # included): local_mask is one lookup an id
        self._part_on_host = np.zeros(book.num_parts, dtype=bool)
        self._part_on_host[list(self._on_host)] = True
        if peers:
            comm.declare(stage)
        self._row_shape = tuple(self.local.shape[1:])
        assert not sparse_batches or all(
            isinstance(store, SparseRowStore) and not store.sparse_batches
            for store in self._on_host.values()
        ), "sparse batches are assembled from the on-host rows' CSR"
        assert not sparse_replies or (len(self._row_shape) == 1 and self.dtype == torch.float32), (
            "replies of non-zeros carry fp32 rows of one dimension"
        )
        assert feedback is None or feedback.table.shape == _residual_shape(
            self.local, sparse_replies
        ), "the residuals are not those of this rank's rows as sent (residuals_for)"
        self.slow_rows = 0
        """rows requested from a slow tier (owners off this host; also own and same-host rows when
        on disk), for hit-rate baselines"""

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.book.num_nodes, *self._row_shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    @property
    def on_disk(self) -> bool:
        return self.local.on_disk

    def local_mask(self, ids: np.ndarray) -> np.ndarray:
        return self._part_on_host[self.book.owner(ids)]

    @property
    def collective(self) -> bool:
        return self._any_off_host

    def read_local_into(self, ids: np.ndarray, out: torch.Tensor, positions: np.ndarray) -> None:
        if ids.shape[0]:
            owners = self.book.owner(ids)
            order, counts = bucket_by_owner(ids, owners, self.comm.world_size)
            self._read_on_host(ids[order], positions[order], counts, out)

    def _read_on_host(
        self, grouped: np.ndarray, positions: np.ndarray, counts: np.ndarray, out: torch.Tensor
    ) -> None:
        """``out[positions] = rows(grouped)`` for the on-host owners' segments of ``grouped``
        (ids bucketed by owner, ``counts[p]`` of owner ``p``); peers' bytes are counted."""
        bounds = np.concatenate([[0], np.cumsum(counts)])
        for owner, store in self._on_host.items():
            lo, hi = bounds[owner], bounds[owner + 1]
            if hi > lo:
                rows = torch.from_numpy(grouped[lo:hi] - self._starts[owner])
                store.gather_into(rows, out, positions[lo:hi])
                if owner != self.rank:
                    self.comm.record_host(self.stage, int(hi - lo) * self.row_bytes)

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        if self.sparse_batches:
            return self._gather_sparse(ids)
        out = torch.empty((ids.shape[0], *self._row_shape), dtype=self.dtype)
        self._gather_into(ids, out, np.arange(ids.shape[0]))
        return out

    def _gather_sparse(self, ids: torch.Tensor) -> torch.Tensor:
        """``gather`` as a sparse tensor (:meth:`_pieces`, placed)."""
        ids_np = ids.numpy()
        pieces = self._pieces(ids_np, np.arange(ids_np.shape[0]))
        return sparse_batch(ids_np.shape[0], self._row_shape[0], pieces)

    def gather_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        self.check_ids(torch.from_numpy(ids))
        return self._pieces(ids, positions)

    def _pieces(self, ids_np: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        """Rows ``ids_np`` as pieces destined for ``positions``: the on-host owners' rows from
        their CSR, the others' received as their non-zeros or dense (then kept by their
        non-zeros)."""
        grouped, targets, counts = self._grouped(ids_np, positions)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        pieces = []
        for owner, block in enumerate(self._exchange(grouped, counts)):
            if block is not None and block.shape[0]:
                rows = np.arange(block.shape[0])
                where = targets[bounds[owner] : bounds[owner + 1]]
                if isinstance(block, SparseRowStore):
                    pieces += block.local_pieces(rows, where)
                else:
                    pieces.append((*dense_rows_as_csr(block.numpy()), rows, where))
        return pieces + self._on_host_pieces(grouped, targets, bounds)

    def local_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        if not ids.shape[0]:
            return []
        order, counts = bucket_by_owner(ids, self.book.owner(ids), self.comm.world_size)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        return self._on_host_pieces(ids[order], positions[order], bounds)

    def _on_host_pieces(
        self, grouped: np.ndarray, positions: np.ndarray, bounds: np.ndarray
    ) -> list[CsrPiece]:
        """The on-host owners' segments of ``grouped`` (ids bucketed by owner, owner ``p``'s at
        ``bounds[p]:bounds[p + 1]``) as pieces from their CSR, destined for ``positions``; each
        row read from a same-host peer counted as its CSR's bytes (8 a non-zero and its
        offset)."""
        pieces = []
        for owner, store in self._on_host.items():
            lo, hi = bounds[owner], bounds[owner + 1]
            if hi > lo:
                rows = grouped[lo:hi] - self._starts[owner]
                pieces += store.local_pieces(rows, positions[lo:hi])
                if owner != self.rank:
                    nonzeros = int(store.row_nonzeros(rows).sum())
                    self.comm.record_host(self.stage, (nonzeros + hi - lo) * 8)
        return pieces

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        self.check_ids(ids)
        self._gather_into(ids, out, positions)

    def _grouped(self, ids_np: np.ndarray, positions: np.ndarray):
        """``(grouped, targets, counts)``: ``ids_np`` bucketed by owner, their output positions in
        the same order, and how many each owner has; the slow tier's rows counted."""
        owners = self.book.owner(ids_np)
        order, counts = bucket_by_owner(ids_np, owners, self.comm.world_size)
        on_host_rows = sum(int(counts[p]) for p in self._on_host)
        self.slow_rows += ids_np.shape[0] - (0 if self.on_disk else on_host_rows)
        return ids_np[order], positions[order], counts

    def _exchange(
        self, grouped: np.ndarray, counts: np.ndarray
    ) -> list[torch.Tensor | SparseRowStore | None]:
        """Per owner, the rows of its segment of ``grouped`` that it sent (the collective, when
        any owner is off this host): dense, or with :attr:`sparse_replies` as the owner holds
        them (a CSR owner's as a store of just those rows, in order); None for on-host owners,
        whose rows are read here."""
        world = self.comm.world_size
        if not self._any_off_host:
            return [None] * world
        # Off-host owners get our requests; on-host owners (ourselves included) get none.
        requests = [
            torch.from_numpy(seg if p not in self._on_host else seg[:0])
            for p, seg in enumerate(np.split(grouped, np.cumsum(counts)[:-1]))
        ]
        incoming = self.comm.all_to_all(requests, self.stage)
        local_rows = [req - self.start for req in incoming]
        if self.sparse_replies:  # packed (and coded) here: the collective moves words
            feedback = None
            if self.feedback is not None:
                feedback = self.feedback.select(
                    [_sent_entries(self.local, rows.numpy()) for rows in local_rows]
                )
            replies = [
                pack_reply(self.local, rows, self.codec, feedback, p)
                for p, rows in enumerate(local_rows)
            ]
            rows = self.comm.all_to_all(replies, self.stage)
            width = self._row_shape[0]
            return [
                None
                if p in self._on_host
                else unpack_reply(message, int(counts[p]), width, self.codec)
                for p, message in enumerate(rows)
            ]
        replies = [self.local.gather(rows) for rows in local_rows]
        feedback = None if self.feedback is None else self.feedback.select(local_rows)
        # a dense reply holds the rows asked, so its size is known here: passed, it spares the
        # all-to-all of sizes, a wait for every rank
        rows = self.comm.all_to_all(
            replies,
            self.stage,
            recv_counts=[int(request.shape[0]) for request in requests],
            codec=self.codec,
            feedback=feedback,
        )
        return [None if p in self._on_host else block for p, block in enumerate(rows)]

    def _gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        grouped, targets, counts = self._grouped(ids.numpy(), positions)
        # Rows arrived grouped by owner; each block is scattered straight to its output positions
        # (no concatenated intermediate).
        for block, where in zip(
            self._exchange(grouped, counts), np.split(targets, np.cumsum(counts)[:-1])
        ):
            if isinstance(block, SparseRowStore):
                block.gather_into(torch.arange(where.shape[0]), out, where)
            elif block is not None and where.shape[0]:
                out.index_copy_(0, torch.from_numpy(where), block)
        self._read_on_host(grouped, targets, counts, out)


DENSE_REPLY, CSR_REPLY = 0, 1
"""the first int32 of a packed reply (:func:`pack_reply`): the rows that follow are dense, or
their non-zeros"""


def pack_reply(
    store: FeatureStore,
    ids: torch.Tensor,
    codec: RowCodec | None = None,
    feedback: Feedback | None = None,
    peer: int = 0,
) -> torch.Tensor:
    """Rows ``ids`` of ``store`` (fp32 ``[N, F]``) as one int32 message, as the store holds them:
    ``[CSR_REPLY, each row's non-zero count, their columns, their values]`` from a
    :class:`SparseRowStore`, else ``[DENSE_REPLY, the dense rows]`` (written in place). The
    values are fp32 bits, or with a ``codec`` its payload (zero-padded to whole words): a CSR
    row's non-zeros quantised on their own range (:meth:`RowCodec.encode_ragged`; the zeros
    are not sent), dense rows as :meth:`RowCodec.encode` sends them; compensated by
    ``feedback``'s residuals of the send to ``peer`` when given (one per value sent:
    :func:`residuals_for`)."""
    store.check_ids(ids)
    rows = ids.numpy()
    if isinstance(store, SparseRowStore):
        nonzeros = store.row_nonzeros(rows)
        n, total = rows.shape[0], int(nonzeros.sum())
        if codec is None:
            message = np.empty(1 + n + 2 * total, np.int32)
            values = message[1 + n + total :].view(np.float32)
        else:
            message = np.empty(1 + n + total, np.int32)
            values = np.empty(total, np.float32)
        message[0] = CSR_REPLY
        message[1 : 1 + n] = nonzeros
        store.nonzeros_into(rows, message[1 + n : 1 + n + total], values)
        if codec is None:
            return torch.from_numpy(message)
        payload = encode_with(
            codec, torch.from_numpy(values), feedback, peer, torch.from_numpy(nonzeros)
        )
        return torch.cat([torch.from_numpy(message), _words(payload)])
    if codec is not None:
        dense = torch.empty((rows.shape[0], store.shape[1]), dtype=torch.float32)
        store.gather_into(ids, dense, np.arange(rows.shape[0]))
        form = torch.tensor([DENSE_REPLY], dtype=torch.int32)
        payload = encode_with(codec, dense, feedback, peer)
        return torch.cat([form, _words(payload.reshape(-1))])
    message = torch.empty(1 + rows.shape[0] * store.shape[1], dtype=torch.int32)
    message[0] = DENSE_REPLY
    dense = message[1:].view(torch.float32).view(rows.shape[0], store.shape[1])
    store.gather_into(ids, dense, np.arange(rows.shape[0]))
    return message


def residuals_for(store: FeatureStore, sparse_replies: bool) -> RowResiduals:
    """Error-feedback residuals (``--error-feedback``) for the rows of ``store`` as a
    :class:`DistFeatureStore` over them sends them: with ``sparse_replies`` one per non-zero
    of a :class:`SparseRowStore` (its zeros arrive exact and keep none: 4.5 MB for
    coauthor-physics' rows instead of 1,161 MB of dense residual rows), else one per entry of
    the dense rows."""
    return RowResiduals(*_residual_shape(store, sparse_replies))


def _residual_shape(store: FeatureStore, sparse_replies: bool) -> tuple[int, ...]:
    """The shape of :func:`residuals_for`'s table."""
    if sparse_replies and isinstance(store, SparseRowStore):
        return (store.values.shape[0],)
    return (store.shape[0], math.prod(store.shape[1:]))


def _sent_entries(store: FeatureStore, rows: np.ndarray) -> torch.Tensor:
    """The entries of :func:`residuals_for`'s table that a reply of local ``rows`` sends."""
    if isinstance(store, SparseRowStore):
        return torch.from_numpy(store.nonzero_positions(rows))
    return torch.from_numpy(rows)


def _words(payload: torch.Tensor) -> torch.Tensor:
    """A uint8 payload as int32 words (zero-padded to a whole word)."""
    padded = torch.zeros(-(-payload.shape[0] // 4) * 4, dtype=torch.uint8)
    padded[: payload.shape[0]] = payload
    return padded.view(torch.int32)


def reply_bytes(
    width: int, rows: np.ndarray, nonzeros: np.ndarray, owner_sparse: np.ndarray, bits: int = 32
) -> np.ndarray:
    """The bytes of :func:`pack_reply` messages that carry ``rows`` rows of ``width`` holding
    ``nonzeros`` non-zeros in all, at ``bits`` (32: fp32; below: a codec's), from an owner that
    holds its rows as CSR (``owner_sparse``, as :func:`~shardgnn.store.feature.held_sparse`
    says: a count and a column per non-zero and row, the values' fp32 bits or codec payload)
    or dense (the dense rows); the messages' form words, and the up to 3 bytes that pad a coded
    message to whole words, not counted. Elementwise over arrays of the same shape (or
    broadcast)."""
    rows = np.asarray(rows, np.int64)
    nonzeros = np.asarray(nonzeros, np.int64)
    if bits == 32:
        sparse = 4 * rows + CSR_ENTRY_BYTES * nonzeros
        return np.where(owner_sparse, sparse, 4 * width * rows)
    codec = RowCodec(bits)
    sparse = 4 * rows + 4 * nonzeros + codec.ragged_payload_bytes(rows, nonzeros)
    return np.where(owner_sparse, sparse, codec.payload_bytes(width) * rows)


def unpack_reply(
    message: torch.Tensor, n: int, width: int, codec: RowCodec | None = None
) -> torch.Tensor | SparseRowStore:
    """The ``n`` rows of width ``width`` of a :func:`pack_reply` message packed with ``codec``:
    a dense ``[n, width]`` view of it (decoded, with a codec), or a :class:`SparseRowStore` of
    them (its arrays views of the message; its values decoded, with a codec)."""
    words = message.numpy()
    if words[0] == DENSE_REPLY:
        if codec is None:
            assert words.shape[0] == 1 + n * width, "a dense reply of other rows than asked"
            return message[1:].view(torch.float32).view(n, width)
        size = n * codec.payload_bytes(width)
        assert words.shape[0] == 1 + -(-size // 4), "a dense reply of other rows than asked"
        payload = message[1:].view(torch.uint8)[:size]
        return codec.decode(payload.view(n, codec.payload_bytes(width)), width)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(words[1 : 1 + n], out=indptr[1:])
    total = int(indptr[-1])
    columns = words[1 + n : 1 + n + total]
    if codec is None:
        assert words.shape[0] == 1 + n + 2 * total, "a reply of non-zeros of other rows than asked"
        values = words[1 + n + total :].view(np.float32)
    else:
        size = codec.ragged_payload_bytes(n, total)
        assert words.shape[0] == 1 + n + total + -(-size // 4), "a reply of other rows than asked"
        payload = message[1 + n + total :].view(torch.uint8)[:size]
        values = codec.decode_ragged(payload, torch.from_numpy(words[1 : 1 + n])).numpy()
    return SparseRowStore(indptr, columns, values, width)


def _as_store(rows) -> FeatureStore:
    return rows if isinstance(rows, FeatureStore) else LocalFeatureStore(rows)
