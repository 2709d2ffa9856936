"""`psdlab plan` at steady state (issue 52 item 1): no rate above the configuration's offline
capacity, an interval over seeds per row and ties said as ties, the same answer at 100 and
1000 requests a trial, an SLO nothing meets in one line, and the adaptive line within the
plan's modes and beside the tables."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plan_util import SMALL_PLAN

from psdlab.cli import main
from psdlab.sim.capacity import (COLUMNS, TAIL_COLUMNS, PlanSpec, _search_seed, combos,
                                 evaluate_combo, mark_pareto, parse_plan, rates_tie,
                                 seed_interval, steady_capacity)
from psdlab.sim.plan_report import best_per_load, recommendation
from psdlab.sim.plan_rows import ConfigResult, PlanRow
from psdlab.sim.policy_search import plan_thresholds, policy_agreement
from psdlab.sim.sim_config import config_from_dict

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "sim" / "configs" / "plan_llama70b_h100.toml"


def _run_json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def _small(mode: str, k: int, m: int, alpha: float, bound: float, requests: int,
           seeds: int, iterations: int) -> tuple[Any, PlanSpec, Any]:
    raw: dict[str, Any] = {
        "seed": 5, "server": {"mode": mode, "k": k, "m": m},
        "target": {"name": "t", "cost": {"name": "affine", "base": 0.01, "per_token": 0.0004}},
        "drafter": {"name": "d", "cost": {"name": "affine", "base": 0.002,
                                          "per_token": 0.0001}},
        "acceptance": {"name": "geometric", "alpha": alpha},
        "workload": {"name": "offline", "prompt": {"name": "fixed", "value": 16},
                     "output": {"name": "lognormal", "mean": 14, "median": 9, "max": 80}},
        "plan": {"modes": [mode], "k": [k], "m": [m], "slo": {"ttft_p99": bound},
                 "requests": requests, "seeds": seeds, "iterations": iterations}}
    cfg = config_from_dict(raw)
    spec = parse_plan(raw["plan"], cfg)
    (combo,) = combos(spec)
    return cfg, spec, combo


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["ar", "sd", "psd"]), k=st.integers(1, 4), m=st.integers(1, 8),
       alpha=st.floats(0.3, 0.95), bound=st.floats(0.01, 30.0),
       requests=st.integers(10, 40), seeds=st.integers(1, 3), iterations=st.integers(1, 3))
def test_no_rate_above_the_offline_capacity(mode, k, m, alpha, bound, requests, seeds,
                                            iterations):
    """Each seed's rate is at most the capacity its own offline run measures, and the row's
    mean at most the mean capacity; the interval holds the mean; a rate that met the SLO at
    the capacity is the capacity."""
    cfg, spec, combo = _small(mode, k, m, alpha, bound, requests, seeds, iterations)
    res = evaluate_combo(cfg, spec, combo)
    assert 0.0 <= res.max_rate_req_s <= res.capacity_req_s
    for i in range(seeds):
        run = _search_seed(cfg, spec, combo, cfg.seed + i)
        assert 0.0 <= run.rate_req_s <= run.capacity_req_s
        assert (run.rate_req_s == run.capacity_req_s) == (run.bound == "capacity")
        assert (run.rate_req_s == 0.0) == (run.bound == "none")
    if seeds > 1:
        lo, hi = res.max_rate_lo_req_s, res.max_rate_hi_req_s
        assert lo is not None and hi is not None and lo <= res.max_rate_req_s <= hi
    else:
        assert res.max_rate_lo_req_s is None and res.max_rate_hi_req_s is None


def test_steady_capacity_is_near_a_long_runs_throughput():
    """The offline capacity of a short run (its drain left out) is close to what a long run
    sustains, where requests / makespan of the short run is far below it."""
    from psdlab.sim.simulation import simulate
    cfg, spec, combo = _small("psd", 2, 8, 0.8, 1.0, 40, 1, 1)
    offline = cfg.replace(requests=40, server_mode="psd", server_k=2, server_m=8,
                          trace_level="none", trace_path=None)
    short = simulate(offline)
    long_run = simulate(offline.replace(requests=3000))
    truth = 3000 / long_run.makespan_s
    assert abs(steady_capacity(short.trace) / truth - 1) < 0.15
    assert 40 / short.makespan_s < 0.85 * truth


def _llama_plan(tmp_path: Path) -> Path:
    """The Llama-3.3-70B example less its slow rows: SD and PSD at k = 4, m = 16."""
    text = LLAMA.read_text()
    text = text.replace('modes = ["ar", "sd", "psd"]', 'modes = ["sd", "psd"]')
    text = text.replace("k = [2, 4]", "k = [4]").replace("m = [8, 16]", "m = [16]")
    path = tmp_path / "llama.toml"
    path.write_text(text)
    return path


def test_100_and_1000_requests_give_one_answer_or_a_stated_tie(tmp_path):
    """The issue's case: at 100 requests a trial the old plan put SD and PSD above their
    capacity and PSD first, at 1000 SD first.  Now both trial sizes name the same winner at
    m = 16, or one of them states the tie that holds the other's winner."""
    cfg = _llama_plan(tmp_path)
    verdicts = {}
    for n in (100, 1000):
        doc = _run_json(["plan", str(cfg), "--requests", str(n), "--no-png", "--json",
                         "--csv", str(tmp_path / f"p{n}.csv")])
        for r in doc["rows"]:
            assert r["max_rate_req_s"] <= r["capacity_req_s"]
        (level,) = [s["data"] for s in doc["sections"] if s["name"] == "best_per_load"][0]
        verdicts[n] = ({level["winner"]["mode"]}, {level["winner"]["mode"], *level["ties"]},
                       recommendation(level))
    (w100, t100, _), (w1000, t1000, _) = verdicts[100], verdicts[1000]
    assert w100 == w1000 or w1000 <= t100 or w100 <= t1000
    for _, tied, text in verdicts.values():
        if len(tied) > 1:
            assert "SD and PSD tie at m = 16" in text or "PSD and SD tie at m = 16" in text


