"""PSD inside vLLM v1 on a tiny random Llama (skipped when vLLM is not installed).

Greedy PSD-in-vLLM and vLLM's own draft-model SD must equal vLLM without speculation token for
token; the psdlab trace of each run must read back and the PSD run must have the PSD structure
(the other half drafted across each verification, halves alternating);
requests that arrive, finish or are aborted mid-run keep the halves balanced."""
from __future__ import annotations

import os

import pytest

vllm = pytest.importorskip("vllm")

from psdlab.analysis.trace import read_trace  # noqa: E402
from psdlab.runtime.vllm_ext.vllm_runner import (VllmRunConfig, run_vllm,  # noqa: E402
                                            run_vllm_isolated)
from psdlab.runtime.vllm_ext.tiny import tiny_pair, tiny_prompts  # noqa: E402

pytestmark = pytest.mark.skipif(not {0, 1} <= set(os.sched_getaffinity(0)),
                                reason="needs CPU cores 0 (drafter) and 1 (target)")

PROMPTS = tiny_prompts(6, seed=3)
NEW = 20


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny"))


def _cfg(pair, mode, trace, draft=None, **kw):
    return VllmRunConfig(mode=mode, target=pair["target"], draft=draft or pair["draft"], k=3,
                         batch=3, max_new_tokens=NEW, ignore_eos=True, max_model_len=128,
                         trace=str(trace), **kw)


