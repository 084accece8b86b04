"""`python -m bench`: the `bench` command without its console script (Slurm jobs use it)."""

import sys

from bench.cli import main

sys.exit(main())
