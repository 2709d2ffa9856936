"""`psdlab check-vllm`'s calibration (issue 45 item 4) and its command's shape (issue 44).

- The default calibration is every rate of one server (the SD server with the largest k), not
  one configuration; the measured run repeats every configuration, so held-out noise exists.
- A joint fit on two rates of one server separates the fixed cost of a step from its cost per
  sequence: synthetic bench results simulated from a known affine cost give it back, which one
  rate alone does not.
- Each held-out figure carries its repeat-to-repeat noise beside its error.
- The command only parses arguments and prints (`validation.vllm_check.harness` holds the rest).
"""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from psdlab.cli import main
from psdlab.validation.vllm_check import judgement as vc
from psdlab.validation.vllm_check import harness as vr
from psdlab.validation.vllm_check.check_results import CalibrationChoice, CheckReport

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "vllm" / "check_vllm"
needs_committed = pytest.mark.skipif(not (COMMITTED / "check_vllm.json").is_file(),
                                     reason="no committed check-vllm run")
CONFIGS = ["sd-k2@0.5", "sd-k2@1", "sd-k4@0.5", "sd-k4@1", "ar@0.5", "ar@1"]


# ------------------------------------------------------------------ the default calibration

def test_default_calibration_is_every_rate_of_the_largest_k():
    assert vc.default_calibration(CONFIGS) == "sd-k4"
    assert vc.default_calibration(list(reversed(CONFIGS))) == "sd-k4"     # not "the first"
    assert vc.default_calibration(["ar@0.5", "ar@1", "x@1"]) == "ar"
    # one server only: calibrating on all of it would leave nothing to predict
    assert vc.default_calibration(["sd-k4@0.5", "sd-k4@1"]) == "sd-k4@0.5"
    assert vc.check_calibration(None, CONFIGS) == "sd-k4"
    assert vc.check_calibration("sd-k2@1", CONFIGS) == "sd-k2@1"


def test_plan_takes_both_rates_of_the_largest_k_by_default():
    p = vr.plan(vr.CheckSettings(ks=(2, 4), target_core=-1, client_core=-1))
    assert p.calibration == "sd-k4"
    cal = [c for c in p.configs if vc.in_calibration(c, p.calibration)]
    assert cal == ["sd-k4@0.5", "sd-k4@1"]
    one = vr.plan(vr.CheckSettings(calibration="sd-k2@0.5", target_core=-1, client_core=-1))
    assert one.calibration == "sd-k2@0.5"                     # the old choice stays


