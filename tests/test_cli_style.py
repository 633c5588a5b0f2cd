"""One command-line style: train/sft.py (and the frame-cache fill, which takes its flags) is a LightningCLI; every
other command is jsonargparse over the function it runs (`cader.cli.function_cli` for the stages, `jsonargparse.CLI`
for the scripts). No module parses argv by hand: no stdlib argparse parser, no flag peeled off or subcommand popped
from sys.argv, no re-exec protocol of positional words; a script's `__main__` block only hands over to its CLI."""

import ast
import inspect
from pathlib import Path

import pytest
from cader.cli.function_cli import function_parser
from cader.cli.main import COMMANDS, load_script

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("vlm", "train", "calibrate", "evaluate", "contracts", "cli", "devtools", "scripts")

# The modules that may read sys.argv, and why: none of them parses it.
READS_ARGV = {
    "contracts/provenance.py": "records the command line in the provenance block",
    "train/cli.py": "LightningCLI reads sys.argv too; it is set aside while an explicit argv is parsed",
    "evaluate/run.py": "the default of main(argv); the launcher hands the same words to its ranks",
    "cli/main.py": "the default of main(argv): the subcommand is the first word",
}


def modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def is_sys_argv(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "argv" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


# Modules that run before cader's requirements are installed (on the bare interpreter an install script is handed),
# so stdlib argparse is their only parser.
STDLIB_ONLY = {"scripts/side_venv.py": "the install scripts run it with the main interpreter, which may hold nothing yet"}


def style_problems(source: str, name: str) -> list[str]:
    """What in `source` (the module `name`) parses a command line other than through its CLI."""
    tree = ast.parse(source)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "argparse" \
                and not node.attr.endswith("HelpFormatter") and name not in STDLIB_ONLY:
            problems.append(f"{name}:{node.lineno}: argparse.{node.attr} (build the parser with jsonargparse)")
        if is_sys_argv(node) and name not in READS_ARGV:
            problems.append(f"{name}:{node.lineno}: reads sys.argv (let the CLI parse it)")
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and \
                isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            problems += [f"{name}:{stmt.lineno}: `{ast.unparse(stmt)}` in the __main__ block"
                         for stmt in node.body if not hands_over(stmt)]
    return problems


def hands_over(stmt: ast.stmt) -> bool:
    """An import, a logging set-up, or one call of the module's CLI: `main()`, `CLI(...)`, `sys.exit(...)` of one."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return False
    call = stmt.value
    text = ast.unparse(call.func)
    if text == "sys.exit" and len(call.args) == 1 and isinstance(call.args[0], ast.Call):
        call, text = call.args[0], ast.unparse(call.args[0].func)
    if text == "logging.basicConfig":
        return True
    return text in ("main", "CLI") and not any(is_sys_argv(n) for n in ast.walk(call))


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_no_module_parses_argv_by_hand(path):
    assert style_problems(path.read_text(encoding="utf-8"), rel(path)) == []


def test_the_style_check_catches_each_hand_parser():
    peeled = "import sys\nworkers = sys.argv.pop(sys.argv.index('--workers') + 1)\n"
    stdlib = "import argparse\nparser = argparse.ArgumentParser()\n"
    popped = ("if __name__ == '__main__':\n    mode = sys.argv.pop(1)\n    CLI(modes[mode])\n")
    worker = "if __name__ == '__main__':\n    if sys.argv[1:2] == ['rank']:\n        run_rank(*sys.argv[2:])\n"
    assert len(style_problems(peeled, "a.py")) == 2
    assert [p.split(": ", 1)[1] for p in style_problems(stdlib, "a.py")] == [
        "argparse.ArgumentParser (build the parser with jsonargparse)"]
    assert any("in the __main__ block" in p for p in style_problems(popped, "a.py"))
    assert any("in the __main__ block" in p for p in style_problems(worker, "a.py"))
    assert style_problems("import argparse\nclass F(argparse.RawDescriptionHelpFormatter): pass\n", "a.py") == []
    assert style_problems("if __name__ == '__main__':\n    sys.exit(CLI(main))\n", "a.py") == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_is_a_main_of_argv_and_prog(name):
    stage = load_script(COMMANDS[name])
    assert list(inspect.signature(stage.main).parameters) == ["argv", "prog"]


def sample(root: str, files: list[str], out: str | None = None, level: float = 0.05, tags: list[str] = (),
           needed: str = "", extra: list[str] | None = None) -> None:
    """Stand-in stage.

    Args:
        root: the run folder
        files: the inputs
        out: where to write
        level: the level
        tags: some tags
        needed: given by a caller
        extra: more files, if any
    """


def test_a_function_parser_takes_positionals_several_optional_and_the_signatures_flags():
    parser = function_parser(sample, "cader sample", positional=("root",), several=("files", "extra"),
                             optional=("needed",))
    args = parser.parse_args(["R", "--files", "a.jsonl", "b.jsonl", "--level", "0.1"]).as_dict()
    args.pop("config")
    assert args == {"root": "R", "files": ["a.jsonl", "b.jsonl"], "out": None, "level": 0.1, "tags": [],
                    "needed": None, "extra": None}
    assert parser.parse_args(["R", "--files", "a", "--extra", "c", "d"]).extra == ["c", "d"]
    text = parser.format_help()
    assert "the inputs" in text and "some tags" in text and "(required, unless a subcommand runs)" in text
    assert "Stand-in stage." in text
    with pytest.raises(SystemExit):
        parser.parse_args(["R"])   # --files is required: `files` has no default
    trailing = function_parser(sample, positional=("root", "files"))
    assert trailing.parse_args(["R", "a", "b"]).files == ["a", "b"]
    with pytest.raises(TypeError, match="no parameter 'nope'"):
        function_parser(sample, positional=("nope",))
