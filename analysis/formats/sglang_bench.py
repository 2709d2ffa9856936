"""Reader for SGLang ``python -m sglang.bench_serving`` result files.

JSONL, one result appended a line per run, keys as SGLang's ``python/sglang/bench_serving.py``
writes them: settings (``tag``, ``backend``, ``dataset_name``, ``request_rate`` -- a
number, ``Infinity`` or ``"trace"`` --, ``max_concurrency``, ``random_input_len``, ...),
totals (``duration``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``input_throughput``, ``output_throughput``, ``total_throughput``),
statistics (``{mean,median,std,p99}_e2e_latency_ms``, ``..._ttft_ms``, ``..._tpot_ms``,
``..._itl_ms`` with ``p95_itl_ms``), ``concurrency``, ``accept_length`` (speculative
decoding; null without it) and, with ``--output-details``, the per-request lists
``input_lens``, ``output_lens``, ``ttfts``, ``itls`` (seconds), ``generated_texts``,
``errors``.  The file keeps no send times.
"""
from __future__ import annotations

from typing import Any

from . import bench_results as br
from .fields import opt_float
from .parsing import PathLike, json_keys_of_first_line
from .records import BenchSummary, FileWorkload

NAME = "sglang_bench"
KIND = "bench"
_MARKERS = ("mean_e2e_latency_ms", "sharegpt_output_len", "random_range_ratio",
            "accept_length")


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is an SGLang bench result: its first keys."""
    keys = json_keys_of_first_line(head)
    return bool(keys & set(_MARKERS)) and "endpoint_type" not in keys


def _summary(obj: dict[str, Any], path: PathLike, line: int | None) -> BenchSummary:
    return BenchSummary(
        format=NAME, path=str(path),
        total_token_throughput=opt_float(obj, "total_throughput", path, line),
        acceptance_length=opt_float(obj, "accept_length", path, line),
        **br.common_fields(obj, path, line))


def read_all(path: PathLike) -> tuple[BenchSummary, ...]:
    """Every run in the file, in file order."""
    return tuple(_summary(obj, path, line) for line, obj in br.load_results(path))


def read(path: PathLike, *, index: int = -1) -> BenchSummary:
    """One run (the last by default: the newest appended)."""
    line, obj = br.pick(br.load_results(path), index, path)
    return _summary(obj, path, line)


def read_workload(path: PathLike, *, index: int = -1) -> FileWorkload:
    """The requests of an ``--output-details`` run; arrivals evenly spaced at its request
    rate (SGLang keeps no send times), as the notes say."""
    results = br.load_results(path)
    line, obj = br.pick(results, index, path)
    k = index % len(results)
    note = f"run {k + 1} of {len(results)}" if len(results) > 1 else ""
    return br.to_workload(_summary(obj, path, line), note)
