"""`cader compare A B ...`: paired statistics of systems on the same questions (evaluate/judge.py compare).

Its own entry so that `cader compare --help` names `cader compare`, not the judge's command line it is a
subcommand of."""

from cader.evaluate.judge.cli import compare_main as main

__all__ = ["main"]
