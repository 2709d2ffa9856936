"""Prefills fed in chunks (analysis/chunking.py): the rule, the runtime following it and
recording it, the calibration charging the per-sequence cost per pass, and the simulator's
calibrated and affine models costing a long prompt as the engine runs it."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, strategies as st

from psdlab.analysis.chunking import Chunking, chunking_from, chunkings_from
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace,
                                   TraceFormatError, read_trace, write_trace)
from psdlab.validation.phase_model import phase_features
from psdlab.validation.calibrate import calibrate, prefill_chunking
from psdlab.sim.costs.fitted import write_fit
from psdlab.validation.model_file import model_parts

# ---------------------------------------------------------------------------- the rule


@given(chunk=st.integers(1, 300), leave=st.integers(0, 3), length=st.integers(0, 2000))
def test_passes_are_the_fewest_chunks_that_cover_the_prompt(chunk, leave, length):
    n = int(Chunking(chunk, leave).passes_each([length])[0])
    fed = max(length - leave, 0)
    assert n >= 1 and n * chunk >= fed
    assert n == 1 or (n - 1) * chunk < fed          # one pass fewer would not cover it


def test_passes_step_up_just_above_a_chunk():
    target, drafter = Chunking(128, leave=1), Chunking(128, leave=0)
    assert target.passes_each([2, 128, 129, 130, 257, 258]).tolist() == [1, 1, 1, 2, 2, 3]
    assert drafter.passes_each([1, 128, 129, 256, 257]).tolist() == [1, 1, 2, 2, 3]
    assert target.passes([40, 130, 300]) == 1 + 2 + 3


@pytest.mark.parametrize("value,needle", [
    ([0, 1], "chunking.chunk"), ([64, -1], "chunking.leave"), ([64], "[chunk, leave]"),
    ("128", "[chunk, leave]"), ([64.5, 1], "[chunk, leave]"), ([True, 0], "[chunk, leave]")])
def test_a_bad_rule_is_a_one_line_error_naming_the_field(value, needle):
    with pytest.raises(ValueError) as err:
        chunking_from(value, "cost.prefill_chunking")
    msg = str(err.value)
    assert "cost.prefill_chunking" in msg and needle in msg and "\n" not in msg


def test_rules_by_role():
    assert chunkings_from({"target": [128, 1], "drafter": None}, "x") == {
        "target": Chunking(128, 1)}
    assert chunkings_from(None, "x") == {}
    with pytest.raises(ValueError, match="x: must be an object"):
        chunkings_from([128, 1], "x")


# ---------------------------------------------------------------------------- traces

def _run(extra=None) -> RunInfo:
    return RunInfo(mode="sd", k=2, m=4, source="test",
                   devices={"target": "cpu:0", "drafter": "cpu:1"}, extra=extra or {})


def test_phase_chunks_round_trip_and_are_omitted_when_unset(tmp_path):
    steps = [StepRecord(0, 0.0, 0.2, (Phase("prefill", "cpu:0", 0.0, 0.2, 2, 300, 0, 3),)),
             StepRecord(1, 0.2, 0.3, (Phase("verify", "cpu:0", 0.2, 0.3, 2, 6, 300),))]
    path = tmp_path / "t.jsonl"
    write_trace(path, Trace(run=_run(), steps=steps))
    lines = path.read_text().splitlines()
    assert '"chunks":3' in lines[1] and "chunks" not in lines[2]
    back = read_trace(path)
    assert [p.chunks for s in back.steps for p in s.phases] == [3, 0]


def test_a_negative_chunk_count_names_the_line_and_field(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, Trace(run=_run(), steps=[
        StepRecord(0, 0.0, 0.2, (Phase("prefill", "cpu:0", 0.0, 0.2, 1, 30, 0, 1),))]))
    path.write_text(path.read_text().replace('"chunks":1', '"chunks":-2'))
    with pytest.raises(TraceFormatError,
                       match=r"t.jsonl:2: field .phases\[0\]\.chunks.: must be >= 0"):
        read_trace(path)


# ---------------------------------------------------------------------------- calibration

#: the machine of the synthetic traces: a prefill pays per_seq per pass (seconds)
PREFILL = {"base": 0.05, "per_seq": 0.055, "per_token": 0.0013}
RULE = Chunking(128, leave=1)


def _chunked_trace(seed: int, n_steps: int, long_prompts: bool) -> Trace:
    rng = np.random.default_rng(seed)
    steps, t = [], 0.0
    hi = 400 if long_prompts else 129
    for i in range(n_steps):
        lengths = rng.integers(20, hi + 1, size=int(rng.integers(1, 5)))
        passes = RULE.passes(lengths)
        d = (PREFILL["base"] + PREFILL["per_seq"] * passes + PREFILL["per_token"]
             * lengths.sum()) * (1 + 0.01 * rng.standard_normal())
        ph = Phase("prefill", "cpu:0", t, t + d, len(lengths), int(lengths.sum()), 0, passes)
        v = 0.05 + 0.002 * 4 * len(lengths)
        steps.append(StepRecord(i, t, t + d + v, (ph, Phase("verify", "cpu:0", t + d, t + d + v,
                                                              len(lengths), 4 * len(lengths),
                                                              50 * len(lengths)))))
        t += d + v
    reqs = [RequestRecord(r, 0.0, 0.0, 0.01, t, 50, 10) for r in range(4)]
    return Trace(run=_run({"prefill_chunking": {"target": RULE.to_list()}}), steps=steps,
                 requests=reqs)


def test_the_prefill_fit_charges_per_seq_per_pass():
    ph = Phase("prefill", "cpu:0", 0.0, 1.0, 2, 400, 0, 5)
    assert phase_features("prefill", ph)["per_seq"] == 5.0
    assert phase_features("prefill", Phase("prefill", "cpu:0", 0.0, 1.0, 2, 400))["per_seq"] == 2
    cal = calibrate([_chunked_trace(1, 200, long_prompts=True)], holdout=0.0)
    coef = cal.costs["prefill"].coefficients()
    for term, true in PREFILL.items():
        assert coef[term] == pytest.approx(true, rel=0.05), term
    assert cal.prefill_chunking == {"target": [128, 1]}


def test_a_model_fitted_on_short_prompts_costs_long_ones_as_the_engine_runs_them(tmp_path):
    """Calibrated where every prompt fits one pass, the model file still carries the rule,
    so the simulator's calibrated model charges a 300-token prompt three passes -- what the
    synthetic machine takes -- where one pass per sequence would be 0.11 s short."""
    from psdlab.sim.costs import make_cost_model
    from psdlab.sim.costs.calibrated import calibrated_cost_spec
    path = tmp_path / "model.json"
    cal = calibrate([_chunked_trace(2, 200, long_prompts=False)], holdout=0.0)
    write_fit(path, *model_parts(cal))
    assert json.loads(path.read_text())["meta"]["prefill_chunking"] == {"target": [128, 1]}
    cost = make_cost_model(calibrated_cost_spec(str(path), "target"))
    assert cost.chunking == RULE
    passes = int(cost.prefill_passes([300]).sum())
    truth = PREFILL["base"] + PREFILL["per_seq"] * 3 + PREFILL["per_token"] * 300
    assert passes == 3
    assert cost.forward_time(passes, 300, 0) == pytest.approx(truth, rel=0.03)
    assert cost.forward_time(1, 300, 0) < truth - 0.1


def test_traces_with_different_rules_use_none():
    a = _chunked_trace(3, 5, long_prompts=True)
    b = Trace(run=_run({"prefill_chunking": {"target": [64, 1]}}), steps=a.steps)
    rules, notes = prefill_chunking([a, b])
    assert rules == {} and "different prefill chunkings" in notes[0]
    assert prefill_chunking([a, a]) == ({"target": [128, 1]}, ())


# ---------------------------------------------------------------------------- simulator

def _one_request(tmp_path, target: dict, prompt: int, path: str = "fast") -> float:
    """The simulated target prefill time of one request with a ``prompt``-token prompt."""
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.simulation import simulate
    cfg = config_from_dict({
        "seed": 0, "requests": 1, "server": {"mode": "ar", "k": 0, "m": 1},
        "target": {"name": "t", "cost": target},
        "acceptance": {"name": "geometric", "alpha": 0.5},
        "workload": {"name": "offline", "prompt": {"name": "fixed", "value": prompt},
                     "output": {"name": "fixed", "value": 4}},
        "trace": {"level": "step"}})
    out = tmp_path / f"{path}-{prompt}.jsonl"
    simulate(cfg, path=path, trace_path=str(out))
    return next(p.end - p.start for s in read_trace(out).steps for p in s.phases
                if p.kind == "prefill")


@pytest.mark.parametrize("path", ["fast", "simpy"])
def test_the_simulator_charges_each_pass_of_a_chunked_prefill(tmp_path, path):
    affine = {"name": "affine", "base": 0.05, "per_seq": 0.055, "per_token": 0.0013}
    chunked = dict(affine, prefill_chunking=[128, 1])
    for prompt, passes in ((129, 1), (130, 2), (300, 3)):
        want = 0.05 + 0.055 * passes + 0.0013 * prompt
        assert _one_request(tmp_path, chunked, prompt, path) == pytest.approx(want, rel=1e-12)
        flat = 0.05 + 0.055 + 0.0013 * prompt
        assert _one_request(tmp_path, affine, prompt, path) == pytest.approx(flat, rel=1e-12)


def test_a_bad_rule_in_a_sim_config_is_a_one_line_error():
    from psdlab.sim.costs import make_cost_model
    with pytest.raises(ValueError) as err:
        make_cost_model({"name": "affine", "base": 0.01, "prefill_chunking": [0, 1]}, "target")
    assert "target.prefill_chunking" in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------- runtime

@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import torch
    from runtime_engine_util import shared_pair
    torch.set_num_threads(1)
    return shared_pair(tmp_path_factory)


@pytest.mark.parametrize("role", ["target", "drafter"])
def test_the_runner_feeds_prompts_in_the_passes_the_rule_counts(models, role):
    """The passes of the runner's own prefill (target: verify with no drafts; drafter:
    feed), counted at the model, equal the rule's count, around and beyond one chunk."""
    from psdlab.runtime.runner import PREFILL_RULES, ModelRunner, ModelSpec, RunnerConfig
    runner = ModelRunner(RunnerConfig(spec=ModelSpec(str(models["target"])), max_slots=3,
                                      max_len=256))
    calls: list[int] = []
    forward = runner._forward

    def counting(slots, rows, only_last=False):
        calls.append(len(slots))
        return forward(slots, rows, only_last)
    runner._forward = counting
    rule = PREFILL_RULES[role]
    rng = np.random.default_rng(0)
    for lengths in ([2], [128], [129], [130], [40, 129, 200], [256]):
        rows = [rng.integers(0, 90, size=n).tolist() for n in lengths]
        calls.clear()
        slots = list(range(len(rows)))
        if role == "target":
            runner.verify(slots, [0] * len(rows), rows, [[] for _ in rows], None)
            catch_up = calls[:-1]            # the last call is the batched first-token pass
            assert calls[-1] == len(rows)
        else:
            runner.feed(slots, [0] * len(rows), rows)
            catch_up = calls
        assert len(catch_up) == rule.passes(lengths), lengths
        assert all(n == 1 for n in catch_up)   # one slot at a time


