"""Metrics from traces: hand-built traces whose answers are worked out by hand below, the
interval helpers against brute force, and invariants on random traces."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from psdlab.analysis.metrics import first_steps, percentiles, summarize
from psdlab.analysis.stats import covered_length, merge_intervals, union_length
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified,
                            read_trace, write_trace)
from psdlab.cli import main

P, V = Phase, Verified
DRAFT, TARGET = "d:draft", "d:target"
RUN = RunInfo(mode="psd", k=3, m=2, source="test")


def psd_trace() -> Trace:
    """Three requests, four steps on two devices (drafter, target):
    step 0 [0,1]: prefill on target [0,1], first draft alone [0.5,1]   (not a decode step)
    step 1 [1,3]: verify [1,3] || draft [1,2.5], overlapped; rows A 3/2/3, B 3/1/2
    step 2 [3,5]: verify [3,4.5] || draft [4,5], overlapped; rows A 3/3/4, B 2/0/1, C 0/0/1
    step 3 [5,6]: SD tail: draft [5,5.4] then verify [5.4,6]; row B 2/1/2
    """
    steps = [
        StepRecord(0, 0.0, 1.0,
                   (P("prefill", TARGET, 0, 1, 3, 30), P("draft", DRAFT, 0.5, 1, 1, 3)),
                   (), None, 1, False),
        StepRecord(1, 1.0, 3.0, (P("verify", TARGET, 1, 3, 2, 8), P("draft", DRAFT, 1, 2.5, 1, 3)),
                   (V("A", 3, 2, 3), V("B", 3, 1, 2)), 0, 1, True),
        StepRecord(2, 3.0, 5.0, (P("verify", TARGET, 3, 4.5, 3, 9), P("draft", DRAFT, 4, 5, 1, 3)),
                   (V("A", 3, 3, 4), V("B", 2, 0, 1), V("C", 0, 0, 1)), 1, 0, True),
        StepRecord(3, 5.0, 6.0,
                   (P("draft", DRAFT, 5, 5.4, 1, 2), P("verify", TARGET, 5.4, 6, 1, 3)),
                   (V("B", 2, 1, 2),), None, None, False),
    ]
    reqs = [RequestRecord("A", 0.0, 0.0, 1.0, 4.0, 5, 4, 0),   # ttft 1, tpot 3/3 = 1, e2e 4
            RequestRecord("B", 0.5, 1.0, 2.0, 6.0, 5, 3, 1),   # ttft 1.5, tpot 4/2 = 2, e2e 5.5
            RequestRecord("C", 1.0, 1.0, 3.0, 3.0, 5, 1, 0)]   # ttft 2, no tpot, e2e 2
    return Trace(RUN, steps, reqs)


def test_request_metrics_by_hand():
    s = summarize(psd_trace())
    assert (s["requests"], s["output_tokens"], s["steps"]) == (3, 8, 4)
    assert s["makespan_s"] == pytest.approx(6.0)                 # arrival 0 -> finish 6
    assert s["throughput_tok_s"] == pytest.approx(8 / 6)
    assert s["latency_per_request_s"] == pytest.approx(2.0)
    # ttft [1, 1.5, 2]: linear percentile q at position 2q of the sorted values
    # (p99 at 1.98 -> 1.5 + 0.98 * 0.5)
    assert s["ttft"] == pytest.approx({"mean": 1.5, "p50": 1.5, "p90": 1.9, "p99": 1.99})
    assert s["tpot"] == pytest.approx({"mean": 1.5, "p50": 1.5, "p90": 1.9, "p99": 1.99})
    # e2e sorted [2, 4, 5.5]: p90 at 1.8 -> 4 + 0.8 * 1.5
    assert s["e2e"] == pytest.approx({"mean": 11.5 / 3, "p50": 4.0, "p90": 5.2, "p99": 5.47})


def test_decode_and_acceptance_by_hand():
    s = summarize(psd_trace())
    assert (s["decode_steps"], s["prefill_steps"]) == (3, 1)    # step 0 has a prefill
    assert s["decode_tokens"] == (3 + 2) + (4 + 1 + 1) + 2
    assert s["decode_time_s"] == pytest.approx(2 + 2 + 1)
    assert s["decode_throughput_tok_s"] == pytest.approx(13 / 5)
    assert (s["proposed_tokens"], s["accepted_tokens"]) == (13, 7)
    assert s["acceptance_rate"] == s["vsr"] == pytest.approx(7 / 13)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 7 / 5)   # C's row had no proposal
    assert s["overlap_fraction"] == pytest.approx(2 / 3)


def test_steps_fraction_cuts_the_tail():
    # 0.5 of 4 steps -> steps 0, 1 -> decode step 1 only: 5 tokens in 2 s
    s = summarize(psd_trace(), steps_fraction=0.5)
    assert s["decode_throughput_tok_s"] == pytest.approx(2.5)
    # 0.7 of 4 -> ceil(2.8) = 3 steps -> decode steps 1, 2: 11 tokens in 4 s
    s = summarize(psd_trace(), steps_fraction=0.7)
    assert (s["decode_steps"], s["decode_tokens"]) == (2, 11)
    assert s["decode_throughput_tok_s"] == pytest.approx(2.75)
    # 0.5 of 4 is exactly 2 steps; a hair more rounds up to 3
    assert summarize(psd_trace(), steps_fraction=0.51)["decode_steps"] == 2


def test_steady_state_stops_at_the_last_admission():
    # last admission at t = 1 (B and C): no decode step starts before it
    s = summarize(psd_trace())
    assert s["steady_decode_steps"] == 0 and s["steady_decode_throughput_tok_s"] is None

    def admitted_at(t):
        return Trace(RUN, psd_trace().steps, [replace(r, admitted=t) for r in psd_trace().requests])
    s = summarize(admitted_at(1.5))                              # decode step 1 only
    assert s["steady_decode_steps"] == 1
    assert s["steady_decode_throughput_tok_s"] == pytest.approx(5 / 2)
    late = admitted_at(4.5)
    assert summarize(late)["steady_decode_steps"] == 2          # steps 1 and 2 start < 4.5
    assert summarize(late)["steady_decode_throughput_tok_s"] == pytest.approx(11 / 4)
    none = summarize(Trace(RUN, psd_trace().steps, []))
    assert none["steady_decode_steps"] is None and none["steady_decode_throughput_tok_s"] is None


def test_first_steps_counts_in_time_order():
    steps = [StepRecord(i, 24.0 - i, 24.5 - i) for i in range(25)]   # written newest first
    trace = Trace(RUN, steps)
    # 0.28 * 25 is 7.000000000000001 in floating point: still 7 steps, the earliest ones
    assert [s.index for s in first_steps(trace, 0.28)] == [24, 23, 22, 21, 20, 19, 18]
    assert len(first_steps(trace, 0.01)) == 1


def test_phase_metrics_by_hand():
    s = summarize(psd_trace())
    # drafting 0.5 + 1.5 + 1.0 + 0.4 = 3.4 s; verify union [1,4.5] u [5.4,6]
    # hidden: [1,2.5] fully (1.5), [4,5] half (0.5) -> 2.0 / 3.4
    assert s["draft_hidden_fraction"] == pytest.approx(2.0 / 3.4)
    assert s["mean_draft_time_s"] == pytest.approx(3.4 / 4)
    assert s["mean_verify_time_s"] == pytest.approx((2 + 1.5 + 0.6) / 3)
    # target busy [0,4.5] u [5.4,6] = 5.1 of 6; drafter busy 3.4 of 6
    assert s["idle_fraction"] == pytest.approx({DRAFT: 1 - 3.4 / 6, TARGET: 1 - 5.1 / 6})


def test_same_device_drafting_is_not_hidden():
    """SD baseline with the drafter on the target's device: time overlap on one device does not
    count as hidden drafting, and two draft phases of one step count once."""
    steps = [StepRecord(0, 0.0, 2.0, (P("draft", "gpu0", 0.0, 1.0, 1, 2),
                                      P("draft", "gpu0", 0.5, 1.0, 1, 2),
                                      P("verify", "gpu0", 0.0, 2.0, 1, 3)),
                        (V(1, 2, 2, 3),))]
    reqs = [RequestRecord(1, 0.0, 0.0, 0.5, 4.0, 1, 4)]
    s = summarize(Trace(RunInfo("sd", 2, 1, "test"), steps, reqs))
    assert s["draft_hidden_fraction"] == 0.0
    assert s["mean_draft_time_s"] == pytest.approx(1.0)          # union of [0,1] and [0.5,1]
    assert s["idle_fraction"] == {"gpu0": pytest.approx(0.5)}    # busy [0,2] of makespan 4
    assert s["overlap_fraction"] == 0.0
    assert s["mean_acceptance_length"] == pytest.approx(3.0)


def test_idle_time_counts_only_inside_the_makespan_window():
    steps = [StepRecord(0, 0.0, 2.0, (P("verify", "g", 0.0, 2.0, 1, 1),)),    # warm-up before
             StepRecord(1, 2.5, 5.0, (P("verify", "g", 2.5, 5.0, 1, 1),))]    # runs past finish
    reqs = [RequestRecord(0, 1.0, 1.0, 2.0, 3.0, 1, 2)]
    s = summarize(Trace(RUN, steps, reqs))
    assert s["makespan_s"] == pytest.approx(2.0)
    # busy inside [1, 3]: [1, 2] and [2.5, 3] = 1.5 of 2
    assert s["idle_fraction"] == {"g": pytest.approx(0.25)}


def test_empty_and_degenerate_traces():
    s = summarize(Trace(RunInfo("ar", 0, 1, "test")))
    for key in ("makespan_s", "throughput_tok_s", "latency_per_request_s",
                "decode_throughput_tok_s", "acceptance_rate", "mean_acceptance_length",
                "overlap_fraction", "draft_hidden_fraction", "mean_draft_time_s"):
        assert s[key] is None, key
    assert s["ttft"] == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert s["idle_fraction"] == {}
    json.dumps(s, allow_nan=False)
    # AR: rows without proposals -> no acceptance rate, but decode throughput exists
    ar = Trace(RunInfo("ar", 0, 1, "test"),
               [StepRecord(0, 0.0, 0.5, (P("verify", "c", 0, 0.5, 1, 1),), (V(0, 0, 0, 1),))],
               [RequestRecord(0, 0.0, 0.0, 0.5, 0.5, 3, 1)])
    s = summarize(ar)
    assert s["acceptance_rate"] is None and s["mean_acceptance_length"] is None
    assert s["decode_throughput_tok_s"] == pytest.approx(2.0)
    assert s["tpot"]["mean"] is None                             # output_len 1 only


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_bad_steps_fraction(bad):
    with pytest.raises(ValueError, match="steps_fraction"):
        summarize(psd_trace(), steps_fraction=bad)


def test_percentiles_linear_and_empty():
    assert percentiles([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert percentiles([3.0]) == {"mean": 3.0, "p50": 3.0, "p90": 3.0, "p99": 3.0}
    # 0..10: linear percentile q is exactly q/10
    assert percentiles(range(11)) == pytest.approx({"mean": 5.0, "p50": 5.0, "p90": 9.0,
                                                    "p99": 9.9})
    with pytest.raises(ValueError):
        percentiles([1.0, float("nan")])


def _cells(starts, ends, scale=1):
    """Brute force: the set of unit cells [x, x+1) covered (integer endpoints)."""
    return {x for a, b in zip(starts, ends) for x in range(a * scale, b * scale)}


_iv = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12)), max_size=12)


@settings(deadline=None, max_examples=150)
@given(_iv, _iv)
def test_interval_helpers_match_brute_force(union, queries):
    us = [a for a, _ in union]
    ue = [a + d for a, d in union]
    cells = _cells(us, ue)
    assert union_length(us, ue) == len(cells)
    ms, me = merge_intervals(us, ue)
    assert np.all(ms[1:] > me[:-1]) and np.all(me > ms)          # disjoint, sorted, non-empty
    qs = [a for a, _ in queries]
    qe = [a + d for a, d in queries]
    got = covered_length(us, ue, qs, qe)
    want = [len(cells & set(range(a, b))) for a, b in zip(qs, qe)]
    assert np.allclose(got, want)


def test_cli_metrics_json_and_text(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write_trace(path, psd_trace())
    assert main(["metrics", str(path), "--json", "--steps-fraction", "0.5"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["decode_throughput_tok_s"] == pytest.approx(2.5)
    assert s["acceptance_rate"] == pytest.approx(7 / 13)
    assert main(["metrics", str(path)]) == 0
    text = capsys.readouterr().out
    assert "decode throughput 2.6 tok/s" in text and "ttft" in text


def test_cli_metrics_errors_are_one_line(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write_trace(path, psd_trace())
    assert main(["metrics", str(path), "--steps-fraction", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdlab metrics: error: --steps-fraction") and "\n" not in err
    path.write_text(path.read_text() + '{"type": "step"}\n')
    assert main(["metrics", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{path}:9: field 'start': missing" in err         # 1 run + 4 steps + 3 requests
    assert "\n" not in err


# ---------------------------------------------------------------------------- invariants

@st.composite
def random_traces(draw):
    devices = ["a", "b", "c"][:draw(st.integers(1, 3))]
    steps, t = [], draw(st.floats(0, 5))
    for i in range(draw(st.integers(0, 8))):
        dur = draw(st.floats(0, 2))
        phases = []
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.floats(t, t + dur)) if dur > 0 else t
            b = draw(st.floats(a, t + dur)) if t + dur > a else a
            phases.append(P(draw(st.sampled_from(["draft", "verify", "prefill"])),
                            draw(st.sampled_from(devices)), a, b, 1, 1))
        rows = []
        for j in range(draw(st.integers(0, 3))):
            proposed = draw(st.integers(0, 5))
            accepted = draw(st.integers(0, proposed))
            rows.append(V(j, proposed, accepted, draw(st.integers(0, accepted + 1))))
        steps.append(StepRecord(i, t, t + dur, tuple(phases), tuple(rows), None, None,
                                draw(st.booleans())))
        t += dur
    reqs = []
    for r in range(draw(st.integers(0, 6))):
        times = [draw(st.floats(0, 10))]
        for _ in range(3):
            times.append(times[-1] + draw(st.floats(0, 5)))
        reqs.append(RequestRecord(r, *times, 1, draw(st.integers(0, 50))))
    return Trace(RunInfo("psd", 2, 2, "test"), steps, reqs)


def _in_unit(x):
    return x is None or -1e-12 <= x <= 1 + 1e-12


@settings(deadline=None, max_examples=150)
@given(random_traces(), st.floats(0.01, 1.0))
@example(Trace(RunInfo(mode="psd", k=2, m=2, source="test"),    # a step of 5e-324 s
               [StepRecord(0, 0.0, 5e-324, (), (Verified(0, 0, 0, 1),))], []), 1.0)
def test_metric_invariants(trace, fraction):
    s = summarize(trace, steps_fraction=fraction)
    json.dumps(s, allow_nan=False)
    for key in ("ttft", "tpot", "e2e"):
        d = s[key]
        if d["mean"] is not None:
            assert d["p50"] <= d["p90"] + 1e-12 and d["p90"] <= d["p99"] + 1e-12
            assert d["p50"] >= 0
    for key in ("overlap_fraction", "draft_hidden_fraction", "acceptance_rate"):
        assert _in_unit(s[key]), key
    assert all(_in_unit(v) for v in s["idle_fraction"].values())
    if s["throughput_tok_s"] is not None:
        assert math.isclose(s["throughput_tok_s"] * s["makespan_s"], s["output_tokens"],
                            rel_tol=1e-9)
    if s["mean_acceptance_length"] is not None:
        assert 1 <= s["mean_acceptance_length"] <= 1 + trace.run.k + 3
    full = summarize(trace)
    assert s["decode_tokens"] <= full["decode_tokens"]
    assert s["decode_steps"] <= full["decode_steps"]
    if s["steady_decode_steps"] is not None:
        assert s["steady_decode_steps"] <= s["decode_steps"]


@settings(deadline=None, max_examples=15)
@given(random_traces())
def test_metrics_survive_the_file_round_trip(tmp_path_factory, trace):
    path = tmp_path_factory.mktemp("m") / "t.jsonl"
    write_trace(path, trace)
    assert summarize(read_trace(path)) == summarize(trace)
