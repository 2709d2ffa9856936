"""psdlab's version, in the bottom layer so every layer can write it into a trace's ``run``
record without importing the layers above (pyproject.toml's ``version`` must equal it: tested)."""
__version__ = "0.1.0"
