"""The runtime engine: batch manager, arrivals, per-sequence cache bookkeeping, the PSD schedule
(first draft alone, alternating batches, SD fallback), controlled acceptance, and `psdlab run`."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.runtime.batch_manager import BatchManager
from psdlab.runtime.requests import Request, Seq, arrival_times

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.runtime

from psdlab.analysis.trace import read_trace  # noqa: E402
from psdlab.runtime.controlled_drafts import ControlledProposer  # noqa: E402
from psdlab.runtime.controller import Engine, EngineConfig  # noqa: E402
from psdlab.runtime.runner import ModelSpec  # noqa: E402
from psdlab.runtime.run_setup import Models, run_requests  # noqa: E402
from runtime_engine_util import (needs_two_cores, prompts, shared_pair,  # noqa: E402
                                 write_prompt_ids)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.set_num_threads(1)
    return shared_pair(tmp_path_factory)


# ----------------------------------------------------------------------------- batch manager

@settings(max_examples=60, deadline=None)
@given(cap=st.integers(1, 5), ops=st.lists(st.tuples(st.sampled_from(["add", "rm", "bal"]),
                                                    st.integers(0, 20)), max_size=40))
def test_batch_manager_keeps_batches_within_capacity_and_balanced(cap, ops):
    bm, live, nxt = BatchManager(cap), [], 0
    for op, x in ops:
        if op == "add" and bm.has_room():
            sizes = (bm.size(0), bm.size(1))
            b = bm.assign(nxt, draft_batch=x % 2)
            assert sizes[b] <= sizes[1 - b] or sizes[1 - b] >= cap   # joined the smaller one
            live.append(nxt)
            nxt += 1
        elif op == "rm" and live:
            bm.remove(live.pop(x % len(live)))
        elif op == "bal":
            bm.rebalance(prefer=live[::2])
            assert abs(bm.size(0) - bm.size(1)) <= 1
        assert bm.size(0) <= cap and bm.size(1) <= cap
        assert sorted(bm.members(0) + bm.members(1)) == sorted(live)
        assert all(bm.batch_of(s) in (0, 1) for s in live)


def test_batch_manager_moves_preferred_sequences_first():
    bm = BatchManager(4)
    for s in range(6):
        bm.assign(s)
    for s in (1, 3, 5):
        bm.remove(s)                                   # batch 1 emptied
    moves = bm.rebalance(prefer=[2])
    assert moves == [(2, 0, 1)]
    with pytest.raises(ValueError, match="already"):
        bm.assign(0)


def test_batch_manager_moves_the_most_recently_admitted_first():
    """With admission ranks the latest admitted (preferred) sequence moves, wherever it
    stands in its batch (a sequence moved earlier sits last in its new batch)."""
    bm = BatchManager(4)
    for s in "abcdef":
        bm.assign(s)                                   # 0: a c e, 1: b d f
    for s in "bdf":
        bm.remove(s)
    rank = {"a": 2, "c": 0, "e": 1}
    assert bm.rebalance(admitted=rank) == [("a", 0, 1)]
    bm2 = BatchManager(4)
    for s in "abcdef":
        bm2.assign(s)
    for s in "bdf":
        bm2.remove(s)
    assert bm2.rebalance(prefer=["c", "e"], admitted=rank) == [("e", 0, 1)]


# ----------------------------------------------------------------------------- requests

def test_arrival_schedules():
    assert arrival_times("offline", 3) == [0.0, 0.0, 0.0]
    assert arrival_times("gap:0.5", 3) == [0.0, 0.5, 1.0]
    assert arrival_times("times:0,2,1", 2) == [0.0, 2.0]
    p = arrival_times("poisson:10", 50, seed=4)
    assert p == arrival_times("poisson:10", 50, seed=4) and p == sorted(p)
    assert 2.0 < p[-1] < 10.0                          # about 50 / 10 seconds
    for bad, msg in (("poisson:0", "must be > 0"), ("burst", "must be offline"),
                     ("times:1", "1 times given"), ("gap:x", "expected gap")):
        with pytest.raises(ValueError, match=msg):
            arrival_times(bad, 2)


def test_seq_cache_validity_follows_the_committed_tokens():
    seq = Seq(Request("a", (5, 6, 7)), slot=0, max_new=10, max_len=20, eos=None)
    seq.append([8])                                    # first token from prefill
    seq.state["target"] = (3, [])
    assert seq.valid_len("target") == 3                # the last token is always fed again
    seq.state["drafter"] = (4, [1, 2, 3])              # drafted 1,2,3 (cache holds 1,2)
    seq.append([1, 2, 9])                              # two accepted, then a correction
    assert seq.valid_len("drafter") == 6
    seq.append([4])
    assert seq.valid_len("drafter") == 6
    assert seq.num_draft(4) == 4 and seq.num_draft(9) == 10 - 5 - 1
    assert Seq(Request("b", (1,) * 17), 0, 10, 20, None).num_draft(8) == 2


def test_seq_stops_at_eos_and_budget():
    seq = Seq(Request("a", (1,)), slot=0, max_new=5, max_len=50, eos=3)
    assert seq.append([7, 3, 9]) == 2 and seq.reason == "stop"
    seq = Seq(Request("b", (1,)), slot=0, max_new=2, max_len=50, eos=None)
    assert seq.append([7, 8, 9]) == 2 and seq.reason == "length"


@pytest.mark.parametrize("kw,msg", [({"k": 0}, "k: must be in"), ({"mode": "tree"}, "mode:"),
                                    ({"top_p": 0.0}, "top_p"), ({"batch": 0}, "batch"),
                                    ({"controlled_alpha": 0.5, "temperature": 1.0},
                                     "controlled_alpha: needs greedy"),
                                    ({"idle_spin_s": -1.0}, "idle_spin_s: must be in")])
def test_engine_config_rejects_bad_input_in_one_line(kw, msg):
    with pytest.raises(ValueError, match=msg) as info:
        EngineConfig(**kw)
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------------- PSD schedule

def test_psd_schedule_first_draft_alone_then_alternating_then_sd_fallback(models):
    rows = prompts(6, seed=5, lo=2, hi=12)
    lengths = [24, 3, 12, 3, 12, 3]                    # batch 1 (odd ids) finishes early
    reqs = [Request(f"r{i}", tuple(r), max_new_tokens=n)
            for i, (r, n) in enumerate(zip(rows, lengths))]
    cfg = EngineConfig(mode="psd", k=2, batch=3, max_new_tokens=16, backend="inline",
                       max_len=64, ignore_eos=True)
    with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))) as eng:
        result = eng.run(reqs)
    assert [len(o.token_ids) for o in result.outputs] == lengths
    decode = [s for s in result.trace.steps if not any(p.kind == "prefill" for p in s.phases)]
    first = decode[0]
    assert [p.kind for p in first.phases] == ["draft"] and first.draft_batch == 0
    assert not first.verified and not first.overlapped
    parallel = [s for s in decode[1:] if s.verify_batch is not None
                and s.draft_batch is not None and s.verify_batch != s.draft_batch]
    assert len(parallel) >= 2
    for a, b in zip(parallel, parallel[1:]):
        if b.index == a.index + 1:
            assert b.verify_batch == a.draft_batch     # verify what was drafted last step
    fallback = [s for s in decode if s.verify_batch is not None
                and s.verify_batch == s.draft_batch]   # one batch empty: SD steps
    assert fallback and fallback[-1].index == decode[-1].index
    rows_v = [v for s in parallel for v in s.verified]
    assert sum(v.proposed > 0 for v in rows_v) >= 0.5 * len(rows_v)


@pytest.mark.parametrize("mode", ["ar", "sd-sep", "psd"])
def test_decode_phases_record_the_kv_tokens_they_start_from(models, mode):
    """``Phase.context`` of a verify (and draft) phase is the tokens its sequences already
    hold in the KV cache: for one AR request exactly prompt + tokens emitted before the step
    less the one not yet fed; with drafts, growing from the prompt's length and never past
    prompt + output; prefills start from none."""
    prompt = prompts(1, seed=9, lo=6, hi=10)[0]
    cfg = EngineConfig(mode=mode, k=3, batch=2, max_new_tokens=12, backend="inline",
                       max_len=64, ignore_eos=True)
    drafter = None if mode == "ar" else ModelSpec(str(models["noisy"]))
    with Engine(cfg, ModelSpec(str(models["target"])), drafter) as eng:
        trace = eng.run([Request("r0", tuple(prompt), max_new_tokens=12)]).trace
    phases = [p for s in trace.steps for p in s.phases]
    assert all(p.context == 0 for p in phases if p.kind == "prefill")
    verify = [p.context for p in phases if p.kind == "verify"]
    if mode == "ar":
        assert verify == [len(prompt) + i for i in range(len(verify))] and len(verify) == 11
        return
    draft = [p.context for p in phases if p.kind == "draft"]
    for ctx in (verify, draft):
        assert ctx and ctx == sorted(ctx) and len(set(ctx)) == len(ctx)
        assert ctx[0] >= len(prompt) - 1 and ctx[-1] < len(prompt) + 12
    assert verify[0] == len(prompt)


# ----------------------------------------------------------------------------- drafter dtype

def _bf16_drafter(src, dst):
    """A copy of a drafter directory whose config asks to run in bfloat16 (as the shipped one)."""
    import shutil
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["psdlab_drafter"] = {"name": "test", "kept_layers": [0], "new_layers": 0, "sha256": "",
                             "dtype": "bfloat16"}
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_a_step_hook_that_returns_true_ends_the_run_after_that_step(models):
    """`Engine.run(on_step=...)`: the run ends after the step whose hook returned True -- not an
    interruption; the outputs so far are prefixes of the full run's and the trace holds
    exactly the steps made."""
    reqs = [Request(f"r{i}", tuple(p)) for i, p in enumerate(prompts(4, seed=21))]
    cfg = EngineConfig(mode="psd", k=2, batch=1, max_new_tokens=12, backend="inline",
                       max_len=128, ignore_eos=True)
    seen = []
    with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))) as eng:
        full = eng.run(reqs)
        part = eng.run(reqs, on_step=lambda loop, i: seen.append(i) or len(seen) == 3)
    assert not part.interrupted and len(seen) == 3          # the hook's index: steps written
    assert len(part.trace.steps) == seen[-1] < len(full.trace.steps)
    for a, b in zip(part.outputs, full.outputs):
        assert list(a.token_ids) == list(b.token_ids)[:len(a.token_ids)]
    assert sum(len(o.token_ids) for o in part.outputs) < sum(len(o.token_ids)
                                                             for o in full.outputs)


def test_drafter_runs_in_the_dtype_it_asks_for_and_output_stays_lossless(models, tmp_path):
    from psdlab.runtime.drafter_build import native_bf16_on_cpu, preferred_dtype
    auto = "bfloat16" if native_bf16_on_cpu() else "float32"     # emulated bf16: run fp32
    draft = _bf16_drafter(models["noisy"], tmp_path / "bf16")
    assert preferred_dtype(draft) == "bfloat16" and preferred_dtype(models["noisy"]) is None
    reqs = [Request(f"r{i}", tuple(r), max_new_tokens=10) for i, r in enumerate(prompts(4, seed=3))]
    base = dict(k=3, batch=2, max_new_tokens=10, backend="inline", max_len=64, ignore_eos=True)
    with Engine(EngineConfig(mode="ar", **base), ModelSpec(str(models["target"]))) as eng:
        ar = [o.token_ids for o in eng.run(reqs).outputs]
    seen = {}
    for name, override in (("auto", None), ("fp32", "float32")):
        cfg = EngineConfig(mode="psd", drafter_dtype=override, **base)
        with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(draft))) as eng:
            result = eng.run(reqs)
            seen[name] = next(p.dtype for p in eng.drafter.runner.model.parameters())
        assert [o.token_ids for o in result.outputs] == ar      # greedy: target-only output
        assert result.trace.run.extra["drafter_dtype"] == (override or auto)
        assert result.trace.run.extra["dtype"] == "float32"
    assert seen == {"auto": getattr(torch, auto), "fp32": torch.float32}
    with pytest.raises(ValueError, match="drafter_dtype: must be one of"):
        EngineConfig(drafter_dtype="int8")


@pytest.mark.parametrize("native", [True, False])
def test_bf16_runs_as_fp32_only_on_a_cpu_without_native_bf16(monkeypatch, native):
    from psdlab.runtime import drafter_build
    monkeypatch.setattr(drafter_build, "native_bf16_on_cpu", lambda: native)
    assert drafter_build.runnable_dtype("bfloat16", "cpu") == ("bfloat16" if native else
                                                                 "float32")
    assert drafter_build.runnable_dtype("bfloat16", "cuda:0") == "bfloat16"
    assert drafter_build.runnable_dtype("float32", "cpu") == "float32"
    assert drafter_build.runnable_dtype("float16", "cpu") == "float16"


# ----------------------------------------------------------------------------- controlled

def test_controlled_proposer_accepts_with_probability_alpha():
    ref = {"a": list(range(1, 400))}
    for alpha in (0.0, 0.6, 1.0):
        prop = ControlledProposer(alpha, ref, vocab_size=500, seed=1)
        hits = [prop.propose("a", g, [0, 0])[0] == ref["a"][g] for g in range(300)]
        share = sum(hits) / len(hits)
        assert abs(share - alpha) < 0.1
    miss = ControlledProposer(0.0, ref, 500, seed=2).propose("a", 0, [0, 0, 0])
    assert all(m != r for m, r in zip(miss, ref["a"]))
    assert ControlledProposer(1.0, ref, 500).propose("a", 398, [7, 8]) == [399, 8]


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_controlled_run_is_lossless_and_labelled(models, alpha):
    rows = prompts(4, seed=6)
    reqs = [Request(f"r{i}", tuple(r)) for i, r in enumerate(rows)]
    m = Models(str(models["target"]), str(models["other"]), None)
    base = EngineConfig(mode="ar", batch=4, max_new_tokens=12, backend="inline", max_len=128,
                        ignore_eos=True)
    ref = run_requests(base, m, reqs)
    cfg = EngineConfig(mode="psd", k=4, batch=2, max_new_tokens=12, backend="inline",
                       max_len=128, ignore_eos=True, controlled_alpha=alpha)
    result = run_requests(cfg, m, reqs)
    assert [o.token_ids for o in result.outputs] == [o.token_ids for o in ref.outputs]
    assert result.trace.run.extra["drafter"] == "controlled"
    assert result.trace.run.extra["controlled_alpha"] == alpha
    rows_v = [v for s in result.trace.steps for v in s.verified if v.proposed]
    accepted = sum(v.accepted for v in rows_v)
    proposed = sum(v.proposed for v in rows_v)
    if alpha == 1.0:
        assert accepted == proposed                    # the random drafter alone gets ~0
    else:
        assert 0 < accepted < proposed


# ----------------------------------------------------------------------------- CLI

def test_cli_run_writes_trace_outputs_and_json(models, tmp_path, capsys):
    from psdlab.cli import main
    pfile = write_prompt_ids(tmp_path / "p.jsonl", prompts(5, seed=7))
    trace, outs = tmp_path / "t.jsonl", tmp_path / "o.jsonl"
    code = main(["run", "--mode", "sd-sep", "--k", "3", "--batch", "2", "--prompts", str(pfile),
                 "--trace", str(trace), "--outputs", str(outs), "--target",
                 str(models["target"]), "--draft", str(models["noisy"]), "--max-new-tokens", "6",
                 "--max-len", "128", "--ignore-eos", "--backend", "inline", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "sd-sep" and summary["requests"] == 5
    assert summary["output_tokens"] == 30 and summary["mean_acceptance_length"] >= 1.0
    lines = [json.loads(x) for x in outs.read_text().splitlines()]
    assert [x["id"] for x in lines] == [f"r{i}" for i in range(5)]
    assert all(len(x["token_ids"]) == 6 for x in lines)
    assert len(read_trace(trace).requests) == 5


def test_cli_run_on_static_passes_in_the_batch_invariant_mode(models, tmp_path):
    """`psdlab run --passes static --batch-invariant`: the trace says how the workers ran
    their passes (one target shape), and the outputs equal AR's on dynamic passes."""
    from psdlab.cli import main
    pfile = write_prompt_ids(tmp_path / "p.jsonl", prompts(4, seed=9))
    common = ["--prompts", str(pfile), "--target", str(models["target"]), "--draft",
              str(models["noisy"]), "--max-new-tokens", "6", "--max-len", "128",
              "--ignore-eos", "--backend", "inline", "--k", "3", "--batch", "2"]
    runs = {}
    for name, extra in (("ar", ["--mode", "ar"]),
                        ("psd", ["--mode", "psd", "--passes", "static", "--batch-invariant"])):
        outs = tmp_path / f"{name}.jsonl"
        assert main(["run", *common, *extra, "--trace", str(tmp_path / f"{name}.trace"),
                     "--outputs", str(outs)]) == 0
        runs[name] = [json.loads(x)["token_ids"] for x in outs.read_text().splitlines()]
    assert runs["psd"] == runs["ar"]
    passes = read_trace(tmp_path / "psd.trace").run.extra["passes"]
    assert passes["target"] == {"passes": "static", "static_shapes": 1,
                                "static_setup_s": passes["target"]["static_setup_s"]}
    assert passes["drafter"]["passes"] == "static" and passes["drafter"]["static_shapes"] > 1


