"""Argument validation shared by every layer: one-line ValueErrors that name the field and the
allowed range, so the CLI can print them as they are."""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_finite(name: str, value: Any) -> float:
    """Return value as float; reject non-numbers, NaN and infinities."""
    if not _is_number(value) and not hasattr(value, "__float__"):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    x = float(value)
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{name}: must be a finite number, got {value!r}")
    return x


def check_positive(name: str, value: Any) -> float:
    x = check_finite(name, value)
    if x <= 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return x


def check_nonnegative(name: str, value: Any) -> float:
    x = check_finite(name, value)
    if x < 0:
        raise ValueError(f"{name}: must be >= 0, got {value!r}")
    return x


def check_range(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
                hi_open: bool = False) -> float:
    """Check lo <= value <= hi (or open ends); the message shows the interval."""
    x = check_finite(name, value)
    ok_lo = x > lo if lo_open else x >= lo
    ok_hi = x < hi if hi_open else x <= hi
    if not (ok_lo and ok_hi):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name}: must be in {interval}, got {value!r}")
    return x


def check_int(name: str, value: Any, minimum: int | None = None,
              maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
            _is_number(value) and float(value).is_integer()):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    n = int(value)
    if minimum is not None and n < minimum:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")
    if maximum is not None and n > maximum:
        bound = f"<= {maximum}" if minimum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: must be {bound}, got {value!r}")
    return n


def check_choice(name: str, value: Any, choices) -> Any:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


#: what a field of each Python type accepts from a config table, and how the error says it
_KINDS: dict[type, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"), int: ((int,), "an integer"),
    float: ((int, float), "a number"), str: ((str,), "a string"),
    list: ((list, tuple), "a list"), tuple: ((list, tuple), "a list"),
    dict: ((dict,), "a table")}


def _kind_error(value: Any, kinds: tuple[type, ...]) -> str | None:
    """Why ``value`` is none of ``kinds`` (None: it is one); a bool is not a number."""
    accepted = [t for t in kinds if t in _KINDS]
    if not accepted or value is None and type(None) in kinds:
        return None
    for t in accepted:
        ok, _ = _KINDS[t]
        if isinstance(value, ok) and not (isinstance(value, bool) and bool not in kinds):
            return None
    what = " or ".join(dict.fromkeys(_KINDS[t][1] for t in accepted))
    got = f"the string {value!r}" if isinstance(value, str) else repr(value)
    return f"expected {what}, got {got}"


def check_fields(table: Mapping[str, Any], where: str, required: Sequence[str] = (),
                 optional: Sequence[str] = (), *, named: bool = True,
                 types: Mapping[str, type | tuple[type, ...]] | None = None) -> None:
    """A config table's fields, the one rule every table is checked by: an unknown field or a
    missing required one is a one-line error ``WHERE.FIELD: ...`` that lists the allowed fields
    (``where = ""``: a top-level table, ``FIELD: ...``).
    ``named``: a registry-chosen table (cost, acceptance, workload, length models), whose
    ``name`` is always allowed and named in the message.
    ``types``: a field's Python type (or types; ``type(None)`` allows none) that its value must
    have: ``WHERE.FIELD: expected true or false, got the string 'false'`` (a TOML string is not
    a bool, a bool not a number, a string not a list); fields not named are not checked."""
    allowed = tuple(required) + tuple(optional)
    name = table.get("name") if named else None
    owner = f" for {name!r}" if named else ""
    prefix = f"{where}." if where else ""
    for key in table:
        if key not in allowed and not (named and key == "name"):
            raise ValueError(f"{prefix}{key}: unknown field{owner}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    for key in required:
        if key not in table:
            raise ValueError(f"{prefix}{key}: missing" + (f" (required by {name!r})" if named
                                                          else ""))
    for key, kinds in (types or {}).items():
        if key in table:
            why = _kind_error(table[key], kinds if isinstance(kinds, tuple) else (kinds,))
            if why:
                raise ValueError(f"{prefix}{key}: {why}")


def check_output_path(name: str, path: Any, *, folder: bool = False) -> str:
    """An output path checked before any work is done (nothing is created): the nearest
    existing folder on its way is a folder one may write in, and the path itself is not an
    existing folder (``folder=False``: a file) or an existing file (``folder=True``).  The error
    is one line naming the option, ``--trace: Not a directory: afile``."""
    import os
    text = os.fspath(path)
    if not text:
        raise ValueError(f"{name}: empty path")
    full = os.path.abspath(text)
    if folder and os.path.exists(full) and not os.path.isdir(full):
        raise ValueError(f"{name}: Not a directory: {text}")
    if not folder and os.path.isdir(full):
        raise ValueError(f"{name}: Is a directory: {text}")
    parent = os.path.dirname(full)
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"{name}: Not a directory: {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: Permission denied: {parent}")
    return text


