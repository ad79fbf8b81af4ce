"""Feature stores: ``gather(ids) -> rows``. A local, a partitioned and a cached store all
implement this interface, so every consumer (the loader, inference, tests) works with any.
"""

from __future__ import annotations

import abc
import math
import mmap
from collections.abc import Iterator, Sequence

import numba
import numpy as np
import torch

from shardgnn.graph.csr import concat_ranges
from shardgnn.graph.features import normalize_features, stored_sparse


@numba.njit(nogil=True, cache=True)
def _copy_rows_kernel(dst, dst_rows, src, src_rows):  # pragma: no cover - compiled
    width = dst.shape[1]
    for i in range(dst_rows.shape[0]):
        a, b = dst_rows[i], src_rows[i]
        for j in range(width):  # an explicit loop: 4x faster than numba's row-slice assignment
            dst[a, j] = src[b, j]


@numba.njit(nogil=True, cache=True)
def _copy_sparse_rows_kernel(dst, dst_rows, indptr, indices, values, src_rows):  # pragma: no cover
    width = dst.shape[1]
    for i in range(dst_rows.shape[0]):
        a, b = dst_rows[i], src_rows[i]
        for j in range(width):
            dst[a, j] = 0
        for k in range(indptr[b], indptr[b + 1]):
            dst[a, indices[k]] = values[k]


def copy_rows(
    dst: torch.Tensor, dst_rows: np.ndarray, src: torch.Tensor | np.ndarray, src_rows: np.ndarray
) -> None:
    """``dst[dst_rows] = src[src_rows]`` in one pass: no intermediate gathered tensor (a fresh
    large buffer per batch costs a page fault per 4 KB). ``src`` may be a memory map."""
    if dst_rows.shape[0] == 0:
        return
    # memmap: same pages
    src_np = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src).view(np.ndarray)
    _copy_rows_kernel(
        dst.view(dst.shape[0], -1).numpy(),
        np.ascontiguousarray(dst_rows, dtype=np.int64),
        src_np.reshape(src_np.shape[0], -1),
        np.ascontiguousarray(src_rows, dtype=np.int64),
    )


class FeatureStore(abc.ABC):
    """Rows of a ``[num_nodes, dim]`` matrix, gathered by global node id."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """``(num_nodes, dim...)`` of the stored matrix."""

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (int64, any order, repeats allowed) as a new tensor."""
        self.check_ids(ids)
        return self._gather(ids)

    def check_ids(self, ids: torch.Tensor) -> None:
        """Refuse ids that are not a 1-D int64 tensor of valid node ids."""
        self.check_id_shape(ids)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.shape[0]):
            raise IndexError(
                f"node ids must lie in [0, {self.shape[0]}), got [{int(ids.min())}, "
                f"{int(ids.max())}]"
            )

    @staticmethod
    def check_id_shape(ids: torch.Tensor) -> None:
        """Refuse ids that are not a 1-D int64 tensor."""
        if ids.dtype != torch.int64 or ids.dim() != 1:
            raise ValueError(
                f"ids must be a 1-D int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}"
            )

    @abc.abstractmethod
    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Gather validated ids."""

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        """``out[positions] = gather(ids)``, without an intermediate tensor where the store can
        (collective exactly when ``gather`` is)."""
        assert positions.shape[0] == ids.shape[0]
        if ids.numel() or self.collective:
            rows = self.gather(ids)
            if ids.numel():
                out.index_copy_(0, torch.from_numpy(positions), rows)

    def gather_dense(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` as a new dense tensor, also where ``gather`` returns sparse batches
        (through :meth:`gather_into`: collective exactly when ``gather`` is)."""
        out = torch.empty((ids.shape[0], *self.shape[1:]), dtype=self.dtype)
        self.gather_into(ids, out, np.arange(ids.shape[0]))
        return out

    @property
    def collective(self) -> bool:
        """Whether ``gather`` is a collective (every rank must call it, even with no ids)."""
        return False

    @property
    def dtype(self) -> torch.dtype:
        """The element type of the rows."""
        raise NotImplementedError

    @property
    def on_disk(self) -> bool:
        """Whether this process's own rows are read from a memory-mapped file (a slow tier a
        cache may front) rather than RAM."""
        return False

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return math.prod(self.shape[1:]) * torch.empty(0, dtype=self.dtype).element_size()

    # Optional capabilities, declared here with do-nothing defaults so a consumer never has to ask
    # a store what it is: a store with a look-ahead (the belady cache) overrides all three.
    @property
    def lookahead(self) -> int:
        """Batches the loader should announce through :meth:`plan` before gathering them (0:
        none)."""
        return 0

    def plan(self, window: list[torch.Tensor]) -> None:
        """Announce the ids of the next ``len(window)`` gathers, in order (pure computation)."""

    def prefetch(self) -> None:
        """Bring what the planned window needs (collective exactly when ``gather`` is)."""

    def local_mask(self, ids: np.ndarray) -> np.ndarray:
        """For each id, whether this process reads it without communication."""
        return np.ones(ids.shape[0], dtype=bool)

    def read_local_into(self, ids: np.ndarray, out: torch.Tensor, positions: np.ndarray) -> None:
        """``out[positions] = rows(ids)`` for ids that :meth:`local_mask` marks local (never
        communicates)."""
        self.gather_into(torch.from_numpy(ids), out, positions)

    sparse_batches = False
    """whether ``gather`` returns a coalesced sparse COO tensor (:func:`sparse_batch`) rather
    than dense rows (``gather_into`` stays dense)"""

    def gather_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        """:meth:`gather` of a store with :attr:`sparse_batches` as :func:`sparse_batch`'s
        pieces: the rows of ``ids`` (any: collective exactly when ``gather`` is) destined for
        output rows ``positions``, for a caller that places them into a batch of its own (once,
        where ``gather``'s batch would be placed again)."""
        batch = SparseRowStore.of_batch(self.gather(torch.from_numpy(ids)))
        return batch.local_pieces(np.arange(ids.shape[0]), positions)

    def local_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        """:meth:`read_local_into` of a store with :attr:`sparse_batches`: the rows of ``ids``
        (marked local by :meth:`local_mask`) destined for output rows ``positions``, as
        :func:`sparse_batch`'s pieces (never communicates)."""
        raise NotImplementedError(f"{type(self).__name__} gathers dense rows")


