"""The partition book: which part owns a node, after relabelling parts into contiguous id ranges.

After partitioning, nodes are renumbered so that part ``p`` owns the contiguous *new* ids
``[boundaries[p], boundaries[p + 1])``. Inside a part the nodes keep their original relative
order (ascending original id), so the relabelling is a pure function of the assignment.

Two arrays link the numberings (``N`` = number of nodes):

* ``orig_ids[new] -> original id`` (int64 ``[N]``), stored in the partition directory;
* ``new_id_of_orig[orig] -> new id`` (int64 ``[N]``), its inverse permutation.

With contiguous ranges, ``owner`` is a binary search over ``P + 1`` boundaries instead of an
``[N]`` lookup table, so every rank can hold the whole book for free.

Lookups accept numpy arrays or torch tensors. torch is not imported here: a tensor can only exist
once torch is imported, so ``sys.modules`` tells whether an argument may be one (this keeps the
partitioning tools free of torch's import time and memory).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from shardgnn.errors import DatasetError


class PartitionBook:
    """Maps new global node ids to their owning part and back.

    Args:
        boundaries: int64 ``[P + 1]``, non-decreasing, starting at 0; part ``p`` owns the new ids
            ``[boundaries[p], boundaries[p + 1])``. Equal neighbours mean an empty part.

    Raises:
        ValueError: ``boundaries`` is not a non-decreasing 1-D integer array starting at 0.
    """

    def __init__(self, boundaries: np.ndarray | list[int]):
        b = np.asarray(boundaries)
        if b.ndim != 1 or b.shape[0] < 2 or not np.issubdtype(b.dtype, np.integer):
            raise ValueError(
                f"boundaries must be a 1-D integer array of length P + 1 >= 2, got shape {b.shape} "
                f"dtype {b.dtype}"
            )
        if b[0] != 0 or np.any(np.diff(b) < 0):
            raise ValueError(
                f"boundaries must start at 0 and be non-decreasing, got {b[:8].tolist()}..."
            )
        self.boundaries = b.astype(np.int64, copy=True)
        self.boundaries.setflags(write=False)
        self._boundaries_t: Any = None

    # ------------------------------------------------------------------ sizes
    @property
    def num_parts(self) -> int:
        return int(self.boundaries.shape[0] - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.boundaries[-1])

    def part_range(self, part: int) -> tuple[int, int]:
        """``(start, end)``: the new ids owned by ``part`` are ``start <= id < end``."""
        if not 0 <= part < self.num_parts:
            raise ValueError(f"part {part} is out of range [0, {self.num_parts})")
        return int(self.boundaries[part]), int(self.boundaries[part + 1])

    def part_sizes(self) -> np.ndarray:
        """int64 ``[P]``: number of nodes owned by each part."""
        return np.diff(self.boundaries)

    # ------------------------------------------------------------------ lookups
    def _check_ids(self, lo: int, hi: int) -> None:
        if lo < 0 or hi >= self.num_nodes:
            raise ValueError(f"node ids must lie in [0, {self.num_nodes}), got range [{lo}, {hi}]")

    @staticmethod
    def _is_tensor(ids: Any) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(ids, torch.Tensor)

    def _torch_boundaries(self, device: Any) -> Any:
        import torch

        if self._boundaries_t is None:
            self._boundaries_t = torch.from_numpy(self.boundaries.copy())
        return self._boundaries_t.to(device)

    def owner(self, ids: Any) -> Any:
        """The part owning each new global id (numpy in -> int64 numpy out; torch -> int64 torch).

        Raises:
            ValueError: an id lies outside ``[0, num_nodes)``.
        """
        if self._is_tensor(ids):
            import torch

            if ids.numel():
                self._check_ids(int(ids.min()), int(ids.max()))
            return (
                torch.searchsorted(
                    self._torch_boundaries(ids.device), ids.to(torch.int64), right=True
                )
                - 1
            )
        ids = np.asarray(ids)
        if ids.size:
            self._check_ids(int(ids.min()), int(ids.max()))
        return np.searchsorted(self.boundaries, ids, side="right").astype(np.int64) - 1

    def local(self, ids: Any) -> Any:
        """Each id's offset inside its owning part (``id - boundaries[owner(id)]``), numpy or
        torch."""
        part = self.owner(ids)
        if self._is_tensor(ids):
            import torch

            return ids.to(torch.int64) - self._torch_boundaries(ids.device)[part]
        return np.asarray(ids, dtype=np.int64) - self.boundaries[part]

    def to_global(self, part: int, local_ids: np.ndarray) -> np.ndarray:
        """New global ids of ``local_ids`` (offsets inside ``part``)."""
        start, end = self.part_range(part)
        local_ids = np.asarray(local_ids, dtype=np.int64)
        if local_ids.size and (local_ids.min() < 0 or local_ids.max() >= end - start):
            raise ValueError(f"local ids of part {part} must lie in [0, {end - start})")
        return local_ids + start

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionBook) and np.array_equal(
            self.boundaries, other.boundaries
        )

    def __repr__(self) -> str:
        return f"PartitionBook(num_parts={self.num_parts}, num_nodes={self.num_nodes})"


def bucket_by_owner(
    ids: np.ndarray, owners: np.ndarray, world_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(order, counts)``: ``ids[order]`` lists ids grouped by owner rank (stable within a rank),
    ``counts[p]`` of them owned by ``p``."""
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=world_size)
    return order, counts


