"""Readers for foreign formats (psdlab.analysis.formats): each reader on its sample file in
tests/data/formats (values checked against the file, parsed here independently), detection
by content, the format override, workload scaling / window / head, the spec-decoding
counters, and the bad-input contract (one-line FormatError naming file, line and field; a
cut-short last line read up to it with one warning)."""
from __future__ import annotations

import csv
import json
import shutil
import warnings
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis import formats as F
from psdlab.analysis.formats import (WorkloadRequest, SpecCounters, TruncatedInputWarning,
                                     FileWorkload, azure, burstgpt, custom_prompts, mooncake,
                                     sglang_bench, sharegpt, specbench, vllm_bench, vllm_log,
                                     vllm_metrics)
from psdlab.analysis.formats.errors import FormatError

DATA = Path(__file__).parent / "data" / "formats"


def csv_rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def jsonl(name: str) -> list[dict]:
    return [json.loads(s) for s in (DATA / name).read_text().splitlines() if s.strip()]


def stamp(text: str) -> Decimal:
    """Exact seconds of an Azure date-time, parsed independently of the reader."""
    text, zone = (text[:-6], text[-6:]) if text.endswith("+00:00") else (text, "")
    whole, _, frac = text.partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return Decimal(int(base.timestamp())) + Decimal("0." + (frac or "0"))


# ---------------------------------------------------------------- readers on their samples
@pytest.mark.parametrize("name", ["azure_code_2023.csv", "azure_conv_2024.csv"])
def test_azure(name):
    rows, w = csv_rows(name), azure.read(DATA / name)
    assert len(w) == len(rows) and w.format == "azure"
    t0 = stamp(rows[0]["TIMESTAMP"])
    for rec, row in zip(w.records, rows):  # the samples are in arrival order
        assert rec.input_len == int(row["ContextTokens"])
        assert rec.output_len == int(row["GeneratedTokens"])
        assert rec.arrival_s == pytest.approx(float(stamp(row["TIMESTAMP"]) - t0), abs=1e-9)
    assert w.records[0].arrival_s == 0.0 and w.records[-1].arrival_s > 2.0


def test_azure_keeps_seven_fraction_digits():
    w = azure.read(DATA / "azure_code_2023.csv")
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(w.records, w.records[1:])]
    rows = csv_rows("azure_code_2023.csv")
    want = [float(stamp(b["TIMESTAMP"]) - stamp(a["TIMESTAMP"])) for a, b in zip(rows, rows[1:])]
    assert max(abs(g - x) for g, x in zip(gaps, want)) < 1e-9


@pytest.mark.parametrize("name", ["burstgpt_1.csv", "burstgpt_3.csv"])
def test_burstgpt(name):
    rows, w = csv_rows(name), burstgpt.read(DATA / name)
    assert len(w) == len(rows)
    assert w.records[-1].arrival_s == float(rows[-1]["Timestamp"]) - float(rows[0]["Timestamp"])
    assert [r.input_len for r in w.records] == [int(r["Request tokens"]) for r in rows]
    assert [r.output_len for r in w.records] == [int(r["Response tokens"]) for r in rows]
    assert [r.model for r in w.records] == [r["Model"] for r in rows]
    assert [r.session for r in w.records] == [r.get("Session ID") or None for r in rows]


def test_burstgpt_keeps_failures_and_filters_by_model():
    rows, w = csv_rows("burstgpt_1.csv"), burstgpt.read(DATA / "burstgpt_1.csv")
    assert sum(r.output_len == 0 for r in w.records) == sum(
        r["Response tokens"] == "0" for r in rows) > 0
    gpt4 = burstgpt.read(DATA / "burstgpt_1.csv", model="GPT-4")
    assert len(gpt4) == sum(r["Model"] == "GPT-4" for r in rows) > 0
    assert {r.model for r in gpt4.records} == {"GPT-4"} and gpt4.records[0].arrival_s == 0.0


