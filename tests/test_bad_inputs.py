"""Faults and bad inputs across every `psdlab` subcommand (issue 52 items 3 and 5).

Each case runs the real command line in-process (``psdlab.cli.main``) from an empty working
folder and checks the one error path: exit code 2, exactly one non-empty line on stderr
(``psdlab CMD: error: ...``, naming the option or field), no traceback, nothing written that was
not asked for (the working folder stays empty, the inputs unchanged) and, where a run had
already produced data, that output kept.  The runtime commands' cases (run, bench-*, frontier,
demo, check-vllm) fail before any model loads: each names a bad option together with a target
model folder that does not exist, so an error about the option shows the check came first.

A property test cuts a real simulated trace at random byte offsets and checks that every
reader (metrics, timeline, validate's and calibrate's) either reads it with one warning naming
what it left out or refuses it in one line."""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
CFG = str(ROOT / "sim" / "configs" / "psd_offline.toml")
ADAPTIVE = str(ROOT / "sim" / "configs" / "adaptive_setting2.toml")
PLAN = str(ROOT / "sim" / "configs" / "plan_example.toml")
NO_MODEL = "/nonexistent/psdlab-model"      # a model folder that is not there
MODELS = f"--target {NO_MODEL} --draft {NO_MODEL}"


# ---------------------------------------------------------------------------- fixtures

