"""What `psdlab policy CONFIG` does once its arguments are parsed: the adaptive policy's
thresholds by running-batch size and, given rates, its simulated comparison with every fixed
configuration (``sim.policy_search``), stamped with the machine, date and commit, written as
JSON when asked, and the text it prints.  The command module only parses and prints."""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Sequence

from psdlab.analysis.json_out import finite_json


def parse_rates(text: str) -> list[float]:
    """'0.5,2' -> [0.5, 2.0]; each a rate > 0 (one-line error naming --rates)."""
    from psdlab.analysis.checks import check_positive
    if not text.strip():
        raise ValueError("--rates: empty; expected comma-separated rates > 0 (e.g. 0.5,2)")
    out = []
    for item in text.split(","):
        try:
            out.append(check_positive("--rates[]", float(item)))
        except ValueError:
            raise ValueError(f"--rates: expected comma-separated rates > 0, got {item!r}") \
                from None
    return out


def policy_command(config: str, rates: str | None = None, max_n: int | None = None,
                   m: int | None = None, requests: int | None = None,
                   output: str | None = None, as_json: bool = False) -> str:
    """The report for ``config`` (``rates``: comma-separated Poisson rates; ``max_n``,
    ``m``, ``requests``: overrides), written to ``output`` as JSON when given; the text to
    print (one JSON object with ``as_json``)."""
    from psdlab.analysis.atomic_write import write_text
    from psdlab.analysis.checks import check_int
    from psdlab.sim.policy_search import format_policy_report, policy_report, policy_thresholds
    from psdlab.sim.sim_config import load_config
    from psdlab.validation.results_file import git_info, machine_info

    from psdlab.analysis.checks import check_output_path
    if output:
        check_output_path("--output", output)       # before the simulations run
    cfg = load_config(config)
    if cfg.adaptive is None:
        cfg = cfg.replace(adaptive={}, server_mode="adaptive")
    if m is not None:
        cfg = cfg.replace(server_m=check_int("--m", m, 1, 4096))
    if requests is not None:
        cfg = cfg.replace(requests=check_int("--requests", requests, 10, 100_000))
    rate_list: Sequence[float] | None = parse_rates(rates) if rates is not None else None
    load0 = list(os.getloadavg())
    report = policy_report(cfg, rate_list)
    if max_n is not None:
        big = cfg.replace(server_m=check_int("--max-n", max_n, 1, 4096))
        report = dataclasses.replace(report, thresholds=policy_thresholds(big))
    doc = {**report.to_dict(), "config": config, "requests": cfg.requests,
           "machine": machine_info(load0),
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "git": git_info()}
    if output:
        write_text(output, finite_json(doc, indent=1, sort_keys=True))
    return finite_json(doc, sort_keys=True) if as_json else format_policy_report(report)
