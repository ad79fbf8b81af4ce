"""Read the pickled parts of public graph datasets without trusting them.

Planetoid's ``ind.*`` files are Python 2 pickles and the gnn-benchmark / GraphGallery ``.npz``
files hold pickled object arrays. ``pickle.load`` on such a file runs whatever callable the file
names, so a tampered download could execute code. :class:`RestrictedUnpickler` resolves only the
globals those files need (found with ``pickletools.dis`` on the real files):

* numpy arrays: ``numpy.ndarray``, ``numpy.dtype``, ``numpy.core.multiarray._reconstruct``,
  ``...multiarray.scalar`` (numpy scalars in object arrays) and ``numpy.core.numeric._frombuffer``
  (protocol 5), under both the numpy 1 (``numpy.core``) and numpy 2 (``numpy._core``) paths;
* scipy sparse CSR/CSC/COO matrices and arrays under the old (``scipy.sparse.csr``) and new
  (``scipy.sparse._csr``) module paths;
* ``collections.defaultdict`` and plain builtin containers/scalars (``list``, ``dict``, ``set``,
  ``frozenset``, ``tuple``, ``int``, ``float``, ``complex``, ``bool``, ``str``, ``bytes``,
  ``bytearray``, ``slice``), also under the Python 2 name ``__builtin__``;
* the two helpers Python 3 pickles of protocols 0-2 use, narrowed to what those protocols need:
  ``_codecs.encode`` (only the ``latin1`` codec, which turns text back into bytes) and
  ``copyreg._reconstructor`` (only for the allowed sparse classes on top of ``object``).

Any other global raises :class:`DatasetError` naming the file and the forbidden global *before*
anything is called.
"""

from __future__ import annotations

import builtins
import collections
import os
import pickle
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import scipy.sparse
from numpy.lib import format as npy_format

from shardgnn.errors import DatasetError
from shardgnn.graph.split import check_finite_features

try:  # numpy >= 2 (numpy 1.26 ships numpy._core as a shim as well)
    from numpy._core.multiarray import _reconstruct
    from numpy._core.multiarray import scalar as _np_scalar
    from numpy._core.numeric import _frombuffer
except ImportError:  # pragma: no cover - numpy < 1.26
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    from numpy.core.multiarray import scalar as _np_scalar
    from numpy.core.numeric import _frombuffer  # type: ignore[no-redef]

# Legacy module names -> the canonical names used in the allow-list below.
_MODULE_ALIASES = {
    "__builtin__": "builtins",
    "copy_reg": "copyreg",
    "numpy.core.multiarray": "numpy._core.multiarray",
    "numpy.core.numeric": "numpy._core.numeric",
    "scipy.sparse.csr": "scipy.sparse._csr",
    "scipy.sparse.csc": "scipy.sparse._csc",
    "scipy.sparse.coo": "scipy.sparse._coo",
}

_SPARSE_CLASSES: dict[str, type] = {
    name: getattr(scipy.sparse, name)
    for name in ("csr_matrix", "csc_matrix", "coo_matrix", "csr_array", "csc_array", "coo_array")
    if hasattr(scipy.sparse, name)
}


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 0-2 pickles use it: ``latin1`` text back to bytes, nothing
    else."""
    if not isinstance(text, str) or encoding.replace("-", "").replace("_", "").lower() != "latin1":
        raise pickle.UnpicklingError(
            f"_codecs.encode is only allowed for str with latin1, got {encoding!r}"
        )
    return text.encode("latin1")


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` limited to the allowed sparse classes on top of ``object``."""
    if base is not object or state is not None or cls not in _SPARSE_CLASSES.values():
        raise pickle.UnpicklingError(
            f"copyreg._reconstructor is only allowed for sparse matrices, got {cls!r}"
        )
    return object.__new__(cls)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "scalar"): _np_scalar,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("collections", "defaultdict"): collections.defaultdict,
    ("_codecs", "encode"): _latin1_encode,
    ("copyreg", "_reconstructor"): _reconstructor,
    ("builtins", "object"): object,  # only usable as the base of copyreg._reconstructor
}
for _name in (
    "list",
    "dict",
    "set",
    "frozenset",
    "tuple",
    "int",
    "float",
    "complex",
    "bool",
    "str",
    "bytes",
    "bytearray",
    "slice",
):
    _ALLOWED[("builtins", _name)] = getattr(builtins, _name)
