"""psdlab's front door: the `psdlab` console script.  No logic lives here, only argument parsing
and calls into analysis/, sim/, runtime/, validation/ and paper_figs/."""
from psdlab.analysis.version import __version__

__all__ = ["__version__"]