@pytest.fixture(scope="module")
def runs(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    res = {"caller_affinity": os.sched_getaffinity(0)}
    for mode in ("ar", "sd", "psd"):
        res[mode] = run_vllm(_cfg(pair, mode, out / f"{mode}.jsonl"), PROMPTS)
        res[mode + "_trace"] = out / f"{mode}.jsonl"
    res["caller_affinity_after"] = os.sched_getaffinity(0)
    return res


def test_the_target_runs_on_its_core_alone(runs):
    """The engine thread's affinity and torch threads, as read inside vLLM's scheduler: the
    target's core only (before the binding the in-process engine ran on every core, the PSD
    drafter's too); the caller's own affinity is given back after each run."""
    for mode in ("ar", "sd", "psd"):
        extra = read_trace(runs[mode + "_trace"]).run.extra
        assert extra["target_affinity"] == [1], (mode, extra)
        assert extra["target_torch_threads"] == 1, (mode, extra)
    assert runs["caller_affinity_after"] == runs["caller_affinity"]


def test_isolated_run_binds_two_cores_and_equals_in_process(pair, runs, tmp_path):
    """A run in its own process (what the benchmark compares configurations with) gives the
    same greedy output, on the cores it asks for."""
    res = run_vllm_isolated(_cfg(pair, "ar", tmp_path / "iso.jsonl", target_cores="0-1"),
                            PROMPTS)
    assert res.outputs == runs["ar"].outputs
    extra = read_trace(tmp_path / "iso.jsonl").run.extra
    assert extra["target_affinity"] == [0, 1] and extra["target_torch_threads"] == 2


def test_psd_and_sd_greedy_equal_no_speculation(runs):
    assert all(len(o) == NEW for o in runs["ar"].outputs)
    assert runs["psd"].outputs == runs["ar"].outputs
    assert runs["sd"].outputs == runs["ar"].outputs


def test_psd_trace_reads_back_and_the_run_has_the_psd_structure(runs):
    """Structure, not wall-clock: each step but the first and the tail dispatched the other
    half's drafting before scheduling this half's verification and collected it after the
    output; the halves alternate (`runtime.vllm_ext.structure`).  How much the two phases
    intersect on the clock is the benchmark's figure (a 3 ms step of a tiny model can end
    before the drafter process has started)."""
    from psdlab.runtime.vllm_ext.structure import psd_structure
    trace = read_trace(runs["psd_trace"])
    assert trace.run.mode == "psd" and trace.run.source == "vllm"
    assert len(trace.requests) == len(PROMPTS)
    assert sum(r.output_len for r in trace.requests) == NEW * len(PROMPTS)
    st = psd_structure(runs["psd"].events)
    assert st.ok, st.problems
    assert st.steps == len(trace.steps)
    # 6 prompts in halves of 3: all but the prefill step and a short tail are overlapped
    assert st.overlapped >= len(trace.steps) // 2 and st.alternations >= st.overlapped - 2
    drafted = [s for s in trace.steps if s.draft_batch is not None]
    assert len(drafted) == st.overlapped
    for s in drafted:
        kinds = {p.kind: p for p in s.phases}
        assert kinds["draft"].device != kinds["verify"].device
        assert {s.verify_batch, s.draft_batch} == {0, 1}
    verified = [v for s in trace.steps for v in s.verified]
    assert any(v.proposed > 0 for v in verified)
    # every token of the output is accounted for by the verified rows
    assert sum(v.emitted for v in verified) == NEW * len(PROMPTS)


def test_psd_drafts_are_accepted_when_drafter_is_the_target(pair, tmp_path):
    res = run_vllm(_cfg(pair, "psd", tmp_path / "same.jsonl", draft=pair["target"]),
                   PROMPTS[:2])
    trace = read_trace(tmp_path / "same.jsonl")
    proposed = sum(v.proposed for s in trace.steps for v in s.verified)
    accepted = sum(v.accepted for s in trace.steps for v in s.verified)
    assert proposed > 0 and accepted >= 0.5 * proposed
    assert len(res.outputs) == 2


def test_ar_and_sd_traces_read_back(runs):
    for mode in ("ar", "sd"):
        trace = read_trace(runs[mode + "_trace"])
        assert trace.run.mode == mode
        assert len(trace.requests) == len(PROMPTS)
    sd = read_trace(runs["sd_trace"])
    assert any(v.proposed > 0 for s in sd.steps for v in s.verified)


def test_arrivals_finishes_and_aborts_keep_halves_balanced(pair, runs, tmp_path):
    """Step the engine by hand: requests arrive mid-run, finish at different lengths, and two
    are aborted; after every step the halves differ by at most one and hold exactly the
    running requests; the survivors' output equals the no-speculation output."""
    from vllm.inputs import TokensPrompt  # pyright: ignore[reportMissingImports]

    from psdlab.runtime.vllm_ext.vllm_runner import build_llm, close_llm, sampling_params
    from psdlab.runtime.vllm_ext.patches import engine_scheduler
    cfg = _cfg(pair, "psd", tmp_path / "live.jsonl")
    llm = build_llm(cfg)
    try:
        engine, sched = llm.llm_engine, engine_scheduler(llm)
        params = sampling_params(cfg)
        short = sampling_params(VllmRunConfig(**{**cfg.__dict__, "max_new_tokens": 5}))
        arrivals = {0: [0, 1, 2], 3: [3], 5: [4, 5]}
        aborts = {7: ["1"], 9: ["4"]}
        done: dict[str, list[int]] = {}
        for step in range(200):
            for i in arrivals.get(step, []):
                engine.add_request(str(i), TokensPrompt(prompt_token_ids=PROMPTS[i]),
                                   short if i == 2 else params)
            if step in aborts:
                engine.abort_request(aborts[step])
            for o in engine.step():
                if o.finished:
                    done[o.request_id] = list(o.outputs[0].token_ids)
            running = [r.request_id for r in sched.running]
            a, b = sched.halves.sizes()
            assert abs(a - b) <= 1, (step, a, b)
            assert sorted(sched.halves.members(0) + sched.halves.members(1)) == sorted(running)
            if step > max(arrivals) and not engine.has_unfinished_requests():
                break
    finally:
        close_llm(llm)
    expected = runs["ar"].outputs
    for i in ("0", "3", "5"):
        assert done[i] == expected[int(i)]
    assert done["2"] == expected[2][:5]
    from psdlab.runtime.vllm_ext.structure import psd_structure
    st = psd_structure(sched.events)
    assert st.ok and st.overlapped > 0, st
    trace = read_trace(tmp_path / "live.jsonl")
    assert len(trace.requests) == 6     # aborted ones are recorded too


def test_psdlab_run_engine_vllm_cli(pair, runs, tmp_path, capsys):
    """`psdlab run --engine vllm --mode psd` writes a trace, the outputs and a JSON summary."""
    import json

    from psdlab.cli import main
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt_ids": p}) + "\n"
                               for i, p in enumerate(PROMPTS[:2])))
    rc = main(["run", "--engine", "vllm", "--mode", "psd", "--k", "3", "--batch", "1",
               "--target", pair["target"], "--draft", pair["draft"], "--prompts", str(prompts),
               "--max-new-tokens", str(NEW), "--ignore-eos", "--max-len", "128",
               "--trace", str(tmp_path / "t.jsonl"), "--outputs", str(tmp_path / "o.jsonl"),
               "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["engine"] == "vllm" and summary["requests"] == 2
    outs = [json.loads(x)["tokens"] for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert outs == runs["ar"].outputs[:2]
    assert read_trace(tmp_path / "t.jsonl").run.mode == "psd"
