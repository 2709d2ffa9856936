"""The simulator's adaptive server (sim.adaptive): both execution paths agree, every request gets
its tokens, switches and their costs are counted, settings are checked."""
from __future__ import annotations

import pytest

from psdlab.analysis.trace import dumps
from psdlab.sim.sim_config import config_from_dict
from psdlab.sim.simulation import simulate


def _raw(rate: float | None = 4.0, m: int = 8, n: int = 30, seed: int = 1, **adaptive):
    workload = ({"name": "poisson", "rate": rate} if rate is not None else {"name": "offline"})
    workload.update(prompt={"name": "fixed", "value": 24},
                    output={"name": "uniform", "low": 8, "high": 40})
    return {"seed": seed, "requests": n, "server": {"mode": "adaptive", "m": m},
            "adaptive": {"k_choices": [1, 2, 4], "hold": 2, **adaptive},
            "target": {"name": "t", "cost": {"name": "affine", "base": 0.01,
                                             "per_token": 0.0006}},
            "drafter": {"name": "d", "cost": {"name": "affine", "base": 0.003,
                                              "per_token": 0.0002}},
            "acceptance": {"name": "geometric", "alpha": 0.7}, "workload": workload,
            "trace": {"level": "step"}}


def _lines(res):
    return [dumps(r) for r in res.trace.steps + res.trace.requests]


@pytest.mark.parametrize("rate, modes", [(None, ["ar", "sd", "psd"]), (2.0, ["ar", "sd", "psd"]),
                                         (50.0, ["sd", "psd"]), (5.0, ["ar", "psd"])])
def test_fast_and_simpy_paths_give_the_same_trace(rate, modes):
    cfg = config_from_dict(_raw(rate, modes=modes))
    fast, slow = simulate(cfg, path="fast"), simulate(cfg, path="simpy")
    assert _lines(fast) == _lines(slow)
    assert fast.counters == slow.counters
    assert fast.trace.run.extra["adaptive"] == slow.trace.run.extra["adaptive"]


def test_same_seed_same_trace_and_other_seed_differs():
    a = simulate(config_from_dict(_raw(seed=3)))
    b = simulate(config_from_dict(_raw(seed=3)))
    c = simulate(config_from_dict(_raw(seed=4)))
    assert _lines(a) == _lines(b)
    assert _lines(a) != _lines(c)


def _emitted_per_request(res):
    got: dict = {}
    for s in res.trace.steps:
        for v in s.verified:
            got[v.req] = got.get(v.req, 0) + v.emitted
            assert 0 <= v.accepted <= v.proposed
    return got


@pytest.mark.parametrize("rate", [None, 3.0])
def test_every_request_gets_its_output_and_no_more(rate):
    res = simulate(config_from_dict(_raw(rate)))
    got = _emitted_per_request(res)
    assert len(res.trace.requests) == 30
    for r in res.trace.requests:
        assert got.get(r.id, 0) + 1 == r.output_len            # + the prefill's token
        assert r.arrival <= r.admitted <= r.first_token <= r.finish


def test_slot_limit_holds_in_every_mode():
    res = simulate(config_from_dict(_raw(None, m=6)))
    for s in res.trace.steps:
        assert sum(p.seqs for p in s.phases if p.kind == "verify") <= 6


def test_switches_are_counted_with_their_costs():
    """Offline: a full batch first (AR or little speculation wins), then the tail drains to a
    few sequences, where speculation wins: the policy switches and pays the drafter's
    catch-up; the counts in the trace header match the counters."""
    raw = _raw(None, m=16, n=40, hold=1, margin=0.0, modes=["ar", "sd"])
    raw["target"]["cost"] = {"name": "affine", "base": 0.02, "per_token": 0.003}
    res = simulate(config_from_dict(raw))
    summary = res.trace.run.extra["adaptive"]
    assert res.counters["switches"] == summary["switches"] > 0
    assert sum(summary["transitions"].values()) == summary["switches"]
    assert any(k.startswith("ar->") for k in summary["transitions"])
    assert res.counters["catch_up_tokens"] > 0
    assert summary["switch_cost_s"]["catch_up"] > 0
    assert summary["steps"]["ar"] > 0 and summary["steps"]["sd"] > 0
    assert [lab for _, lab in summary["timeline"]][0] == "ar"