def advise_random(array: np.ndarray) -> bool:
    """Tell the kernel that the memory map under ``array`` is read at random rows
    (``madvise(MADV_RANDOM)``): no read-ahead around each page read. A batch reads scattered rows;
    with read-ahead each 4 KiB row read pulls in up to 128 KiB around it, which fills a limited page
    cache (a memory cgroup, a matrix larger than memory) with rows no batch asked for and multiplies
    the bytes read from disk. Returns whether the advice was given (not for arrays in RAM or where
    ``madvise`` is missing)."""
    return _advise(array, "MADV_RANDOM")


def release_pages(rows: np.ndarray) -> bool:
    """Drop the pages holding ``rows`` (a contiguous slice of a memory map, or all of it) from
    this process's resident set (``madvise(MADV_DONTNEED)``; a read-only map: they stay in the
    page cache, and a later read faults them back in). Once read, e.g. copied, those pages
    otherwise stay counted in the process's memory (570 MB for a coauthor-physics part), though
    no row is read from them again. Returns whether the advice was given."""
    return _advise(rows, "MADV_DONTNEED", only_rows=True)


def _advise(array: np.ndarray, advice: str, only_rows: bool = False) -> bool:
    """``madvise`` the memory map under ``array``: all of it, or ``only_rows``: the pages holding
    ``array``'s own bytes."""
    mapping = getattr(array, "_mmap", None)  # np.memmap (and its views) keep their mmap.mmap
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, advice):
        return False
    try:
        if not only_rows:
            mapping.madvise(getattr(mmap, advice))
        elif array.nbytes:
            assert array.flags.c_contiguous, "a slice of rows of the map"
            start = array.ctypes.data - np.frombuffer(mapping, np.uint8).ctypes.data
            first = start - start % mmap.PAGESIZE  # madvise takes whole pages
            mapping.madvise(getattr(mmap, advice), first, start + array.nbytes - first)
    except (OSError, ValueError):  # a closed map, or a kernel that refuses
        return False
    return True


