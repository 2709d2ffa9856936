"""The `psdlab` console script: builds the argument parser from psdlab.commands and turns
errors into one-line messages (exit code 2) instead of tracebacks."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from psdlab import __version__
from psdlab.commands import COMMANDS


class UsageError(Exception):
    """Raised by a command for bad input it detects itself; printed as one line."""


class _ArgumentError(Exception):
    """An argparse error, raised by ``_Parser.error`` so ``main`` prints it as one line."""

    def __init__(self, prog: str, message: str):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``psdlab SUBCMD: error: ...`` (exit code
    2), without the usage block; its subparsers are of this class too."""

    def error(self, message: str):
        raise _ArgumentError(self.prog, " ".join(str(message).split()))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="psdlab",
        description="Batch-parallel speculative decoding: theory, simulation, real runs, "
                    "validation.")
    parser.add_argument("--version", action="version", version=f"psdlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"psdlab.commands.{name.replace('-', '_')}")
        module.register(sub)
    return parser


def _one_line_warnings(command: str) -> None:
    """Print warnings as ``psdlab CMD: warning: message`` (one line, no source line)."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split("\n"))
        print(f"psdlab {command}: warning: {text}", file=file or sys.stderr)
    warnings.showwarning = show


def _option_of(parser: argparse.ArgumentParser, args: argparse.Namespace,
               filename: str) -> str | None:
    """The option whose path the failing ``filename`` is, e.g. ``--trace`` for
    ``afile/t.jsonl``: that path itself first, else a path through it (``afile`` for ``-o
    afile/x``), a file inside it, or the temporary file beside it that an atomic write makes
    (``.p.csv.123.tmp``); None when no option names it."""
    target = os.path.abspath(filename)
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    actions = sub.choices[args.command]._actions if sub and args.command in sub.choices else []
    paths = []
    for action in actions:
        value = getattr(args, action.dest, None)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, (str, os.PathLike)) and os.fspath(v):
                name = max(action.option_strings, key=len, default=None) or (
                    action.metavar if isinstance(action.metavar, str) else action.dest.upper())
                paths.append((os.path.abspath(os.fspath(v)), name))
    rules = (lambda p: p == target,
             lambda p: p.startswith(target + os.sep),
             lambda p: (os.path.dirname(p) == os.path.dirname(target)
                        and os.path.basename(target).startswith(
                            (os.path.basename(p) + ".", "." + os.path.basename(p)))),
             lambda p: target.startswith(p + os.sep))
    for rule in rules:
        for path, name in paths:
            if rule(path):
                return name
    return None


def _os_message(parser: argparse.ArgumentParser, args: argparse.Namespace,
                exc: OSError) -> str:
    """An OSError on a path as one line naming the option: ``--trace: Not a directory:
    afile/t.jsonl`` (a folder that cannot be made because a file has its name is said so)."""
    if not exc.filename:
        return " ".join(str(exc).split()) or type(exc).__name__
    filename = os.fspath(exc.filename)
    why = exc.strerror or type(exc).__name__
    if isinstance(exc, FileExistsError) and os.path.isfile(filename):
        why = "Not a directory (a file has its name)"
    option = _option_of(parser, args, filename)
    return f"{option}: {why}: {filename}" if option else f"{why}: {filename}"


def _command_of(argv: list[str] | None) -> str | None:
    """The subcommand named in ``argv`` (for errors the top-level parser reports)."""
    return next((a for a in (sys.argv[1:] if argv is None else argv) if a in COMMANDS), None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as exc:
        command = _command_of(argv)
        prog = f"psdlab {command}" if exc.prog == "psdlab" and command else exc.prog
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _one_line_warnings(args.command)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"psdlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:             # the reader went away (`psdlab ... | head`): quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"psdlab {args.command}: error: {_os_message(parser, args, exc)}", file=sys.stderr)
        return 2
    except (ValueError, UsageError, _ArgumentError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"psdlab {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
