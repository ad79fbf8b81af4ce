"""Checkpoints with exact resume.

Layout (``E`` = number of completed epochs, zero-padded)::

    DIR/epoch-000005/rank-0.pt ... rank-<P-1>.pt   every rank's state (torch.save, tensors only)
    DIR/epoch-000005/meta.json                     epoch, world size, config, dataset identity;
                                                   written LAST
    DIR/epoch-000005-batch-000120/...              the same, 120 batches into epoch 6 (written
                                                   when a stop signal ends a run part-way)

A checkpoint is complete iff its ``meta.json`` exists: every rank writes its file atomically
(temp file, fsync, rename), the ranks meet at a barrier, then rank 0 writes ``meta.json``
atomically. A job killed at any moment therefore leaves either a complete checkpoint or a
directory without ``meta.json``, which is ignored and later removed. The last ``keep`` complete
checkpoints are kept. Files are read back with ``torch.load(weights_only=True)``: no pickle
code runs on load.

Every random choice of training is a pure function of ``(seed, epoch, batch)`` (batch order,
sampling) or of a counter saved here (the dropout step, the codec's and torch's generators), so
resuming from the checkpoint after epoch ``E`` repeats epochs ``E, E+1, ...`` exactly: the final
weights are bit-identical (on CPU) to an uninterrupted run.

A checkpoint of P workers resumes on Q != P workers where the kind of training allows it
(:func:`reshard`: sharded learnable rows and their optimiser state, and temporal memory, are
put back together by original node id and cut along the new partition; the steps rebuild their
own per-rank state, historical tables, from every rank's); the run then goes on as Q workers train,
equal to the P-worker run within noise, not bit for bit (other batches per rank).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from shardgnn.atomic import atomic_open, save_json
from shardgnn.errors import CheckpointError, ConfigError, DatasetError
from shardgnn.graph.identity import check_same_graph
from shardgnn.graph.io import CHECKPOINT_FORMAT, read_directory_meta
from shardgnn.train.config import RESUMABLE_CHANGES, moved_settings

CHECKPOINT_VERSION = 1
"""the version of a checkpoint's ``meta.json`` this shardgnn writes and reads"""
_NAME = re.compile(r"^epoch-(\d{6,})(?:-batch-(\d{6,}))?$")


def _position(path: Path) -> tuple[int, int]:
    """(completed epochs, batches of the next epoch) of a checkpoint folder."""
    match = _NAME.match(path.name)
    assert match is not None
    return int(match.group(1)), int(match.group(2) or 0)


def checkpoint_name(epochs_done: int, batches_done: int = 0) -> str:
    """The folder name of the checkpoint after ``epochs_done`` epochs and ``batches_done`` batches
    of the next."""
    name = f"epoch-{epochs_done:06d}"
    return name + (f"-batch-{batches_done:06d}" if batches_done else "")


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _size(num_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes} bytes"


def _free_space(path: Path) -> str:
    """``"12.3 MB free of 1.0 GB"`` on the file system holding ``path`` (or its nearest
    parent)."""
    for folder in (path, *path.parents):
        try:
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        return f"{_size(usage.free)} free of {_size(usage.total)}"
    return "free space unknown"