def unbucket_segments(
    order: np.ndarray, grouped_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of :func:`bucket_by_owner` for variable-length replies: request ``j`` (in
    owner-grouped order, ``order[j]`` its original position) got ``grouped_counts[j]`` rows,
    concatenated in grouped order. Returns ``(offsets, gather)``: the replies' rows ``gather``
    put every request's rows at its original position, which holds ``offsets[i]:offsets[i+1]``."""
    start_grouped = np.cumsum(grouped_counts) - grouped_counts
    counts_in_order = np.empty_like(grouped_counts)
    counts_in_order[order] = grouped_counts
    start_in_order = np.empty_like(start_grouped)
    start_in_order[order] = start_grouped
    offsets = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts_in_order, out=offsets[1:])
    gather = np.repeat(start_in_order - offsets[:-1], counts_in_order) + np.arange(
        offsets[-1], dtype=np.int64
    )
    return offsets, gather


@dataclasses.dataclass(frozen=True)
class Relabelling:
    """The renumbering that makes every part a contiguous id range.

    Attributes:
        book: the :class:`PartitionBook` of the new numbering.
        orig_ids: int64 ``[N]``, new id -> original id (ascending original id inside each part).
        new_id_of_orig: int64 ``[N]``, original id -> new id (the inverse permutation).
    """

    book: PartitionBook
    orig_ids: np.ndarray
    new_id_of_orig: np.ndarray


def relabel(assignment: np.ndarray, num_parts: int) -> Relabelling:
    """Renumber nodes so part ``p`` owns ``[boundaries[p], boundaries[p + 1])``, order kept stable.

    Args:
        assignment: integer ``[N]``, the part of every original node id, each in ``[0, num_parts)``.
        num_parts: ``P``.
    """
    assignment = np.asarray(assignment)
    assert assignment.ndim == 1 and np.issubdtype(assignment.dtype, np.integer)
    n = assignment.shape[0]
    counts = np.bincount(assignment, minlength=num_parts)
    assert counts.shape[0] == num_parts, "assignment holds a part id >= num_parts"
    boundaries = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(counts, out=boundaries[1:])
    # A stable sort keeps ascending original ids inside a part.
    orig_ids = np.argsort(assignment, kind="stable").astype(np.int64, copy=False)
    new_id_of_orig = np.empty(n, dtype=np.int64)
    new_id_of_orig[orig_ids] = np.arange(n, dtype=np.int64)
    return Relabelling(
        book=PartitionBook(boundaries), orig_ids=orig_ids, new_id_of_orig=new_id_of_orig
    )


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """``inv`` with ``inv[perm[i]] = i`` (int64)."""
    inv = np.empty(perm.shape[0], dtype=np.int64)
    inv[np.asarray(perm)] = np.arange(perm.shape[0], dtype=np.int64)
    return inv


