"""Workloads and length distributions (sim/workloads.py, sim/lengths.py)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.lengths import make_length, sharegpt_like_lengths
from psdlab.sim.workloads import RequestSet, make_workload, read_requests

N = 100_000


def gen(spec, n=N, seed=0):
    return make_workload(spec).generate(np.random.default_rng(seed), n)


def test_offline_all_at_zero_with_fixed_lengths():
    r = gen({"name": "offline", "prompt": {"name": "fixed", "value": 128},
             "output": {"name": "fixed", "value": 256}}, n=1000)
    assert len(r) == 1000 and (r.arrival == 0).all()
    assert (r.prompt_len == 128).all() and (r.output_len == 256).all()
    assert r.total_output_tokens == 256_000
    default = gen({"name": "offline"}, n=3)
    assert default.output_len.tolist() == [256, 256, 256]


@pytest.mark.parametrize("spec, cv", [({"name": "poisson", "rate": 20.0}, 1.0),
                                      ({"name": "gamma", "rate": 5.0, "cv": 0.5}, 0.5),
                                      ({"name": "gamma", "rate": 50.0, "cv": 3.0}, 3.0)])
def test_arrival_rate_and_cv(spec, cv):
    r = gen({**spec, "start": 2.0})
    gaps = np.diff(np.concatenate([[2.0], r.arrival]))
    rate = spec["rate"]
    assert (gaps >= 0).all() and r.arrival[0] > 2.0
    assert abs(gaps.mean() - 1 / rate) < 5 * cv / rate / math.sqrt(N)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
    # the count in a window far from the start has mean rate * window
    assert (r.arrival < 2.0 + 1000 / rate).sum() == pytest.approx(1000, rel=0.25)


def test_lognormal_mean_median_and_clipping():
    dist = make_length({"name": "lognormal", "mean": 300, "median": 200})
    x = dist.sample(np.random.default_rng(4), 400_000)
    assert np.median(x) == pytest.approx(200, abs=2)
    assert x.mean() == pytest.approx(300, rel=0.02)
    assert dist.sigma == pytest.approx(math.sqrt(2 * math.log(1.5)))
    clipped = make_length({"name": "lognormal", "mean": 300, "median": 200, "max": 400, "min": 50})
    y = clipped.sample(np.random.default_rng(4), 400_000)
    assert y.min() >= 50 and y.max() == 400 and (y == 400).mean() > 0.05
    assert y.mean() == pytest.approx(clipped.mean_clipped, rel=0.01)
    assert clipped.mean_clipped < 300
    point = make_length({"name": "lognormal", "mean": 64, "median": 64})
    assert (point.sample(np.random.default_rng(0), 10) == 64).all()


def test_empirical_and_uniform_resample_only_given_values():
    emp = make_length({"name": "empirical", "values": [3, 3, 10, 700]})
    x = emp.sample(np.random.default_rng(8), 40_000)
    assert set(np.unique(x)) == {3, 10, 700}
    assert (x == 3).mean() == pytest.approx(0.5, abs=0.02)
    uni = make_length({"name": "uniform", "low": 5, "high": 7}).sample(
        np.random.default_rng(1), 3000)
    assert set(np.unique(uni)) == {5, 6, 7}


def test_sharegpt_like_preset_is_documented_and_bounded():
    prompt, output = sharegpt_like_lengths()
    assert prompt == {"name": "lognormal", "mean": 300, "median": 200, "max": 1024}
    assert output["max"] == 1024 and output["mean"] > output["median"]
    r = gen({"name": "poisson", "rate": 10, "prompt": prompt, "output": output}, n=20_000)
    assert (r.prompt_len + r.output_len <= 2048).all()
    assert np.median(r.prompt_len) == pytest.approx(200, rel=0.05)


def test_same_seed_same_requests_and_seed_matters():
    prompt, output = sharegpt_like_lengths()
    spec = {"name": "gamma", "rate": 3, "cv": 2, "prompt": prompt, "output": output}
    a, b, c = gen(spec, 500, 7), gen(spec, 500, 7), gen(spec, 500, 8)
    for f in ("arrival", "prompt_len", "output_len"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
        assert not np.array_equal(getattr(a, f), getattr(c, f))


def test_request_set_is_read_only_and_validated():
    r = RequestSet([0.0, 1.0], [5, 6], [7, 8])
    with pytest.raises(ValueError):
        r.arrival[0] = 3.0
    with pytest.raises(AttributeError):       # a frozen dataclass (FrozenInstanceError)
        r.arrival = np.zeros(2)
    for args, field in [(([1.0, 0.5], [1, 1], [1, 1]), "arrival"),
                        (([0.0], [0], [1]), "prompt_len"),
                        (([0.0], [1], [1, 2]), "output_len"),
                        (([0.0], [1.5], [1]), "prompt_len")]:
        with pytest.raises(ValueError, match=f"^RequestSet.{field}"):
            RequestSet(*args)


def test_replay_csv_and_jsonl(tmp_path):
    csv_path = tmp_path / "w.csv"
    csv_path.write_text("id,arrival,prompt_len,output_len\na,0.5,10,20\nb,0.1,11,21\nc,2,12,22\n")
    r = make_workload({"name": "replay", "path": str(csv_path)}).generate(
        np.random.default_rng(0), None)
    assert r.arrival.tolist() == [0.1, 0.5, 2.0] and r.prompt_len.tolist() == [11, 10, 12]
    assert len(make_workload({"name": "replay", "path": str(csv_path)}).generate(None, 2)) == 2
    jl = tmp_path / "w.jsonl"
    jl.write_text('{"arrival": 0, "prompt_len": 3, "output_len": 4}\n\n'
                  '{"arrival": 1.5, "prompt_len": 5, "output_len": 6, "extra": 1}\n')
    r = read_requests(jl)
    assert r.output_len.tolist() == [4, 6] and len(r) == 2
    with pytest.raises(ValueError, match="^n:"):
        make_workload({"name": "replay", "path": str(jl)}).generate(None, 3)


@pytest.mark.parametrize("name, text, where", [
    ("w.csv", "arrival,prompt_len,output_len\n0,1,2\n0.5,x,3\n", r"w\.csv:3: field 'prompt_len'"),
    ("w.csv", "arrival,prompt_len\n0,1\n", r"w\.csv:1: header: field 'output_len'"),
    ("w.csv", "arrival,prompt_len,output_len\n0,1,2\n-1,1,2\n", r"w\.csv:3: field 'arrival'"),
    ("w.csv", "arrival,prompt_len,output_len\n0,1,2.5\n", r"w\.csv:2: field 'output_len'"),
    ("w.csv", "arrival,prompt_len,output_len\n0,1,\n", r"w\.csv:2: field 'output_len': missing"),
    ("w.jsonl", '{"arrival": 0, "prompt_len": 1, "output_len": 1}\n{"arrival": 0,\n',
     r"w\.jsonl:2: not valid JSON"),
    ("w.jsonl", '{"arrival": 0, "prompt_len": 0, "output_len": 1}\n',
     r"w\.jsonl:1: field 'prompt_len'"),
    ("w.jsonl", '[1, 2, 3]\n', r"w\.jsonl:1: expected a JSON object"),
    ("w.jsonl", '{"arrival": true, "prompt_len": 1, "output_len": 1}\n',
     r"w\.jsonl:1: field 'arrival'"),
    ("w.txt", "", r"workload\.path: .*\.csv or \.jsonl"),
])
def test_replay_errors_name_file_line_and_field(tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=where) as err:
        make_workload({"name": "replay", "path": str(path)})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec, field", [
    ({"name": "poisson"}, "workload.rate"),
    ({"name": "poisson", "rate": 0}, "workload.rate"),
    ({"name": "gamma", "rate": 1}, "workload.cv"),
    ({"name": "poisson", "rate": 1, "cv": 2}, "workload.cv"),
    ({"name": "offline", "prompt": {"name": "fixed", "value": 0}}, "workload.prompt.value"),
    ({"name": "offline", "output": {"name": "lognormal", "mean": 100, "median": 200}},
     "workload.output.mean"),
    ({"name": "offline", "output": {"name": "lognormal", "mean": 300, "median": 200,
                                    "p99": 1}}, "workload.output.p99"),
    ({"name": "offline", "prompt": {"name": "zipf"}}, "workload.prompt.name"),
    ({"name": "offline", "prompt": {"name": "empirical", "values": []}}, "workload.prompt.values"),
    ({"name": "burst"}, "workload.name"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        make_workload(spec)


def test_n_required_for_generated_workloads():
    with pytest.raises(ValueError, match="^n:"):
        make_workload({"name": "offline"}).generate(np.random.default_rng(0), None)


length_specs = st.one_of(
    st.builds(lambda v: {"name": "fixed", "value": v}, st.integers(1, 4096)),
    st.builds(lambda med, r, mx: {"name": "lognormal", "median": med, "mean": med * r, "max": mx},
              st.floats(1, 1000), st.floats(1, 3), st.integers(1, 4096)),
    st.builds(lambda vals: {"name": "empirical", "values": vals},
              st.lists(st.integers(1, 5000), min_size=1, max_size=20)))


@settings(deadline=None, max_examples=50)
@given(kind=st.sampled_from(["offline", "poisson", "gamma"]), rate=st.floats(0.01, 1000),
       cv=st.floats(0.1, 5), prompt=length_specs, output=length_specs, n=st.integers(0, 300),
       seed=st.integers(0, 2 ** 32 - 1))
def test_generated_requests_satisfy_invariants(kind, rate, cv, prompt, output, n, seed):
    spec = {"name": kind, "prompt": prompt, "output": output}
    if kind != "offline":
        spec["rate"] = rate
    if kind == "gamma":
        spec["cv"] = cv
    r = gen(spec, n, seed)
    assert len(r) == n == r.prompt_len.size == r.output_len.size
    assert (np.diff(r.arrival) >= 0).all() and (r.arrival >= 0).all()
    assert (r.prompt_len >= 1).all() and (r.output_len >= 1).all()
    for f, s in (("prompt_len", prompt), ("output_len", output)):
        if s["name"] == "lognormal":
            assert (getattr(r, f) <= s["max"]).all()
        if s["name"] == "empirical":
            assert set(getattr(r, f).tolist()) <= set(s["values"])
    json.dumps(make_workload(spec).describe())


# ---------------------------------------------------------------------------- file workloads

FORMATS_DATA = Path(__file__).parent / "data" / "formats"


def test_a_file_workload_takes_the_files_arrivals_and_lengths():
    from psdlab.analysis.formats.detect import read_workload
    from psdlab.sim.workloads import make_workload
    path = FORMATS_DATA / "mooncake_trace.jsonl"
    recs = read_workload(str(path)).records
    rows = make_workload({"name": "file", "path": str(path)}).generate(None, None)
    assert len(rows) == len(recs)
    assert np.allclose(rows.arrival, [r.arrival_s for r in recs])
    assert rows.prompt_len.tolist() == [max(1, r.input_len) for r in recs]
    assert rows.output_len.tolist() == [max(1, r.output_len) for r in recs]
    fast = make_workload({"name": "file", "path": str(path),
                          "rate_scale": 4.0}).generate(None, None)
    assert np.allclose(fast.arrival, rows.arrival / 4.0)
    t = float(rows.arrival[len(rows) // 2])
    late = make_workload({"name": "file", "path": str(path), "start": t}).generate(None, None)
    assert late.arrival[0] == 0.0 and len(late) == int((rows.arrival >= t).sum())
    with pytest.raises(ValueError, match="workload.end"):
        make_workload({"name": "file", "path": str(path), "start": 5.0, "end": 1.0})
    with pytest.raises(ValueError, match="unknown field"):
        make_workload({"name": "file", "path": str(path), "rate": 1.0})


def test_simulate_and_plan_take_a_trace_file_as_the_workload(tmp_path):
    """`psdlab simulate --workload` serves every request of the file; `psdlab plan --workload`
    keeps the file's lengths and only scales its arrivals; bad input is one line, exit 2."""
    import json
    import subprocess
    import sys
    azure = FORMATS_DATA / "azure_code_2023.csv"
    cfg = Path(__file__).parents[1] / "sim" / "configs" / "psd_offline.toml"
    run = [sys.executable, "-m", "psdlab"]
    out = subprocess.run(run + ["simulate", str(cfg), "--workload", str(azure), "--json",
                                "--trace", str(tmp_path / "t.jsonl")],
                         capture_output=True, text=True, check=True)
    from psdlab.analysis.formats.detect import read_workload
    n = len(read_workload(str(azure)).records)
    assert json.loads(out.stdout)["requests"] == n
    bad = subprocess.run(run + ["simulate", str(cfg), "--workload", str(cfg)],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    from psdlab.sim.capacity import _workloads, parse_plan
    from psdlab.sim.sim_config import load_config
    plan_cfg = load_config(str(Path(__file__).parents[1] / "sim" / "configs" /
                               "plan_example.toml"))
    plan_cfg = plan_cfg.replace(workload={"name": "file", "path": str(azure)})
    import tomllib
    raw = tomllib.loads((Path(__file__).parents[1] / "sim" / "configs" /
                         "plan_example.toml").read_text())
    spec = parse_plan(raw["plan"], plan_cfg)
    offline, at_rate, n = _workloads(plan_cfg, spec)
    from psdlab.sim.workloads import make_workload
    rows = make_workload(at_rate(2.0)).generate(None, n)
    assert (len(rows) - 1) / (rows.arrival[-1] - rows.arrival[0]) == pytest.approx(2.0)
    base = make_workload({"name": "file", "path": str(azure)}).generate(None, n)
    assert rows.prompt_len.tolist() == base.prompt_len.tolist()
    assert make_workload(offline).generate(None, n).arrival[-1] < 1e-3


def test_replay_rows_inline_equal_the_file(tmp_path):
    """A replay's rows given inline are the same requests as the same rows in a CSV (what
    validation.compare hands the simulator for a measured trace, no file between them); a bad
    row is a one-line error naming its index and field, and path and rows are exclusive."""
    from psdlab.sim.workloads import inline_requests, make_workload, read_requests
    rows = [(0.5, 7, 3, "b"), (0.0, 4, 2, "a"), (0.5, 9, 1, "c")]
    path = tmp_path / "w.csv"
    path.write_text("arrival,prompt_len,output_len,key\n"
                    + "".join(f"{a!r},{p},{o},{k}\n" for a, p, o, k in rows))
    a, b = inline_requests(rows), read_requests(path)
    for f in ("arrival", "prompt_len", "output_len"):
        assert list(getattr(a, f)) == list(getattr(b, f))
    assert a.keys == b.keys == ("a", "b", "c")
    with pytest.raises(ValueError, match=r"workload.rows\[1\]: field 'output_len'"):
        inline_requests([(0.0, 4, 2), (0.1, 4, 0)])
    with pytest.raises(ValueError, match="one of the two"):
        make_workload({"name": "replay", "rows": rows, "path": str(path)})
