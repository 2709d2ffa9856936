"""Typed field access for the readers: integers, numbers, strings and lists out of CSV cells
and JSON values, each failure a one-line :class:`~.errors.FormatError` naming file, line and
field; and token counting for formats that carry prompt text."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import fail, shown
from .parsing import PathLike

#: turns a prompt into tokens (a sequence) or a token count; None counts whitespace words
Tokenizer = Callable[[str], "Sequence[Any] | int"]


class Field:
    """The location of one value, so conversions can say where a bad value is."""

    def __init__(self, path: PathLike, line: int | None, name: str) -> None:
        self.path, self.line, self.name = path, line, name

    def error(self, message: str) -> Exception:
        return fail(self.path, message, line=self.line, field=self.name)


def to_int(value: Any, at: Field, *, minimum: int | None = 0) -> int:
    """An integer from a CSV cell or JSON value ("12" and 12.0 count; "12.5" and "abc" do
    not); below ``minimum`` is an error."""
    if isinstance(value, bool):
        raise at.error(f"not an integer ({shown(value)})")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        out = int(value)
    elif isinstance(value, str):
        try:
            out = int(value.strip())
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                raise at.error(f"not an integer ({shown(value)})") from None
            if not (math.isfinite(f) and f.is_integer()):
                raise at.error(f"not an integer ({shown(value)})") from None
            out = int(f)
    else:
        raise at.error(f"not an integer ({shown(value)})")
    if minimum is not None and out < minimum:
        raise at.error(f"must be >= {minimum} ({out})")
    return out


def to_float(value: Any, at: Field, *, minimum: float | None = None,
             allow_inf: bool = False) -> float:
    """A finite number (inf too with ``allow_inf``) from a CSV cell or JSON value."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise at.error(f"not a number ({shown(value)})")
    try:
        out = float(value)
    except ValueError:
        raise at.error(f"not a number ({shown(value)})") from None
    if math.isnan(out) or (math.isinf(out) and not allow_inf):
        raise at.error(f"not a finite number ({shown(value)})")
    if minimum is not None and out < minimum:
        raise at.error(f"must be >= {minimum:g} ({out:g})")
    return out


def get(obj: Mapping[str, Any], key: str, path: PathLike, line: int | None,
        *, found: str = "keys") -> Any:
    """``obj[key]``; a missing key names the key and the keys found."""
    if key not in obj:
        keys = ", ".join(sorted(obj)[:12]) + (", ..." if len(obj) > 12 else "")
        raise fail(path, f"missing (the {found} found: {keys})", line=line, field=key)
    return obj[key]


def opt_int(obj: Mapping[str, Any], key: str, path: PathLike,
            line: int | None) -> int | None:
    value = obj.get(key)
    return None if value is None else to_int(value, Field(path, line, key), minimum=None)


def opt_float(obj: Mapping[str, Any], key: str, path: PathLike, line: int | None,
              *, allow_inf: bool = False) -> float | None:
    value = obj.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return to_float(value, Field(path, line, key), allow_inf=allow_inf)


def opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return None if value is None else str(value)


def opt_list(obj: Mapping[str, Any], key: str, path: PathLike,
             line: int | None) -> list[Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise fail(path, f"expected a list, found {type(value).__name__}", line=line,
                   field=key)
    return value


def to_text(value: Any, at: Field) -> str:
    if not isinstance(value, str):
        raise at.error(f"expected text, found {type(value).__name__}")
    return value


def count_tokens(text: str, tokenizer: Tokenizer | None) -> int:
    """Tokens in ``text``: ``tokenizer``'s count when given, else whitespace-separated words."""
    if tokenizer is None:
        return len(text.split())
    out = tokenizer(text)
    return out if isinstance(out, int) else len(out)
