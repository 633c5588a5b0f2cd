"""The paper-scale walkthrough as a script: docs and test read the same command lines, so they cannot drift.

Every bash block of docs/walkthrough.md and of README.md's "At paper scale" section carries a marker comment:
`walkthrough-test: run` (the slow test below runs its commands, in page order, in one working folder), `skip: WHY;
tests/test_x.py` (what it needs that CI lacks, and the test that covers it instead), or, for the README's block,
`same as docs/walkthrough.md` (each of its commands is one of the walkthrough's run commands, in the same order).

The run substitutes only what the walkthrough's dry-run table names, each with a flag: the model (the tiny Qwen3-VL
of tests/conftest.py for both Qwen3-VL models), the data roots (a small synthetic release), the device (the CPU
route), the judge endpoint (the loopback double, which speaks the paper judge's Messages API too; a dummy key) and the
size (`--trainer.max_steps 2`, `--limit 4`, 16 new tokens, since the random-weight model never stops on its own),
lmms-eval's included (its `--device`, `--limit`, and `--model_args` items). Outputs chain as written: what step 1
exports is what step 2 and lmms-eval load, step 2's calibration is what steps 3-5 use. The lmms-eval block needs
.venv-lmms (CI has it); without it every other block runs and the test reports itself skipped.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_train_zero3_multiprocess import _clean_environ

REPO = Path(__file__).resolve().parents[1]
WALKTHROUGH = REPO / "docs" / "walkthrough.md"
README = REPO / "README.md"
MARKED_BLOCK = re.compile(r"<!-- walkthrough-test: (.*?) -->\n```bash\n(.*?)```", re.DOTALL)
DRY_RUN_HEADING = "## Without a GPU: the dry run"

# the placeholders of the paper's world, by the name the dry-run table gives each substitute
PLACEHOLDERS = {"release_root": "/data/LongVT-Parquet", "media_root": "/data/LongVT-Source",
                "data_root": "/data/benchmarks", "verifier": "Qwen/Qwen3-VL-4B-Instruct",
                "judge_url": "http://HOST:8000/v1", "judge_model": "NAME"}


# ---- reading the pages ----

def paper_scale_section(readme: str) -> str:
    """README.md's "## At paper scale" section (up to the next level-2 heading)."""
    start = readme.index("## At paper scale")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end > 0 else None]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def marked_blocks(text: str) -> list[tuple[str, str]]:
    """(marker, body) of each bash block preceded by a walkthrough-test marker, in page order."""
    return MARKED_BLOCK.findall(text)


def commands(body: str) -> list[str]:
    """The command lines of a block: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    lines = [re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line]


def expand_ellipsis(lines: list[str]) -> list[str]:
    """`PROGRAM ... FLAGS` with `...` replaced by the flags of the block's first line running PROGRAM (the
    walkthrough's convention); a flag given again after it wins, as the programs' parsers take the last one."""
    full: dict[str, str] = {}
    out = []
    for line in lines:
        head, sep, tail = line.partition(" ... ")
        if sep and head in full:
            line = f"{head} {full[head]} {tail}"
        elif " " in line:
            program, rest = line.split(" ", 2)[:2], line.split(" ", 2)[2:]
            full.setdefault(" ".join(program), rest[0] if rest else "")
        out.append(line)
    return out


def simple_commands(line: str) -> list[str]:
    return [part.strip() for part in line.split("&&")]


def normalized(line: str) -> list[str]:
    return [" ".join(shlex.split(part)) for part in simple_commands(line)]


# ---- the substitutions ----

def with_substitutes(word: str, subs: dict[str, str]) -> str:
    """`word` with each placeholder that stands as a whole value replaced: the word itself, or a `key=value` item of
    lmms-eval's `--model_args`, or the start of a path under it."""
    for key, placeholder in PLACEHOLDERS.items():
        word = re.sub(rf"(^|[=,]){re.escape(placeholder)}(?=$|[/,])", lambda m, key=key: m.group(1) + subs[key], word)
    return word


def shell_word(word: str) -> str:
    """A word for bash: as the docs wrote it where bash reads it as meant (a `$VAR`, a glob), else quoted."""
    return word if re.fullmatch(r"[\w@%+=:,./*$-]+", word) else shlex.quote(word)