class Checkpointer:
    """Saves and finds checkpoints of one job (every rank holds one, with the same arguments).

    Args:
        directory: the checkpoint folder (created when missing).
        rank, world_size: this rank in the job.
        every: save after every ``every`` epochs (and always after the last one).
        keep: how many complete checkpoints to keep (>= 1).
        sum_over_ranks: sums a list of numbers over the job's ranks (a collective; identity for
            one process). It is the barrier between the steps of a save, and tells every rank
            whether any rank failed to write, so all raise the same error together.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        rank: int = 0,
        world_size: int = 1,
        every: int = 1,
        keep: int = 2,
        sum_over_ranks: Callable[[list[float]], list[float]] = lambda values: values,
    ):
        if every < 1 or keep < 1:
            raise ConfigError(
                f"--checkpoint-every {every} and --keep-checkpoints {keep} must be >= 1"
            )
        self.directory = Path(directory).expanduser()
        self.rank, self.world_size, self.every, self.keep = rank, world_size, every, keep
        self.sum_over_ranks = sum_over_ranks
        if rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.barrier()

    def barrier(self) -> None:
        self.sum_over_ranks([0.0])

    def due(self, epochs_done: int, total_epochs: int) -> bool:
        return epochs_done % self.every == 0 or epochs_done == total_epochs

    # ------------------------------------------------------------------ writing
    def save(
        self,
        epochs_done: int,
        state: dict[str, Any],
        config: dict[str, Any],
        dataset: dict[str, Any] | None = None,
        *,
        batches_done: int = 0,
    ) -> Path:
        """Write this rank's ``state`` as the checkpoint after ``epochs_done`` epochs and
        ``batches_done`` batches of the next (collective); ``dataset`` is the trained graph's
        identity (spec, name, fingerprint)."""
        path = self.directory / checkpoint_name(epochs_done, batches_done)
        if self.rank == 0 and path.exists():
            shutil.rmtree(path)  # an earlier incomplete attempt, or a run being redone
        self.barrier()
        error = None
        target = path / f"rank-{self.rank}.pt"
        # Serialised in memory first: torch's zip writer reports a failed write as a RuntimeError
        # without its errno ("unexpected pos ..."); a plain write says "No space left on device".
        buffer = io.BytesIO()
        torch.save(state, buffer)
        try:
            path.mkdir(parents=True, exist_ok=True)
            with atomic_open(target, "wb") as fh:
                fh.write(buffer.getbuffer())
        except OSError as exc:  # full disk, quota, permissions: the temp file is gone already
            error = exc
        del buffer
        # Every rank's file is in place before the checkpoint is declared complete; a rank that
        # could not write makes every rank stop here with the same error.
        self._agree_written(path, target, error)
        error = None
        if self.rank == 0:
            try:
                save_json(
                    path / "meta.json",
                    {
                        "format": CHECKPOINT_FORMAT,
                        "version": CHECKPOINT_VERSION,
                        "epoch": epochs_done,
                        "batch": batches_done,
                        "world_size": self.world_size,
                        "config": config,
                        "dataset": dataset,
                    },
                )
            except OSError as exc:
                error = exc
        self._agree_written(path, path / "meta.json", error)
        if self.rank == 0:
            self._prune()
        self.barrier()
        return path

    def _agree_written(self, path: Path, target: Path, error: OSError | None) -> None:
        """Collective: raise :class:`CheckpointError` on every rank if any rank failed to write,
        after removing the incomplete checkpoint (the previous complete one stays)."""
        failed = self.sum_over_ranks([float(error is not None)])[0]
        if not failed:
            return
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        previous = self.complete()
        kept = (
            f"the previous checkpoint {previous[-1]} is intact and --resume uses it"
            if previous
            else "no earlier checkpoint exists"
        )
        if error is None:
            raise CheckpointError(
                f"{int(failed)} other worker(s) could not write their part of this checkpoint; "
                f"{kept}",
                path,
                "see the failing worker's error; free space or use another --checkpoint-dir",
            )
        raise CheckpointError(
            f"cannot write {target.name} ({error.strerror or error}; {_free_space(path)}); {kept}",
            path,
            "free space on that file system or point --checkpoint-dir at a larger one",
        )

    def _prune(self) -> None:
        complete = self.complete()
        for old in complete[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        newest = _position(complete[-1]) if complete else None
        for entry in self.directory.iterdir():
            if (
                _NAME.match(entry.name)
                and entry.is_dir()
                and not (entry / "meta.json").exists()
                and (newest is None or _position(entry) < newest)
            ):
                shutil.rmtree(entry, ignore_errors=True)

    # ------------------------------------------------------------------ reading
    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [
            p
            for p in self.directory.iterdir()
            if _NAME.match(p.name) and (p / "meta.json").is_file()
        ]
        return sorted(found, key=_position)

    def latest(self) -> tuple[Path, dict[str, Any]] | None:
        """``(folder, meta)`` of the newest complete checkpoint (None when there is none)."""
        complete = self.complete()
        if not complete:
            return None
        path = complete[-1]
        return path, read_checkpoint_meta(path)

    def load_latest(
        self,
        config: dict[str, Any],
        dataset: dict[str, Any] | None = None,
        *,
        rows: dict[str, np.ndarray] | None = None,
        fixed: str | None = None,
    ) -> dict[str, Any] | None:
        """This rank's state from the newest complete checkpoint (None when there is none).

        A checkpoint written by another number of workers is re-sharded (:func:`reshard`) when
        ``rows`` is given: for every sharded table of the model (a state prefix whose
        ``node_ids`` it holds), the original node ids of the rows this rank holds now. ``fixed``
        (with ``rows`` None) says why this run's state cannot be re-sharded.

        Raises:
            ConfigError: the checkpoint was written by a job with another world size that cannot
                be re-sharded, another configuration (the differing keys are named) or on
                another graph.
            DatasetError: a checkpoint file is missing or unreadable.
        """
        latest = self.latest()
        if latest is None:
            return None
        path, meta = latest
        written_by = int(meta["world_size"])
        if written_by != self.world_size and rows is None:
            raise ConfigError(
                f"{path} was written by {written_by} workers but {self.world_size} run now, and "
                f"{fixed or 'this kind of training'} resumes only on the worker count that wrote "
                f"it; resume with --workers {written_by} or use another --checkpoint-dir"
            )
        check_resumable(path, meta, config, dataset)
        state = _read_rank(path, min(self.rank, written_by - 1))
        if written_by != self.world_size or not _same_rows(state, rows):
            # another worker count, or the same count over another partition (one worker's
            # partition of one part against one process's original order): rows by node id
            state = reshard([_read_rank(path, p) for p in range(written_by)], self.rank, rows)
        batches = (state.get("partial") or {}).get("batches", 0)
        if state.get("epoch") != meta["epoch"] or batches != meta.get("batch", 0):
            raise DatasetError(
                f"holds epoch {state.get('epoch')} batch {batches} but meta.json says "
                f"{meta['epoch']} batch {meta.get('batch', 0)}",
                path / f"rank-{self.rank}.pt",
                "delete this checkpoint folder to resume from the one before it",
            )
        return state


def _read_rank(path: Path, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s state in checkpoint folder ``path``."""
    file = path / f"rank-{rank}.pt"
    try:
        # Memory-mapped: a disk-backed embedding table (and its best epoch's copy) is read page
        # by page as it is copied into place, never whole into memory.
        return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, ValueError, EOFError) as exc:
        raise DatasetError(
            f"cannot read checkpoint ({type(exc).__name__}: {exc})",
            file,
            "delete this checkpoint folder to resume from the one before it",
        ) from None


