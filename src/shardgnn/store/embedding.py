"""Learnable node embeddings: a table of rows and the sparse optimiser that owns their state.

A training step gathers the rows of its batch's input nodes (:meth:`EmbeddingTable.gather`, a
copy, so the model's graph ends in a leaf whose gradient is the rows' gradient), runs forward
and backward, and hands the gradient back (:meth:`EmbeddingTable.apply_gradients`). Only the rows
a step used change, and only their optimiser state is read or written (lazy updates):

* ``adagrad``, row-wise (as DGL's ``SparseAdagrad`` and PyTorch-BigGraph): one accumulator per
  row, ``s_v += mean_c g_vc**2``, ``w_v -= lr * g_v / (sqrt(s_v) + eps)``; the state is one
  float per row instead of one per entry. With ``dim = 1`` it is exactly ``torch.optim.Adagrad``.
* ``adam``: ``torch.optim.SparseAdam``'s update, bit for bit: the moments of the used rows decay
  and take the gradient, untouched rows keep theirs; the step count (for bias correction) counts
  every step of the table, used rows or not.

The rows and the optimiser state are buffers of this module, so a checkpoint of the model that
holds the table carries both, and the kept "best" weights include the rows of the best epoch.
Rows are initialised by :func:`~shardgnn.seeding.hashed_uniform` of their node id, so whoever
owns a row creates it identically.

``--embedding-storage disk`` keeps the rows and their optimiser state in memory-mapped scratch
files (:func:`mapped_zeros`): the same tensors, the same kernels, bit-identical updates, but the
kernel pages rows in and out, so a table may exceed RAM. The files are unlinked as soon as they
are mapped (nothing is left behind, even after a crash); the best epoch's copy of the table is
kept in such files too (:func:`snapshot_state`).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile

import numba
import numpy as np
import torch

from shardgnn.distributed.oom import available_memory
from shardgnn.errors import ConfigError
from shardgnn.seeding import hashed_uniform
from shardgnn.store.config import EmbeddingConfig
from shardgnn.store.feature import FeatureStore

ADAGRAD_EPS = 1e-10  # torch.optim.Adagrad's default
ADAM_BETAS = (0.9, 0.999)  # torch.optim.SparseAdam's defaults
ADAM_EPS = 1e-8
# CPU tables update through the numba kernels below; the torch operations serve other devices
# (tests switch this off to check that path on CPU too).
USE_KERNELS = True
INIT_CHUNK_ROWS = 1 << 20


# The update kernels: one fused pass over the used rows, in parallel (rows are unique, so no two
# iterations touch the same row). Every constant is float32, as torch computes a float32 tensor
# times a Python scalar, so the results follow torch's operation for operation.
@numba.njit(parallel=True, nogil=True, cache=True)
def _adagrad_kernel(weight, sum_sq, rows, grad, lr, eps):  # pragma: no cover - compiled
    dim = grad.shape[1]
    for i in numba.prange(rows.shape[0]):
        r = rows[i]
        acc = np.float32(0.0)
        for c in range(dim):
            acc += grad[i, c] * grad[i, c]
        total = sum_sq[r] + acc / np.float32(dim)
        sum_sq[r] = total
        denom = np.sqrt(total) + eps
        for c in range(dim):
            weight[r, c] -= lr * (grad[i, c] / denom)


@numba.njit(parallel=True, nogil=True, cache=True)
def _adam_kernel(
    weight, exp_avg, exp_avg_sq, rows, grad, one_minus_beta1, one_minus_beta2, eps, neg_step_size
):  # pragma: no cover - compiled
    dim = grad.shape[1]
    for i in numba.prange(rows.shape[0]):
        r = rows[i]
        for c in range(dim):
            g = grad[i, c]
            old_avg, old_avg_sq = exp_avg[r, c], exp_avg_sq[r, c]
            avg_update = (g - old_avg) * one_minus_beta1
            avg_sq_update = (g * g - old_avg_sq) * one_minus_beta2
            exp_avg[r, c] = old_avg + avg_update
            exp_avg_sq[r, c] = old_avg_sq + avg_sq_update
            denom = np.sqrt(avg_sq_update + old_avg_sq) + eps
            weight[r, c] += neg_step_size * ((avg_update + old_avg) / denom)


@numba.njit(nogil=True, cache=True)
def _has_repeats(rows, seen):  # pragma: no cover - compiled
    """Whether ``rows`` holds a value twice; ``seen`` (zeros, one per row) is left as found."""
    repeats = False
    for r in rows:
        repeats |= seen[r] != 0
        seen[r] = 1
    for r in rows:
        seen[r] = 0
    return repeats


def table_bytes(num_rows: int, dim: int, optimizer: str) -> int:
    """Bytes of ``num_rows`` float32 rows of width ``dim`` with their optimiser state."""
    per_row = dim * 4 + (4 if optimizer == "adagrad" else 2 * dim * 4)
    return num_rows * per_row


def table_directory(config: EmbeddingConfig) -> str:
    """The folder of ``--embedding-storage disk`` files."""
    return config.directory or tempfile.gettempdir()


def check_table_fits(num_rows: int, config: EmbeddingConfig, share: float = 0.8) -> None:
    """Refuse a table (rows and optimiser state) larger than ``share`` of the available memory
    (``--embedding-storage disk``: of the free space of ``--embedding-dir``; the best epoch's copy
    needs as much again there)."""
    need = table_bytes(num_rows, config.dim, config.optimizer)
    what = (
        f"--embedding-dim {config.dim}: {num_rows:,} rows of {config.dim} float32 values and "
        f"their {config.optimizer} state need {need / 1e9:.1f} GB"
    )
    if config.storage == "disk":
        directory = table_directory(config)
        try:
            free = shutil.disk_usage(directory).free
        except OSError as exc:
            raise ConfigError(
                f"--embedding-dir {directory}: cannot be used ({exc.strerror}); give an existing, "
                "writable folder"
            ) from None
        if 2 * need > share * free:
            raise ConfigError(
                f"{what} (twice: the table and its best epoch's copy), more than {share:.0%} of "
                f"the {free / 1e9:.1f} GB free in {directory}; give --embedding-dir on a larger "
                "disk, or a smaller --embedding-dim"
            )
        return
    have = available_memory()
    if have is not None and need > share * have:
        raise ConfigError(
            f"{what}, more than {share:.0%} of the {have / 1e9:.1f} GB available; use "
            "--embedding-storage disk (memory-mapped files), a smaller --embedding-dim, or "
            "--embedding-optimizer adagrad (one float of state per row)"
        )


def mapped_zeros(shape: tuple[int, ...], dtype: torch.dtype, directory: str) -> torch.Tensor:
    """A zero tensor backed by a scratch file in ``directory``, unlinked at once (the mapping
    keeps its pages; the space is freed when the tensor is)."""
    numel = math.prod(shape)
    if numel == 0:
        return torch.zeros(shape, dtype=dtype)
    fd, path = tempfile.mkstemp(prefix="shardgnn-rows-", suffix=".bin", dir=directory)
    try:
        # A sparse file of the right size: zeros, with no block written until a row is.
        os.ftruncate(fd, numel * torch.tensor([], dtype=dtype).element_size())
        tensor = torch.from_file(path, shared=True, size=numel, dtype=dtype)
    finally:
        os.close(fd)
        os.unlink(path)
    return tensor.view(shape)


def snapshot_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``module``'s state (the best epoch's weights): tensors are cloned, and the
    buffers of a disk-backed :class:`EmbeddingTable` are copied into new mapped files instead of
    memory."""
    on_disk: dict[str, EmbeddingTable] = {}
    for name, sub in module.named_modules():
        if isinstance(sub, EmbeddingTable) and sub.mapped:
            for buffer_name, _ in sub.named_buffers(recurse=False):
                on_disk[f"{name}.{buffer_name}" if name else buffer_name] = sub
    state = {}
    for key, value in module.state_dict().items():
        table = on_disk.get(key)
        if table is None:
            state[key] = value.detach().clone()
        else:
            state[key] = table.allocate(tuple(value.shape), value.dtype).copy_(value)
    return state


