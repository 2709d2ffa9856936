"""The trace format: round trip, per-record flushing, and rejection of malformed lines with
the line number and the field."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace,
                                   TraceFormatError, TraceWriter, Verified, dumps, iter_records,
                                   read_trace, write_trace)

RUN = RunInfo(mode="psd", k=3, m=2, source="test", devices={"drafter": "cpu:1", "target": "cpu:0"},
              models={"target": "t", "draft": "d"}, workload={"kind": "offline", "n": 2},
              seed=7, versions={"psdlab": "0.1.0"}, extra={"note": [1, 2]})


def sample_trace() -> Trace:
    steps = [
        StepRecord(0, 0.0, 0.5, (Phase("prefill", "cpu:0", 0.0, 0.5, 2, 40),), (),
                   None, 1, False),
        StepRecord(1, 0.5, 1.25, (Phase("verify", "cpu:0", 0.5, 1.25, 1, 4, context=30),
                                  Phase("draft", "cpu:1", 0.5, 1.0, 1, 3)),
                   (Verified(0, 3, 2, 3), Verified("r-1", 3, 3, 4)), 0, 1, True, ("r-1",)),
    ]
    reqs = [RequestRecord(0, 0.0, 0.0, 0.5, 1.25, 20, 4, 0, 0),
            RequestRecord("r-1", 0.1, 0.2, 0.5, 1.25, 20, 5, None, 1)]
    return Trace(RUN, steps, reqs)


def test_round_trip_equals(tmp_path):
    path = tmp_path / "t.jsonl"
    trace = sample_trace()
    write_trace(path, trace)
    assert read_trace(path) == trace
    # one record per line, the run first
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 2 + 2
    assert json.loads(lines[0])["type"] == "run"


_ids = st.one_of(st.integers(0, 10**6), st.text("abc-_0123", min_size=1, max_size=6))
_times = st.floats(0, 1e4, allow_nan=False, allow_infinity=False)


@st.composite
def _steps(draw):
    start = draw(_times)
    dur = draw(st.floats(0, 10, allow_nan=False))
    rows = []
    for _ in range(draw(st.integers(0, 3))):
        proposed = draw(st.integers(0, 8))
        accepted = draw(st.integers(0, proposed))
        rows.append(Verified(draw(_ids), proposed, accepted, draw(st.integers(0, accepted + 1))))
    phase = Phase(draw(st.sampled_from(["draft", "verify", "prefill"])), "dev", start,
                  start + dur, draw(st.integers(0, 9)), draw(st.integers(0, 99)))
    return StepRecord(draw(st.integers(0, 10**6)), start, start + dur, (phase,), tuple(rows),
                      draw(st.sampled_from([None, 0, 1])), draw(st.sampled_from([None, 0, 1])),
                      draw(st.booleans()), tuple(draw(st.lists(_ids, max_size=2))))


@st.composite
def _requests(draw):
    t = [draw(_times)]
    for _ in range(3):
        t.append(t[-1] + draw(st.floats(0, 100, allow_nan=False)))
    return RequestRecord(draw(_ids), *t, draw(st.integers(0, 4096)), draw(st.integers(0, 4096)),
                         draw(st.sampled_from([None, 0, 1])), draw(st.integers(0, 5)))


@settings(deadline=None, max_examples=40)
@given(st.lists(_steps(), max_size=4), st.lists(_requests(), max_size=4))
def test_round_trip_property(tmp_path_factory, steps, requests):
    path = tmp_path_factory.mktemp("rt") / "t.jsonl"
    trace = Trace(RUN, steps, requests)
    write_trace(path, trace)
    assert read_trace(path) == trace


def test_writer_flushes_each_record_while_open(tmp_path):
    path = tmp_path / "live.jsonl"
    trace = sample_trace()
    with TraceWriter(path, RUN) as writer:
        assert read_trace(path).steps == []          # the run line is already on disk
        writer.step(trace.steps[0])
        assert read_trace(path).steps == [trace.steps[0]]
        writer.request(trace.requests[0])
        assert read_trace(path).requests == [trace.requests[0]]
        assert (writer.steps_written, writer.requests_written) == (1, 1)


def test_writer_rejects_invalid_record_before_writing(tmp_path):
    path = tmp_path / "w.jsonl"
    with TraceWriter(path, RUN) as writer:
        writer.step(sample_trace().steps[0])
        bad = StepRecord(1, 0.0, 1.0, (), (Verified(0, 2, 3, 3),))
        with pytest.raises(TraceFormatError, match=r"w\.jsonl:3: field 'verified\[0\]\.accepted'"):
            writer.step(bad)
    assert len(read_trace(path).steps) == 1           # the file stays readable


def test_writer_refuses_writes_after_close(tmp_path):
    writer = TraceWriter(tmp_path / "c.jsonl", RUN)
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.step(sample_trace().steps[0])


def _lines(trace: Trace) -> list[str]:
    return [dumps(trace.run)] + [dumps(s) for s in trace.steps] + [dumps(r) for r in trace.requests]


def _edit(line: str, **changes) -> str:
    obj = json.loads(line)
    for key, value in changes.items():
        if value is _DELETE:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj)


_DELETE = object()


def _bad(lineno: int, line: str, pattern: str, tmp_path) -> None:
    """Put ``line`` at ``lineno`` (1-based) of the sample trace and expect rejection there."""
    lines = _lines(sample_trace())
    lines[lineno - 1] = line
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError) as info:
        read_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{lineno}: "), message
    assert re.search(pattern, message), message
    assert "\n" not in message


def test_truncated_last_line_reads_up_to_it_with_one_warning(tmp_path):
    from psdlab.analysis.trace import TruncatedTraceWarning
    lines = _lines(sample_trace())
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines)[:-7])
    whole = sample_trace()
    with pytest.warns(TruncatedTraceWarning,
                      match=rf"cut\.jsonl: .*last line \(line {len(lines)}\) cut at byte"):
        cut = read_trace(path)
    assert len(cut.steps) + len(cut.requests) == len(whole.steps) + len(whole.requests) - 1


def test_invalid_line_with_records_after_it_is_still_an_error(tmp_path):
    lines = _lines(sample_trace())
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines[:-1])[:-7] + "\n" + lines[-1] + "\n")
    with pytest.raises(TraceFormatError, match=rf"cut\.jsonl:{len(lines) - 1}: not valid JSON"):
        read_trace(path)


def test_bad_json_in_the_middle(tmp_path):
    _bad(2, '{"type": "step", "index": 0,', "not valid JSON", tmp_path)


def test_not_utf8(tmp_path):
    path = tmp_path / "bin.jsonl"
    path.write_bytes(dumps(RUN).encode() + b"\n" + b'{"type": "st\xffep"}\n')
    with pytest.raises(TraceFormatError, match=r"bin\.jsonl:2: not valid UTF-8"):
        read_trace(path)


def test_missing_field(tmp_path):
    lines = _lines(sample_trace())
    _bad(2, _edit(lines[1], start=_DELETE), r"field 'start': missing", tmp_path)
    _bad(4, _edit(lines[3], finish=_DELETE), r"field 'finish': missing", tmp_path)
    _bad(1, _edit(lines[0], mode=_DELETE), r"field 'mode': missing", tmp_path)


def test_wrong_type(tmp_path):
    lines = _lines(sample_trace())
    _bad(2, _edit(lines[1], index="zero"), r"field 'index': expected an integer", tmp_path)
    _bad(2, _edit(lines[1], overlapped=1), r"field 'overlapped': expected true/false", tmp_path)
    _bad(4, _edit(lines[3], arrival="0.0"), r"field 'arrival': expected a finite number",
         tmp_path)
    _bad(4, _edit(lines[3], arrival=True), r"field 'arrival'", tmp_path)
    _bad(4, _edit(lines[3], arrival=10**400), r"field 'arrival'", tmp_path)
    _bad(1, _edit(lines[0], k=2.5), r"field 'k': expected an integer", tmp_path)
    _bad(3, _edit(lines[2], phases=[{"kind": "verify", "device": 3, "start": 0, "end": 1,
                                     "seqs": 1, "tokens": 1}]),
         r"field 'phases\[0\]\.device': expected a string", tmp_path)
    _bad(3, _edit(lines[2], preempted=[[1]]), r"field 'preempted\[0\]'", tmp_path)
    _bad(3, _edit(lines[2], verified=[[0, 3, 2]]), r"field 'verified\[0\]'", tmp_path)


def test_non_finite_time(tmp_path):
    line = _lines(sample_trace())[1].replace('"end":0.5', '"end":NaN')
    _bad(2, line, r"field 'end': expected a finite number", tmp_path)


def test_negative_counts(tmp_path):
    lines = _lines(sample_trace())
    _bad(3, _edit(lines[2], verified=[[0, -1, 0, 0]]), r"field 'verified\[0\]\.proposed'",
         tmp_path)
    _bad(4, _edit(lines[3], output_len=-3), r"field 'output_len': must be >= 0", tmp_path)
    _bad(3, _edit(lines[2], phases=[{"kind": "draft", "device": "x", "start": 0, "end": 1,
                                     "seqs": -1, "tokens": 1}]),
         r"field 'phases\[0\]\.seqs': must be >= 0", tmp_path)
    _bad(1, _edit(lines[0], m=-2), r"field 'm': must be >= 0", tmp_path)


def test_accepted_more_than_proposed(tmp_path):
    line = _edit(_lines(sample_trace())[2], verified=[[0, 3, 2, 3], [1, 2, 3, 3]])
    _bad(3, line, r"field 'verified\[1\]\.accepted': accepted 3 > proposed 2", tmp_path)


def test_emitted_beyond_one_bonus(tmp_path):
    line = _edit(_lines(sample_trace())[2], verified=[[0, 3, 1, 3]])
    _bad(3, line, r"field 'verified\[0\]\.emitted'", tmp_path)


def test_inconsistent_times(tmp_path):
    lines = _lines(sample_trace())
    _bad(2, _edit(lines[1], end=-1.0), r"field 'end'", tmp_path)
    _bad(4, _edit(lines[3], first_token=5.0), r"field 'finish': must be >= first_token",
         tmp_path)
    _bad(5, _edit(lines[4], admitted=0.0), r"field 'admitted': must be >= arrival", tmp_path)


def test_unknown_record_type(tmp_path):
    _bad(3, _edit(_lines(sample_trace())[2], type="stpe"), r"field 'type': must be 'run'",
         tmp_path)
    _bad(3, _edit(_lines(sample_trace())[2], type=_DELETE), r"field 'type'", tmp_path)
    _bad(3, "[1, 2]", r"expected a JSON object", tmp_path)


def test_record_before_run(tmp_path):
    lines = _lines(sample_trace())
    _bad(1, lines[1], r"field 'type': the first record must be 'run'", tmp_path)
    _bad(3, lines[0], r"field 'type': a second 'run' record", tmp_path)


def test_unsupported_schema_version(tmp_path):
    _bad(1, _edit(_lines(sample_trace())[0], schema=99), r"field 'schema': .*version 99",
         tmp_path)


def test_phase_kind_and_batch(tmp_path):
    lines = _lines(sample_trace())
    _bad(3, _edit(lines[2], verify_batch=2), r"field 'verify_batch': must be 0, 1 or null",
         tmp_path)
    _bad(3, _edit(lines[2], phases=[{"kind": "sleep", "device": "x", "start": 0, "end": 1,
                                     "seqs": 1, "tokens": 1}]),
         r"field 'phases\[0\]\.kind': must be one of", tmp_path)


def test_empty_trace_and_blank_lines(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(TraceFormatError, match="no 'run' record"):
        read_trace(path)
    lines = _lines(sample_trace())
    assert list(iter_records(["", lines[0], "  ", lines[1]]))[1] == sample_trace().steps[0]