def _same_rows(state: dict[str, Any], rows: dict[str, np.ndarray] | None) -> bool:
    """Whether ``state`` holds the rows ``rows`` names, in that order (no rows to compare:
    yes)."""
    for prefix, ids in (rows or {}).items():
        held = state["model"].get(f"{prefix}node_ids")
        if held is not None and not np.array_equal(held.numpy(), ids):
            return False
    return True


_SUMS = ("loss_sum", "correct", "count", "sampled_edges")
"""what a mid-epoch checkpoint's per-rank sums add up (``EpochSums``; ``batches`` is shared)"""


def _tensors(value: Any, name: str) -> dict[str, torch.Tensor]:
    """Every tensor in a nested state (an optimiser's), by its path."""
    if isinstance(value, torch.Tensor):
        return {name: value}
    if not isinstance(value, (dict, list, tuple)):
        return {}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    out = {}
    for key, item in items:
        out.update(_tensors(item, f"{name}.{key}"))
    return out


def reshard(states: list[dict[str, Any]], rank: int, rows: dict[str, np.ndarray]) -> dict[str, Any]:
    """Rank ``rank``'s state in a job of another size, from every rank's state of the job that
    wrote the checkpoint (``states``, in rank order).

    What every rank holds alike (the model's weights and the optimiser's state, kept equal by
    DDP; the history and the best epoch) is rank 0's. Each sharded table of the model and of the
    best epoch's weights (state names ``<prefix>weight``, its optimiser's per-row state, and
    ``<prefix>node_ids``, the rows' original node ids) is put together from every rank's rows
    and cut to this rank's: ``rows[prefix]``, the original ids of the rows it holds now. The
    sums of a mid-epoch checkpoint go to rank 0 (every rank's epoch sums are added at the end of
    the epoch); the torch generator of old rank ``min(rank, P - 1)`` carries on; low-bit codecs'
    generators start afresh (``generators`` None); every rank's extra state goes along
    (``extras``, for :meth:`~shardgnn.train.loop.Steps.load_resharded_extra_state`).

    Raises:
        DatasetError: a row this rank needs is in no rank's file (another graph's checkpoint).
    """
    first = states[0]
    sharded = tuple(rows)
    replicated = {n: t for n, t in first["model"].items() if not n.startswith(sharded)}
    replicated.update(_tensors(first["optimizer"], "optimizer"))
    for name, tensor in replicated.items():
        others = [
            s["model"].get(name)
            if name in first["model"]
            else _tensors(s["optimizer"], "optimizer").get(name)
            for s in states[1:]
        ]
        if not all(
            o is not None and o.shape == tensor.shape and torch.equal(tensor, o) for o in others
        ):
            raise ConfigError(
                f"the checkpoint's {name} differs from rank to rank and is not a table of node "
                f"rows; resume it on the {len(states)} workers that wrote it"
            )
    state = dict(first)
    for section in ("model", "best_state"):
        merged = dict(first[section])
        for prefix, ids in rows.items():
            ids = np.asarray(ids, dtype=np.int64)
            key = f"{prefix}node_ids"
            if key not in merged:
                continue
            held = [s[section][key].numpy() for s in states]
            every = np.concatenate(held)
            position = np.full(int(max(every.max(initial=-1), ids.max(initial=-1))) + 1, -1)
            position[every] = np.arange(every.shape[0])
            take = position[ids]
            if (take < 0).any():
                raise DatasetError(
                    f"holds no row of node {int(ids[take < 0][0])} in {key}",
                    "the checkpoint",
                    "resume on the graph it was trained on, or use another --checkpoint-dir",
                )
            take_t = torch.from_numpy(take)
            for name, tensor in first[section].items():
                per_row = tensor.dim() > 0 and tensor.shape[0] == held[0].shape[0]
                if name.startswith(prefix) and name != key and per_row:
                    merged[name] = torch.cat([s[section][name] for s in states])[take_t]
            merged[key] = torch.from_numpy(ids.copy())
        state[section] = merged
    old = states[min(rank, len(states) - 1)]
    state["torch_rng"] = old["torch_rng"]
    # Reports gather every rank's totals stage by stage, so every rank needs the same stage
    # names: a rank the old job did not have starts every stage at zero.
    mine = old["comm_total"] if rank < len(states) else {}
    every = {name: v for s in states for name, v in s["comm_total"].items()}
    state["comm_total"] = {name: list(mine.get(name, [0] * len(v))) for name, v in every.items()}
    state["generators"] = None
    # the steps' own per-rank state (historical tables) is rebuilt from every rank's
    state["extra"], state["extras"] = {}, [s.get("extra") or {} for s in states]
    partial = dict(first.get("partial") or {})
    if partial:
        for name in _SUMS:
            partial[name] = sum(s["partial"][name] for s in states) if rank == 0 else 0
    state["partial"] = partial
    state["resharded_from"] = len(states)
    return state


