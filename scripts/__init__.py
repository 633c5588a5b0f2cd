"""The toolkit's scripts (`python scripts/<name>.py ...`), importable as `cader.scripts.<name>` so that tests and
other scripts call their functions instead of loading files by path."""
