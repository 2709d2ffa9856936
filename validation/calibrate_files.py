"""Calibration from files, each read once: what ``psdlab calibrate`` and the demo run.

``read_inputs`` opens every input once (its bytes), tells serving-benchmark results (vLLM
``bench serve`` / SGLang ``bench_serving``, ``analysis.formats``) from traces by content, and
parses psdlab and MineDraft traces from those bytes (the same checks and one-line errors as
``validation.importers.load_traces``).

``calibrate_to_file`` is the one path from loaded traces to a model file: the cost and
acceptance fits (``validation.calibrate``), the acceptance model for new prompts
(``validation.acceptance.cross_validation.select``: cross-validation over the calibration
prompts and the acceptance pool's, ``validation.acceptance.pool``), written by
``sim.costs.fitted.write_fit`` with ``validation.model_file.model_parts`` alone.  The demo's
``model.json`` and ``psdlab calibrate -o`` on the same traces (named alike, in the same order)
are the same file.
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from psdlab.analysis.contention import CorunProbe
from psdlab.analysis.formats.detect import FORMATS
from psdlab.analysis.formats.parsing import SNIFF_BYTES
from psdlab.analysis.trace import Trace, TraceFormatError, trace_from_lines
from psdlab.validation.serving_results.replay import BENCH_FORMATS
from psdlab.validation.importers import first_record_format
from psdlab.validation.importers.minedraft import convert_line, parse_filename


@dataclass(frozen=True)
class CalibrationInputs:
    """What ``read_inputs`` found: serving-benchmark results (``bench``; their paths go to
    ``validation.serving_results.calibration``) or the traces of every file, in order."""
    bench: bool
    traces: tuple[Trace, ...] = ()


def _is_bench(data: bytes) -> bool:
    """Whether a file's bytes are a vLLM or SGLang bench result: its head is detected as one
    (``analysis.formats.detect.detect_format``, on bytes already read)."""
    head = data[:SNIFF_BYTES].decode("utf-8-sig", errors="replace")
    if not head.strip():
        return False
    name = next((name for name, module in FORMATS.items() if module.sniff(head)), None)
    return name in BENCH_FORMATS


def _json_lines(name: str, data: bytes) -> Iterator[tuple[int, Any]]:
    """The non-blank lines of a JSONL file as (line number, object), parsed as they are
    taken; a line that is not UTF-8 or not JSON is a one-line error naming the file and
    line."""
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceFormatError(f"{name}: not a text file (not UTF-8); expected a JSONL "
                                   f"trace") from None
        try:
            yield lineno, json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{name}:{lineno}: not valid JSON ({exc.msg}); the file "
                                   f"may be truncated or corrupt") from None


def _minedraft(name: str, lines: list[tuple[int, Any]]) -> list[Trace]:
    """Every benchmark run of a MineDraft file (``importers.minedraft.read_minedraft``: the
    warm-up runs its name counts left out)."""
    cfg = parse_filename(name)
    n_warm = cfg["warmup"] if cfg and len(lines) == cfg["warmup"] + cfg["runs"] else 0
    return [convert_line(obj, f"{name}:{lineno}", cfg, lineno, warmup=i < n_warm)
            for i, (lineno, obj) in enumerate(lines) if i >= n_warm]


def _psdlab(name: str, data: bytes) -> Trace:
    """A psdlab trace from its bytes (``analysis.trace.read_trace``'s checks; a partial trace
    read on its finished requests, with one warning, ``analysis.trace.trace_from_lines``)."""
    return trace_from_lines(io.BytesIO(data), name)


def traces_of(name: str, data: bytes) -> list[Trace]:
    """The traces in one file's bytes: one for a psdlab trace, one per benchmark run for
    MineDraft (told apart by the first record, ``validation.importers.first_record_format``)."""
    lines = _json_lines(name, data)
    first = next(lines, None)
    if first_record_format(name, first) == "psdlab":
        return [_psdlab(name, data)]
    assert first is not None                # first_record_format raised on an empty file
    return _minedraft(name, [first, *lines])


def read_inputs(paths: Sequence[str | os.PathLike]) -> CalibrationInputs:
    """Every input read once: bench results (all of them; a mix is a one-line error) or
    traces."""
    blobs = []
    for path in paths:
        with open(path, "rb") as fh:
            blobs.append((os.fspath(path), fh.read()))
    kinds = [_is_bench(data) for _, data in blobs]
    if any(kinds) and not all(kinds):
        bad = blobs[kinds.index(False)][0]
        raise ValueError(f"{bad}: not a vLLM or SGLang bench result, but the other inputs are; "
                         f"give one kind of input at a time")
    if kinds and all(kinds):
        return CalibrationInputs(bench=True)
    return CalibrationInputs(bench=False,
                  traces=tuple(t for name, data in blobs for t in traces_of(name, data)))


def with_rows(traces: Sequence[Trace]) -> list[Trace]:
    """The traces whose verified rows are real (not made from step totals by an importer,
    ``acceptance.fit.STEP_TOTALS``): what the acceptance selection is fitted and scored on."""
    from psdlab.validation.acceptance.fit import STEP_TOTALS
    return [t for t in traces if (t.run.extra or {}).get("verified_rows") != STEP_TOTALS]


def calibrate_to_file(path: str | os.PathLike, traces: Sequence[Trace], names: Sequence[str],
                      *, holdout: float = 0.2, seed: int = 0,
                      context_probe: Mapping[str, Any] | None = None,
                      pool: Mapping[str, str] | None = None,
                      select_acceptance: bool = True,
                      corun: CorunProbe | None = None) -> dict[str, Any]:
    """Calibrate on loaded traces and write the model file (module docstring); ``names``: the
    trace files as the file records them; ``context_probe``: a ``runtime.context_timing``
    result; ``pool``: the acceptance pool's patterns; ``select_acceptance``: choose the
    acceptance model for new prompts by cross-validation (the file's default acceptance then;
    on the traces with real verified rows only, ``with_rows``; none: no selection);
    ``corun``: a co-run probe's record: PSD is then predicted from it and the non-PSD traces
    alone (the traces with overlapped steps and their names are left out before anything is
    fitted, so the file is byte-identical whether or not they were given).
    Returns the object written."""
    from psdlab.validation.acceptance.cross_validation import select
    from psdlab.validation.calibrate import calibrate, non_psd
    from psdlab.sim.costs.fitted import write_fit
    from psdlab.validation.model_file import model_parts
    if corun is not None:
        traces, names, _ = non_psd(traces, names)
    cal = calibrate(traces, holdout=holdout, seed=seed, context_probe=context_probe,
                    corun=corun)
    rows = with_rows(traces)
    transfer = None
    if select_acceptance and cal.acceptance is not None and rows:
        transfer = select(rows, pool=dict(pool) if pool else None).to_dict()
    return write_fit(path, *model_parts(cal, traces=list(names), holdout=holdout, seed=seed,
                                        transfer=transfer))