def dry_run_flags(program: str, words: list[str], subs: dict[str, str]) -> list[str]:
    """The words of a command running `program` with the dry-run table's flags added for that program."""
    if program in ("train/sft.py", "scripts/fill_frame_cache.py"):
        first_config = words.index("--config") + 2
        return [*words[:first_config], "--config", subs["cpu_route"], *words[first_config:],
                "--model.model_path", subs["model"], "--trainer.max_steps", "2"]
    if program == "evaluate/run.py":
        return [*words, "--device", "cpu", "--limit", "4", "--max_new_tokens_propose", "16",
                "--max_new_tokens_answer", "16"]
    if program == "evaluate/judge.py" and "compare" not in words and "--base_url" not in words:
        return [*words, "--base_url", subs["judge_url"], "--model", subs["judge_model"]]   # the paper's judge
    if program == "lmms-eval":
        model_args = words.index("--model_args") + 1
        words = [*words]
        words[model_args] += ",max_new_tokens_propose=16,max_new_tokens_answer=16"
        return [*words, "--device", "cpu", "--limit", "4"]
    if program == "export":
        return [re.sub(r"^(\w+_API_KEY)=\.\.\.$", lambda m: f"{m.group(1)}={subs['api_key']}", w) for w in words]
    return words


def substitute(command: str, subs: dict[str, str]) -> str:
    """One simple command with the paper's placeholders replaced by `subs` (same keys as PLACEHOLDERS plus
    "model", "cpu_route", "api_key") and the dry run's flags added for the program it runs."""
    words = [with_substitutes(w, subs) for w in shlex.split(command)]
    n_env = next((i for i, w in enumerate(words) if not re.match(r"[A-Za-z_]\w*=", w)), len(words))
    env, rest = words[:n_env], words[n_env:]
    program = next((w for w in rest if w.endswith(".py")), Path(rest[0]).name if rest else "")
    rest = dry_run_flags(program, rest, subs)
    if rest and rest[0] == "python":   # this interpreter
        rest[0] = sys.executable
    return " ".join(shell_word(w) for w in env + rest)


def dry_run_script(blocks: list[tuple[str, str]], subs: dict[str, str]) -> str:
    """A bash script of every run-marked block's commands, substituted, each announced before it runs."""
    lines = ["set -euo pipefail"]
    for marker, body in blocks:
        if marker != "run":
            continue
        for line in expand_ellipsis(commands(body)):
            command = " && ".join(substitute(part, subs) for part in simple_commands(line))
            lines += [f"echo {shlex.quote('### ' + ' '.join(line.split()))}", command]
    return "\n".join(lines) + "\n"


# ---- fast checks: the pages are marked, the README repeats the walkthrough, the flags are documented ----

def test_every_block_is_marked_and_every_skip_names_its_need_and_its_test():
    walkthrough = WALKTHROUGH.read_text(encoding="utf-8")
    section = paper_scale_section(README.read_text(encoding="utf-8"))
    for name, text in (("docs/walkthrough.md", walkthrough), ("README.md (At paper scale)", section)):
        marked = marked_blocks(text)
        assert len(marked) == len(bash_blocks(text)), f"{name}: a bash block lacks its walkthrough-test marker"
        for marker, _ in marked:
            if marker.startswith("skip:"):
                tests = re.findall(r"tests/test_\w+\.py", marker)
                assert tests and all((REPO / t).is_file() for t in tests), f"{name}: {marker!r} names no test"
            else:
                assert marker in ("run", "same as docs/walkthrough.md"), f"{name}: unknown marker {marker!r}"
    assert sum(m == "run" for m, _ in marked_blocks(walkthrough)) >= 6


def test_the_readme_paper_scale_commands_are_walkthrough_commands_in_the_same_order():
    run = [c for m, body in marked_blocks(WALKTHROUGH.read_text(encoding="utf-8")) if m == "run"
           for line in commands(body) for c in normalized(line)]
    readme = [c for _, body in marked_blocks(paper_scale_section(README.read_text(encoding="utf-8")))
              for line in commands(body) for c in normalized(line)]
    assert len(readme) >= 4
    positions = []
    for command in readme:
        assert command in run, f"README.md runs a command the walkthrough does not: {command}"
        positions.append(run.index(command))
    assert positions == sorted(positions), "README.md's paper-scale steps are in another order than the walkthrough's"