def test_runtime_traces_record_the_passes_and_the_rule(models, tmp_path):
    """An SD run with prompts on both sides of a chunk: every prefill phase records the
    rule's passes, the run records the rule, the model file carries it to the simulator, and
    the long prompts' output is still the target's own (lossless)."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import PREFILL_RULES, ModelSpec
    from psdlab.sim.costs import make_cost_model
    from psdlab.sim.costs.calibrated import calibrated_cost_spec
    rng = np.random.default_rng(1)
    lengths = [30, 200, 129, 130, 60, 140]
    reqs = [Request(f"r{i}", tuple(rng.integers(0, 90, size=n).tolist()), max_new_tokens=6)
            for i, n in enumerate(lengths)]
    outs = {}
    for mode in ("ar", "sd-sep"):
        cfg = EngineConfig(mode=mode, k=2, batch=2, max_new_tokens=6, backend="inline",
                           max_len=256, ignore_eos=True)
        with Engine(cfg, ModelSpec(str(models["target"])),
                    ModelSpec(str(models["noisy"])) if mode != "ar" else None) as eng:
            res = eng.run(reqs)
        outs[mode] = {o.id: o.token_ids for o in res.outputs}
    trace = res.trace
    assert outs["sd-sep"] == outs["ar"]
    assert trace.run.extra["prefill_chunking"] == {r: c.to_list() for r, c in
                                                   PREFILL_RULES.items()}
    by_id = {r.id: r.prompt_len for r in trace.requests}
    assert sorted(by_id.values()) == sorted(lengths)
    seen = 0
    for step in trace.steps:
        for ph in step.phases:
            if ph.kind == "prefill":
                role = "target" if ph.device == trace.run.devices["target"] else "drafter"
                assert ph.chunks >= ph.seqs
                if ph.seqs == 1:
                    assert ph.chunks == PREFILL_RULES[role].passes([ph.tokens])
                seen += ph.chunks > ph.seqs
    assert seen >= 2                         # the long prompts really took extra passes
    path = tmp_path / "model.json"
    write_fit(path, *model_parts(calibrate([trace], holdout=0.0)))
    cost = make_cost_model(calibrated_cost_spec(str(path), "target"))
    assert cost.chunking == PREFILL_RULES["target"]