def field_types(cls: type) -> dict[str, tuple[type, ...]]:
    """A dataclass's fields as ``check_fields``' ``types``: each field's annotated type(s)
    (``float | None`` -> ``(float, NoneType)``, ``tuple[str, ...]`` -> ``(tuple,)``)."""
    import dataclasses
    import types as _types
    import typing
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[type, ...]] = {}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        union = typing.get_origin(hint) in (typing.Union, _types.UnionType)
        args = typing.get_args(hint) if union else (hint,)
        out[f.name] = tuple(typing.get_origin(a) or a for a in args
                            if isinstance(typing.get_origin(a) or a, type))
    return out


def _finite_number(value: Any) -> bool:
    """A JSON number that is finite (a bool is not a number; an integer too large for a float
    is not finite)."""
    if not _is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


#: a parsed record's field kinds: the test a value must pass and what the error says expected
RECORD_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "num": (_finite_number, "a finite number"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true/false"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "id": (lambda v: isinstance(v, (int, str)) and not isinstance(v, bool),
           "an integer or string id"),
}


class RecordFields:
    """Typed access to the fields of one parsed record (a JSON object of a trace or an imported
    engine's log): the one check of a record's fields, a bad one raising ``error`` (ValueError
    or a subclass) ``WHERE: field 'PREFIXNAME': expected KIND, got VALUE`` (``RECORD_KINDS``)."""

    def __init__(self, obj: Mapping[str, Any], where: str, prefix: str = "", *,
                 error: type[ValueError] = ValueError) -> None:
        self.obj, self.where, self.prefix, self.error = obj, where, prefix, error

    def fail(self, name: str, what: str) -> ValueError:
        return self.error(f"{self.where}: field '{self.prefix}{name}': {what}")

    def get(self, name: str, kind: str, *, optional: bool = False, default: Any = None) -> Any:
        """The field's value, checked to be of ``kind`` (a number as float); a missing or null
        field is ``default`` when ``optional``, else an error."""
        if name not in self.obj or self.obj[name] is None:
            if optional:
                return default
            raise self.fail(name, "missing")
        value = self.obj[name]
        ok, expected = RECORD_KINDS[kind]
        if not ok(value):
            raise self.fail(name, f"expected {expected}, got {value!r}")
        return float(value) if kind == "num" else value

    def nonneg_int(self, name: str, **kw: Any) -> Any:
        """An integer field that must be >= 0 (None when optional and absent)."""
        value = self.get(name, "int", **kw)
        if value is not None and value < 0:
            raise self.fail(name, f"must be >= 0, got {value}")
        return value

    def count(self, name: str, default: int | None = None) -> int:
        """A count written as any number (3.0 counts) that must be a non-negative integer;
        ``default`` when absent (None: required)."""
        v = self.obj.get(name)
        if v is None and default is not None:
            return default
        x = self.get(name, "num")
        if x < 0 or not x.is_integer():
            raise self.fail(name, f"expected a non-negative integer, got {v!r}")
        return int(x)