class EmbeddingTable(torch.nn.Module, FeatureStore):
    """``num_rows`` learnable rows of width ``config.dim`` (the rows of nodes
    ``first_row .. first_row + num_rows - 1``) and their sparse optimiser's state.

    Args:
        num_rows: rows held here.
        config: width, optimiser and learning rate.
        seed: seed of the rows' initial values.
        first_row: node id of the first row (ids given to :meth:`gather` and
            :meth:`apply_gradients` are node ids).
        init_ids: the ids that key the rows' initial values (default: their node ids); a shard of
            a relabelled (partitioned) graph passes its rows' original ids, so its rows start as
            one process's rows of the same nodes.
    """

    def __init__(
        self,
        num_rows: int,
        config: EmbeddingConfig,
        seed: int,
        first_row: int = 0,
        init_ids: np.ndarray | None = None,
    ):
        torch.nn.Module.__init__(self)
        assert config.dim > 0
        self.config, self.first_row = config, first_row
        self.mapped = config.storage == "disk"
        if init_ids is None:
            init_ids = np.arange(first_row, first_row + num_rows, dtype=np.int64)
        assert len(init_ids) == num_rows
        init_ids = np.asarray(init_ids, dtype=np.int64)
        weight = self.allocate((num_rows, config.dim), torch.float32)
        # In chunks: a disk-backed table never needs a second copy of itself in memory.
        for start in range(0, num_rows, INIT_CHUNK_ROWS):
            ids = init_ids[start : start + INIT_CHUNK_ROWS]
            weight[start : start + len(ids)] = torch.from_numpy(
                hashed_uniform(ids, config.dim, seed)
            )
        self.register_buffer("weight", weight)
        # Whose rows these are (original node ids): a checkpoint of sharded rows can be put back
        # together in original id order whatever the partitioning was.
        self.register_buffer("node_ids", torch.from_numpy(init_ids.copy()))
        if config.optimizer == "adagrad":
            self.register_buffer("sum_sq", self.allocate((num_rows,), torch.float32))
        else:
            self.register_buffer("exp_avg", self.allocate((num_rows, config.dim), torch.float32))
            self.register_buffer("exp_avg_sq", self.allocate((num_rows, config.dim), torch.float32))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self._seen: np.ndarray | None = None  # scratch of the repeat check

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A zero tensor in this table's storage (memory, or a mapped scratch file)."""
        if self.mapped:
            return mapped_zeros(shape, dtype, table_directory(self.config))
        return torch.zeros(shape, dtype=dtype)

    # FeatureStore ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return (self.first_row + self.weight.shape[0], self.config.dim)

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    @property
    def dim(self) -> int:
        return self.config.dim

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        # On the table's device (a GPU-resident table gathers there; the step moves x anyway).
        return self.weight.index_select(0, (ids - self.first_row).to(self.weight.device))

    # The optimiser ---------------------------------------------------------------------------
    @torch.no_grad()
    def apply_gradients(self, ids: torch.Tensor, grad_RD: torch.Tensor) -> None:
        """One optimiser step: rows ``ids`` (node ids, repeats summed) took gradient ``grad_RD``.
        Call it once per training step, also with no rows: Adam's step count counts steps."""
        self.steps += 1
        if ids.numel() == 0:
            return
        rows = ids.to(self.weight.device) - self.first_row
        grad_RD = grad_RD.to(self.weight.device, self.weight.dtype)
        if self._kernels:
            if self._seen is None:
                self._seen = np.zeros(self.weight.shape[0], dtype=np.uint8)
            repeats = _has_repeats(rows.numpy(), self._seen)
        else:
            repeats = torch.unique(rows).numel() != rows.numel()
        if repeats:  # the update is not linear: sum a row's gradients first
            rows, inverse = torch.unique(rows, return_inverse=True)
            grad_RD = grad_RD.new_zeros(rows.numel(), grad_RD.shape[1]).index_add_(
                0, inverse, grad_RD
            )
        if self.config.optimizer == "adagrad":
            self._adagrad(rows, grad_RD.contiguous())
        else:
            self._adam(rows, grad_RD.contiguous())

    @property
    def _kernels(self) -> bool:
        return USE_KERNELS and self.weight.device.type == "cpu"

    def _adagrad(self, rows: torch.Tensor, grad_RD: torch.Tensor) -> None:
        lr, eps = np.float32(self.config.lr), np.float32(ADAGRAD_EPS)
        if self._kernels:
            arrays = (self.weight.numpy(), self.sum_sq.numpy(), rows.numpy(), grad_RD.numpy())
            _adagrad_kernel(*arrays, lr, eps)
            return
        sum_sq = self.sum_sq[rows] + grad_RD.pow(2).mean(1)
        self.sum_sq[rows] = sum_sq
        denom = sum_sq.sqrt_().add_(ADAGRAD_EPS)
        self.weight[rows] -= self.config.lr * (grad_RD / denom[:, None])

    def _adam(self, rows: torch.Tensor, grad_RD: torch.Tensor) -> None:
        # The operations and their order of torch.optim._functional.sparse_adam (tested equal).
        beta1, beta2 = ADAM_BETAS
        step = int(self.steps)
        step_size = self.config.lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
        if self._kernels:
            arrays = (self.weight, self.exp_avg, self.exp_avg_sq, rows, grad_RD)
            constants = (1 - beta1, 1 - beta2, ADAM_EPS, -step_size)
            _adam_kernel(*(a.numpy() for a in arrays), *map(np.float32, constants))
            return
        old_avg, old_avg_sq = self.exp_avg[rows], self.exp_avg_sq[rows]
        avg_update = grad_RD.sub(old_avg).mul_(1 - beta1)
        avg_sq_update = grad_RD.pow(2).sub_(old_avg_sq).mul_(1 - beta2)
        self.exp_avg[rows] = old_avg + avg_update
        self.exp_avg_sq[rows] = old_avg_sq + avg_sq_update
        numer = avg_update.add_(old_avg)
        denom = avg_sq_update.add_(old_avg_sq).sqrt_().add_(ADAM_EPS)
        self.weight[rows] += -step_size * numer.div_(denom)


