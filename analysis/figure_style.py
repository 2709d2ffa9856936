"""The figures' shared style, one place for every figure psdlab draws (``psdlab plan``'s
frontier, the validation report, ``psdlab frontier`` and the paper figures): the resolution
and each serving mode's marker and colour (the registry's, ``analysis.modes``).  Plain values,
no matplotlib: each figure module draws."""
from __future__ import annotations

from .modes import MODES

#: dots per inch of every saved PNG
FIGURE_DPI = 110
#: a serving mode's marker in every figure (``ModeSpec.marker``; modes without one have none)
MODE_MARKERS: dict[str, str] = {s.name: s.marker for s in MODES if s.marker is not None}
#: a serving mode's colour in every figure (``ModeSpec.color``)
MODE_COLORS: dict[str, str] = {s.name: s.color for s in MODES if s.color is not None}
