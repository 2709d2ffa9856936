"""Smoke tests of `psdlab simulate`, `psdlab bench-sim` and `psdlab plan` (tiny sizes)."""
import csv
import json
import glob
import os
import textwrap

import pytest

from psdlab.analysis.trace import read_trace
from psdlab.cli import main

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "sim", "configs")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS, "*.toml"))))
def test_shipped_configs_run(path):
    from psdlab.sim.sim_config import load_config
    from psdlab.sim.simulation import simulate
    cfg = load_config(path).replace(requests=12, trace_level="request", trace_path=None)
    res = simulate(cfg)
    assert len(res.trace.requests) == 12


def test_simulate_json_keys_and_trace(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    rc = main(["simulate", os.path.join(CONFIGS, "psd_offline.toml"), "--json", "--requests",
               "8", "--trace", str(trace), "--perfetto", str(tmp_path / "p.json")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("throughput_tok_s", "makespan_s", "acceptance_rate", "overlap_fraction"):
        assert key in out
    for key in ("ttft", "tpot", "e2e"):
        assert set(out[key]) >= {"mean", "p50", "p90", "p99"}
    t = read_trace(trace)
    assert t.run.source == "sim" and len(t.requests) == 8 and t.steps
    assert json.loads((tmp_path / "p.json").read_text())


def test_simulate_overrides_and_trace_level(tmp_path, capsys):
    rc = main(["simulate", os.path.join(CONFIGS, "psd_offline.toml"), "--mode", "sd", "--k",
               "2", "--requests", "4", "--trace-level", "none", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "sd" and out["k"] == 2 and out["acceptance_rate"] is None


def test_bench_sim_json(capsys):
    assert main(["bench-sim", "--requests", "300", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the counts behind the rates: every request arrives and completes once, no KV limit
    # (no preemptions), and each simulated step is an event
    assert out["requests"] == 300 and out["steps"] > 0
    assert out["events"] == out["steps"] + 2 * out["requests"]
    assert out["requests_per_s"] * out["wall_s"] == pytest.approx(300)
    assert out["events_per_s"] / out["requests_per_s"] == pytest.approx(out["events"] / 300)


def test_plan_table_and_csv(tmp_path, capsys):
    cfg = tmp_path / "plan.toml"
    cfg.write_text(textwrap.dedent("""
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
        modes = ["sd", "psd"]
        k = [2]
        m = [4]
        replicas = [1, 3]
        slo = {ttft_p99 = 1.0}
        requests = 40
        iterations = 4
    """))
    csv_path = tmp_path / "out.csv"
    assert main(["plan", str(cfg), "--csv", str(csv_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 4
    by = {(r["mode"], r["replicas"]): r for r in rows}
    for mode in ("sd", "psd"):
        one, three = by[(mode, 1)], by[(mode, 3)]
        assert one["max_rate_req_s"] > 0
        assert three["total_rate_req_s"] == 3 * one["max_rate_req_s"]
        assert one["ttft_p99"] <= 1.0
    assert by[("psd", 1)]["devices"] == 2 and by[("sd", 1)]["devices"] == 1
    with open(csv_path) as fh:
        assert len(list(csv.DictReader(fh))) == 4
    assert any(r["pareto"] for r in rows)
    assert main(["plan", str(cfg), "--requests", "40"]) == 0
    assert "rate req/s" in capsys.readouterr().out
