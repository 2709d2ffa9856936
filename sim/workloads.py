"""Workloads: when requests arrive and how long their prompts and outputs are.

Specs (``make_workload(spec)``; LEN is a length spec of sim/lengths.py, default fixed 256):

- ``{"name": "offline", "prompt": LEN, "output": LEN}``: all requests arrive at t = 0 (the
  paper's setup).
- ``{"name": "poisson", "rate": r, "prompt": LEN, "output": LEN, "start": 0.0}``: exponential
  inter-arrival times with mean 1/r (requests per second); the first arrives one gap after start.
- ``{"name": "gamma", "rate": r, "cv": c, "prompt": LEN, "output": LEN, "start": 0.0}``: gamma
  inter-arrivals with mean 1/r and coefficient of variation c (shape 1/c^2; c = 1 is Poisson,
  c > 1 bursty, c < 1 smoother).
- ``{"name": "file", "path": F, "format": ..., "rate_scale": ..., "start": ..., "end": ...,
  "max_model_len": ...}`` (requests longer than the context are refused, as vLLM does):
  the requests of a serving system's or public trace's file (``analysis.formats``: vLLM and
  SGLang bench results, Azure, BurstGPT, Mooncake, ShareGPT, Spec-Bench, ...), their arrivals
  and lengths.
- ``{"name": "replay", "path": "w.csv" | "w.jsonl"}`` or ``{"name": "replay", "rows": [[arrival,
  prompt_len, output_len, key], ...]}`` (the rows inline): rows with arrival (s), prompt_len,
  output_len, and optionally ``key`` (the request's id in a measured trace; an acceptance model
  that knows requests by id, ``sim.acceptance_matches``, reads it).  CSV needs a header naming
  those columns (others are ignored); JSONL needs one object per line with those keys.
  Rows are sorted by arrival (stable); ``generate(rng, n)`` takes the first n after sorting,
  all of them for n = None.  A malformed line raises ValueError "FILE:LINE: field 'x': ...".

``Workload.generate(rng, n) -> RequestSet`` draws from the generator it is given (arrivals
first, then prompt lengths, then output lengths), so the same seed gives the same requests.
"""
from __future__ import annotations

import csv
import functools
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from psdlab.analysis.checks import check_fields, check_int, check_nonnegative, check_range
from psdlab.analysis.formats.detect import read_workload
from psdlab.analysis.formats.records import FileWorkload
from psdlab.analysis.registry import Registry

from .lengths import LengthDist, make_length, sharegpt_like_lengths

__all__ = ["RequestSet", "Workload", "make_workload", "read_requests", "sharegpt_like_lengths"]

DEFAULT_LEN = {"name": "fixed", "value": 256}
FIELDS = ("arrival", "prompt_len", "output_len")


@dataclass(frozen=True, eq=False)
class RequestSet:
    """n requests: sorted arrival times (s) and integer prompt/output lengths >= 1 (read-only);
    ``keys``: optional request ids (replay files with a ``key`` column)."""
    arrival: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        arrays = {}
        for name in FIELDS:
            value = np.asarray(getattr(self, name))
            if name != "arrival" and value.dtype.kind == "f" and (
                    not np.isfinite(value).all() or (value != np.floor(value)).any()):
                raise ValueError(f"RequestSet.{name}: lengths must be integers")
            arr = np.array(value, dtype=float if name == "arrival" else np.int64, copy=True)
            if arr.ndim != 1:
                raise ValueError(f"RequestSet.{name}: expected a 1-D array")
            arr.setflags(write=False)
            arrays[name] = arr
            object.__setattr__(self, name, arr)
        n = arrays["arrival"].size
        for name in FIELDS[1:]:
            if arrays[name].size != n:
                raise ValueError(f"RequestSet.{name}: length {arrays[name].size} != {n} arrivals")
            if n and arrays[name].min() < 1:
                raise ValueError(f"RequestSet.{name}: every length must be >= 1")
        if self.keys is not None:
            object.__setattr__(self, "keys", tuple(str(k) for k in self.keys))
            if len(self.keys) != n:
                raise ValueError(f"RequestSet.keys: length {len(self.keys)} != {n} arrivals")
        arr = arrays["arrival"]
        if n and (not np.isfinite(arr).all() or arr.min() < 0 or (np.diff(arr) < 0).any()):
            raise ValueError("RequestSet.arrival: must be finite, >= 0 and sorted")

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_len.sum())


