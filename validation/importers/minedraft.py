"""Import the trace JSONL that the MineDraft paper's vLLM plugin writes into psdlab traces.

The file holds one JSON object per line, one line per benchmark run:
``{"metadata": {...}, "traces": [...]}`` with ``"type": "Step"`` and ``"type": "Request"``
records (PAPER_FACTS.md section 5).  The run's configuration comes from the file name
(``input=<len>_<dataset>_<target>_<draft>_<max_num_seqs>_<tetris>_parallel=<..>_k=<k>_t=..
_n=.._c=.._warmup=<w>_runs=<r>.jsonl``); when the name does not follow that pattern it is
inferred from the records and noted in ``run.extra``.

Conversion (each line -> one ``analysis.trace.Trace`` with source ``"minedraft"``):

- times: microseconds of one perf_counter clock -> seconds since the earliest record of the
  line; measured_*_time are already seconds.
- prefill step (``is_prompt_run`` a count > 0, or true): one prefill phase on the target
  (the plugin times both models' prefill together), seqs = the count (for a flag: the
  scheduled requests), tokens = ``batched_token_num``, lasting ``measured_target_time`` (else
  ``batch_end_us - batch_start_us``) from ``batch_start_us``.
- ``batched_requests`` and ``preempted_requests`` hold request trace ids ("Request:7"); like
  request ``tid``s they become the id after the colon ("7").  ``context_token_num`` is not
  used: whether it counts KV context or prefill tokens is not documented.
- decode step: sequences verified n = ``generated_num - accepted_num`` (one bonus token each;
  EOS is ignored in the paper's runs), else ``verify_len / k``.  A verify phase of
  ``measured_target_time`` with tokens = ``verify_len + n`` (the positions the target computes:
  the drafts plus the last accepted token); a draft phase of ``measured_draft_time`` over the
  draft batch (in a parallelised PSD step the requests not verified, otherwise the verified
  ones) with tokens = sequences * k.  In a parallelised step both phases start at
  ``batch_start_us`` (the target time spans the overlap); otherwise verification follows
  drafting.
- verified rows: the file logs only per-step totals, so each step's ``accepted_num`` is spread
  evenly over its n sequences and the run is marked ``extra["verified_rows"] =
  "step-totals"``; calibration then uses only the totals for acceptance.
- requests: arrival = admitted = ``start_us``, finish = ``end_us``, first token = the end of the
  first step that scheduled the request (prefill emits the first token).  Requests without
  ``end_us`` (unfinished when the file was written) are left out and counted in
  ``extra["unfinished_requests"]``.

Malformed input raises ``TraceFormatError("FILE:LINE: ...")``.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Iterator

from psdlab.analysis.checks import RecordFields
from psdlab.analysis.modes import Mode
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace,
                            TraceFormatError, Verified)
from psdlab.validation.acceptance.fit import STEP_TOTALS

SOURCE = "minedraft"
_NAME_RE = re.compile(
    r"^input=(?P<input_len>\d+)_(?P<names>.+)_(?P<max_num_seqs>\d+)_(?P<tetris>True|False)"
    r"_parallel=(?P<parallel>True|False|pearl)_k=(?P<k>\d+)_t=(?P<t>[^_]*)_n=(?P<n>\d+)"
    r"_c=(?P<c>[^_]*)_warmup=(?P<warmup>\d+)_runs=(?P<runs>\d+)\.jsonl$")


def parse_filename(path: str | os.PathLike) -> dict[str, Any] | None:
    """The configuration encoded in a MineDraft trace file name, or None if it does not match.
    Dataset, target and draft are split at underscores: the dataset is the first part, the
    draft the last, the target what lies between."""
    m = _NAME_RE.match(os.path.basename(os.fspath(path)))
    if not m:
        return None
    parts = m["names"].split("_")
    if len(parts) < 3:
        return None
    return {"input_len": int(m["input_len"]), "dataset": parts[0],
            "target": "_".join(parts[1:-1]), "draft": parts[-1],
            "max_num_seqs": int(m["max_num_seqs"]), "tetris": m["tetris"] == "True",
            "parallel": m["parallel"], "k": int(m["k"]), "t": m["t"], "n": int(m["n"]),
            "c": m["c"], "warmup": int(m["warmup"]), "runs": int(m["runs"])}


def looks_like_minedraft(obj: Any) -> bool:
    """True for a decoded line of a MineDraft trace file."""
    return isinstance(obj, dict) and "traces" in obj and "type" not in obj


class _Rec(RecordFields):
    """One MineDraft record's fields (``analysis.checks.RecordFields``: errors naming file:line,
    record and field), with the plugin's own shapes: request-id lists, prefill groups and
    proposal budgets."""

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise TraceFormatError(f"{where}: expected an object, got {obj!r}")
        super().__init__(obj, where, error=TraceFormatError)

    def num(self, name: str, default: float | None = None) -> float:
        """A finite number; ``default`` when absent (None: required)."""
        return self.get(name, "num", optional=default is not None, default=default)

    def ids(self, name: str) -> list[str]:
        v = self.obj.get(name, [])
        if v is None:
            return []
        if not isinstance(v, list) or any(isinstance(x, (bool, dict, list)) or x is None
                                          for x in v):
            raise self.fail(name, f"expected a list of request ids, got {v!r}")
        return [_req_id(x) for x in v]

    def prompt_groups(self) -> int:
        """Prefill groups of a step: ``is_prompt_run`` is a count in some versions of the
        plugin and a flag in others (then every scheduled request is prefilled)."""
        v = self.obj.get("is_prompt_run")
        if v is None or v is False:
            return 0
        if v is True:
            return max(1, len(self.ids("batched_requests")))
        return self.count("is_prompt_run")

    def budget(self, name: str, k: int) -> int:
        """Per-request proposal budget: an integer, or a list of them (the largest is taken)."""
        v = self.obj.get(name)
        if v is None:
            return k
        if isinstance(v, list):
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
                raise self.fail(name, f"expected non-negative integers, got {v!r}")
            return max(v)
        return self.count(name)


def _tid_index(tid: Any, fallback: int) -> int:
    if isinstance(tid, str) and ":" in tid and tid.rsplit(":", 1)[1].isdigit():
        return int(tid.rsplit(":", 1)[1])
    return fallback


def _req_id(tid: Any) -> str:
    tid = str(tid)
    return tid.split(":", 1)[1] if tid.startswith("Request:") else tid


def _decode_phases(r: _Rec, t0: float, k: int, parallel: bool, start: float
                   ) -> tuple[tuple[Phase, ...], tuple[Verified, ...], bool]:
    budget = r.budget("proposed_len", k)
    verify_len, accepted = r.count("verify_len", 0), r.count("accepted_num", 0)
    generated = r.count("generated_num", 0)
    n = generated - accepted if generated > accepted else (
        math.ceil(verify_len / budget) if budget else 0)
    if accepted > verify_len:
        raise r.fail("accepted_num", f"{accepted} > verify_len {verify_len}")
    batch_start = (r.num("batch_start_us", start * 1e6 + t0) - t0) / 1e6
    overlapped = bool(r.obj.get("is_parallelised", False)) and parallel
    scheduled = r.ids("batched_requests")
    draft_seqs = (len(scheduled) - n if overlapped and len(scheduled) > n
                  else n or len(scheduled))
    phases, draft_end = [], batch_start
    if "measured_draft_time" in r.obj and budget and draft_seqs:
        draft_end = batch_start + r.num("measured_draft_time")
        phases.append(Phase("draft", "drafter", batch_start, draft_end, draft_seqs,
                            draft_seqs * budget))
    if "measured_target_time" in r.obj and n:
        v_start = batch_start if overlapped else draft_end
        phases.append(Phase("verify", "target", v_start,
                            v_start + r.num("measured_target_time"), n, verify_len + n))
    ids = scheduled if len(scheduled) == n else [f"{r.obj.get('tid')}/{j}" for j in range(n)]
    per, extra = divmod(accepted, n) if n else (0, 0)
    proposed = verify_len // n if n else 0
    rows = []
    for j, req in enumerate(ids):
        a = min(per + (1 if j < extra else 0), proposed)
        rows.append(Verified(req, proposed, a, a + 1))
    return tuple(phases), tuple(rows), overlapped


def _step(r: _Rec, pos: int, t0: float, k: int, parallel: bool) -> StepRecord:
    start, end = (r.num("start_us") - t0) / 1e6, (r.num("end_us") - t0) / 1e6
    if end < start:
        raise r.fail("end_us", f"step ends before it starts ({end} < {start})")
    preempted = tuple(r.ids("preempted_requests"))
    prefills = r.prompt_groups()
    if prefills:
        b0 = (r.num("batch_start_us", r.num("start_us")) - t0) / 1e6
        span = (r.num("batch_end_us", r.num("end_us")) - t0) / 1e6 - b0
        phase = Phase("prefill", "target", b0, b0 + max(0.0, r.num("measured_target_time", span)),
                      prefills, r.count("batched_token_num", 0))
        return StepRecord(_tid_index(r.obj.get("tid"), pos), start, end, (phase,),
                          preempted=preempted)
    phases, rows, overlapped = _decode_phases(r, t0, k, parallel, start)
    return StepRecord(_tid_index(r.obj.get("tid"), pos), start, end, phases, rows,
                      overlapped=overlapped, preempted=preempted)


def _first_tokens(steps: list[StepRecord], scheduled: list[list[str]]) -> dict[str, float]:
    first: dict[str, float] = {}
    for step, ids in zip(steps, scheduled):
        for rid in ids:
            first.setdefault(rid, step.end)
    return first


def _request(r: _Rec, t0: float, first: dict[str, float]) -> RequestRecord:
    rid = _req_id(r.obj.get("tid", ""))
    arrival, finish = (r.num("start_us") - t0) / 1e6, (r.num("end_us") - t0) / 1e6
    if finish < arrival:
        raise r.fail("end_us", f"request ends before it starts ({finish} < {arrival})")
    ft = min(max(first.get(rid, finish), arrival), finish)
    return RequestRecord(id=rid, arrival=arrival, admitted=arrival, first_token=ft,
                         finish=finish, prompt_len=r.count("prompt_len", 0),
                         output_len=r.count("gen_len", 0))


def _run_info(cfg: dict[str, Any] | None, records: list[_Rec], meta: dict, line: int,
              warmup: bool) -> RunInfo:
    k = cfg["k"] if cfg else max((r.budget("proposed_len", 0) for r in records
                                  if r.obj.get("type") == "Step"), default=0)
    parallel = cfg["parallel"] if cfg else (
        "True" if any(r.obj.get("is_parallelised") for r in records) else "False")
    mode: Mode = "ar" if k == 0 else ("psd" if parallel in ("True", "pearl") else "sd")
    m = cfg["max_num_seqs"] if cfg else max(
        (len(r.ids("batched_requests")) for r in records), default=0)
    extra = {"verified_rows": STEP_TOTALS, "line": line, "warmup": warmup, "metadata": meta,
             "config": cfg or "inferred from the records (file name not in MineDraft form)"}
    if parallel == "pearl":
        extra["method"] = "pearl"
    return RunInfo(mode=mode, k=k, m=m, source=SOURCE,
                   devices={"target": "target", "drafter": "drafter"},
                   models={"target": cfg["target"], "drafter": cfg["draft"]} if cfg else {},
                   workload={"dataset": cfg["dataset"], "input_len": cfg["input_len"],
                             "n": cfg["n"]} if cfg else {}, extra=extra)


def convert_line(obj: Any, where: str, cfg: dict[str, Any] | None, line: int = 1,
                 warmup: bool = False) -> Trace:
    """One decoded line of a MineDraft file -> a psdlab Trace."""
    if not looks_like_minedraft(obj):
        raise TraceFormatError(f"{where}: expected {{\"metadata\": ..., \"traces\": [...]}}")
    if not isinstance(obj["traces"], list):
        raise TraceFormatError(f"{where}: field 'traces': expected a list")
    meta = obj.get("metadata") or {}
    recs = [_Rec(o, f"{where}: traces[{i}]") for i, o in enumerate(obj["traces"])]
    for r in recs:
        if r.obj.get("type") not in ("Step", "Request"):
            raise r.fail("type", f"must be 'Step' or 'Request', got {r.obj.get('type')!r}")
    t0 = min((r.num("start_us") for r in recs), default=0.0)
    run = _run_info(cfg, recs, meta if isinstance(meta, dict) else {}, line, warmup)
    steps_in = [r for r in recs if r.obj["type"] == "Step"]
    steps = [_step(r, i, t0, run.k, run.mode == "psd") for i, r in enumerate(steps_in)]
    first = _first_tokens(steps, [r.ids("batched_requests") for r in steps_in])
    finished = [r for r in recs if r.obj["type"] == "Request" and r.obj.get("end_us") is not None]
    requests = [_request(r, t0, first) for r in finished]
    unfinished = sum(r.obj["type"] == "Request" for r in recs) - len(finished)
    if unfinished:
        run.extra["unfinished_requests"] = unfinished
    return Trace(run=run, steps=steps, requests=requests)


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    name = os.fspath(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"{name}:{lineno}: not valid JSON ({exc.msg}); the file "
                                       f"may be truncated or corrupt") from None


def read_minedraft(path: str | os.PathLike, *, include_warmup: bool = False) -> list[Trace]:
    """All benchmark runs of a MineDraft trace file as psdlab traces.  When the file holds
    exactly warmup + runs lines (per its name), the first ``warmup`` are warm-up runs and are
    left out unless ``include_warmup``."""
    name = os.fspath(path)
    cfg = parse_filename(path)
    lines = list(_lines(path))
    if not lines:
        raise TraceFormatError(f"{name}: empty file (no benchmark runs)")
    n_warm = cfg["warmup"] if cfg and len(lines) == cfg["warmup"] + cfg["runs"] else 0
    traces = []
    for i, (lineno, obj) in enumerate(lines):
        if i < n_warm and not include_warmup:
            continue
        traces.append(convert_line(obj, f"{name}:{lineno}", cfg, lineno, warmup=i < n_warm))
    return traces
