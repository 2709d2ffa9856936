"""Overlap contention against the right solo times: each PSD run against the serial run of its
workload that ran nearest in time (``validation.solo_times``), and the contention coefficient
as the median of the runs' own estimates (``validation.replay_model.fit_contention``)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from psdlab.analysis.trace import Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified
from psdlab.validation.calibrate import calibrate
from psdlab.validation.replay_model import contention_scales, fit_contention
from psdlab.validation.solo_times import neighbour, references, serial_reference


def _trace(mode: str, d: float, v: float, *, key: str | None = "k4_m2", started: float = 0.0,
           n: int = 20) -> Trace:
    """n decode steps of 2 sequences, k = 4: serial (draft then verify) unless ``mode`` is
    psd, whose steps draft and verify at once."""
    steps, t = [], 0.0
    for i in range(n):
        if mode == "psd":
            ph = (Phase("verify", "cpu:1", t, t + v, 2, 10), Phase("draft", "cpu:0", t, t + d,
                                                                    2, 8))
            end = t + max(d, v)
        else:
            ph = (Phase("draft", "cpu:0", t, t + d, 2, 8),
                  Phase("verify", "cpu:1", t + d, t + d + v, 2, 10))
            end = t + d + v
        steps.append(StepRecord(i, t, end, ph, (Verified("a", 4, 2, 3), Verified("b", 4, 2, 3)),
                                overlapped=mode == "psd"))
        t = end
    extra = {} if key is None else {"workload_key": key, "run_started": started}
    run = RunInfo(mode=mode, k=4, m=2, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"}, extra=extra)
    return Trace(run, steps, [RequestRecord(r, 0.0, 0.0, 0.0, t, 10, 3 * n) for r in "ab"])


def _contended(d0: float, v0: float, c_d: float, c_t: float, **kw) -> Trace:
    t_scale, d_scale = contention_scales(d0, v0, c_d, c_t)
    return _trace("psd", d0 * d_scale, v0 * t_scale, **kw)


def test_neighbour_is_the_same_workloads_serial_run_nearest_in_time():
    early, late = _trace("sd", 0.1, 0.2, started=0.0), _trace("sd", 0.1, 0.2, started=100.0)
    other = _trace("sd", 0.1, 0.2, key="k2_m2", started=95.0)
    psd = _trace("psd", 0.1, 0.2, started=90.0)
    assert neighbour(psd, [early, late, other, psd]) is late
    assert neighbour(psd, [early, other, psd]) is early
    assert neighbour(psd, [other, psd]) is None
    assert neighbour(_trace("psd", 0.1, 0.2, key=None), [early, late]) is None


@settings(deadline=None, max_examples=25)
@given(st.floats(1.05, 1.5), st.floats(0.05, 0.2), st.floats(0.05, 0.3))
def test_drift_between_rounds_is_not_contention(slow, d0, v0):
    """Round 2 ran ``slow`` x slower than round 1 for serial and overlapped runs alike, and
    overlapping costs nothing: paired with its back-to-back serial run each PSD run shows no
    contention.  Against the pooled serial times (the median: round 2's, it has more steps)
    round 1's PSD run reads as negative contention; that is what the pairing removes."""
    runs = [_trace("sd", d0, v0, started=0.0), _trace("psd", d0, v0, started=15.0),
            _trace("sd", d0 * slow, v0 * slow, started=300.0, n=30),
            _trace("psd", d0 * slow, v0 * slow, started=315.0)]
    cal = calibrate(runs, holdout=0.0)
    assert cal.replay.contention_target == pytest.approx(0.0, abs=1e-9)
    assert cal.replay.contention_drafter == pytest.approx(0.0, abs=1e-9)
    unpaired = [replace(t, run=replace(t.run, extra={})) for t in runs]
    c_t, c_d = fit_contention(cal, unpaired, serial_reference(unpaired))
    assert c_t < -0.01 and c_d < -0.01


def test_reference_falls_back_to_pooled_shapes_the_neighbour_lacks():
    sd = _trace("sd", 0.1, 0.2, started=0.0)
    psd = _trace("psd", 0.1, 0.2, started=10.0)
    other = _trace("sd", 0.3, 0.5, key="k8_m2", started=5.0)
    other = replace(other, steps=[replace(s, phases=tuple(replace(p, seqs=3) for p in s.phases))
                                  for s in other.steps])
    refs = references([sd, psd, other])
    assert refs[1][("verify", 2, 10)] == pytest.approx(0.2)
    assert refs[1][("verify", 3, 10)] == pytest.approx(0.5)      # from the pool


def test_one_slow_run_does_not_move_the_contention():
    """Three PSD runs with contention 0.1 / 0.05 and one whose overlapped phases ran as with
    0.6 / 0.5 (a slow minute): the median over runs stays at the typical run's value, where
    one fit over all phases would be pulled a quarter of the way."""
    d0, v0 = 0.1, 0.2
    runs = []
    for r, (c_d, c_t) in enumerate([(0.1, 0.05)] * 3 + [(0.6, 0.5)]):
        runs += [_trace("sd", d0, v0, started=100.0 * r),
                 _contended(d0, v0, c_d, c_t, started=100.0 * r + 15)]
    p = calibrate(runs, holdout=0.0).replay
    assert p.contention_drafter == pytest.approx(0.1, rel=1e-3)
    assert p.contention_target == pytest.approx(0.05, rel=1e-3)
