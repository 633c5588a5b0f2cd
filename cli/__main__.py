"""`python -m cader.cli ...`: the `cader` command, for an environment without the console script on PATH."""
import sys

from cader.cli.main import main

sys.exit(main())
