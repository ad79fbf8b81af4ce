"""The README's examples run as written: every ``bash`` block that names a bundled dataset (one the
shared data folder holds) runs, command by command, in a fresh folder, with ``../shared/data``
pointing at that folder and every ``shardgnn train`` at one epoch."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from shardgnn.cli import main
from shardgnn.graph.datasets import known_datasets

from conftest import SHARED_DATA, requires_shared_data

README = Path(__file__).resolve().parents[1] / "README.md"
# datasets read from the data folder (not generated, not a path of the user's; OGB's are not in
# the shared copy)
BUNDLED = [
    name
    for name in known_datasets()
    if not name.startswith(("synthetic", "ogbn"))
    and name not in ("file", "graph", "kg", "hetero", "temporal")
]
_NAMES = re.compile(r"(?<![\w:/-])(" + "|".join(map(re.escape, BUNDLED)) + r")(?![\w-])")


def bundled_blocks() -> list[tuple[int, list[str]]]:
    """``(line, commands)`` of every README bash block naming a bundled dataset; a command is one
    logical line (continuations joined, trailing comments dropped)."""
    text = README.read_text()
    blocks = []
    for match in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
        body = match.group(1).replace("\\\n", " ")
        commands = [re.sub(r"\s+#.*$", "", line).strip() for line in body.splitlines()]
        commands = [c for c in commands if c and not c.startswith("#")]
        if any(_NAMES.search(c) for c in commands if c.startswith("shardgnn ")):
            blocks.append((text[: match.start()].count("\n") + 1, commands))
    return blocks


def one_epoch(argv: list[str]) -> list[str]:
    """``argv`` with the shared data folder in place of ``../shared/data`` and, for ``train``,
    one epoch."""
    argv = [str(SHARED_DATA) if a.rstrip("/") == "../shared/data" else a for a in argv]
    if argv[0] == "train":
        if "--epochs" in argv:
            argv[argv.index("--epochs") + 1] = "1"
        else:
            argv += ["--epochs", "1"]
        argv.append("--quiet")
    return argv


def test_the_blocks_are_found():
    found = bundled_blocks()
    assert len(found) >= 10
    named = {m for _, commands in found for c in commands for m in _NAMES.findall(c)}
    assert {"cora", "amazon-computers", "soc-slashdot", "kg-umls", "collegemsg"} <= named


@pytest.mark.slow
@requires_shared_data
@pytest.mark.parametrize(
    "line, commands", bundled_blocks(), ids=[f"line{line}" for line, _ in bundled_blocks()]
)
def test_readme_block_runs_as_written(line, commands, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in commands:
        if command.startswith("shardgnn "):
            argv = one_epoch(shlex.split(command)[1:])
            assert main(argv) == 0, f"README line {line}: {command}"
        else:  # a shell line that makes an input (printf ... > pairs.txt)
            subprocess.run(["bash", "-c", command], check=True, cwd=tmp_path, timeout=60)
