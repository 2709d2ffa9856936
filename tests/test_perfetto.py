"""Chrome-trace / Perfetto export: lanes per device, step markers, request lifetimes."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from psdlab.analysis.perfetto import to_chrome_trace, write_chrome_trace
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified,
                            write_trace)
from psdlab.cli import main

P, V = Phase, Verified


def trace() -> Trace:
    steps = [
        StepRecord(0, 0.0, 0.25, (P("prefill", "cuda:0", 0.0, 0.25, 2, 64),
                                  P("draft", "cuda:4", 0.1, 0.25, 1, 3)), (), None, 1),
        StepRecord(1, 0.25, 0.5, (P("verify", "cuda:0", 0.25, 0.5, 1, 4, context=40),
                                  P("draft", "cuda:4", 0.25, 0.375, 1, 3)),
                   (V(7, 3, 2, 3),), 1, 0, True, ("x",)),
    ]
    reqs = [RequestRecord(7, 0.0, 0.0, 0.25, 0.5, 10, 4, 1),       # never queued
            RequestRecord("x", 0.125, 0.25, 0.5, 0.5, 10, 1, 0)]   # decode of zero length
    return Trace(RunInfo("psd", 3, 1, "test", extra={"gpu": "H100"}), steps, reqs)


def _by_pid_name(events):
    return {e["args"]["name"]: e["pid"] for e in events
            if e["ph"] == "M" and e["name"] == "process_name"}


def test_one_lane_per_device_with_phases_in_microseconds():
    out = to_chrome_trace(trace())
    events = out["traceEvents"]
    pids = _by_pid_name(events)
    assert set(pids) == {"device cuda:0", "device cuda:4", "steps", "requests"}
    assert len(set(pids.values())) == 4
    target = [e for e in events if e["ph"] == "X" and e["pid"] == pids["device cuda:0"]]
    assert [(e["name"], e["ts"], e["dur"]) for e in target] == [
        ("prefill", 0.0, 250000.0), ("verify b1", 250000.0, 250000.0)]
    drafter = [e for e in events if e["ph"] == "X" and e["pid"] == pids["device cuda:4"]]
    assert [(e["name"], e["ts"], e["dur"]) for e in drafter] == [
        ("draft b1", 100000.0, 150000.0), ("draft b0", 250000.0, 125000.0)]
    assert drafter[1]["args"] == {"step": 1, "seqs": 1, "tokens": 3}
    assert target[1]["args"] == {"step": 1, "seqs": 1, "tokens": 4, "context": 40}
    assert out["otherData"]["psdlab_run"]["extra"] == {"gpu": "H100"}


def test_step_markers():
    events = to_chrome_trace(trace())["traceEvents"]
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert [e["name"] for e in steps] == ["step 0", "step 1"]
    assert steps[1]["pid"] == _by_pid_name(events)["steps"]
    assert steps[1]["args"]["accepted"] == 2 and steps[1]["args"]["proposed"] == 3
    assert steps[1]["args"]["overlapped"] is True and steps[1]["args"]["preempted"] == ["x"]


def test_request_lifetimes_as_own_lane_group():
    events = to_chrome_trace(trace())["traceEvents"]
    pid = _by_pid_name(events)["requests"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}
    assert sorted(names.values()) == ["req 7", "req x"]
    spans = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e["pid"] == pid:
            spans[names[e["tid"]]].append((e["name"], e["ts"], e["dur"]))
    # zero-length segments are left out; the rest tile arrival -> finish
    assert spans["req 7"] == [("prefill", 0.0, 250000.0), ("decode", 250000.0, 250000.0)]
    assert spans["req x"] == [("queued", 125000.0, 125000.0), ("prefill", 250000.0, 250000.0)]


def test_empty_trace_exports():
    out = to_chrome_trace(Trace(RunInfo("ar", 0, 1, "test")))
    assert all(e["ph"] == "M" for e in out["traceEvents"])
    json.dumps(out, allow_nan=False)


def test_write_and_cli(tmp_path, capsys):
    out = tmp_path / "t.json"
    count = write_chrome_trace(trace(), out)
    loaded = json.loads(out.read_text())
    assert loaded == json.loads(json.dumps(to_chrome_trace(trace())))
    assert count == len(loaded["traceEvents"])
    src = tmp_path / "t.jsonl"
    write_trace(src, trace())
    cli_out = tmp_path / "cli.json"
    assert main(["timeline", str(src), "-o", str(cli_out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"output": str(cli_out), "events": count}
    assert json.loads(cli_out.read_text()) == loaded


@pytest.mark.parametrize("content", ["", '{"type": "run"}\n'])
def test_cli_bad_trace_is_one_line(tmp_path, capsys, content):
    src = tmp_path / "bad.jsonl"
    src.write_text(content)
    assert main(["timeline", str(src), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdlab timeline: error: ") and "bad.jsonl" in err and "\n" not in err
