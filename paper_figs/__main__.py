"""``python -m psdlab.paper_figs OUTDIR [--only ...] [--quick] [--traces DIR]
[--validation FILE]``."""
import sys

from psdlab.paper_figs.cli import main

sys.exit(main())