def test_psd_steps_overlap_and_alternate():
    raw = _raw(None, m=8, n=16, modes=["psd"], k_choices=[2])
    res = simulate(config_from_dict(raw))
    over = [s for s in res.trace.steps if s.overlapped]
    assert over
    for s in over:
        assert {s.verify_batch, s.draft_batch} == {0, 1}
        kinds = {(p.kind, p.device) for p in s.phases}
        assert ("verify", "sim:target") in kinds and ("draft", "sim:drafter") in kinds


def test_metrics_from_the_trace():
    res = simulate(config_from_dict(_raw(3.0)))
    assert res.metrics["throughput_tok_s"] > 0
    assert res.trace.run.mode == "adaptive"


@pytest.mark.parametrize("change, msg", [
    ({"server": {"mode": "adaptive", "m": 4, "k_choices": [2]}}, "server.k_choices: not allowed"),
    ({"adaptive": {"hold": 0}}, "adaptive.hold: must be in [1, 10000]"),
    ({"adaptive": {"bogus": 1}}, "adaptive.bogus: unknown field"),
])
def test_bad_settings_are_one_line_errors(change, msg):
    raw = {**_raw(), **change}
    with pytest.raises(ValueError) as exc:
        simulate(config_from_dict(raw))
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_adaptive_table_needs_the_adaptive_mode():
    raw = _raw()
    raw["server"] = {"mode": "sd", "m": 4}
    with pytest.raises(ValueError, match="adaptive: only with server.mode = 'adaptive'"):
        config_from_dict(raw)


# ---------------------------------------------------------------------------- one simulator

def _step_times(res, kind):
    return [p.end - p.start for s in res.trace.steps for p in s.phases if p.kind == kind]


def test_adaptive_and_fixed_modes_serve_the_same_requests():
    """One build (sim.build): the same seed draws the same requests whatever the mode."""
    from psdlab.sim.build import build
    ad = build(config_from_dict(_raw(3.0, seed=5))).core
    raw = _raw(3.0, seed=5)
    raw.pop("adaptive")
    raw["server"] = {"mode": "psd", "k": 2, "m": 8}
    fixed = build(config_from_dict(raw)).core
    for name in ("arrival", "prompt", "output"):
        assert (getattr(ad, name) == getattr(fixed, name)).all()
    assert ad.drafter_dev == fixed.drafter_dev == "sim:drafter"


