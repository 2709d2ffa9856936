"""The adaptive policy (analysis.adaptive_policy): predictions from the batch theory, hysteresis,
switch costs, the acceptance tracker, and the invariants the theory guarantees."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.adaptive_policy import (AcceptanceTracker, AdaptivePolicy, AffineCosts,
                                             LiveState, PolicyConfig, emitted, policy_config,
                                             predict_candidates, rank)
from psdlab.analysis.theory.batch import (AffineDraftTime, AffineVerifyTime, BatchModel,
                                          GeometricRate, ar, psd, sd)

COSTS = AffineCosts(c0=0.010, c_tok=0.001, d0=0.002, d_seq=0.0002, p_tok=0.0001)


def _state(n: int, a: float = 0.8, waiting: int = 0, slots: int = 64, lag: int = 0):
    return LiveState(running=n, waiting=waiting, slots=slots, acceptance=(a,), drafter_lag=lag)


def test_predictions_equal_the_batch_theory():
    a, n = 0.75, 8
    model = BatchModel(AffineVerifyTime(COSTS.c0, COSTS.c_seq, COSTS.c_tok),
                       AffineDraftTime(COSTS.d0, COSTS.d_seq), GeometricRate(a),
                       psd_overhead=0.001)
    cfg = PolicyConfig(k_choices=(2, 3), psd_overhead=0.001)
    got = {c.label: c.score for c in predict_candidates(cfg, _state(n, a), COSTS)}
    assert got["ar"] == pytest.approx(ar(model, n).throughput)
    for k in (2, 3):
        assert got[f"sd{k}"] == pytest.approx(sd(model, n, k).throughput)
        assert got[f"psd{k}"] == pytest.approx(psd(model, n // 2, k).throughput)


def test_emitted_matches_geometric_and_positions():
    for k in range(6):
        assert emitted((0.6,), k) == pytest.approx(GeometricRate(0.6).emitted(k))
    assert emitted((1.0, 0.5, 0.0), 3) == pytest.approx(1 + 1 + 0.5 + 0)


def test_switch_costs_enter_the_score():
    cfg = PolicyConfig(k_choices=(2,), amortize_steps=4)
    st_ = _state(4, lag=400)
    cheap = {c.label: c for c in predict_candidates(cfg, st_, COSTS, current=("sd", 2))}
    dear = {c.label: c for c in predict_candidates(cfg, st_, COSTS, current=("ar", 0))}
    assert cheap["sd2"].switch_cost == 0.0
    assert dear["sd2"].switch_cost == pytest.approx(COSTS.catch_up(4, 400))
    assert dear["sd2"].score < cheap["sd2"].score
    # entering PSD drafts one batch alone first
    assert dear["psd2"].switch_cost == pytest.approx(COSTS.catch_up(4, 400) + COSTS.draft(2, 2))


def test_hysteresis_needs_hold_consecutive_wins():
    pol = AdaptivePolicy(PolicyConfig(k_choices=(2,), hold=3, margin=0.0))
    low, high = _state(1, a=0.95), _state(64, a=0.05)
    first = pol.decide(low, COSTS)
    assert first.mode != "ar" and not first.switched
    for _ in range(2):
        d = pol.decide(high, COSTS)
        assert not d.switched and d.challenger == "ar"
    d = pol.decide(high, COSTS)
    assert d.switched and d.mode == "ar"
    assert pol.stats["switches"] == 1
    assert list(pol.stats["transitions"]) == [f"{first.label}->ar"]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 64), a=st.floats(0.0, 0.99), steps=st.integers(1, 40),
       hold=st.integers(1, 5), margin=st.floats(0.0, 0.3))
def test_no_flapping_on_a_constant_state(n, a, steps, hold, margin):
    pol = AdaptivePolicy(PolicyConfig(hold=hold, margin=margin))
    for _ in range(steps):
        pol.decide(_state(n, a), COSTS)
    assert pol.stats["switches"] == 0      # the first decision picks; nothing to change after


@settings(max_examples=60, deadline=None)
@given(n1=st.integers(1, 64), n2=st.integers(1, 64), a1=st.floats(0.0, 0.99),
       a2=st.floats(0.0, 0.99), steps=st.integers(2, 30), hold=st.integers(2, 5))
def test_alternating_states_never_switch_with_hold_of_two_or_more(n1, n2, a1, a2, steps, hold):
    """A challenger must win `hold` decisions in a row: a state that flips every step around a
    boundary leaves the first choice in place (the current one wins every other time)."""
    pol = AdaptivePolicy(PolicyConfig(hold=hold, margin=0.0))
    first = pol.decide(_state(n1, a1), COSTS)
    for i in range(steps):
        s = _state(n2, a2) if i % 2 == 0 else _state(n1, a1)
        pol.decide(s, COSTS)
    assert pol.current == (first.mode, first.k)
    assert pol.stats["switches"] == 0


affine = st.builds(AffineCosts, c0=st.floats(1e-4, 0.05), c_seq=st.floats(0.0, 1e-3),
                   c_tok=st.floats(1e-5, 1e-2), d0=st.just(0.0), d_seq=st.floats(1e-5, 1e-2))


@settings(max_examples=150, deadline=None)
@given(costs=affine, a=st.floats(0.0, 0.99), n=st.integers(1, 63), extra=st.integers(1, 64))
def test_a_larger_batch_never_picks_a_larger_k(costs, a, n, extra):
    """With a drafter cost per sequence (d0 = 0) and an affine verification, SD's best k and
    SD's lead over AR can only shrink as the batch grows (theory: the fixed cost c0 / n, the
    only term that favours long drafts, shrinks); more waiting requests count as a larger
    batch."""
    cfg = PolicyConfig(modes=("ar", "sd"), k_choices=(1, 2, 3, 4, 6, 8))
    small = rank(cfg, _state(n, a), costs)
    large = rank(cfg, _state(n, a, waiting=extra, slots=128), costs)
    assert large.k <= small.k
    if small.mode == "ar":
        assert large.mode == "ar"


@settings(max_examples=100, deadline=None)
@given(costs=affine, a=st.floats(0.0, 0.9), da=st.floats(0.0, 0.09), n=st.integers(1, 64))
def test_higher_acceptance_never_turns_speculation_off(costs, a, da, n):
    cfg = PolicyConfig()
    lo, hi = rank(cfg, _state(n, a), costs), rank(cfg, _state(n, a + da), costs)
    if lo.mode != "ar":
        assert hi.mode != "ar"
    assert hi.score >= lo.score


def test_tracker_counts_positions_and_falls_back():
    tr = AcceptanceTracker(prior=0.5, prior_weight=0.0, decay=1.0)
    tr.update([(3, 3), (3, 1), (3, 0)])
    # position 1: tried 3, passed 2; position 2: tried 2 (3,3 and 3,1), passed 1; position 3:
    # tried 1, passed 1
    assert tr.rates(3) == pytest.approx((2 / 3, 1 / 2, 1.0))
    assert tr.rates(5)[3:] == pytest.approx((1.0, 1.0))     # untried: as the last position
    tr.update([(0, 0)])                                      # AR rows change nothing
    assert tr.rates(3) == pytest.approx((2 / 3, 1 / 2, 1.0))


def test_tracker_prior_and_decay():
    tr = AcceptanceTracker(prior=0.7, prior_weight=4.0, decay=0.5)
    assert tr.rates(1) == pytest.approx((0.7,))
    tr.update([(1, 0)])
    tr.update([(1, 0)])
    # counts: tried 0.5 + 1 = 1.5, passed 0
    assert tr.rates(1) == pytest.approx((2.8 / 5.5,))


@pytest.mark.parametrize("raw, msg", [
    ({"modes": ["ar", "eagle"]}, "adaptive.modes[1]: must be one of ar, sd, psd"),
    ({"k_choices": [0]}, "adaptive.k_choices[0]: must be in [1, 64]"),
    ({"hold": 0}, "adaptive.hold: must be in [1, 10000]"),
    ({"margin": -0.1}, "adaptive.margin: must be in [0, 10]"),
    ({"objective": "speed"}, "adaptive.objective: must be one of throughput, per-device"),
    ({"decay": 0.0}, "adaptive.decay: must be in (0, 1]"),
    ({"speed": 1}, "adaptive.speed: unknown field"),
    ({"modes": "ar"}, "adaptive.modes: expected a list"),
])
def test_bad_settings_are_one_line_errors(raw, msg):
    with pytest.raises(ValueError) as exc:
        policy_config(raw)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_psd_with_one_sequence_is_predicted_as_sd_and_sd_wins_the_tie():
    cfg = PolicyConfig(modes=("sd", "psd"), k_choices=(2,))
    got = {c.label: c.score for c in predict_candidates(cfg, _state(1), COSTS)}
    assert got["psd2"] == got["sd2"]
    assert rank(cfg, _state(1), COSTS).label == "sd2"
