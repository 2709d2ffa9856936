"""The diagnostic scripts of ``scripts/`` (overlap, prefill by length, replay by step kind and
latency parts, speed by run, acceptance by style, probe against runs) on the quick demo's
folder and on hand-built inputs."""
from __future__ import annotations

import pytest


def _script(name: str):
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_overlap_by_config_reads_a_demo_folder(quick_demo, capsys):
    """`scripts/overlap_by_config.py` measures a demo's runs with its own calibrated fits:
    one line for the calibration runs, one per configuration asked for; a folder without a
    model or a configuration without traces is a one-line error (exit 2)."""
    mod = _script("overlap_by_config")
    _, out = quick_demo
    assert mod.main([str(out), "psd_k3_m2_ho"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and "calibration:" in lines[0] and "psd_k3_m2_ho:" in lines[1]
    assert "(4 runs)" in lines[0] and "(1 runs)" in lines[1]       # quick plan: 4 calibration runs
    assert mod.main([str(out), "nope"]) == 2
    assert mod.main([str(out / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "nope" in err[0] and "model.json" in err[1]


def test_prefill_by_length_splits_the_sides_and_counts_every_prefill(quick_demo, capsys):
    """`scripts/prefill_by_length.py`: per side, every single-sequence target prefill lands in
    exactly one length bucket, and each bucket's ratio is its prefills' measured time over the
    calibrated prefill model's prediction for them (recomputed here from the traces and the
    model file: no timing enters the check); bad edges and a folder without a model are
    one-line errors."""
    import re
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.calibrate import design
    from psdlab.validation.model_file import read_model
    from psdlab.validation.replay_model import calibration_view
    mod = _script("prefill_by_length")
    _, out = quick_demo
    assert mod.main([str(out), "--edges", "10,20"]) == 0
    text = capsys.readouterr().out
    heads = re.findall(r"^(calibration|heldout): (\d+) single-sequence", text, re.M)
    assert [h[0] for h in heads] == ["calibration", "heldout"]
    blocks = re.split(r"^heldout:", text, flags=re.M)
    for (side, total), block in zip(heads, blocks):
        counts = [int(n) for n in re.findall(r"n +(\d+) ", block)]
        assert sum(counts) == int(total) > 0, side
    cal = calibration_view(read_model(out / "model.json"))
    rows = {"calibration": [], "heldout": []}
    for path in sorted((out / "traces").glob("*.jsonl")):
        tr = read_trace(path)
        side = {"calibrate": "calibration", "validate": "heldout"}.get(
            (tr.run.extra or {}).get("demo_role"))
        for ph in (p for st in tr.steps for p in st.phases) if side else ():
            if (ph.kind == "prefill" and ph.device == tr.run.devices["target"]
                    and ph.seqs == 1 and ph.end > ph.start):
                pred = float(cal.costs["prefill"].predict(design("prefill", [ph]))[0])
                rows[side].append((ph.tokens, ph.end - ph.start, pred))
    for (side, _), block in zip(heads, blocks):
        for lo, hi, ratio in re.findall(r"tokens +(\d+)-(\d*) *: n +\d+  measured / predicted "
                                        r"([0-9.]+)", block):
            got = [(m, p) for t, m, p in rows[side]
                   if int(lo) <= t < (int(hi) + 1 if hi else 10 ** 9)]
            assert float(ratio) == pytest.approx(sum(m for m, _ in got)
                                                 / sum(p for _, p in got), abs=6e-4)
    assert mod.main([str(out), "--edges", "20,10"]) == 2
    assert mod.main([str(out / "missing")]) == 2
    assert mod.main([str(out), "--passes", "0,1"]) == 2
    assert mod.main([str(out), "--passes", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and "--edges" in err[0] and "model.json" in err[1]
    assert all(e.startswith("--passes") for e in err[2:])


def test_prefill_by_length_counts_passes_for_traces_that_record_none(quick_demo, tmp_path,
                                                                    capsys):
    """With the passes stripped from the traces (as written before they were recorded), the
    script gives the recorded answer back only when told the rule: ``--passes`` with the
    runtime's rule reproduces it, a finer chunk charges more passes (lower ratios)."""
    import re
    import shutil
    mod = _script("prefill_by_length")
    _, out = quick_demo
    assert mod.main([str(out), "--edges", "10,20"]) == 0
    recorded = capsys.readouterr().out
    old = tmp_path / "old"
    shutil.copytree(out, old)
    for trace in (old / "traces").glob("*.jsonl"):
        trace.write_text(re.sub(r',"chunks":\d+', "", trace.read_text()))
    assert mod.main([str(old), "--edges", "10,20", "--passes", "128,1"]) == 0
    assert capsys.readouterr().out == recorded
    assert mod.main([str(old), "--edges", "10,20", "--passes", "4,1"]) == 0
    ratios = lambda text: [float(x) for x in re.findall(r"predicted ([0-9.]+)", text)]
    finer = ratios(capsys.readouterr().out)
    assert len(finer) == len(ratios(recorded))
    assert all(f <= r for f, r in zip(finer, ratios(recorded)))
    # in seconds, prefill by prefill: the finer rule charges more wherever the calibrated
    # model charges a pass anything (its per-pass term is fitted on the tiny models' timings,
    # so it may come out zero: then the finer rule charges the same)
    from dataclasses import replace
    from psdlab.analysis.chunking import Chunking
    from psdlab.validation.calibrate import design
    from psdlab.validation.model_file import read_model
    from psdlab.validation.replay_model import calibration_view
    cal = calibration_view(read_model(str(out / "model.json")))
    fine = mod._prefills(str(old), cal, Chunking(4, 1))
    runtime = mod._prefills(str(old), cal, Chunking(128, 1))
    pairs = [(f, r) for side in fine for f, r in zip(fine[side], runtime[side])]
    assert pairs and all(f[2] >= r[2] - 1e-12 for f, r in pairs)
    from psdlab.analysis.trace import read_trace
    phase = next(ph for t in (out / "traces").glob("*.jsonl") for s in read_trace(t).steps
                 for ph in s.phases if ph.kind == "prefill" and ph.seqs == 1)
    one, two = (float(cal.costs["prefill"].predict(design("prefill", [replace(phase, chunks=c)]))
                      [0]) for c in (1, 2))
    if two > one:
        assert any(f[2] > r[2] for f, r in pairs if f[0] > 4)


def test_replay_by_step_kind_splits_every_step(quick_demo, capsys):
    """`scripts/replay_by_step_kind.py`: one line per configuration asked for, its decode and
    other step times adding up to at most the makespan; the split itself covers every step
    once; an unknown configuration is a one-line error."""
    import re
    from psdlab.analysis.trace import read_trace
    mod = _script("replay_by_step_kind")
    result, out = quick_demo
    tr = read_trace(result.measured[0].path)
    span, decode, other = mod.split(tr)
    assert decode + other == pytest.approx(sum(s.end - s.start for s in tr.steps))
    assert decode > 0 and other > 0 and decode + other <= span + 1e-9
    assert mod.main([str(out), "psd_k3_m2_ho", "sd_k3_m2_ho"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["psd_k3_m2_ho", "sd_k3_m2_ho"]
    for line in lines:
        m, d, o = (float(x) for x in re.findall(r"(\d+\.\d+) s vs", line))
        assert d + o <= m + 0.011
    assert mod.main([str(out), "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_acceptance_by_style_weighs_every_verification_and_walks_the_pool(quick_demo, capsys):
    """`scripts/acceptance_by_style.py`: one line per side and k; its verification count is
    every verification the side's drafting runs traced; its pool rate is the pool walked at
    that k over the side's output lengths; a folder without a pool is a one-line error."""
    import json
    import re
    from collections import Counter
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.acceptance_pool import walk
    mod = _script("acceptance_by_style")
    _, out = quick_demo
    assert mod.main([str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    pool = json.loads((out / "acceptance_pool.json").read_text())["prompts"]
    assert pool
    chance = [line for line in lines if "chance alone:" in line]
    lines = [line for line in lines if "chance alone:" not in line]
    assert len(chance) == sum(" heldout k=" in line for line in lines) > 0
    seen = set()
    for line in lines:
        side, k, meas, n, rate = re.match(
            r"\s*(\w+) k=(\d+): measured ([0-9.]+) \((\d+) verifications\) / pool ([0-9.]+)",
            line).groups()
        seen.add(side)
        roles = {"calibration": ("calibrate", "repeat"), "heldout": ("validate",)}[side]
        traces = [t for t in map(read_trace, (out / "traces").glob("*.jsonl"))
                  if (t.run.extra or {}).get("demo_role") in roles and t.run.k == int(k)]
        verified = [v for t in traces for s in t.steps for v in s.verified]
        assert int(n) == len(verified) > 0
        assert float(meas) == pytest.approx(sum(v.accepted for v in verified)
                                            / sum(v.proposed for v in verified), abs=6e-4)
        lengths = Counter(r.output_len for t in traces for r in t.requests)
        walked = [w for p in pool.values() for L, c in lengths.items()
                  for w in walk(p[:L], int(k)) for _ in range(c)]
        assert float(rate) == pytest.approx(sum(w[2] for w in walked)
                                            / sum(w[1] for w in walked), abs=6e-4)
    assert seen == {"calibration", "heldout"}
    assert mod.main([str(out / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acceptance_pool.json" in err[0]


def test_acceptance_by_style_chance_line_is_the_bootstrap_of_the_pool():
    """The chance line: a pool of one always-accepting and one never-accepting chat prompt,
    held-out sets of one chat prompt: the set's rate is 1 or 0, half the time each, so its
    SD is 0.5 / (the pool's rate, 3/9) and half the draws fall at or below 0.5; a style the
    pool lacks gives no line."""
    from collections import Counter
    mod = _script("acceptance_by_style")
    walked = mod.walk_pool({"chat-01": ".1111", "chat-02": ".0000"}, 4, Counter({5: 1}))
    sd, low = mod.chance(walked, Counter({"chat": 1}), 0.5, draws=4000)
    assert sd == pytest.approx(1.5, abs=0.03) and low == pytest.approx(0.5, abs=0.03)
    sd2, low2 = mod.chance(walked, Counter({"chat": 200}), 0.5, draws=500)
    assert sd2 < sd / 10 and low2 == 1.0          # 200 prompts: the rate stays near 1/3
    assert mod.chance(walked, Counter({"code": 1}), 0.5, draws=10) is None


def test_probe_vs_runs_compares_observed_positions_and_rates(quick_demo, capsys):
    """`scripts/probe_vs_runs.py`: with the runs' own match patterns in place of the probe's,
    every observed position agrees (runs of one greedy prompt see one pattern), and the
    patterns walked at each run's k and output lengths give the accepted / proposed the runs
    measured, per style; a position the patterns contradict is counted as a disagreement; a
    target without a tokenizer (the quick demo's tiny pair) and a folder without traces are
    one-line errors."""
    from psdlab.validation.acceptance_transfer import prompt_of
    from psdlab.validation.match_patterns import match_patterns
    mod = _script("probe_vs_runs")
    _, out = quick_demo
    traces = mod.side_traces(str(out), "heldout")
    assert traces and all((t.run.extra or {}).get("demo_role") == "validate" for t in traces)
    own = {prompt_of(r): p for r, p in match_patterns(traces).patterns.items()}
    agree = mod.agreement(traces, own)
    total = sum(v[0] for v in agree.values())
    assert total > 0 and sum(v[1] for v in agree.values()) == total
    verified = [v for t in traces for s in t.steps for v in s.verified]
    assert total == sum(v.accepted + (v.accepted < v.proposed) for v in verified)
    rates = mod.rates(traces, own)
    assert sum(r[0] for r in rates.values()) == sum(v.accepted for v in verified)
    assert sum(r[1] for r in rates.values()) == sum(v.proposed for v in verified)
    for style, (acc, prop, w_acc, w_prop) in rates.items():
        assert w_prop > 0 and abs(w_acc / w_prop - acc / prop) < 0.1, style
    flipped = {k: "." + "".join("0" if c == "1" else "1" for c in p[1:]) for k, p in own.items()}
    assert sum(v[1] for v in mod.agreement(traces, flipped).values()) < total
    assert mod.main([str(out)]) == 2
    assert "tokenizer" in capsys.readouterr().err
    assert mod.main([str(out / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no heldout" in err[0]


def test_acceptance_by_style_by_split_sums_the_walked_pool_per_split():
    """`by_split` groups the walked pool's accepted and proposed tokens by each prompt's
    split (ids of a wrapped window, ``ID~2``, count as their prompt; unknown ids as
    ``other``), and the groups add up to the whole pool."""
    from collections import Counter
    mod = _script("acceptance_by_style")
    pool = {"chat-1": ".1101", "code-2": ".1111", "code-3~2": ".0000", "math-9": ".1010"}
    walked = mod.walk_pool(pool, 2, Counter({5: 2, 3: 1}))
    rows = mod.by_split(walked, sorted(pool), {"chat-1": "a", "code-2": "b", "code-3": "a"})
    assert set(rows) == {"a", "b", "other"}
    for i in (0, 1):
        assert sum(r[i] for r in rows.values()) == pytest.approx(walked[i + 1].sum())
    only = mod.walk_pool({"code-2": ".1111"}, 2, Counter({5: 2, 3: 1}))
    assert rows["b"] == [pytest.approx(only[1].sum()), pytest.approx(only[2].sum())]


def test_prediction_noise_replays_one_run_seed_by_seed(quick_demo, capsys):
    """`scripts/prediction_noise.py`: one row per metric with the demo seeds' mean, all
    seeds' mean, their ratio and one seed's SD, the mean of the first seeds being what
    ``validation.compare.predict`` gives for them together; bad arguments are one-line errors."""
    import json
    import numpy as np
    mod = _script("prediction_noise")
    _, out = quick_demo
    run = next(p.stem for p in sorted((out / "traces").glob("sd*.jsonl")))
    rows = mod.per_seed(str(out), run, 3)
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.compare import predict
    from psdlab.validation.replay_model import load_replay_params
    params = load_replay_params(json.loads((out / "model.json").read_text()))
    together, _ = predict(read_trace(str(out / "traces" / f"{run}.jsonl")),
                          str(out / "model.json"), seeds=(0, 1), params=params)
    assert np.mean([r["tpot.mean"] for r in rows[:2]]) == pytest.approx(together["tpot.mean"])
    assert mod.main([str(out), run, "--seeds", "10", "--demo-seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "demo (2 seeds)" in text and "seeds 0-1" in text
    assert sum(line.startswith(("acceptance rate", "mean TPOT", "throughput"))
               for line in text.splitlines()) == 3
    assert mod.main([str(out), run, "--seeds", "5"]) == 2
    assert mod.main([str(out), "nope_r1", "--seeds", "10"]) == 2
    assert mod.main([str(out), run, "--seeds", "10", "--demo-seeds", "11"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "--seeds" in err[0] and "nope_r1" in err[1]
    assert "--demo-seeds" in err[2]


def test_replay_latency_parts_splits_latency_and_steps(quick_demo, capsys):
    """`scripts/replay_latency_parts.py`: one block per configuration asked for, its request
    parts measured against replayed, then its decode steps and phases by batch size with
    counts matching the traces'; ``--recalibrate`` refits and still replays every block;
    ``--by-repeat`` adds a line per repeat; an unknown configuration is a one-line error."""
    from psdlab.analysis.trace import read_trace
    mod = _script("replay_latency_parts")
    result, out = quick_demo
    assert mod.main([str(out), "sd_k3_m2_ho", "--by-repeat"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("sd_k3_m2_ho: queue ") and "TPOT" in lines[0]
    repeats = [line for line in lines if line.strip().startswith("repeat ")]
    runs = [m for m in result.measured if m.spec.config == "sd_k3_m2_ho"]
    assert len(repeats) == len(runs) >= 1
    steps = mod.step_parts([read_trace(m.path) for m in runs])
    for key, durations in steps.items():
        want = f"{key[0]:>11} of {key[1]}: "
        line = next(x for x in lines if x.startswith("    " + want))
        assert f"; {len(durations)} / " in line
    assert mod.main([str(out), "sd_k3_m2_ho", "--recalibrate"]) == 0
    assert capsys.readouterr().out.startswith("sd_k3_m2_ho: queue ")
    assert mod.main([str(out), "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_speed_by_run_lists_every_run_in_the_order_it_ran(quick_demo, capsys):
    """`scripts/speed_by_run.py`: one line per trace, by start time; a folder without a model
    is a one-line error."""
    import re
    mod = _script("speed_by_run")
    result, out = quick_demo
    assert mod.main([str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(list((out / "traces").glob("*.jsonl")))
    starts = [float(re.match(r"\s*(\d+) s", line).group(1)) for line in lines]
    assert starts == sorted(starts) and starts[0] == 0
    assert mod.main([str(out / "missing")]) == 2
    assert "model.json" in capsys.readouterr().err


def test_diagnostic_scripts_give_one_line_errors_on_folders_they_cannot_read(quick_demo,
                                                                             tmp_path, capsys):
    """A demo folder with a model but no traces (speed by run), or whose model names
    calibration traces that are gone (latency parts --recalibrate): exit 2, one line."""
    import shutil
    _, out = quick_demo
    bare = tmp_path / "bare"
    (bare / "traces").mkdir(parents=True)
    shutil.copy(out / "model.json", bare / "model.json")
    assert _script("speed_by_run").main([str(bare)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no traces" in err[0]
    assert _script("replay_latency_parts").main([str(bare), "--recalibrate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--recalibrate:")


def test_overlap_by_run_pairs_every_psd_run_with_a_serial_run_of_its_workload(quick_demo,
                                                                              tmp_path, capsys):
    """`scripts/overlap_by_run.py`: one line per PSD trace, in the order they ran, each against
    a serial run of its own workload; a folder without traces is a one-line error."""
    import re
    from psdlab.analysis.trace import read_trace
    mod = _script("overlap_by_run")
    _, out = quick_demo
    traces = [read_trace(str(p)) for p in (out / "traces").glob("*.jsonl")]
    psd = [t for t in traces if any(s.overlapped for s in t.steps)]
    assert mod.main([str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(lines) == len(psd) > 0
    starts = [float(re.match(r"\s*(-?\d+) s", line).group(1)) for line in lines]
    assert starts == sorted(starts)
    keys = {t.run.extra["demo_run"]: t.run.extra["workload_key"] for t in traces}
    pairs = [re.search(r"(\S+)\s+vs (\S+)", line) for line in lines]
    assert any(pairs)
    for m, line in zip(pairs, lines):
        if m:
            assert keys[m.group(1)] == keys[m.group(2)] and m.group(2).startswith("sd_")
            assert "own contention target" in line
    (tmp_path / "traces").mkdir()
    assert mod.main([str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_noise_budget_rebuilds_the_demo_results_budget(quick_demo, capsys):
    """`scripts/noise_budget.py` rebuilds a demo's validation from its folder: the same
    held-out targets, chances and repeats as the demo's results.json (the noise does not
    depend on the replay's seeds); a folder without runs.csv is a one-line error (exit 2)."""
    import json
    mod = _script("noise_budget")
    _, out = quick_demo
    written = json.loads((out / "results.json").read_text())["noise_budget"]
    assert written, "the demo writes its noise budget"
    rebuilt = mod.budget_of(str(out), 1)
    keys = ("target", "repeats_now", "repeats_needed")
    assert [[r[k] for k in keys] for r in rebuilt] == [[r[k] for k in keys] for r in written]
    for a, b in zip(rebuilt, written):
        assert a["chance_now"] == pytest.approx(b["chance_now"], abs=1e-9)
    assert mod.main([str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"## {out}" and len(lines) == 2 + len(written)
    assert mod.main([str(out / "missing")]) == 2
    assert "runs.csv" in capsys.readouterr().err


def test_noise_budget_names_a_missing_model_file(quick_demo, tmp_path, capsys):
    import shutil
    mod = _script("noise_budget")
    _, out = quick_demo
    shutil.copy(out / "runs.csv", tmp_path / "runs.csv")
    assert mod.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.json" in err[0] and "runs.csv" not in err[0]
