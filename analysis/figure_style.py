"""The figures' shared style, one place for every figure psdlab draws (``psdlab plan``'s
frontier, the validation report, ``psdlab frontier`` and the paper figures): the resolution
and each serving mode's marker.  Plain values, no matplotlib: each figure module draws."""
from __future__ import annotations

#: dots per inch of every saved PNG
FIGURE_DPI = 110
#: a serving mode's marker in every figure
MODE_MARKERS: dict[str, str] = {"sd": "s", "sd-sep": "D", "psd": "o", "ar": "^"}
