"""``python -m paper_figs OUTDIR [--only ...] [--quick] [--traces DIR] [--validation FILE]``."""
import sys

from paper_figs.cli import main

sys.exit(main())
