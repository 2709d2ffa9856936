"""psdlab's front door: the `psdlab` console script.  No logic lives here, only argument parsing
and calls into analysis/, sim/, runtime/, validation/ and paper_figs/."""
__version__ = "0.1.0"