class LocalFeatureStore(FeatureStore):
    """A store over one in-process array: in RAM, or a read-only memory map read on demand
    (``np.load(mmap_mode="r")``: only the requested rows are read, so the matrix may exceed RAM).

    ``row_divisor`` (``[N]``, optional) divides each gathered row, e.g. by its sum for row
    normalisation of a memory map without rewriting it.
    """

    def __init__(self, array: np.ndarray | torch.Tensor, row_divisor: np.ndarray | None = None):
        self._row_divisor = (
            None
            if row_divisor is None
            else torch.from_numpy(np.asarray(row_divisor, dtype=np.float32))
        )
        if isinstance(array, torch.Tensor):
            self._tensor: torch.Tensor | None = array
            self._array = None
        elif isinstance(array, np.memmap) or not array.flags.writeable:
            # A memory map: read only the requested rows (np.take) instead of paging it all in.
            self._tensor, self._array = None, array
            advise_random(array)
        else:
            self._tensor, self._array = torch.from_numpy(np.ascontiguousarray(array)), None

    @property
    def shape(self) -> tuple[int, ...]:
        source = self._tensor if self._tensor is not None else self._array
        return tuple(source.shape)

    @property
    def dtype(self) -> torch.dtype:
        if self._tensor is not None:
            return self._tensor.dtype
        return torch.from_numpy(np.zeros(0, dtype=self._array.dtype)).dtype

    @property
    def on_disk(self) -> bool:
        return self._array is not None

    @property
    def nbytes(self) -> int:
        """The bytes held in RAM (a memory map: none)."""
        return 0 if self.on_disk else self._tensor.numel() * self._tensor.element_size()

    @property
    def rows(self) -> np.ndarray:
        """The stored matrix (a memory map stays one; ``row_divisor`` not applied)."""
        return self._tensor.numpy() if self._tensor is not None else self._array

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        if self._row_divisor is not None:
            return super().gather_into(ids, out, positions)
        copy_rows(out, positions, self.rows, ids.numpy())

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        if self._tensor is not None:
            rows = self._tensor.index_select(0, ids)
        else:
            rows = torch.from_numpy(np.take(self._array, ids.numpy(), axis=0))
        if self._row_divisor is not None:
            rows = rows / self._row_divisor[ids].view(-1, *([1] * (rows.dim() - 1)))
        return rows


CSR_ENTRY_BYTES = 8
"""bytes of one non-zero held by :class:`SparseRowStore`: an int32 column and an fp32 value"""


def held_bytes(rows: np.ndarray, width: int, nonzeros: np.ndarray) -> np.ndarray:
    """Per worker, the bytes :func:`rows_in_memory` holds for its ``rows`` feature rows of
    ``width`` with ``nonzeros`` non-zeros: as CSR (each non-zero's column and value, each row's
    int64 offset) where they are mostly zero, else dense fp32."""
    rows, nonzeros = np.asarray(rows, np.int64), np.asarray(nonzeros, np.int64)
    sparse = held_sparse(rows, width, nonzeros)
    return np.where(sparse, nonzeros * CSR_ENTRY_BYTES + (rows + 1) * 8, rows * width * 4)


def held_sparse(rows: np.ndarray, width: int, nonzeros: np.ndarray) -> np.ndarray:
    """Per worker of ``rows`` feature rows of ``width`` with ``nonzeros`` non-zeros, whether
    :func:`rows_in_memory` holds them as CSR (they are mostly zero)."""
    return np.array([stored_sparse(int(z), int(r) * width) for r, z in zip(rows, nonzeros)], bool)


@numba.njit(nogil=True, cache=True)
def _place_csr_rows(indptr, indices, values, src, dst, starts, out_2K, out_K):  # pragma: no cover
    for i in range(src.shape[0]):
        at = starts[dst[i]]
        for k in range(indptr[src[i]], indptr[src[i] + 1]):
            out_2K[0, at] = dst[i]
            out_2K[1, at] = indices[k]
            out_K[at] = values[k]
            at += 1


