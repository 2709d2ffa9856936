"""Every metric psdlab reports, computed from a trace by one function: ``summarize``.

The runtime and the simulator write the same trace (``analysis.trace``), so measured and
simulated numbers come out of this one implementation and are comparable by construction.

Definitions (times in seconds; a *decode step* is a step with no ``prefill`` phase, as the
paper's code counts ``is_prompt_run == 0``):

- ``makespan_s``: first request arrival to last request finish; ``throughput_tok_s``: output
  tokens of all requests / makespan; ``latency_per_request_s``: makespan / requests (what the
  paper's plots call "latency": an inverse throughput, not a per-request latency).
- ``decode_throughput_tok_s`` (the paper's throughput): tokens emitted in decode steps / summed
  wall time (end - start) of those steps, over the first ``steps_fraction`` of all steps in time
  order (ceil of the fraction times the step count), to cut the drain tail as the paper does.
- ``steady_decode_throughput_tok_s``: the same over the decode steps (within ``steps_fraction``)
  that start before the last request is admitted -- the steady state, while requests still
  wait and every batch refills as soon as a sequence finishes; the drain tail after it runs
  ever fewer sequences.  ``steady_decode_steps`` counts them.  None without request records.
- ``partial`` (only for a partial trace, ``analysis.trace.trace_from_lines``): the requests
  the run declared and those left out unfinished, the step rows of theirs dropped, the cut
  last line; every other metric is then over the finished requests (steps kept whole, their
  rows of unfinished requests dropped: decode tokens and acceptance count finished ones).
- ``ttft`` = first_token - arrival; ``tpot`` = (finish - first_token) / (output_len - 1) over
  requests with output_len > 1; ``e2e`` = finish - arrival; each as mean/p50/p90/p99.
- ``acceptance_rate`` (= ``vsr``): accepted / proposed draft tokens over all verified rows;
  ``mean_acceptance_length`` (vLLM's): 1 + accepted / number of (sequence, step) verifications
  that had proposals.
- ``overlap_fraction``: share of decode steps flagged ``overlapped``.
- ``draft_hidden_fraction``: share of all drafting time lying inside the union of verification
  intervals on devices other than the drafting one (interval intersection, across steps).
- ``mean_draft_time_s`` / ``mean_verify_time_s``: mean over steps having that phase of the
  length of the union of the step's phases of that kind.
- ``idle_fraction``: per device seen in the phases, 1 - (union of its phases within the makespan
  window) / makespan.

A metric that has nothing to measure (no requests, nothing proposed, zero time) is None.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from psdlab.analysis.checks import check_range
from psdlab.analysis.stats import clip_intervals, covered_length, percentiles, union_length
from psdlab.analysis.trace import StepRecord, Trace

__all__ = ["summarize", "percentiles", "decode_steps", "first_steps", "is_decode_step",
           "steady_steps"]


def _ratio(num: float, den: float) -> float | None:
    """num / den; None for no time (den <= 0) or a time so short the ratio overflows."""
    if not den > 0:
        return None
    r = float(num) / float(den)
    return r if math.isfinite(r) else None


def is_decode_step(step: StepRecord) -> bool:
    """A step with no prefill phase (the paper's ``is_prompt_run == 0``)."""
    return not any(p.kind == "prefill" for p in step.phases)


def first_steps(trace: Trace, steps_fraction: float = 1.0) -> list[StepRecord]:
    """The first ``ceil(steps_fraction * n)`` steps of the trace in time order."""
    fraction = check_range("steps_fraction", steps_fraction, 0.0, 1.0, lo_open=True)
    ordered = sorted(trace.steps, key=lambda s: (s.start, s.index))
    keep = math.ceil(round(fraction * len(ordered), 9))
    return ordered[:keep]


def decode_steps(trace: Trace, steps_fraction: float = 1.0) -> list[StepRecord]:
    """Decode steps among the first ``steps_fraction`` of steps."""
    return [s for s in first_steps(trace, steps_fraction) if is_decode_step(s)]


# ---------------------------------------------------------------------------- requests

def _request_metrics(trace: Trace) -> dict[str, Any]:
    reqs = trace.requests
    arrival = np.array([r.arrival for r in reqs], dtype=float)
    first = np.array([r.first_token for r in reqs], dtype=float)
    finish = np.array([r.finish for r in reqs], dtype=float)
    out_len = np.array([r.output_len for r in reqs], dtype=float)
    tokens = int(sum(r.output_len for r in reqs))
    makespan = float(finish.max() - arrival.min()) if reqs else None
    multi = out_len > 1
    tpot = (finish[multi] - first[multi]) / (out_len[multi] - 1)
    return {
        "requests": len(reqs),
        "output_tokens": tokens,
        "preemptions": int(sum(r.preemptions for r in reqs)),
        "makespan_s": makespan,
        "throughput_tok_s": _ratio(tokens, makespan) if makespan is not None else None,
        "latency_per_request_s": makespan / len(reqs) if makespan is not None else None,
        "ttft": percentiles(first - arrival),
        "tpot": percentiles(tpot),
        "e2e": percentiles(finish - arrival),
    }


# ---------------------------------------------------------------------------- steps

def _decode_metrics(trace: Trace, steps_fraction: float) -> dict[str, Any]:
    steps = decode_steps(trace, steps_fraction)
    tokens = sum(v.emitted for s in steps for v in s.verified)
    wall = float(sum(s.end - s.start for s in steps))
    all_decode = [s for s in trace.steps if is_decode_step(s)]
    steady = steady_steps(trace, steps)
    steady_tokens = sum(v.emitted for s in steady for v in s.verified)
    return {
        "steps_fraction": float(steps_fraction),
        "prefill_steps": len(trace.steps) - len(all_decode),
        "decode_steps": len(steps),
        "decode_tokens": int(tokens),
        "decode_time_s": wall,
        "decode_throughput_tok_s": _ratio(tokens, wall),
        "steady_decode_steps": len(steady) if trace.requests else None,
        "steady_decode_throughput_tok_s": (_ratio(steady_tokens, float(sum(
            s.end - s.start for s in steady))) if trace.requests else None),
        "overlap_fraction": (_ratio(sum(s.overlapped for s in all_decode), len(all_decode))),
    }


def steady_steps(trace: Trace, steps: list[StepRecord] | None = None) -> list[StepRecord]:
    """Decode steps (of ``steps``, default all) that start before the last admission."""
    steps = decode_steps(trace) if steps is None else steps
    if not trace.requests:
        return []
    last = max(r.admitted for r in trace.requests)
    return [s for s in steps if s.start < last]


def _acceptance_metrics(trace: Trace) -> dict[str, Any]:
    proposed = accepted = verifications = 0
    for step in trace.steps:
        for v in step.verified:
            proposed += v.proposed
            accepted += v.accepted
            verifications += v.proposed > 0
    rate = _ratio(accepted, proposed)
    return {
        "proposed_tokens": proposed,
        "accepted_tokens": accepted,
        "acceptance_rate": rate,
        "vsr": rate,
        "mean_acceptance_length": 1.0 + accepted / verifications if verifications else None,
    }


def _phase_arrays(trace: Trace) -> dict[str, np.ndarray]:
    """All phases as parallel arrays: kind, device, start, end, step position."""
    rows = [(p.kind, p.device, p.start, p.end, i)
            for i, s in enumerate(trace.steps) for p in s.phases]
    kinds, devices, starts, ends, pos = zip(*rows) if rows else ((), (), (), (), ())
    return {"kind": np.array(kinds, dtype=object), "device": np.array(devices, dtype=object),
            "start": np.array(starts, dtype=float), "end": np.array(ends, dtype=float),
            "step": np.array(pos, dtype=int)}


def _mean_phase_time(trace: Trace, kind: str) -> float | None:
    per_step = []
    for step in trace.steps:
        phases = [p for p in step.phases if p.kind == kind]
        if len(phases) == 1:                      # the common case, without numpy overhead
            per_step.append(phases[0].end - phases[0].start)
        elif phases:
            per_step.append(union_length([p.start for p in phases], [p.end for p in phases]))
    return float(np.mean(per_step)) if per_step else None


def _draft_hidden_fraction(ph: dict[str, np.ndarray]) -> float | None:
    draft = ph["kind"] == "draft"
    verify = ph["kind"] == "verify"
    total = float(np.sum(ph["end"][draft] - ph["start"][draft]))
    if total <= 0:
        return None
    hidden = 0.0
    for device in sorted(set(ph["device"][draft])):
        mine = draft & (ph["device"] == device)
        others = verify & (ph["device"] != device)
        hidden += float(np.sum(covered_length(ph["start"][others], ph["end"][others],
                                              ph["start"][mine], ph["end"][mine])))
    return min(1.0, hidden / total)


def _idle_fraction(trace: Trace, ph: dict[str, np.ndarray],
                   makespan: float | None) -> dict[str, float | None]:
    devices = sorted(set(ph["device"]))
    if not trace.requests or makespan is None or makespan <= 0:
        return dict.fromkeys(devices)
    lo = min(r.arrival for r in trace.requests)
    hi = lo + makespan
    out: dict[str, float | None] = {}
    for device in devices:
        mine = ph["device"] == device
        s, e = clip_intervals(ph["start"][mine], ph["end"][mine], lo, hi)
        out[device] = max(0.0, 1.0 - union_length(s, e) / makespan)
    return out


def _phase_metrics(trace: Trace, makespan: float | None) -> dict[str, Any]:
    ph = _phase_arrays(trace)
    return {
        "draft_hidden_fraction": _draft_hidden_fraction(ph),
        "mean_draft_time_s": _mean_phase_time(trace, "draft"),
        "mean_verify_time_s": _mean_phase_time(trace, "verify"),
        "idle_fraction": _idle_fraction(trace, ph, makespan),
    }


# ---------------------------------------------------------------------------- summary

def summarize(trace: Trace, *, steps_fraction: float = 1.0) -> dict[str, Any]:
    """All metrics of a trace as one JSON-able dict (see the module docstring for each one)."""
    check_range("steps_fraction", steps_fraction, 0.0, 1.0, lo_open=True)
    run = trace.run
    out: dict[str, Any] = {"mode": run.mode, "k": run.k, "m": run.m, "source": run.source,
                           "steps": len(trace.steps)}
    req = _request_metrics(trace)
    out.update(req)
    if trace.left_out is not None:          # a partial trace: what its reader left out
        lo = trace.left_out
        out["partial"] = {"requests_declared": lo.declared, "requests_left_out": lo.unfinished,
                          "rows_dropped": lo.dropped_rows, "cut_line": lo.cut_line,
                          "cut_byte": lo.cut_byte}
    out.update(_decode_metrics(trace, steps_fraction))
    out.update(_acceptance_metrics(trace))
    out.update(_phase_metrics(trace, req["makespan_s"]))
    return out



def _num(x: Any, scale: float = 1.0, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x * scale, fmt)


def _requests(s: dict[str, Any]) -> str:
    """The request count, with the declared one of a partial trace (``3 of 12 declared, 9
    unfinished left out``)."""
    part = s.get("partial")
    if not part:
        return str(s["requests"])
    declared = part["requests_declared"]
    of = f" of {declared} declared" if declared is not None else ""
    return f"{s['requests']}{of} ({part['requests_left_out']} unfinished, left out)"


def summary_text(s: dict[str, Any]) -> str:
    """`summarize`'s dict as aligned text (times of distributions in milliseconds): what
    `psdlab metrics` and `psdlab simulate` print."""
    lines = [f"run: mode={s['mode']} k={s['k']} m={s['m']} source={s['source']}",
             f"requests {_requests(s)}   output tokens {s['output_tokens']}   "
             f"steps {s['steps']} (with prefill {s['prefill_steps']}; decode steps in the "
             f"first {s['steps_fraction']:g}: {s['decode_steps']})",
             f"makespan {_num(s['makespan_s'])} s   throughput {_num(s['throughput_tok_s'])} "
             f"tok/s   makespan/requests {_num(s['latency_per_request_s'])} s",
             f"decode throughput {_num(s['decode_throughput_tok_s'])} tok/s "
             f"({s['decode_tokens']} tokens in {_num(s['decode_time_s'])} s of decode steps)",
             "", f"{'ms':<6}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for key in ("ttft", "tpot", "e2e"):
        d = s[key]
        lines.append(f"{key:<6}" + "".join(f"{' ' + _num(d[q], 1e3, '.3f'):>10}"
                                          for q in ("mean", "p50", "p90", "p99")))
    lines += ["",
              f"acceptance rate (VSR) {_num(s['acceptance_rate'])}   mean acceptance length "
              f"{_num(s['mean_acceptance_length'])}   "
              f"({s['accepted_tokens']}/{s['proposed_tokens']} draft tokens accepted)",
              f"overlapped steps {_num(s['overlap_fraction'])}   draft time hidden "
              f"{_num(s['draft_hidden_fraction'])}   mean draft {_num(s['mean_draft_time_s'], 1e3)}"
              f" ms   mean verify {_num(s['mean_verify_time_s'], 1e3)} ms"]
    idle = s["idle_fraction"]
    if idle:
        lines.append("idle: " + "   ".join(f"{d} {_num(v)}" for d, v in idle.items()))
    return "\n".join(lines)


def trace_metrics_text(path: str, steps_fraction: float = 1.0, as_json: bool = False) -> str:
    """`psdlab metrics TRACE`: the trace file's summary as text, or one JSON object."""
    import json

    from psdlab.analysis.trace import read_trace

    check_range("--steps-fraction", steps_fraction, 0.0, 1.0, lo_open=True)
    summary = summarize(read_trace(path), steps_fraction=steps_fraction)
    return json.dumps(summary, allow_nan=False) if as_json else summary_text(summary)
