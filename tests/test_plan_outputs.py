"""`psdlab plan`'s backends (local), failures (retried once, then one line and nothing written),
its figure, its report sections and vLLM's k table (without Ray: tests/test_plan_ray.py)."""
from __future__ import annotations

import csv
import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_util import FAULTY, attempts, fault_env, small_plan

from psdlab.cli import main
from psdlab.sim.plan_figure import figure_data, make_figure
from psdlab.sim.sweep_backends import FAULT_ENV
from psdlab.sim.vllm_k_table import k_table


@pytest.fixture(scope="module")
def plan_run(tmp_path_factory):
    """One plan (one process), its JSON output and files."""
    tmp = tmp_path_factory.mktemp("plan")
    cfg = small_plan(tmp)
    out = tmp / "out"
    out.mkdir()
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["plan", str(cfg), "--csv", str(out / "p.csv"), "--json",
                   "--vllm-k-table", str(out / "k.json")])
    assert rc == 0
    doc = json.loads(buf.getvalue())
    doc["by_name"] = {s["name"]: s["data"] for s in doc["sections"]}
    return tmp, cfg, out, doc


def _files(directory):
    return sorted(p.name for p in directory.iterdir())


def test_outputs_and_report_sections(plan_run):
    _, _, out, doc = plan_run
    assert _files(out) == ["k.json", "p.csv", "p.png"]
    png = (out / "p.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with open(out / "p.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(doc["rows"])
    assert [s["name"] for s in doc["sections"]] == ["pareto", "best_per_load", "vllm_k_table",
                                                   "inputs", "answer"]
    # best per load: per m, each mode's best is its highest rate; the winner the best per device
    rows = doc["rows"]
    for level in doc["by_name"]["best_per_load"]:
        for b in level["per_mode"]:
            same = [r for r in rows if r["m"] == level["m"] and r["mode"] == b["mode"]]
            assert b["max_rate_req_s"] == max(r["max_rate_req_s"] for r in same)
        assert level["winner"]["rate_per_device"] == max(
            b["rate_per_device"] for b in level["per_mode"])


def test_local_processes_give_the_same_csv(plan_run, tmp_path):
    _, cfg, out, _ = plan_run
    assert main(["plan", str(cfg), "--csv", str(tmp_path / "p.csv"), "--jobs", "2",
                 "--no-png"]) == 0
    assert (tmp_path / "p.csv").read_bytes() == (out / "p.csv").read_bytes()
    assert _files(tmp_path) == ["p.csv"]


def test_a_failure_is_retried_once(plan_run, tmp_path, monkeypatch):
    _, cfg, out, _ = plan_run
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, fault_env(marks, fail=1))
    dest = tmp_path / "o"
    dest.mkdir()
    assert main(["plan", str(cfg), "--csv", str(dest / "p.csv")]) == 0
    assert attempts(marks) == 2
    assert (dest / "p.csv").read_bytes() == (out / "p.csv").read_bytes()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_second_failure_is_one_line_and_nothing_is_written(plan_run, tmp_path, monkeypatch,
                                                             capsys, jobs):
    _, cfg, _, _ = plan_run
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, fault_env(marks, fail=5))
    dest = tmp_path / "o"
    dest.mkdir()
    rc = main(["plan", str(cfg), "--csv", str(dest / "p.csv"), "--jobs", jobs,
               "--vllm-k-table", str(dest / "k.json")])
    err = capsys.readouterr().err
    assert rc == 2 and attempts(marks) == 2
    assert err.count("\n") == 1 and FAULTY in err and "injected fault" in err
    assert _files(dest) == []