class TypedPartitionBook:
    """Which part holds ``(type, id)``, and which type a new id has: ``P x (T + 1)`` bounds.

    Inside part ``p`` the new ids of type ``t`` are ``[type_bounds[p, t], type_bounds[p, t + 1])``
    (the last bound of a part is its end). A node's rank among its type's nodes in new-id order
    (part by part) is its *typed new id*; ``(type, typed new id) -> global new id`` is a search
    over ``P`` cumulative counts.

    A homogeneous graph is a typed graph with one node type and one relation
    (:meth:`one_type`): every partition directory has a typed book
    (:attr:`~shardgnn.partition.format.PartitionSet.typed_book`).

    Args:
        typed: ``meta.json["typed"]`` (``node_types``, original ``type_offsets``, ``relations``,
            ``type_bounds``, ``features`` widths by type index).
        boundaries: the parts' new-id boundaries (``[P + 1]``).
    """

    ONE_TYPE = "node"
    """The node type of a homogeneous graph seen as a typed one (its one relation:
    ``(node, edge, node)``)."""

    @classmethod
    def one_type(cls, boundaries: np.ndarray, num_features: int = 0) -> "TypedPartitionBook":
        """The book of a homogeneous graph: one node type owning every id, one relation."""
        boundaries = np.asarray(boundaries, dtype=np.int64)
        typed = {
            "node_types": [cls.ONE_TYPE],
            "type_offsets": [0, int(boundaries[-1])],
            "relations": [[cls.ONE_TYPE, "edge", cls.ONE_TYPE]],
            "type_bounds": np.stack([boundaries[:-1], boundaries[1:]], axis=1).tolist(),
            "features": {"0": num_features} if num_features else {},
        }
        return cls(typed, boundaries)

    def __init__(self, typed: dict, boundaries: np.ndarray):
        self.node_types = tuple(typed["node_types"])
        self.relations = tuple(tuple(r) for r in typed["relations"])
        self.type_offsets = np.asarray(typed["type_offsets"], dtype=np.int64)  # original ids
        self.target_type: str | None = typed.get("target_type")  # the labelled type, if any
        self.metrics: dict | None = typed.get("metrics")  # the quality by relation and type
        features = typed.get("features") or {}
        # the feature width of every type (0: featureless)
        self.feature_widths = [int(features.get(str(t), 0)) for t in range(len(self.node_types))]
        bounds = np.asarray(typed["type_bounds"], dtype=np.int64)  # [P, T + 1]
        num_types = len(self.node_types)
        if bounds.shape != (len(boundaries) - 1, num_types + 1):
            raise DatasetError(
                f"meta.json typed.type_bounds has shape {bounds.shape}, expected "
                f"({len(boundaries) - 1}, {num_types + 1})"
            )
        self.type_bounds = bounds
        self.boundaries = np.asarray(boundaries, dtype=np.int64)
        counts = np.diff(bounds, axis=1)  # [P, T] nodes of each type per part
        # typed_start[p, t]: typed new id of the first type-t node of part p
        self.typed_start = np.vstack([np.zeros((1, num_types), np.int64), np.cumsum(counts, 0)])

    def type_of(self, new_ids: np.ndarray) -> np.ndarray:
        """The type index of every new id."""
        flat = self.type_bounds[:, :-1].reshape(-1)  # ascending: parts, then types
        return (np.searchsorted(flat, np.asarray(new_ids), side="right") - 1) % len(self.node_types)

    def typed_id(self, new_ids: np.ndarray, t: int) -> np.ndarray:
        """Typed new ids of ``new_ids``, every one a node of type index ``t``."""
        new_ids = np.asarray(new_ids, dtype=np.int64)
        part = np.searchsorted(self.boundaries[1:], new_ids, side="right")
        return new_ids - self.type_bounds[part, t] + self.typed_start[part, t]

    def type_book(self, t: int) -> PartitionBook:
        """The partition book of type index ``t``'s nodes by typed new id (part ``p`` owns
        ``[typed_start[p, t], typed_start[p + 1, t])``): per-type rows (features, learnt rows)
        are fetched and owned through it."""
        return PartitionBook(self.typed_start[:, t])

    def new_id(self, node_type: str, typed_ids: np.ndarray) -> np.ndarray:
        """Global new ids of ``node_type``'s nodes by typed new id."""
        t = self.node_types.index(node_type)
        typed_ids = np.asarray(typed_ids, dtype=np.int64)
        part = np.searchsorted(self.typed_start[1:, t], typed_ids, side="right")
        return self.type_bounds[part, t] + typed_ids - self.typed_start[part, t]


__all__ = [
    "PartitionBook",
    "Relabelling",
    "TypedPartitionBook",
    "relabel",
    "inverse_permutation",
]
