"""The MineDraft trace importer: configuration from the file name, conversion of Step/Request
records into psdlab traces, calibration on the result, and one-line errors with file:line for
malformed input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from psdlab.analysis.trace import TraceFormatError
from psdlab.cli import main
from psdlab.validation.calibrate import calibrate
from psdlab.validation.importers import trace_file_format, load_traces
from psdlab.validation.importers.minedraft import parse_filename, read_minedraft

NAME = ("input=128_sharegpt_Qwen3-32B_Qwen3-0.6B_16_False_parallel={par}_k={k}_t=0_n=1_c=0"
        "_warmup={w}_runs={r}.jsonl")
DRAFT_BASE, DRAFT_TOKEN = 2e-3, 1e-4          # per one-token drafting forward, seconds
TARGET_BASE, TARGET_TOKEN = 20e-3, 4e-4       # per verification forward
ALPHA = 0.65


def _accepted(rng, k):
    a = 0
    while a < k and rng.random() < ALPHA:
        a += 1
    return a


def _run_line(rng, k: int, m: int, parallel: bool, n_steps: int = 60,
              t0_us: float = 5e9, prompt_flag: bool = False) -> tuple[dict, dict]:
    """One benchmark run as the paper's plugin logs it (request lists hold request trace ids;
    ``is_prompt_run`` a count, or a flag as in other plugin versions; one request unfinished),
    and the truth behind it."""
    n_req = 2 * m if parallel else m
    ids = [f"Request:{i}" for i in range(n_req)]
    recs, t = [], t0_us
    prompts = rng.integers(20, 200, n_req)
    d = 0.05 + 2e-4 * prompts.sum()
    recs.append({"type": "Step", "tid": "Step:0", "start_us": t, "end_us": t + d * 1e6 + 300,
                 "batch_start_us": t + 100, "batch_end_us": t + 100 + d * 1e6,
                 "is_prompt_run": True if prompt_flag else n_req,
                 "batched_token_num": int(prompts.sum()), "measured_target_time": d,
                 "batched_requests": ids, "is_parallelised": False})
    t += d * 1e6 + 300
    truth = {"accepted": 0, "verified": 0, "prefill_s": d}
    for i in range(1, n_steps + 1):
        n = int(rng.integers(max(1, m // 2), m + 1))
        acc = [_accepted(rng, k) for _ in range(n)]
        draft_seqs = m if parallel else n
        dt = k * (DRAFT_BASE + DRAFT_TOKEN * draft_seqs) * (1 + 0.02 * rng.standard_normal())
        vt = (TARGET_BASE + TARGET_TOKEN * n * (k + 1)) * (1 + 0.02 * rng.standard_normal())
        span = max(dt, vt) if parallel else dt + vt
        sched = ids[:n] + ids[m:] if parallel else ids[:n]
        recs.append({"type": "Step", "tid": f"Step:{i}", "start_us": t,
                     "end_us": t + span * 1e6 + 200, "batch_start_us": t + 50,
                     "batch_end_us": t + 50 + span * 1e6, "is_prompt_run": 0,
                     "batched_token_num": n * (k + 1), "batched_requests": sched,
                     "preempted_requests": [], "is_parallelised": parallel,
                     "proposed_len": k, "verify_len": n * k, "accepted_num": sum(acc),
                     "generated_num": sum(acc) + n, "match_count": sum(acc),
                     "measured_draft_time": dt, "measured_target_time": vt,
                     "measured_overhead_time": 1e-4})
        truth["accepted"] += sum(acc)
        truth["verified"] += n * k
        t += span * 1e6 + 200
    for j, tid in enumerate(ids):
        recs.append({"type": "Request", "tid": tid, "start_us": t0_us - 10 * j,
                     "end_us": t, "prompt_len": int(prompts[j]), "gen_len": 256})
    recs.append({"type": "Request", "tid": f"Request:{n_req}", "start_us": t, "prompt_len": 9})
    return {"metadata": {"note": "test"}, "traces": recs}, truth


def write_minedraft(tmp_path, *, parallel=False, k=3, m=8, warmup=1, runs=2, seed=0,
                    name=None, prompt_flag=False):
    rng = np.random.default_rng(seed)
    path = tmp_path / (name or NAME.format(par=parallel, k=k, w=warmup, r=runs))
    truths = []
    with open(path, "w") as fh:
        for _ in range(warmup + runs):
            line, truth = _run_line(rng, k, m, parallel, prompt_flag=prompt_flag)
            truths.append(truth)
            fh.write(json.dumps(line) + "\n")
    return path, truths


def test_configuration_from_the_file_name():
    cfg = parse_filename("/x/" + NAME.format(par="pearl", k=4, w=2, r=3))
    assert cfg["input_len"] == 128 and cfg["dataset"] == "sharegpt"
    assert cfg["target"] == "Qwen3-32B" and cfg["draft"] == "Qwen3-0.6B"
    assert cfg["max_num_seqs"] == 16 and cfg["tetris"] is False
    assert (cfg["parallel"], cfg["k"], cfg["warmup"], cfg["runs"]) == ("pearl", 4, 2, 3)
    assert parse_filename("trace.jsonl") is None


def test_sd_file_converts_to_psdlab_traces(tmp_path):
    path, truths = write_minedraft(tmp_path, parallel=False, k=3)
    assert trace_file_format(path) == "minedraft"
    traces = read_minedraft(path)
    assert len(traces) == 2                                 # the warm-up line is left out
    assert len(read_minedraft(path, include_warmup=True)) == 3
    tr, truth = traces[0], truths[1]
    assert (tr.run.mode, tr.run.k, tr.run.m, tr.run.source) == ("sd", 3, 16, "minedraft")
    assert tr.run.models == {"target": "Qwen3-32B", "drafter": "Qwen3-0.6B"}
    assert tr.steps[0].phases[0].kind == "prefill" and len(tr.steps) == 61
    step = tr.steps[5]
    draft, verify = step.phases
    assert draft.kind == "draft" and verify.kind == "verify" and not step.overlapped
    assert verify.start == pytest.approx(draft.end)          # SD: verify follows drafting
    assert draft.tokens == draft.seqs * 3 and verify.seqs == len(step.verified)
    assert sum(v.accepted for s in tr.steps for v in s.verified) == truth["accepted"]
    assert sum(v.proposed for s in tr.steps for v in s.verified) == truth["verified"]
    assert 0 <= min(s.start for s in tr.steps) < 1e-3       # seconds from the run start
    req = {r.id: r for r in tr.requests}["3"]
    assert req.output_len == 256 and req.first_token == pytest.approx(tr.steps[0].end)
    assert len(tr.requests) == 8 and tr.run.extra["unfinished_requests"] == 1
    assert {v.req for v in step.verified} <= {r.id for r in tr.requests}
    prefill = tr.steps[0].phases[0]
    assert (prefill.seqs, prefill.end - prefill.start) == (8, pytest.approx(
        truth["prefill_s"]))


def test_psd_file_marks_overlap_and_draft_batch(tmp_path):
    path, _ = write_minedraft(tmp_path, parallel=True, k=2, m=4, warmup=0, runs=1,
                              prompt_flag=True)
    tr = load_traces(path)[0]
    assert tr.run.mode == "psd"
    assert tr.steps[0].phases[0].seqs == 8             # is_prompt_run: true -> scheduled
    step = tr.steps[3]
    draft, verify = step.phases
    assert step.overlapped and draft.start == verify.start
    assert draft.seqs == 4                                    # the other batch was drafted


def test_calibrating_on_a_minedraft_file_recovers_the_machine(tmp_path):
    a, _ = write_minedraft(tmp_path, k=2, seed=1)
    b, truths = write_minedraft(tmp_path, k=4, seed=2)
    cal = calibrate(load_traces(a) + load_traces(b))
    draft = cal.costs["draft"].coefficients()
    assert draft["base"] == pytest.approx(DRAFT_BASE, rel=0.05)
    assert draft["per_token"] == pytest.approx(DRAFT_TOKEN, rel=0.1)
    verify = cal.costs["verify"]
    assert verify.coefficients()["base"] == pytest.approx(TARGET_BASE, rel=0.05)
    assert verify.heldout_error < 0.05
    acc = cal.acceptance
    assert acc.method == "geometric-from-totals" and acc.concentration is None
    assert acc.mean_ci[0] - 0.01 <= ALPHA <= acc.mean_ci[1] + 0.01
    assert any("per-step totals" in n for n in cal.notes)


def test_cli_calibrates_minedraft_and_psdlab_files_together(tmp_path, capsys):
    path, _ = write_minedraft(tmp_path, k=3)
    out = tmp_path / "model.json"
    assert main(["calibrate", str(path), "-o", str(out), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["meta"]["calibration"]["sources"] == ["minedraft"] and obj["n_traces"] == 2
    acc = obj["meta"]["acceptance"]
    assert set(acc) == {"geometric", "default"} and acc["default"] == "geometric"


def test_unknown_file_name_infers_the_configuration(tmp_path):
    path, _ = write_minedraft(tmp_path, parallel=True, k=5, m=4, warmup=0, runs=1,
                              name="my_run.jsonl")
    tr = load_traces(path)[0]
    assert (tr.run.mode, tr.run.k, tr.run.m) == ("psd", 5, 8)
    assert "inferred" in tr.run.extra["config"]


def _lines(path):
    return open(path).read().splitlines()


def test_truncated_file_names_the_line(tmp_path, capsys):
    path, _ = write_minedraft(tmp_path, k=3)
    lines = _lines(path)
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:5000])
    with pytest.raises(TraceFormatError, match=rf"{path.name}:3: not valid JSON"):
        read_minedraft(path)
    assert main(["calibrate", str(path), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ":3: not valid JSON" in err and "Traceback" not in err


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.pop("start_us"), "field 'start_us': missing"),
    (lambda r: r.update(measured_target_time="slow"), "field 'measured_target_time'"),
    (lambda r: r.update(type="Banana"), "field 'type'"),
    (lambda r: r.update(accepted_num=10_000), "field 'accepted_num'"),
    (lambda r: r.update(end_us=0), "field 'end_us'"),
])
def test_malformed_record_names_line_record_and_field(tmp_path, capsys, mutate, needle):
    path, _ = write_minedraft(tmp_path, k=3, warmup=0, runs=2)
    lines = _lines(path)
    obj = json.loads(lines[1])
    mutate(obj["traces"][7])
    lines[1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    assert main(["calibrate", str(path), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path.name}:2: traces[7]: {needle}" in err, err


def test_wrong_shapes_are_refused(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"metadata": {}, "traces": {"a": 1}}\n')
    with pytest.raises(TraceFormatError, match="x.jsonl:1: field 'traces'"):
        read_minedraft(path)
    path.write_text("\n\n")
    with pytest.raises(TraceFormatError, match="empty"):
        load_traces(path)
