"""`psdlab demo`: the plan (what is calibrated, what is held out), and a quick end-to-end demo on
tiny random models (real runtime runs, calibration, replay, report folder, summary)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from psdlab.cli import main
from psdlab.validation.demo.measurement_plan import MeasurementPlan, default_plan
from psdlab.validation.demo.run_order import RunSpec


def test_default_plan_holds_out_other_prompts_k_and_arrivals():
    plan = default_plan()
    cal = [r for r in plan.runs if r.role == "calibrate"]
    held = [r for r in plan.runs if r.role == "validate"]
    ref = [r for r in plan.runs if r.role == "reference"]
    assert {r.k for r in cal if r.mode != "ar"} == {2, 4}
    # PSD predicted before it runs: no PSD run is calibrated on, the co-run probe stands
    # for its overlapped steps, and every PSD run is held out (two k, offline and Poisson)
    assert {r.mode for r in cal} == {"ar", "sd-sep"} and plan.corun_probe
    psd = [r for r in plan.runs if r.mode == "psd"]
    assert {r.role for r in psd} <= {"validate", "reference"}
    assert len({r.k for r in psd if r.role == "validate"}) >= 2
    assert {r.arrivals for r in psd if r.role == "validate"} == {"offline", "poisson"}
    assert {r.k for r in held if r.mode == "sd-sep"} - {r.k for r in cal}  # an unseen SD k
    assert len({r.batch for r in cal}) == 1 and {r.arrivals for r in cal} == {"offline"}
    assert {r.prompts for r in cal} == {"calibration"}
    assert {r.prompts for r in held + ref} == {"heldout"}
    assert 3 in {r.k for r in held}
    assert "poisson" in {r.arrivals for r in held}
    # the iso-concurrency references: AR at m and PSD with two batches of m / 2
    assert {(r.mode, r.batch) for r in ref} == {("ar", 4), ("psd", 2)}
    for r in held:                            # every held-out config has its SD/PSD pair
        assert {x.mode for x in held if x.workload == r.workload} == {"sd-sep", "psd"}
    order = [r.role for r in plan.runs]       # interleaved, not all calibration first
    assert order.index("validate") < max(i for i, x in enumerate(order) if x == "calibrate")
    configs = [r.config for r in plan.runs]
    first_poisson = min(i for i, r in enumerate(plan.runs) if r.arrivals == "poisson")
    assert configs.index(plan.poisson_from) < first_poisson


@pytest.mark.parametrize("repeats,seed", [(1, 0), (2, 0), (3, 5)])
def test_plan_repeats_in_seeded_rounds_with_pairs_back_to_back(repeats, seed):
    plan = default_plan(repeats=repeats, seed=seed)
    configs = [r.config for r in plan.runs]
    n = len(set(configs))
    assert len(plan.runs) == n * repeats and len({r.name for r in plan.runs}) == len(plan.runs)
    for i in range(repeats):                  # every round runs every configuration once
        assert sorted(configs[i * n:(i + 1) * n]) == sorted(set(configs))
    paired = ({r.workload for r in plan.runs if r.mode == "sd-sep"}
              & {r.workload for r in plan.runs if r.mode == "psd"})
    for i, r in enumerate(plan.runs):         # SD and PSD of one workload back to back
        if r.workload in paired:
            mates = [j for j, x in enumerate(plan.runs) if x.workload == r.workload
                     and x.mode != r.mode and (j // n) == (i // n)]
            assert len(mates) == 1 and abs(mates[0] - i) == 1
    assert default_plan(repeats=repeats, seed=seed) == plan          # seeded
    if repeats > 1:
        assert all(r.name == f"{r.config}_r{i // n + 1}" for i, r in enumerate(plan.runs))
        other = default_plan(repeats=repeats, seed=seed + 1)
        assert [r.name for r in other.runs] != [r.name for r in plan.runs]


def test_default_plan_runs_held_out_configs_more_often():
    plan = default_plan()
    reps = {}
    for r in plan.runs:
        reps[r.config] = reps.get(r.config, 0) + 1
    assert {reps[r.config] for r in plan.runs if r.role == "calibrate"} == {3}
    assert {reps[r.config] for r in plan.runs if r.role == "validate"
            and r.arrivals == "offline"} == {7}
    assert {reps[r.config] for r in plan.runs if r.arrivals == "poisson"} == {7}
    assert {reps[r.config] for r in plan.runs if r.role == "reference"} == {1}
    assert plan.max_new_tokens == 16 and len(plan.runs) == 39
    # calibration in the first and last of the seven rounds, so both groups sit, on
    # average, in the middle of the demo: a steady drift of the machine favours neither
    pos = {}
    for i, r in enumerate(plan.runs):
        pos.setdefault(r.role, []).append(i)
    mid = (len(plan.runs) - 1) / 2
    assert abs(sum(pos["calibrate"]) / len(pos["calibrate"]) - mid) < 4
    assert abs(sum(pos["validate"]) / len(pos["validate"]) - mid) < 4
    rounds = [r.rep for r in plan.runs if r.role == "calibrate"]
    assert sorted(set(rounds)) == [1, 2, 3] and len(rounds) == 9
    cal_pos = [i for i, r in enumerate(plan.runs) if r.role == "calibrate"]
    assert min(cal_pos) < len(plan.runs) / 5 and max(cal_pos) > 4 * len(plan.runs) / 5
    paired = ({r.workload for r in plan.runs if r.mode == "sd-sep"}
              & {r.workload for r in plan.runs if r.mode == "psd"})
    for i, r in enumerate(plan.runs):         # pairs stay back to back in every round
        if r.workload in paired:
            assert sum(1 for j in (i - 1, i + 1) if 0 <= j < len(plan.runs)
                       and plan.runs[j].workload == r.workload
                       and plan.runs[j].rep == r.rep) == 1


def test_spread_rounds_are_even_and_include_both_ends():
    from psdlab.validation.demo.run_order import spread_rounds
    assert spread_rounds(2, 3) == {0, 2} and spread_rounds(3, 3) == {0, 1, 2}
    assert spread_rounds(1, 4) == {0} and spread_rounds(3, 5) == {0, 2, 4}
    assert spread_rounds(5, 3) == {0, 1, 2}


def test_plan_checks():
    ok = RunSpec("a", "sd-sep", 2, 2)
    with pytest.raises(ValueError, match="names must be unique"):
        MeasurementPlan(runs=(ok, ok))
    with pytest.raises(ValueError, match="poisson_from"):
        MeasurementPlan(runs=(RunSpec("p", "psd", 2, 2, "poisson"),), poisson_from="nope")
    with pytest.raises(ValueError, match="controlled_alpha"):
        MeasurementPlan(runs=(ok,), controlled_alpha=1.5)
    with pytest.raises(ValueError, match="mode"):
        RunSpec("x", "sd", 2, 2)
    with pytest.raises(ValueError, match="k"):
        RunSpec("x", "psd", 0, 2)


def test_cli_rejects_half_a_pair(capsys, tmp_path):
    assert main(["demo", "-o", str(tmp_path / "r"), "--target", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--draft" in err


def test_quick_demo_end_to_end(quick_demo):
    result, out = quick_demo
    plan = default_plan(quick=True)
    for spec in plan.runs:                       # one trace per run, with every request
        assert (out / "traces" / f"{spec.name}.jsonl").is_file()
    assert {m.spec.name for m in result.measured} == {r.name for r in plan.runs}
    for f in ("report.md", "model.json", "demo.json", "comparison.csv", "summary.csv",
              "runs.csv", "predicted_vs_measured.png"):
        assert (out / f).is_file(), f
    assert len(result.headline) >= 4
    assert result.headline[0].startswith("PSD predicted before it ran: calibrated on sd-sep")
    assert result.headline[1].startswith("measured PSD/SD gain")
    assert result.headline[3].startswith("error")
    assert any("same batch size m" in line for line in result.headline[3:])
    model = json.loads((out / "model.json").read_text())
    assert set(model["meta"]["calibration"]["k"]) == {2, 4}          # fitted on k 2, 4 only
    assert "replay" in model["meta"]
    # the co-run probe ran beside the traces and PSD's overlapped steps rest on it alone
    corun = json.loads((out / "traces" / "corun_probe.json").read_text())
    assert corun["format"] == "psdlab.corun-probe"
    assert model["meta"]["contention"]["source"] == "probe"
    assert not [t for t in model["meta"]["calibration"]["traces"] if t.startswith("psd")]
    steps = json.loads((out / "results.json").read_text())["psd_inputs"]["steps"]
    assert {s["config"] for s in steps} == {r.config for r in plan.runs if r.mode == "psd"}
    for s in steps:                 # every PSD configuration has its overlapped steps checked
        assert 0 < s["solo_max_s"] and s["steps"] > 0 and s["predicted_step_s"] > 0
    assert "## PSD's inputs, measured without PSD" in (out / "report.md").read_text()
    # the context probe ran before the runs, beside their traces, and fixed both slopes
    probe = json.loads((out / "traces" / "context_probe.json").read_text())
    assert model["meta"]["context_probe"] == probe and probe["seqs"] == plan.max_batch
    assert model["roles"]["target"]["coef"]["per_context"] == max(probe["verify"]["slope"], 0)
    assert model["roles"]["drafter"]["coef"]["per_context"] == max(probe["draft"]["slope"], 0)
    held = set(result.held_out)
    assert held == {r.name for r in plan.runs if r.role == "validate"}
    summary = json.loads((out / "demo.json").read_text())["summary"]
    assert {s["metric"] for s in summary} >= {"throughput_tok_s", "gain.throughput_tok_s"}
    md = (out / "report.md").read_text()
    for name in held:
        assert name in md
    res = json.loads((out / "results.json").read_text())
    assert {"machine", "git", "date", "targets", "rows", "closed_form",
            "acceptance_model"} <= set(res)
    assert {s["target"] for s in res["targets"]["heldout"]} == {
        s["target"] for s in summary}                      # the file holds the judged figures
    assert res["machine"]["cpus"] >= 1 and res["acceptance_model"]["chosen"]
    assert res["acceptance_model"]["method"].startswith("leave-one-prompt-out")
    # the acceptance pool: the calibration side's prompts no timed run served (12 prompt
    # ids: 6 a side, 4 served by the one calibration window), probed untimed, in the fit
    pool = json.loads((out / "acceptance_pool.json").read_text())["prompts"]
    from psdlab.analysis.trace import read_trace
    served = {str(r.id) for name in ("sd_k2_m2", "sd_k4_m2")
              for r in read_trace(str(out / "traces" / f"{name}.jsonl")).requests}
    assert set(pool) == {"test-8", "test-10"} and not set(pool) & served
    assert res["acceptance_pool"]["prompts"] == 2
    assert set(pool) <= set(res["acceptance_model"]["prompts"])
    # the report leads with the verdict (held-out beside calibration) and one figure, and
    # stays short; the diagnostic sections are not in it
    lines = md.splitlines()
    assert lines[0] == "# psdlab demo report" and len(lines) <= 150
    assert lines.index("## Verdict") < 5
    verdict = lines.index("## Verdict")
    table = next(i for i, line in enumerate(lines) if line.startswith("| target | bound"))
    figure = next(i for i, line in enumerate(lines) if line.startswith("!["))
    assert verdict < table < figure
    assert "held-out: max \\|error\\| (n)" in lines[table] and "calibration" in lines[table]
    assert sum(line.startswith("![") for line in lines) == 1
    assert "Diagnostic: the same runs" not in md and not res.get("diagnostic_rows")
    assert (out / "predicted_vs_measured.png").is_file()


def test_quick_demo_diagnostics_on_the_same_traces(quick_demo, tmp_path):
    """`--diagnostics` (here through `--traces`, the same runs analysed again): the verdict
    still leads, then the diagnostic sections; the replay that knows every run's own match
    patterns reproduces the measured acceptance of every held-out run (greedy: the pattern
    decides it), so its remaining error is the timing model's."""
    from psdlab.validation.demo.diagnostic_replays import OWN_LABEL
    from psdlab.validation.demo.run_demo import reanalyse
    result, out = quick_demo
    again = reanalyse(str(out / "traces"), str(tmp_path / "diag"), seeds=(0, 1),
                      diagnostics=True)
    md = (tmp_path / "diag" / "report.md").read_text()
    lines = md.splitlines()
    assert lines.index("## Verdict") < 5 and len(lines) > 150
    assert f"Diagnostic: the same runs {OWN_LABEL}" in md
    assert "What P(noise breaks) <= 10% would take" in md
    res = json.loads((tmp_path / "diag" / "results.json").read_text())
    assert OWN_LABEL in res["diagnostics"] and res["noise_budget"]
    held = set(again.held_out)
    own = [r for r in res["diagnostic_rows"][OWN_LABEL] if r["metric"] == "acceptance_rate"
           and r["run"] in held]
    assert own and all(abs(r["error"]) < 0.03 for r in own), own
    # the judged figures do not depend on whether the diagnostics ran
    first = json.loads((out / "results.json").read_text())
    assert first["targets"] == res["targets"]


