"""`python evaluate/judge.py ...` (`cader judge`, `cader compare`): the AgentVidBench trajectory judge and paired
statistics. The code is `cader.evaluate.judge.cli`; this file only runs it, since a module here cannot be imported
under the name of the `judge` package beside it."""

import sys

from cader.evaluate.judge.cli import main

if __name__ == "__main__":
    sys.exit(main())
