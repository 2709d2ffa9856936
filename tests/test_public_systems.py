"""Schema of sim/costs/public_systems.toml, the system-level public points the simulator is
checked against: every field present and in range, every model / hardware / preset / engine-step
name in its catalog, ids unique, fit vs held-out marked, MineDraft's own results absent.  The
validator is exercised on mutated copies too, so a typo in the file cannot pass."""
from __future__ import annotations

import copy
import math
import os
import re
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.costs.catalog import DTYPES, hardware_catalog, model_catalog
from psdlab.sim.costs.engine_step import engine_step_presets
from psdlab.sim.costs.gpu import engine_presets

PATH = os.path.join(os.path.dirname(__file__), "..", "sim", "costs", "public_systems.toml")

QUANTITIES = {"cpu_overhead_ms_per_step", "tpot_ms", "itl_ms", "output_tokens_per_s",
              "sd_speedup_over_ar"}
REQUIRED = {"id", "figure", "source", "engine_used", "engine_step", "gpu_preset", "model",
            "drafter", "dtype", "hardware", "tp", "mode", "k", "input_len", "output_len",
            "quantity", "published", "role"}
OPTIONAL = {"batch", "request_rate", "acceptance", "basis", "derived", "note", "components_ms",
            "api_server"}
#: plausible ranges of a published figure, per quantity (catches unit slips: s for ms, x100)
RANGES = {"cpu_overhead_ms_per_step": (0.01, 100.0), "tpot_ms": (0.5, 1000.0),
          "itl_ms": (0.5, 1000.0), "output_tokens_per_s": (1.0, 1e6),
          "sd_speedup_over_ar": (0.2, 6.0)}
#: MineDraft's throughput / latency results and Spec-Bench's speedup tables are the judges:
#: never a point here
FORBIDDEN_SOURCES = ("2603.18016", "minedraft", "hemingkx/spec-bench", "2401.07851")
#: GitHub issue / pull-request threads: their points are held out by source (the file's header)
THREAD_SOURCE = re.compile(r"github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+")


def _catalogs() -> dict[str, set[str]]:
    return {"model": set(model_catalog()), "hardware": set(hardware_catalog()),
            "gpu_preset": set(engine_presets()), "engine_step": set(engine_step_presets()),
            "dtype": set(DTYPES)}