def _cli(argv: Sequence[str | Path], capsys) -> tuple[int, str, str]:
    """Run ``psdlab ARGV`` in-process as the console script does (its own warning display)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _toml_with(base: str, old: str, new: str) -> str:
    text = Path(base).read_text()
    assert old in text, old
    return text.replace(old, new)


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """Inputs the cases read: real simulated traces, a model file calibrated on them, bad
    configs and files, and ``afile``, a regular file that output paths try to go through."""
    d = tmp_path_factory.mktemp("inputs")
    here = os.getcwd()
    os.chdir(d)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in (2, 4):
                assert main(["simulate", CFG, "--requests", "12", "--k", str(k), "--m", "4",
                             "--trace", f"k{k}.jsonl", "--json"]) == 0
            assert main(["calibrate", "k2.jsonl", "k4.jsonl", "-o", "model.json",
                         "--no-acceptance-selection", "--json"]) == 0
    finally:
        os.chdir(here)
    (d / "afile").write_text("")
    (d / "garbage.jsonl").write_text("this is not json\n")
    (d / "binary.jsonl").write_bytes(b"\xff\xfe\x00\x01" * 64)
    (d / "empty.jsonl").write_text("")
    (d / "tied_false.toml").write_text(_toml_with(
        CFG, 'cost = { name = "gpu", model = "qwen3-1.7b",',
        'cost = { name = "gpu", model = { layers = 28, hidden = 2048, heads = 16, '
        'kv_heads = 8, head_dim = 128, intermediate = 6144, vocab = 151936, '
        'tied_embeddings = "false" },'))
    (d / "output0.toml").write_text(_toml_with(
        CFG, 'output = { name = "fixed", value = 256 }', 'output = { name = "fixed", value = 0 }'))
    (d / "mooncake0.jsonl").write_text(
        "".join(json.dumps({"timestamp": t, "input_length": 10, "output_length": n}) + "\n"
                for t, n in ((0, 5), (500, 0), (900, 3))))
    (d / "modes_str.toml").write_text(_toml_with(PLAN, 'modes = ["ar", "sd", "psd"]',
                                                 'modes = "psd"'))
    (d / "k_big.toml").write_text(_toml_with(PLAN, 'k = [2, 4]', 'k = [1000000]'))
    (d / "prompts2.jsonl").write_text(
        "".join(json.dumps({"id": f"p{i}", "style": "chat", "text": f"Say {i}."}) + "\n"
                for i in range(2)))
    (d / "bad-config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    (d / "cut_header.jsonl").write_bytes((d / "k4.jsonl").read_bytes()[:200])
    return d


def _listing(d: Path) -> dict[str, int]:
    return {str(p.relative_to(d)): p.stat().st_size for p in sorted(d.rglob("*"))}


# ---------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Case:
    """One bad invocation: its arguments (``{fx}``: the inputs folder, ``{afile}``: a regular
    file), a piece of the one error line (the option or field it must name) and the outputs a
    run that had already produced data keeps."""
    argv: tuple[str, ...]
    says: str
    keeps: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return self.argv[0]


def C(line: str, says: str, keeps: tuple[str, ...] = ()) -> Case:
    return Case(tuple(line.split()), says, keeps)


CASES: list[Case] = [
    # metrics
    C("metrics {fx}/missing.jsonl", "No such file"),
    C("metrics {fx}/k4.jsonl --steps-fraction 0", "--steps-fraction"),
    C("metrics {fx}/k4.jsonl --steps-fraction nan", "--steps-fraction"),
    C("metrics {fx}", "Is a directory"),
    C("metrics {fx}/binary.jsonl", "UTF-8"),
    C("metrics {fx}/garbage.jsonl", "not valid JSON"),
    C("metrics {fx}/empty.jsonl", "empty trace"),
    C("metrics {fx}/cut_header.jsonl", "not valid JSON"),
    C("metrics {fx}/k4.jsonl --steps-fraction", "--steps-fraction"),
    # timeline
    C("timeline {fx}/k4.jsonl", "-o/--output"),
    C("timeline {fx}/k4.jsonl -o {afile}/x.json", "--output: Not a directory"),
    C("timeline {fx}/missing.jsonl -o x.json", "No such file"),
    C("timeline {fx}/garbage.jsonl -o x.json", "not valid JSON"),
    C("timeline {fx}/cut_header.jsonl -o x.json", "not valid JSON"),
    C("timeline {fx}/k4.jsonl -o {fx}", "--output: Is a directory"),
    # calibrate
    C("calibrate {fx}/k2.jsonl {fx}/k4.jsonl -o m.json --bootstrap -5", "--bootstrap"),
    C("calibrate {fx}/k2.jsonl {fx}/k4.jsonl -o m.json --bootstrap 20000", "--bootstrap"),
    C("calibrate {fx}/k2.jsonl {fx}/k4.jsonl -o {afile}/m.json --no-acceptance-selection",
      "--output: Not a directory"),
    C("calibrate {fx}/k2.jsonl -o m.json --holdout 1.5", "holdout"),
    C("calibrate {fx}/missing.jsonl -o m.json", "No such file"),
    C("calibrate {fx}/garbage.jsonl -o m.json", "garbage.jsonl"),
    C("calibrate {fx}/k2.jsonl", "-o/--output"),
    C("calibrate {fx}/k2.jsonl -o m.json --seed abc", "--seed"),
    # theory
    C("theory --alpha-v abc", "--alpha-v"),
    C("theory --alpha-v -1", "--alpha-v"),
    C("theory --alpha-v 0", "--alpha-v"),
    C("theory --alpha-v nan", "--alpha-v"),
    C("theory --threshold nan", "--threshold"),
    C("theory --threshold 0.9", "--threshold"),
    C("theory --bogus", "unrecognized arguments"),
    # simulate
    C("simulate " + CFG + " --trace {afile}/t.jsonl", "--trace: Not a directory"),
    C("simulate " + CFG + " --mode adaptive", "--mode"),
    C("simulate " + CFG + " --requests 0", "requests"),
    C("simulate " + CFG + " --k -1", "server.k"),
    C("simulate " + CFG + " --m 100000", "server.m"),
    C("simulate {fx}/missing.toml", "No such file"),
    C("simulate {fx}/tied_false.toml --trace t.jsonl", "tied_embeddings"),
    C("simulate {fx}/output0.toml --trace t.jsonl", "output.value"),
    C("simulate " + CFG + " --workload {fx}/mooncake0.jsonl --trace t.jsonl", "output"),
    C("simulate " + CFG + " --trace t.jsonl --perfetto {afile}/p.json",
      "--perfetto: Not a directory", keeps=("t.jsonl",)),
    C("simulate " + CFG + " --requests abc", "--requests"),
    # bench-sim
    C("bench-sim --requests 0", "requests"),
    C("bench-sim --requests abc", "--requests"),
    C("bench-sim --load -1", "load"),
    C("bench-sim --load nan", "load"),
    C("bench-sim --path bogus", "--path"),
    # plan
    C("plan {fx}/missing.toml", "No such file"),
    C("plan " + PLAN + " --csv {afile}/p.csv --requests 10", "--csv: Not a directory"),
    C("plan " + PLAN + " --requests 0", "requests"),
    C("plan " + PLAN + " --jobs 0", "jobs"),
    C("plan " + PLAN + " --backend bogus", "--backend"),
    C("plan " + CFG, "plan"),
    # plan in one command (sim.quick_plan)
    C("plan", "--target and --gpu"),
    C("plan --target llama-3.3-70b", "--target and --gpu"),
    C("plan " + PLAN + " --target llama-3.3-70b", "--target: only without a config"),
    C("plan " + PLAN + " --tp 4", "--tp: only without a config"),
    C("plan --target bogus-model --gpu h100", "--target"),
    C("plan --target llama-3.3-70b --gpu bogus-gpu", "--gpu"),
    C("plan --target llama-3.3-70b --gpu h100 --tp 0", "--tp"),
    C("plan --target llama-3.3-70b --gpu h100 --drafter llama-3.2-1b --drafter-gpu bogus",
      "--drafter-gpu"),
    C("plan --target llama-3.3-70b --gpu h100 --drafter bogus-model", "--drafter"),
    C("plan --target llama-3.3-70b --gpu h100 --alpha 0.5", "--alpha"),
    C("plan --target llama-3.3-70b --gpu h100 --drafter llama-3.2-1b --alpha 1.5", "--alpha"),
    C("plan --target llama-3.3-70b --gpu h100 --slo tpot_p50", "--slo"),
    C("plan --target llama-3.3-70b --gpu h100 --slo tpot_p50=fast", "--slo.tpot_p50"),
    C("plan --target llama-3.3-70b --gpu h100 --slo tpot_p50=-5ms", "--slo.tpot_p50"),
    C("plan --target llama-3.3-70b --gpu h100 --tp 4 --slo speed_p50=5ms",
      "--slo (plan.slo.speed_p50)"),
    C("plan --target llama-3.3-70b --gpu h100 --tp 1", "--tp (target.cost.tp)"),
    C("plan --target llama-3.3-70b --gpu h100 --traffic {fx}/missing.json", "--traffic"),
    C("plan --target llama-3.3-70b --gpu h100 --rate 0", "--rate"),
    C("plan --target llama-3.3-70b --gpu h100 --engine bogus", "--engine"),
    C("plan --target {fx}/bad-config.json --gpu h100", "bad-config.json"),
    # simulate in one command
    C("simulate", "--target and --gpu"),
    C("simulate " + CFG + " --gpu h100", "--gpu: only without a config"),
    C("simulate --target llama-3.2-3b --gpu nope", "--gpu"),
    C("simulate --target llama-3.2-3b --gpu l4 --tp 0", "--tp"),
    C("simulate --target llama-3.2-3b --gpu l4 --rate -1", "--rate"),
    C("simulate --target llama-3.2-3b --gpu l4 --mode psd", "drafter"),
    C("simulate --target llama-3.2-3b --gpu l4 --rate 1 --workload {fx}/mooncake0.jsonl",
      "--rate"),
    # figs
    C("figs {afile}/out", "Not a directory"),
    C("figs out --only bogus", "--only"),
    C("figs out --seed abc", "--seed"),
    C("figs out --traces {fx}/missing", "--traces"),
    C("figs out --validation {fx}/missing.json", "--validation"),
    # validate
    C("validate {fx}/k4.jsonl --model {fx}/model.json --seeds 0", "--seeds"),
    C("validate {fx}/k4.jsonl --model {fx}/missing.json", "No such file"),
    C("validate {fx}/k4.jsonl --model {fx}/model.json --seeds 1 -o {afile}/rep",
      "Not a directory"),
    C("validate {fx}/missing.jsonl --model {fx}/model.json", "No such file"),
    C("validate {fx}/k4.jsonl --model {fx}/model.json --acceptance bogus", "acceptance"),
    C("validate {fx}/k4.jsonl", "--model"),
    C("validate {fx}/garbage.jsonl --model {fx}/model.json", "garbage.jsonl"),
    C("validate {fx}/k4.jsonl --model {fx}/k4.jsonl", "k4.jsonl"),
    # demo (each fails before any model loads)
    C("demo -o {afile}/rep " + MODELS, "Not a directory"),
    C("demo -o rep --prompts 0 " + MODELS, "prompts"),
    C("demo -o rep --repeats 0 " + MODELS, "repeats"),
    C("demo -o rep --max-new-tokens 0 " + MODELS, "max-new-tokens"),
    C("demo -o rep --controlled-alpha 2 " + MODELS, "alpha"),
    C("demo -o rep --time-budget -1 " + MODELS, "time-budget"),
    # cost
    C("cost --context nan", "--context"),
    C("cost --model qwen3-8b --hardware h100 --seqs 1 --tokens 1 --context 0 --out x.md",
      "--out"),
    C("cost --check --out {afile}/x.md", "--out: Not a directory"),
    C("cost --model qwen3-8b --hardware h100 --seqs 1 --tokens 1 --context 0 --tp 0", "tp"),
    C("cost --model bogus --hardware h100 --seqs 1 --tokens 1 --context 0", "bogus"),
    C("cost --model qwen3-8b --hardware h100 --seqs -1 --tokens 1 --context 0", "seqs"),
    C("cost --tokens abc", "--tokens"),
    # frontier (before any model loads)
    C("frontier -o out --k 0 " + MODELS, "k"),
    C("frontier -o out --batch 0 " + MODELS, "batch"),
    C("frontier -o out --depths abc " + MODELS, "--depths"),
    C("frontier -o out --rounds 0 " + MODELS, "rounds"),
    C("frontier -o {afile}/out " + MODELS, "Not a directory"),
    # policy
    C("policy " + ADAPTIVE + " --rates -1,abc", "--rates"),
    C("policy " + ADAPTIVE + " --rates=-1,abc", "--rates"),
    C("policy " + ADAPTIVE + " --rates=", "--rates"),
    C("policy " + ADAPTIVE + " --max-n 0", "max-n"),
    C("policy " + ADAPTIVE + " --m 0", "m"),
    C("policy " + ADAPTIVE + " --rates 1 --requests 20 -o {afile}/p.json",
      "--output: Not a directory"),
    C("policy {fx}/missing.toml", "No such file"),
    # bench-adaptive
    C("bench-adaptive", "-o"),
    C("bench-adaptive -o {afile}/out", "Not a directory"),
    C("bench-adaptive -o out --k 0", "k"),
    C("bench-adaptive -o out --m 0", "m"),
    C("bench-adaptive -o out --requests 0", "requests"),
    C("bench-adaptive -o out --max-new-tokens 0", "max-new-tokens"),
    # systems
    C("systems bogus", "invalid choice"),
    C("systems check -o {afile}/x.json", "--out: Not a directory"),
    C("systems gain -o x.json --quick --points {fx}/k4.jsonl", "--points"),
    C("systems check --points {fx}/missing.toml", "no such points file"),
    C("systems check --seed abc", "--seed"),
    C("systems check --seed -1", "--seed"),
    # check-vllm (before any server starts)
    C("check-vllm", "-o"),
    C("check-vllm -o out --rates abc", "--rates"),
    C("check-vllm -o out --ks 0", "ks"),
    C("check-vllm -o out --repeats 0", "repeats"),
    C("check-vllm -o out --bootstrap -5", "bootstrap"),
    # run (before any model loads)
    C("run --trace t.jsonl --batch 1000000000 --target " + NO_MODEL, "batch"),
    C("run --trace t.jsonl --num-prompts 0 --target " + NO_MODEL, "num_prompts"),
    C("run --trace t.jsonl --k 0 --target " + NO_MODEL, "k"),
    C("run --trace t.jsonl --mode bogus", "--mode"),
    C("run --batch 4", "--trace"),
    C("run --trace t.jsonl --temperature -1 --target " + NO_MODEL, "temperature"),
    C("run --trace t.jsonl --arrivals bogus --target " + NO_MODEL, "arrivals"),
    C("run --trace {afile}/t.jsonl --target " + NO_MODEL, "--trace: Not a directory"),
    C("run --trace t.jsonl --outputs {afile}/o.jsonl --target " + NO_MODEL,
      "--outputs: Not a directory"),
    C("run --trace t.jsonl --max-new-tokens 0 --target " + NO_MODEL, "max_new_tokens"),
    # bench-runtime (before any model loads)
    C("bench-runtime --k 0 --target " + NO_MODEL, "k"),
    C("bench-runtime --batch 0 --target " + NO_MODEL, "batch"),
    C("bench-runtime --rounds 0 --target " + NO_MODEL, "rounds"),
    C("bench-runtime --steps-fraction 2 --target " + NO_MODEL, "steps-fraction"),
    C("bench-runtime --trace-dir {afile}/d --target " + NO_MODEL, "Not a directory"),
    # bench-gpu (before any model loads)
    C("bench-gpu -o {afile}/out", "Not a directory"),
    C("bench-gpu -o out --k 0", "k"),
    C("bench-gpu -o out --batches abc", "--batches"),
    C("bench-gpu -o out --repeats 0", "repeats"),
    C("bench-gpu -o out --budget-s -1", "budget"),
    C("bench-gpu -o out --sections bogus", "sections"),
]


from psdlab.commands import COMMANDS  # noqa: E402

if "probe" in COMMANDS:                 # the co-run probe (before any model loads)
    CASES += [
        C("probe --batch 0 " + MODELS, "batch"),
        C("probe --batch 1000 " + MODELS, "batch"),
        C("probe --k abc " + MODELS, "--k"),
        C("probe --context 0 " + MODELS, "context"),
        C("probe --reps 1 " + MODELS, "reps"),
        C("probe -o {afile}/x.json " + MODELS, "--output: Not a directory"),
    ]
CASES += [C("plan {fx}/modes_str.toml --requests 10", "plan.modes: expected a list"),
          C("plan {fx}/k_big.toml --requests 10", "plan.k[0]")]


def _expand(case: Case, fx: Path) -> list[str]:
    return [a.format(fx=fx, afile=fx / "afile") for a in case.argv]


@pytest.mark.parametrize("case", CASES, ids=[" ".join(c.argv)[:70] for c in CASES])
def test_bad_input_is_one_line_with_exit_code_2(case, fx, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = _listing(fx)
    rc, _, err = _cli(_expand(case, fx), capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert rc == 2, (rc, err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"psdlab {case.command}: error: "), lines[0]
    assert case.says in lines[0], lines[0]
    assert "nan" not in lines[0].lower() or "nan" in " ".join(case.argv).lower()
    assert _listing(fx) == before, "an input changed"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.iterdir())
    assert left == sorted(case.keeps), f"written though not asked for: {left}"
    for kept in case.keeps:
        assert (tmp_path / kept).stat().st_size > 0


def test_the_table_covers_every_subcommand():
    per = {name: sum(c.command == name for c in CASES) for name in COMMANDS}
    assert all(n >= 5 for n in per.values()), per


# ---------------------------------------------------------------------------- outputs

def test_theory_json_writes_null_with_the_reason_never_nan(capsys):
    rc, out, err = _cli(["theory", "--alpha-v", "1e308,1", "--json"], capsys)
    assert rc == 0 and err == "", err                 # no overflow warnings either

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")
    doc = json.loads(out, parse_constant=refuse)
    big, one = doc["rows"]
    assert big["paper_bound"] is None and big["paper_saving_bound"] is None
    assert any("paper_bound" in why and "1e+308" in why for why in doc["nulls"])
    assert one["paper_bound"] is not None and one["paper_bound"] > 1


def test_finite_json_nulls_every_non_finite_number():
    from psdlab.analysis.json_out import finite_json
    obj = {"a": [1.0, float("nan")], "b": {"c": float("inf")}, "d": 2}
    doc = json.loads(finite_json(obj))
    assert doc["a"] == [1.0, None] and doc["b"] == {"c": None} and doc["d"] == 2
    assert len(doc["nulls"]) == 2 and "a[1]" in doc["nulls"][0] and "b.c" in doc["nulls"][1]
    plain = {"x": [1, 2.5], "y": "z"}
    assert finite_json(plain, sort_keys=True) == json.dumps(plain, sort_keys=True)


def test_metrics_columns_stay_apart_for_huge_latencies(fx, tmp_path, capsys):
    """A request finishing at 1e12 s: the table's cells keep a space between them."""
    lines = (fx / "k4.jsonl").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if '"type":"request"' in line)
    rec = json.loads(lines[last])
    rec["finish"] = 1e12
    lines[last] = json.dumps(rec)
    path = tmp_path / "late.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = _cli(["metrics", path], capsys)
    assert rc == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in ("ttft", "tpot", "e2e")}
    assert set(rows) == {"ttft", "tpot", "e2e"}
    assert all(len(cells) == 5 for cells in rows.values()), rows
    assert float(rows["e2e"][4]) > 1e14                 # p99 in ms, whole


