"""`psdlab check-vllm`'s runs file (``runs.json``): every bench run's result JSON and /metrics
snapshots in one file, keyed as the report's ``runs[]`` name them.

- The committed run's bundle is what the conversion (`write_runs_bundle` over the two folders
  ``bench/`` and ``metrics/`` the run wrote) gives, byte for byte, and unpacks to those files.
- ``--reuse`` writes the same report, byte for byte, from the bundle as from the two folders
  (runs measured before the bundle still re-judge).
- A measured run writes the bundle beside its report.
- No bundle and no folders, or a file that is not a bundle: one-line errors.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from psdlab.cli import main
from psdlab.validation import results_file
from psdlab.validation.vllm_check import harness as vr
from psdlab.validation.vllm_check import judgement as vc
from psdlab.validation.vllm_check import runs_bundle as rb

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "vllm" / "check_vllm"
pytestmark = pytest.mark.skipif(not (COMMITTED / rb.BUNDLE).is_file(),
                                reason="no committed check-vllm run")


def _runs() -> list[dict]:
    return json.loads((COMMITTED / "check_vllm.json").read_text())["runs"]


def _two_folders(dest: Path) -> Path:
    """The committed run as it was measured: report, prompts, bench/ and metrics/, no bundle."""
    shutil.copytree(COMMITTED, dest, ignore=shutil.ignore_patterns(rb.BUNDLE))
    rb.unpack_runs(rb.read_runs_bundle(COMMITTED / rb.BUNDLE), dest, _runs())
    return dest


def test_committed_bundle_is_the_conversion_of_the_two_folders(tmp_path):
    folders = _two_folders(tmp_path / "run")
    files = rb.read_runs_bundle(COMMITTED / rb.BUNDLE)
    assert sorted(files) == sorted(rb.run_paths(_runs()))              # each file once
    assert len(files) == 3 * len(_runs()) == 36
    assert all(k.startswith(("bench/", "metrics/")) for k in files)
    assert (rb.runs_bundle_text(folders, _runs())
            == (COMMITTED / rb.BUNDLE).read_text())
    assert isinstance(files["bench/ar@1-r2.json"], dict)
    assert files["metrics/ar@1-r2-after.txt"].startswith("# HELP ")


def _rejudge(out: Path, monkeypatch, capsys, *extra: str) -> dict[str, bytes]:
    """``--reuse`` in ``out`` with the re-judging's date and commit pinned; its files."""
    monkeypatch.setattr(vr, "_utc_now", lambda: "2026-12-05T00:00:00Z")
    monkeypatch.setattr(results_file, "git_info", lambda: {"short": "x", "tree": "clean"})
    before = set(out.iterdir())
    assert main(["check-vllm", "-o", str(out), "--reuse", "--bootstrap", "2", *extra]) == 0
    capsys.readouterr()
    written = sorted(set(out.iterdir()) - before)
    got = {p.name: p.read_bytes() for p in written}
    for p in written:
        p.unlink()
    return got


@pytest.mark.parametrize("extra", [(), ("--calibration", "ar@0.5")])
def test_reuse_gives_the_same_report_from_the_bundle_and_the_folders(tmp_path, monkeypatch,
                                                                     capsys, extra):
    out = tmp_path / "run"
    shutil.copytree(COMMITTED, out)
    from_bundle = _rejudge(out, monkeypatch, capsys, *extra)
    shutil.rmtree(out)
    _two_folders(out)
    from_folders = _rejudge(out, monkeypatch, capsys, *extra)
    assert sorted(from_bundle) == [f"check_vllm-{extra[-1] if extra else 'sd-k4'}.{x}"
                                   for x in ("json", "md")]
    assert from_bundle == from_folders
    doc = json.loads(from_bundle[sorted(from_bundle)[0]])
    assert all(p.startswith("bench/") for p in doc["rows"][0]["results"])
    assert "psdlab-check-vllm-" not in from_bundle[sorted(from_bundle)[1]].decode()


def test_a_measured_run_writes_the_bundle(tmp_path, monkeypatch):
    """The measuring replaced by the committed run's files (no server): the report's runs[]
    and the bundle's keys are the same relative paths, the bundle's contents the files."""
    src = _two_folders(tmp_path / "measured")
    recorded = _runs()

    def measure(_s, _p, out, _say, _progress=True):
        records = []
        for r in recorded:
            for key in rb.FILE_KEYS:
                (out / r[key]).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / r[key], out / r[key])
            records.append(vc.RunRecord(**{**r, "load_before": tuple(r["load_before"]),
                                           **{k: str(out / r[k]) for k in rb.FILE_KEYS}}))
        return records, []

    monkeypatch.setattr(vr, "measure", measure)
    out = tmp_path / "out"
    s = vr.CheckSettings(target_core=-1, client_core=-1, bootstrap=2, drafter_ratio="0.6842",
                         psd_ks=())                  # no PSD runs (they need the models)
    vr.check_vllm_command(s, str(out), ["-o", str(out)], as_json=True)
    doc = json.loads((out / "check_vllm.json").read_text())
    assert [r["result"] for r in doc["runs"]] == [r["result"] for r in recorded]
    assert rb.read_runs_bundle(out / rb.BUNDLE) == rb.read_runs_bundle(COMMITTED / rb.BUNDLE)
    shutil.rmtree(out / "bench")
    shutil.rmtree(out / "metrics")                   # the bundle alone re-judges
    assert main(["check-vllm", "-o", str(out), "--reuse", "--bootstrap", "2",
                 "--drafter-ratio", "0.6842", "--json"]) == 0
    again = json.loads((out / "check_vllm-sd-k4.json").read_text())
    assert again["rows"] == doc["rows"]


def test_neither_bundle_nor_folders_and_a_bad_bundle_are_one_line_errors(tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(COMMITTED, out)
    (out / rb.BUNDLE).unlink()
    assert main(["check-vllm", "-o", str(out), "--reuse"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"psdlab check-vllm: error: --reuse: no {out / rb.BUNDLE} and no "
                   f"{out / rb.run_paths(_runs())[0]}")
    (out / rb.BUNDLE).write_text(json.dumps({"files": {}}))
    assert main(["check-vllm", "-o", str(out), "--reuse"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is not a check-vllm runs file" in err
    (out / rb.BUNDLE).write_text(json.dumps({"format": rb.FORMAT, "files": {}}))
    assert main(["check-vllm", "-o", str(out), "--reuse"]) == 2
    assert f"{rb.BUNDLE} holds no bench/" in capsys.readouterr().err