CsrPiece = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""``(indptr, indices, values, src_rows, dst_rows)``: rows ``src_rows`` of a CSR matrix (each
row's columns ascending), destined for output rows ``dst_rows``"""


def pieces_also_at(
    pieces: list[CsrPiece], num_rows: int, from_rows: np.ndarray, to_rows: np.ndarray
) -> list[CsrPiece]:
    """``pieces`` (destined for a batch of ``num_rows`` rows) placing the row each places at
    output row ``from_rows[i]`` at ``to_rows[i]`` too: a row read once, written wherever its id
    repeats."""
    if not to_rows.shape[0]:
        return pieces
    src_at = np.full(num_rows, -1, np.int64)  # the source row each output row gets, per piece
    out = []
    for indptr, indices, values, src_rows, dst_rows in pieces:
        src_at[dst_rows] = src_rows
        copies = src_at[from_rows]
        take = copies >= 0
        src_rows = np.concatenate([src_rows, copies[take]])
        out.append((indptr, indices, values, src_rows, np.concatenate([dst_rows, to_rows[take]])))
        src_at[dst_rows] = -1
    return out


def sparse_batch(num_rows: int, width: int, pieces: list[CsrPiece]) -> torch.Tensor:
    """The ``[num_rows, width]`` coalesced sparse COO tensor whose rows come from ``pieces`` (each
    output row from at most one piece; a row no piece names is empty): entries row by row, each
    row's columns ascending as its source stores them (no sort)."""
    counts = np.zeros(num_rows, np.int64)
    for indptr, _, _, src_rows, dst_rows in pieces:
        counts[dst_rows] = indptr[src_rows + 1] - indptr[src_rows]
    starts = np.zeros(num_rows + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    out_2K = np.empty((2, int(starts[-1])), np.int64)
    out_K = np.empty(int(starts[-1]), np.float32)
    for indptr, indices, values, src_rows, dst_rows in pieces:
        if src_rows.shape[0]:
            src = np.ascontiguousarray(src_rows, np.int64)
            dst = np.ascontiguousarray(dst_rows, np.int64)
            _place_csr_rows(indptr, indices, values, src, dst, starts, out_2K, out_K)
    return torch.sparse_coo_tensor(
        torch.from_numpy(out_2K),
        torch.from_numpy(out_K),
        (num_rows, width),
        is_coalesced=True,
        check_invariants=False,
    )


@numba.njit(nogil=True, cache=True)
def _row_nonzeros_kernel(rows, counts):  # pragma: no cover - compiled
    for i in range(rows.shape[0]):
        count = 0
        for j in range(rows.shape[1]):
            if rows[i, j] != 0:
                count += 1
        counts[i] = count


@numba.njit(nogil=True, cache=True)
def _dense_to_csr_kernel(rows, indptr, indices, values):  # pragma: no cover - compiled
    for i in range(rows.shape[0]):
        at = indptr[i]
        for j in range(rows.shape[1]):
            if rows[i, j] != 0:
                indices[at] = j
                values[at] = rows[i, j]
                at += 1


@numba.njit(nogil=True, cache=True)
def _take_nonzeros_kernel(
    indptr, indices, values, rows, out_indices, out_values
):  # pragma: no cover
    at = 0
    for i in range(rows.shape[0]):
        start, end = indptr[rows[i]], indptr[rows[i] + 1]
        if at + end - start > out_indices.shape[0]:
            return -1  # the buffers are too small: nothing written past them
        for k in range(start, end):
            out_indices[at] = indices[k]
            out_values[at] = values[k]
            at += 1
    return at


def dense_rows_as_csr(rows_RF: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, values)`` of dense fp32 rows (e.g. rows received from their owner),
    each row's columns ascending: two passes over the rows (count, then place; 6x faster than
    ``np.nonzero`` and its fancy indexing on 0.4 %-dense rows)."""
    rows_RF = np.ascontiguousarray(rows_RF, np.float32)
    indptr = np.zeros(rows_RF.shape[0] + 1, np.int64)
    _row_nonzeros_kernel(rows_RF, indptr[1:])
    np.cumsum(indptr, out=indptr)
    indices = np.empty(int(indptr[-1]), np.int32)
    values = np.empty(int(indptr[-1]), np.float32)
    _dense_to_csr_kernel(rows_RF, indptr, indices, values)
    return indptr, indices, values


class SparseRowStore(FeatureStore):
    """Rows of a mostly-zero fp32 matrix held in RAM as CSR (``indptr``, int32 ``indices`` with
    each row's columns ascending, fp32 ``values``): a bag-of-words row of coauthor-physics (8,415
    columns, 33 non-zeros) takes 272 bytes instead of 33,660. Build one with
    :func:`rows_in_memory`.

    ``gather`` returns dense rows, or with ``sparse_batches`` a coalesced sparse COO tensor of
    the same rows (their non-zeros only: a batch of 100,000 coauthor-physics rows is 26 MB
    instead of 3.4 GB, and the first layer multiplies by the non-zeros alone; see
    :func:`shardgnn.nn.functional.linear`). ``gather_into`` always writes dense rows."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        values: np.ndarray,
        width: int,
        sparse_batches: bool = False,
    ):
        assert indptr.dtype == np.int64 and indices.dtype == np.int32
        assert values.dtype == np.float32 and indptr[-1] == indices.shape[0] == values.shape[0]
        self.indptr, self.indices, self.values, self.width = indptr, indices, values, int(width)
        self.sparse_batches = sparse_batches

    @classmethod
    def of_batch(cls, rows_SF: torch.Tensor) -> SparseRowStore:
        """The rows of a coalesced sparse COO ``rows_SF`` (a gathered batch's: a window of them
        serves its batches), gathered as sparse batches."""
        rows_SF = rows_SF.coalesce()  # (no work for gathered rows: they are made coalesced)
        indices_2K = rows_SF.indices().numpy()
        indptr = np.zeros(rows_SF.shape[0] + 1, np.int64)
        np.cumsum(np.bincount(indices_2K[0], minlength=rows_SF.shape[0]), out=indptr[1:])
        indices = indices_2K[1].astype(np.int32)
        return cls(indptr, indices, rows_SF.values().numpy(), rows_SF.shape[1], sparse_batches=True)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.indptr.shape[0] - 1, self.width)

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    @property
    def nbytes(self) -> int:
        """The bytes held (:func:`held_bytes`)."""
        return self.indptr.nbytes + self.indices.nbytes + self.values.nbytes

    def gather_into(self, ids: torch.Tensor, out: torch.Tensor, positions: np.ndarray) -> None:
        if ids.shape[0] == 0:
            return
        _copy_sparse_rows_kernel(
            out.view(out.shape[0], -1).numpy(),
            np.ascontiguousarray(positions, dtype=np.int64),
            self.indptr,
            self.indices,
            self.values,
            np.ascontiguousarray(ids.numpy(), dtype=np.int64),
        )

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        if self.sparse_batches:
            return self._gather_sparse(ids)
        return self.gather_dense(ids)

    def _gather_sparse(self, ids: torch.Tensor) -> torch.Tensor:
        ids_np = np.ascontiguousarray(ids.numpy(), dtype=np.int64)
        rows = np.arange(ids_np.shape[0])
        return sparse_batch(ids_np.shape[0], self.width, self.local_pieces(ids_np, rows))

    def to_dense(self) -> np.ndarray:
        """Every row as a dense ``[N, F]`` array (for a pass that reads the matrix whole)."""
        return self.gather_dense(torch.arange(self.shape[0])).numpy()

    def to_sparse(self) -> torch.Tensor:
        """Every row as one coalesced sparse COO ``[N, F]`` tensor (for a pass that reads the
        matrix whole and multiplies its non-zeros: layer-wise inference)."""
        return self._gather_sparse(torch.arange(self.shape[0]))

    def local_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        return [(self.indptr, self.indices, self.values, ids, positions)]

    def gather_pieces(self, ids: np.ndarray, positions: np.ndarray) -> list[CsrPiece]:
        self.check_ids(torch.from_numpy(ids))
        return self.local_pieces(ids, positions)

    def row_nonzeros(self, ids: np.ndarray) -> np.ndarray:
        """Each of rows ``ids``' number of non-zeros."""
        return self.indptr[ids + 1] - self.indptr[ids]

    def nonzero_positions(self, ids: np.ndarray) -> np.ndarray:
        """Where rows ``ids``' non-zeros sit in :attr:`values` (int64), one row after the other
        as :meth:`nonzeros_into` writes them."""
        starts = self.indptr[ids]
        return concat_ranges(starts, self.indptr[ids + 1] - starts)

    def nonzeros_into(self, ids: np.ndarray, indices_out: np.ndarray, values_out: np.ndarray):
        """Rows ``ids``' non-zeros one row after the other, their columns into ``indices_out``
        (int32) and values into ``values_out`` (fp32), each sized to their total
        (:meth:`row_nonzeros`): the rows' CSR without their offsets."""
        assert indices_out.shape[0] == values_out.shape[0]
        rows = np.ascontiguousarray(ids, dtype=np.int64)
        written = _take_nonzeros_kernel(
            self.indptr, self.indices, self.values, rows, indices_out, values_out
        )
        # the caller sized the buffers by :meth:`row_nonzeros`: checked as written, not recounted
        assert written == indices_out.shape[0], "buffers not sized to the rows' non-zeros"


