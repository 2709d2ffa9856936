"""Batch-aware AR/SD/PSD model: hand-computed cases, labelled bases, break-even."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.theory import (AffineDraftTime, AffineVerifyTime, BatchModel,
                                    GeometricRate, LeviathanFrontier, ar, best_k, compare,
                                    compare_all, optimal_k, psd, sd)

VER = AffineVerifyTime(0.02, 0.0002, 0.00005)
DRA = AffineDraftTime(0.004, 0.00002)


def model(a=0.8, o=0.0, d=1) -> BatchModel:
    return BatchModel(VER, DRA, GeometricRate(a), psd_overhead=o, target_devices=d)


def _tv(m, k):
    return k * (0.004 + 0.00002 * m), 0.02 + 0.0002 * m + 0.00005 * m * (k + 1)


def test_modes_by_hand():
    m, k, a = 16, 3, 0.8
    t, v = _tv(m, k)
    e = 1 + a + a * a + a ** 3
    mod = model(a)
    assert ar(mod, m).throughput == pytest.approx(m / (0.02 + 0.0002 * m + 0.00005 * m))
    s, p = sd(mod, m, k), psd(mod, m, k)
    assert s.throughput == pytest.approx(m * e / (t + v)) and s.tpot == pytest.approx((t + v) / e)
    assert p.throughput == pytest.approx(m * e / max(t, v))
    assert p.tpot == pytest.approx(2 * max(t, v) / e)
    assert p.concurrency == 2 * m and p.devices == s.devices + 1


def test_iso_batch_break_even_overhead():
    m, k = 16, 3
    t, v = _tv(m, k)
    c = compare(model(), m, "iso-batch", k=k)
    assert c.basis == "iso-batch"
    assert c.gain == pytest.approx((t + v) / max(t, v))
    assert c.break_even_overhead == pytest.approx(min(t, v))
    at_break_even = compare(model(o=c.break_even_overhead), m, "iso-batch", k=k)
    assert at_break_even.gain == pytest.approx(1.0)
    assert not compare(model(o=1.01 * c.break_even_overhead), m, "iso-batch", k=k).psd_wins


def test_per_device_and_iso_concurrency():
    m, k = 16, 2
    t, v = _tv(m, k)
    th, vh = _tv(m / 2, k)
    pd = compare(model(d=4), m, "per-device", k=k)
    assert pd.gain == pytest.approx((t + v) / max(t, v) * 4 / 5)
    assert pd.break_even_overhead == pytest.approx((t + v) * 4 / 5 - max(t, v))
    ic = compare(model(), m, "iso-concurrency", k=k)
    assert ic.psd.m == m / 2 and ic.psd.concurrency == ic.sd.concurrency
    assert ic.gain == pytest.approx((t + v) / (2 * max(th, vh)))
    assert ic.break_even_overhead == pytest.approx((t + v) / 2 - max(th, vh))
    assert [c.basis for c in compare_all(model(), m)] == ["iso-batch", "iso-concurrency",
                                                         "per-device"]
    assert [c.basis for c in compare_all(model(), 15)] == ["iso-batch", "per-device"]


def test_best_k_matches_enumeration_and_frontier_optimiser():
    mod = model(0.85)
    for mode, fn in (("sd", sd), ("psd", psd)):
        best = best_k(mod, mode, 16, k_max=12)
        assert best.throughput == max(fn(mod, 16, k).throughput for k in range(1, 13))
    # m = 1 with constant V and t = c k is the Leviathan 'emitted' frontier problem
    V, c, a = 0.03, 0.004, 0.85
    one = BatchModel(AffineVerifyTime(V), AffineDraftTime(c), GeometricRate(a))
    ko = optimal_k(LeviathanFrontier(a, c, count="emitted"), V, k_max=40)
    assert best_k(one, "sd", 1, 40).k == ko.k_sd
    assert best_k(one, "psd", 1, 40).k == ko.k_psd


@settings(deadline=None, max_examples=40)
@given(c0=st.floats(1e-4, 1.0), cs=st.floats(0, 1e-2), ct=st.floats(0, 1e-2),
       d0=st.floats(1e-5, 0.1), ds=st.floats(0, 1e-3), a=st.floats(0.0, 0.99),
       m=st.integers(1, 128), k=st.integers(1, 8), o=st.floats(0, 0.01))
def test_psd_never_helps_per_request_latency_iso_batch(c0, cs, ct, d0, ds, a, m, k, o):
    mod = BatchModel(AffineVerifyTime(c0, cs, ct), AffineDraftTime(d0, ds), GeometricRate(a),
                     psd_overhead=o)
    c = compare(mod, m, "iso-batch", k=k)
    assert c.latency_ratio >= 1.0 - 1e-12
    if abs(o - c.break_even_overhead) > 1e-9 * c.sd.step_time:    # away from float ties
        assert (c.gain > 1.0) == (o < c.break_even_overhead)
    assert c.gain <= 2.0 + 1e-12


@pytest.mark.parametrize("call, name", [
    (lambda: sd(model(), 0, 2), "m"),
    (lambda: sd(model(), 4, 0), "k"),
    (lambda: psd(model(), 4, -1), "k"),
    (lambda: psd(model(), 0, 2), "m"),
    (lambda: ar(model(), 2.5), "m"),
    (lambda: GeometricRate(1.0), "a"),
    (lambda: GeometricRate(float("nan")), "a"),
    (lambda: compare(model(), 15, "iso-concurrency"), "m"),
    (lambda: compare(model(), 16, "iso-device"), "basis"),
    (lambda: best_k(model(), "sd", 4, k_max=0), "k_max"),
    (lambda: BatchModel(VER, DRA, GeometricRate(0.5), psd_overhead=-1), "psd_overhead"),
    (lambda: BatchModel(VER, DRA, GeometricRate(0.5), target_devices=0), "target_devices"),
    (lambda: AffineVerifyTime(-0.1), "c0"),
])
def test_bad_input_names_parameter(call, name):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value).startswith(name + ":") and "\n" not in str(err.value)