@dataclass(frozen=True)
class Workload:
    """A request generator: an arrival process plus prompt and output length distributions."""
    kind: str
    prompt: LengthDist | None = None
    output: LengthDist | None = None
    rate: float = 0.0
    cv: float = 1.0
    start: float = 0.0
    rows: RequestSet | None = field(default=None, repr=False)
    spec: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def arrivals(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "offline":
            return np.zeros(n)
        if self.kind == "poisson":
            gaps = rng.exponential(1.0 / self.rate, n)
        else:
            shape = 1.0 / (self.cv * self.cv)
            gaps = rng.gamma(shape, 1.0 / (shape * self.rate), n)
        return self.start + np.cumsum(gaps)

    def generate(self, rng: np.random.Generator, n: int | None) -> RequestSet:
        """n requests (n = None: all rows of a replay; required otherwise)."""
        if self.rows is not None:
            total = len(self.rows)
            m = total if n is None else check_int("n", n, 0, total)
            keys = None if self.rows.keys is None else self.rows.keys[:m]
            return RequestSet(self.rows.arrival[:m], self.rows.prompt_len[:m],
                              self.rows.output_len[:m], keys)
        if n is None:
            raise ValueError(f"n: required for a {self.kind!r} workload (only replay has a size)")
        n = check_int("n", n, 0)
        arrival = self.arrivals(rng, n)
        assert self.prompt is not None and self.output is not None   # set for every non-replay
        return RequestSet(arrival, self.prompt.sample(rng, n), self.output.sample(rng, n))

    def describe(self) -> dict[str, Any]:
        return dict(self.spec)


def _lengths(spec: Mapping[str, Any], where: str) -> tuple[LengthDist, LengthDist]:
    return (make_length(spec.get("prompt", DEFAULT_LEN), f"{where}.prompt"),
            make_length(spec.get("output", DEFAULT_LEN), f"{where}.output"))


#: the workloads by name (``psdlab.analysis.registry``; docs/registries.md): ``f(spec, where)``
WORKLOADS: Registry[Callable[[Mapping[str, Any], str], Workload]] = Registry("workload")


def make_workload(spec: Mapping[str, Any], where: str = "workload") -> Workload:
    """Build a workload from its spec (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with a 'name', got {spec!r}")
    return WORKLOADS.get(spec.get("name"), f"{where}.name")(spec, where)


@WORKLOADS.register("offline")
def _offline(spec: Mapping[str, Any], where: str) -> Workload:
    check_fields(spec, where, optional=("prompt", "output"))
    prompt, output = _lengths(spec, where)
    return Workload("offline", prompt, output, spec=dict(spec))


@WORKLOADS.register("gamma")
@WORKLOADS.register("poisson")
def _timed(spec: Mapping[str, Any], where: str) -> Workload:
    name = str(spec["name"])
    gamma_only = ("cv",) if name == "gamma" else ()
    check_fields(spec, where, optional=("rate", "prompt", "output", "start") + gamma_only)
    if "rate" not in spec:
        raise ValueError(f"{where}.rate: missing (requests per second)")
    rate = check_range(f"{where}.rate", spec["rate"], 0.0, 1e9, lo_open=True)
    cv = 1.0
    if name == "gamma":
        if "cv" not in spec:
            raise ValueError(f"{where}.cv: missing (coefficient of variation of the gaps)")
        cv = check_range(f"{where}.cv", spec["cv"], 0.0, 100.0, lo_open=True)
    prompt, output = _lengths(spec, where)
    start = check_nonnegative(f"{where}.start", spec.get("start", 0.0))
    return Workload(name, prompt, output, rate=rate, cv=cv, start=start, spec=dict(spec))


@WORKLOADS.register("replay")
def _replay(spec: Mapping[str, Any], where: str) -> Workload:
    check_fields(spec, where, optional=("path", "rows"))
    if ("path" in spec) == ("rows" in spec):
        raise ValueError(f"{where}.path: give a .csv or .jsonl file, or the rows inline "
                         f"({where}.rows), one of the two")
    if "rows" in spec:
        return Workload("replay", rows=inline_requests(spec["rows"], f"{where}.rows"),
                        spec=dict(spec))
    return Workload("replay", rows=read_requests(spec["path"]), spec=dict(spec))


@WORKLOADS.register("file")
def _file(spec: Mapping[str, Any], where: str) -> Workload:
    check_fields(spec, where, optional=("path", "format", "rate_scale", "start", "end",
                                        "max_model_len"))
    if "path" not in spec:
        raise ValueError(f"{where}.path: missing (a trace or benchmark file "
                         f"psdlab.analysis.formats reads)")
    return Workload("file", rows=requests_from_file(spec, where), spec=dict(spec))


@functools.lru_cache(maxsize=8)
def _read_file(path: str, fmt: str | None) -> FileWorkload:
    """A trace file read once: ``psdlab plan`` builds a workload from it for every trial and
    the command line counts its requests first (the records are immutable)."""
    return read_workload(path, fmt)


def requests_from_file(spec: Mapping[str, Any], where: str = "workload") -> RequestSet:
    """The requests of a file in a format ``analysis.formats`` reads (detected by content, or
    ``format``): arrivals in ``[start, end)`` seconds of the file (default: all), re-based to 0
    and divided by ``rate_scale``; a prompt length of 0 counts as 1, an output length of 0 (a
    failed or empty request) is a one-line error naming the first such request."""
    fmt = spec.get("format")
    wl = _read_file(str(spec["path"]), None if fmt in (None, "") else str(fmt))
    start = check_nonnegative(f"{where}.start", spec.get("start", 0.0))
    end = spec.get("end")
    if end is not None or start > 0:
        end_s = math.inf if end is None else check_range(f"{where}.end", end, start, math.inf)
        wl = wl.window(start, end_s)
    if "rate_scale" in spec:
        wl = wl.scaled(check_range(f"{where}.rate_scale", spec["rate_scale"], 0.0, 1e6,
                                   lo_open=True))
    if not wl.records:
        raise ValueError(f"{where}.path: {spec['path']}: no requests (in the window asked for)")
    if spec.get("max_model_len") is not None:
        wl = refuse_too_long(wl, check_int(f"{where}.max_model_len", spec["max_model_len"],
                                           minimum=2), where)
    empty = [r for r in wl.records if r.output_len < 1]
    if empty:
        raise ValueError(f"{where}.path: {spec['path']}: output length 0 in {len(empty)} of "
                         f"{len(wl.records)} requests (first: {empty[0].source}); a request "
                         f"emits at least one token: drop the failed or empty ones from the "
                         f"file")
    return RequestSet(np.array([r.arrival_s for r in wl.records], dtype=float),
                      np.array([max(1, r.input_len) for r in wl.records], dtype=np.int64),
                      np.array([r.output_len for r in wl.records], dtype=np.int64))


def mean_rate(arrival: Any) -> float:
    """Requests per second over the arrivals' span, (n - 1) / (last - first); inf when they all
    arrive at once (fewer than two, or no span) -- the rule of
    ``analysis.formats.records.FileWorkload.mean_rate``, for arrays."""
    arr = np.asarray(arrival, dtype=float)
    if arr.size < 2:
        return math.inf
    span = float(arr.max() - arr.min())
    return (arr.size - 1) / span if span > 0 else math.inf


def refuse_too_long(wl: Any, max_model_len: int, where: str) -> Any:
    """Drop the requests whose prompt + output exceed ``max_model_len``, as vLLM refuses them
    (HTTP 400: "maximum context length is ... tokens"), with one warning line counting them
    and naming the first; every request refused is a one-line error."""
    import dataclasses
    import warnings
    kept = [r for r in wl.records if r.input_len + r.output_len <= max_model_len]
    if len(kept) == len(wl.records):
        return wl
    first = next(r for r in wl.records if r.input_len + r.output_len > max_model_len)
    what = (f"{len(wl.records) - len(kept)} of {len(wl.records)} requests are longer than "
            f"max_model_len={max_model_len} (prompt + output; the first: "
            f"{first.source or 'a request'}, {first.input_len} + {first.output_len} tokens)")
    if not kept:
        raise ValueError(f"{where}.max_model_len: {what}; none is left")
    warnings.warn(f"{what}: refused, as vLLM refuses them", stacklevel=2)
    return dataclasses.replace(wl, records=tuple(kept))


# ---------------------------------------------------------------------------- replay files

def _key(row: Mapping[str, Any]) -> str | None:
    key = row.get("key")
    return None if key is None or key == "" else str(key)


def _parse_row(row: Mapping[str, Any], where: str) -> tuple[float, int, int]:
    out: list[Any] = []
    for key in FIELDS:
        if key not in row or row[key] in (None, ""):
            raise ValueError(f"{where}: field '{key}': missing")
        raw = row[key]
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: field '{key}': expected a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"{where}: field '{key}': must be finite, got {raw!r}")
        if key == "arrival":
            if value < 0:
                raise ValueError(f"{where}: field 'arrival': must be >= 0, got {raw!r}")
            out.append(value)
        else:
            if not value.is_integer() or value < 1:
                raise ValueError(f"{where}: field '{key}': expected an integer >= 1, got {raw!r}")
            out.append(int(value))
    return out[0], out[1], out[2]


def _rows_csv(fh, name: str):
    reader = csv.DictReader(fh)
    missing = [k for k in FIELDS if k not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{name}:1: header: field '{missing[0]}': missing (the header must name "
                         f"{', '.join(FIELDS)})")
    for row in reader:
        if None in row:
            raise ValueError(f"{name}:{reader.line_num}: more values than header columns")
        yield _parse_row(row, f"{name}:{reader.line_num}"), _key(row)


def _rows_jsonl(fh, name: str):
    for lineno, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield _parse_row(obj, where), _key(obj)


@functools.lru_cache(maxsize=32)
def _parsed_rows(name: str, ext: str, mtime_ns: int, size: int) -> tuple[Any, ...]:
    """A replay file's parsed rows, read once per version of the file (mtime, size): a fit
    replays the same file through the simulator many times."""
    with open(name, encoding="utf-8", newline="") as fh:
        return tuple(_rows_csv(fh, name) if ext == ".csv" else _rows_jsonl(fh, name))


def read_requests(path: str | os.PathLike) -> RequestSet:
    """Read a .csv or .jsonl workload file into a RequestSet sorted by arrival (stable)."""
    name = os.fspath(path)
    ext = os.path.splitext(name)[1].lower()
    if ext not in (".csv", ".jsonl", ".json"):
        raise ValueError(f"workload.path: {name}: expected a .csv or .jsonl file")
    stat = os.stat(name)
    parsed = _parsed_rows(name, ext, stat.st_mtime_ns, stat.st_size)
    if not parsed:
        raise ValueError(f"workload.path: {name}: no requests")
    return _request_set(parsed)


def inline_requests(rows: Any, where: str = "workload.rows") -> RequestSet:
    """A replay's rows given inline, ``[arrival, prompt_len, output_len]`` or with a fourth
    entry, the request's key (what ``validation.compare`` hands the simulator for a measured
    trace: no file between them), checked as a file's rows are."""
    if not isinstance(rows, (list, tuple)) or not rows:
        raise ValueError(f"{where}: expected a non-empty list of [arrival, prompt_len, "
                         f"output_len(, key)] rows")
    parsed = []
    for i, row in enumerate(rows):
        if not isinstance(row, (list, tuple)) or len(row) not in (3, 4):
            raise ValueError(f"{where}[{i}]: expected [arrival, prompt_len, output_len(, key)], "
                             f"got {row!r}")
        fields = dict(zip((*FIELDS, "key"), row))
        parsed.append((_parse_row(fields, f"{where}[{i}]"), _key(fields)))
    return _request_set(tuple(parsed))


def _request_set(parsed: tuple[Any, ...]) -> RequestSet:
    """Parsed rows ((arrival, prompt, output), key) as a RequestSet sorted by arrival
    (stable)."""
    arr = np.asarray([row for row, _ in parsed], dtype=float)
    order = np.argsort(arr[:, 0], kind="stable")
    arr = arr[order]
    keys = [key for _, key in parsed]
    named = None if all(k is None for k in keys) else tuple(
        "" if keys[i] is None else keys[i] for i in order)
    return RequestSet(arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64), named)
