"""The ``shardgnn`` command line: ``train``, ``infer``, ``info``, ``convert``, ``partition``,
``verify``, ``plan``, ``plot``.

A thin layer: each command's flags are derived from its config dataclass (:mod:`.flags`), its
handler builds the config, runs, and prints. Every user mistake surfaces as one
``shardgnn COMMAND: error: ...`` line and exit code 2, never a traceback, whether it happened in
this process or in a worker (then the line names the rank and the next line the log with the
full traceback).
"""

from __future__ import annotations

import argparse
import re
import sys

from shardgnn import __version__
from shardgnn.cli.config_file import CONFIG_FLAG, expand_config_file
from shardgnn.cli.flags import warning_lines
from shardgnn.errors import REQUEUE_EXIT_CODE, OutOfMemory, Preempted, ShardgnnError
from shardgnn.options import choice_hint


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line: a command's usage runs to dozens of lines, and a user
    who mistyped one flag needs the message, not all of them (``--help`` still shows it).

    Abbreviated flags are refused (``--epoch`` for ``--epochs``): with ~100 flags, a typo
    accepted as a prefix could land on a neighbouring flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # "-1,-1" (every neighbour, per layer) is a value, not a flag: argparse's own pattern
        # knows single negative numbers only, and `--eval-fanouts -1,-1` failed with
        # "expected one argument"
        self._negative_number_matcher = re.compile(r"^-\d+(,-?\d+)*$|^-\d*\.\d+$")

    flag_commands: dict[str, tuple[str, ...]] = {}
    """Each known flag and the commands that take it."""
    positional_commands: dict[str, tuple[str, ...]] = {}
    """``--NAME`` for each argument given without a flag (``--dataset``), and the commands
    that take it so."""

    commands: tuple[str, ...] = ()
    """The commands (``train``, ``infer``...)."""
    command_given: str | None = None
    """The command the line names (set by :func:`main` before parsing)."""

    def _choice_hint(self, message: str) -> str:
        """argparse's refusal of a value outside a flag's choices, with :func:`choice_hint`'s
        `` (did you mean --spmm 1.5d?)`` (the flag's setting names its other spellings)."""
        found = re.match(r"argument (\S+?)(?:/\S+)?: invalid choice: (.*) \(choose from", message)
        action = None if found is None else self._option_string_actions.get(found.group(1))
        if action is None or action.choices is None:
            return ""
        value = found.group(2).strip("'")
        return choice_hint(
            action.option_strings[0], value, action.choices, getattr(action, "also_called", None)
        )

    def error(self, message: str):  # type: ignore[override]
        command = self.command_given
        notes = {  # only where this command takes it so (infer reads its checkpoint's)
            flag: f"the {flag[2:]} is given without a flag: `shardgnn {command} "
            f"{flag[2:].upper()} ...`"
            for flag, commands in self.positional_commands.items()
            if command in commands
        }
        notes.update(SPELLED_OTHERWISE.get(command, {}))
        hint = _closest_flags(message, self.flag_commands, command, notes) or self._choice_hint(
            message
        )
        # the top parser reports a subcommand's unknown flags: name that command
        prog = self.prog
        if command in self.commands:
            prog = f"{prog} {command}"
        self.exit(2, f"{prog}: error: {message}{hint}\n  (`{prog} --help` lists the flags)\n")


_CHECKPOINT_DIR = (
    "{command} reads --checkpoint DIR: the folder `shardgnn train --checkpoint-dir` wrote (its "
    "latest checkpoint) or one epoch-N folder in it"
)
SPELLED_OTHERWISE = {
    "infer": {
        "--dataset": "the graph is the checkpoint's dataset, or --partitions DIR",
        "--checkpoint-dir": _CHECKPOINT_DIR.format(command="infer"),
    },
    "export": {
        "--dataset": "the model is read from --checkpoint; the served graph comes with each call",
        "--checkpoint-dir": _CHECKPOINT_DIR.format(command="export"),
    },
}
"""Per command, flags of other commands a user may bring to it, and what the command takes
instead: where the commands without a DATASET argument take their graph from, and train's
``--checkpoint-dir`` for the commands that read a checkpoint."""


def _closest_flags(
    message: str,
    flag_commands: dict[str, tuple[str, ...]],
    command: str | None,
    notes: dict[str, str] | None = None,
) -> str:
    """`` (did you mean --epochs?)`` for each unrecognised flag with a close one that
    ``command`` takes (any command's when none is named),
    `` (--out is a flag of `shardgnn infer`)`` for one that another command takes, and the
    ``notes`` of flags that are meant otherwise (``--dataset``, as DGL's and GraphStorm's
    scripts spell it: `` (the dataset is given without a flag: ...)``)."""
    import difflib

    if not message.startswith("unrecognized arguments:"):
        return ""
    hints, elsewhere = [], []
    for word in message.split(":", 1)[1].split():
        name = word.split("=", 1)[0]
        if not name.startswith("--"):
            continue
        if name in (notes or {}):
            elsewhere.append(notes[name])
            continue
        if name in flag_commands:
            commands = " / ".join(f"`shardgnn {c}`" for c in flag_commands[name])
            elsewhere.append(f"{name} is a flag of {commands}")
            continue
        # only this command's own: train's --bases was told "did you mean --base" (convert's)
        own = [f for f, commands in flag_commands.items() if command in (None, *commands)]
        close = difflib.get_close_matches(name, own, n=1, cutoff=0.6)
        hints += [f"{close[0]} for {name}"] if close else []
    text = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return text + (f" ({'; '.join(elsewhere)})" if elsewhere else "")