def test_block_of_is_the_pair_of_one_repeat():
    from psdlab.validation.demo.measurement_plan import block_of
    plan = default_plan(repeats=2)
    for i, r in enumerate(plan.runs):
        block = block_of(plan.runs, i)
        assert r in block and len({x.rep for x in block}) == 1
        paired = any(x.workload == r.workload and x.mode != r.mode for x in plan.runs)
        assert len(block) == (2 if paired else 1)


@pytest.mark.e2e
def test_repeats_past_the_deadline_are_skipped_with_their_pair(tmp_path):
    """A deadline already passed: every first repeat runs, no later one does."""
    import time

    from runtime_engine_util import prompts, tiny_pair
    from psdlab.validation.demo.measurement_plan import run_measurements
    pair = tiny_pair(tmp_path / "models")
    plan = default_plan(quick=True, repeats=2)
    skipped = []
    got = run_measurements(plan, str(pair["target"]), str(pair["noisy"]), tmp_path / "t",
                   prompt_ids=prompts(4, seed=3), deadline=time.perf_counter(),
                   on_skip=skipped.append)
    assert [m.spec.name for m in got] == [r.name for r in plan.runs if r.rep == 1]
    assert {s.name for s in skipped} == {r.name for r in plan.runs if r.rep == 2}