def point_errors(p: dict[str, Any], cats: dict[str, set[str]]) -> list[str]:
    """Every schema violation of one point, as 'id.field: problem' lines (empty: valid)."""
    pid = p.get("id", "?")
    errs: list[str] = []

    def bad(field: str, why: str) -> None:
        errs.append(f"{pid}.{field}: {why}")

    for f in sorted(REQUIRED - set(p)):
        bad(f, "missing")
    for f in sorted(set(p) - REQUIRED - OPTIONAL):
        bad(f, "unknown field")
    if errs:
        return errs
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", p["id"]):
        bad("id", "lower case letters, digits, '.', '-' only")
    for f in ("figure", "source", "engine_used"):
        if not isinstance(p[f], str) or len(p[f].strip()) < 8:
            bad(f, "must say what and where (a non-trivial string)")
    for f in ("engine_step", "gpu_preset", "model", "hardware", "dtype"):
        if p[f] not in cats[f]:
            bad(f, f"{p[f]!r} is not in the catalog ({', '.join(sorted(cats[f]))})")
    if p["tp"] not in (1, 2, 4, 8):
        bad("tp", "must be 1, 2, 4 or 8")
    if p["mode"] == "ar":
        if p["k"] != 0:
            bad("k", "must be 0 when mode = 'ar'")
        if p["drafter"] != "":
            bad("drafter", "must be '' when mode = 'ar'")
    elif p["mode"] == "sd":
        if not (isinstance(p["k"], int) and 1 <= p["k"] <= 16):
            bad("k", "must be an integer in 1..16 when mode = 'sd'")
        if p["drafter"] not in cats["model"]:
            bad("drafter", f"{p['drafter']!r} is not in the model catalog")
    else:
        bad("mode", "must be 'ar' or 'sd'")
    if ("batch" in p) == ("request_rate" in p):
        bad("batch", "give exactly one of batch / request_rate")
    elif "batch" in p and not (isinstance(p["batch"], int) and 1 <= p["batch"] <= 4096):
        bad("batch", "must be an integer in 1..4096")
    elif "request_rate" in p and not (isinstance(p["request_rate"], (int, float))
                                      and 0 < p["request_rate"] <= 1e4):
        bad("request_rate", "must be a number in (0, 1e4] requests/s")
    for f in ("input_len", "output_len"):
        if not (isinstance(p[f], int) and 1 <= p[f] <= 1_000_000):
            bad(f, "must be an integer in 1..1e6 tokens")
    q = p["quantity"]
    if q not in QUANTITIES:
        bad("quantity", f"must be one of {sorted(QUANTITIES)}")
    else:
        lo, hi = RANGES[q]
        v = p["published"]
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            bad("published", f"must be a number in [{lo}, {hi}] for {q}")
        if q == "sd_speedup_over_ar":
            if p["mode"] != "sd":
                bad("mode", "an sd_speedup_over_ar point must have mode = 'sd'")
            if p.get("basis") not in ("throughput", "latency"):
                bad("basis", "must be 'throughput' or 'latency' for sd_speedup_over_ar")
        elif "basis" in p:
            bad("basis", "only sd_speedup_over_ar points have a basis")
    if p["role"] not in ("fit", "held_out"):
        bad("role", "must be 'fit' or 'held_out'")
    if "api_server" in p and (p["api_server"] not in ("own-process", "engine-process")
                              or "vllm" not in p.get("engine_used", "").lower()):
        bad("api_server", "'own-process' or 'engine-process', on vLLM points only")
    if "acceptance" in p and not (p["mode"] == "sd"
                                  and 1.0 <= p["acceptance"] <= p["k"] + 1):
        bad("acceptance", "tokens per SD step, in [1, k + 1], SD points only")
    comps = p.get("components_ms")
    if comps is not None:
        if not (isinstance(comps, dict) and comps
                and all(isinstance(x, (int, float)) and x >= 0 for x in comps.values())):
            bad("components_ms", "a table of non-negative ms values")
        elif {"schedule", "process_model_outputs"} <= set(comps):
            total = comps["schedule"] + comps["process_model_outputs"]
            if abs(total - p["published"]) > 0.0015:
                bad("published", f"{p['published']} != schedule + process_model_outputs "
                                 f"= {total:.3f}")
    text = (p["source"] + " " + p["figure"]).lower()
    if any(s in text for s in FORBIDDEN_SOURCES):
        bad("source", "MineDraft's own results and Spec-Bench's tables are the judges, "
                      "never a public point")
    if THREAD_SOURCE.search(p["source"]) and p["role"] != "held_out":
        bad("role", "a point read from an issue / pull-request thread is held out (by source)")
    return errs


def file_errors(points: list[dict[str, Any]], cats: dict[str, set[str]]) -> list[str]:
    """Every violation of the whole file: per point, duplicate ids, the fit share."""
    errs = [e for p in points for e in point_errors(p, cats)]
    ids = [str(p.get("id")) for p in points]
    errs += [f"{i}.id: duplicate" for i in sorted({i for i in ids if ids.count(i) > 1})]
    fit = sum(p.get("role") == "fit" for p in points)
    if not 0.2 <= fit / max(len(points), 1) <= 0.45:
        errs.append(f"file.role: {fit} of {len(points)} points are fit; about a third should be")
    return errs


@pytest.fixture(scope="module")
def points() -> list[dict[str, Any]]:
    with open(PATH, "rb") as fh:
        return tomllib.load(fh)["point"]


@pytest.fixture(scope="module")
def cats() -> dict[str, set[str]]:
    return _catalogs()


def test_file_is_valid(points, cats):
    assert 15 <= len(points) <= 60
    assert file_errors(points, cats) == []


def test_thread_points_are_held_out_and_carry_their_acceptance(points):
    """The issue-45 thread points: held out by source; every SD one has an acceptance."""
    threads = [p for p in points if THREAD_SOURCE.search(p["source"])]
    assert len(threads) >= 10
    assert {p["role"] for p in threads} == {"held_out"}
    assert all("acceptance" in p for p in threads if p["mode"] == "sd")