def _unknown_flags(
    argv: list[str], commands: tuple[str, ...], flag_commands: dict[str, tuple[str, ...]]
) -> list[str]:
    """The ``--flags`` of a command line naming one of ``commands`` that this command does not
    take (up to a ``--``): named before argparse would report a required flag missing (infer's
    ``--checkpoint`` when ``--checkpoint-dir`` was given)."""
    if not argv or argv[0] not in commands:
        return []
    words = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    return [
        word
        for word in words
        if word.startswith("--")
        and argv[0] not in flag_commands.get(word.split("=", 1)[0], ())
        and word.split("=", 1)[0] != "--help"
    ]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every ``shardgnn`` command (building it imports no heavy module)."""
    from shardgnn.cli import data, export, infer, partition, plan, plot, train

    parser = _Parser(
        prog="shardgnn",
        description=(
            "Train graph neural networks on graphs that outgrow one process, one GPU or one "
            "machine. `shardgnn COMMAND --help` describes each command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"shardgnn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (train, infer, export, data, partition, plan, plot):
        module.add_parsers(sub)
    for command in sub.choices.values():
        command.add_argument(
            CONFIG_FLAG,
            metavar="FILE",
            help="read flags from a TOML, YAML or JSON file (keys: the flags without their "
            "dashes, or [tables] named like the settings); the command line overrides it",
        )
    flag_commands: dict[str, list[str]] = {}
    for name, command in sub.choices.items():
        for flag in command._option_string_actions:
            if flag.startswith("--") and flag != "--help":
                flag_commands.setdefault(flag, []).append(name)
    parser.commands = tuple(sub.choices)
    parser.flag_commands = {flag: tuple(names) for flag, names in sorted(flag_commands.items())}
    positional: dict[str, list[str]] = {}
    for name, command in sub.choices.items():
        for action in command._actions:
            flag = f"--{str(action.metavar or action.dest).lower()}"
            if not action.option_strings and flag not in flag_commands:
                positional.setdefault(flag, []).append(name)
    parser.positional_commands = {flag: tuple(names) for flag, names in positional.items()}
    return parser


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """``argv`` (after ``shardgnn``) parsed as :func:`main` parses it, running nothing: a
    ``--config`` file expanded (:class:`~shardgnn.errors.ShardgnnError` where it is bad), then
    every flag checked (``SystemExit(2)`` after one line on stderr where one is unknown,
    abbreviated or out of its range)."""
    parser = build_parser()
    argv = expand_config_file(argv, parser)
    parser.command_given = argv[0] if argv else None
    unknown = _unknown_flags(argv, parser.commands, parser.flag_commands)
    if unknown:  # before argparse, which would report a missing --parts first
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 a worker crashed, 2 a user error,
    75 stopped by SIGTERM/SIGUSR1 after a checkpoint (requeue), 128 + N stopped by signal N
    without one, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_command_line(argv)
    except ShardgnnError as exc:
        print(f"shardgnn {argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    try:
        with warning_lines(args.command):
            return args.handler(args)
    except ShardgnnError as exc:
        print(f"shardgnn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Preempted as exc:
        print(f"shardgnn {args.command}: {exc}", file=sys.stderr)
        return REQUEUE_EXIT_CODE
    except (MemoryError, RuntimeError) as exc:
        from shardgnn.distributed.launch import (
            WorkerFailedError,
            WorkerPreemptedError,
            WorkerStoppedError,
        )

        if not isinstance(exc, WorkerFailedError):
            from shardgnn.distributed.oom import memory_limit_hint

            memory = OutOfMemory.from_allocation(exc, memory_limit_hint())
            if memory is None:
                raise
            print(f"shardgnn {args.command}: error: {memory}", file=sys.stderr)
            return 2
        print(exc.summary(args.command), file=sys.stderr)
        if isinstance(exc, WorkerPreemptedError):
            return REQUEUE_EXIT_CODE
        if isinstance(exc, WorkerStoppedError):
            return 128 + exc.signum
        return 2 if exc.user_error else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def cli() -> None:
    """The ``shardgnn`` command (its console script, ``python -m shardgnn``): :func:`main`, then
    the process ends with its status as at an interpreter's exit (other threads waited for,
    ``atexit`` hooks run, output flushed) but without the interpreter's teardown, which took
    0.4-0.7 s after every command that had imported torch (:func:`shardgnn.exiting.end_process`).
    A ``SystemExit`` (``--help``, a flag argparse refuses) or an exception :func:`main` does not
    handle ends the process as before. Output cut short by its reader (``shardgnn info ... |
    head``) ends it quietly with status 141, as a shell reports a process SIGPIPE ended."""
    import os

    from shardgnn.exiting import end_process

    try:
        code = main()
    except BrokenPipeError:
        # what is still buffered for the closed pipe would fail again at the flush: drop it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + 13  # SIGPIPE
    end_process(code, join_threads=True, run_exit_hooks=True)


if __name__ == "__main__":
    cli()