class FeaturesAndRows(FeatureStore):
    """Each node's features followed by its learnable row: ``[N, F + D]`` (``table``: the rows'
    store, local or distributed; a distributed one gathers after the features, on every rank).

    A feature cache in front of ``features`` works as without rows, its look-ahead included (the
    capabilities below are the features'). The feature cache never holds rows: a row changes at
    every step that uses it. ``table`` reads them from their owners, or through a cache of its
    own that bounds their age (``--embedding-staleness``, HET's bounded staleness; see
    :mod:`shardgnn.store.dist_embedding`).
    """

    def __init__(self, features: FeatureStore, table: FeatureStore):
        assert features.shape[0] == table.shape[0]
        self.features, self.table = features, table

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.table.shape[0], self.features.shape[1] + self.table.shape[1])

    def _gather(self, ids: torch.Tensor) -> torch.Tensor:
        features = self.features.gather(ids)
        rows = self.table.gather(ids)
        return torch.cat([features.to(rows.device), rows], dim=1)

    @property
    def lookahead(self) -> int:
        return self.features.lookahead

    def plan(self, window: list[torch.Tensor]) -> None:
        self.features.plan(window)

    def prefetch(self) -> None:
        self.features.prefetch()


def input_store(features: FeatureStore | None, table: FeatureStore | None) -> FeatureStore:
    """The model's input rows: the features, the learnable rows, or both side by side (the rows
    last, so a batch's input gradient ``grad[:, -D:]`` is the rows' gradient)."""
    if table is None:
        assert features is not None
        return features
    return table if features is None else FeaturesAndRows(features, table)
