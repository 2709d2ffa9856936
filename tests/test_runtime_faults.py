"""Must-show faults: a prompt longer than the context gets a clear error while the others go on;
a drafter process that dies is reported and the running requests finish target-only with no
request lost; Ctrl-C (SIGINT to the whole process group, as a terminal sends it) leaves a trace
that `analysis.trace.read_trace` accepts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from psdlab.analysis.trace import read_trace  # noqa: E402
from psdlab.runtime.controller import Engine, EngineConfig  # noqa: E402
from psdlab.runtime.requests import Request  # noqa: E402
from psdlab.runtime.runner import ModelSpec  # noqa: E402
from runtime_engine_util import (needs_two_cores, prompts, shared_pair,  # noqa: E402
                                 write_prompt_ids)

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.set_num_threads(1)
    return shared_pair(tmp_path_factory)


def _engine(models, mode, backend="inline", max_len=64, max_new=12, batch=2, drafter="noisy"):
    cfg = EngineConfig(mode=mode, k=3, batch=batch, max_new_tokens=max_new, backend=backend,
                       max_len=max_len, ignore_eos=True)
    draft = ModelSpec(str(models[drafter])) if mode != "ar" else None
    return Engine(cfg, ModelSpec(str(models["target"])), draft)


def test_prompt_longer_than_context_is_rejected_and_others_go_on(models, capsys):
    rows = prompts(5, seed=8, lo=3, hi=20)
    rows.insert(2, list(range(40)))                      # 40 tokens: does not fit in 32
    rows.insert(4, list(range(31)))                      # fits, but the context fills up
    reqs = [Request(f"r{i}", tuple(r)) for i, r in enumerate(rows)]
    with _engine(models, "psd", max_len=32) as eng:
        result = eng.run(reqs)
    with _engine(models, "ar", max_len=32) as eng:
        ok = [r for i, r in enumerate(reqs) if i != 2]
        ref = {o.id: o.token_ids for o in eng.run(ok).outputs}
    out = {o.id: o for o in result.outputs}
    assert out["r2"].finish_reason == "error" and out["r2"].token_ids == []
    assert "40 tokens" in out["r2"].error and "context holds 32" in out["r2"].error
    assert "request r2" in capsys.readouterr().err
    assert out["r4"].finish_reason == "context" and len(out["r4"].token_ids) == 1
    for rid, toks in ref.items():
        assert out[rid].token_ids == toks
        assert out[rid].finish_reason in ("length", "context")
    assert {r.id for r in result.trace.requests} == set(ref)


@pytest.mark.e2e
def test_cli_reports_the_long_prompt_in_one_line(models, tmp_path):
    rows = [[1, 2, 3], list(range(70)), [4, 5]]
    pfile = write_prompt_ids(tmp_path / "p.jsonl", rows)
    proc = subprocess.run(
        [sys.executable, "-m", "psdlab", "run", "--mode", "ar", "--prompts", str(pfile),
         "--trace", str(tmp_path / "t.jsonl"), "--outputs", str(tmp_path / "o.jsonl"),
         "--target", str(models["target"]), "--max-len", "64", "--max-new-tokens", "4",
         "--backend", "inline", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "request r1: prompt has 70 tokens but the context holds 64" in proc.stderr
    assert "Traceback" not in proc.stderr
    outs = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [o["error"] is not None for o in outs] == [False, True, False]
    assert [len(o["token_ids"]) for o in outs] == [4, 0, 4]
    assert json.loads(proc.stdout)["request_errors"] == 1


@pytest.mark.e2e
@needs_two_cores
def test_drafter_death_finishes_requests_target_only(models, capsys):
    mode = "psd"    # SD-sep goes through the same drafter-wait path
    rows = prompts(6, seed=9, lo=2, hi=30)
    reqs = [Request(f"r{i}", tuple(r)) for i, r in enumerate(rows)]
    with _engine(models, "ar", max_new=20, batch=6) as eng:
        ref = [o.token_ids for o in eng.run(reqs).outputs]
    killed = {}

    def kill_drafter(loop, index):
        if index == 4 and not killed:
            killed["pid"] = loop.engine.drafter.pid
            os.kill(killed["pid"], signal.SIGKILL)

    with _engine(models, mode, backend="process", max_new=20) as eng:
        result = eng.run(reqs, on_step=kill_drafter)
    assert killed, "the hook never ran"
    assert result.drafter_failure and "died" in result.drafter_failure
    err = capsys.readouterr().err
    assert f"drafter worker process {killed['pid']} died" in err and "target-only" in err
    assert [o.token_ids for o in result.outputs] == ref          # no request lost, lossless
    assert all(o.finish_reason == "length" for o in result.outputs)
    last_draft = max(s.index for s in result.trace.steps
                     if any(p.kind == "draft" for p in s.phases))
    assert last_draft < result.trace.steps[-1].index             # later steps: target only


@pytest.mark.e2e
@needs_two_cores
def test_ctrl_c_leaves_a_valid_trace(models, tmp_path):
    pfile = write_prompt_ids(tmp_path / "p.jsonl", prompts(24, seed=10, lo=2, hi=20))
    trace = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "psdlab", "run", "--mode", "psd", "--k", "3", "--batch", "2",
         "--prompts", str(pfile), "--trace", str(trace), "--target", str(models["target"]),
         "--draft", str(models["noisy"]), "--max-len", "200", "--max-new-tokens", "150",
         "--ignore-eos"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and proc.poll() is None:
            if trace.exists() and len(trace.read_text().splitlines()) >= 6:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    t = read_trace(trace)
    assert t.run.mode == "psd" and len(t.steps) >= 5
    assert len(t.requests) < 24                                  # stopped early