_DAMAGED = "delete this checkpoint folder to resume from the one before it"


def read_checkpoint_meta(path: Path) -> dict[str, Any]:
    """The ``meta.json`` of checkpoint folder ``path``, checked for the keys resuming reads."""
    meta_path = Path(path) / "meta.json"
    meta = read_directory_meta(path, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, _DAMAGED)
    if not (
        isinstance(meta.get("epoch"), int)
        and isinstance(meta.get("world_size"), int)
        and isinstance(meta.get("config"), dict)
    ):
        raise DatasetError(
            "is not a shardgnn checkpoint's meta.json (epoch, world_size, config)",
            meta_path,
            _DAMAGED,
        )
    return meta


def _resumable(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE_CHANGES)


def check_resumable(
    path: Path,
    meta: dict[str, Any],
    config: dict[str, Any],
    dataset: dict[str, Any] | None,
) -> None:
    """Refuse to resume checkpoint ``path`` (its ``meta``) with this run's ``config`` and dataset
    unless they match: only where and how the run executes may change (``RESUMABLE_CHANGES``),
    ``--epochs`` and the workers among them.

    Raises:
        ConfigError: naming what differs and what to do.
    """
    check_same_graph(
        meta.get("dataset"),
        dataset,
        expected_from=str(path),
        actual_from="this run's dataset",
        fix="resume on the graph it was trained on, or use another --checkpoint-dir",
    )
    # Compare as JSON sees both (tuples become lists).
    old = _flatten(moved_settings(meta.get("config", {})))
    new = _flatten(json.loads(json.dumps(config)))
    changed = sorted(
        k for k in set(old) | set(new) if old.get(k) != new.get(k) and not _resumable(k)
    )
    if changed:
        detail = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:6])
        raise ConfigError(
            f"{path} was written with another configuration ({detail}); resume with the same flags "
            "(only --epochs may grow) or use another --checkpoint-dir"
        )