def test_ray_missing_is_one_line(plan_run, tmp_path, monkeypatch, capsys):
    _, cfg, _, _ = plan_run
    monkeypatch.setitem(sys.modules, "ray", None)       # `import ray` raises ImportError
    assert main(["plan", str(cfg), "--csv", str(tmp_path / "p.csv"), "--backend", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "psdlab[ray]" in err
    assert _files(tmp_path) == []


@pytest.mark.parametrize("argv, field", [
    (["--address", "auto"], "--address"),
    (["--k-table-drafter", "fast"], "--k-table-drafter"),
    (["--vllm-k-table", "K.json", "--k-table-drafter", "nope"], "--k-table-drafter"),
])
def test_bad_options_are_one_line(plan_run, tmp_path, capsys, argv, field):
    _, cfg, _, _ = plan_run
    argv = [a.replace("K.json", str(tmp_path / "k.json")) for a in argv]
    assert main(["plan", str(cfg), "--csv", str(tmp_path / "p.csv"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err
    assert _files(tmp_path) == []


def test_figure_draws_every_row_and_joins_the_pareto_set(plan_run):
    rows = plan_run[3]["rows"]
    data = figure_data(rows)
    assert sum(len(p) for p in data["modes"].values()) == len(rows)
    # the Pareto set: no row has as many or more devices' worth of rate for fewer devices
    front = data["pareto"]
    front = [tuple(p) for p in front]
    assert front == sorted({(r["devices"], r["total_rate_req_s"]) for r in rows
                            if r["pareto"]})
    for r in rows:
        dominated = any(d <= r["devices"] and rate >= r["total_rate_req_s"]
                        and (d, rate) != (r["devices"], r["total_rate_req_s"])
                        for d, rate in front)
        assert r["pareto"] == (not dominated)
    fig = make_figure(rows, "ttft_p99 <= 1 s", "Poisson")
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == "pareto"]
    assert line.get_xydata().tolist() == [list(p) for p in front]
    for mode, pts in data["modes"].items():
        (coll,) = [c for c in ax.collections if c.get_gid() == f"mode:{mode}"]
        assert coll.get_offsets().tolist() == pts
    assert "ttft_p99 <= 1 s" in ax.get_title()


def test_k_table_follows_from_the_rows(plan_run):
    _, _, out, doc = plan_run
    rows = doc["rows"]
    conf = json.loads((out / "k.json").read_text())
    assert conf == doc["by_name"]["vllm_k_table"]["speculative_config"]
    drafter = doc["by_name"]["vllm_k_table"]["drafter"]
    # the default drafter: that of the best sd row
    sd = [r for r in rows if r["mode"] == "sd"]
    assert drafter == max(sd, key=lambda r: r["max_rate_req_s"])["drafter"]
    sched = conf["num_speculative_tokens_per_batch_size"]
    for m in (2, 8):
        cands = {r["k"]: r["max_rate_req_s"] for r in sd if r["m"] == m
                 and r["drafter"] == drafter}
        cands[0] = next(r["max_rate_req_s"] for r in rows if r["mode"] == "ar" and r["m"] == m)
        (k,) = [k for lo, hi, k in sched if lo <= m <= hi]
        assert cands[k] == max(cands.values())
    assert conf["num_speculative_tokens"] == max(k for _, _, k in sched) > 0


def _row(mode, k, m, rate, drafter="d"):
    return {"mode": mode, "k": k, "m": m, "drafter": drafter if mode != "ar" else "",
            "max_rate_req_s": rate, "capacity_req_s": 2 * rate}


def test_k_table_turns_speculation_off_where_ar_wins():
    rows = [_row("ar", 0, 4, 1.0), _row("sd", 2, 4, 2.0), _row("sd", 4, 4, 3.0),
            _row("ar", 0, 16, 9.0), _row("sd", 2, 16, 7.0), _row("sd", 4, 16, 5.0),
            _row("ar", 0, 64, 30.0), _row("sd", 2, 64, 10.0), _row("sd", 4, 64, 10.0)]
    t = k_table(rows)
    assert t.speculative_config() == {"num_speculative_tokens": 4,
                                      "num_speculative_tokens_per_batch_size":
                                          [[1, 4, 4], [5, 64, 0]]}
    no_ar = k_table([r for r in rows if r["mode"] == "sd"])
    # ties go to the smaller k; neighbours with the same k merge
    assert no_ar.schedule() == [[1, 4, 4], [5, 64, 2]]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(1, 512), st.lists(st.floats(0.01, 100.0), min_size=4,
                                                       max_size=4), min_size=1, max_size=6))
def test_k_table_schedule_is_valid_for_vllm(table):
    """vLLM's rules (vllm/v1/spec_decode/dynamic/utils.py): sorted, non-overlapping inclusive
    ranges from 1; and each swept m's range holds its best k."""
    ks = (0, 1, 2, 4)
    rows = [_row("ar" if k == 0 else "sd", k, m, rates[i])
            for m, rates in table.items() for i, k in enumerate(ks)]
    t = k_table(rows)
    sched = t.schedule()
    assert sched[0][0] == 1 and sched[-1][1] == max(table)
    assert all(lo <= hi for lo, hi, _ in sched)
    for a, b in zip(sched, sched[1:]):
        assert b[0] == a[1] + 1 and b[2] != a[2]
    for m, rates in table.items():
        (k,) = [k for lo, hi, k in sched if lo <= m <= hi]
        best = max(rates)
        assert rates[ks.index(k)] == best and all(r < best for r in rates[:ks.index(k)])
    assert t.speculative_config()["num_speculative_tokens"] >= max(k for *_, k in sched)


def test_outputs_are_written_all_or_none(tmp_path):
    from psdlab.analysis.atomic_write import write_all

    def broken(path):
        with open(path, "w") as fh:
            fh.write("half")
        raise OSError("disk full")

    def fine(path):
        with open(path, "w") as fh:
            fh.write("ok")

    with pytest.raises(OSError, match="disk full"):
        write_all({str(tmp_path / "a.csv"): fine, str(tmp_path / "b.png"): broken})
    assert _files(tmp_path) == []
    write_all({str(tmp_path / "a.csv"): fine, str(tmp_path / "b.png"): fine})
    assert _files(tmp_path) == ["a.csv", "b.png"]


def test_sim_imports_without_ray():
    """Ray is imported only inside the ray backend: the simulator and the plan's modules load
    (and the local backend runs) in a process where `import ray` fails."""
    import subprocess
    code = ("import sys; sys.modules['ray'] = None\n"
            "import psdlab.sim.capacity, psdlab.sim.sweep_backends, psdlab.sim.plan_report\n"
            "import psdlab.sim.plan_figure, psdlab.sim.vllm_k_table, psdlab.commands.plan\n"
            "from psdlab.sim.sweep_backends import run_tasks\n"
            "assert run_tasks('local', divmod, [(7, 2)], ['t']) == [(3, 1)]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plan_says_what_its_figures_rest_on(tmp_path):
    """The plan's last section lists every input with its basis: the example's passes rest on
    a preset fitted on the L40, its acceptance is assumed, PSD's contention the separate-GPU
    default; a fitted target whose model file came from a co-run probe says 'probed'."""
    import dataclasses

    from psdlab.analysis.toml_reader import tomllib
    from psdlab.sim.capacity import parse_plan
    from psdlab.sim.plan_inputs import plan_inputs
    from psdlab.sim.sim_config import load_config
    cfg = load_config("sim/configs/plan_example.toml")
    with open("sim/configs/plan_example.toml", "rb") as fh:
        spec = parse_plan(tomllib.load(fh)["plan"], cfg)
    got = {x.term: x for x in plan_inputs(cfg, spec.drafters, spec.modes)}
    assert got["target passes"].basis == "preset" and "fitted on this part" in \
        got["target passes"].value
    assert got["acceptance (qwen3-0.6b)"].basis == "assumed"
    assert got["contention of overlapped passes"].basis == "assumed"
    assert "'gpus'" in got["contention of overlapped passes"].value
    assert "contention of overlapped passes" not in {
        x.term for x in plan_inputs(cfg, spec.drafters, ("ar", "sd"))}
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"meta": {"contention": {
        "source": "probe", "target": 0.02, "drafter": 0.05, "why": "co-run probe"}}}))
    import types                # the fields plan_inputs reads; a real fitted target needs a
    fitted = types.SimpleNamespace(**{f.name: getattr(cfg, f.name)     # real model file
                                      for f in dataclasses.fields(cfg)})
    fitted.target = dataclasses.replace(
        cfg.target, cost={"name": "fitted", "path": str(model), "role": "target"})
    got = {x.term: x for x in plan_inputs(fitted, spec.drafters, spec.modes)}
    assert got["target passes"].basis == "measured"
    assert got["contention of overlapped passes"].basis == "probed"
