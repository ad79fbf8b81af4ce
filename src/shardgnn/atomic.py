"""Atomic file output: nothing shardgnn writes is ever seen half-written.

Every writer goes to a temporary file in the destination folder, flushes and fsyncs it, then
``os.replace``-s it over the final name (atomic on POSIX). Directories are built under a
temporary name and renamed into place the same way.

Permissions follow the umask, as a plain ``open`` would give them (``tempfile`` creates files
0600 and folders 0700): on a shared file system other users and machines may need to read a
partition or a results file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np


def _umask() -> int:
    """The process's umask (read without changing it where /proc allows)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, hence the /proc route)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[Any]:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary sibling of ``path`` (same suffix) for a writer that takes a file name rather
    than a file object; renamed over ``path`` when the block succeeds, removed when it fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # the writer may have replaced the file
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write ``array`` as ``.npy`` atomically (never with pickled objects)."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise TypeError(f"refusing to write an object array to {path}: shardgnn never pickles data")
    with atomic_open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)


def save_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically."""
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=False)
        fh.write("\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces ``path`` as a whole."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} already exists; pass overwrite=True (or --overwrite) to replace it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        _fsync_dir(tmp)
        if path.exists():
            # Move the old copy aside first so that `path` always names a complete directory.
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.rmdir(old)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_output_path(path: str | os.PathLike, flag: str, *, folder: bool) -> None:
    """Refuse, before any work, an output path that cannot be written: a file path naming a
    folder (or ending in ``/``), a folder path naming a file, or a location under a file or a
    folder this process cannot write or create anything in (tried: a folder made and removed).

    Raises:
        ConfigError: one line naming ``flag``, the path, the problem and the fix.
    """
    from shardgnn.errors import ConfigError

    text = os.fspath(path)
    what = "a folder" if folder else "a file"
    if not text.strip():  # Path("") is the working folder
        raise ConfigError(f"{flag} {text!r}: is empty; give {what}")
    target = Path(text).expanduser()
    if not folder and (text.endswith(os.sep) or target.is_dir()):
        raise ConfigError(
            f"{flag} {text}: names a folder, and it takes a file; give a file name, e.g. "
            f"{flag} {target / 'results.json'}"
        )
    if folder and target.exists() and not target.is_dir():
        raise ConfigError(f"{flag} {text}: is a file, and it takes {what}; give a folder")
    existing = target if folder and target.exists() else target.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{flag} {text}: {existing} is a file, so nothing can be written under it"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {text}: {existing} is not writable by this user; choose another")
    try:  # the permission bits do not tell all (a kernel file system, a full inode table)
        os.rmdir(tempfile.mkdtemp(prefix=".shardgnn-probe-", dir=existing))
    except OSError as exc:
        raise ConfigError(
            f"{flag} {text}: nothing can be created in {existing} ({exc.strerror}); choose another"
        ) from None