def test_an_option_through_a_file_keeps_what_was_written(fx, tmp_path, monkeypatch, capsys):
    """simulate wrote its trace before the timeline failed: the trace stays, and it reads."""
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(["simulate", CFG, "--requests", "4", "--trace", "t.jsonl",
                       "--perfetto", fx / "afile" / "p.json"], capsys)
    assert rc == 2 and "--perfetto: Not a directory" in err
    from psdlab.analysis.trace import read_trace
    assert len(read_trace(tmp_path / "t.jsonl").requests) == 4


# ---------------------------------------------------------------------------- partial traces

def _read_all_ways(path: Path, capsys, tmp: Path) -> dict[str, tuple[int, str, str]]:
    """The trace through every reader: metrics, timeline, calibrate's (``read_inputs``) and
    validate's (``load_traces``), the last two as the commands call them."""
    from psdlab.analysis.trace import TraceFormatError
    from psdlab.validation.calibrate_files import read_inputs
    from psdlab.validation.importers import load_traces
    out = {"metrics": _cli(["metrics", path, "--json"], capsys),
           "timeline": _cli(["timeline", path, "-o", tmp / "tl.json"], capsys)}
    for name, read in (("calibrate", lambda: read_inputs([path]).traces[0]),
                       ("validate", lambda: load_traces(path)[0])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                trace = read()
            except TraceFormatError as exc:
                out[name] = (2, "", f"psdlab {name}: error: {exc}\n")
                continue
        said = "".join(f"psdlab {name}: warning: {w.message}\n" for w in caught)
        out[name] = (0, str(len(trace.requests)), said)
    return out


def _one_warning_or_one_error(rc: int, err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) <= 1, err
    if rc == 2:
        assert lines and lines[0].startswith(f"psdlab {command}: error: "), err
        return "refused"
    assert rc == 0, (rc, err)
    return "warned" if lines else "whole"


def test_an_interrupted_run_validates_on_its_finished_requests(fx, tmp_path, capsys):
    """The trace as a run stopped after its third finished request leaves it (the header
    declares 12): validate replays the 3 with one warning saying 9 were left out; metrics
    says 3 of 12; calibrate fits on it."""
    data = (fx / "k4.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    third = [i for i, line in enumerate(lines) if b'"type":"request"' in line][2]
    cut = b"".join(lines[:third + 1]) + lines[third + 1][:37]      # mid-way through a line
    path = tmp_path / "stopped.jsonl"
    path.write_bytes(cut)
    rc, out, err = _cli(["validate", path, "--model", fx / "model.json", "--seeds", "1",
                         "--json", "-o", tmp_path / "report"], capsys)
    assert rc == 0, err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1, err
    assert ("stopped.jsonl: 3 of 12 declared requests finished; 9 left out" in warned[0]
            and f"cut at byte {len(b''.join(lines[:third + 1]))} ignored" in warned[0]), err
    assert json.loads(out)["rows"], out
    assert (tmp_path / "report" / "schedule.csv").exists()   # the schedule agreement (the
                                                             # KeyError once) went through
    rc, out, err = _cli(["metrics", path], capsys)
    assert rc == 0 and "requests 3 of 12 declared (9 unfinished, left out)" in out, out
    rc, out, err = _cli(["metrics", path, "--json"], capsys)
    doc = json.loads(out)
    assert doc["requests"] == 3 and doc["partial"]["requests_declared"] == 12
    assert doc["partial"]["requests_left_out"] == 9
    rc, _, err = _cli(["calibrate", path, fx / "k2.jsonl", "-o", tmp_path / "m.json",
                       "--no-acceptance-selection", "--json"], capsys)
    assert rc == 0 and (tmp_path / "m.json").exists(), err


def test_steps_of_unfinished_requests_name_only_finished_ones(fx, tmp_path):
    """The reader's one rule for a partial trace: steps stay (their phases are measured) and
    their rows of requests without a request record are dropped, so no reader meets an id it
    cannot look up (what made validate's schedule raise KeyError)."""
    from psdlab.analysis.trace import PartialTraceWarning, read_trace
    whole = read_trace(fx / "k4.jsonl")
    data = (fx / "k4.jsonl").read_bytes()
    path = tmp_path / "half.jsonl"
    path.write_bytes(data[:len(data) // 2])
    with pytest.warns(PartialTraceWarning):
        part = read_trace(path)
    finished = {r.id for r in part.requests}
    assert len(part.requests) < 12 and part.left_out is not None
    assert part.left_out.unfinished == 12 - len(part.requests)
    assert all(v.req in finished for s in part.steps for v in s.verified)
    assert [s.phases for s in part.steps] == [s.phases for s in whole.steps[:len(part.steps)]]
    assert whole.left_out is None


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0.0, 1.0))
def test_every_reader_takes_a_trace_cut_anywhere(fx, tmp_path, capsys, fraction):
    """Cut a real simulated trace at a random byte: every reader reads it with at most one
    warning (a partial one) or refuses it in one line, and they agree on which."""
    data = (fx / "k4.jsonl").read_bytes()
    at = int(fraction * len(data))
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data[:at])
    results = _read_all_ways(path, capsys, tmp_path)
    verdicts = {name: _one_warning_or_one_error(rc, err, name)
                for name, (rc, _, err) in results.items()}
    assert len(set(verdicts.values())) == 1, verdicts
    verdict = verdicts["metrics"]
    header = data.index(b"\n") + 1
    if at < header:                                   # the run record itself is cut
        assert verdict == "refused", verdicts
    elif at == len(data):
        assert verdict == "whole", verdicts
    else:
        rc, out, err = results["metrics"]
        finished = json.loads(out)["requests"]
        if verdict == "warned":
            assert f"{finished} of 12 declared requests finished" in err, err
        else:                                          # cut right after the last request
            assert finished == 12, out
        assert all(out == str(finished) for name, (_, out, _) in results.items()
                   if name in ("calibrate", "validate"))


def test_more_prompts_asked_than_the_file_holds_is_said(tmp_path):
    """``run --num-prompts 5`` on a 2-prompt file runs the 2 with one warning (not silently)."""
    from psdlab.runtime.run_setup import load_requests
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt_ids": [1, 2, 3]}) + "\n"
                            for i in range(2)))
    with pytest.warns(UserWarning, match=r"--num-prompts 5: the prompts file has 2"):
        requests = load_requests(str(path), None, limit=5)
    assert len(requests) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_requests(str(path), None, limit=2)) == 2