for _name, _cls in _SPARSE_CLASSES.items():
    _ALLOWED[(f"scipy.sparse._{_name[:3]}", _name)] = _cls
    _ALLOWED[("scipy.sparse", _name)] = _cls
del _name, _cls

# Everything a corrupt or truncated pickle can make the unpickler raise.
_PICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    UnicodeDecodeError,
    OverflowError,
    MemoryError,
    ImportError,
)


def allowed_globals() -> list[str]:
    """The ``module.name`` globals the restricted unpickler admits (canonical module names)."""
    return sorted(f"{module}.{name}" for module, name in _ALLOWED)


class RestrictedUnpickler(pickle.Unpickler):
    """A :class:`pickle.Unpickler` that resolves only the allow-listed dataset globals."""

    def __init__(self, file: BinaryIO, source_name: str | os.PathLike, encoding: str = "latin1"):
        super().__init__(file, encoding=encoding, fix_imports=False)
        self.source_name = os.fspath(source_name)

    def find_class(self, module: str, name: str) -> Any:
        canonical = _MODULE_ALIASES.get(module, module)
        try:
            return _ALLOWED[(canonical, name)]
        except KeyError:
            raise DatasetError(
                f"refusing to unpickle forbidden global {module}.{name} (only numpy arrays, scipy "
                "sparse matrices and builtin containers are allowed)",
                self.source_name,
                "the file is not a genuine dataset file (or was tampered with); re-download it "
                "from the original source",
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise DatasetError(
            f"refusing persistent id {pid!r} in a pickle",
            self.source_name,
            "the file is not a genuine dataset file; re-download it",
        )


def _unpickle(fh: BinaryIO, source_name: str | os.PathLike, encoding: str) -> Any:
    try:
        return RestrictedUnpickler(fh, source_name, encoding=encoding).load()
    except DatasetError:
        raise
    except _PICKLE_ERRORS as exc:
        raise DatasetError(
            f"not a readable pickle ({type(exc).__name__}: {exc})",
            source_name,
            "the file is truncated or corrupt; re-download it",
        ) from None


def safe_load(
    fileobj_or_path: str | os.PathLike | BinaryIO,
    source_name: str | os.PathLike | None = None,
    encoding: str = "latin1",
) -> Any:
    """Unpickle one object with :class:`RestrictedUnpickler`.

    Args:
        fileobj_or_path: a path, or a binary file object positioned at the pickle.
        source_name: the name used in error messages (defaults to the path).
        encoding: how Python 2 ``str`` objects are decoded (``latin1`` keeps numpy buffers intact).

    Raises:
        DatasetError: the file is missing, truncated, corrupt or names a forbidden global.
    """
    if isinstance(fileobj_or_path, (str, os.PathLike)):
        path = Path(fileobj_or_path)
        source = source_name if source_name is not None else path
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            raise DatasetError("file is missing", source) from None
        except OSError as exc:
            raise DatasetError(f"cannot read ({exc})", source) from None
        with fh:
            return _unpickle(fh, source, encoding)
    return _unpickle(
        fileobj_or_path, source_name if source_name is not None else "<pickle>", encoding
    )


def check_sparse(obj: Any, source: str | os.PathLike, what: str) -> None:
    """Validate the structure of an unpickled (or loaded) scipy sparse matrix.

    Unpickling restores a matrix's arrays without scipy's constructor checks, and scipy's C
    kernels trust them: a corrupt ``indices`` or ``indptr`` makes ``toarray()`` or ``tocoo()``
    read out of bounds and crash the process (found by fuzzing). So the structure is checked
    first: CSR/CSC/BSR with scipy's full check, COO by its coordinate ranges.

    Raises:
        DatasetError: the matrix is inconsistent or of an unsupported format.
    """
    try:
        shape = tuple(int(v) for v in obj.shape)
        if len(shape) != 2 or min(shape) < 0:
            raise ValueError(f"shape {shape} is not a 2-D shape")
        if obj.format in ("csr", "csc", "bsr"):
            obj.check_format(full_check=True)
        elif obj.format == "coo":
            row, col, data = (np.asarray(a) for a in (obj.row, obj.col, obj.data))
            if not row.shape == col.shape == data.shape or row.ndim != 1:
                raise ValueError("row, col and data differ in length")
            if row.size and (
                row.min() < 0 or row.max() >= shape[0] or col.min() < 0 or col.max() >= shape[1]
            ):
                raise ValueError("coordinates out of range")
        else:
            raise ValueError(
                f"unsupported sparse format {obj.format!r} (expected csr, csc, bsr or coo)"
            )
    except (ValueError, TypeError, AttributeError, IndexError, OverflowError) as exc:
        raise DatasetError(
            f"the {what} matrix is corrupt ({exc})",
            source,
            "the file is corrupt or not this dataset; re-download it",
        ) from None


def dense_float32(
    obj: Any, source: str | os.PathLike, what: str = "feature", nonfinite: str | None = "error"
) -> np.ndarray:
    """An unpickled scipy sparse matrix or numeric 2-D array as a dense float32 array.

    With ``nonfinite`` set, NaN/inf values are handled by
    :func:`~shardgnn.graph.split.check_finite_features` (for sparse input only when the stored
    values hold any, so the check costs nothing on clean data).

    Raises: DatasetError: ``obj`` is not a 2-D numeric matrix, or holds non-finite values under
        ``"error"``.
    """
    if scipy.sparse.issparse(obj) and obj.ndim == 2 and obj.dtype.kind in "biuf":
        check_sparse(obj, source, what)
        dense = np.asarray(obj.astype(np.float32, copy=False).toarray())
        clean = np.isfinite(obj.data).all()
    elif isinstance(obj, np.ndarray) and obj.ndim == 2 and obj.dtype.kind in "biuf":
        dense = obj.astype(np.float32)
        clean = False
    else:
        raise DatasetError(
            f"expected a 2-D numeric {what} matrix, found {type(obj).__name__} "
            f"{getattr(obj, 'shape', '')} {getattr(obj, 'dtype', '')}",
            source,
            "the file is corrupt or not this dataset; re-download it",
        )
    if nonfinite is not None and not clean:
        dense = check_finite_features(dense, source, nonfinite)
    return dense


def _read_npy_member(archive: zipfile.ZipFile, member: str, source: str) -> Any:
    """One ``.npy`` member: plain arrays without pickle, object arrays through the restricted
    unpickler."""
    with archive.open(member) as fh:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy_format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
        if dtype.hasobject:
            array = _unpickle(fh, source, "latin1")
            if not isinstance(array, np.ndarray) or array.shape != tuple(shape):
                raise DatasetError(
                    f"member {member} does not hold the {shape} object array its header declares",
                    source,
                    "the file is corrupt; re-download it",
                )
            return array.item() if array.ndim == 0 else array
    with archive.open(member) as fh:  # re-open: read_array parses the header itself
        return npy_format.read_array(fh, allow_pickle=False)


def load_npz_safely(path: str | os.PathLike) -> dict[str, Any]:
    """Read every array of an ``.npz`` archive without ever running untrusted pickle code.

    Members with a plain dtype are read like ``np.load(..., allow_pickle=False)``. Members with an
    object dtype are unpickled with :class:`RestrictedUnpickler`; a 0-d object array (how
    ``np.savez`` stores a single scipy matrix or dict) is unwrapped to the object it holds, other
    object arrays are returned as arrays. Keys are the member names without ``.npy``.

    Raises: DatasetError: the file is missing, not a zip archive, truncated, or holds a forbidden
        global.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError("file is missing", path)
    source = os.fspath(path)
    out: dict[str, Any] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                key = member[: -len(".npy")]
                try:
                    out[key] = _read_npy_member(archive, member, source)
                except DatasetError:
                    raise
                except (
                    ValueError,
                    EOFError,
                    OSError,
                    zipfile.BadZipFile,
                    OverflowError,
                    SyntaxError,
                    # damaged .npy header
                    NotImplementedError,
                    zlib.error,
                    tokenize.TokenError,
                ) as exc:
                    raise DatasetError(
                        f"member {member} is not a readable .npy array ({exc})",
                        path,
                        "the file is truncated or corrupt; re-download it",
                    ) from None
    except DatasetError:
        raise
    except (
        zipfile.BadZipFile,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,
        zlib.error,
    ) as exc:
        raise DatasetError(
            f"not a readable .npz archive ({type(exc).__name__}: {exc})",
            path,
            "the file is truncated or corrupt; re-download it",
        ) from None
    return out


__all__ = [
    "RestrictedUnpickler",
    "allowed_globals",
    "dense_float32",
    "load_npz_safely",
    "safe_load",
]
