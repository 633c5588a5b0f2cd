"""``cader``: one command with a subcommand per stage (filled in by the CLI work of issue 16)."""


def main() -> None:
    raise SystemExit("cader: not implemented yet")
