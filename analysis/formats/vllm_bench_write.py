"""Writer of psdlab traces as ``vllm bench serve --save-result --save-detailed`` results.

:func:`bench_result_from_trace` turns a trace (simulated or measured, ``analysis.trace``)
into the JSON document vLLM's ``vllm/benchmarks/serve.py`` writes, with its keys and units,
so a simulated run is compared with a real one by the tools that read vLLM results (and by
``vllm_bench.read``, which reads it back):

- settings: ``endpoint_type``/``backend`` (``"psdlab-sim"``), ``model_id``, ``num_prompts``,
  ``request_rate`` (a number or ``"inf"``), ``burstiness``, ``max_concurrency``;
- totals over the completed requests: ``duration`` (first send to last finish, s),
  ``completed``, ``failed`` (0), ``total_input_tokens``, ``total_output_tokens``,
  ``request_throughput`` (req/s), ``output_throughput`` and ``total_token_throughput`` (tok/s);
- statistics ``{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`` exactly as vLLM computes them:
  TTFT = first token - send; TPOT = (e2el - TTFT) / (output - 1) over requests with more
  than one output token; ITL = the gaps between the steps that emitted tokens for a request
  (one streamed chunk per step: with speculation a chunk holds several tokens, as vLLM
  streams them); E2EL = finish - send; ``std`` is the population standard deviation and
  percentiles interpolate linearly (numpy's defaults);
- with ``detailed``: per request ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
  ``latencies``, ``start_times`` (send times, s from the first arrival), ``queue_times``
  (send - arrival: the client's wait for a concurrency slot), ``errors`` ("");
- speculative decoding (verified rows with proposals): ``spec_decode_acceptance_rate`` (%),
  ``spec_decode_acceptance_length`` (1 + accepted / drafts), ``spec_decode_num_drafts``,
  ``spec_decode_draft_tokens``, ``spec_decode_accepted_tokens``,
  ``spec_decode_per_position_acceptance_rates`` (position i accepted / drafts), counted as
  vLLM's counters count them (:func:`spec_decode_fields`).

The ITLs need the trace's step records (``trace.level = "step"``); without them ``itls`` is
empty and the ITL statistics are 0, as vLLM writes them for no data.  :func:`write_bench_result`
writes to a temporary file and renames it, so a failed write leaves nothing half-written.
stdlib only.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.trace import Trace

ENDPOINT = "psdlab-sim"
DEFAULT_PERCENTILES = (99.0,)


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile ``q`` in [0, 100] of a non-empty list."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats_ms(name: str, values_s: Sequence[float],
             percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, float]:
    """``mean_/median_/std_/pNN_{name}_ms`` of seconds ``values_s`` (0 for none, as vLLM)."""
    xs = [1e3 * v for v in values_s] or [0.0]
    out = {f"mean_{name}_ms": statistics.fmean(xs), f"median_{name}_ms": statistics.median(xs),
           f"std_{name}_ms": statistics.pstdev(xs)}
    for q in percentiles:
        out[f"p{q:g}_{name}_ms"] = percentile(xs, q)
    return out


def emission_times(trace: Trace) -> dict[Any, list[float]]:
    """Per request id, the times after its first token at which steps emitted its tokens
    (the end of the step's verification; the step's end when it has none)."""
    out: dict[Any, list[float]] = {}
    for step in trace.steps:
        if not step.verified:
            continue
        ends = [p.end for p in step.phases if p.kind == "verify"]
        t = max(ends) if ends else step.end
        for v in step.verified:
            if v.emitted > 0:
                out.setdefault(v.req, []).append(t)
    return out


def spec_decode_fields(trace: Trace) -> dict[str, Any]:
    """vLLM's ``spec_decode_*`` figures from the trace's verified rows ({} without drafts).

    Counting rule (vLLM 0.32, ``v1/core/sched/scheduler.py`` ``update_from_output`` and
    ``v1/spec_decode/metrics.py`` ``observe_draft``): one draft per request and step with
    draft tokens scheduled, its draft tokens, and its accepted count ``len(generated) - 1``
    taken *before* the stop check truncates the output at ``max_tokens`` -- so the last step
    of a request counts every accepted token, also those past its output budget, and vLLM
    schedules the full k drafts there (only ``max_model_len`` trims them).  A row's
    ``proposed`` and ``accepted`` are used as they are: the simulator's rows carry the drawn
    count (``sim.trajectories``: only ``emitted`` is capped at the budget), so this is vLLM's
    counting.  A trace of ``server.cap_proposals`` (psdlab's runtime rule) holds proposals
    capped at the budget and accepted counts capped at those; the drawn counts are not in the
    trace, so its figures are that engine's counting, not vLLM's: ``psdlab.spec_decode_
    counting`` in the document says which (``"vllm"`` or ``"capped-proposals"``)."""
    drafts = proposed = accepted = 0
    per_pos: list[int] = []
    for step in trace.steps:
        for v in step.verified:
            if v.proposed <= 0:
                continue
            drafts += 1
            proposed += v.proposed
            accepted += v.accepted
            if len(per_pos) < v.proposed:
                per_pos.extend([0] * (v.proposed - len(per_pos)))
            for i in range(v.accepted):
                per_pos[i] += 1
    if drafts == 0:
        return {}
    return {"spec_decode_acceptance_rate": 100.0 * accepted / proposed,
            "spec_decode_acceptance_length": 1.0 + accepted / drafts,
            "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": proposed,
            "spec_decode_accepted_tokens": accepted,
            "spec_decode_per_position_acceptance_rates": [a / drafts for a in per_pos]}


def bench_result_from_trace(trace: Trace, *, detailed: bool = True,
                            request_rate: float | None = None,
                            max_concurrency: int | None = None,
                            send_times: Mapping[Any, float] | None = None,
                            percentiles: Sequence[float] = DEFAULT_PERCENTILES,
                            model_id: str | None = None) -> dict[str, Any]:
    """The vLLM bench result document of ``trace`` (module docstring).  ``send_times``: per
    request id, when the client sent it (default: its arrival; a client that caps its
    concurrency sends later, see ``validation.serving_results.replay.client_send_times``);
    ``request_rate``: the rate to record (None or inf: ``"inf"``)."""
    reqs = sorted(trace.requests, key=lambda r: (r.arrival, str(r.id)))
    if not reqs:
        raise ValueError("trace: no request records to write a bench result from")
    emitted = emission_times(trace)
    sends = [float(send_times[r.id]) if send_times is not None else r.arrival for r in reqs]
    t0 = min(r.arrival for r in reqs)
    ttfts = [r.first_token - s for r, s in zip(reqs, sends)]
    e2els = [r.finish - s for r, s in zip(reqs, sends)]
    itls = []
    for r in reqs:
        times = [r.first_token] + [t for t in emitted.get(r.id, []) if t > r.first_token]
        itls.append([b - a for a, b in zip(times, times[1:])])
    tpots = [(e - f) / (r.output_len - 1) for r, e, f in zip(reqs, e2els, ttfts)
             if r.output_len > 1]
    duration = max(r.finish for r in reqs) - min(sends)
    n_in = sum(r.prompt_len for r in reqs)
    n_out = sum(r.output_len for r in reqs)
    rate: float | str = ("inf" if request_rate is None or math.isinf(request_rate)
                         else float(request_rate))
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": ENDPOINT, "backend": ENDPOINT, "label": None,
        "model_id": model_id or (trace.run.models or {}).get("target"),
        "tokenizer_id": None, "num_prompts": len(reqs), "request_rate": rate,
        "burstiness": 1.0, "max_concurrency": max_concurrency,
        "duration": duration, "completed": len(reqs), "failed": 0,
        "total_input_tokens": n_in, "total_output_tokens": n_out,
        "request_throughput": len(reqs) / duration if duration > 0 else None,
        "request_goodput": None,
        "output_throughput": n_out / duration if duration > 0 else None,
        "total_token_throughput": (n_in + n_out) / duration if duration > 0 else None}
    if detailed:
        doc.update({"input_lens": [r.prompt_len for r in reqs],
                    "output_lens": [r.output_len for r in reqs],
                    "ttfts": ttfts, "itls": itls, "latencies": e2els,
                    "start_times": [s - t0 for s in sends],
                    "queue_times": [s - r.arrival for r, s in zip(reqs, sends)],
                    "errors": [""] * len(reqs)})
    doc.update(spec_decode_fields(trace))
    all_itls = [x for row in itls for x in row]
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", all_itls),
                         ("e2el", e2els)):
        doc.update(stats_ms(name, values, percentiles))
    doc["psdlab"] = {"mode": trace.run.mode, "k": trace.run.k, "m": trace.run.m,
                     "source": trace.run.source, "seed": trace.run.seed}
    if "spec_decode_num_drafts" in doc:
        doc["psdlab"]["spec_decode_counting"] = (
            "capped-proposals" if (trace.run.extra or {}).get("cap_proposals") else "vllm")
    return doc


def write_bench_result(path: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """Write ``doc`` as one JSON object (strict JSON) via a temporary file and a rename."""
    target = os.fspath(path)
    text = json.dumps(dict(doc), allow_nan=False, indent=None)
    write_text(target, text + "\n", make_folders=False)