@pytest.mark.parametrize("name", ["sd-k3", "sd-k4@2", "sd-k4@", "ar@0.5,ar@1", ""])
def test_bad_calibration_names_are_one_line_errors(tmp_path, capsys, name):
    assert main(["check-vllm", "-o", str(tmp_path / "o"), "--calibration", name]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("psdlab check-vllm: error: --calibration: must be one of sd-k4@0.5, "
                          "sd-k4@1, sd-k2@0.5, sd-k2@1, ar@0.5, ar@1 (or a server name")
    assert not (tmp_path / "o").exists()


class _FakeServer:
    """Stands in for `serve_check.VllmServer`: no process, no port."""

    def __init__(self, spec, log_path, **_kw):
        self.spec, self.log_path, self.port = spec, log_path, 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def start(self, _timeout):
        return 0.0

    def warm_up(self):
        pass

    def argv(self):
        return ["serve", self.spec.target]


def test_every_configuration_is_repeated(tmp_path, monkeypatch):
    """``--repeats`` runs of every configuration (held-out ones too: their noise), the rates
    interleaved within a repeat, one server at a time."""
    from psdlab.runtime.vllm_ext import serve_check as sc
    monkeypatch.setattr(sc, "VllmServer", _FakeServer)
    monkeypatch.setattr(sc, "run_serve_bench", lambda run, server, **kw: {
        "result": f"bench/{run.name}.json", "metrics_before": "b", "metrics_after": "a",
        "load_before": "[1.0, 1.0, 1.0]"})
    s = vr.CheckSettings(target="t", draft="d", repeats=2, target_core=-1, client_core=-1)
    records, servers = vr.measure(s, vr.plan(s), tmp_path, say=lambda _t: None)
    assert [(r.config, r.repeat) for r in records] == [
        (f"{srv}@{rate}", rep) for srv in ("sd-k4", "sd-k2", "ar") for rep in (1, 2)
        for rate in ("0.5", "1")]
    assert [x.name for x in servers] == ["sd-k4", "sd-k2", "ar"]


# ------------------------------------------------------------------ the joint fit on two rates

RATIO = 0.3
TARGET = {"name": "affine", "base": 0.012, "per_seq": 0.0015, "per_token": 4e-5,
          "per_context": 0.0}


def _counters(path: Path, drafts: int, rates) -> str:
    """A ``/metrics`` scrape whose spec-decode counters stand at ``drafts`` drafts, accepted
    at the conditional ``rates`` per position."""
    lab = 'model_name="m",engine="0"'
    acc, n = [], float(drafts)
    for r in rates:
        n *= r
        acc.append(round(n))
    lines = [f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}.0",
             f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {len(rates) * drafts}.0",
             f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {sum(acc)}.0"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} '
              f"{a}.0" for i, a in enumerate(acc)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def two_rates(tmp_path_factory):
    """SD k = 3 at 2 and 16 req/s, simulated from TARGET (drafter = RATIO x TARGET) with
    step-time jitter and written as vLLM bench results, on one server's counters."""
    from psdlab.analysis.formats.vllm_bench_write import write_bench_result
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.validation.serving_results.predict import simulated_bench
    d = tmp_path_factory.mktemp("two_rates")
    rates = [0.85, 0.6, 0.4]
    snaps = [_counters(d / f"m{i}.txt", 20000 * i, rates) for i in range(3)]
    records = []
    for i, rate in enumerate((2.0, 16.0)):
        cfg = config_from_dict({
            "seed": 3 + i, "requests": 40, "jitter": {"dist": "gamma", "cv": 0.05},
            "server": {"mode": "sd", "k": 3, "m": 256, "first_token": "step"},
            "target": {"name": "target", "cost": TARGET},
            "drafter": {"name": "drafter", "cost": {
                "name": "affine", **{t: RATIO * TARGET[t] for t in ("base", "per_seq",
                                                                     "per_token")}}},
            "acceptance": {"name": "positional", "rates": rates},
            "workload": {"name": "poisson", "rate": rate,
                         "prompt": {"name": "lognormal", "mean": 300, "median": 250,
                                    "max": 1000},
                         "output": {"name": "lognormal", "mean": 60, "median": 50,
                                    "max": 200}}})
        path = d / f"sd-k3@{rate:g}.json"
        write_bench_result(path, simulated_bench(cfg, request_rate=rate))
        records.append(vc.RunRecord(config=f"sd-k3@{rate:g}", mode="sd", k=3,
                                    request_rate=rate, repeat=1, result=str(path),
                                    metrics_before=snaps[i], metrics_after=snaps[i + 1]))
    return records


def _per_seq_error(records, calibration: str) -> tuple[float, dict]:
    fit = vc.evaluate(records, calibration, bootstrap=4, drafter_to_target_ratio=RATIO).fit
    return fit.target_cost["per_seq"] / TARGET["per_seq"] - 1.0, fit


def test_two_rates_of_one_server_separate_the_per_sequence_cost(two_rates):
    err, fit = _per_seq_error(two_rates, "sd-k3")
    assert sorted(fit.inputs[:2]) == sorted(r.result for r in two_rates)   # both, jointly
    assert abs(err) < 0.15, fit.target_cost
    assert fit.target_cost["base"] == pytest.approx(TARGET["base"], rel=0.15)
    lo, hi = fit.intervals["target.per_seq"]
    assert lo * 0.95 <= TARGET["per_seq"] <= hi * 1.05
    # one rate alone: the step's growth with the batch is confounded with its fixed cost
    singles = [abs(_per_seq_error(two_rates, r.config)[0]) for r in two_rates]
    assert max(singles) > 0.15 and max(singles) > 2 * abs(err), (singles, err)


# ------------------------------------------------------------------ noise beside every error

@needs_committed
def test_held_out_rows_carry_their_repeat_noise(tmp_path):
    from psdlab.validation.vllm_check.runs_bundle import read_runs_bundle, unpack_runs
    doc = json.loads((COMMITTED / "check_vllm.json").read_text())
    unpack_runs(read_runs_bundle(COMMITTED / "runs.json"), tmp_path, doc["runs"])
    runs = [vc.RunRecord(**{**r, "load_before": None, **{
        k: str(tmp_path / r[k]) for k in ("result", "metrics_before", "metrics_after")}})
        for r in doc["runs"]]
    # held-out configurations run once, but sd-k2@1 twice with the same files: spread exactly 0
    runs = [r for r in runs if r.repeat == 1 or r.config.startswith("sd-k4")]
    again = next(r for r in runs if r.config == "sd-k2@1")
    runs.append(vc.RunRecord(**{**again.to_dict(), "repeat": 2}))
    out = vc.evaluate(runs, "sd-k4", bootstrap=2, drafter_to_target_ratio=0.6842)
    rows = {r.config: r for r in out.rows}
    assert rows["sd-k2@1"].role == "held-out" and rows["sd-k2@1"].repeats == 2
    assert all(v == 0.0 for v in rows["sd-k2@1"].noise.values())
    assert all(v is None for v in rows["ar@1"].noise.values())
    h = out.held_out
    assert h.judged == 14 and h.with_repeat_noise == 4
    assert h.within_goal + h.misses_beyond_noise + h.misses_within_noise \
        + h.misses_noise_unmeasured == h.judged
    text = vc.check_markdown(CheckReport(out, CalibrationChoice(True, vc.CALIBRATION_RULE)))
    assert "| error | repeat noise |" in text
    assert "Calibration: sd-k4@0.5, sd-k4@1 (every rate of one server, fitted jointly)" in text
    assert "Repeat noise measured for 4 of 14 held-out figures" in text
    line = next(x for x in text.splitlines() if x.startswith("| sd-k2@1 | held-out (x2) | mean "
                                                              "TPOT"))
    assert line.endswith("| 0.0% |")


def test_a_miss_is_told_from_its_noise():
    row = {"a": (0.2, 0.3), "b": (0.2, 0.1), "c": (0.2, None), "d": (0.05, None)}
    marks = {m: vc._mark("held-out", err, spread, 0.1) for m, (err, spread) in row.items()}
    assert marks == {"a": " MISS (within noise)", "b": " MISS (beyond noise)", "c": " MISS",
                     "d": " ok"}


@needs_committed
def test_reuse_default_is_the_rate_sweep_and_records_the_rejudging(tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(COMMITTED, out)
    assert main(["check-vllm", "-o", str(out), "--reuse", "--bootstrap", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["calibration"] == "sd-k4" and printed["held_out"]["judged"] == 14
    doc = json.loads((out / "check_vllm-sd-k4.json").read_text())
    measured = json.loads((COMMITTED / "check_vllm.json").read_text())
    assert doc["calibration_default"] and doc["calibration_configs"] == ["sd-k4@0.5", "sd-k4@1"]
    assert {"bench/sd-k4@0.5-r1.json", "bench/sd-k4@0.5-r2.json",
            "bench/sd-k4@1-r1.json"} <= set(doc["fit"]["inputs"])
    assert {r["config"] for r in doc["rows"] if r["role"] == "held-out"} == {
        "sd-k2@0.5", "sd-k2@1", "ar@0.5", "ar@1"}
    # where and when it was measured, kept; when and at which commit it was judged again
    for key in ("machine", "git", "date"):
        assert doc[key] == measured[key]
    assert doc["rejudged"]["git"]["commit"] and doc["rejudged"]["date"] > measured["date"]
    text = (out / "check_vllm-sd-k4.md").read_text()
    assert "Re-judged without a server" in text and "Chosen by the default rule" in text
    assert (out / "check_vllm.json").read_text() == (COMMITTED / "check_vllm.json").read_text()


# ------------------------------------------------------------------ the command parses, prints

def test_the_command_module_only_parses_and_prints():
    """Issue 44: commands hold no logic.  Its functions are the parser and `run` (which hands
    the options to `validation.vllm_check.harness`: `settings_from_options` splits them,
    `check_vllm_command` does the rest); it writes no file, starts nothing, fits nothing."""
    path = ROOT / "psdlab" / "commands" / "check_vllm.py"
    source = path.read_text()
    tree = ast.parse(source)
    defs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert defs == {"register", "run"}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
    assert {x for x in imported if x.startswith("psdlab.")} == {
        "psdlab.analysis.checks.check_output_path",         # the option checked before work
        "psdlab.validation.vllm_check.harness.check_vllm_command",
        "psdlab.validation.vllm_check.harness.settings_from_options"}
    assert {x.split(".")[0] for x in imported} <= {"__future__", "argparse", "json", "shlex",
                                                   "sys", "pathlib", "typing", "psdlab"}
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not calls & {"write_text", "mkdir", "open", "evaluate", "fit_from_bench",
                        "measure", "Popen", "run_serve_bench"}
    assert len(source.splitlines()) < 130
