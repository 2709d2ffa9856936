"""What vLLM's and SGLang's serving-benchmark results share: the file shape (one JSON object,
or one object a line when runs are appended), the typed extraction of a result into a
:class:`~.records.BenchSummary`, and the per-request lists of a detailed result turned into
a :class:`~.records.FileWorkload`."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .build import even_arrivals, build_file_workload
from .errors import fail
from .fields import Field, opt_float, opt_int, opt_list, opt_str, to_float, to_int
from .parsing import PathLike, first_line, iter_jsonl, read_text
from .records import BenchSummary, FileWorkload

_STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")


def load_results(path: PathLike) -> list[tuple[int | None, dict[str, Any]]]:
    """``(line, result)`` for each result in the file: a JSONL file when its first line is a
    whole object (``--append-result``, SGLang), else one (possibly indented) JSON object."""
    text = read_text(path)
    try:
        single_line = isinstance(json.loads(first_line(text)), dict)
    except json.JSONDecodeError:
        single_line = False
    if single_line:
        return list(iter_jsonl(path))
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(path, f"not valid JSON ({e.msg}, column {e.colno})", line=e.lineno) from None
    if not isinstance(obj, dict):
        raise fail(path, f"expected a JSON object, found {type(obj).__name__}")
    return [(None, obj)]


def pick(results: list[tuple[int | None, dict[str, Any]]], index: int,
         path: PathLike) -> tuple[int | None, dict[str, Any]]:
    try:
        return results[index]
    except IndexError:
        raise fail(path, f"has {len(results)} result(s); no result {index}") from None


def request_rate(obj: Mapping[str, Any], path: PathLike, line: int | None) -> float | None:
    """The configured rate: a number, inf (``"inf"`` / ``Infinity``), or None ("trace")."""
    value = obj.get("request_rate")
    if value is None or value == "trace":
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return to_float(value, Field(path, line, "request_rate"), minimum=0.0, allow_inf=True)


def stats(obj: Mapping[str, Any], path: PathLike, line: int | None) -> dict[str, float]:
    """The ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` statistics (SGLang's
    ``e2e_latency`` renamed ``e2el``); null values are left out."""
    out: dict[str, float] = {}
    for key, value in obj.items():
        m = _STAT.match(key)
        if m is None or value is None:
            continue
        metric = "e2el" if m.group(2) == "e2e_latency" else m.group(2)
        out[f"{m.group(1)}_{metric}_ms"] = to_float(value, Field(path, line, key))
    return out


def _floats(obj: Mapping[str, Any], key: str, path: PathLike,
            line: int | None) -> tuple[float, ...] | None:
    values = opt_list(obj, key, path, line)
    if values is None:
        return None
    return tuple(to_float(v, Field(path, line, key)) for v in values)


def _ints(obj: Mapping[str, Any], key: str, path: PathLike,
          line: int | None) -> tuple[int, ...] | None:
    values = opt_list(obj, key, path, line)
    if values is None:
        return None
    return tuple(to_int(v, Field(path, line, key)) for v in values)


def per_request(obj: Mapping[str, Any], path: PathLike, line: int | None) -> dict[str, Any]:
    """The per-request lists of a detailed result, checked to have one entry per request."""
    itls = opt_list(obj, "itls", path, line)
    out: dict[str, Any] = {
        "input_lens": _ints(obj, "input_lens", path, line),
        "output_lens": _ints(obj, "output_lens", path, line),
        "ttfts_s": _floats(obj, "ttfts", path, line),
        "itls_s": None if itls is None else tuple(
            tuple(to_float(x, Field(path, line, "itls"))
                  for x in (v if isinstance(v, list) else [v])) for v in itls),
        "e2els_s": _floats(obj, "latencies", path, line),
        "start_times_s": _floats(obj, "start_times", path, line),
        "queue_times_s": _floats(obj, "queue_times", path, line),
        "errors": None if obj.get("errors") is None else tuple(
            "" if e is None else str(e) for e in opt_list(obj, "errors", path, line) or [])}
    keys = {"input_lens": "input_lens", "output_lens": "output_lens", "ttfts_s": "ttfts",
            "itls_s": "itls", "e2els_s": "latencies", "start_times_s": "start_times",
            "queue_times_s": "queue_times", "errors": "errors"}
    sizes = {keys[k]: len(v) for k, v in out.items() if v is not None}
    if sizes:
        ref_key = "input_lens" if "input_lens" in sizes else next(iter(sizes))
        for key, size in sizes.items():
            if size != sizes[ref_key]:
                raise fail(path, f"{size} entries, but '{ref_key}' has {sizes[ref_key]}",
                           line=line, field=key)
    return out


def common_fields(obj: Mapping[str, Any], path: PathLike, line: int | None) -> dict[str, Any]:
    """The BenchSummary fields both tools write under the same keys."""
    return dict(
        backend=opt_str(obj, "backend"),
        request_rate=request_rate(obj, path, line),
        max_concurrency=opt_int(obj, "max_concurrency", path, line),
        duration_s=opt_float(obj, "duration", path, line),
        completed=opt_int(obj, "completed", path, line),
        total_input_tokens=opt_int(obj, "total_input_tokens", path, line),
        total_output_tokens=opt_int(obj, "total_output_tokens", path, line),
        request_throughput=opt_float(obj, "request_throughput", path, line),
        output_throughput=opt_float(obj, "output_throughput", path, line),
        stats_ms=stats(obj, path, line),
        raw=dict(obj), **per_request(obj, path, line))


def to_workload(s: BenchSummary, run_note: str) -> FileWorkload:
    """The requests of a detailed result: lengths, measured TTFT / ITL / end-to-end latency
    and errors; arrivals from the client's send times when the file keeps them (minus its
    queueing time, when kept), else evenly spaced at the configured rate (and said so)."""
    if s.input_lens is None or s.output_lens is None:
        raise fail(s.path, "no per-request lists (saved without --save-detailed / "
                   "--output-details)", field="input_lens")
    n = len(s.input_lens)
    notes = [run_note] if run_note else []
    if s.start_times_s is not None:
        queue = s.queue_times_s or (0.0,) * n
        times = [t - q for t, q in zip(s.start_times_s, queue)]
        notes.append("arrivals: start_times" + (" - queue_times" if s.queue_times_s else ""))
    else:
        times, note = even_arrivals(n, s.request_rate)
        notes.append(note)
    rows = []
    for i in range(n):
        err = s.errors[i] if s.errors is not None and s.errors[i] else None
        ok = err is None
        rows.append((times[i], {
            "input_len": s.input_lens[i], "output_len": s.output_lens[i],
            "ttft_s": s.ttfts_s[i] if ok and s.ttfts_s is not None else None,
            "itl_s": s.itls_s[i] if ok and s.itls_s is not None else (),
            "e2el_s": s.e2els_s[i] if ok and s.e2els_s is not None else None,
            "error": err, "source": f"{s.format}:request {i}"}))
    return build_file_workload(s.format, s.path, rows, notes)
