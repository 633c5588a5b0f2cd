"""Performance checks (`python scripts/bench/<name>.py`, all of them: `run_all.py`), importable as
`cader.scripts.bench.<name>`."""
