"""`psdlab plan` in one command (sim.quick_plan): the command line's answers become the config a
[plan] TOML would hold, every other field defaulted and printed, and the report ends in one
answer that agrees with its own tables (bad inputs: tests/test_bad_inputs.py)."""
from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.cli import main
from psdlab.sim.capacity import parse_plan
from psdlab.sim.quick_plan import (DEFAULT_ALPHA, QuickPlan, option_error, parse_slo_text,
                                   quick_config, replicas_for)
from psdlab.sim.sim_config import config_from_dict


@settings(max_examples=60, deadline=None)
@given(value=st.floats(1e-3, 1e4, allow_nan=False), unit=st.sampled_from(["us", "ms", "s", ""]))
def test_slo_text_reads_each_unit_in_seconds(value, unit):
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0}[unit]
    got = parse_slo_text(f"tpot_p50={value!r}{unit}, ttft_p99 = 2s")
    assert got["tpot_p50"] == pytest.approx(value * scale, rel=1e-12)
    assert got["ttft_p99"] == 2.0


@pytest.mark.parametrize("text", ["tpot_p50", "=5ms", "tpot_p50=", "tpot_p50=5 parsecs",
                                  "tpot_p50=0ms", "tpot_p50=nan"])
def test_a_bad_slo_names_the_option(text):
    with pytest.raises(ValueError, match=r"^--slo"):
        parse_slo_text(text)


def test_the_config_is_a_plan_the_toml_path_takes():
    qc = quick_config(QuickPlan(target="llama-3.3-70b", gpu="h100", tp=4, drafter="llama-3.2-1b",
                                slo="tpot_p50=40ms,ttft_p99=2s"))
    cfg = config_from_dict(qc.raw, ".")
    spec = parse_plan(qc.raw["plan"], cfg)
    assert spec.modes == ("ar", "sd", "psd")
    assert dict(((mt, st_), b) for mt, st_, b in spec.slo) == {("tpot", "p50"): 0.04,
                                                               ("ttft", "p99"): 2.0}
    assert cfg.target.cost["tp"] == 4 and cfg.target.cost["hardware"] == "h100"
    assert cfg.drafter is not None and cfg.drafter.cost["hardware"] == "h100"
    assert qc.raw["acceptance"] == {"name": "geometric", "alpha": DEFAULT_ALPHA}
    # what it assumed is said: the acceptance, the drafter's GPU, the traffic
    said = " ".join(qc.defaults)
    assert "alpha 0.8" in said and "--drafter-gpu" in said and "ShareGPT-like" in said
    assert "SLO" not in said                       # the SLO was given, not defaulted


def test_without_a_drafter_it_plans_ar_only_and_says_so():
    qc = quick_config(QuickPlan(target="llama-3.2-3b", gpu="l4"))
    assert qc.raw["plan"]["modes"] == ["ar"] and "drafter" not in qc.raw
    assert any("AR only" in d for d in qc.defaults)


def test_a_config_json_target_is_named_by_its_folder(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
        "vocab_size": 128256, "tie_word_embeddings": True}))
    qc = quick_config(QuickPlan(target=str(folder / "config.json"), gpu="l4"))
    assert qc.raw["target"]["name"] == "my-model"
    assert qc.raw["target"]["cost"]["model"] == str(folder / "config.json")


def test_a_config_error_is_led_by_the_option_that_set_it():
    assert option_error("target.cost.tp: needs 141 GB") == "--tp (target.cost.tp): needs 141 GB"
    assert option_error("plan.slo.x_p50: unknown") == "--slo (plan.slo.x_p50): unknown"
    assert option_error("workload.rate: bad") == "workload.rate: bad"


@settings(max_examples=80, deadline=None)
@given(rate=st.floats(0.01, 1e4), per=st.floats(0.01, 1e3))
def test_replicas_serve_the_rate_and_no_fewer_would(rate, per):
    n = replicas_for(rate, per)
    assert n is not None and n * per >= rate * (1 - 1e-9)
    assert n == 1 or (n - 1) * per < rate
    assert replicas_for(rate, 0.0) is None