@pytest.mark.parametrize("argv,msg", [(["--k", "0"], "k: must be in [1, 64], got 0"),
                                      (["--arrivals", "soon"], "arrivals: must be"),
                                      (["--temperature", "-1"], "temperature: must be in"),
                                      (["--batch-invariant"], "batch_invariant: needs static"),
                                      (["--passes", "graphs"], "passes: graphs need a CUDA")])
def test_cli_run_bad_input_is_one_line(models, tmp_path, capsys, argv, msg):
    from psdlab.cli import main
    pfile = write_prompt_ids(tmp_path / "p.jsonl", [[1, 2]])
    code = main(["run", "--prompts", str(pfile), "--trace", str(tmp_path / "t.jsonl"),
                 "--target", str(models["target"]), "--draft", str(models["noisy"]),
                 "--backend", "inline"] + argv)
    err = capsys.readouterr().err
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- benchmarks

def test_bench_figures_follow_the_closed_form():
    from psdlab.runtime.overlap_bench import figures
    sd = {"requests": 4, "mean_draft_time_s": 0.03, "mean_verify_time_s": 0.06,
          "decode_throughput_tok_s": 100.0, "throughput_tok_s": 80.0}
    psd = {"requests": 4, "mean_draft_time_s": 0.03, "mean_verify_time_s": 0.06,
           "decode_throughput_tok_s": 140.0, "throughput_tok_s": 100.0,
           "draft_hidden_fraction": 0.95}
    fig = figures({"sd": sd, "psd": psd}, {"ar": [[1]], "sd_r0": [[1]], "psd_r0": [[1]]},
                  EngineConfig(k=4, batch=2))
    assert fig["predicted_gain"] == pytest.approx(1.5)          # (t + V) / max(t, V)
    assert fig["measured_gain"] == pytest.approx(1.4)
    assert fig["t_ms"] == pytest.approx(30.0) and fig["v_ms"] == pytest.approx(60.0)
    assert fig["overlap"] == 0.95 and fig["lossless"] is True
    fig = figures({"sd": sd, "psd": psd}, {"ar": [[1]], "sd_r0": [[1]], "psd_r0": [[2]]},
                  EngineConfig(k=4, batch=2))
    assert fig["lossless"] is False


