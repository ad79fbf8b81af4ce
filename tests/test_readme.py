"""The README's examples run as written: every ``bash`` block that names a bundled dataset (one the
shared data folder holds) runs, command by command, in a fresh folder, with ``../shared/data``
pointing at that folder and every ``shardgnn train`` at one epoch. And every ``shardgnn`` command
of README.md's and BENCHMARKS.md's ``bash`` blocks, whatever its data, parses as written."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from shardgnn.cli import main
from shardgnn.errors import ShardgnnError
from shardgnn.graph.datasets import known_datasets

from conftest import SHARED_DATA, requires_shared_data

README = Path(__file__).resolve().parents[1] / "README.md"
BENCHMARKS = README.with_name("BENCHMARKS.md")
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
    # a block of commands without its language is skipped by the checks below: none may hide
    for doc in (README, BENCHMARKS):
        text = doc.read_text()
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            line = text[: match.start()].count("\n") + 1
            command = re.match(r"shardgnn [a-z]+\b(?!:)", match.group(2))  # not its output
            unlabelled = not match.group(1) and command
            assert not unlabelled, f"{doc.name}:{line}: label the block bash"


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


_SHELL_OPERATORS = {";", "&&", "||", "|", ">", ">>", "&", "<"}


def shardgnn_commands(doc: Path) -> list[tuple[int, list[str]]]:
    """``(line, argv after "shardgnn")`` of every ``shardgnn`` command in ``doc``'s ``bash``
    blocks (continuations joined, comments and redirections dropped, ``a && b`` two commands,
    ``python -m shardgnn`` and ``srun shardgnn`` too, not a flag's value ``--launcher
    shardgnn``), but those holding a shell variable, an elision (``...``, ``[--flag]``) or a
    placeholder (``SPEC``, ``METHOD``): they do not parse as written."""
    text = doc.read_text()
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if match.group(1) != "bash":
            continue
        line = text[: match.start()].count("\n") + 1
        for source in match.group(2).replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(source, posix=True, punctuation_chars=";&|<>")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words: list[str] = []
            for word in [*lexer, ";"]:
                if word not in _SHELL_OPERATORS:
                    words.append(word)
                    continue
                at = words.index("shardgnn") if "shardgnn" in words else -1
                argv = words[at + 1 :]
                if (
                    at >= 0
                    and not (at and words[at - 1].startswith("-"))
                    and not any(
                        "$" in a or "..." in a or a.startswith("[") or re.fullmatch(r"[A-Z]{3,}", a)
                        for a in argv
                    )
                ):
                    found.append((line, argv))
                words = []
    return found


def test_every_documented_command_parses_and_train_builds_its_config(capsys):
    """A flag renamed or removed, a choice gone, an abbreviation or a combination the recipe
    refuses breaks a documented command without a bundled dataset too: each one parses as
    `shardgnn` would parse it, and each ``train`` that names no partition directory (one made
    by an earlier command) builds its config, recipe checks and all (no data read), and with
    workers passes what a local launch refuses before partitioning (a cache or `--fetch-bits`
    with nothing to act on)."""
    from shardgnn.cli import parse_command_line
    from shardgnn.cli.train import refuse_what_one_host_skips, train_config

    commands = [(doc.name, *c) for doc in (README, BENCHMARKS) for c in shardgnn_commands(doc)]
    assert len(commands) >= 100  # the finder still finds them
    failed = []
    for doc, line, argv in commands:
        try:
            args = parse_command_line(argv)
            if argv[0] == "train" and "--partitions" not in argv:
                config = train_config(args)
                if config.run.distributed:  # a local launch: every worker on this machine
                    refuse_what_one_host_skips(config)
        except (SystemExit, ShardgnnError) as exc:
            said = capsys.readouterr().err.strip() or str(exc)
            failed.append(f"{doc} block at line {line}: shardgnn {shlex.join(argv)}\n  {said}")
    assert not failed, "\n".join(failed)
