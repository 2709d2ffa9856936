"""`psdlab validate` and validation.compare / gains / replay_model / sim_costs / report.

The main check closes the loop on a machine whose truth is known: traces made by the simulator
itself (affine costs, positional acceptance) are "measured", the simulator is calibrated on
some of them (k in {2, 4}, one batch size, offline) and must predict the held-out others (k = 3
and 5, another batch size, Poisson arrivals) within the package's own targets."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.analysis.metrics import summarize
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified,
                            write_trace)
from psdlab.cli import main
from psdlab.sim.sim_config import config_from_dict
from psdlab.sim.simulation import simulate
from psdlab.sim.workloads import read_requests
from psdlab.validation.calibrate import calibrate
from psdlab.validation.compare import flatten, rel_error, write_replay
from psdlab.validation.gains import closed_form, gain_rows, pair_traces, workload_key
from psdlab.sim.costs.fitted import read_fit_file, write_fit
from psdlab.validation.model_file import model_parts
from psdlab.validation.phase_model import serial_only
from psdlab.validation.replay_model import (ReplayParams, contention_scales, load_replay_params,
                                            replay_params, step_overheads, store_replay_params)
from psdlab.sim.costs.calibrated import calibrated_cost
from psdlab.validation.validate import calibration_configs, validate

TARGET = {"name": "affine", "base": 0.02, "per_seq": 1e-3, "per_token": 5e-4,
          "per_context": 1e-6}
DRAFTER = {"name": "affine", "base": 3e-3, "per_seq": 2e-4, "per_token": 2e-4,
           "per_context": 0.0}
RATES = [0.85, 0.75, 0.65, 0.6, 0.55]


def sim_trace(mode: str, k: int, m: int, workload: dict | None = None, seed: int = 7,
              requests: int = 24) -> Trace:
    raw = {"seed": seed, "requests": requests,
           "server": {"mode": mode, "k": k, "m": m,
                      "policy": "rebalance" if mode == "psd" else "paper"},
           "target": {"name": "t", "cost": TARGET}, "drafter": {"name": "d", "cost": DRAFTER},
           "acceptance": {"name": "positional", "rates": RATES},
           "workload": workload or {"name": "offline",
                                    "prompt": {"name": "uniform", "low": 20, "high": 60},
                                    "output": {"name": "fixed", "value": 40}}}
    return simulate(config_from_dict(raw)).trace


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """Calibrate on sim traces at k in {2, 4}, m = 4, offline; return the model and the
    held-out traces."""
    d = tmp_path_factory.mktemp("loop")
    cal = {f"{mode}_k{k}": sim_trace(mode, k, 4) for mode in ("sd-sep", "psd") for k in (2, 4)}
    cal["ar"] = sim_trace("ar", 0, 4)
    path = str(d / "model.json")
    write_fit(path, *model_parts(calibrate([serial_only(t) for t in cal.values()])))
    store_replay_params(path, replay_params(list(cal.values()), read_fit_file(path, "model").doc))
    poisson = {"name": "poisson", "rate": 40.0,
               "prompt": {"name": "uniform", "low": 20, "high": 60},
               "output": {"name": "fixed", "value": 40}}
    held = {}
    for mode in ("sd-sep", "psd"):
        held[f"{mode}_k3"] = sim_trace(mode, 3, 4, seed=11)
        held[f"{mode}_k5"] = sim_trace(mode, 5, 4, seed=12)
        held[f"{mode}_m2"] = sim_trace(mode, 4, 2, seed=13)
        held[f"{mode}_poisson"] = sim_trace(mode, 4, 4, poisson, seed=14)
    return path, held, d


def test_heldout_predictions_within_targets(loop):
    path, held, _ = loop
    v = validate(path, list(held.items()), seeds=(0, 1, 2))
    rows = {(r.run, r.metric): r for r in v.rows}
    for name in held:
        for metric, bound in (("throughput_tok_s", 0.05), ("tpot.mean", 0.05),
                              ("e2e.p99", 0.10)):
            err = rows[(name, metric)].error
            assert abs(err) <= bound, (name, metric, err)
    gains = [r for r in v.rows if r.metric == "gain.throughput_tok_s"]
    assert len(gains) == 4                       # k3, k5, m2, poisson pairs
    assert all(abs(r.error) <= 5.0 for r in gains)
    assert all(s["within"] for s in v.summary() if s["source"] == "sim")


def test_prediction_tracks_a_wrong_model(loop):
    """A model file whose costs (fits and measured-shape table) are doubled must predict about
    half the throughput: the replay really uses the calibrated costs."""
    path, held, d = loop
    doc = json.loads(open(path).read())
    for role in doc["roles"].values():
        role["coef"] = {t: 2 * v for t, v in role["coef"].items()}
    for rows in (doc["meta"].get("tables") or {}).values():      # measured shapes too
        for row in rows:
            row[2] *= 2
    slow = d / "slow.json"
    slow.write_text(json.dumps(doc))
    tr = held["sd-sep_k3"]
    fast = validate(path, [("x", tr)], seeds=(0,)).comparisons[0].predicted
    slowp = validate(str(slow), [("x", tr)], seeds=(0,)).comparisons[0].predicted
    assert slowp["throughput_tok_s"] == pytest.approx(fast["throughput_tok_s"] / 2, rel=0.1)


def test_replay_file_is_the_measured_workload(tmp_path):
    tr = sim_trace("sd-sep", 3, 2, {"name": "poisson", "rate": 5.0,
                                    "prompt": {"name": "uniform", "low": 5, "high": 50},
                                    "output": {"name": "uniform", "low": 2, "high": 30}})
    rs = read_requests(write_replay(tr, tmp_path / "w.csv"))
    reqs = sorted(tr.requests, key=lambda r: r.arrival)
    assert list(rs.prompt_len) == [r.prompt_len for r in reqs]
    assert list(rs.output_len) == [r.output_len for r in reqs]
    assert np.allclose(rs.arrival, [r.arrival - reqs[0].arrival for r in reqs])
    assert rs.keys == tuple(str(r.id) for r in reqs)


def test_replay_keeps_the_admission_order_of_simultaneous_arrivals(tmp_path):
    """A trace lists requests as they finish; offline requests (all arriving at 0) must be
    replayed in the order the engine admitted them, or the replay serves other requests
    first."""
    tr = sim_trace("sd-sep", 3, 2, requests=8)
    finish_order = [r.id for r in tr.requests]
    admit_order = sorted(finish_order)            # the simulator admits in id order
    assert finish_order != admit_order            # else the test would test nothing
    rs = read_requests(write_replay(tr, tmp_path / "w.csv"))
    assert list(rs.keys) == [str(i) for i in admit_order]
    # a runtime names requests and admits them one at a time, in its own order
    named = [replace(r, id=f"q{7 - r.id}", admitted=0.01 * r.id) for r in tr.requests]
    rs = read_requests(write_replay(replace(tr, requests=named), tmp_path / "n.csv"))
    assert list(rs.keys) == [f"q{7 - i}" for i in admit_order]


def test_pairs_only_same_workload():
    a, b = sim_trace("sd-sep", 3, 2), sim_trace("psd", 3, 2)
    c = sim_trace("psd", 4, 2)
    d = sim_trace("psd", 3, 2, requests=20)
    named = [("sd", a), ("psd_other_k", c), ("psd_fewer", d), ("psd", b)]
    assert pair_traces(named) == [("sd", "psd")]
    assert workload_key(a) == workload_key(b) != workload_key(d)


def _step(i, t0, d, v, overlapped, gap=0.0):
    if overlapped:
        end = t0 + max(d, v) + gap
        ph = (Phase("verify", "cpu:1", t0, t0 + v, 2, 10), Phase("draft", "cpu:0", t0, t0 + d,
                                                                  2, 8))
    else:
        end = t0 + d + v + gap
        ph = (Phase("draft", "cpu:0", t0, t0 + d, 2, 8),
              Phase("verify", "cpu:1", t0 + d, t0 + d + v, 2, 10))
    return StepRecord(i, t0, end, ph, (Verified("a", 4, 2, 3), Verified("b", 4, 2, 3)),
                      overlapped=overlapped)


def _hand_trace(mode, d, v, gap, n=20):
    run = RunInfo(mode=mode, k=4, m=2, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"})
    steps, t = [], 0.0
    for i in range(n):
        s = _step(i, t, d, v, mode == "psd", gap)
        steps.append(s)
        t = s.end
    reqs = [RequestRecord(r, 0.0, 0.0, 0.0, t, 10, 3 * n) for r in ("a", "b")]
    return Trace(run, steps, reqs)


@settings(deadline=None, max_examples=25)
@given(st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.0, 0.05))
def test_closed_form_constant_times(d, v, gap):
    """Constant t and V: speedup = (t + V + o) / (max(t, V) + o), jitter or not."""
    cf = closed_form(_hand_trace("sd-sep", d, v, gap), _hand_trace("psd", d, v, gap))
    want = (d + v + gap) / (max(d, v) + gap)
    assert cf.speedup == pytest.approx(want, rel=1e-6)
    assert cf.speedup_deterministic == pytest.approx(want, rel=1e-6)
    assert cf.overhead == pytest.approx(gap, abs=1e-9)
    assert 1.0 <= cf.speedup <= 2.0 + 1e-9
    slow = closed_form(_hand_trace("sd-sep", d, v, gap), _hand_trace("psd", d, v, gap),
                       slowdown=(2.0, 1.5))
    assert slow.speedup_slowdown == pytest.approx((d + v + gap) / (max(1.5 * d, 2 * v) + gap),
                                                  rel=1e-6)


def test_closed_form_reads_full_batches_and_is_judged_in_the_steady_state():
    """t and V come from the SD steps before the last admission; the judged comparison is
    the steady-state speedup, the whole-run one (drain tail included) is only listed."""
    def with_tail(mode, d, v):
        tr = _hand_trace(mode, d, v, 0.0, n=10)
        t, steps = tr.steps[-1].end, list(tr.steps)
        for i in range(10, 16):                       # the drain: one sequence, half the cost
            s = _step(i, t, d / 2, v / 2, mode == "psd")
            steps.append(replace(s, verified=s.verified[:1]))
            t = steps[-1].end
        admitted = tr.steps[9].start                  # last admission: before step 9 starts
        reqs = [replace(r, admitted=admitted, finish=t) for r in tr.requests]
        return Trace(tr.run, steps, reqs)
    sd, psd = with_tail("sd-sep", 0.1, 0.2), with_tail("psd", 0.1, 0.2)
    cf = closed_form(sd, psd)
    assert (cf.t, cf.V) == pytest.approx((0.1, 0.2))          # the drain's halves left out
    rows = {r.metric: r for r in gain_rows("g", flatten(summarize(sd)), flatten(summarize(psd)),
                                           None, None, cf)}
    assert rows["speedup.steady"].measured == pytest.approx(0.3 / 0.2)
    assert rows["speedup.steady"].error == pytest.approx(0.0, abs=1e-9)
    assert rows["speedup.decode"].measured < rows["speedup.steady"].measured
    assert closed_form(_hand_trace("sd-sep", 0.1, 0.2, 0.0, n=3),
                       _hand_trace("psd", 0.1, 0.2, 0.0, n=3)).t == pytest.approx(0.1)


def test_step_overheads_split_serial_and_overlapped():
    s, o, ar = step_overheads([_hand_trace("sd-sep", 0.1, 0.2, 0.01),
                               _hand_trace("psd", 0.1, 0.2, 0.03)])
    assert s == pytest.approx(0.01) and o == pytest.approx(0.03) and ar == 0.0
    # the controller's pause before the next step counts too (not a wait for an arrival)
    tr = _hand_trace("sd-sep", 0.1, 0.2, 0.01, n=4)
    spaced = [replace(st_, start=st_.start + 0.004 * i, end=st_.end + 0.004 * i,
                      phases=tuple(replace(p, start=p.start + 0.004 * i, end=p.end + 0.004 * i)
                                   for p in st_.phases)) for i, st_ in enumerate(tr.steps)]
    s2, _, _ = step_overheads([replace(tr, steps=spaced)])
    assert s2 == pytest.approx(0.01 + 0.004 * 3 / 4)
    late = [replace(st_, start=st_.start + 5 * i, end=st_.end + 5 * i,
                    phases=tuple(replace(p, start=p.start + 5 * i, end=p.end + 5 * i)
                                 for p in st_.phases)) for i, st_ in enumerate(tr.steps)]
    assert step_overheads([replace(tr, steps=late)])[0] == pytest.approx(0.01)
    assert all(not st_.overlapped for st_ in serial_only(_hand_trace("psd", .1, .2, 0)).steps)


def test_prefill_overheads_per_run_kind_and_added_to_prefill_passes_only(tmp_path):
    """A prefill step's time beyond its longest prefill phase, plus the pause before the next
    step, is the prefill overhead (runs with a drafter and AR runs apart); the replay adds it
    to the target's prefill passes (no cached context), not to its decode passes."""
    from psdlab.validation.replay_model import prefill_overheads

    def with_prefill(mode, tail, pause):
        tr = _hand_trace(mode, 0.1, 0.2, 0.0, n=3)
        shift = 0.5 + tail + pause
        steps = [replace(st_, index=st_.index + 1, start=st_.start + shift,
                         end=st_.end + shift,
                         phases=tuple(replace(p, start=p.start + shift, end=p.end + shift)
                                      for p in st_.phases)) for st_ in tr.steps]
        pre = (Phase("prefill", "cpu:1", 0.0, 0.5, 2, 40),
               Phase("prefill", "cpu:0", 0.0, 0.2, 2, 40))
        return replace(tr, steps=[StepRecord(0, 0.0, 0.5 + tail, pre)] + steps)
    assert prefill_overheads([with_prefill("sd-sep", 0.004, 0.002),
                              with_prefill("ar", 0.001, 0.0)]) == pytest.approx((0.006, 0.001))
    # a long pause is a wait for an arrival, not controller work
    assert prefill_overheads([with_prefill("psd", 0.004, 2.0)]) == pytest.approx((0.004, 0.0))
    serial = _hand_trace("sd-sep", 0.1, 0.2, 0.0, n=12)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(calibrate([serial], holdout=0.0)))
    base = calibrated_cost(path, "target")
    more = calibrated_cost(path, "target", prefill_overhead=0.03)
    assert more.forward_time(2, 40, 0) == pytest.approx(base.forward_time(2, 40, 0) + 0.03)
    assert more.forward_time(2, 10, 50) == pytest.approx(base.forward_time(2, 10, 50))
    p = ReplayParams(overhead_prefill=0.02, overhead_prefill_ar=0.005)
    assert (p.prefill_overhead("psd"), p.prefill_overhead("ar")) == (0.02, 0.005)


