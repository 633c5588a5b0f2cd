"""README.md stays a five-minute page and the docs stay true: the set-up commands first and exact, every link
resolves, no internal shorthand, and every flag a documented command line uses is one its program accepts."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cader.cli.main import main

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# the README's first three lines of code: .ci/run runs the second, tests/conftest.py runs the third
SETUP = ["python3 -m venv .venv && . .venv/bin/activate && bash scripts/install.sh", "python -m pytest -q",
         ("python scripts/make_tiny_model.py --out runs/tiny/model && python scripts/make_tiny_model.py "
          "--out runs/tiny/verifier --role verifier && python scripts/make_synthetic_data.py "
          "--out runs/tiny/data && python train/sft.py --config configs/train/cot_mix_tiny.yaml")]
MEASURED = REPO / "docs" / "measured"


def pages() -> list[Path]:
    return [README, *sorted(p for p in (REPO / "docs").rglob("*.md") if MEASURED not in p.parents)]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def test_readme_is_short_and_starts_with_the_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 120, "README.md is for a five-minute read: move detail to docs/"
    assert text.index("```bash") < text.index("\n## "), "the set-up commands come first"
    assert bash_blocks(text)[0].splitlines() == SETUP


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_docs_speak_of_code_and_papers_only(page):
    text = page.read_text(encoding="utf-8")
    for phrase in (r"\bissues? #?\d+", r"embedded default"):
        found = re.search(phrase, text, re.IGNORECASE)
        assert not found, f"{page.relative_to(REPO)}: {found.group(0)!r}; say what the code or the paper says"


def test_the_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    for page in pages()[1:]:
        rel = page.relative_to(REPO).as_posix()
        if rel.startswith("docs/guides/") or rel.count("/") == 1:
            assert f"]({rel})" in text, f"README.md does not link {rel}"


# The documented programs whose flags are a `cader` subcommand's (the other scripts are asked for their own --help).
SUBCOMMAND = {"train/sft.py": "sft", "evaluate/run.py": "eval", "calibrate/fit.py": "calibrate",
              "evaluate/judge.py": "judge", "evaluate/judge.py compare": "compare", "evaluate/view.py": "view",
              "evaluate/lmms/export.py": "export-lmms", "calibrate/transfer.py": "transfer"}
EXTERNAL = ("pip", "bash", "export", "cp", "huggingface-cli", "lmms-eval", "ffmpeg", "du", "cd", "git", "grep",
            "mutmut", "ruff", "chromium")


def command_lines(text: str) -> list[str]:
    """The command lines of a page: its bash blocks (continuations joined, comments dropped, split at && ; |) and
    its inline code spans that start with `python ` or `cader `."""
    lines = []
    for block in bash_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            lines += [part.strip() for part in re.split(r"&&|;|\|", line) if part.strip()]
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    lines += [span for span in re.findall(r"`([^`\n]+)`", prose) if re.match(r"(python|cader) \S", span)]
    return lines


def program_and_flags(line: str) -> tuple[str, list[str]] | None:
    """(program, its --flags) of one command line: `cader SUB` or a script run by python (the program is the
    subcommand's name or the script's path), or None for a command of another tool."""
    try:
        words = shlex.split(line.replace("[", " ").replace("]", " "))
    except ValueError:
        words = line.split()
    while words and re.match(r"[A-Z_]+=", words[0]):  # environment assignments
        words = words[1:]
    if not words or words[0] in EXTERNAL:
        return None
    if words[0] == "cader" and len(words) > 1:
        program, rest = words[1], words[2:]
    elif words[0].endswith("python") and len(words) > 1 and words[1].endswith(".py"):
        program, rest = words[1], words[2:]
        if rest and re.fullmatch(r"[a-z][a-z_-]*", rest[0]):  # a subcommand of the script (judge.py compare)
            program, rest = f"{program} {rest[0]}", rest[1:]
    else:
        return None
    if not re.fullmatch(r"[a-z][\w./ -]*", program):  # a placeholder: `cader <subcommand> --help`
        return None
    # a quoted word holding spaces is a value (--extra_args "--calibration C" passes flags on to another program)
    flags = [w.split("=")[0] for w in rest if w.startswith("--") and w != "--" and " " not in w]
    return program, [f.removesuffix(".*") for f in flags if not f.endswith("*")]


def documented_flags() -> dict[str, dict[str, set[str]]]:
    """{program: {flag: {pages that use it}}} over README.md and docs/."""
    found: dict[str, dict[str, set[str]]] = {}
    for page in pages():
        for line in command_lines(page.read_text(encoding="utf-8")):
            parsed = program_and_flags(line)
            if parsed:
                program, flags = parsed
                for flag in flags:
                    found.setdefault(program, {}).setdefault(flag, set()).add(page.relative_to(REPO).as_posix())
    return found


def test_command_lines_are_read_as_a_shell_reads_them():
    text = ("```bash\nOMP_NUM_THREADS=1 python evaluate/run.py --model m \\\n    --out o   # --not_a_flag\n"
            "python evaluate/judge.py compare a b --n_resamples 9 && cader view r --thumbs=4\npip install -e .\n"
            "python scripts/bench/vllm_parity.py records --extra_args \"--calibration c.json\"\n```\n"
            "and `cader plan --config cot_mix` in prose, `--alone` not\n")
    parsed = [program_and_flags(line) for line in command_lines(text)]
    assert parsed == [("evaluate/run.py", ["--model", "--out"]), ("evaluate/judge.py compare", ["--n_resamples"]),
                      ("view", ["--thumbs"]), None, ("scripts/bench/vllm_parity.py records", ["--extra_args"]),
                      ("plan", ["--config"])]
    assert program_and_flags("cader <subcommand> --help") is None


def accepted_flags(program: str, capsys) -> set[str]:
    """The flags `cader <program> --help` lists."""
    with pytest.raises(SystemExit):
        main([program, "--help"])
    return set(re.findall(r"(?<![\w-])(--[\w.-]+)", capsys.readouterr().out))


def runs_as_subcommand(program: str) -> bool:
    return program in SUBCOMMAND or ".py" not in program


def test_every_flag_of_a_documented_cader_command_exists(capsys):
    wrong = []
    for program, flags in sorted(documented_flags().items()):
        if not runs_as_subcommand(program):
            continue  # scripts of their own: test_every_flag_of_a_documented_script_exists
        accepted = accepted_flags(SUBCOMMAND.get(program, program), capsys)
        wrong += [f"{program} {flag} (in {', '.join(sorted(where))})" for flag, where in flags.items()
                  if flag not in accepted]
    assert not wrong, "documented flags the program does not accept:\n" + "\n".join(wrong)


@pytest.mark.slow
def test_every_flag_of_a_documented_script_exists():
    wrong = []
    for program, flags in sorted(documented_flags().items()):
        if runs_as_subcommand(program):
            continue
        script, *subcommand = program.split(" ")
        proc = subprocess.run([sys.executable, str(REPO / script), *subcommand, "--help"], cwd=REPO,
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, f"{program} --help: {proc.stderr[-2000:]}"
        accepted = set(re.findall(r"(?<![\w-])(--[\w.-]+)", proc.stdout))
        wrong += [f"{program} {flag} (in {', '.join(sorted(where))})" for flag, where in flags.items()
                  if flag not in accepted]
    assert not wrong, "documented flags the script does not accept:\n" + "\n".join(wrong)
