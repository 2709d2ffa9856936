"""`python -m psdlab` runs the console script."""
import sys

from psdlab.cli import main

sys.exit(main())