def _rows_trace(mode, rows, d, v, n=12):
    """A trace of n decode steps of ``rows`` sequences, k = 4 (verify 5 tokens a row)."""
    ids = [f"r{i}" for i in range(rows)]
    steps, t = [], 0.0
    for i in range(n):
        if mode == "psd":
            ph = (Phase("verify", "cpu:1", t, t + v, rows, 5 * rows),
                  Phase("draft", "cpu:0", t, t + d, rows, 4 * rows))
            end = t + max(d, v)
        else:
            ph = (Phase("draft", "cpu:0", t, t + d, rows, 4 * rows),
                  Phase("verify", "cpu:1", t + d, t + d + v, rows, 5 * rows))
            end = t + d + v
        steps.append(StepRecord(i, t, end, ph, tuple(Verified(r, 4, 2, 3) for r in ids),
                                overlapped=mode == "psd"))
        t = end
    run = RunInfo(mode=mode, k=4, m=rows, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"})
    return Trace(run, steps, [RequestRecord(r, 0.0, 0.0, 0.0, t, 10, 3 * n) for r in ids])


def test_contention_compares_overlapped_phases_with_serial_ones_of_their_shape():
    """Serial verification costs 0.10 s for 1 row, 0.30 s for 2 and 0.31 s for 4 (a step
    function no affine fit follows); PSD steps of 2 and 4 rows take exactly the serial times:
    no contention, no overlap slowdown, no jitter -- although the affine fit misses both
    shapes.  A shape serial steps never had is left out of the comparison."""
    serial = [_rows_trace("sd-sep", r, 0.05 * r, v) for r, v in ((1, 0.10), (2, 0.30),
                                                                  (4, 0.31))]
    psd = [_rows_trace("psd", 2, 0.1, 0.30), _rows_trace("psd", 4, 0.2, 0.31),
           _rows_trace("psd", 3, 0.15, 0.9, n=4)]                 # no serial 3-row steps
    p = calibrate(serial + psd, holdout=0.0).replay
    assert p.contention_target == pytest.approx(0.0, abs=1e-9)
    assert p.contention_drafter == pytest.approx(0.0, abs=1e-9)
    assert p.overlap_target == pytest.approx(1.0) and p.jitter_cv == pytest.approx(0.0)


def test_overlap_slowdown_measured_against_serial_fit(tmp_path):
    """Overlapped phases 1.5x slower than serial ones: the slowdown says 1.5."""
    serial = _hand_trace("sd-sep", 0.1, 0.2, 0.0)
    psd = _hand_trace("psd", 0.15, 0.3, 0.0)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(calibrate([serial_only(serial), serial_only(psd)], holdout=0.0)))
    p = replay_params([serial, psd], read_fit_file(path, "model").doc)
    assert p.slowdown == pytest.approx((1.5, 1.5), rel=1e-3)
    assert p.scales("sd-sep") == pytest.approx((1.0, 1.0), rel=1e-3)
    assert p.scales("psd") == pytest.approx((1.5, 1.5), rel=1e-3)
    store_replay_params(path, p)
    assert load_replay_params(json.loads(open(path).read())) == p
    bad = {"meta": {"replay": {"overlap_target": -1, "serial_drafter": 0, "overhead_serial": 0}}}
    assert load_replay_params(bad) == ReplayParams()