def test_mooncake():
    rows, w = jsonl("mooncake_trace.jsonl"), mooncake.read(DATA / "mooncake_trace.jsonl")
    assert len(w) == len(rows)
    assert [r.arrival_s for r in w.records] == [r["timestamp"] / 1000 for r in rows]
    assert w.records[0].hash_ids == tuple(rows[0]["hash_ids"])
    assert (w.records[-1].input_len, w.records[-1].output_len) == (
        rows[-1]["input_length"], rows[-1]["output_length"])


def test_sharegpt_first_human_turn_and_reply():
    data = json.loads((DATA / "sharegpt.json").read_text())
    w = sharegpt.read(DATA / "sharegpt.json")
    assert len(w) == 6 and any("2 conversations" in n for n in w.notes)
    first = data[0]["conversations"]
    assert w.records[0].text == first[0]["value"]
    assert w.records[0].input_len == len(first[0]["value"].split())
    assert w.records[0].output_len == len(first[1]["value"].split())
    system_first = next(r for r in w.records if r.session == "d5Hs8Kv")
    assert system_first.text == "What does HTTP stand for?" and system_first.output_len == 3
    chars = sharegpt.read(DATA / "sharegpt.json", tokenizer=list)
    assert chars.records[0].input_len == len(first[0]["value"])


def test_specbench():
    rows, w = jsonl("specbench_question.jsonl"), specbench.read(DATA / "specbench_question.jsonl")
    assert len(w) == len(rows) and [r.text for r in w.records] == [r["turns"][0] for r in rows]
    assert all(r.arrival_s == 0 and r.output_len == 0 for r in w.records)
    mt = specbench.read(DATA / "specbench_question.jsonl", category="translation",
                        output_len=128)
    assert len(mt) == 1 and mt.records[0].output_len == 128


def test_custom_prompts():
    rows = jsonl("custom_prompts.jsonl")
    w = custom_prompts.read(DATA / "custom_prompts.jsonl", output_len=64, rate=2.0)
    assert [r.output_len for r in w.records] == [r.get("output_tokens", 64) for r in rows]
    assert [r.arrival_s for r in w.records] == [i / 2.0 for i in range(len(rows))]
    assert w.records[-1].text == rows[-1]["prompt"]


def test_vllm_bench_detailed_summary():
    raw = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    s = vllm_bench.read(DATA / "vllm_bench_detailed.json")
    assert (s.request_rate, s.max_concurrency, s.num_prompts) == (4.0, 4, 10)
    assert (s.completed, s.failed, s.total_output_tokens) == (9, 1, raw["total_output_tokens"])
    assert s.stat("p90", "ttft") == raw["p90_ttft_ms"] and s.stat("mean", "e2el") is not None
    assert "mean_client_queue_time_ms" not in s.stats_ms
    assert (s.num_drafts, s.draft_tokens, s.accepted_tokens) == (96, 384, 201)
    assert s.acceptance_length == pytest.approx(1 + 201 / 96)
    assert s.per_position_acceptance == tuple(raw["spec_decode_per_position_acceptance_rates"])


def test_vllm_bench_detailed_workload():
    raw = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    w = F.read_workload(DATA / "vllm_bench_detailed.json")
    sent = [t - q for t, q in zip(raw["start_times"], raw["queue_times"])]
    assert [r.arrival_s for r in w.records] == pytest.approx([t - sent[0] for t in sent])
    failed = [r for r in w.records if r.error]
    assert len(failed) == 1 and failed[0].ttft_s is None and failed[0].itl_s == ()
    assert w.records[0].itl_s == tuple(raw["itls"][0])
    assert w.records[0].e2el_s == raw["latencies"][0]


def test_vllm_bench_appended_runs():
    runs = vllm_bench.read_all(DATA / "vllm_bench_append.json")
    assert [r.request_rate for r in runs] == [2.0, float("inf")]
    assert vllm_bench.read(DATA / "vllm_bench_append.json").request_rate == float("inf")
    assert not runs[0].detailed and runs[0].e2els_s is not None  # latencies are always kept
    with pytest.raises(FormatError, match="no per-request lists"):
        vllm_bench.read_workload(DATA / "vllm_bench_append.json")