def rows_in_memory(
    array: np.ndarray, feature_norm: str, allow_sparse: bool = True, chunk_rows: int | None = None
) -> LocalFeatureStore | SparseRowStore:
    """A store of ``array``'s rows (e.g. a memory-mapped part file) read into RAM, normalised by
    ``feature_norm`` (row by row, so chunk by chunk): a :class:`SparseRowStore` when at most
    :data:`~shardgnn.graph.features.SPARSE_MAX_DENSITY` of the entries are non-zero (and
    ``allow_sparse``), as full-graph training decides, else a dense one; the CSR one is built a
    chunk at a time, never holding the dense matrix. Gathered rows are the same bit for bit."""
    n, width = array.shape[0], math.prod(array.shape[1:])
    if array.ndim != 2 or not allow_sparse or not stored_sparse(nonzero_count(array), n * width):
        return LocalFeatureStore(dense_rows(array, feature_norm, chunk_rows))
    return csr_rows(array, feature_norm, chunk_rows)


RowArrays = np.ndarray | Sequence[np.ndarray]
"""Feature rows as stored: one ``[N, ...]`` array (e.g. a memory-mapped part file), or several
read one after the other (a row group's parts)."""


CHUNK_BYTES = 1 << 24
"""What a chunk of stored rows holds when read (as float32), unless told its rows: 16 MB, 500 rows
of coauthor-physics' 8,415 columns."""


