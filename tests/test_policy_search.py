"""Where the adaptive policy switches (sim.policy_search, `psdlab policy`, plan's section)."""
from __future__ import annotations

import json

import pytest

from psdlab.cli import main
from psdlab.sim.acceptance_registry import make_acceptance
from psdlab.sim.policy_search import (WinnerSwitch, load_sweep, policy_thresholds,
                                       position_rates, switch_points, winner)
from psdlab.sim.sim_config import config_from_dict

RAW = {"seed": 2, "requests": 16, "server": {"mode": "adaptive", "m": 8},
       "adaptive": {"k_choices": [1, 2, 4], "hold": 2},
       "target": {"name": "t", "cost": {"name": "affine", "base": 0.02, "per_token": 0.003}},
       "drafter": {"name": "d", "cost": {"name": "affine", "base": 0.002, "per_token": 0.0005}},
       "acceptance": {"name": "geometric", "alpha": 0.75},
       "workload": {"name": "poisson", "rate": 2.0, "prompt": {"name": "fixed", "value": 16},
                    "output": {"name": "fixed", "value": 12}},
       "trace": {"level": "none"}}


def test_position_rates_of_known_models():
    assert position_rates(make_acceptance({"name": "geometric", "alpha": 0.6}), 4) == \
        pytest.approx((0.6,) * 4)
    pos = make_acceptance({"name": "positional", "rates": [0.9, 0.5, 0.2]})
    assert position_rates(pos, 3) == pytest.approx((0.9, 0.5, 0.2))


def test_thresholds_cover_every_batch_size_and_match_the_rule():
    th = policy_thresholds(config_from_dict(RAW))
    ranges = th.ranges
    assert ranges[0].n_from == 1 and ranges[-1].n_to == 8
    for a, b in zip(ranges, ranges[1:]):
        assert b.n_from == a.n_to + 1 and a.choice != b.choice
    for row in th.per_n:
        scores = dict(row.tok_s)
        assert row.choice == max(scores, key=scores.__getitem__)
    # these costs: speculation at one sequence, less of it (smaller k or AR) at eight
    first, last = th.per_n[0].choice, th.per_n[-1].choice
    assert first != "ar"
    assert last == "ar" or int(last[-1]) <= int(first[-1])
    # the JSON form (validation.adaptive.bench_adaptive stores it)
    doc = th.to_dict()
    assert doc["ranges"][0] == {"choice": ranges[0].choice, "n_from": 1, "n_to": ranges[0].n_to}


def test_rate_sweep_rows_and_winners():
    fixed = (("ar", "ar", 0), ("sd2", "sd", 2))
    out = load_sweep(config_from_dict(RAW), [0.5, 50.0], fixed)
    assert [r.load for r in out.rows] == ["offline", "0.5", "50"]
    doc = out.to_dict()                                   # its JSON form
    for r, d in zip(out.rows, doc["rows"]):
        assert [c.name for c in r.configs] == ["ar", "sd2", "adaptive"]
        assert r.winner_fixed == winner(d["configs"], ["ar", "sd2"])
        tok_s = {c.name: c.tok_s for c in r.configs}
        ad, best = tok_s["adaptive"], tok_s[r.winner_fixed]
        assert ad is not None and best is not None
        assert r.adaptive_vs_best == pytest.approx(ad / best)


def test_winner_breaks_throughput_ties_by_latency():
    cfgs = {"ar": {"tok_s": 100.0, "tpot_p50": 0.05}, "sd2": {"tok_s": 99.5, "tpot_p50": 0.03},
            "psd2": {"tok_s": 90.0, "tpot_p50": 0.01}}
    assert winner(cfgs, ["ar", "sd2", "psd2"]) == "sd2"
    cfgs["sd2"]["tok_s"] = 95.0
    assert winner(cfgs, ["ar", "sd2", "psd2"]) == "ar"


def test_switch_points_between_consecutive_rates():
    winners = [("offline", "ar"), ("1", "sd2"), ("2", "sd2"), ("4", "ar")]
    assert switch_points(winners) == (WinnerSwitch("sd2", "ar", (2.0, 4.0)),)


def test_policy_command_writes_the_report(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(_toml(RAW))
    out = tmp_path / "r.json"
    assert main(["policy", str(cfg), "--rates", "1,40", "--requests", "12", "-o",
                 str(out)]) == 0
    rep = json.loads(out.read_text())
    assert [r["load"] for r in rep["loads"]["rows"]] == ["offline", "1", "40"]
    assert rep["git"]["commit"] and rep["date_utc"].endswith("Z")
    assert "adaptive policy" in capsys.readouterr().out


def test_policy_command_bad_rates(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(_toml(RAW))
    assert main(["policy", str(cfg), "--rates", "1,-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "psdlab policy: error: --rates: expected comma-separated rates > 0, got '-2'"


def _toml(raw) -> str:
    def val(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, str):
            return json.dumps(v)
        return repr(v)
    top = [f"{k} = {val(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    tables = [f"[{k}]\n" + "\n".join(f"{a} = {val(b)}" for a, b in v.items())
              for k, v in raw.items() if isinstance(v, dict)]
    return "\n".join(top + tables) + "\n"


def test_thresholds_on_a_trace_file_use_its_requests(tmp_path):
    """A file workload (psdlab plan --workload) has its own requests: the policy's mean
    lengths come from all of them, whatever plan.requests asks (a file of 24 requests once
    failed with 'n: must be in [0, 24], got 400')."""
    import os

    from psdlab.analysis.formats.detect import read_workload
    from psdlab.sim.policy_search import plan_thresholds
    from psdlab.sim.sim_config import read_toml

    here = os.path.dirname(os.path.abspath(__file__))
    azure = os.path.join(here, "data", "formats", "azure_code_2023.csv")
    cfg_path = os.path.join(here, "..", "sim", "configs", "plan_example.toml")
    cfg = config_from_dict(read_toml(cfg_path), os.path.dirname(cfg_path))
    cfg = cfg.replace(workload={"name": "file", "path": azure}, requests=400)
    out = plan_thresholds(cfg)
    assert out is not None
    records = read_workload(azure).records
    prompt = sum(max(1, r.input_len) for r in records) / len(records)
    output = sum(max(1, r.output_len) for r in records) / len(records)
    # the policy prices steps at the mean context: a prompt plus half its output
    assert out.thresholds.context_tokens == pytest.approx(prompt + output / 2)