def test_sglang_bench():
    raw = jsonl("sglang_bench.jsonl")
    first, second = sglang_bench.read_all(DATA / "sglang_bench.jsonl")
    assert first.acceptance_length is None and not first.detailed
    assert first.stat("p99", "e2el") == raw[0]["p99_e2e_latency_ms"]
    assert second.acceptance_length == 2.41 and second.request_rate == float("inf")
    w = F.read_workload(DATA / "sglang_bench.jsonl")
    assert [r.ttft_s for r in w.records] == raw[1]["ttfts"]
    assert all(r.arrival_s == 0 for r in w.records) and "run 2 of 2" in w.notes


def test_vllm_metrics_sum_engines_and_minus():
    before = vllm_metrics.read(DATA / "vllm_metrics_before.txt")
    after = vllm_metrics.read(DATA / "vllm_metrics_after.txt")
    assert after == SpecCounters(2900, 11600, 6058, (2430, 1829, 1151, 648))
    run = vllm_metrics.read_delta(DATA / "vllm_metrics_before.txt",
                                  DATA / "vllm_metrics_after.txt")
    assert run == after.minus(before) == SpecCounters(600, 2400, 1290, (490, 384, 258, 158))
    assert run.acceptance_per_position() == pytest.approx((490 / 600, 384 / 600, 258 / 600,
                                                           158 / 600))
    assert run.mean_acceptance_length() == pytest.approx(1 + 1290 / 600)
    assert run.acceptance_rate() == pytest.approx(1290 / 2400)
    with pytest.raises(ValueError, match="went down"):
        before.minus(after)


def test_vllm_log_line():
    entries = vllm_log.read_log(DATA / "vllm_server.log")
    assert [e.line for e in entries] == [2, 4, 5]
    e = entries[0]
    assert (e.accepted, e.drafted, e.mean_acceptance_length) == (377, 760, 2.98)
    assert e.per_position == (0.789, 0.589, 0.389, 0.216) and e.acceptance_rate_pct == 49.6
    assert e.counters() == SpecCounters(190, 760, 377, (150, 112, 74, 41))
    assert vllm_log.read(DATA / "vllm_server.log") == SpecCounters(
        510, 2040, 1000, (408, 293, 189, 110))


def test_vllm_log_older_wording(tmp_path):
    p = tmp_path / "old.log"
    p.write_text("INFO 03-01 10:00:00 SpecDecoding metrics: Draft acceptance rate: 62.6%, "
                 "Accepted: 1016 tokens, Drafted: 1624 tokens\n")
    (e,) = vllm_log.read_log(p)
    assert (e.accepted, e.drafted, e.acceptance_rate_pct, e.per_position) == (
        1016, 1624, 62.6, ())


# ------------------------------------------------------------- detection and the override
SAMPLES = {"azure_code_2023.csv": "azure", "azure_conv_2024.csv": "azure",
           "burstgpt_1.csv": "burstgpt", "burstgpt_3.csv": "burstgpt",
           "mooncake_trace.jsonl": "mooncake", "sharegpt.json": "sharegpt",
           "specbench_question.jsonl": "specbench", "custom_prompts.jsonl": "custom_prompts",
           "vllm_bench_detailed.json": "vllm_bench", "vllm_bench_append.json": "vllm_bench",
           "sglang_bench.jsonl": "sglang_bench", "vllm_metrics_after.txt": "vllm_metrics",
           "vllm_server.log": "vllm_log"}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_detect_by_content_not_name(name, tmp_path):
    blind = tmp_path / "upload.dat"
    shutil.copy(DATA / name, blind)
    assert F.detect_format(blind) == SAMPLES[name]
    assert set(SAMPLES.values()) == set(F.FORMATS)