def _row_chunks(arrays: RowArrays, chunk_rows: int | None) -> Iterator[np.ndarray]:
    """``arrays``' rows a chunk at a time as stored: ``chunk_rows`` rows, or None: about
    :data:`CHUNK_BYTES`. A memory map's pages are released once their chunk is consumed, so the
    process never holds a whole part file's pages (nor a whole part as float32)."""
    for array in _parts(arrays):
        step = chunk_rows or max(1, CHUNK_BYTES // max(1, 4 * math.prod(array.shape[1:])))
        for start in range(0, array.shape[0], step):
            chunk = array[start : start + step]
            yield chunk
            release_pages(chunk)


def _parts(arrays: RowArrays) -> list[np.ndarray]:
    return [arrays] if isinstance(arrays, np.ndarray) else list(arrays)


def nonzero_count(arrays: RowArrays, chunk_rows: int | None = None) -> int:
    """The non-zero entries of ``arrays``' rows, read a chunk at a time."""
    return sum(int(np.count_nonzero(chunk)) for chunk in _row_chunks(arrays, chunk_rows))


def dense_rows(arrays: RowArrays, feature_norm: str, chunk_rows: int | None = None) -> np.ndarray:
    """``arrays``' rows as one float32 ``[N, ...]`` array in RAM, normalised by ``feature_norm``
    row by row, a chunk at a time (one copy, never a normalised second one; bit for bit
    :func:`~shardgnn.graph.features.normalize_features` of the whole)."""
    assert feature_norm != "standard", "column statistics are not a row-by-row normalisation"
    parts = _parts(arrays)
    out = np.empty((sum(a.shape[0] for a in parts), *parts[0].shape[1:]), np.float32)
    row = 0
    for chunk in _row_chunks(parts, chunk_rows):
        out[row : row + chunk.shape[0]] = normalize_features(chunk, feature_norm)
        row += chunk.shape[0]
    return out


def csr_rows(
    arrays: RowArrays,
    feature_norm: str,
    chunk_rows: int | None = None,
    sparse_batches: bool = False,
) -> SparseRowStore:
    """``arrays``' rows (``[N, F]``) normalised by ``feature_norm`` row by row, held as CSR,
    built a chunk at a time (never the dense matrix whole); ``sparse_batches``:
    :class:`SparseRowStore`'s."""
    assert feature_norm != "standard", "column statistics are not a row-by-row normalisation"
    parts = _parts(arrays)
    indptr = np.zeros(sum(a.shape[0] for a in parts) + 1, np.int64)
    indices, values = [], []
    row = 0
    for stored in _row_chunks(parts, chunk_rows):
        chunk = normalize_features(np.asarray(stored, np.float32), feature_norm)
        chunk_indptr, chunk_indices, chunk_values = dense_rows_as_csr(chunk)
        indptr[row + 1 : row + 1 + chunk.shape[0]] = np.diff(chunk_indptr)
        row += chunk.shape[0]
        indices.append(chunk_indices)
        values.append(chunk_values)
    np.cumsum(indptr, out=indptr)
    indices_K = np.concatenate([np.zeros(0, np.int32), *indices])
    values_K = np.concatenate([np.zeros(0, np.float32), *values])
    return SparseRowStore(indptr, indices_K, values_K, parts[0].shape[1], sparse_batches)