def test_calibrate_is_unbiased_for_the_mean_of_a_noisy_fit(tmp_path):
    """Heavy-tailed phase times: a pure relative-error fit sits below the mean; the model file
    of `calibrate` predicts the measured mean itself (no later correction needed)."""
    from psdlab.validation.phase_model import collect_phases, design
    from psdlab.validation.nnls_fit import fit_nonneg
    rng = np.random.default_rng(0)
    tr = _hand_trace("sd-sep", 0.1, 0.2, 0.0, n=200)
    noisy = []
    for s in tr.steps:
        f = float(rng.lognormal(0.0, 0.5))
        ph = tuple(replace(p, end=p.start + f * (p.end - p.start)) for p in s.phases)
        noisy.append(replace(s, phases=ph, end=max(p.end for p in ph)))
    tr = replace(tr, steps=noisy)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(calibrate([tr], holdout=0.0)))
    v = [x.end - x.start for s in tr.steps for x in s.phases if x.kind == "verify"]
    rows = collect_phases([tr])[0]["verify"]
    raw = fit_nonneg(design("verify", [p for p, _ in rows]), np.array([d for _, d in rows]),
                     ("base", "per_token", "per_seq", "per_context"), holdout=0.0)
    raw_mean = float(np.mean(raw.predict(design("verify", [p for p, _ in rows]))))
    assert raw_mean < 0.9 * np.mean(v)                       # the bias this fixes
    doc = json.loads(open(path).read())
    coef = doc["roles"]["target"]["coef"]
    fitted = coef["base"] + 2 * coef["per_seq"] + 10 * coef["per_token"] + 0 * coef["per_context"]
    assert fitted == pytest.approx(np.mean(v), rel=1e-6)
    d = [x.end - x.start for s in tr.steps for x in s.phases if x.kind == "draft"]
    dc = doc["roles"]["drafter"]["coef"]
    assert 4 * dc["base"] + 8 * (dc["per_token"] + dc["per_seq"]) == pytest.approx(np.mean(d),
                                                                                   rel=1e-6)
    p = load_replay_params(doc)
    assert p.serial_target == pytest.approx(1.0) and p.serial_drafter == pytest.approx(1.0)