def test_cycle_requests_repeats_prompts_with_distinct_ids():
    from psdlab.runtime.overlap_bench import cycle_requests
    reqs = [Request(f"p{i}", (i + 1, 2)) for i in range(3)]
    out = cycle_requests(reqs, 7)
    assert [r.id for r in out] == ["p0", "p1", "p2", "p0#2", "p1#2", "p2#2", "p0#3"]
    assert [r.prompt_ids for r in out] == [reqs[i % 3].prompt_ids for i in range(7)]
    assert cycle_requests(reqs, 2) == reqs[:2]
    with pytest.raises(ValueError, match="requests: the prompts file holds no prompts"):
        cycle_requests([], 4)


@pytest.mark.e2e
@needs_two_cores
def test_cli_bench_runtime_json(models, tmp_path, capsys):
    from psdlab.cli import main
    pfile = write_prompt_ids(tmp_path / "p.jsonl", prompts(4, seed=12))
    code = main(["bench-runtime", "--target", str(models["target"]), "--draft",
                 str(models["noisy"]), "--prompts", str(pfile), "--num-prompts", "6",
                 "--batch", "2", "--k", "3", "--max-new-tokens", "8", "--max-len", "128",
                 "--rounds", "1", "--trace-dir", str(tmp_path / "tr"), "--json"])
    assert code == 0
    fig = json.loads(capsys.readouterr().out)
    assert fig["lossless"] is True
    assert fig["requests"] == 6                        # 4 prompts, cycled to 6 requests
    t = read_trace(tmp_path / "tr" / "psd_r1.jsonl")
    assert t.run.devices == {"target": "cpu:1", "drafter": "cpu:0"}
    # every figure is the one the written traces give (one round: no pooling)
    from psdlab.analysis.metrics import summarize
    sd = summarize(read_trace(tmp_path / "tr" / "sd_r1.jsonl"))
    psd = summarize(t)
    t_s, v_s = sd["mean_draft_time_s"], sd["mean_verify_time_s"]
    assert fig["t_ms"] == pytest.approx(1e3 * t_s) and fig["v_ms"] == pytest.approx(1e3 * v_s)
    assert fig["predicted_gain"] == pytest.approx((t_s + v_s) / max(t_s, v_s))
    assert fig["measured_gain"] == pytest.approx(psd["decode_throughput_tok_s"]
                                                 / sd["decode_throughput_tok_s"])
    assert fig["overlap"] == pytest.approx(psd["draft_hidden_fraction"])
    assert fig["t_psd_ms"] == pytest.approx(1e3 * psd["mean_draft_time_s"])


