"""Product code never reaches the development package (`cader.dev`, folder devtools/): no import of it anywhere in
a product module, at module level or inside a function, and no module path of it in a string (importlib, ``-m``
command lines, class paths), so a real run cannot end up on a test double or a synthetic generator."""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = {"cader.vlm": "vlm", "cader.train": "train", "cader.calibrate": "calibrate",
           "cader.evaluate": "evaluate", "cader.contracts": "contracts", "cader.cli": "cli"}
DEV = "cader.dev"
DEV_MODULE_PATH = re.compile(rf"^{re.escape(DEV)}(\.\w+)*$")


def is_dev(module: str) -> bool:
    return module == DEV or module.startswith(DEV + ".")


def absolute_module(package: str, module: str | None, level: int) -> str:
    """The absolute name of `from <level dots><module> import ...` written inside `package`."""
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def dev_references(source: str, package: str) -> list[tuple[int, str]]:
    """(line, what) for every reference to cader.dev in `source`, a module of `package`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if is_dev(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(package, node.module, node.level)
            names = [a.name for a in node.names]
            if is_dev(module) or any(is_dev(f"{module}.{name}") for name in names):
                found.append((node.lineno, f"from {'.' * node.level}{node.module or ''} import {', '.join(names)}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DEV_MODULE_PATH.match(node.value):
            found.append((node.lineno, f"the module path {node.value!r}"))
    return found


def package_of(path: Path, folder: str, top: str) -> str:
    """The package a file in a product folder belongs to (the folder's own for its __init__.py)."""
    inner = path.relative_to(REPO / folder).parent.parts
    return ".".join([top, *inner])


def test_no_product_module_imports_the_development_package():
    offences = []
    for top, folder in PRODUCT.items():
        files = sorted((REPO / folder).rglob("*.py"))
        assert files, f"no Python files under {folder}/"
        for path in files:
            for line, what in dev_references(path.read_text(encoding="utf-8"), package_of(path, folder, top)):
                offences.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert not offences, "product code references cader.dev:\n" + "\n".join(offences)


def test_no_shipped_config_names_the_development_package():
    offences = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
                for path in sorted((REPO / "configs").rglob("*"))
                if path.suffix in (".yaml", ".yml", ".json")
                for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if re.search(rf"\b{re.escape(DEV)}\b", line)]
    assert not offences, "configs name cader.dev:\n" + "\n".join(offences)


# Not product code either: the toolkit's scripts (quickstart steps, benches), importable so that tests call their
# functions; they build miniatures and doubles, so they may use cader.dev.
SCRIPTS = {"cader.scripts": "scripts"}


def test_the_product_folders_are_every_package_the_distribution_maps_besides_cader_dev_and_the_scripts():
    tomllib = pytest.importorskip("tomllib")
    mapping = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert mapping == {**PRODUCT, DEV: "devtools", **SCRIPTS}


@pytest.mark.parametrize("source, package, expected", [
    ("import cader.dev.tiny", "cader.vlm", [(1, "import cader.dev.tiny")]),
    ("from cader.dev.synthetic.media import write_video", "cader.evaluate",
     [(1, "from cader.dev.synthetic.media import write_video")]),
    ("from cader import dev", "cader.cli", [(1, "from cader import dev")]),
    ("def f():\n    from cader.dev import scripted", "cader.evaluate.benchmarks",
     [(2, "from cader.dev import scripted")]),
    ("from .. import dev", "cader.evaluate", [(1, "from .. import dev")]),
    ("from ...dev import judge_double", "cader.evaluate.judge", [(1, "from ...dev import judge_double")]),
    ("import importlib\nimportlib.import_module('cader.dev.tiny')", "cader.vlm",
     [(2, "the module path 'cader.dev.tiny'")]),
    ("cmd = ['python', '-m', 'cader.dev.judge_double']", "cader.evaluate",
     [(1, "the module path 'cader.dev.judge_double'")]),
    # not the development package: a product sibling, a relative import inside the product, prose about it
    ("from cader.evaluate.judge.providers import LOOPBACK_MODEL", "cader.evaluate", []),
    ("from . import providers", "cader.evaluate.judge", []),
    ("from .. import device", "cader.evaluate", []),
    ('"""Tests use cader.dev.judge_double instead of a real judge."""', "cader.evaluate", []),
])
def test_every_way_of_reaching_the_development_package_is_found(source, package, expected):
    assert dev_references(source, package) == expected


# ---- the import graph of every shipped package: contracts depend on no stage, and no two modules import each other
PACKAGES = {**PRODUCT, DEV: "devtools", **SCRIPTS}
STAGES = ("cader.vlm", "cader.train", "cader.calibrate", "cader.evaluate", "cader.cli")


def module_names() -> dict[str, Path]:
    names = {}
    for top, folder in PACKAGES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            names[".".join([top, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return names


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an import anywhere in `source` (function bodies included) names, with its parent packages
    (importing a.b.c runs a/__init__ and a/b/__init__ first); `from m import n` also names m.n (a submodule or not)."""
    named = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(package, node.module, node.level)
            named.add(module)
            named.update(f"{module}.{alias.name}" for alias in node.names)
    return {".".join(name.split(".")[:i]) for name in named for i in range(2, name.count(".") + 2)}


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    graph = {}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = imported_modules(path.read_text(encoding="utf-8"), package)
        # a module's own parent packages are already being imported when it runs: not an edge
        graph[module] = {m for m in imported if m in names and m != module and not module.startswith(m + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other_even_from_inside_a_function():
    found = cycles(import_graph())
    assert not found, "import cycles (break them with a shared module the two both import):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_contracts_depend_on_no_stage():
    graph = import_graph()
    offences = [f"{module} imports {dep}" for module, deps in graph.items() if module.startswith("cader.contracts")
                for dep in sorted(deps) if dep.startswith(STAGES)]
    assert not offences, "contracts are what stages share; they import none of them:\n" + "\n".join(offences)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycles_are_the_components_of_more_than_one_module(graph, expected):
    assert cycles(graph) == expected


def test_a_function_level_import_and_the_parent_packages_are_edges():
    source = "def f():\n    from cader.evaluate.judge import providers\n"
    assert imported_modules(source, "cader.evaluate.judge") == {
        "cader.evaluate", "cader.evaluate.judge", "cader.evaluate.judge.providers"}