def test_calibrated_cost_uses_prefill_fit_without_context(tmp_path):
    doc = {"format": "psdlab.cost-fit", "version": 1, "meta": {}, "roles": {
        "target": {"kind": "affine", "coef": {"base": 0.1, "per_token": 0.01}},
        "target:prefill": {"kind": "affine", "coef": {"base": 0.5, "per_token": 0.002}}}}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    c = calibrated_cost(str(path), "target", overhead=0.05, scale=2.0, prefill_scale=1.5)
    assert c.forward_time(4, 100, 0) == pytest.approx(1.5 * (0.5 + 0.2))     # prefill fit
    assert c.forward_time(4, 20, 80) == pytest.approx(2 * (0.1 + 0.2) + 0.05)
    arr = c.forward_time(np.array([4, 4]), np.array([100, 20]), np.array([0, 80]))
    assert np.allclose(arr, [1.05, 0.65])
    with pytest.raises(ValueError, match="role"):
        calibrated_cost(str(path), "drafter")


@settings(deadline=None, max_examples=50)
@given(st.floats(0.1, 100.0), st.floats(-0.9, 2.0))
def test_rel_error_roundtrip(measured, err):
    assert rel_error(measured * (1 + err), measured) == pytest.approx(err, abs=1e-9)


def test_flatten():
    f = flatten({"a": 1, "ttft": {"p99": 2.0, "mean": None}, "s": "x", "b": True})
    assert f == {"a": 1.0, "ttft.p99": 2.0, "ttft.mean": None}


