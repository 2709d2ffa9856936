"""`psdlab frontier`: envelope, exponential fit, predicted optima, judgement, files written
(on tiny random models, inline backend) and one-line errors.  No timing assertions."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.theory import sd_draft_time_exponential
from psdlab.cli import main
from psdlab.validation.frontier.theory import (FrontierPoint, batch_times, contention,
                                               fit_exponential, paper_times, predict_optima,
                                               upper_envelope)

from runtime_engine_util import perturbed_copy, prompts, write_prompt_ids


# ------------------------------------------------------------------------------ envelope

def test_envelope_known_points() -> None:
    t = [1.0, 2.0, 3.0, 4.0, 2.5, 0.5]
    y = [0.2, 0.5, 0.4, 0.9, 0.5, 0.1]
    # 3.0 (0.4) is beaten by 2.0 (0.5); 2.5 (0.5) by 2.0 (0.5, faster)
    assert upper_envelope(t, y) == [5, 0, 1, 3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 10), st.floats(0, 1)), min_size=1, max_size=12))
def test_envelope_dominates_everything_else(pts) -> None:
    t, y = [p[0] for p in pts], [p[1] for p in pts]
    env = upper_envelope(t, y)
    assert env, "the envelope is never empty"
    et, ey = [t[i] for i in env], [y[i] for i in env]
    assert et == sorted(et) and all(b > a for a, b in zip(ey, ey[1:]))
    for i in range(len(t)):
        if i not in env:
            assert any(t[j] <= t[i] and y[j] >= y[i] for j in env)


def test_envelope_rejects_empty() -> None:
    with pytest.raises(ValueError, match="t, vsr"):
        upper_envelope([], [])


# ------------------------------------------------------------------------------ fit

@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 50.0), st.floats(0.2, 5.0))
def test_fit_recovers_alpha_on_exact_data(alpha, spread) -> None:
    t = np.linspace(0.1, spread, 6) / alpha
    fit = fit_exponential(t, -np.expm1(-alpha * t))
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.rms_envelope < 1e-7 and fit.r2_envelope == pytest.approx(1.0, abs=1e-9)


def test_fit_reports_a_poor_fit() -> None:
    t = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([0.01, 0.02, 0.03, 0.95])            # a step, not an exponential
    fit = fit_exponential(t, y)
    assert fit.rms_envelope > 0.1 and fit.r2_envelope < 0.9


def test_fit_rejects_zero_time() -> None:
    with pytest.raises(ValueError, match="t:"):
        fit_exponential([0.0, 1.0], [0.0, 0.5])


# ------------------------------------------------------------------------------ optima

def _exp_points(alpha: float, V: float, ts, k: int = 4, m: int = 4, **kw) -> list[FrontierPoint]:
    return [FrontierPoint(name=f"d{i}", t=t, V=V, vsr=float(-np.expm1(-alpha * t)),
                          tokens_per_step=m * (1 + k * float(-np.expm1(-alpha * t))), **kw)
            for i, t in enumerate(ts)]


def test_paper_model_picks_lemma_optima_on_exact_frontier() -> None:
    alpha, V = 1.0, 3.0                                # x = 3: SD's optimum t* ~ 1.75 < V
    t_star = float(sd_draft_time_exponential(alpha, V))
    ts = [0.5, 1.0, t_star, V, 5.0]
    out = predict_optima(_exp_points(alpha, V, ts), k=4, m=4)
    p = out.predictions["paper.points"]
    assert p.best_sd.drafter == "d2" and p.best_psd.drafter == "d3"  # t = V
    assert out.fit.alpha_per_s == pytest.approx(alpha, rel=1e-6)
    assert out.fit.alpha_v == pytest.approx(3.0, rel=1e-6)
    assert out.theory_at_alpha_v.t_sd_opt_s == pytest.approx(t_star, rel=1e-6)
    # on exact data the discrete ratio at the continuous optima is the exact ratio
    assert p.ratio_sd_over_psd == pytest.approx(out.theory_at_alpha_v.exact_ratio, rel=1e-6)
    assert out.envelope == tuple(f"d{i}" for i in range(5))


def test_batch_model_bonus_token_and_overhead_move_the_optimum() -> None:
    # with the bonus token a near-useless fast drafter is nearly AR; the paper's model
    # (tokens = C f) calls it hopeless
    V = 1.0
    pts = [FrontierPoint("fast", t=0.1, V=V, vsr=0.01, tokens_per_step=4 * 1.04),
           FrontierPoint("good", t=1.0, V=V, vsr=0.5, tokens_per_step=4 * 3.0, overhead=0.0)]
    out = predict_optima(pts, k=4, m=4)
    paper, batch = out.predictions["paper.points"], out.predictions["batch.points"]
    assert paper.psd_time_per_token_s[0] > 10 * paper.psd_time_per_token_s[1]
    assert batch.psd_time_per_token_s[0] == pytest.approx((1.0 + 0.0) / (4 * 1.04))
    assert batch.best_psd.drafter == "good"
    sd, psd = batch_times(np.array([0.1, 1.0]), np.array([V, V]), np.array([4.16, 12.0]),
                          np.array([0.5, 0.5]), 0.0, 0.0)
    assert sd == pytest.approx([(0.1 + 1 + 0.5) / 4.16, (2 + 0.5) / 12.0])
    assert psd == pytest.approx([(1 + 0.5) / 4.16, (1 + 0.5) / 12.0])


def test_contention_is_leave_one_out_median() -> None:
    pts = [FrontierPoint(f"d{i}", t=1.0, V=2.0, vsr=0.5, tokens_per_step=4.0,
                         t_overlapped=s, V_overlapped=2.0 * s)
           for i, s in enumerate((1.1, 1.2, 1.5))]
    st_, sv = contention(pts)
    assert st_ == pytest.approx([1.35, 1.3, 1.15])
    assert sv == pytest.approx([1.35, 1.3, 1.15])
    none = [FrontierPoint("a", 1.0, 1.0, 0.5, 4.0), FrontierPoint("b", 1.0, 1.0, 0.5, 4.0)]
    assert list(contention(none)[0]) == [1.0, 1.0]
    # a slowdown makes PSD slower, never SD
    sd0, psd0 = batch_times(1.0, 2.0, 4.0, 0.0, 0.0, 0.0)
    sd1, psd1 = batch_times(1.0, 2.0, 4.0, 0.0, 0.0, 0.0, 1.3, 1.3)
    assert sd1 == sd0 and psd1 == pytest.approx(psd0 * 1.3)


def test_paper_times_zero_vsr_is_infinite() -> None:
    sd, psd = paper_times(np.array([1.0, 2.0]), 1.0, np.array([0.0, 0.5]), 4, 4)
    assert np.isinf(sd[0]) and np.isinf(psd[0]) and sd[1] == pytest.approx(3.0 / 8.0)


def test_predict_rejects_bad_input() -> None:
    pts = _exp_points(1.0, 1.0, [0.5, 1.0])
    with pytest.raises(ValueError, match="k: must be"):
        predict_optima(pts, k=0, m=4)
    with pytest.raises(ValueError, match="batch: must be"):
        predict_optima(pts, k=4, m=0)
    with pytest.raises(ValueError, match="points"):
        predict_optima(pts[:1], k=4, m=4)


# ------------------------------------------------------------------------------ end to end

@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    from psdlab.runtime.weights import random_model_dir
    root = tmp_path_factory.mktemp("frontier_tiny")
    target = random_model_dir(root / "target", {"vocab_size": 96, "num_hidden_layers": 3,
                                                "max_position_embeddings": 256}, seed=21)
    noisy = perturbed_copy(target, root / "noisy", scale=0.01, seed=22)
    pfile = write_prompt_ids(root / "prompts.jsonl", prompts(6, seed=5, lo=3, hi=12))
    return {"target": target, "noisy": noisy, "prompts": pfile, "root": root}


@pytest.mark.e2e
def test_frontier_command_writes_every_file(tiny, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PSDLAB_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["frontier", "-o", str(out), "--k", "2", "--batch", "2", "--depths", "1,3",
            "--prompts", "6", "--max-new-tokens", "6", "--rounds", "1", "--backend", "inline",
            "--target", str(tiny["target"]), "--draft", str(tiny["noisy"]),
            "--prompts-file", str(tiny["prompts"]), "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    names = [f["name"] for f in res["family"]]
    assert sorted(names) == ["committed-3", "exit-1", "exit-3"]
    for key in ("json", "csv", "png", "markdown"):
        assert Path(res["files"][key]).is_file()
    rows = list(csv.DictReader(open(res["files"]["csv"])))
    assert [r["drafter"] for r in rows] == [p["name"] for p in res["points"]]
    md = Path(res["files"]["markdown"]).read_text()
    assert "## Checks" in md and res["judgement"]["measured"]["best_sd"] in md
    saved = json.loads(Path(res["files"]["json"]).read_text())
    assert saved["judgement"]["checks"]["model"] == "batch.points"
    assert {"cpu_model", "flags", "cores", "load_average", "git_commit", "date_utc"} <= set(
        saved["machine"])
    # every drafter ran SD, PSD and PSD iso-concurrency; AR ran with the first and last
    modes = {(r["drafter"], r["mode"]) for r in res["runs"]}
    for n in names:
        assert {(n, "sd"), (n, "psd"), (n, "psd_iso_c")} <= modes
    assert {(names[0], "ar"), (names[-1], "ar_2m")} <= modes
    # greedy SD / PSD with any drafter emit exactly the target's tokens; every run had
    # requests waiting, so each measured a steady state (and stopped after it)
    assert all(r["lossless"] for r in res["runs"])
    assert all(r["steady"] for r in res["runs"])
    # the exit at full depth is the target itself (in bf16): almost every draft is accepted
    vsr = {p["name"]: p["vsr"] for p in res["points"]}
    assert vsr["exit-3"] > vsr["exit-1"]
    # the exits were built into the cache, without weights of their own
    built = list((tmp_path / "cache").glob("smollm2-exit-1-*"))
    assert len(built) == 1 and (built[0] / "config.json").is_file()


def test_early_exit_dirs_differ_per_target(tmp_path, tiny) -> None:
    from psdlab.runtime.drafter_build import drafter_dir_name, early_exit_spec
    from psdlab.runtime.model_pair import prepare_drafter
    spec = early_exit_spec(2, n_target=3)
    assert not spec.needs_weights and spec.num_layers == 2
    a = prepare_drafter(tiny["target"], spec, tmp_path, progress=False)
    b = prepare_drafter(tiny["noisy"], spec, tmp_path, progress=False)
    assert a != b and drafter_dir_name(spec, "x") != drafter_dir_name(spec, "y")
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 2 and cfg["psdlab_drafter"]["new_layers"] == 0
    with pytest.raises(ValueError, match="depth: must be in"):
        early_exit_spec(4, n_target=3)


@pytest.mark.parametrize("argv, field", [(["--k", "0"], "k: must be in [1, 64]"),
                                         (["--batch", "0"], "batch: must be in [1, 64]"),
                                         (["--rounds", "0"], "rounds: must be in"),
                                         (["--depths", "2,x"], "--depths: expected"),
                                         (["--depths", "0"], "depths[]: must be >= 1"),
                                         (["--target", "/nonexistent"], "--target/--draft")])
def test_bad_input_one_line_error(argv, field, capsys) -> None:
    assert main(["frontier", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert field in err and len(err.splitlines()) == 1


def test_prefix_equal() -> None:
    from psdlab.validation.frontier.run_frontier import prefix_equal
    assert prefix_equal([[1, 2, 3], [4]], [[1, 2], [4, 5]])
    assert not prefix_equal([[1, 2, 3]], [[1, 3]])
    assert not prefix_equal([[1]], [[1], [2]])