def _quick(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan", *argv])
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    argv = ["--target", "llama-3.2-3b", "--gpu", "l4", "--drafter", "llama-3.2-1b",
            "--slo", "tpot_p50=60ms,ttft_p99=4s", "--rate", "7", "--requests", "40",
            "--csv", str(out / "p.csv"), "--no-png"]
    rc, text = _quick(argv)
    assert rc == 0
    rc, js = _quick([*argv, "--json"])
    assert rc == 0
    return text, json.loads(js)


def test_the_answer_is_the_best_of_its_own_tables(quick_run):
    text, doc = quick_run
    by = {s["name"]: s["data"] for s in doc["sections"]}
    ans = by["answer"]
    winners = [lv for lv in by["best_per_load"] if lv["winner"]]
    best = max(lv["winner"]["rate_per_device"] for lv in winners)
    assert ans["rate_per_device"] == best
    (level,) = [lv for lv in winners if lv["m"] == ans["m"]]
    assert level["winner"]["mode"] == ans["mode"] and level["winner"]["k"] == ans["k"]
    assert ans["ties"] == level["ties"]
    assert ans["replicas"] == math.ceil(7 / ans["max_rate_req_s"] - 1e-9)
    # the trust line: the acceptance was assumed; it is the least trusted input of an SD/PSD answer
    if ans["mode"] != "ar":
        assert ans["weakest"]["basis"] == "assumed"
        assert "acceptance (llama-3.2-1b)" in ans["trust"]["assumed"]
    # the text: the defaults first, the answer last (before the files)
    lines = text.splitlines()
    assert lines[0].startswith("default: ") and any("alpha 0.8" in x for x in lines)
    tail = text[text.index("== the answer"):]
    assert tail.splitlines()[1].startswith(f"run {ans['mode'].upper()}")
    assert f"7 req/s needs {ans['replicas']} replica" in tail
    assert doc["defaults"] and all(d in text for d in doc["defaults"])


def _simulate_json(argv, cwd, monkeypatch):
    monkeypatch.chdir(cwd)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(buf.getvalue())


def test_simulate_in_one_command_is_the_config_it_stands_for(tmp_path, monkeypatch):
    """The one-command simulation runs exactly the TOML a user would write for it: same
    metrics, same trace bytes; what it assumed is listed."""
    quick = _simulate_json(["--target", "llama-3.2-3b", "--gpu", "l4", "--drafter",
                            "llama-3.2-1b", "--alpha", "0.7", "--k", "3", "--m", "8", "--rate",
                            "2", "--requests", "24", "--trace", "q.jsonl"], tmp_path,
                           monkeypatch)
    (tmp_path / "same.toml").write_text('''seed = 0
requests = 24
[server]
mode = "psd"
k = 3
m = 8
engine_step = "preset"
[target]
name = "llama-3.2-3b"
cost = { name = "gpu", model = "llama-3.2-3b", hardware = "l4", tp = 1, dtype = "bf16", \
engine = "vllm-cudagraph" }
[drafter]
name = "llama-3.2-1b"
cost = { name = "gpu", model = "llama-3.2-1b", hardware = "l4", tp = 1, dtype = "bf16", \
engine = "vllm-cudagraph" }
[acceptance]
name = "geometric"
alpha = 0.7
[workload]
name = "poisson"
rate = 2.0
prompt = { name = "lognormal", mean = 300, median = 200, max = 1024 }
output = { name = "lognormal", mean = 250, median = 180, max = 1024 }
''')
    toml = _simulate_json(["same.toml", "--trace", "t.jsonl"], tmp_path, monkeypatch)
    for key in ("throughput_tok_s", "ttft", "tpot", "e2e", "requests"):
        assert quick[key] == toml[key], key
    q_lines = (tmp_path / "q.jsonl").read_text().splitlines()
    t_lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert q_lines[1:] == t_lines[1:]       # the header names its config; the rest is equal
    said = " ".join(quick["defaults"])
    assert "mode psd" in said and "ShareGPT-like" in said and "alpha" not in said
