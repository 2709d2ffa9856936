"""What `psdlab systems check|gain` does once its arguments are parsed: the system-level public
points priced through the simulator (``sim.system_check``) or the paper settings' PSD/SD gains
(``paper_figs.settings_gain``), the files written with ``-o`` and the text it prints.  The
command module only parses and prints."""
from __future__ import annotations

import json


def systems_command(what: str, *, out: str | None = None, quick: bool = False, seed: int = 0,
                    points: str | None = None, as_json: bool = False) -> tuple[str, list[str]]:
    """``what`` is check or gain; (the text for stdout, the ``wrote PATH`` lines for
    stderr)."""
    wrote: list[str] = []
    if what == "gain":
        if points:
            raise ValueError("--points: only with 'check'")
        from psdlab.paper_figs import settings_gain as sg
        gain = sg.run_settings_gain(quick=quick, seed=seed)
        text, doc = sg.settings_gain_markdown(gain), gain.to_dict()
        if out:
            wrote = [f"wrote {path}" for path in sg.write_settings_gain(gain, out)]
    else:
        if quick:
            raise ValueError("--quick: only with 'gain'")
        from psdlab.sim import system_check as sc
        command = sc.COMMAND if not points else (
            f"psdlab systems check --points {points}" + (f" -o {out}" if out else ""))
        res = sc.check(sc.load_points(points), seed=seed, command=command)
        text, doc = sc.system_check_markdown(res), res.to_dict()
        if out:
            wrote = [f"wrote {path}" for path in sc.write_system_check(res, out)]
    return (json.dumps(doc, sort_keys=True) if as_json else text), wrote