def test_points_cover_the_engines_and_quantities(points):
    assert {p["engine_step"] for p in points} >= {"vllm-v0", "vllm-v1", "torch"}
    assert {p["quantity"] for p in points} >= {"cpu_overhead_ms_per_step", "output_tokens_per_s",
                                                "sd_speedup_over_ar", "tpot_ms"}
    # both kinds of SD speedup, and SD points on both sides of 1 (the reversal at load)
    sd = [p for p in points if p["quantity"] == "sd_speedup_over_ar"]
    assert {p["basis"] for p in sd} == {"throughput", "latency"}
    assert min(p["published"] for p in sd) < 1.0 < max(p["published"] for p in sd)


MUTATIONS = [
    ("model", "llama-3.1-8bb"), ("hardware", "h100"), ("gpu_preset", "vllm-graph"),
    ("engine_step", "vllm-v2"), ("dtype", "int4"), ("tp", 3), ("mode", "spec"),
    ("quantity", "tokens_per_s"), ("published", -1.0), ("role", "train"), ("k", -1),
    ("input_len", 0), ("output_len", 2.5), ("id", "Bad Id"),
    ("source", "arXiv 2603.18016 Fig. 5"), ("source", "hemingkx/Spec-Bench Leaderboard.md"),
    ("source", "https://github.com/vllm-project/vllm/issues/20780"),
]


@pytest.mark.parametrize("field,value", MUTATIONS)
def test_a_typo_is_caught(points, cats, field, value):
    p = copy.deepcopy(points[0])
    p[field] = value
    errs = point_errors(p, cats)
    assert errs and all(e.startswith(f"{p['id']}.") for e in errs)


def test_missing_unknown_and_duplicate_fields_are_caught(points, cats):
    p = copy.deepcopy(points[0])
    del p["hardware"]
    assert point_errors(p, cats) == [f"{p['id']}.hardware: missing"]
    q = copy.deepcopy(points[0])
    q["hardwre"] = "a100-80gb"
    assert point_errors(q, cats) == [f"{q['id']}.hardwre: unknown field"]
    assert f"{points[0]['id']}.id: duplicate" in file_errors(points + [points[0]], cats)


def test_batch_and_rate_are_exclusive(points, cats):
    p = copy.deepcopy(next(x for x in points if "batch" in x))
    p["request_rate"] = 2.0
    assert any(".batch: give exactly one" in e for e in point_errors(p, cats))
    del p["batch"], p["request_rate"]
    assert any(".batch: give exactly one" in e for e in point_errors(p, cats))


@settings(max_examples=60, deadline=None)
@given(k=st.integers(-3, 20), acc=st.floats(0.0, 25.0, allow_nan=False))
def test_sd_fields_in_range(points, cats, k, acc):
    """An SD point is valid only with 1 <= k <= 16 and 1 <= acceptance <= k + 1."""
    p = copy.deepcopy(next(x for x in points if x["mode"] == "sd"))
    p["k"], p["acceptance"] = k, acc
    ok = 1 <= k <= 16 and 1.0 <= acc <= k + 1
    assert (point_errors(p, cats) == []) == ok


def test_judge_points_judge_and_set_nothing():
    """Spec-Bench's SpS rows are judges (issue 45): their own file, role 'judge' only, and no
    preset names them as a source or fit point."""
    from psdlab.sim import system_check as sc
    judge = os.path.join(os.path.dirname(PATH), "judge_points.toml")
    pts = sc.load_points(judge)
    assert pts and {p.role for p in pts} == {"judge"}
    assert all("Spec-Bench" in p.raw["source"] for p in pts)
    folder = os.path.dirname(PATH)
    for name in ("engine_steps.toml", "engines.toml"):
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            text = fh.read().lower()
        assert "spec-bench" not in text and "judge_points" not in text, name
    with open(PATH, "rb") as fh:
        assert all(p["role"] != "judge" for p in tomllib.load(fh)["point"])
