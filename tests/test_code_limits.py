"""The size limits of the product code (every .py, .sh and .js outside tests/ and docs/): no file over 500 lines,
no function over 100 lines, none taking more than 12 parameters (a method's self or cls aside; *args and **kwargs
count one each). A stage with more options takes them as a few dataclasses (calibrate_predictions's Rule, ...).

The same walk counts product lines, so that a change can say what it added against what it removed:

    python tests/test_code_limits.py                                    # per top-level folder, working tree
    python tests/test_code_limits.py --rev HEAD --folders '[calibrate]'  # at a commit; files of those folders
"""

import ast
import subprocess
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 500, 100, 12
def is_product(path: str) -> bool:
    return path.endswith((".py", ".sh", ".js")) and not path.startswith(("tests/", "docs/"))


def product_files(rev: str | None = None) -> dict[str, str]:
    """{path: text} of the product files at git revision `rev`, or in the working tree (tracked and untracked
    files git does not ignore; every file outside a git checkout)."""
    git = ["git", "-C", str(REPO)]
    if rev is not None:
        names = subprocess.run([*git, "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        return {n: subprocess.run([*git, "show", f"{rev}:{n}"], capture_output=True, text=True, check=True,
                                  errors="replace").stdout for n in names if is_product(n)}
    listed = subprocess.run([*git, "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True,
                            text=True, check=False)
    names = listed.stdout.splitlines() if listed.returncode == 0 else \
        [str(p.relative_to(REPO)) for p in REPO.rglob("*") if ".venv" not in p.parts and p.is_file()]
    return {n: (REPO / n).read_text(encoding="utf-8", errors="replace") for n in names
            if is_product(n) and (REPO / n).is_file()}


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args]
    receiver = bool(named) and named[0].arg in ("self", "cls")
    return len(named) - receiver + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def function_problems(path: str, text: str) -> list[str]:
    """One line per function of `text` that is too long or takes too many parameters."""
    problems = []
    for node in ast.walk(ast.parse(text, filename=path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                problems.append(f"{path}:{node.lineno} {node.name}: {length} lines > {MAX_FUNCTION_LINES}")
            if parameters(node) > MAX_PARAMETERS:
                problems.append(f"{path}:{node.lineno} {node.name}: {parameters(node)} parameters > "
                                f"{MAX_PARAMETERS}")
    return problems


def file_problems(files: dict[str, str]) -> list[str]:
    return [f"{path}: {len(text.splitlines())} lines > {MAX_FILE_LINES}" for path, text in sorted(files.items())
            if len(text.splitlines()) > MAX_FILE_LINES]


def test_no_product_file_is_over_500_lines():
    assert file_problems(product_files()) == []


def test_no_function_is_over_100_lines_or_takes_more_than_12_parameters():
    problems = [p for path, text in sorted(product_files().items()) if path.endswith(".py")
                for p in function_problems(path, text)]
    assert problems == [], "\n".join(problems)


def test_the_checks_catch_what_they_look_for():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long_one = f"def long():\n{body}"
    wide = "def wide(" + ", ".join(f"a{i}" for i in range(MAX_PARAMETERS)) + ", *rest):\n    pass\n"
    method = "class C:\n    def m(self, " + ", ".join(f"a{i}" for i in range(MAX_PARAMETERS)) + "):\n        pass\n"
    assert [p.split(": ", 1)[1] for p in function_problems("x.py", long_one + wide + method)] == \
        [f"{MAX_FUNCTION_LINES + 1} lines > {MAX_FUNCTION_LINES}", f"{MAX_PARAMETERS + 1} parameters > 12"]
    assert file_problems({"a.sh": "\n" * MAX_FILE_LINES, "b.js": "\n" * (MAX_FILE_LINES + 1)}) == \
        [f"b.js: {MAX_FILE_LINES + 1} lines > {MAX_FILE_LINES}"]
    assert is_product("calibrate/fit.py") and is_product("scripts/quickstart.sh")
    assert not is_product("tests/test_cli.py") and not is_product("docs/x.py") and not is_product("README.md")


def lines_per_folder(files: dict[str, str], folders: list[str]) -> Counter:
    """Product lines per top-level folder, or, with `folders`, per file of those folders."""
    if not folders:
        return Counter({folder: sum(len(t.splitlines()) for p, t in files.items() if p.split("/")[0] == folder)
                        for folder in {p.split("/")[0] for p in files}})
    return Counter({p: len(t.splitlines()) for p, t in files.items()
                    if any(p == f.rstrip("/") or p.startswith(f.rstrip("/") + "/") for f in folders)})


def main(folders: list[str] | None = None, rev: str | None = None) -> None:
    """Print the product lines per top-level folder, or per file of `folders`, and their total.

    Args:
        folders: count these folders' files only, one line each
        rev: a git revision to count instead of the working tree
    """
    counts = lines_per_folder(product_files(rev), folders or [])
    for name, n in sorted(counts.items()):
        print(f"{n:7d}  {name}")
    print(f"{sum(counts.values()):7d}  total")


if __name__ == "__main__":
    from jsonargparse import CLI

    CLI(main, as_positional=False)
