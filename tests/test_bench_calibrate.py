"""Calibration from serving-benchmark results (``validation.serving_results.calibration``):
synthetic vLLM bench results, simulated from a known cost model with step-time jitter and written by
the vLLM bench writer, must give back that model within the fit's own intervals; the model file
round-trips; a prediction reproduces what the benchmark measured."""
from __future__ import annotations

import math

import pytest
from bench_synth import TRUE_DRAFTER, TRUE_RATES, TRUE_TARGET, write_synth

from psdlab.sim.costs import make_cost_model
from psdlab.validation.serving_results.calibration import BenchFit, fit_from_bench
from psdlab.validation.serving_results.predict import predict_bench

TERMS3 = ("base", "per_seq", "per_token")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    return {"lo": write_synth(d, "ar_lo", "ar", 4.0, 50),
            "hi": write_synth(d, "ar_hi", "ar", 20.0, 50, seed=2),
            "sd": write_synth(d, "sd", "sd", 4.0, 50, seed=3),
            "sd_hi": write_synth(d, "sd_hi", "sd", 16.0, 50, seed=4)}


@pytest.fixture(scope="module")
def fit(synth):
    return fit_from_bench([str(synth[k]) for k in ("lo", "hi", "sd", "sd_hi")],
                          bootstrap=20, target_terms=TERMS3)


# The bootstrap intervals carry the scatter between requests, not the Monte-Carlo noise of the
# replays (docs/bench-calibration.md): they may miss the truth by a few percent of its value, so
# the truth is checked against the interval widened by 5% of each end.
SLACK = 0.05


def _check_term(fit, name, true, rel):
    lo, hi = fit.intervals[name]
    est = fit.target_cost if name.startswith("target.") else fit.drafter_cost
    value = est[name.split(".", 1)[1]]
    assert lo <= value <= hi and lo < hi, (name, lo, value, hi)
    assert lo * (1 - SLACK) <= true <= hi * (1 + SLACK), (name, lo, value, hi, true)
    assert value == pytest.approx(true, rel=rel), name


def test_the_known_target_costs_lie_in_the_fits_intervals(fit):
    for term in TERMS3:
        _check_term(fit, f"target.{term}", TRUE_TARGET[term], 0.10)
    assert fit.target_cost["per_context"] == 0.0          # not fitted: held at 0


def test_the_known_drafter_costs_lie_in_the_fits_intervals(fit):
    """Two speculative loads separate the drafter's fixed and per-sequence costs; the
    drafter's intervals carry the target's uncertainty (its bootstrap replicates)."""
    assert fit.drafter_cost is not None
    for term in ("base", "per_token"):
        _check_term(fit, f"drafter.{term}", TRUE_DRAFTER[term], 0.20)


def test_acceptance_per_position_recovers_the_simulated_rates(fit):
    shares = [math.prod(TRUE_RATES[:i + 1]) for i in range(len(TRUE_RATES))]
    assert fit.k == 3 and fit.acceptance["name"] == "positional"
    for i, share in enumerate(shares, start=1):
        lo, hi = fit.intervals[f"acceptance.p{i}"]
        assert lo <= share <= hi
    assert fit.acceptance["rates"] == pytest.approx(TRUE_RATES, abs=0.06)


def test_the_fit_reproduces_each_runs_mean_latencies(fit):
    for err in fit.fit_error.values():
        assert abs(err["ttft_error"]) < 0.05 and abs(err["tpot_error"]) < 0.05


def test_notes_say_what_the_inputs_cannot_identify(fit):
    text = " ".join(fit.notes)
    assert "host and device time together" in text
    assert "one k (3) only" in text
    assert "beyond 3 is not identified" in text
    assert "one AR load only" not in text          # two loads were given
    assert "one speculative load only" not in text
    assert "step-time spread" in text


def test_model_file_round_trips_and_loads_in_the_simulator(fit, tmp_path):
    path = tmp_path / "model.json"
    fit.save(path)
    back = BenchFit.load(path)
    assert back.target_cost == fit.target_cost and back.acceptance == fit.acceptance
    assert back.intervals == fit.intervals and back.notes == fit.notes
    cost = make_cost_model({"name": "fitted", "path": str(path), "role": "target"})
    assert cost.forward_time(4, 4, 1000) == pytest.approx(
        make_cost_model(dict(fit.target_cost)).forward_time(4, 4, 1000))
    assert not list(tmp_path.glob("*.tmp-*"))


def test_prediction_of_a_run_matches_its_measurement(fit, synth):
    import json
    measured = json.loads(synth["sd"].read_text())
    pred = predict_bench(fit, str(synth["sd"]), mode="sd", k=3, request_rate=None,
                         max_concurrency=None, seed=0)
    for key in ("mean_tpot_ms", "mean_ttft_ms", "output_throughput",
                "spec_decode_acceptance_length"):
        assert pred[key] == pytest.approx(measured[key], rel=0.1), key


