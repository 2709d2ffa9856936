"""Tests of paper_figs: each figure's CSV has the expected columns and plausible values (not
pixels); the CLI front door; the validation-file reader; Gantt intervals as an invariant."""
from __future__ import annotations

import json
import math
import os
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from psdlab.paper_figs.common import FigOptions, read_csv, trace_files
from psdlab.paper_figs.registry import FIGURES, make_figures, parse_only


@pytest.fixture(scope="module")
def traces_dir(tmp_path_factory):
    from psdlab.paper_figs.demo_traces import write_demo_traces
    d = tmp_path_factory.mktemp("traces")
    write_demo_traces(str(d), ks=(1, 3), requests=12)
    (d / "broken.jsonl").write_text('{"type": "step"}\n')      # not a trace: noted, ignored
    return d


@pytest.fixture(scope="module")
def figs(tmp_path_factory, traces_dir):
    out = tmp_path_factory.mktemp("figs")
    opts = FigOptions(str(out), quick=True, traces=trace_files([str(traces_dir)]))
    outputs = {o.name: o for o in make_figures(opts)}
    return out, outputs


def _csv(out, name):
    return read_csv(os.path.join(out, name))


def _f(x):
    return float(x) if x != "" else math.nan


@pytest.mark.e2e
def test_every_figure_writes_png_and_csv(figs):
    out, outputs = figs
    assert set(outputs) == set(FIGURES)
    for o in outputs.values():
        assert not o.skipped
        assert o.pngs and o.csvs
        for path in o.pngs + o.csvs:
            assert os.path.getsize(path) > 0
        with open(o.pngs[0], "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert any("broken.jsonl" in n for n in outputs["lifespan"].notes)


# ---------------------------------------------------------------------------- figure 1

def _exact_saving(x: float) -> float:
    """1 - T_PSD/T_SD for f(t) = 1 - exp(-t) (alpha = 1, V = x), by direct minimisation."""
    f = lambda t: 1 - math.exp(-t)  # noqa: E731
    hi = 60 + 10 * x
    sd = minimize_scalar(lambda t: (t + x) / f(t), bounds=(1e-9, hi), method="bounded",
                         options={"xatol": 1e-10}).fun
    psd = min(minimize_scalar(lambda t: max(t, x) / f(t), bounds=b, method="bounded",
                              options={"xatol": 1e-10}).fun
              for b in ((1e-9, x), (x, hi)))
    return 1 - psd / sd


@pytest.mark.e2e
def test_theory_csv(figs):
    rows = _csv(figs[0], "fig1_theory.csv")
    assert list(rows[0]) == ["alpha_v", "exact_saving", "exact_ratio", "paper_saving_bound",
                             "paper_ratio_bound", "in_region_37", "theorem1_applies",
                             "theorem1_claim_true"]
    x = np.array([_f(r["alpha_v"]) for r in rows])
    s = np.array([_f(r["exact_saving"]) for r in rows])
    b = np.array([_f(r["paper_saving_bound"]) for r in rows])
    assert np.all(np.diff(x) > 0) and x[0] <= 0.01 and x[-1] >= 1000
    assert np.all((s > 0) & (s <= 0.5 + 1e-9))          # PSD never loses, never beats 50%
    assert np.all(b <= s + 1e-9)                         # the paper's bound is a lower bound
    i = int(np.argmax(s))
    assert s[i] == pytest.approx(0.5, abs=1e-6) and x[i] == pytest.approx(1.2564, abs=0.01)
    for r in rows:
        assert (r["in_region_37"] == "1") == (_f(r["exact_saving"]) >= 0.37)
    for xi in (0.1, 1.0, 3.0, 20.0):
        j = int(np.argmin(abs(np.log(x / xi))))
        assert s[j] == pytest.approx(_exact_saving(x[j]), abs=2e-4)
    # Theorem 1 applies to every large x, and its 1.59 ratio is false far out (ratio -> 1)
    assert rows[-1]["theorem1_applies"] == "1" and rows[-1]["theorem1_claim_true"] == "0"


# ---------------------------------------------------------------------------- figure 2

@pytest.mark.e2e
def test_throughput_k_csv(figs, traces_dir):
    rows = _csv(figs[0], "fig2_throughput_k.csv")
    from psdlab.paper_figs.fig_throughput_k import COLUMNS
    assert tuple(rows[0]) == COLUMNS
    sim = [r for r in rows if r["source"] == "sim"]
    assert {r["panel"] for r in sim} == {"setting 1", "setting 2", "setting 3"}
    assert {r["alpha_source"] for r in sim} == {"assumed"}
    tp = {(r["panel"], r["mode"], r["comparison"], int(r["k"])): _f(r["decode_throughput_tok_s"])
          for r in sim}
    assert len(tp) == 3 * 3 * 5
    for (panel, mode, _comp, k), v in tp.items():
        assert 10 < v < 1e5
        if mode == "psd":
            assert v >= tp[(panel, "sd", "iso-batch", k)]      # PSD >= SD, iso-batch
    for r in sim:   # simulated acceptance close to the assumed alpha's expectation
        a, k = _f(r["alpha"]), int(r["k"])
        expect = a * (1 - a ** k) / (1 - a) / k               # E[accepted]/k, geometric
        assert _f(r["acceptance_rate"]) == pytest.approx(expect, abs=0.06)
        assert int(r["concurrent"]) == (2 if r["mode"] == "psd" else 1) * int(r["m"])
    measured = [r for r in rows if r["source"] == "measured"]
    assert {(r["mode"], int(r["k"])) for r in measured} == {("sd", 1), ("sd", 3), ("psd", 1),
                                                            ("psd", 3)}
    from psdlab.analysis.metrics import summarize
    from psdlab.analysis.trace import read_trace
    ref = summarize(read_trace(str(traces_dir / "psd_k3.jsonl")))
    got = next(r for r in measured if r["mode"] == "psd" and r["k"] == "3")
    assert _f(got["decode_throughput_tok_s"]) == pytest.approx(ref["decode_throughput_tok_s"])
    cal = [r for r in rows if r["source"] == "sim (calibrated)"]
    assert {int(r["k"]) for r in cal} == {1, 2, 3, 4, 5}


# ---------------------------------------------------------------------------- figure 3

@pytest.mark.e2e
def test_batch_ablation_csv(figs):
    rows = _csv(figs[0], "fig3_batch_ablation.csv")
    psd = [r for r in rows if r["mode"] == "psd"]
    assert {int(r["m"]) for r in psd} == {8, 16, 32, 64}
    best = defaultdict(list)
    for r in rows:
        if r["best_k"] == "1":
            best[(r["mode"], int(r["m"]))].append(r)
    groups = {(r["mode"], int(r["m"])) for r in rows}
    assert set(best) == groups and all(len(v) == 1 for v in best.values())
    for (mode, m), (b,) in best.items():
        group = [_f(r["decode_throughput_tok_s"]) for r in rows
                 if r["mode"] == mode and int(r["m"]) == m]
        assert _f(b["decode_throughput_tok_s"]) == max(group)
    for mode in ("sd", "psd"):           # a bigger batch verifies more per step: more tokens/s
        ms = sorted(m for md, m in best if md == mode)
        tps = [_f(best[(mode, m)][0]["decode_throughput_tok_s"]) for m in ms]
        assert all(b > a for a, b in zip(tps, tps[1:]))
    gains = _csv(figs[0], "fig3_batch_gain.csv")
    for g in gains:
        ratio = _f(g["psd_decode_throughput_tok_s"]) / _f(g["sd_decode_throughput_tok_s"])
        assert _f(g["gain_iso_batch"]) == pytest.approx(ratio)
        assert _f(g["gain_iso_batch"]) >= 1.0


# ---------------------------------------------------------------------------- figure 4

def _check_intervals(rows, m):
    by_req = defaultdict(list)
    for r in rows:
        assert r["batch"] in (0, 1, "0", "1") or (r["batch"] in (None, "")
                                                  and int(r["steps_verified"]) == 0)
        by_req[r["request"]].append(r)
    for _req, ivs in by_req.items():
        ivs.sort(key=lambda r: float(r["start_s"]))
        assert sum(int(r["finished"]) for r in ivs) == 1 and int(ivs[-1]["finished"]) == 1
        for a, b in zip(ivs, ivs[1:]):
            assert float(a["end_s"]) <= float(b["start_s"]) + 1e-12
        for r in ivs:
            assert float(r["start_s"]) < float(r["end_s"])
            assert int(r["steps_verified"]) >= (1 if r["batch"] not in (None, "") else 0)
    # no batch ever holds more than m requests: sample the middle of every interval
    mids = [(float(r["start_s"]) + float(r["end_s"])) / 2 for r in rows]
    for t in mids:
        for batch in (0, 1):
            live = [r for r in rows if str(r["batch"]) == str(batch)
                    and float(r["start_s"]) < t < float(r["end_s"])]
            assert len({r["request"] for r in live}) <= m
    return by_req


@pytest.mark.e2e
def test_lifespan_csv(figs):
    rows = _csv(figs[0], "fig4_lifespan.csv")
    from psdlab.paper_figs.fig_lifespan import COLUMNS, M, REQUESTS
    assert tuple(rows[0]) == COLUMNS
    sim = [r for r in rows if r["source"] == "sim"]
    assert len(_check_intervals(sim, M)) == REQUESTS
    assert {r["batch"] for r in sim} == {"0", "1"}      # every request was verified
    measured = [r for r in rows if r["source"] == "measured"]
    assert measured and _check_intervals(measured, 4)
    steps = [r for r in _csv(figs[0], "fig4_lifespan_steps.csv") if r["source"] == "sim"]
    fb = [int(r["step"]) for r in steps if r["sd_fallback"] == "1"]
    overlapped = [int(r["step"]) for r in steps if r["overlapped"] == "1"]
    assert fb and min(fb) > max(overlapped)     # the SD fallback is the tail of an offline run


@settings(deadline=None, max_examples=8)
@given(seed=st.integers(0, 1000), m=st.integers(1, 4), n=st.integers(1, 12))
def test_interval_rows_invariants(seed, m, n):
    from psdlab.paper_figs.fig_lifespan import interval_rows
    from psdlab.sim.simulation import simulate
    from sim_helpers import make_config
    cfg = make_config(mode="psd", m=m, requests=n, seed=seed,
                      workload={"name": "offline", "prompt": {"name": "fixed", "value": 8},
                                "output": {"name": "uniform", "low": 1, "high": 40}})
    tr = simulate(cfg).trace
    rows = interval_rows(tr, "sim")
    by_req = _check_intervals(rows, m)
    assert len(by_req) == n
    finish = {r.id: r.finish for r in tr.requests}
    for req, ivs in by_req.items():
        assert float(ivs[-1]["end_s"]) == pytest.approx(finish[req])


# ---------------------------------------------------------------------------- figure 5

@pytest.mark.e2e
def test_step_times_csv(figs):
    rows = _csv(figs[0], "fig5_step_times.csv")
    sim = [r for r in rows if r["source"] == "sim"]
    for label in {r["label"] for r in sim}:
        draft = sorted((int(r["k"]), _f(r["mean_s"])) for r in sim
                       if r["label"] == label and r["phase"] == "draft")
        assert [k for k, _ in draft] == [1, 2, 3, 4, 5]
        ts = [t for _, t in draft]
        assert all(b > a for a, b in zip(ts, ts[1:]))       # more draft tokens, longer drafting
        assert ts[1] / ts[0] == pytest.approx(2, rel=0.25)  # k one-token forwards each
    measured = [r for r in rows if r["source"] == "measured"]
    assert {(r["mode"], int(r["k"]), r["phase"]) for r in measured} == {
        (md, k, ph) for md in ("sd", "psd") for k in (1, 3) for ph in ("draft", "verify")}
    for r in measured:
        assert 0 < _f(r["p10_s"]) <= _f(r["p50_s"]) <= _f(r["p90_s"])
        assert int(r["steps"]) > 0


# ---------------------------------------------------------------------------- figure 6

@pytest.mark.e2e
def test_validation_heldout_csv(figs):
    rows = _csv(figs[0], "fig6_validation.csv")
    assert rows and {r["run"] for r in rows} == {"sd_k1.jsonl", "sd_k3.jsonl", "psd_k1.jsonl",
                                                 "psd_k3.jsonl"}
    for r in rows:
        # the CSV rounds each column on its own: compare to the CSV's precision
        assert _f(r["rel_error"]) == pytest.approx(_f(r["predicted"]) / _f(r["measured"]) - 1,
                                                   rel=1e-5, abs=1e-6)
        if r["metric"] in ("mean_draft_time_s", "mean_verify_time_s"):
            assert abs(_f(r["rel_error"])) < 0.25    # same cost model family: close


def test_validation_file(tmp_path):
    doc = {"summary": {"throughput": {"predicted": 100.0, "measured": 80.0, "unit": "tok/s"}},
           "runs": [{"run": "a", "metric": "ttft_p50", "pred": 0.2, "meas": 0.25},
                    {"run": "b", "metric": "bad", "predicted": "x", "measured": 1.0}]}
    path = tmp_path / "v.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "figs"
    (o,) = make_figures(FigOptions(str(out), validation=str(path)), ["validation"])
    rows = _csv(out, "fig6_validation.csv")
    assert [(r["metric"], r["run"]) for r in rows] == [("$.summary.throughput", ""),
                                                      ("ttft_p50", "a")]
    assert _f(rows[0]["rel_error"]) == pytest.approx(0.25)
    assert _f(rows[1]["rel_error"]) == pytest.approx(-0.2)


def test_measured_panels_skipped_without_inputs(tmp_path):
    outputs = {o.name: o for o in make_figures(FigOptions(str(tmp_path)), ["lifespan",
                                                                          "validation"])}
    assert outputs["validation"].skipped and not outputs["validation"].pngs
    assert any("no --traces" in n for n in outputs["lifespan"].notes)
    rows = _csv(tmp_path, "fig4_lifespan.csv")
    assert {r["source"] for r in rows} == {"sim"}


# ---------------------------------------------------------------------------- CLI

def test_parse_only():
    assert parse_only(None) == tuple(FIGURES)
    assert parse_only("lifespan, theory") == ("lifespan", "theory")
    with pytest.raises(ValueError, match="--only: unknown figure nope"):
        parse_only("theory,nope")


def test_cli(tmp_path, capsys):
    from psdlab.cli import main
    assert main(["figs", str(tmp_path), "--only", "theory", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in doc["figures"]] == ["theory"]
    assert os.path.exists(doc["figures"][0]["pngs"][0])
    assert main(["figs", str(tmp_path), "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdlab figs: error: --only") and "\n" not in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["figs", str(tmp_path), "--only", "validation", "--validation", str(bad)]) == 2
    assert "no objects with numeric" in capsys.readouterr().err
    assert main(["figs", str(tmp_path), "--traces", str(tmp_path / "missing")]) == 2
