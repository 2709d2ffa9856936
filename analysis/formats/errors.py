"""The one error and the one warning every foreign-format reader raises.

Every reader in ``psdlab.analysis.formats`` reports bad input as a :class:`FormatError` whose
message is a single line naming the file, the line (where there is one) and the field, e.g.
``trace.csv line 7: field 'ContextTokens': not an integer ('abc')``.  A line-oriented file whose
last line was cut short (a writer that crashed mid-line) is read up to that line and reported
once with a :class:`TruncatedInputWarning`.
"""
from __future__ import annotations

import os
import warnings


class FormatError(ValueError):
    """Input that does not follow its format; the message is one line: file, line, field."""


class TruncatedInputWarning(UserWarning):
    """The last line of a file was cut short and was skipped."""


def where(path: str | os.PathLike[str], line: int | None = None,
          field: str | None = None) -> str:
    """The ``file[ line N][: field 'X']`` prefix of a message."""
    text = os.fspath(path)
    if line is not None:
        text += f" line {line}"
    if field is not None:
        text += f": field '{field}'"
    return text


def fail(path: str | os.PathLike[str], message: str, *, line: int | None = None,
         field: str | None = None) -> FormatError:
    """A :class:`FormatError` for ``message`` at ``path``/``line``/``field`` (returned, so
    callers write ``raise fail(...)``).  Newlines in ``message`` are folded to keep it one
    line."""
    flat = " ".join(message.split("\n"))
    return FormatError(f"{where(path, line, field)}: {flat}")


def shown(value: object, limit: int = 40) -> str:
    """``repr``-like quoting of an offending value, shortened to ``limit`` characters."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text) if isinstance(value, str) else text


def warn_truncated(path: str | os.PathLike[str], line: int, kept: int) -> None:
    """Warn once that ``line`` (the last) of ``path`` was cut short and ``kept`` records before
    it were read."""
    warnings.warn(
        f"{where(path, line)}: last line is cut short (a writer stopped mid-line?); "
        f"read the {kept} record(s) before it",
        TruncatedInputWarning, stacklevel=3)
