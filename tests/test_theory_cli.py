"""`psdlab theory`: table, JSON keys, verdict and one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from psdlab.analysis.theory import exact_ratio, paper_ratio_bound, region, theorem1_threshold
from psdlab.cli import main


def _json(capsys, *argv):
    assert main(["theory", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keys_and_consistency(capsys):
    rep = _json(capsys, "--alpha-v", "0.1,1,5,10")
    assert [r["alpha_v"] for r in rep["rows"]] == [0.1, 1.0, 5.0, 10.0]
    for r in rep["rows"]:
        assert set(r) >= {"alpha_v", "ratio", "saving", "t_sd_opt", "paper_bound"}
        assert r["ratio"] == pytest.approx(float(exact_ratio(r["alpha_v"])))
        assert r["saving"] == pytest.approx(1 - 1 / r["ratio"])
        assert r["paper_bound"] == pytest.approx(float(paper_ratio_bound(r["alpha_v"])))
        assert r["theorem1_claim"] == (1.59 if r["alpha_v"] >= theorem1_threshold() else None)
    assert rep["region"] == region(0.37) and rep["paper_region"] == region(0.37, "paper")
    assert rep["theorem1_holds_as_stated"] is False
    assert set(rep["peak"]) >= {"alpha_v", "saving"}


def test_threshold_changes_region(capsys):
    rep = _json(capsys, "--threshold", "0.45", "--alpha-v", "1")
    assert rep["region"] == region(0.45) and rep["region"][0][0] > region(0.37)[0][0]


def test_text_report(capsys):
    assert main(["theory", "--alpha-v", "1,10"]) == 0
    out = capsys.readouterr().out
    assert "T_SD/T_PSD" in out and "FALSE as stated" in out and "Peak" in out


@pytest.mark.parametrize("argv, name", [(["--alpha-v", "1,-2"], "--alpha-v"),
                                        (["--alpha-v", "nan"], "--alpha-v"),
                                        (["--alpha-v", "0"], "--alpha-v"),
                                        (["--alpha-v", "a,b"], "--alpha-v"),
                                        (["--threshold", "0.6"], "--threshold"),
                                        (["--threshold", "0"], "--threshold"),
                                        (["--threshold", "nan"], "--threshold")])
def test_bad_input_one_line_exit_2(capsys, argv, name):
    assert main(["theory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdlab theory: error: {name}") and "\n" not in err


def test_console_script_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "psdlab", "theory", "--threshold", "-1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
