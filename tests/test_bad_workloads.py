"""Bad traffic files in `psdlab simulate --workload`: a negative arrival is a one-line error
naming the line, arrivals out of order are sorted with a one-line warning, and requests longer
than ``--max-model-len`` are refused as vLLM refuses them (counted in one warning line)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from psdlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "sim" / "configs" / "psd_offline.toml")


def _mooncake(path: Path, rows: list[tuple[float, int, int]]) -> str:
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": m,
                                        "hash_ids": [1]}) + "\n" for t, n, m in rows))
    return str(path)


def _simulate(tmp_path: Path, trace: str, *extra: str) -> int:
    return main(["simulate", CONFIG, "--workload", trace, "--mode", "ar", "--trace",
                 str(tmp_path / "out.jsonl"), *extra])


def test_a_negative_arrival_is_a_one_line_error_naming_the_line(tmp_path, capsys):
    trace = _mooncake(tmp_path / "m.jsonl", [(0, 10, 5), (-2000, 10, 5), (3000, 10, 5)])
    assert _simulate(tmp_path, trace) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "mooncake:line 2: arrival: must be >= 0" in err, err
    assert not (tmp_path / "out.jsonl").exists()


def test_arrivals_out_of_order_are_sorted_with_one_warning(tmp_path, capsys):
    trace = _mooncake(tmp_path / "m.jsonl", [(3000, 10, 5), (0, 10, 5), (1000, 12, 4)])
    assert _simulate(tmp_path, trace) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "3 of 3 requests were out of arrival order" in warnings[0]
    from psdlab.analysis.trace import read_trace
    reqs = sorted(read_trace(str(tmp_path / "out.jsonl")).requests, key=lambda r: r.arrival)
    assert [r.prompt_len for r in reqs] == [10, 12, 10]          # sorted, none lost


def test_requests_longer_than_the_context_are_refused_and_counted(tmp_path, capsys):
    trace = _mooncake(tmp_path / "m.jsonl", [(0, 10, 5), (500, 10 ** 12, 5), (900, 30, 3)])
    assert _simulate(tmp_path, trace, "--max-model-len", "4096") == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "max_model_len" in x)
    assert "1 of 3 requests are longer than max_model_len=4096" in line
    assert "mooncake:line 2" in line and "refused, as vLLM refuses them" in line
    from psdlab.analysis.trace import read_trace
    assert len(read_trace(str(tmp_path / "out.jsonl")).requests) == 2


@pytest.mark.parametrize("extra, field", [
    (["--max-model-len", "1"], "--workload.max_model_len"),
    (["--max-model-len", "20"], "--workload.max_model_len: 3 of 3 requests are longer")])
def test_max_model_len_errors(tmp_path, capsys, extra, field):
    trace = _mooncake(tmp_path / "m.jsonl", [(0, 10, 15), (500, 10, 15), (900, 30, 3)])
    assert _simulate(tmp_path, trace, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err, err


def test_max_model_len_needs_a_workload_file(tmp_path, capsys):
    assert main(["simulate", CONFIG, "--max-model-len", "100"]) == 2
    assert "--max-model-len: only with --workload" in capsys.readouterr().err
