"""The `psdlab` console script: builds the argument parser from psdlab.commands and turns
errors into one-line messages (exit code 2) instead of tracebacks."""
from __future__ import annotations

import argparse
import importlib
import sys

from psdlab import __version__
from psdlab.commands import COMMANDS


class UsageError(Exception):
    """Raised by a command for bad input it detects itself; printed as one line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _one_line_warnings(args.command)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"psdlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, UsageError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if (isinstance(exc, (FileNotFoundError, IsADirectoryError, PermissionError))
                and exc.filename):
            message = f"{exc.strerror}: {exc.filename}"
        print(f"psdlab {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