def test_a_single_ar_load_is_reported_as_not_separating_fixed_and_per_sequence(synth):
    one = fit_from_bench([str(synth["lo"])], bootstrap=4, target_terms=TERMS3)
    assert any("one AR load only" in n for n in one.notes)
    assert one.drafter_cost is None and one.acceptance is None
    with pytest.raises(ValueError, match="needs a drafter cost"):
        one.sim_config(str(synth["lo"]), "sd", 3)


def test_a_run_at_rate_inf_is_predicted_at_a_finite_rate(fit, tmp_path):
    """All requests at once cannot be re-timed; they are sent as a seeded Poisson stream."""
    burst = write_synth(tmp_path, "burst", "ar", math.inf, 20, seed=5)
    slow = predict_bench(fit, str(burst), mode="ar", k=0, request_rate=2.0,
                         max_concurrency=None, seed=0)
    fast = predict_bench(fit, str(burst), mode="ar", k=0, request_rate=math.inf,
                         max_concurrency=None, seed=0)
    assert slow["duration"] > 5.0 and slow["request_rate"] == 2.0
    assert slow["mean_ttft_ms"] < fast["mean_ttft_ms"]
    again = predict_bench(fit, str(burst), mode="ar", k=0, request_rate=2.0,
                          max_concurrency=None, seed=0)
    assert again["mean_ttft_ms"] == slow["mean_ttft_ms"]          # same seed, same result


def test_a_client_concurrency_cap_holds_requests_back(fit, synth):
    free = predict_bench(fit, str(synth["hi"]), mode="ar", k=0, request_rate=None,
                         max_concurrency=None, seed=0)
    capped = predict_bench(fit, str(synth["hi"]), mode="ar", k=0, request_rate=None,
                           max_concurrency=2, seed=0)
    assert capped["max_concurrency"] == 2
    assert capped["duration"] > free["duration"]
    assert capped["mean_tpot_ms"] < free["mean_tpot_ms"]         # smaller batches
    assert max(capped["queue_times"]) > 0.0


def test_the_expected_acceptance_length_is_the_models_own_value(fit, synth):
    """vLLM's counter ratio (accepted / drafts + 1) tends to 1 + E[accepted of k drafts]."""
    rates = list(fit.acceptance["rates"])
    pred = predict_bench(fit, str(synth["sd"]), mode="sd", k=5, request_rate=None,
                         max_concurrency=None, seed=0)
    expected = 1 + sum(math.prod((rates + [rates[-1]] * 2)[:i + 1]) for i in range(5))
    assert pred["psdlab"]["prediction"]["expected_acceptance_length"] == pytest.approx(expected)
    ar = predict_bench(fit, str(synth["lo"]), mode="ar", k=0, request_rate=None,
                       max_concurrency=None, seed=0)
    assert ar["psdlab"]["prediction"]["expected_acceptance_length"] is None


# ---------------------------------------------------------------- structural prior (SD only)

PRIOR = 0.3


@pytest.fixture(scope="module")
def sd_only(tmp_path_factory):
    """Speculative runs of a drafter whose every coefficient is PRIOR x the target's."""
    d = tmp_path_factory.mktemp("bench_prior")
    drafter = {"name": "affine", **{t: PRIOR * TRUE_TARGET[t] for t in TERMS3}}
    return {"sd": write_synth(d, "sd", "sd", 4.0, 40, seed=3, drafter=drafter),
            "sd_hi": write_synth(d, "sd_hi", "sd", 16.0, 40, seed=4, drafter=drafter),
            "ar": write_synth(d, "ar", "ar", 8.0, 40, seed=6)}


def test_a_structural_prior_recovers_the_target_from_speculative_runs_only(sd_only):
    import json
    fit = fit_from_bench([str(sd_only["sd"]), str(sd_only["sd_hi"])], bootstrap=4,
                         drafter_to_target_ratio=PRIOR)
    assert fit.drafter_to_target_ratio == PRIOR
    for term in TERMS3:
        assert fit.target_cost[term] == pytest.approx(TRUE_TARGET[term], rel=0.2), term
        assert fit.drafter_cost[term] == pytest.approx(PRIOR * fit.target_cost[term])
        lo, hi = fit.intervals[f"target.{term}"]
        assert fit.intervals[f"drafter.{term}"] == pytest.approx((PRIOR * lo, PRIOR * hi))
    text = " ".join(fit.notes)
    assert "comes from this prior, not from the data" in text
    assert "not identified by these data" not in text
    # the target's cost transfers: an AR run it never saw is predicted
    measured = json.loads(sd_only["ar"].read_text())
    pred = predict_bench(fit, str(sd_only["ar"]), mode="ar", k=0, request_rate=None,
                         max_concurrency=None, seed=0)
    for key in ("mean_tpot_ms", "mean_ttft_ms"):
        assert pred[key] == pytest.approx(measured[key], rel=0.12), key


def test_without_the_prior_the_notes_say_the_split_is_not_identified(sd_only):
    fit = fit_from_bench([str(sd_only["sd"])], bootstrap=2)
    assert fit.drafter_to_target_ratio is None
    assert any("split is not identified by these data" in n and "--drafter-ratio" in n
               for n in fit.notes)
