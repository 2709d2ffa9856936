"""vLLM-bench-shaped results from the simulator and the bad input of the bench path:
the writer (``analysis.formats.vllm_bench_write``) read back by the vLLM reader, vLLM's metric
definitions on the trace, the client's concurrency cap, ``psdlab simulate --results-format
vllm-bench``, ``psdlab calibrate/validate`` on bench results, prompt texts for ``psdlab run``,
and one-line errors with nothing half-written."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from bench_synth import synth_config, write_synth
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.formats import FormatError, vllm_bench
from psdlab.analysis.formats.prompt_text import read_prompt_texts
from psdlab.analysis.formats.vllm_bench_write import bench_result_from_trace, write_bench_result
from psdlab.cli import main
from psdlab.sim.simulation import simulate
from psdlab.validation.serving_results.acceptance_counts import from_counters
from psdlab.validation.serving_results.replay import client_send_times, load_bench_run

DATA = Path(__file__).parent / "data" / "formats"


@pytest.fixture(scope="module")
def sd_run():
    return simulate(synth_config("sd", 10.0, 30, 3).replace(trace_level="step"))


def test_writer_round_trips_through_the_vllm_reader(sd_run, tmp_path):
    doc = bench_result_from_trace(sd_run.trace, request_rate=10.0)
    path = tmp_path / "r.json"
    write_bench_result(path, doc)
    s = vllm_bench.read(path)
    assert s.completed == 30 and s.request_rate == 10.0 and s.detailed
    assert s.stat("mean", "ttft") == pytest.approx(doc["mean_ttft_ms"])
    assert s.stat("p99", "itl") == pytest.approx(doc["p99_itl_ms"])
    assert list(s.input_lens) == doc["input_lens"] and list(s.output_lens) == doc["output_lens"]
    assert s.acceptance_length == pytest.approx(sd_run.metrics["mean_acceptance_length"])
    assert len(s.per_position_acceptance) == 3
    wl = vllm_bench.read_workload(path)
    reqs = sorted(sd_run.trace.requests, key=lambda r: r.arrival)
    assert [r.arrival_s for r in wl.records] == pytest.approx([r.arrival - reqs[0].arrival
                                                            for r in reqs])


def test_writer_follows_vllms_definitions(sd_run):
    doc = bench_result_from_trace(sd_run.trace)
    reqs = sorted(sd_run.trace.requests, key=lambda r: (r.arrival, str(r.id)))
    for i, r in enumerate(reqs):
        assert doc["ttfts"][i] == pytest.approx(r.first_token - r.arrival)
        # the gaps between streamed chunks add up to the time after the first token
        assert doc["ttfts"][i] + sum(doc["itls"][i]) == pytest.approx(doc["latencies"][i])
        assert len(doc["itls"][i]) <= r.output_len - 1
    tpots = [(e - t) / (o - 1) for e, t, o in zip(doc["latencies"], doc["ttfts"],
                                                  doc["output_lens"]) if o > 1]
    assert doc["mean_tpot_ms"] == pytest.approx(1e3 * np.mean(tpots))
    assert doc["std_ttft_ms"] == pytest.approx(1e3 * np.std(doc["ttfts"]))
    assert doc["p99_e2el_ms"] == pytest.approx(1e3 * np.percentile(doc["latencies"], 99))
    assert doc["output_throughput"] == pytest.approx(sum(doc["output_lens"]) / doc["duration"])
    shares = doc["spec_decode_per_position_acceptance_rates"]
    assert all(a >= b for a, b in zip(shares, shares[1:]))
    assert doc["spec_decode_acceptance_length"] == pytest.approx(1 + sum(shares))


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError):
        write_bench_result(tmp_path / "r.json", {"x": math.nan})
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0.01, 5)), min_size=1, max_size=30),
       st.integers(1, 6))
def test_client_cap_sends_no_earlier_than_arrival_and_keeps_at_most_c_open(rows, c):
    arrivals = np.array([a for a, _ in rows])
    order = np.argsort(arrivals, kind="stable")
    # a first-come first-served client: each request runs for its duration from its send
    finish = np.empty_like(arrivals)
    sends = np.empty_like(arrivals)
    open_until: list[float] = []
    for i in order:
        open_until.sort()
        s = arrivals[i] if len(open_until) < c else max(arrivals[i], open_until.pop(0))
        sends[i], finish[i] = s, s + rows[i][1]
        open_until.append(finish[i])
    got = client_send_times(arrivals, finish, c)
    assert got == pytest.approx(sends)
    assert (got >= arrivals).all()
    for t in got:
        assert int(((got <= t) & (finish > t)).sum()) <= c


def test_simulate_writes_a_vllm_bench_result(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('requests = 12\n[server]\nmode = "ar"\nm = 8\n'
                   '[target]\nname = "t"\ncost = {name = "affine", base = 0.01, '
                   'per_token = 0.0001}\n[workload]\nname = "poisson"\nrate = 5.0\n')
    out = tmp_path / "r.json"
    assert main(["simulate", str(cfg), "--results-format", "vllm-bench", "--result-file",
                 str(out), "--trace", str(tmp_path / "t.jsonl")]) == 0
    s = vllm_bench.read(out)
    assert s.completed == 12 and s.request_rate == 5.0 and s.acceptance_length is None
    assert main(["simulate", str(cfg), "--results-format", "vllm-bench", "--trace-level",
                 "request", "--result-file", str(tmp_path / "x.json")]) == 2
    assert "needs --trace-level step" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_calibrate_and_validate_on_bench_results(tmp_path, capsys):
    lo = write_synth(tmp_path, "lo", "ar", 4.0, 30)
    hi = write_synth(tmp_path, "hi", "ar", 20.0, 30)
    model = tmp_path / "m.json"
    assert main(["calibrate", str(lo), str(hi), "-o", str(model), "--bootstrap", "3"]) == 0
    out = capsys.readouterr().out
    assert "target.base" in out and "note: step costs are host and device time" in out
    assert main(["validate", "--model", str(model), str(hi), "--seeds", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    tpot = next(r for r in rows if r["metric"] == "mean_tpot_ms")
    assert abs(tpot["error"]) < 0.1


# ---------------------------------------------------------------------------- bad input

def _cli_error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


def test_a_result_without_per_request_detail_is_refused(tmp_path, capsys):
    with pytest.raises(FormatError, match=r"vllm_bench_append\.json: field 'input_lens': no "
                                          r"per-request detail"):
        load_bench_run(str(DATA / "vllm_bench_append.json"))
    err = _cli_error(["calibrate", str(DATA / "vllm_bench_append.json"), "-o",
                      str(tmp_path / "m.json")], capsys)
    assert "--save-detailed" in err and not (tmp_path / "m.json").exists()


def test_a_trace_of_lengths_is_not_a_bench_result(tmp_path, capsys):
    good = write_synth(tmp_path, "g", "ar", 4.0, 10)
    err = _cli_error(["calibrate", str(good), str(DATA / "azure_code_2023.csv"), "-o",
                      str(tmp_path / "m.json")], capsys)
    assert "azure_code_2023.csv: not a vLLM or SGLang bench result" in err
    assert not (tmp_path / "m.json").exists()


def test_malformed_and_empty_bench_results(tmp_path, capsys):
    doc = json.loads((DATA / "vllm_bench_detailed.json").read_text())
    doc["ttfts"] = doc["ttfts"][:-1]
    bad = tmp_path / "short.json"
    bad.write_text(json.dumps(doc))
    err = _cli_error(["calibrate", str(bad), "-o", str(tmp_path / "m.json")], capsys)
    assert "short.json line 1: field 'ttfts': 9 entries, but 'input_lens' has 10" in err
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    with pytest.raises(FormatError, match="empty.json: the file is empty"):
        load_bench_run(str(empty))
    cut = tmp_path / "cut.json"
    cut.write_text((DATA / "vllm_bench_detailed.json").read_text()[:400])
    with pytest.raises(FormatError, match=r"cut\.json line \d+: not valid JSON"):
        load_bench_run(str(cut))
    assert not (tmp_path / "m.json").exists()


def test_metrics_snapshots_swapped_or_from_another_server(tmp_path):
    before, after = DATA / "vllm_metrics_before.txt", DATA / "vllm_metrics_after.txt"
    acc = from_counters(str(before), str(after))
    assert acc.drafts and all(0 <= p <= 1 for p in acc.per_position)
    with pytest.raises(ValueError, match=r"vllm_metrics_before\.txt: field "
                                         r"'vllm:spec_decode_num_drafts_total': \d+ is below"):
        from_counters(str(after), str(before))
    other = tmp_path / "other.txt"
    other.write_text(after.read_text().replace('model_name="', 'model_name="x'))
    with pytest.raises(FormatError, match=r"other\.txt: field 'vllm:spec_decode_num_drafts_"
                                          r"total': labels differ"):
        from_counters(str(before), str(other))


def test_metrics_snapshots_need_a_speculative_run(tmp_path, capsys):
    ar = write_synth(tmp_path, "ar", "ar", 4.0, 10)
    err = _cli_error(["calibrate", str(ar), "-o", str(tmp_path / "m.json"), "--metrics-before",
                      str(DATA / "vllm_metrics_before.txt"), "--metrics-after",
                      str(DATA / "vllm_metrics_after.txt")], capsys)
    assert "no speculative-decoding run" in err


def test_prompt_texts_from_foreign_formats():
    assert len(read_prompt_texts(DATA / "sharegpt.json")) == 6
    texts = read_prompt_texts(DATA / "specbench_question.jsonl", "specbench")
    assert texts[0].text.strip()
    for name in ("azure_code_2023.csv", "vllm_bench_detailed.json"):
        with pytest.raises(FormatError, match=rf"{name}: field 'text': has no prompt text"):
            read_prompt_texts(DATA / name)


def test_metrics_reads_a_trace_cut_mid_line_with_one_warning(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    simulate(synth_config("ar", 5.0, 10, 0).replace(trace_level="step"),
             trace_path=str(trace))
    text = trace.read_text()
    trace.write_text(text[:-20])
    assert main(["metrics", str(trace)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "last line" in err and "cut at byte" in err


def _short_sd(cap: bool, n: int = 400):
    """n requests of 8 output tokens, k = 2: most end on a step whose draft runs past them."""
    from psdlab.sim.sim_config import config_from_dict
    raw = {"seed": 7, "requests": n,
           "server": {"mode": "sd", "k": 2, "m": 64, "cap_proposals": cap},
           "target": {"name": "target", "cost": {"name": "affine", "base": 0.01}},
           "drafter": {"name": "drafter", "cost": {"name": "affine", "base": 0.002}},
           "acceptance": {"name": "positional", "rates": [0.75, 0.667]},
           "workload": {"name": "poisson", "rate": 20.0,
                        "prompt": {"name": "fixed", "value": 20},
                        "output": {"name": "fixed", "value": 8}}}
    return simulate(config_from_dict(raw).replace(trace_level="step"))


def test_spec_decode_counts_the_last_steps_accepted_tokens_as_vllm_does():
    """vLLM counts a request's last draft in full (k proposed, every accepted token) although
    its output stops at max_tokens: so must the writer, or short outputs read low."""
    run = _short_sd(cap=False)
    rows = [v for s in run.trace.steps for v in s.verified if v.proposed > 0]
    assert any(v.accepted + 1 > v.emitted for v in rows)      # truncated last steps exist
    doc = bench_result_from_trace(run.trace)
    assert doc["psdlab"]["spec_decode_counting"] == "vllm"
    assert doc["spec_decode_num_drafts"] == len(rows)
    assert doc["spec_decode_draft_tokens"] == 2 * len(rows)
    assert doc["spec_decode_accepted_tokens"] == sum(v.accepted for v in rows)
    assert doc["spec_decode_accepted_tokens"] > sum(v.emitted - 1 for v in rows)
    # and the counter ratio is the model's 1 + 0.75 + 0.75 x 0.667 (sampling noise ~0.03)
    assert doc["spec_decode_acceptance_length"] == pytest.approx(1 + 0.75 + 0.75 * 0.667,
                                                                 abs=0.08)


def test_capped_proposals_are_flagged_as_not_vllms_counting():
    doc = bench_result_from_trace(_short_sd(cap=True, n=40).trace)
    assert doc["psdlab"]["spec_decode_counting"] == "capped-proposals"
    assert doc["spec_decode_draft_tokens"] < 2 * doc["spec_decode_num_drafts"]