def test_format_override(tmp_path):
    p = tmp_path / "both.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 5, "output_length": 7, "prompt": "a b"}\n')
    assert F.read_workload(p).format == "mooncake"
    forced = F.read_workload(p, format="custom_prompts", output_len=3)
    assert forced.format == "custom_prompts" and forced.records[0].text == "a b"
    with pytest.raises(FormatError) as e:
        F.read_workload(p, format="parquet")
    assert all(name in str(e.value) for name in F.FORMATS)
    with pytest.raises(FormatError, match="holds no requests"):
        F.read_workload(DATA / "vllm_metrics_after.txt")


def test_undetectable(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("just some words\n")
    with pytest.raises(FormatError, match="cannot tell the format"):
        F.detect_format(p)


def test_indented_vllm_result(tmp_path):
    raw = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    p = tmp_path / "result.json"
    p.write_text(json.dumps(raw, indent=2))
    assert F.detect_format(p) == "vllm_bench" and vllm_bench.read(p).completed == 9


# --------------------------------------------------------------- scaling, window and head
def test_scaled_window_head():
    w = burstgpt.read(DATA / "burstgpt_1.csv")
    fast = w.scaled(2.0)
    assert fast.arrivals_s == tuple(t / 2 for t in w.arrivals_s) and len(fast) == len(w)
    win = w.window(100.0, 300.0)
    inside = [t for t in w.arrivals_s if 100 <= t < 300]
    assert win.arrivals_s == tuple(t - inside[0] for t in inside)
    assert len(w.head(5)) == 5 and w.head(5).records == w.records[:5]
    assert len(w.head(10_000)) == len(w) and len(w.head(0)) == 0
    for bad in (lambda: w.scaled(0), lambda: w.window(5, 1), lambda: w.head(-1)):
        with pytest.raises(ValueError):
            bad()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e5), max_size=40), st.floats(0.01, 100), st.floats(0, 1e5),
       st.floats(0, 1e5), st.integers(0, 50))
def test_transforms_keep_arrivals_sorted_and_based(times, scale, a, b, n):
    w = FileWorkload(tuple(WorkloadRequest(t, 1, 1) for t in sorted(times)), "x", "x")
    out = w.scaled(scale).window(min(a, b), max(a, b))
    capped = out.head(n)
    ts = capped.arrivals_s
    assert list(ts) == sorted(ts) and all(t >= 0 for t in ts)
    assert not ts or ts[0] == 0.0
    assert len(capped) == min(n, len(out))


# -------------------------------------------------------------------------- bad input
def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_integer_names_file_line_field(tmp_path):
    p = write(tmp_path, "trace.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1,abc,5\n"
              "2023-11-16 18:15:48.1,3,5\n")
    with pytest.raises(FormatError) as e:
        azure.read(p)
    assert str(e.value) == f"{p} line 3: field 'ContextTokens': not an integer ('abc')"


def test_missing_column_names_it_and_the_columns_found(tmp_path):
    p = write(tmp_path, "t.csv", "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,1,2\n")
    with pytest.raises(FormatError, match=r"missing column 'ContextTokens' \(columns found: "
                       r"TIMESTAMP, Context, GeneratedTokens\)"):
        azure.read(p)


@pytest.mark.parametrize("reader, header, value, field", [
    (azure.read, "TIMESTAMP,ContextTokens,GeneratedTokens", "1700000000.5,1,2", "TIMESTAMP"),
    (burstgpt.read, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
     "12:30,ChatGPT,1,2,3,API log", "Timestamp")])
def test_unknown_time_unit_names_the_field(tmp_path, reader, header, value, field):
    p = write(tmp_path, "t.csv", f"{header}\n{value}\n")
    with pytest.raises(FormatError, match=f"line 2: field '{field}': cannot tell the time unit"):
        reader(p)


def test_mixed_time_units(tmp_path):
    p = write(tmp_path, "m.jsonl", '{"timestamp": 10, "input_length": 1, "output_length": 1}\n'
              '{"timestamp": "2024-05-10 00:00:01", "input_length": 1, "output_length": 1}\n')
    with pytest.raises(FormatError, match="line 2: field 'timestamp': .* mixes units"):
        mooncake.read(p)


