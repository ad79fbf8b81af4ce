"""Knowledge-graph triples: ``head<TAB>relation<TAB>tail`` files with a train/valid/test split.

The layout of the standard benchmark graphs (UMLS, Kinships, Nations, FB15k-237, WN18RR): a
folder with ``train.txt``, ``valid.txt`` and ``test.txt``. Entities and relations are numbered in
order of first appearance in ``train.txt``; the held-out files may only name what training saw
(a transductive model has no embedding for anything else), and a line that does not is refused
with its file and line number.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from shardgnn.errors import DatasetError
from shardgnn.graph.typed import TRIPLE_SPLITS, TypedGraph

ENTITY = "entity"
"""The one node type of a knowledge graph read from triples."""


def _read_lines(path: Path) -> list[tuple[int, list[str]]]:
    if not path.is_file():
        raise DatasetError(
            "file is missing",
            path,
            "a triples folder holds train.txt, valid.txt and test.txt (head<TAB>relation<TAB>tail)",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read as UTF-8 text ({exc})", path) from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise DatasetError(
                f"line {number} has {len(fields)} tab-separated field(s): {line[:80]!r}",
                path,
                "write one triple per line as head<TAB>relation<TAB>tail",
            )
        rows.append((number, [f.strip() for f in fields]))
    return rows


def load_kg_triples(folder: str | os.PathLike, name: str | None = None) -> TypedGraph:
    """Read a triples folder into a :class:`TypedGraph` with one node type (``entity``), one
    relation per relation name, the training triples as its edges (head -> tail), and all three
    splits in ``graph.triples``.

    Raises:
        DatasetError: a missing file, a malformed line, or a held-out triple naming an entity or
            relation that ``train.txt`` never mentions.
    """
    folder = Path(folder)
    entity_ids: dict[str, int] = {}
    relation_ids: dict[str, int] = {}
    triples = {}
    for split in TRIPLE_SPLITS:
        path = folder / f"{split}.txt"
        rows = _read_lines(path)
        out = np.empty((len(rows), 3), dtype=np.int64)
        for i, (number, (head, relation, tail)) in enumerate(rows):
            if split == "train":
                h = entity_ids.setdefault(head, len(entity_ids))
                r = relation_ids.setdefault(relation, len(relation_ids))
                t = entity_ids.setdefault(tail, len(entity_ids))
            else:
                if relation not in relation_ids:
                    raise DatasetError(
                        f"line {number}: relation {relation!r} does not occur in train.txt",
                        path,
                        "a model learns only relations it trains on; move a triple of this "
                        "relation into train.txt or drop the line",
                    )
                unknown = [e for e in (head, tail) if e not in entity_ids]
                if unknown:
                    raise DatasetError(
                        f"line {number}: entity {unknown[0]!r} does not occur in train.txt",
                        path,
                        "a transductive model has no embedding for unseen entities; move a "
                        "triple naming it into train.txt or drop the line",
                    )
                h, r, t = entity_ids[head], relation_ids[relation], entity_ids[tail]
            out[i] = (h, r, t)
        triples[split] = out
    if not len(triples["train"]):
        raise DatasetError("train.txt holds no triples", folder / "train.txt")
    train = triples["train"]
    relations = tuple((ENTITY, r, ENTITY) for r in relation_ids)
    return TypedGraph.from_global_edges(
        (ENTITY,),
        np.array([0, len(entity_ids)], dtype=np.int64),
        relations,
        train[:, 0],
        train[:, 2],
        train[:, 1],
        node_names={ENTITY: list(entity_ids)},
        triples=triples,
        name=name or folder.name,
    )
