"""Host time per engine step, from instrumented runs: per-cell statistics and fitted lines.

An engine step's host time is its wall time minus the model passes inside it (the rest is
scheduling, input preparation, sampling bookkeeping, output processing).  Three measurements
share this module: vLLM V1 (``benchmarks/vllm_step_host.py``), vLLM 0.9.2's V0 speculative
decoding (``benchmarks/vllm_v0_step_host.py``) and Hugging Face assisted generation
(``runtime/hf_assisted_host.py``).  Each turns its engine's step records into dicts of
milliseconds; this module summarises a cell (one engine, mode, k and batch) over its repeats
and fits lines through the cells.  Plain Python and numpy: no engine is imported here.

A cell keeps the median and IQR over all steps of all repeats, and each repeat's median: a
repeat that another job on a shared core slowed moves its own median, not the median of the
repeats' medians (``repeat_median``), which the fits use.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping, Sequence

#: the parts of a vLLM V1 step (benchmarks/vllm_step_host.py)
V1_PARTS = ("schedule", "update", "exec_host", "sampling", "process_outputs", "other")


class CallTimer:
    """Per-step accumulators of wall and thread-CPU time (and call counts) per key, filled by
    wrapping an engine's methods on their instances; ``steps`` keeps one record per step."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}
        self.steps: list[dict[str, Any]] = []

    def add(self, key: str, dt: float, dcpu: float) -> None:
        self.acc[key] = self.acc.get(key, 0.0) + dt
        self.acc[key + "_cpu"] = self.acc.get(key + "_cpu", 0.0) + dcpu
        self.acc[key + "_n"] = self.acc.get(key + "_n", 0.0) + 1.0

    def wrap(self, obj: Any, name: str, key: str,
             after: Callable[[Any], None] | None = None) -> None:
        """Replace ``obj.name`` with a timed call adding to ``key`` (then ``after(result)``)."""
        fn = getattr(obj, name)

        def timed(*a: Any, **kw: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = fn(*a, **kw)
            self.add(key, time.perf_counter() - t0, time.thread_time() - c0)
            if after is not None:
                after(out)
            return out
        setattr(obj, name, timed)


def quantiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile), inclusive method."""
    if not xs:
        raise ValueError("quantiles: no values")
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def lstsq(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> tuple[list[float], float]:
    """Least-squares coefficients and R^2."""
    import numpy as np
    a, y = np.asarray(rows, dtype=float), np.asarray(ys, dtype=float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    resid = y - a @ coef
    tot = float(((y - y.mean()) ** 2).sum())
    return [float(c) for c in coef], (1.0 - float((resid ** 2).sum()) / tot) if tot else 1.0


def stat_block(runs: Sequence[Sequence[Mapping[str, float]]], key: str) -> dict[str, Any]:
    """Median, quartiles, IQR over every step of every repeat, and each repeat's median."""
    steps = [s[key] for run in runs for s in run]
    q1, med, q3 = quantiles(steps)
    reps = [statistics.median([s[key] for s in run]) for run in runs if run]
    return {"median": med, "p25": q1, "p75": q3, "iqr": q3 - q1,
            "repeat_median": statistics.median(reps), "repeat_medians": reps}


def summarize_cell(runs: Sequence[Sequence[Mapping[str, float]]], *, keys: Sequence[str],
                   parts: Sequence[str], **labels: Any) -> dict[str, Any]:
    """One cell: ``labels`` (mode, k, batch, ...), a `stat_block` per key in ``keys`` and the
    median of each part over all steps.  ``runs``: one list of step dicts per repeat."""
    steps = [s for run in runs for s in run]
    if not steps:
        raise ValueError(f"{labels}: no step recorded")
    cell: dict[str, Any] = {**labels, "steps": len(steps), "repeats": len(runs)}
    for key in keys:
        cell[key] = stat_block(runs, key)
    cell["parts_ms_median"] = {p: statistics.median([s.get(p, 0.0) for s in steps])
                               for p in parts}
    return cell


def v1_decode_steps(steps: Sequence[Mapping[str, Any]], batch: int, k: int
                    ) -> list[dict[str, float]]:
    """The full decode steps of one vLLM V1 run (seconds in, ms out): no request joins, all
    ``batch`` requests run, ``batch x (k + 1)`` scheduled tokens; host = wall - passes."""
    want = batch * (k + 1)
    out = []
    for s in steps:
        if s.get("new", 1) or s.get("seqs") != batch or s.get("tokens") != want:
            continue
        fwd = s.get("fwd_target", 0.0) + s.get("fwd_draft", 0.0)
        fwd_cpu = s.get("fwd_target_cpu", 0.0) + s.get("fwd_draft_cpu", 0.0)
        exec_host = s.get("exec", 0.0) - fwd - s.get("sampling", 0.0)
        named = (s.get("schedule", 0.0) + s.get("update", 0.0) + s.get("exec", 0.0)
                 + s.get("process_outputs", 0.0))
        out.append({"host": 1e3 * (s["wall"] - fwd),
                    "host_cpu": 1e3 * (s.get("wall_cpu", s["wall"]) - fwd_cpu),
                    "wall": 1e3 * s["wall"], "forward": 1e3 * fwd,
                    "schedule": 1e3 * s.get("schedule", 0.0),
                    "update": 1e3 * s.get("update", 0.0), "exec_host": 1e3 * exec_host,
                    "sampling": 1e3 * s.get("sampling", 0.0),
                    "process_outputs": 1e3 * s.get("process_outputs", 0.0),
                    "other": 1e3 * (s["wall"] - named), "emitted": s.get("emitted", 0)})
    return out


