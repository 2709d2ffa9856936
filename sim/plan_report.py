"""What ``psdlab plan`` reports: a list of sections built from the plan's rows, and its files
(CSV, PNG, vLLM k table) written all or none.

Each section builder takes a ``PlanContext`` and returns a ``Section`` (a title, the text the
command prints and the data ``--json`` gives under ``sections``) or None when it has nothing
to say.  ``SECTIONS`` lists them in print order; a new part of the report is one more builder
appended there (``register_section``).

- ``pareto``: the Pareto set (devices vs total sustainable rate), or every row with ``--all``;
- ``best_per_load``: per load level (batch size m) the best fixed configuration of each mode
  and the winner by sustainable rate per device;
- ``vllm_k_table``: vLLM's ``num_speculative_tokens_per_batch_size`` for the SD part
  (``sim.vllm_k_table``);
- ``inputs``: what the figures rest on and how far each is trusted (``sim.plan_inputs``);
- ``answer``: the one configuration to run (mode, k, m, devices, replicas for ``rate``), the
  rate it sustains under the SLO with its interval, the modes within that interval, and the
  least trusted input its figure rests on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from psdlab.sim.capacity import PlanSpec, format_plan_table
from psdlab.sim.plan_rows import PlanRow
from psdlab.sim.sim_config import SimConfig


@dataclass(frozen=True)
class PlanContext:
    cfg: SimConfig
    spec: PlanSpec
    rows: Sequence[Mapping[str, Any]]
    show_all: bool = False
    k_table_drafter: str | None = None
    k_table_by: str = "rate"
    #: the traffic the user must serve (req/s), None: the answer is for one replica
    rate: float | None = None


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    text: str
    data: Any


SectionBuilder = Callable[[PlanContext], "Section | None"]


def slo_text(spec: PlanSpec) -> str:
    return ", ".join(f"{mt}_{st} <= {b:g} s" for mt, st, b in spec.slo)


def check_slo_met(spec: PlanSpec, rows: Sequence[PlanRow]) -> None:
    """A one-line ``slo:`` ValueError when no configuration meets the SLO at any rate tried
    (every row's rate 0), naming the SLO value that came closest at the lowest rate tried."""
    if not rows or any(r.result.max_rate_req_s > 0 for r in rows):
        return
    closest = ""
    for mt, st, bound in spec.slo:
        key = f"{mt}_{st}"
        seen = [(v, r.result) for r in rows for k, v in r.result.slo_lowest
                if k == key and v is not None]
        if seen and min(v for v, _ in seen) > bound:
            value, res = min(seen, key=lambda vr: vr[0])
            label = res.mode if res.mode == "ar" else f"{res.mode} k={res.k}"
            closest = (f" (closest: {key} {value:.4g} s, {label} m={res.m} at the lowest "
                       f"rate tried)")
            break
    raise ValueError(f"slo: no configuration meets {slo_text(spec)} at any request rate "
                     f"tried{closest}")


def pareto_section(ctx: PlanContext) -> Section:
    shown = [dict(r) for r in ctx.rows if r["pareto"] or ctx.show_all]
    title = "all configurations" if ctx.show_all else "Pareto set (devices vs sustainable rate)"
    return Section("pareto", title, format_plan_table([dict(r) for r in ctx.rows],
                                                  only_pareto=not ctx.show_all), shown)


def best_per_load(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per batch size m: the best configuration of each mode (highest one-replica sustainable
    rate; ties: smaller k), the winner over the modes by sustainable rate per device (None
    when no configuration at m meets the SLO) and the modes that tie with it: their rate per
    device within the uncertainty of the winner's (``sim.capacity.rates_tie`` over the
    intervals across seeds)."""
    from psdlab.sim.capacity import rates_tie

    out = []
    for m in sorted({r["m"] for r in rows}):
        per_mode: dict[str, Mapping[str, Any]] = {}
        for r in rows:
            if r["m"] != m:
                continue
            cur = per_mode.get(r["mode"])
            if cur is None or (r["max_rate_req_s"], -r["k"]) > (cur["max_rate_req_s"], -cur["k"]):
                per_mode[r["mode"]] = r
        best = [_best_entry(r) for r in per_mode.values()]
        top = max(best, key=lambda b: b["rate_per_device"])
        winner = top if top["rate_per_device"] > 0 else None
        ties = [] if winner is None else [
            b["mode"] for b in best if b is not winner and b["rate_per_device"] > 0
            and rates_tie(winner["rate_per_device"], winner["rate_per_device_lo"],
                          winner["rate_per_device_hi"], b["rate_per_device"],
                          b["rate_per_device_lo"], b["rate_per_device_hi"])]
        out.append({"m": m, "per_mode": best, "winner": winner, "ties": ties})
    return out


def _best_entry(r: Mapping[str, Any]) -> dict[str, Any]:
    dev = r["devices_per_replica"]
    lo, hi = r.get("max_rate_lo_req_s"), r.get("max_rate_hi_req_s")
    return {"mode": r["mode"], "k": r["k"], "drafter": r["drafter"],
            "devices_per_replica": dev, "max_rate_req_s": r["max_rate_req_s"],
            "rate_per_device": r["max_rate_req_s"] / dev,
            "rate_per_device_lo": None if lo is None else lo / dev,
            "rate_per_device_hi": None if hi is None else hi / dev,
            "bound": r.get("bound"), "tok_s_per_device": r["tok_s_per_device"]}


def _label(b: Mapping[str, Any]) -> str:
    return b["mode"] if b["mode"] == "ar" else f"{b['mode']} k={b['k']}"


def _with_interval(b: Mapping[str, Any]) -> str:
    lo, hi = b["rate_per_device_lo"], b["rate_per_device_hi"]
    span = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
    return f"{_label(b)} {b['rate_per_device']:.3f}{span}"


def recommendation(level: Mapping[str, Any]) -> str:
    """One load level's verdict in words: the winner, or the modes that tie ("SD and PSD tie
    at m = 16"), or that nothing meets the SLO there; rates per device with their intervals."""
    m, winner = level["m"], level["winner"]
    if winner is None:
        return f"m = {m}: no configuration meets the SLO"
    tied = [b for b in level["per_mode"] if b["mode"] in level["ties"]]
    if not tied:
        return f"m = {m}: {_with_interval(winner)} req/s per device is best"
    names = [winner["mode"].upper()] + [b["mode"].upper() for b in tied]
    rates = "; ".join(_with_interval(b) for b in [winner, *tied])
    return (f"{', '.join(names[:-1])} and {names[-1]} tie at m = {m} (req/s per device, "
            f"95% over seeds: {rates})")


def best_per_load_section(ctx: PlanContext) -> Section:
    data = best_per_load(ctx.rows)
    lines = [f"{'m':>5}  {'mode':<7}{'k':>3} {'drafter':<14}{'dev':>4}{'rate req/s':>12}"
             f"{'req/s/dev':>11}{'tok/s/dev':>11}"]
    for level in data:
        for b in level["per_mode"]:
            mark = ("  <- best" if b is level["winner"]
                    else "  <- tie" if b["mode"] in level["ties"] else "")
            lines.append(f"{level['m']:>5}  {b['mode']:<7}{b['k']:>3} {b['drafter'][:13]:<14}"
                         f"{b['devices_per_replica']:>4}{b['max_rate_req_s']:>12.3f}"
                         f"{b['rate_per_device']:>11.3f}{b['tok_s_per_device']:>11.1f}{mark}")
    lines += [recommendation(level) for level in data]
    return Section("best_per_load", "best fixed configuration per load (batch size m; one "
                   "replica; best = highest sustainable rate per device)", "\n".join(lines),
                   data)


def k_table_section(ctx: PlanContext) -> Section | None:
    from psdlab.sim.vllm_k_table import format_k_table, k_table

    if not any(r["mode"] == "sd" for r in ctx.rows):
        return None
    table = k_table(ctx.rows, ctx.k_table_drafter, ctx.k_table_by)
    return Section("vllm_k_table", f"vLLM num_speculative_tokens_per_batch_size (sd, drafter "
                   f"{table.drafter}, by {table.by})", format_k_table(table),
                   {"drafter": table.drafter, "by": table.by,
                    "speculative_config": table.speculative_config(),
                    "choices": [{"m": c.m, "k": c.k, "mode": c.mode, "value": c.value}
                                for c in table.choices]})


def inputs_section(ctx: PlanContext) -> Section:
    """What the plan's figures rest on (``sim.plan_inputs``): measured, probed, preset,
    assumed or the simulator's model."""
    from dataclasses import asdict

    from psdlab.sim.plan_inputs import format_plan_inputs, plan_inputs
    inputs = plan_inputs(ctx.cfg, ctx.spec.drafters, ctx.spec.modes)
    return Section("inputs", "what these figures rest on (measured, probed, preset, assumed, "
                   "model)", format_plan_inputs(inputs), [asdict(x) for x in inputs])


#: how far an input is trusted, most first (``sim.plan_inputs``'s bases)
TRUST_ORDER = ("measured", "probed", "model", "preset", "assumed")


def plan_answer(ctx: PlanContext) -> dict[str, Any] | None:
    """The plan's one answer: over every load level's winner the highest sustainable rate per
    device (ties: the fewer devices, then the smaller m), the modes whose best at that m ties
    with it, replicas for ``ctx.rate``, and the inputs the winner's mode rests on by basis.
    None: no configuration meets the SLO (``check_slo_met`` stops such a plan first)."""
    from psdlab.sim.plan_inputs import plan_inputs
    from psdlab.sim.quick_plan import replicas_for

    levels = [lv for lv in best_per_load(ctx.rows) if lv["winner"] is not None]
    if not levels:
        return None
    top = max(levels, key=lambda lv: (lv["winner"]["rate_per_device"],
                                      -lv["winner"]["devices_per_replica"], -lv["m"]))
    win = top["winner"]
    modes = (win["mode"],) if win["mode"] == "ar" else ("ar", win["mode"])
    inputs = [x for x in plan_inputs(ctx.cfg, ctx.spec.drafters, modes)
              if win["mode"] != "ar" or not x.term.startswith(("drafter", "acceptance"))]
    weakest = max(inputs, key=lambda x: TRUST_ORDER.index(x.basis)
                  if x.basis in TRUST_ORDER else len(TRUST_ORDER))
    replicas = None if ctx.rate is None else replicas_for(ctx.rate, win["max_rate_req_s"])
    return {"mode": win["mode"], "k": win["k"], "m": top["m"], "drafter": win["drafter"],
            "devices_per_replica": win["devices_per_replica"],
            "max_rate_req_s": win["max_rate_req_s"],
            "max_rate_lo_req_s": None if win["rate_per_device_lo"] is None
            else win["rate_per_device_lo"] * win["devices_per_replica"],
            "max_rate_hi_req_s": None if win["rate_per_device_hi"] is None
            else win["rate_per_device_hi"] * win["devices_per_replica"],
            "rate_per_device": win["rate_per_device"], "ties": list(top["ties"]),
            "rate": ctx.rate, "replicas": replicas,
            # the largest m planned, and the SLO did not bind there: a larger m may do better
            "at_edge": top["m"] == max(ctx.spec.ms) and win["bound"] in ("capacity", "mixed"),
            "trust": {b: [x.term for x in inputs if x.basis == b] for b in TRUST_ORDER
                      if any(x.basis == b for x in inputs)},
            "weakest": {"term": weakest.term, "basis": weakest.basis, "value": weakest.value}}


def answer_section(ctx: PlanContext) -> Section | None:
    a = plan_answer(ctx)
    if a is None:
        return None
    what = (a["mode"].upper() if a["mode"] == "ar"
            else f"{a['mode'].upper()} k={a['k']} (drafter {a['drafter']})")
    lo, hi = a["max_rate_lo_req_s"], a["max_rate_hi_req_s"]
    span = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
    lines = [f"run {what} at m = {a['m']} on {a['devices_per_replica']} device"
             f"{'s' if a['devices_per_replica'] > 1 else ''} a replica: "
             f"{a['max_rate_req_s']:.3f}{span} req/s a replica under {slo_text(ctx.spec)} "
             f"({a['rate_per_device']:.3f} req/s per device)"]
    if a["ties"]:
        lines.append(f"within its interval at m = {a['m']}: "
                     f"{', '.join(t.upper() for t in a['ties'])} (a tie: choose by cost)")
    if a["at_edge"]:
        lines.append(f"m = {a['m']} is the largest m planned and the SLO did not bind there "
                     f"(bound capacity or mixed): a larger m may sustain more")
    if a["rate"] is not None:
        lines.append("it sustains nothing under the SLO" if a["replicas"] is None else
                     f"{a['rate']:g} req/s needs {a['replicas']} replica"
                     f"{'s' if a['replicas'] > 1 else ''} "
                     f"({a['replicas'] * a['devices_per_replica']} devices)")
    lines.append("trust: " + "; ".join(f"{b}: {', '.join(terms)}"
                                       for b, terms in a["trust"].items()))
    w = a["weakest"]
    lines.append(f"least trusted: {w['term']} ({w['basis']}: {w['value']})")
    return Section("answer", "the answer", "\n".join(lines), a)


SECTIONS: list[SectionBuilder] = [pareto_section, best_per_load_section, k_table_section,
                                  inputs_section, answer_section]


def register_section(builder: SectionBuilder) -> None:
    """Add a part to the report (printed after the ones already there)."""
    if builder not in SECTIONS:
        SECTIONS.append(builder)


def build_report(ctx: PlanContext) -> list[Section]:
    return [s for s in (b(ctx) for b in SECTIONS) if s is not None]


def format_plan_report(sections: Sequence[Section]) -> str:
    return "\n\n".join(f"== {s.title}\n{s.text}" for s in sections)
