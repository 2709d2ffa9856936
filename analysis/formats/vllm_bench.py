"""Reader for ``vllm bench serve --save-result [--save-detailed]`` result files.

One JSON object (or one a line with ``--append-result``), keys as vLLM's
``vllm/benchmarks/serve.py`` writes them: run settings (``date``, ``endpoint_type``,
``backend``, ``model_id``, ``num_prompts``, ``request_rate`` -- a number or ``"inf"`` --,
``burstiness``, ``max_concurrency``), totals (``duration``, ``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
``output_throughput``, ``total_token_throughput``), statistics
``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms``, per-request lists (``latencies``,
``queue_times`` always; ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``start_times``, ``errors`` with ``--save-detailed``; seconds) and, with speculative
decoding, ``spec_decode_{acceptance_rate,acceptance_length,num_drafts,draft_tokens,
accepted_tokens,per_position_acceptance_rates}``.
"""
from __future__ import annotations

from typing import Any

from . import bench_results as br
from .fields import Field, opt_float, opt_int, opt_list, opt_str, to_float
from .parsing import PathLike, json_keys_of_first_line
from .records import BenchSummary, FileWorkload

NAME = "vllm_bench"
KIND = "bench"
_MARKERS = ("endpoint_type", "mean_e2el_ms", "spec_decode_acceptance_length")


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is a vLLM bench result: its first keys."""
    keys = json_keys_of_first_line(head)
    return bool(keys & set(_MARKERS)) or {"num_prompts", "model_id"} <= keys


def _summary(obj: dict[str, Any], path: PathLike, line: int | None) -> BenchSummary:
    rates = opt_list(obj, "spec_decode_per_position_acceptance_rates", path, line)
    fields = br.common_fields(obj, path, line)
    fields["backend"] = fields["backend"] or opt_str(obj, "endpoint_type")
    return BenchSummary(
        format=NAME, path=str(path), model_id=opt_str(obj, "model_id"),
        burstiness=opt_float(obj, "burstiness", path, line, allow_inf=True),
        num_prompts=opt_int(obj, "num_prompts", path, line),
        failed=opt_int(obj, "failed", path, line),
        total_token_throughput=opt_float(obj, "total_token_throughput", path, line),
        acceptance_length=opt_float(obj, "spec_decode_acceptance_length", path, line),
        acceptance_rate_pct=opt_float(obj, "spec_decode_acceptance_rate", path, line),
        num_drafts=opt_int(obj, "spec_decode_num_drafts", path, line),
        draft_tokens=opt_int(obj, "spec_decode_draft_tokens", path, line),
        accepted_tokens=opt_int(obj, "spec_decode_accepted_tokens", path, line),
        per_position_acceptance=None if rates is None else tuple(
            to_float(r, Field(path, line, "spec_decode_per_position_acceptance_rates"))
            for r in rates),
        **fields)


def read_all(path: PathLike) -> tuple[BenchSummary, ...]:
    """Every result in the file, in file order."""
    return tuple(_summary(obj, path, line) for line, obj in br.load_results(path))


def read(path: PathLike, *, index: int = -1) -> BenchSummary:
    """One result (the last by default: the newest of appended runs)."""
    results = br.load_results(path)
    line, obj = br.pick(results, index, path)
    return _summary(obj, path, line)


def read_workload(path: PathLike, *, index: int = -1) -> FileWorkload:
    """The requests of a ``--save-detailed`` result (see ``bench_results.to_workload``)."""
    results = br.load_results(path)
    line, obj = br.pick(results, index, path)
    k = index % len(results)
    note = f"run {k + 1} of {len(results)}" if len(results) > 1 else ""
    return br.to_workload(_summary(obj, path, line), note)
