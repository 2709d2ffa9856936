"""`psdlab systems`: system-level points priced through the simulator, and the paper settings'
PSD/SD gains with the engine step model (sim.system_check, paper_figs.settings_gain)."""
from __future__ import annotations

import json

import pytest

from psdlab.cli import main
from psdlab.sim import system_check as sc
from psdlab.sim.costs.engine_step import engine_step_presets

POINT = """[[point]]
id = "{id}"
source = "test"
engine_step = "vllm-v0"
gpu_preset = "vllm-eager"
model = "llama-3.3-70b"
drafter = "{drafter}"
hardware = "a100-80gb"
tp = 4
mode = "{mode}"
k = {k}
batch = {batch}
input_len = 64
output_len = 32
quantity = "{quantity}"
published = {published}
role = "{role}"
{extra}
"""


def _points(tmp_path, *rows: dict) -> str:
    path = tmp_path / "points.toml"
    base = {"drafter": "", "mode": "ar", "k": 0, "batch": 16, "extra": "", "role": "fit",
            "quantity": "cpu_overhead_ms_per_step", "published": 1.0}
    path.write_text("".join(POINT.format(**{**base, **r}) for r in rows))
    return str(path)


def test_host_time_point_is_priced_through_the_simulator(tmp_path):
    v0 = engine_step_presets()["vllm-v0"]
    want = 1e3 * (v0.host_fixed_s + 4 * v0.host_per_tp_rank_s
                  + 16 * (v0.host_per_seq_s + v0.host_per_token_s))     # AR: T = n
    path = _points(tmp_path, {"id": "a", "published": want},
                   {"id": "b", "published": 2 * want, "role": "held_out", "batch": 64})
    out = tmp_path / "check.json"
    assert main(["systems", "check", "--points", path, "-o", str(out)]) == 0
    res = json.loads(out.read_text())
    a, b = res["points"]
    # every step of the run pays the host term (gamma jitter of mean 1 scales it slightly)
    assert a["predicted"] == pytest.approx(want, rel=0.02)
    assert a["within_10pct"] and res["summary"]["fitted_within_10pct"] == 1
    assert b["predicted"] > a["predicted"]                    # more sequences, more host time
    assert (tmp_path / "check.md").read_text().count("| a |") == 1
    assert res["commit"] and res["date_utc"].endswith("UTC")


def test_sd_point_without_acceptance_fits_alpha_on_its_series_fit_point(tmp_path):
    path = _points(tmp_path,
                   {"id": "s1", "mode": "sd", "drafter": "llama-3.1-8b", "k": 3, "batch": 1,
                    "quantity": "sd_speedup_over_ar", "published": 1.3},
                   {"id": "s8", "mode": "sd", "drafter": "llama-3.1-8b", "k": 3, "batch": 8,
                    "quantity": "sd_speedup_over_ar", "published": 1.5, "role": "held_out"})
    res = sc.check(sc.load_points(path))
    s1, s8 = res.points
    assert s1.acceptance == s8.acceptance == "alpha fitted on s1"
    assert s1.predicted == pytest.approx(1.3, rel=0.05)   # one short request: coarse
    assert s1.alpha is not None and 0.05 < s1.alpha < 0.98
    assert res.to_dict()["points"][0] == s1.to_dict()       # the JSON row is the typed row


@pytest.mark.parametrize("extra, needle", [
    ('bogus = 1', "point[0].bogus: unknown field"),
    ('request_rate = 2.0', "point[0]: give exactly one of batch and request_rate"),
    ('basis = "speed"', "point[0].basis"),
])
def test_bad_points_file_gives_one_line_error(tmp_path, capsys, extra, needle):
    path = _points(tmp_path, {"id": "a", "extra": extra})
    assert main(["systems", "check", "--points", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_package_points_file_loads():
    pts = sc.load_points()
    assert pts and all(p.quantity in sc.QUANTITIES for p in pts)
    assert {p.raw["engine_step"] for p in pts} <= set(engine_step_presets())


def test_settings_gain_engine_step_lowers_the_system_ratio():
    from psdlab.paper_figs import settings_gain as sg
    res = sg.run_settings_gain(quick=True, setups=sg.SETUPS[:1], ks=(2, 3))
    s = res.settings[0]
    per_step, none, full = (d.ratio for d in s.decomposition[:3])
    assert full < none                         # the engine's host work costs PSD its gain
    assert none < per_step                     # start-up, prefill and the tail cost more
    assert s.best_k in (2, 3) and res.engine_step == "vllm-v0"
    assert len(s.decomposition) == 3 + len(sg.TERMS)
    # the JSON document: a term's row has its effect on the gain, the first three have none
    parts = res.to_dict()["settings"][0]["decomposition"]
    assert "effect_on_gain" not in parts[2] and "effect_on_gain" in parts[3]
    assert "setting 1" in sg.settings_gain_markdown(res)


def test_settings_gain_says_what_each_gain_rests_on():
    """Every setting lists its inputs with a basis; the acceptance is assumed (nothing
    published), the L40 passes rest on a preset fitted on that part, the H100 passes on one
    borrowed from another part, and the contention of the drafter's own GPU is the stated
    default."""
    from psdlab.paper_figs import settings_gain as sg
    bases = {"measured", "probed", "preset", "assumed", "model"}
    by_setting = {st.number: {x.term: x for x in sg.gain_inputs(st)} for st in sg.SETUPS}
    for inputs in by_setting.values():
        assert {x.basis for x in inputs.values()} <= bases
        assert inputs["acceptance"].basis == "assumed"
        assert "'gpus'" in inputs["contention of overlapped passes"].value
    assert "fitted on this part" in by_setting[1]["GPU passes (t, V)"].value
    assert "borrowed" in by_setting[5]["GPU passes (t, V)"].value
    res = sg.run_settings_gain(quick=True, setups=sg.SETUPS[:1], ks=(2,))
    assert res.to_dict()["settings"][0]["inputs"][1]["basis"] == "assumed"
    assert "| acceptance | assumed |" in sg.settings_gain_markdown(res)
