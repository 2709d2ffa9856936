"""`psdlab check-vllm` without vLLM: its argument errors, a server that exits at once or never
answers (one line naming the port and the log file, exit 2, the server process gone), the
``vllm serve`` / ``vllm bench serve`` command lines, and the figures read back from a committed
real run (bench JSON against its /metrics snapshots, both from its ``runs.json``)."""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from psdlab.cli import main
from psdlab.runtime.vllm_ext import serve_check as sc
from psdlab.validation.vllm_check import judgement as vc

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "vllm" / "check_vllm"


def _err(capsys, argv: list[str]) -> str:
    assert main(["check-vllm", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("extra, field", [
    (["--rates", "0.5,-1"], "--rates"),
    (["--rates", "fast"], "--rates"),
    (["--ks", "0"], "--ks"),
    (["--ks", "2,17"], "--ks"),
    (["--num-prompts", "49"], "--num-prompts"),
    (["--output-len", "0"], "--output-len"),
    (["--repeats", "0"], "--repeats"),
    (["--calibration", "sd-k3@1"], "--calibration"),
    (["--ks", "2", "--rates", "1", "--no-ar"], "--rates/--ks"),
    (["--target-core", "4096"], "--target-core"),
])
def test_bad_arguments_name_the_field(tmp_path, capsys, extra, field):
    err = _err(capsys, ["-o", str(tmp_path / "out"), *extra])
    assert err.startswith(f"psdlab check-vllm: error: {field}")
    assert not (tmp_path / "out").exists()          # refused before anything was written


def _py(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


def test_server_that_exits_is_reported_with_port_and_log(tmp_path, capsys):
    out = tmp_path / "out"
    err = _err(capsys, ["-o", str(out), "--target", str(tmp_path), "--draft", str(tmp_path),
                        "--server-command", _py("import sys; sys.exit(3)")])
    log = out / "logs" / "server-sd-k4.log"
    assert "exited with code 3" in err and f"(log: {log})" in err and "on port " in err
    assert "serve" in log.read_text()                # the command line heads the log
    assert not (out / "check_vllm.json").exists()


def test_server_that_never_answers_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); " \
           "time.sleep(120)"
    server = sc.VllmServer(sc.ServerSpec("ar", target=str(tmp_path)), tmp_path / "s.log",
                           command=shlex.split(_py(code)))
    with pytest.raises(sc.ServerError, match=rf"port {server.port} within 2 s"):
        server.start(2.0)
    assert server.proc is None
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_never_answering_through_the_cli(tmp_path, capsys):
    err = _err(capsys, ["-o", str(tmp_path / "o"), "--target", str(tmp_path), "--draft",
                        str(tmp_path), "--startup-timeout", "1.5", "--no-ar",
                        "--server-command", _py("import time; time.sleep(60)")])
    assert "did not answer /health on port" in err and "within 1.5 s" in err


def test_serve_and_bench_command_lines():
    sd = sc.ServerSpec("sd-k3", target="/m/t", draft="/m/d", k=3)
    args = sd.args(8123)
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "/m/d", "num_speculative_tokens": 3}
    assert args[:2] == ["serve", "/m/t"] and args[args.index("--port") + 1] == "8123"
    ar = sc.ServerSpec("ar", target="/m/t")
    assert ar.mode == "ar" and "--speculative-config" not in ar.args(1)
    with pytest.raises(ValueError, match="^k:"):
        sc.ServerSpec("x", target="/m/t", draft="/m/d", k=0)
    cmd = sc.ServeRun("r", request_rate=0.5, num_prompts=24, output_len=32).command(
        "http://h:1", "/m/t", "/p.json", "/out", client_core=None)
    i = cmd.index("bench")
    assert cmd[i:i + 2] == ["bench", "serve"]
    for flag in ("--save-result", "--save-detailed", "--ignore-eos", "--disable-shuffle"):
        assert flag in cmd
    assert cmd[cmd.index("--request-rate") + 1] == "0.5"
    assert cmd[cmd.index("--backend") + 1] == "openai"


def test_committed_prompt_set():
    texts = sc.committed_prompts(48)
    assert len(texts) == len(set(texts)) == 48
    with pytest.raises(ValueError, match="^num_prompts:"):
        sc.committed_prompts(49)
    heldout = {json.loads(line)["text"] for line in
               (ROOT / "runtime" / "data" / "prompts.jsonl").read_text().splitlines()
               if json.loads(line)["split"] == "heldout"}
    assert set(texts) <= heldout                     # never the drafter's training prompts


def test_write_sharegpt_round_trip(tmp_path):
    path = sc.write_sharegpt(["a b c", "d e"], tmp_path / "p.json")
    rows = json.loads(path.read_text())
    assert [r["conversations"][0]["value"] for r in rows] == ["a b c", "d e"]
    assert all(len(r["conversations"]) == 2 for r in rows)


def test_noise_and_config_names():
    assert vc.noise([10.0, 12.0]) == pytest.approx(2 / 11)
    assert vc.noise([10.0]) is None and vc.noise([None, 3.0]) is None
    assert vc.run_config_name("sd", 4, 0.5) == "sd-k4@0.5"
    assert vc.run_config_name("ar", 0, 1.0) == "ar@1"


@pytest.mark.skipif(not (COMMITTED / "check_vllm.json").is_file(),
                    reason="no committed check-vllm run")
def test_committed_run_reads_back(tmp_path):
    from psdlab.validation.vllm_check.runs_bundle import read_runs_bundle, unpack_runs
    doc = json.loads((COMMITTED / "check_vllm.json").read_text())
    unpack_runs(read_runs_bundle(COMMITTED / "runs.json"), tmp_path, doc["runs"])
    runs = [vc.RunRecord(**{**r, "load_before": tuple(r["load_before"] or ())})
            for r in doc["runs"]]
    for rec in runs:
        rec = vc.RunRecord(**{**rec.to_dict(), **{k: str(tmp_path / getattr(rec, k)) for k in
                                                  ("result", "metrics_before", "metrics_after")}})
        got = vc.measured(rec)
        bench = json.loads(Path(rec.result).read_text())
        assert got.mean_ttft_ms == bench["mean_ttft_ms"]
        if rec.mode == "sd":     # the /metrics delta and vLLM bench's own figure agree
            assert got.spec_decode_acceptance_length == pytest.approx(
                bench["spec_decode_acceptance_length"], rel=1e-9)
            counted = vc.counters(rec)
            assert counted is not None and len(counted.accepted_per_pos) == rec.k
        else:
            assert got.spec_decode_acceptance_length is None
    cal = [r for r in doc["rows"] if r["role"] == "calibration"]
    # the default rule: every rate of the SD server with the largest k, each run twice
    assert {r["config"] for r in cal} == {"sd-k4@0.5", "sd-k4@1"}
    assert all(r["repeats"] >= 2 for r in cal)


@pytest.mark.skipif(not (COMMITTED / "check_vllm.json").is_file(),
                    reason="no committed check-vllm run")
def test_reuse_recalibrates_without_a_server(tmp_path, capsys):
    import shutil
    out = tmp_path / "run"
    shutil.copytree(COMMITTED, out)
    err = _err(capsys, ["-o", str(out), "--reuse", "--calibration", "sd-k9@1"])
    assert err.startswith("psdlab check-vllm: error: --calibration: must be one of ar@0.5")
    assert main(["check-vllm", "-o", str(out), "--reuse", "--calibration", "ar@0.5",
                 "--bootstrap", "2", "--json"]) == 0
    doc = json.loads((out / "check_vllm-ar@0.5.json").read_text())
    rows = {r["config"]: r for r in doc["rows"]}
    # the calibration's runs only (both repeats of ar@0.5)
    assert doc["fit"]["inputs"] == ["bench/ar@0.5-r1.json", "bench/ar@0.5-r2.json"]
    full = json.loads((COMMITTED / "check_vllm.json").read_text())["fit"]["inputs"]
    assert all("sd-k4@" in path for path in full) and len(full) == 6
    assert rows["ar@1"]["predicted"]["mean_tpot_ms"] > 0
    assert rows["sd-k4@1"]["predicted"]["mean_tpot_ms"] is None    # AR cannot identify SD
    assert "drafter" in rows["sd-k4@1"]["not_predicted"]
    assert json.loads((COMMITTED / "check_vllm.json").read_text())["calibration"] == "sd-k4"


@pytest.mark.skipif(not (COMMITTED / "check_vllm.json").is_file(),
                    reason="no committed check-vllm run")
def test_reuse_needs_no_model_directory_but_says_so_when_neither_is_there(tmp_path, capsys,
                                                                          monkeypatch):
    """The served models' ratio is recorded at measure time, so a fresh machine (no
    ~/.cache/psdlab) re-judges an SD calibration; without the record and without the models
    the error is one line naming the option."""
    import shutil
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    out = tmp_path / "run"
    shutil.copytree(COMMITTED, out)
    assert main(["check-vllm", "-o", str(out), "--reuse", "--calibration", "sd-k4@0.5",
                 "--bootstrap", "2", "--json"]) == 0
    capsys.readouterr()
    doc = json.loads((out / "check_vllm-sd-k4@0.5.json").read_text())
    recorded = json.loads((COMMITTED / "check_vllm.json").read_text())
    assert doc["drafter_to_target_ratio"] == recorded["served_drafter_to_target_ratio"]
    old = json.loads((out / "check_vllm.json").read_text())
    del old["served_drafter_to_target_ratio"]
    (out / "check_vllm.json").write_text(json.dumps(old))
    err = _err(capsys, ["-o", str(out), "--reuse", "--calibration", "sd-k4@0.5"])
    assert err.startswith("psdlab check-vllm: error: --drafter-ratio: no config.json in ")