def test_the_substitutions_are_the_flags_the_dry_run_table_names():
    walkthrough = WALKTHROUGH.read_text(encoding="utf-8")
    table = walkthrough[walkthrough.index(DRY_RUN_HEADING):walkthrough.index("## 1. ")]
    subs = {**{key: f"<{key}>" for key in PLACEHOLDERS}, "model": "<model>", "cpu_route": "configs/train/cpu.yaml"}
    for flag in ("--config configs/train/cpu.yaml", "--model.model_path", "--trainer.max_steps 2", "--device cpu",
                 "--limit 4", "--max_new_tokens_propose 16", "--max_new_tokens_answer 16", *PLACEHOLDERS.values(),
                 "--model loopback-judge", "cader.dev.judge_double", "--device cuda", "verifier=DIR",
                 "max_new_tokens_propose=16,max_new_tokens_answer=16", "--base_url URL --model loopback-judge",
                 "export ANTHROPIC_API_KEY=..."):
        assert flag in table, f"the dry-run table does not name {flag!r}"
    train = substitute("python train/sft.py --config configs/train/cot_mix.yaml --data.release_root "
                       "/data/LongVT-Parquet --model.lora_r 64", subs)
    assert shlex.split(train)[1:] == [
        "train/sft.py", "--config", "configs/train/cot_mix.yaml", "--config", "configs/train/cpu.yaml",
        "--data.release_root", "<release_root>", "--model.lora_r", "64", "--model.model_path", "<model>",
        "--trainer.max_steps", "2"]
    judge = substitute("python evaluate/judge.py --questions /data/benchmarks/agentvidbench/questions.jsonl "
                       "--base_url http://HOST:8000/v1 --model NAME", subs)
    assert shlex.split(judge)[2:] == ["--questions", "<data_root>/agentvidbench/questions.jsonl",
                                      "--base_url", "<judge_url>", "--model", "<judge_model>"]
    paper_judge = substitute("python evaluate/judge.py --config configs/judge/default.yaml --out runs/judge", subs)
    assert shlex.split(paper_judge)[-4:] == ["--base_url", "<judge_url>", "--model", "<judge_model>"]
    assert substitute("export ANTHROPIC_API_KEY=...", {**subs, "api_key": "dummy"}) == "export ANTHROPIC_API_KEY=dummy"
    lmms = substitute("HF_HOME=$PWD ../../.venv-lmms/bin/lmms-eval eval --model cader --device cuda --model_args "
                      "model=../sft/export,verifier=Qwen/Qwen3-VL-4B-Instruct,dtype=bf16", subs)
    # $PWD as written, for bash to expand; the last --device wins in lmms-eval's parser
    assert shlex.split(lmms) == [
        "HF_HOME=$PWD", "../../.venv-lmms/bin/lmms-eval", "eval", "--model", "cader", "--device", "cuda",
        "--model_args", ("model=../sft/export,verifier=<verifier>,dtype=bf16,max_new_tokens_propose=16,"
                         "max_new_tokens_answer=16"), "--device", "cpu", "--limit", "4"]
    assert lmms.startswith("HF_HOME=$PWD ")   # unquoted: bash expands it


def test_an_ellipsis_takes_the_flags_of_the_blocks_first_command_of_that_program():
    lines = expand_ellipsis(["python evaluate/run.py --config c --out a", "python evaluate/run.py ... --out b",
                             "cader compare a b"])
    assert lines[1] == "python evaluate/run.py --config c --out a --out b" and lines[2] == "cader compare a b"


# ---- the walkthrough, run ----