@pytest.mark.e2e
def test_a_repeat_pair_that_starts_is_never_split(tmp_path, monkeypatch):
    """The time check is made once per pair: a pair judged to fit runs whole, even when the
    clock says the deadline has passed by its second run."""
    import time
    import types

    import psdlab.validation.demo.measurement_plan as runs
    from runtime_engine_util import prompts, tiny_pair
    calls = []

    def clock():                  # the first check finds time to spare, every later one none
        calls.append(1)
        return 0.0 if len(calls) == 1 else 1e9

    monkeypatch.setattr(runs, "time", types.SimpleNamespace(perf_counter=clock, time=time.time))
    pair = tiny_pair(tmp_path / "models")
    plan = default_plan(quick=True, repeats=2)
    skipped = []
    got = runs.run_measurements(plan, str(pair["target"]), str(pair["noisy"]), tmp_path / "t",
                        prompt_ids=prompts(4, seed=3), deadline=1e6, on_skip=skipped.append)
    second = [r for r in plan.runs if r.rep == 2]
    ran = [m.spec.name for m in got]
    assert ran == [r.name for r in plan.runs if r.rep == 1] + [r.name for r in second[:2]]
    assert [s.name for s in skipped] == [r.name for r in second[2:]]
    # every run served its window of its side's prompts
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.demo.prompt_sides import prompt_windows, side_prompts, window
    pools = {s: side_prompts(None, prompts(4, seed=3), s) for s in ("calibration", "heldout")}
    starts = prompt_windows(plan.runs, {s: len(p) for s, p in pools.items()}, plan.num_prompts)
    for m in got:
        trace = read_trace(m.path)
        want = window(pools[m.spec.prompts], starts[m.spec.name], plan.num_prompts)
        assert sorted(r.id for r in trace.requests) == sorted(rid for rid, _ in want)
        assert trace.run.extra["demo_prompt_offset"] == starts[m.spec.name]


