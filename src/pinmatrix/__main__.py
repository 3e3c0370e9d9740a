"""``python -m pinmatrix``: the same command line as the ``pinmatrix`` script."""

import sys

from pinmatrix.cli import main

sys.exit(main())