def start_judge_double(folder: Path) -> tuple[subprocess.Popen, str]:
    url_file = folder / "judge_url.txt"
    server = subprocess.Popen([sys.executable, "-m", "cader.dev.judge_double", "--url_file", str(url_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (url_file.is_file() and url_file.read_text().strip()):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail("the loopback judge did not start")
        time.sleep(0.1)
    return server, url_file.read_text().strip()


def needs_lmms_eval(body: str) -> bool:
    return ".venv-lmms/" in body


@pytest.mark.slow
def test_the_walkthrough_runs_as_written_on_a_cpu(tiny_model_dir, tmp_path):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from cader.evaluate.judge.providers import LOOPBACK_MODEL

    data = tmp_path / "data"
    make_synthetic_data(data, counts=Counts(n_train=8, n_images=4, n_tool=1, n_eval=4, n_heldout=4, n_test=4))
    work = tmp_path / "work"
    work.mkdir()
    # the docs' paths, from the repo root; lmms-eval's side environment where scripts/install.sh puts it (CI has it)
    lmms_eval = (REPO / ".venv-lmms" / "bin" / "lmms-eval").is_file()
    linked = ("configs", "train", "evaluate", "calibrate", "scripts") + ((".venv-lmms",) if lmms_eval else ())
    for folder in linked:
        (work / folder).symlink_to(REPO / folder)
    model = str(tiny_model_dir)
    server, url = start_judge_double(tmp_path)
    subs = {"release_root": str(data / "train"), "media_root": str(data / "train"), "data_root": str(data / "eval"),
            "verifier": model, "model": model, "judge_url": url, "judge_model": LOOPBACK_MODEL,
            "cpu_route": "configs/train/cpu.yaml", "api_key": "sk-ant-dry-run"}
    blocks = [(marker, body) for marker, body in marked_blocks(WALKTHROUGH.read_text(encoding="utf-8"))
              if lmms_eval or not needs_lmms_eval(body)]
    script = dry_run_script(blocks, subs)
    (tmp_path / "walkthrough.sh").write_text(script)
    # as a user's shell would be: without the rank variables an earlier in-process Lightning run of this session
    # left in os.environ (its MASTER_PORT may still be bound), and without a real key of the environment
    env = {**_clean_environ(), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HF_HOME"):
        env.pop(name, None)
    try:
        done = subprocess.run(["bash", str(tmp_path / "walkthrough.sh")], cwd=work, env=env, capture_output=True,
                              text=True, timeout=3600, check=False)
    finally:
        server.terminate()
        server.wait()
    log = done.stdout + done.stderr
    (tmp_path / "walkthrough.log").write_text(log)
    assert done.returncode == 0, f"the walkthrough stopped ({tmp_path / 'walkthrough.log'}):\n{log[-6000:]}"
    assert "Traceback" not in log
    runs = work / "runs"
    # step 1's export is what steps 2-3 loaded; every file of a run under its own root
    for root in ("sft", "sft_lora"):
        assert (runs / root / "export" / "config.json").is_file()
        assert (runs / root / "checkpoints" / "last.ckpt").exists()
        assert list((runs / root / "logs").glob("version_*/config.yaml"))
        assert (runs / root / "data_report.json").is_file()
    lora_config = next((runs / "sft_lora" / "logs").glob("version_*/config.yaml")).read_text()
    assert "lora_r: 64" in lora_config
    assert all("lora_r: 0" in p.read_text() for p in (runs / "sft" / "logs").glob("version_*/config.yaml"))
    assert sorted(p.name for p in work.iterdir()) == sorted(
        ("data", "runs") + linked)   # data/: the recipe's frame cache, shared
    for out in ("heldout", "lvbench", "lvbench_no_rgr", "agentvidbench"):
        assert (runs / out / "predictions.jsonl").is_file() and (runs / out / "report.md").is_file()
    assert (runs / "calibration" / "calibration.json").is_file()
    assert "does not transfer" in (runs / "lvbench" / "report.md").read_text()
    # the paper's judge through the Messages API, the OpenAI-compatible one into its own folder
    for out, provider in (("judge", "anthropic"), ("judge_openai", "openai")):
        rows = [json.loads(line) for line in (runs / out / "judgments.jsonl").read_text().splitlines()]
        assert rows and all(r["error"] is None and r["judge_config"]["provider"] == provider for r in rows), out
        assert (runs / out / "judge_report.json").is_file()
    assert (runs / "view.html").is_file()
    assert any((runs / "lvbench_lmms").rglob("*.jsonl"))
    if not lmms_eval:
        pytest.skip(f"every block but lmms-eval's ran: {REPO / '.venv-lmms'} is missing "
                    "(bash scripts/install_lmms_eval.sh)")
    # lmms-eval ran CADER with step 1's export and step 2's calibration; compare paired it with step 2's Stage 1
    side = [json.loads(line) for line in (runs / "lmms" / "cader_lmms_records.jsonl").read_text().splitlines()]
    calibration = json.loads((runs / "calibration" / "calibration.json").read_text())
    assert len(side) == 4 and all(r["lmms"]["task"] == "videomme_long" and r["error"] is None for r in side)
    assert {(r["stage1"]["temperature"], r["stage1"]["tau"]) for r in side} == {
        (calibration["temperature"], calibration["tau"])}
    (samples,) = (runs / "lmms").glob("*/*_samples_videomme_long.jsonl")
    assert f"{samples.parent.name}: lmms-eval samples of videomme_long" in log