def test_demo_reanalyses_its_own_traces(quick_demo, tmp_path, capsys):
    """`psdlab demo --traces DIR` re-runs calibration, validation and report on the traces an
    earlier demo wrote, with the same roles and the same measured values."""
    result, out = quick_demo
    assert main(["demo", "--traces", str(out / "traces"), "-o", str(tmp_path / "again"),
                 "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert set(again["held_out"]) == set(result.held_out)
    assert [r["name"] for r in again["runs"]] == [m.spec.name for m in result.measured]
    first = {(r.run, r.metric): r.measured for r in result.validation.rows}
    rows = {(r["run"], r["metric"]): r["measured"] for r in again["validation"]["rows"]}
    assert rows and all(rows[k] == pytest.approx(v) for k, v in first.items() if v is not None)
    assert (tmp_path / "again" / "report.md").is_file()
    # the live demo used the traces as the engine recorded them, the re-analysis the files:
    # the same traces, the same model file byte for byte, the same predictions
    from psdlab.analysis.trace import read_trace
    assert all(m.trace is not None and m.trace == read_trace(m.path) for m in result.measured)
    assert (tmp_path / "again" / "model.json").read_bytes() == (out / "model.json").read_bytes()
    from psdlab.validation.demo.run_demo import reanalyse
    same = reanalyse(str(out / "traces"), str(tmp_path / "same"), seeds=(0, 1))  # as the live
    assert ({(r.run, r.metric): r.predicted for r in same.validation.rows}
            == {(r.run, r.metric): r.predicted for r in result.validation.rows})
    assert main(["demo", "--traces", str(tmp_path / "nope"), "-o", str(tmp_path / "x")]) == 2
    assert "--traces" in capsys.readouterr().err


def test_quick_demo_replays_measured_requests(quick_demo):
    result, _ = quick_demo
    comp = {c.name: c for c in result.validation.comparisons}
    for c in comp.values():
        assert c.predicted["requests"] == c.measured["requests"] == 4
        assert c.predicted["output_tokens"] == c.measured["output_tokens"]


def test_output_lengths_seeded_and_in_range():
    plan = default_plan()
    a, b = plan.output_lengths(16), plan.output_lengths(16)
    assert a == b and len(set(a)) > 1
    lo = round(plan.max_new_tokens * (1 - plan.output_spread))
    assert all(max(2, lo) <= x <= plan.max_new_tokens for x in a)
    assert (replace(plan, output_spread=0.0).output_lengths(5) == [plan.max_new_tokens] * 5)


def test_repeat_fits_keeps_time_for_the_calibration_repeats_after_it():
    """On a slow machine the budget cuts held-out repeats before the calibration's last
    round: a held-out block fits only if the calibration repeats after it (not skipped) fit
    too; a calibration block needs only its own time; first-round walls set the costs."""
    from psdlab.validation.demo.measurement_plan import block_of, repeat_fits
    plan = default_plan()
    runs = plan.runs
    walls = {r.config: 10.0 for r in runs}
    cal_late = [j for j, r in enumerate(runs) if r.role == "calibrate" and r.rep > 1]
    held = [j for j, r in enumerate(runs) if r.role == "validate" and r.rep > 1
            and j < min(cal_late)]
    assert cal_late and held
    i = held[-1]
    own = 10.0 * len(block_of(runs, i))
    later_cal = 10.0 * sum(1 for j in cal_late if j > i)
    assert later_cal > 0
    assert repeat_fits(runs, i, walls, own + later_cal)
    assert not repeat_fits(runs, i, walls, own + later_cal - 1.0)
    # once those calibration repeats are skipped, the held-out block needs only its own time
    skipped = {runs[j].name for j in cal_late}
    assert repeat_fits(runs, i, walls, own, skipped)
    c = cal_late[0]
    assert repeat_fits(runs, c, walls, 10.0 * len(block_of(runs, c)))
    assert not repeat_fits(runs, c, walls, 10.0 * len(block_of(runs, c)) - 1.0)