@pytest.mark.e2e
@needs_two_cores
def test_bench_gpu_dry_run_on_cpu(tmp_path):
    """`psdlab bench-gpu --device cpu` (tiny models, static passes run eagerly, worker
    processes on two cores): the pass table beside Hugging Face, the batch-invariant check,
    AR / SD-sep / PSD at two m over two rounds, calibrated on round 1 and validated on round
    2, the lossless rule -- every line of the GPU command but the CUDA-only ones."""
    import subprocess
    import sys
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "psdlab", "bench-gpu", "--device", "cpu",
                           "-o", str(out), "--num-prompts", "4", "--batches", "1,2",
                           "--max-new-tokens", "6", "--prompt-len", "8", "--repeats", "2",
                           "--passes", "static"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dry_run"] is True and summary["lossless"] is True
    assert summary["machine"]["date"] and "commit" in summary["machine"]
    kinds = summary["sections"]["passes"]["kinds"]
    # draft_k: the drafter's whole k-pass drafting phase, timed against k draft floors
    assert set(kinds) == {"target:ar_decode", "target:verify", "drafter:draft",
                          "drafter:draft_k"}
    for entry in kinds.values():
        for label in ("psdlab_eager", "psdlab_static", "psdlab_static_invariant", "hf_eager"):
            assert entry[label]["median_ms"] > 0 and entry[label]["max_ms"] >= \
                entry[label]["median_ms"], label
    inv = summary["sections"]["batch_invariant"]
    assert inv["equal"] is True and inv["requests_equal_to_ar"]["psd"] == 4
    assert set(summary["sections"]["runs"]) == {"1", "2"}
    for m, fig in summary["sections"]["runs"].items():
        sim = fig["simulator"]
        assert sim["held_out"] is True
        # PSD before it runs: calibrated on AR and every SD-sep round (plus the co-run probe),
        # every PSD run held out
        assert sim["calibrated_on"][0] == "ar.jsonl" and {"sd_r1.jsonl", "sd_r2.jsonl"} <= set(
            sim["calibrated_on"]) and not any(n.startswith("psd") for n in sim["calibrated_on"])
        assert {"psd_r1.jsonl", "psd_r2.jsonl"} <= set(sim["validated_on"]) and all(
            n.startswith("psd") for n in sim["validated_on"])
        assert sim["psd_inputs"], m                 # what PSD's prediction rests on
        assert sim["summary"], m                    # the simulator's errors per target
        assert fig["lossless_rule"]["holds"] and fig["batch_invariant"] is True
        assert set(fig["phase_spread"]) >= {"prefill", "verify", "draft"}
        trace = read_trace(out / f"m{m}" / "two-devices" / "psd_r2.jsonl")
        assert trace.run.mode == "psd" and any(s.overlapped for s in trace.steps)
        assert trace.run.extra["passes"]["target"]["passes"] == "static"
        assert trace.run.devices == {"target": "cpu:1", "drafter": "cpu:0"}
    assert "## Batch-invariant mode" in (out / "summary.md").read_text()