# ---------------------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def cli_files(loop):
    path, held, d = loop
    files = []
    for name in ("sd-sep_k3", "psd_k3"):
        p = d / f"{name}.jsonl"
        write_trace(p, held[name])
        files.append(str(p))
    return path, files, d


def test_cli_json_table(cli_files, capsys):
    path, files, _ = cli_files
    assert main(["validate", "--model", path, *files, "--seeds", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    metrics = {r["metric"] for r in doc["rows"]}
    for key in ("throughput_tok_s", "ttft.p99", "tpot.p50", "e2e.p90", "acceptance_rate",
                "gain.throughput_tok_s", "speedup.decode", "speedup.steady"):
        assert key in metrics
    assert {r["run"] for r in doc["rows"]} >= {"sd-sep_k3", "psd_k3"}


def test_cli_report_folder(cli_files, capsys, tmp_path):
    path, files, _ = cli_files
    out = tmp_path / "rep"
    assert main(["validate", "--model", path, *files, "--seeds", "1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "PSD/SD gain" in text and "within" in text
    for f in ("report.md", "comparison.csv", "summary.csv", "runs.csv", "calibration.csv",
              "predicted_vs_measured.png", "gains.png", "phase_fit.png", "schedule.csv"):
        assert (out / f).is_file(), f
    md = (out / "report.md").read_text()
    assert "![simulator vs measured](predicted_vs_measured.png)" in md
    assert "## Does the replay take the run's schedule?" in md
    assert "P(noise alone breaks bound)" in md


def test_cli_bad_input_one_line(cli_files, capsys, tmp_path):
    path, files, _ = cli_files
    bad = tmp_path / "bad.jsonl"
    lines = open(files[0]).read().splitlines()
    # line 4 cut short with records after it (a cut LAST line is read up to, with a warning)
    bad.write_text("\n".join(lines[:3] + [lines[3][:20]] + lines[4:6]) + "\n")
    assert main(["validate", "--model", path, str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ":4:" in err
    assert main(["validate", "--model", str(tmp_path / "none.json"), files[0]]) == 2
    assert main(["validate", "--model", path, files[0], "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_contention_fit_recovers_known_coefficients():
    """Overlapped phases made by the contention model (solo 0.1 / 0.2 s, c = 0.3 / 0.2): the
    calibration recovers c, and the replay scales reproduce the overlapped phase times."""
    d0, v0, c_d, c_t = 0.1, 0.2, 0.3, 0.2
    t_scale, d_scale = contention_scales(d0, v0, c_d, c_t)
    serial = _hand_trace("sd-sep", d0, v0, 0.0)
    psd = _hand_trace("psd", d0 * d_scale, v0 * t_scale, 0.0)
    p = calibrate([serial, psd], holdout=0.0).replay
    assert p.contention_drafter == pytest.approx(c_d, rel=1e-3)
    assert p.contention_target == pytest.approx(c_t, rel=1e-3)
    assert p.scales("psd", d0, v0) == pytest.approx((t_scale, d_scale), rel=1e-3)
    assert p.scales("sd-sep", d0, v0) == pytest.approx((1.0, 1.0), rel=1e-6)
    assert d0 * d_scale == pytest.approx(d0 / (1 - c_d))        # the shorter one: all overlapped


@settings(deadline=None, max_examples=50)
@given(st.floats(0.01, 1.0), st.floats(0.01, 1.0), st.floats(0.0, 0.8), st.floats(0.0, 0.8))
def test_contention_scales_bounds(a, b, c_d, c_t):
    """Each phase is slowed at least not at all and at most as if overlapped all along; the
    phase that finishes first is overlapped all along."""
    t, d = contention_scales(a, b, c_d, c_t)
    assert 1.0 - 1e-12 <= t <= 1.0 / (1.0 - c_t) + 1e-9
    assert 1.0 - 1e-12 <= d <= 1.0 / (1.0 - c_d) + 1e-9
    if a / (1 - c_d) <= b / (1 - c_t):
        assert d == pytest.approx(1.0 / (1.0 - c_d))
    else:
        assert t == pytest.approx(1.0 / (1.0 - c_t))


def slowed(tr: Trace, f: float) -> Trace:
    """The trace with every time stretched by ``f`` (a run on a machine ``f`` times slower)."""
    steps = [replace(s, start=f * s.start, end=f * s.end) for s in tr.steps]
    reqs = [replace(r, first_token=f * r.first_token, finish=f * r.finish) for r in tr.requests]
    return Trace(tr.run, steps, reqs)


def test_repeats_compared_as_their_median(loop):
    """Runs named CONFIG_rN of one workload are one comparison whose measured value is the
    median over the repeats; the prediction is the same as for one of them."""
    path, held, _ = loop
    base = held["sd-sep_k3"]

    reps = [("x_r1", slowed(base, 1.0)), ("x_r2", slowed(base, 1.3)), ("x_r3", slowed(base, 0.9))]
    v = validate(path, reps, seeds=(0,))
    assert [c.name for c in v.comparisons] == ["x"] and len(v.comparisons[0].repeats) == 3
    one = validate(path, [("y", base)], seeds=(0,)).comparisons[0]
    c = v.comparisons[0]
    assert c.measured["makespan_s"] == pytest.approx(one.measured["makespan_s"])   # median
    assert c.predicted["throughput_tok_s"] == pytest.approx(one.predicted["throughput_tok_s"])
    assert c.spread["makespan_s"] == pytest.approx(0.4, rel=1e-6)
    # the repeats' spread is the measurement's noise the summary weighs the errors against
    thr = next(s for s in v.summary() if s["metric"] == "throughput_tok_s")
    cv = v.noise_cvs["throughput_tok_s"]
    assert cv > 0.1 and thr["noise_se"] == pytest.approx(cv * np.sqrt(0.4487))
    assert thr["error_over_noise"] == pytest.approx(thr["max_abs_error"] / thr["noise_se"])
    assert 0.0 < thr["noise_break_chance"] < 1.0
    single = next(s for s in validate(path, [("y", base)], seeds=(0,)).summary()
                  if s["metric"] == "throughput_tok_s")
    assert single["noise_se"] is None and single["noise_break_chance"] is None
    other = validate(path, [("x_r1", base), ("x_r2", held["sd-sep_k5"])], seeds=(0,))
    assert len(other.comparisons) == 2                 # different workloads: not grouped


def test_repeats_on_other_prompts_are_predicted_each_on_its_own_workload(loop):
    """Repeats that serve other prompts (the demo's rotating windows: other ids, other prompt
    lengths) are predicted like they are measured: each repeat's own workload replayed, the
    median over the repeats; a workload served twice counts twice."""
    path, held, _ = loop
    base = held["sd-sep_k3"]
    longer = Trace(base.run, base.steps,
                   [replace(r, id=f"w2-{r.id}", prompt_len=4 * r.prompt_len + 200)
                    for r in base.requests])
    names = {"x_r1": "x", "x_r2": "x", "x_r3": "x"}
    v = validate(path, [("x_r1", base), ("x_r2", longer), ("x_r3", longer)], seeds=(0,),
                 groups=names)
    assert [c.name for c in v.comparisons] == ["x"]
    alone = {n: validate(path, [(n, t)], seeds=(0,)).comparisons[0].predicted
             for n, t in (("a", base), ("b", longer))}
    got = v.comparisons[0].predicted
    assert alone["b"]["ttft.mean"] > 1.05 * alone["a"]["ttft.mean"]     # prefill matters
    for key in ("ttft.mean", "makespan_s", "e2e.p99"):
        assert got[key] == pytest.approx(alone["b"][key])      # median of a, b, b
    two = validate(path, [("x_r1", base), ("x_r2", longer)], seeds=(0,), groups=names)
    mid = two.comparisons[0].predicted["ttft.mean"]
    assert mid == pytest.approx((alone["a"]["ttft.mean"] + alone["b"]["ttft.mean"]) / 2)


def test_overlap_share_of_overlapped_and_serial_steps():
    from psdlab.validation.replay_scales import overlap_share
    assert overlap_share(_hand_trace("psd", 0.1, 0.2, 0.0)) == pytest.approx((1.0, 1.0))
    assert overlap_share(_hand_trace("sd-sep", 0.1, 0.2, 0.0)) == pytest.approx((0.0, 0.0))
    mixed = _hand_trace("psd", 0.1, 0.2, 0.0)
    mixed = replace(mixed, steps=mixed.steps + _hand_trace("sd-sep", 0.1, 0.2, 0.0).steps)
    assert overlap_share(mixed) == pytest.approx((0.5, 0.5))


def test_verify_table_overrides_the_fit_for_measured_shapes(tmp_path):
    """A shape seen often enough in calibration keeps its measured mean in the replay (the
    CPU's GEMM time is not monotonic in rows); smaller shapes use the affine fit, larger ones
    the largest shape's time plus the fit's increment."""
    from psdlab.validation.calibrate import MIN_TABLE
    serial = _hand_trace("sd-sep", 0.1, 0.2, 0.0, n=MIN_TABLE + 3)
    cal = calibrate([serial], holdout=0.0)
    assert [(sq, tk, n) for sq, tk, _, n, _ in cal.verify_table] == [(2, 10, MIN_TABLE + 3)]
    assert cal.verify_table[0][2] == pytest.approx(0.2)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(cal))
    doc = json.loads(open(path).read())
    coef = doc["roles"]["target"]["coef"]
    doc["meta"]["tables"]["target"] = [[2, 10, 0.5, 9]]          # pretend: a slow shape
    (tmp_path / "t.json").write_text(json.dumps(doc))
    c = calibrated_cost(str(tmp_path / "t.json"), "target")
    assert c.forward_time(2, 10, 50) == pytest.approx(0.5)
    def fit(sq, tk):
        return coef["base"] + sq * coef["per_seq"] + tk * coef["per_token"] + \
            50 * coef["per_context"]
    # past the table's largest shape: its time plus the fit's increment from there
    beyond = 0.5 + fit(3, 12) - fit(2, 10)
    assert c.forward_time(3, 12, 50) == pytest.approx(beyond)
    assert c.forward_time(1, 4, 50) == pytest.approx(fit(1, 4))        # inside: the fit
    assert np.allclose(c.forward_time(np.array([2, 3]), np.array([10, 12]), 50.0),
                       [0.5, beyond])
    assert calibrated_cost(str(tmp_path / "t.json"), "target", table=False).forward_time(
        2, 10, 50) == pytest.approx(coef["base"] + 2 * coef["per_seq"] + 10 * coef["per_token"])


def test_verify_table_interpolates_between_measured_token_counts(tmp_path):
    """A token count between two measured ones at the same sequence count takes the straight
    line between their times (a CPU pass is a step function of its shape that the affine fit
    smooths over), one past the largest measured there that shape's time plus the fit's
    increment; other sequence counts keep the fit; scalar and array calls agree."""
    from psdlab.validation.calibrate import MIN_TABLE
    cal = calibrate([_hand_trace("sd-sep", 0.1, 0.2, 0.0, n=MIN_TABLE + 3)], holdout=0.0)
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(cal))
    doc = json.loads(open(path).read())
    doc["meta"]["tables"]["target"] = [[2, 10, 0.5, 9], [2, 20, 0.7, 9], [4, 8, 0.4, 9]]
    (tmp_path / "t.json").write_text(json.dumps(doc))
    c = calibrated_cost(str(tmp_path / "t.json"), "target")
    fit = calibrated_cost(str(tmp_path / "t.json"), "target", table=False)
    assert c.forward_time(2, 14, 50) == pytest.approx(0.5 + 0.2 * 0.4)
    assert c.forward_time(2, 10, 50) == pytest.approx(0.5)
    assert c.forward_time(3, 14, 50) == pytest.approx(fit.forward_time(3, 14, 50))
    assert c.forward_time(4, 6, 50) == pytest.approx(fit.forward_time(4, 6, 50))  # below
    # past the largest measured at its sequence count: that shape plus the fit's increment
    assert c.forward_time(4, 12, 50) == pytest.approx(
        0.4 + fit.forward_time(4, 12, 50) - fit.forward_time(4, 8, 50))
    arr = c.forward_time(np.array([2, 2, 3]), np.array([14, 10, 14]), 50.0)
    assert np.allclose(arr, [0.58, 0.5, fit.forward_time(3, 14, 50)])


def test_verify_table_keys_capped_rows_at_their_padded_width():
    """Rows of 4 and 1 proposals: the target computes 2 x 5 tokens, so the table says (2, 10),
    the shape the simulator asks for, not the token sum 7."""
    from psdlab.validation.calibrate import MIN_TABLE
    run = RunInfo(mode="sd-sep", k=4, m=2, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"})
    steps, t = [], 0.0
    for i in range(MIN_TABLE + 1):
        steps.append(StepRecord(i, t, t + 0.3, (Phase("draft", "cpu:0", t, t + 0.1, 2, 5),
                                                Phase("verify", "cpu:1", t + 0.1, t + 0.3, 2,
                                                      7)),
                                (Verified("a", 4, 0, 1), Verified("b", 1, 0, 1))))
        t += 0.3
    table = calibrate([Trace(run, steps, [])], holdout=0.0).verify_table
    assert [(sq, tk) for sq, tk, *_ in table] == [(2, 10)]


def test_capped_rows_are_fitted_at_their_padded_width():
    """Two rows, proposals 4 and 1 (one pending token each): the target computes 2 x 5."""
    from psdlab.validation.phase_model import with_draft_forwards
    run = RunInfo(mode="sd-sep", k=4, m=2, source="runtime",
                  devices={"drafter": "cpu:0", "target": "cpu:1"})
    step = StepRecord(0, 0.0, 0.3, (Phase("draft", "cpu:0", 0.0, 0.1, 2, 5),
                                    Phase("verify", "cpu:1", 0.1, 0.3, 2, 7)),
                      (Verified("a", 4, 0, 1), Verified("b", 1, 0, 1)))
    tr = with_draft_forwards(Trace(run, [step], []))
    draft, verify = tr.steps[0].phases
    assert draft.forwards == 4 and verify.tokens == 10
    assert with_draft_forwards(tr).steps[0].phases[1].tokens == 10           # idempotent


def test_closed_form_prediction_uses_the_calibrated_costs_not_the_pair(loop):
    """The true closed-form prediction reads t and V from the calibrated cost models at the
    pair's k and m (the sim's affine truth here), so it agrees with the measured steady-state
    speedup and does not move when the pair's own phase times are changed."""
    path, held, _ = loop
    pair = [("sd", held["sd-sep_k3"]), ("psd", held["psd_k3"])]
    v = validate(path, pair, seeds=(0,))
    (g,) = v.gains
    pred = {r.metric: r for r in g.rows}["speedup.steady.predicted"]
    assert pred.measured is not None and abs(pred.error) <= 0.10
    m, k = 4, 3
    reqs = held["sd-sep_k3"].requests
    ctx = m * float(np.mean([r.prompt_len + r.output_len / 2 for r in reqs]))

    def aff(c, s, t, x):
        return c["base"] + c["per_seq"] * s + c["per_token"] * t + c["per_context"] * x

    draft = sum(aff(DRAFTER, m, m, ctx + j * m) for j in range(k))
    assert g.predicted_cf.t == pytest.approx(draft, rel=0.1)
    assert g.predicted_cf.V == pytest.approx(aff(TARGET, m, m * (k + 1), ctx), rel=0.1)
    slow = replace(held["sd-sep_k3"], steps=[replace(s, phases=tuple(
        replace(p, end=p.start + 2 * (p.end - p.start)) for p in s.phases))
        for s in held["sd-sep_k3"].steps])
    v2 = validate(path, [("sd", slow), ("psd", held["psd_k3"])], seeds=(0,))
    assert v2.gains[0].predicted_cf.speedup == pytest.approx(g.predicted_cf.speedup)
    assert v2.gains[0].closed_form.t != pytest.approx(g.closed_form.t)
    assert "closed-form prediction (steady state)" in {s["target"] for s in v.summary()}


def test_calibration_noise_enters_the_break_chance(loop, tmp_path):
    """The configurations a model file names as its calibration traces are found by their
    file stems; their repeats' noise, as one shift common to every run, raises the chance
    that noise alone breaks an absolute bound and leaves a gain row's chance alone."""
    path, held, _ = loop
    base, other = held["sd-sep_k3"], held["psd_k3"]

    reps = [(f"{n}_r{i}", slowed(tr, f)) for n, tr in (("sd", base), ("psd", other))
            for i, f in ((1, 1.0), (2, 1.1), (3, 0.93))]
    doc = json.loads(open(path).read())
    doc.setdefault("meta", {}).setdefault("calibration", {})["traces"] = ["sd_r1.jsonl",
                                                                          "sd_r2.jsonl"]
    named = tmp_path / "named.json"
    named.write_text(json.dumps(doc))
    assert calibration_configs(str(named), reps) == {"sd"}
    assert calibration_configs(path, reps) == set()
    plain = validate(path, reps, seeds=(0,))
    with_cal = validate(str(named), reps, seeds=(0,))
    assert plain.calibration == frozenset() and with_cal.calibration == {"sd"}

    def chance(v, metric):
        return next(s for s in v.summary() if s["metric"] == metric)["noise_break_chance"]
    assert chance(with_cal, "throughput_tok_s") > chance(plain, "throughput_tok_s") + 1e-3
    assert chance(with_cal, "gain.throughput_tok_s") == pytest.approx(
        chance(plain, "gain.throughput_tok_s"))