def test_a_slo_nothing_meets_is_one_line_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "plan.toml"
    path.write_text(SMALL_PLAN.replace("slo = {ttft_p99 = 1.0}", "slo = {ttft_p99 = 1e-9}"))
    out = tmp_path / "out"
    out.mkdir()
    rc = main(["plan", str(path), "--csv", str(out / "p.csv"), "--vllm-k-table",
               str(out / "k.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("psdlab plan: error: slo: no configuration meets ttft_p99 <= 1e-09 s")
    assert "closest: ttft_p99" in err
    assert list(out.iterdir()) == []


def _result(mode: str, rate: float, lo: float | None = None, hi: float | None = None,
            m: int = 4, devices: int = 1) -> ConfigResult:
    return ConfigResult(mode=mode, k=0 if mode == "ar" else 2, m=m,
                        drafter="" if mode == "ar" else "d", capacity_req_s=2 * rate + 1,
                        max_rate_req_s=rate, tok_s=10 * rate, devices_per_replica=devices,
                        cost_model="c", max_rate_lo_req_s=lo, max_rate_hi_req_s=hi, seeds=3,
                        bound="slo" if rate else "none")


def test_rows_that_sustain_nothing_are_not_best_nor_on_the_front():
    rows = mark_pareto([PlanRow(_result("ar", 0.0, 0.0, 0.0), 1),
                        PlanRow(_result("sd", 0.0, 0.0, 0.0), 1)])
    assert not any(r.pareto for r in rows)
    (level,) = best_per_load(rows)
    assert level["winner"] is None
    assert recommendation(level) == "m = 4: no configuration meets the SLO"


def test_ties_follow_the_intervals():
    apart = best_per_load([PlanRow(_result("sd", 2.0, 1.9, 2.1), 1),
                           PlanRow(_result("psd", 3.0, 2.9, 3.1), 1)])
    assert apart[0]["winner"]["mode"] == "psd" and apart[0]["ties"] == []
    assert recommendation(apart[0]).startswith("m = 4: psd k=2 3.000 [2.900, 3.100]")
    close = best_per_load([PlanRow(_result("sd", 2.0, 1.5, 2.5), 1),
                           PlanRow(_result("psd", 2.2, 1.8, 2.6, devices=1), 1)])
    assert close[0]["ties"] == ["sd"]
    assert recommendation(close[0]).startswith("PSD and SD tie at m = 4")
    # per device: psd's 2 devices halve its rate per device; the winner is sd then
    per_dev = best_per_load([PlanRow(_result("sd", 2.0, 1.9, 2.1), 1),
                             PlanRow(_result("psd", 3.0, 2.9, 3.1, devices=2), 1)])
    assert per_dev[0]["winner"]["mode"] == "sd" and per_dev[0]["ties"] == []


@given(st.lists(st.floats(0.0, 100.0), min_size=2, max_size=6),
       st.lists(st.floats(0.0, 100.0), min_size=2, max_size=6))
def test_a_tie_is_symmetric_and_holds_for_equal_means(a, b):
    ia, ib = seed_interval(a), seed_interval(b)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    assert rates_tie(ma, *ia, mb, *ib) == rates_tie(mb, *ib, ma, *ia)
    assert rates_tie(ma, *ia, ma, *ia)


def test_csv_keeps_its_columns_and_appends_the_new_ones(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(SMALL_PLAN)
    assert main(["plan", str(path), "--csv", str(tmp_path / "p.csv"), "--no-png"]) == 0
    with open(tmp_path / "p.csv") as fh:
        header = next(csv.reader(fh))
    # the columns the plan wrote before issue 52, in their order, then the new ones
    assert header == [*COLUMNS, "devices_per_replica", "ttft_p99", *TAIL_COLUMNS]


ARPSD = textwrap.dedent("""
    [server]
    mode = "psd"
    [target]
    cost = {name = "constant", time = 0.02}
    [drafter]
    cost = {name = "constant", time = 0.004}
    [acceptance]
    name = "geometric"
    alpha = 0.8
    [workload]
    name = "offline"
    output = {name = "fixed", value = 40}
    [plan]
    modes = ["ar", "psd"]
    k = [1, 3]
    m = [2, 8]
    slo = {ttft_p99 = 1.0}
    requests = 30
    iterations = 3
    seeds = 2
""")


def test_the_adaptive_line_keeps_to_the_plans_modes_and_ks(tmp_path):
    """With modes = ["ar", "psd"] and k = [1, 3] the policy chooses among ar, psd1 and psd3
    (the old line, over every mode and k 1..4, chose sd4 here), and the line beside it says
    whether that is the tables' choice."""
    path = tmp_path / "plan.toml"
    path.write_text(ARPSD)
    doc = _run_json(["plan", str(path), "--csv", str(tmp_path / "p.csv"), "--no-png",
                     "--json"])
    choices = {r["choice"] for r in doc["adaptive_policy"]["thresholds"]["ranges"]}
    assert choices and choices <= {"ar", "psd1", "psd3"}
    levels = [s["data"] for s in doc["sections"] if s["name"] == "best_per_load"][0]
    per_n = {r["n"]: r["choice"] for r in doc["adaptive_policy"]["thresholds"]["per_n"]}
    table = {lv["m"]: {f"{b['mode']}{b['k']}" if b["mode"] != "ar" else "ar"
                       for b in lv["per_mode"]
                       if b == lv["winner"] or b["mode"] in lv["ties"]} for lv in levels}
    line = doc["adaptive_agreement"]
    if all(per_n[m] in best for m, best in table.items()):
        assert line == "the policy agrees with the tables at m = 2, 8"
    else:
        assert line.startswith("the policy differs from the tables")


def test_the_agreement_line_names_the_tables_choice_where_the_policy_differs():
    cfg = config_from_dict(tomllib.loads(ARPSD)).replace(server_m=8)
    report = plan_thresholds(cfg, ["ar", "psd"], [1, 3])
    assert report is not None
    choice = report.thresholds.per_n[-1].choice           # at n = 8
    same = best_per_load([PlanRow(_result("psd" if choice != "ar" else "ar", 3.0, m=8), 1)])
    assert policy_agreement(report, same).strip() == (
        "the policy agrees with the tables at m = 8") or choice not in ("psd2", "ar")
    other = "ar" if choice != "ar" else "sd"
    differ = best_per_load([PlanRow(_result(other, 3.0, m=8), 1)])
    label = "ar" if other == "ar" else "sd2"
    assert f"m = 8: the tables' best {label}, the policy {choice} at n = 8" in \
        policy_agreement(report, differ)


def test_plan_without_speculative_modes_has_no_adaptive_line():
    cfg = config_from_dict(tomllib.loads(ARPSD))
    assert plan_thresholds(cfg, ["ar"], [1]) is None


def test_seeds_is_checked():
    cfg = config_from_dict(tomllib.loads(ARPSD))
    with pytest.raises(ValueError, match="plan.seeds"):
        parse_plan({**tomllib.loads(ARPSD)["plan"], "seeds": 0}, cfg)
    assert isinstance(parse_plan(tomllib.loads(ARPSD)["plan"], cfg), PlanSpec)


def test_the_figure_draws_each_rows_interval(tmp_path):
    from psdlab.sim.plan_figure import figure_data, make_figure
    path = tmp_path / "plan.toml"
    path.write_text(ARPSD)
    rows = _run_json(["plan", str(path), "--csv", str(tmp_path / "p.csv"), "--no-png",
                      "--json"])["rows"]
    data = figure_data(rows)
    assert data["intervals"] == [[r["devices"], r["max_rate_lo_req_s"] * r["replicas"],
                                  r["max_rate_hi_req_s"] * r["replicas"]] for r in rows]
    ax = make_figure(rows, "ttft_p99 <= 1 s", "Poisson").axes[0]
    (bars,) = [c for c in ax.collections if c.get_gid() == "intervals"]
    assert len(bars.get_segments()) == len(rows)