def fits(cells: Sequence[Mapping[str, Any]], key: str = "host_ms",
         stat: str = "repeat_median") -> dict[str, Any]:
    """Lines through each cell's ``key`` ``stat``: per label ``fixed + per_seq x batch``, and
    over all cells ``fixed + per_seq x batch + per_token x scheduled tokens + sd_fixed x [SD]
    + per_draft_pass x k``."""
    out: dict[str, Any] = {}
    for label in sorted({c["label"] for c in cells}):
        cs = [c for c in cells if c["label"] == label]
        coef, r2 = lstsq([[1.0, c["batch"]] for c in cs], [c[key][stat] for c in cs])
        out[label] = {"model": f"{key} = fixed + per_seq x batch", "fixed_ms": coef[0],
                      "per_seq_ms": coef[1], "r2": r2, "points": len(cs)}
    rows = [[1.0, c["batch"], c["scheduled_tokens"], 1.0 if c["mode"] == "sd" else 0.0,
             float(c["k"])] for c in cells]
    coef, r2 = lstsq(rows, [c[key][stat] for c in cells])
    out["all"] = {"model": f"{key} = fixed + per_seq x batch + per_token x scheduled tokens"
                           " + sd_fixed x [SD] + per_draft_pass x k",
                  "fixed_ms": coef[0], "per_seq_ms": coef[1], "per_token_ms": coef[2],
                  "sd_fixed_ms": coef[3], "per_draft_pass_ms": coef[4], "r2": r2,
                  "points": len(cells)}
    return out


def fit_line(cells: Sequence[Mapping[str, Any]], key: str, columns: Sequence[str],
             stat: str = "repeat_median") -> dict[str, Any]:
    """``key = sum coef_c x cell[c]`` over ``columns`` (the name ``"one"`` is the constant 1),
    least squares over the cells; the coefficients in ms and R^2."""
    if not cells:
        raise ValueError(f"fit_line({key}): no cells")
    rows = [[1.0 if c == "one" else float(cell[c]) for c in columns] for cell in cells]
    coef, r2 = lstsq(rows, [cell[key][stat] for cell in cells])
    return {"model": f"{key} = " + " + ".join(columns), "coef_ms": dict(zip(columns, coef)),
            "r2": r2, "points": len(cells)}


def parse_ints(text: str, field: str, low: int, high: int) -> list[int]:
    """Comma-separated integers in ``low..high`` (sorted, unique), or a one-line ValueError
    naming ``field`` and the range."""
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{field}: comma-separated integers in {low}..{high}, got {text!r}"
                         ) from None
    if any(not low <= v <= high for v in vals):
        raise ValueError(f"{field}: integers in {low}..{high}, got {text!r}")
    return vals


def fits_table(families: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """Markdown rows of `fits` results: ``families`` maps a label (e.g. "fits", "fits_cpu")
    to one `fits` output."""
    lines = ["| fit | model | fixed ms | per seq ms | per token ms | SD fixed ms | "
             "per draft pass ms | R^2 |", "|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for fam, by_name in families.items():
        for name, f in by_name.items():
            lines.append(f"| {fam}.{name} | {f['model']} | {f['fixed_ms']:.4f} | "
                         f"{f['per_seq_ms']:.4f} | {f.get('per_token_ms', nan):.4f} | "
                         f"{f.get('sd_fixed_ms', nan):.4f} | "
                         f"{f.get('per_draft_pass_ms', nan):.4f} | {f['r2']:.3f} |")
    return lines


def add_grid_args(ap: Any, *, out: str, batches: str, ks: str, repeats: int,
                  new_tokens: int) -> None:
    """The tiny-model engine benchmarks' shared options (their defaults differ)."""
    ap.add_argument("--out", default=out)
    ap.add_argument("--batches", default=batches)
    ap.add_argument("--ks", default=ks, help="SD draft lengths (empty: AR only)")
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--new-tokens", type=int, default=new_tokens)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tiny-dir", default="/tmp/psdlab_vllm_step_host_tiny")


def check_grid_args(ap: Any, args: Any) -> list[int]:
    """Parse ``--batches`` in place and return ``--ks``; bad values end in ``ap.error``."""
    try:
        args.batches = parse_ints(args.batches, "--batches", 1, 256)
        ks = parse_ints(args.ks, "--ks", 1, 8)
    except ValueError as e:
        ap.error(str(e))
    if not args.batches:
        ap.error("--batches: integers in 1..256")
    if args.repeats < 1 or args.new_tokens < 8 or args.threads < 1:
        ap.error("--repeats >= 1, --new-tokens >= 8, --threads >= 1")
    return ks