@pytest.mark.parametrize("reader", [azure.read, burstgpt.read, mooncake.read, sharegpt.read,
                                    specbench.read, custom_prompts.read, vllm_bench.read,
                                    sglang_bench.read, vllm_metrics.read, vllm_log.read_log,
                                    F.detect_format])
def test_empty_file(tmp_path, reader):
    p = write(tmp_path, "empty.jsonl", "\n  \n")
    with pytest.raises(FormatError, match="empty"):
        reader(p)


def test_malformed_middle_line_is_an_error(tmp_path):
    good = '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
    p = write(tmp_path, "m.jsonl", good + '{"timestamp": 5, "input_length": \n' + good)
    with pytest.raises(FormatError, match=r"m.jsonl line 2: not valid JSON"):
        mooncake.read(p)


def test_truncated_last_line_warns_and_keeps_the_rows_before(tmp_path):
    rows = "".join(f'{{"timestamp": {i * 100}, "input_length": 9, "output_length": 3}}\n'
                   for i in range(4))
    p = write(tmp_path, "cut.jsonl", rows + '{"timestamp": 400, "input_len')
    with pytest.warns(TruncatedInputWarning) as caught:
        w = mooncake.read(p)
    assert len(caught) == 1 and f"{p} line 5: last line is cut short" in str(caught[0].message)
    assert len(w) == 4 and w.records[-1].arrival_s == 0.3


def test_truncated_last_csv_row_warns(tmp_path):
    p = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,"
              "Log Type\n1,ChatGPT,5,6,11,API log\n4,ChatGPT,7,8,15,API log\n9,Chat")
    with pytest.warns(TruncatedInputWarning, match="line 4"):
        assert len(burstgpt.read(p)) == 2
    q = write(tmp_path, "c.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,"
              "Log Type\n1,ChatGPT,5\n4,ChatGPT,7,8,15,API log\n")
    with pytest.raises(FormatError, match="line 2: expected 6 fields, found 3"):
        burstgpt.read(q)


def test_bench_list_lengths_must_agree(tmp_path):
    raw = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    raw["ttfts"] = raw["ttfts"][:-1]
    p = write(tmp_path, "r.json", json.dumps(raw))
    with pytest.raises(FormatError, match=r"line 1: field 'ttfts': 9 entries, but "
                       r"'input_lens' has 10"):
        vllm_bench.read(p)


def test_metrics_errors(tmp_path):
    text = (DATA / "vllm_metrics_after.txt").read_text()
    p = write(tmp_path, "m.txt", text.replace("} 6080.0", "} lots"))
    with pytest.raises(FormatError, match="field 'vllm:spec_decode_num_draft_tokens_total': "
                       "not a number"):
        vllm_metrics.read(p)
    q = write(tmp_path, "n.txt", "\n".join(s for s in text.splitlines() if "num_drafts_" not in s))
    with pytest.raises(FormatError, match="field 'vllm:spec_decode_num_drafts_total': not found"):
        vllm_metrics.read(q)


def test_log_line_missing_a_field(tmp_path):
    lines = (DATA / "vllm_server.log").read_text().splitlines()
    broken = lines[1].replace("Drafted: 760 tokens, ", "")
    p = write(tmp_path, "a.log", "\n".join([broken] + lines[2:]) + "\n")
    with pytest.raises(FormatError, match="a.log line 1: field 'Drafted'"):
        vllm_log.read_log(p)
    q = write(tmp_path, "b.log", "\n".join(lines + [lines[1][:120]]) + "\n")
    with pytest.warns(TruncatedInputWarning):
        assert len(vllm_log.read_log(q)) == 3


def test_messages_are_one_line(tmp_path):
    p = write(tmp_path, "x.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nnope\nzzz,1,2\n")
    with warnings.catch_warnings(), pytest.raises(FormatError) as e:
        warnings.simplefilter("error")
        azure.read(p)
    assert "\n" not in str(e.value) and "line 2" in str(e.value)