def test_the_adaptive_table_is_read_once_into_a_frozen_policy():
    import dataclasses

    from psdlab.analysis.adaptive_policy import PolicyConfig
    cfg = config_from_dict(_raw())
    assert isinstance(cfg.policy, PolicyConfig) and cfg.policy.k_choices == (1, 2, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.policy.hold = 5                                   # type: ignore[misc]
    assert cfg.replace(adaptive={"hold": 7}).policy.hold == 7
    raw = _raw()
    raw["server"] = {"mode": "sd", "k": 2, "m": 4}
    raw.pop("adaptive")
    assert config_from_dict(raw).policy is None


def _offline_ar(**extra):
    raw = _raw(None, m=8, n=16, modes=["ar"])
    raw.update(extra)
    return config_from_dict(raw)


def test_jitter_varies_step_times_reproducibly_and_both_paths_agree():
    jit = {"jitter": {"dist": "gamma", "cv": 0.2}}
    plain = simulate(_offline_ar())
    a, b = simulate(_offline_ar(**jit)), simulate(_offline_ar(**jit), path="simpy")
    assert _lines(a) == _lines(b) and a.counters == b.counters
    assert _lines(a) == _lines(simulate(_offline_ar(**jit)))          # per seed: reproducible
    # AR only and every request there at once: the same steps, their times scaled by the jitter
    t0, t1 = _step_times(plain, "verify"), _step_times(a, "verify")
    assert len(t0) == len(t1) > 10
    ratios = [y / x for x, y in zip(t0, t1, strict=True)]
    mean = sum(ratios) / len(ratios)
    assert abs(mean - 1) < 0.15
    assert max(ratios) - min(ratios) > 0.2
    other = simulate(_offline_ar(**jit, seed=2))
    plain2 = simulate(_offline_ar(seed=2))
    ratios2 = [y / x for x, y in zip(_step_times(plain2, "verify"), _step_times(other, "verify"),
                                     strict=True)]
    assert ratios2 != ratios                                        # another seed, other factors
    assert a.trace.run.extra["jitter"] == {"dist": "gamma", "cv": 0.2}


@pytest.mark.parametrize("path", ["fast", "simpy"])
def test_an_engine_step_makes_adaptive_steps_slower(path):
    """The engine step's host work lands on every verify and drafting phase (no jitter here:
    its CVs are replaced by a [jitter] table of cv 0)."""
    raw = _raw(None, m=8, n=20, modes=["sd"], k_choices=[2])
    raw["jitter"] = {"dist": "gamma", "cv": 0.0}
    plain = simulate(config_from_dict(raw), path=path)
    raw["server"] = {**raw["server"], "engine_step": "vllm-v0"}
    host = simulate(config_from_dict(raw), path=path)
    assert host.makespan_s > plain.makespan_s
    assert host.trace.run.extra["engine_step"]["name"] == "vllm-v0"
    for kind in ("verify", "draft"):
        t0, t1 = _step_times(plain, kind), _step_times(host, kind)
        assert len(t0) == len(t1) and all(y > x for x, y in zip(t0, t1, strict=True))
    assert _lines(host) == _lines(simulate(config_from_dict(raw),
                                           path="simpy" if path == "fast" else "fast"))


def test_first_token_at_step_end():
    raw = _raw(None, m=8, n=12, modes=["sd"], k_choices=[2])
    early = simulate(config_from_dict(raw))
    raw["server"] = {**raw["server"], "first_token": "step"}
    late = simulate(config_from_dict(raw))
    assert _lines(late) == _lines(simulate(config_from_dict(raw), path="simpy"))
    first = {r.id: r.first_token for r in early.trace.requests}
    assert all(r.first_token >= first[r.id] for r in late.trace.requests)
    assert any(r.first_token > first[r.id] for r in late.trace.requests)
    ends = {s.index: s.end for s in late.trace.steps}               # the decode record's end
    prefill_steps = [s for s in late.trace.steps if any(p.kind == "prefill" for p in s.phases)]
    assert {r.first_token for r in late.trace.requests} <= {ends[s.index] for s in prefill_steps}


@pytest.mark.parametrize("modes", [["sd"], ["psd"], ["ar", "sd", "psd"]])
def test_capped_proposals_never_draft_past_the_output(modes):
    """server.cap_proposals: a sequence proposes min(k, tokens it still needs - 1); the
    verification is padded to the longest row; both paths agree."""
    raw = _raw(None, m=8, n=20, modes=modes, k_choices=[4])
    free = simulate(config_from_dict(raw))
    raw["server"] = {**raw["server"], "cap_proposals": True}
    cap = simulate(config_from_dict(raw))
    assert _lines(cap) == _lines(simulate(config_from_dict(raw), path="simpy"))
    assert cap.trace.run.extra["cap_proposals"] is True
    out = {r.id: r.output_len for r in cap.trace.requests}
    made = {r: 1 for r in out}                                   # the prefill's token
    for s in cap.trace.steps:
        for v in s.verified:
            assert v.proposed <= max(out[v.req] - made[v.req] - 1, 0)
            made[v.req] += v.emitted
        for p in s.phases:
            if p.kind == "verify" and s.verified:
                assert p.tokens == len(s.verified) * (max(v.proposed for v in s.verified) + 1)
    assert made == out
    assert (sum(p.tokens for s in cap.trace.steps for p in s.phases if p.kind == "draft")
            < sum(p.tokens for s in free.trace.steps for p in s.phases if p.kind == "draft"))
