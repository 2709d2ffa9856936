"""JSON that every reader can parse: a command's ``--json`` output never carries NaN or
Infinity (invalid JSON).  ``finite_json`` writes a non-finite number as null and says why under
the object's ``nulls`` key, one line per value (``rows[0].paper_bound: nan, written as
null``)."""
from __future__ import annotations

import json
import math
from typing import Any


def _finite(value: Any, where: str, nulls: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        nulls.append(f"{where}: {value} (not finite), written as null")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), nulls)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", nulls) for i, v in enumerate(value)]
    return value


def finite_json(obj: Any, **dumps_kw: Any) -> str:
    """``json.dumps(obj, **dumps_kw)`` with every NaN / Infinity (numpy floats included, as
    floats) written as null; a top-level object then gains ``nulls``, the reasons.  Output
    without such values is what ``json.dumps`` writes."""
    nulls: list[str] = []
    clean = _finite(json.loads(json.dumps(obj, default=dumps_kw.pop("default", None))),
                    "", nulls)
    if nulls and isinstance(clean, dict):
        clean = {**clean, "nulls": [*clean.get("nulls", []), *nulls]}
    return json.dumps(clean, allow_nan=False, **dumps_kw)
